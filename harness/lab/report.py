"""The estimator-lab section of a suite report: figures and fitted slopes.

    sections = lab_sections(Path("results/estimator-lab"), Path("reports/estimator-lab"))
    # -> [(title, blocks), ...]; a block is {"text": str}, {"figure": file, "caption": str} or
    #    {"table": {"columns": [...], "rows": [{column: text}]}}; images are written into out_dir

The report's templates render the blocks (harness/report/html.py), escaping every string. Returns [] for
a suite whose base config has no `lab:` section. Two data sources, both read, never computed here:
1. The suite's trials (delayed-SGD dynamics, one final measurement each; harness/lab/dynamics.py).
2. Fixed-policy sweeps over G, ε and divergence (harness/lab/sweeps.py). They are not suite trials:
   `stalebench run` computes them after the suite's trials (31 s measured for the suite's config on a
   loaded 2-core machine) and stores them in <results_dir>/lab/sweeps.json, keyed by their inputs
   (harness/lab/sweep_file.py). When the file is missing or was computed for other inputs, the section
   says so in one line with the command that computes them. No torch: rendering reads JSON.

Slopes are read per kind of trajectory weight (group rescaling, trajectory clipping: harness/lab/families.py,
from the registry family stored with the sweeps), so every estimator of a kind, a plugin's included, is
shown alike; no estimator is named here. What the numbers say about a paper's claims is a study's to judge:
studies/lab_verdicts.py registers the verdict section after this one.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from harness.store import trialdir
from harness.config.suite import read_suite_yaml
from harness.lab import plots as figures
from harness.lab.families import kind_label
from harness.lab.results import bias_ci, distinct, fit_power, read_trials
from harness.lab.sweep_file import SWEEP_FILE, read_sweeps, suite_sweep_inputs
from harness.report.load import SuiteResults
from harness.registry import SECTIONS
from harness.report.sections import Section


# ----------------------------------------------------------------------------------------------
# Fits and how they may be read
# ----------------------------------------------------------------------------------------------

def _fit(rows: list[dict[str, Any]], key: str, x_min: float = 0.0) -> dict[str, Any]:
    """fit_power of bias = c·x^p from the rows' signed squared bias estimates (every point, weighted)."""
    return fit_power([r[key] for r in rows], [r["bias_tis_sq"] for r in rows], [r["bias_tis_sq_se"] for r in rows],
                     x_min=x_min)


def g_fits(data: dict[str, Any]) -> dict[tuple[float, str], dict[str, Any]]:
    """(kl, estimator) -> fit_power of the bias vs plain trajectory IS against G, G ≥ fit_min_g."""
    out = {}
    for kl in sorted({r["kl"] for r in data["by_g"]}):
        for name in sorted({r["estimator"] for r in data["by_g"]}):
            rows = [r for r in data["by_g"] if r["kl"] == kl and r["estimator"] == name]
            out[(kl, name)] = _fit(rows, "G", data["config"]["fit_min_g"])
    return out


def eps_fits(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: _fit([r for r in data["by_eps"] if r["estimator"] == name], "eps")
            for name in sorted({r["estimator"] for r in data["by_eps"]})}


def moment_fits(rows: list[dict[str, Any]], key: str, x_min: float = 0.0) -> dict[tuple[float, str], dict[str, Any]]:
    """(kl, estimator) -> fit_power of the root second moment √E‖ĝ‖² = c·x^p against `key` ("G" or "eps"),
    from the second-moment estimates and their SEs (E‖ĝ‖² is the fitted square, as the bias² is for bias)."""
    out = {}
    for kl, name in sorted({(r["kl"], r["estimator"]) for r in rows}):
        sel = [r for r in rows if r["kl"] == kl and r["estimator"] == name]
        out[(kl, name)] = fit_power([r[key] for r in sel], [r["second_moment"] for r in sel],
                                    [r["second_moment_se"] for r in sel], x_min=x_min)
    return out


def fit_reading(fit: dict[str, Any]) -> str:
    """How a slope may be read: an exponent, a direction only, or nothing (results.fit_power's `kind`)."""
    if fit["kind"] == "exponent":
        return "exponent"
    if fit["kind"] == "directional":
        return f"directional ({fit['direction']}; CI too wide for an exponent)"
    return "undetermined (CI includes 0 and is too wide)" if math.isfinite(fit["slope"]) else "not fitted"


def span(xs: list[float]) -> str:
    """The values a fit used, as a set: {4, 8, 16}."""
    return f"{{{', '.join(f'{x:g}' for x in xs)}}}"


def short_slope(fit: dict[str, Any] | None) -> str:
    """A fitted slope with its 95% CI and how it may be read: "-0.52 [-0.61, -0.43] (exponent)"."""
    if not fit or not math.isfinite(fit["slope"]):
        return "not fitted"
    return f"{fit['slope']:.2f} [{fit['lo']:.2f}, {fit['hi']:.2f}] ({fit_reading(fit)})"


def _per_g_rows(by_g: list[dict[str, Any]]) -> tuple[list[dict[str, str]], list[str]]:
    """One row per (KL, estimator): the bias at each G with its 95% CI and Monte Carlo size."""
    sizes = sorted({int(r["G"]) for r in by_g})
    rows = []
    for kl, name in sorted({(r["kl"], r["estimator"]) for r in by_g}):
        row = {"KL": f"{kl:g}", "estimator": name}
        for r in by_g:
            if r["kl"] == kl and r["estimator"] == name:
                lo, hi = bias_ci(r["bias_tis_sq"], r["bias_tis_sq_se"])
                row[f"G={int(r['G'])}"] = f"{r['bias_tis']:.2g} [{lo:.2g}, {hi:.2g}] ({int(r['n_groups'])})"
        rows.append(row)
    return rows, ["KL", "estimator"] + [f"G={g}" for g in sizes]


# ----------------------------------------------------------------------------------------------
# Blocks (rendered by the report's templates)
# ----------------------------------------------------------------------------------------------

Block = dict[str, Any]


def _text(text: str) -> Block:
    return {"text": text}


def _figure(file: str, caption: str) -> Block:
    return {"figure": file, "caption": caption}


def table(rows: list[dict[str, str]], cols: list[str]) -> Block:
    """A table block of `rows` under the columns `cols` (a missing cell is empty)."""
    return {"table": {"columns": cols, "rows": [{c: str(r.get(c, "")) for c in cols} for r in rows]}}


@SECTIONS.register("lab")
def lab_report_sections(res: SuiteResults, out_dir: Path) -> list[Section]:
    """The estimator lab's sections of a suite's report."""
    return [Section(title, blocks) for title, blocks in lab_sections(res.path, out_dir)]


def lab_sections(results_dir: Path, out_dir: Path) -> list[tuple[str, list[Block]]]:
    """(title, blocks) pairs of the estimator-lab section; [] for a non-lab suite."""
    results_dir, out_dir = Path(results_dir), Path(out_dir)
    inputs = suite_sweep_inputs(results_dir)
    if inputs is None:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    trials = read_trials(results_dir)
    done = distinct([t for t in trials if t.status in trialdir.FINAL and t.acc.size])
    data, why = read_sweeps(results_dir, inputs)
    baseline = read_suite_yaml(trialdir.suite_file(results_dir)).report.baseline
    styles = figures.suite_styles([*inputs["algorithms"], *(t.algorithm for t in trials)], baseline)
    sections = _sweep_sections(data, out_dir, styles) if data is not None else [(
        "Estimator lab: fixed-policy sweeps",
        [_text(f"No fixed-policy sweeps to show: {results_dir / SWEEP_FILE} is {why}; compute them with "
               f"`stalebench run {results_dir}` (finished trials are not rerun), then render the report again.")])]
    if done:
        intro = f"{len(done)} finished trials, pooled over the other grid keys; ±1 SE over trials."
        sections.append(("Estimator lab: convergence vs delay", [
            _text(intro),
            _figure(figures.convergence(done, out_dir, styles), "Suboptimality vs delay, and mean learning curves at the "
                                                        "largest delay"),
            _figure(figures.bias_vs_outcome(done, out_dir, styles),
                    "Trials with delay > 0: relative bias and relative second moment (Monte Carlo estimates) on "
                    "the delay's pair (θ_0, θ_0 + d expected SGD steps) vs suboptimality")]))
    return sections


SLOPE_COLUMNS = ["kind", "estimator", "against", "KL", "bias: p [95% CI] (reading)", "√second moment: p [95% CI] (reading)",
                 "points"]


def slope_rows(data: dict[str, Any]) -> list[dict[str, str]]:
    """One row per (estimator, sweep, divergence): the bias and root-second-moment slopes, kind first."""
    cfg = data["config"]
    rows = []
    for against, key, sweep, bias in (("G", "G", data["by_g"], g_fits(data)),
                                      ("ε", "eps", data["by_eps"], {(cfg["kl"], n): f for n, f in eps_fits(data).items()})):
        m2 = moment_fits(sweep, key, cfg["fit_min_g"] if key == "G" else 0.0)
        for (kl, name), f in sorted(bias.items(), key=lambda kv: (kind_label(data, kv[0][1]), kv[0][1], kv[0][0])):
            rows.append({"kind": kind_label(data, name), "estimator": name, "against": against, "KL": f"{kl:g}",
                         "bias: p [95% CI] (reading)": short_slope(f),
                         "√second moment: p [95% CI] (reading)": short_slope(m2.get((kl, name))), "points": span(f["x_used"])})
    return rows


def _sweep_sections(data: dict[str, Any], out_dir: Path, styles: figures.Styles) -> list[tuple[str, list[Block]]]:
    cfg = data["config"]
    setup = (f"Fixed pair: the suite's problem (V = {cfg['vocab']}, L = {cfg['length']}, {cfg['reward']} rewards, "
             f"J(θ_0) = {cfg['J0']:.3f}); π_θ = θ_0, π_b = θ_0 perturbed to the stated KL(π_b‖π_θ). The pair's "
             f"J, ∇J, KL, χ² and the target g* are exact (enumeration); every bias, second moment and cosine "
             f"is a Monte Carlo estimate over {cfg['sweep_groups']} groups (G and ε sweeps: ×4 while the "
             f"SE exceeds a third of the bias, up to {cfg['sweep_max_groups']}; the count is in brackets "
             f"below), in draws of {cfg['batch_groups']} groups (one optimizer step's batch), advantage "
             f"'{cfg['adv_mode']}', aggregation '{cfg['aggregation']}'; computed in {cfg['seconds']} s. Bias is "
             f"‖E[ĝ − ĝ_trajIS]‖ on paired groups (plain trajectory IS: tic_is at ε = 1e12), de-noised, with "
             f"95% CIs from its unbiased squared estimate. Slopes: bias = c·G^p fitted by weighted nonlinear "
             f"least squares to the squared estimates of every point with G ≥ {cfg['fit_min_g']} (none is "
             f"dropped for being small); a slope is read as an exponent only when its 95% CI is at most "
             f"0.5 wide, otherwise as a direction or not at all.")
    fit_rows = slope_rows(data)
    per_g, per_g_cols = _per_g_rows(data["by_g"])
    return [
        ("Estimator lab: bias vs group size", [
            _text(setup),
            _figure(figures.bias_vs_g(data["by_g"], g_fits(data), out_dir, styles),
                    "Monte Carlo bias against plain trajectory IS vs G (95% CIs), log-log, per divergence, with "
                    "the weighted power-law fit"),
            _text("Log-log slopes per estimator, grouped by kind (registry family: group-cap = group rescaling, "
                  "sequence-is = trajectory clipping): p of bias = c·x^p and of the root second moment "
                  "√E‖ĝ‖² = c·x^p against G (at ε = the suite's) and against ε (at the ε sweep's G and KL), "
                  "with 95% CIs and how each may be read."),
            table(fit_rows, SLOPE_COLUMNS),
            _text("Bias per G: estimate [95% CI] (Monte Carlo groups)."),
            table(per_g, per_g_cols)]),
        ("Estimator lab: bias vs ε and the δ_rescale ≤ δ_clip check", [
            _figure(figures.bias_vs_eps(data["by_eps"], data["delta"], out_dir, styles),
                    f"G = {cfg['sweep_group_size']}, KL = {cfg['kl']:g}: Monte Carlo bias vs ε, 95% CIs (left); "
                    f"mean per-group distortion max_i |1 − w_i/r_i| of GMC and trajectory clipping (right)")]),
        ("Estimator lab: bias and second moment vs divergence", [
            _figure(figures.bias_vs_kl(data["by_kl"], out_dir, styles),
                    f"All estimators at G = {cfg['sweep_group_size']}, ε = {cfg['eps']:g}, Monte Carlo over "
                    f"{cfg['sweep_groups']} groups (±1 SE): bias against the exact target g* = κ∇J, second "
                    f"moment, and cosine of the mean gradient with ∇J")]),
    ]
