"""The claims audit's page: reports/claims/index.html, one section per claim (a)-(f) of arXiv 2610.01896.

    python -m studies.claims_page          # reads the committed reports, writes reports/claims/

Every number is recomputed from committed files: the estimator lab's raw trials and fixed-policy sweeps
(reports/claims/lab/raw.tar.gz), the ε and G grids' raw trials (reports/claims/eps/, reports/claims/g4 ...
g32/, each raw.tar.gz) and the v2 tables' pair tests (reports/reference-v2*/results.json). The rules are
docs/claims.md's, as code: studies/lab_verdicts.py (`verdicts`: (b), (e) and the lab's illustrations for (a)
and (c)) and studies/claims_verdicts.py ((c), (d), (f)). Writes index.html, verdicts.json (every statistic
on the page) and claim (d)'s figures; a grid whose report is not committed yet is shown as "not run yet".
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
from pathlib import Path
from typing import Any, Iterator

import jinja2
import numpy as np
from matplotlib.figure import Figure

from harness.lab.families import CLIPPING, RESCALING, kinds
from harness.lab.report import eps_fits, moment_fits
from harness.lab.results import read_trials
from harness.lab.sweep_file import read_sweeps, suite_sweep_inputs
from harness.report.heatmaps import _heat
from harness.report.html import TEMPLATES
from harness.report.load import load_results
from harness.report.plotting import DPI, MIN_WIDTH_IN, estimator_style, fitted
from harness.store.archive import unpacked_archive
from harness.store.trialdir import read_object
from studies import claims_verdicts as cv
from studies.lab_verdicts import verdicts as lab_verdicts

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports"
G_SIZES = (4, 8, 16, 32)
TABLES = ("reference-v2", "reference-v2-field", "reference-v2-followup")
V3_TABLES = ("reference-v3", "reference-v3-bridge", "reference-v3-bases")
NOT_RUN = "not run yet"
LAB_VERDICT = {"consistent": "supported", "inconsistent": "not supported",       # studies/lab_verdicts.py's words
               "inconclusive": "inconclusive at this power", "not testable here": "not testable on this benchmark"}
CLAIMS = {  # the abstract's words, as issue 35 numbers them; the experiment that reads each
    "a": ("The convergence bound trades the estimator's second moment against its bias.",
          "Estimator lab, fixed-policy ε sweep (G 16, KL 0.5): log-log slopes of bias and root second moment "
          "against ε per kind. An illustration: the claim is about a proof."),
    "b": ("For trajectory-level IS estimators with a uniformly controlled second moment, delay enters through "
          "the bias of clipping or rescaling.",
          "Estimator lab, delayed SGD (260 trials): Spearman ρ between suboptimality and relative bias "
          "(against relative second moment) at each delay."),
    "c": ("GMC improves TIC's fourth-order delay term from O(ε⁻⁴) to O(ε⁻²) as ε → 0.",
          "Benchmark v2 at delay 32, ε ∈ {0.05, 0.1, 0.2, 0.4}, 6 seeds per cell: does a trajectory clipper "
          "lose more accuracy than the group rescaler as ε shrinks (D = S_clipper − S_rescaler, S = acc(0.4) − "
          "acc(0.05))? The exponents are not testable; the lab's bias-vs-ε slopes illustrate."),
    "d": ("Under local policy overlap, the delay-dependent term decreases as G^(−2/5) after tuning the step size.",
          "Benchmark v2 at delays 0 and 32, G ∈ {4, 8, 16, 32} at 128 responses per step, lr tuned per G and "
          "estimator, 6 seeds: gap(G) = on-policy − delay-32 accuracy, fit gap = c·G^p."),
    "e": ("For fixed behaviour and current policies, group rescaling's bias vanishes as G → ∞ while trajectory "
          "clipping's can persist.",
          "Estimator lab, fixed-policy G sweep (G 2-256 at KL 0.2, 0.5, 1.0): slope of bias against G per kind. "
          "The reading depends on the cap C = G(1+ε): it grows with G while a group's mean ratio Σr/G concentrates "
          "at E[r] = 1, so the cap binds less and less often and the rescaler's bias must vanish; a cap that did "
          "not grow with G (a fixed C) would bind ever more often. The claim is close to guaranteed by that choice."),
    "f": ("GMC-GRPO is best among stable baselines under large delays.",
          "The committed v2 tables at delay 32 (one update per batch, ε 0.2, G 16, 13-token responses), and the "
          "ε grid's cells at ε 0.2 as a pre-registered replication."),
}


FIGURES = {  # claim -> (file relative to reports/claims/, caption); a file not committed is left out
    "a": [("lab/lab_bias_vs_eps.png", "Lab: bias against plain trajectory IS, and each kind's weight distortion, "
                                      "against ε (G 16, KL 0.5), ±1.96 Monte Carlo SE")],
    "b": [("lab/lab_bias_vs_outcome.png", "Lab, delay > 0: relative bias and relative second moment against "
                                          "suboptimality, one point per trial"),
          ("lab/lab_convergence.png", "Lab: suboptimality against delay, and learning curves at the largest delay")],
    "c": [("eps/heatmap_delay_eps.png", "Benchmark v2: final held-out accuracy over delay × ε per estimator (IQM "
                                        "over 6 seeds; the on-policy row first)"),
          ("lab/lab_bias_vs_eps.png", "Lab illustration: bias against ε per kind")],
    "d": [("gap_vs_g.png", "Benchmark v2: gap = on-policy − delay-32 accuracy (means over 6 seeds, ±1.96 SE) "
                           "against G, each kind's fit c·G^p, and the claimed rate G^(−2/5) through the rescaler's "
                           "fit at the smallest G"),
          ("heatmap_delay_g.png", "Benchmark v2: final held-out accuracy, mean ± SD over 6 seeds, on-policy row "
                                  "first, delay-32 rows per estimator, over G (each estimator's lr tuned per G)")],
    "e": [("lab/lab_bias_vs_g.png", "Lab: bias against plain trajectory IS against G at KL 0.2, 0.5, 1.0, ±1.96 "
                                    "Monte Carlo SE, with each fit")],
    "f": [(f"../{TABLES[-1]}/final_accuracy_intervals.png", "The follow-up table (v2, delay 32, 8 new seeds): final "
                                                            "accuracy per estimator, IQM with its 95% CI")],
}


@contextlib.contextmanager
def opened(report: Path) -> Iterator[Path | None]:
    """A committed report's raw trials as a results directory (None when the report is not committed)."""
    if not (report / "raw.tar.gz").is_file():
        yield None
        return
    with unpacked_archive(report / "raw.tar.gz") as path:
        yield path


def _ci(fit: dict[str, Any], digits: int = 2) -> str:
    if not math.isfinite(fit.get("slope", fit.get("p", math.nan))):
        return "not fitted"
    p = fit.get("p", fit.get("slope"))
    return f"{p:+.{digits}f} [{fit['lo']:+.{digits}f}, {fit['hi']:+.{digits}f}]"


def lab_claims(lab: Path) -> dict[str, dict[str, Any]]:
    """(a), (b), (e) and (c)'s illustration from the lab's raw trials and sweeps."""
    with opened(lab) as path:
        if path is None:
            return {k: {"verdict": NOT_RUN, "statistic": ""} for k in "abe"}
        data, why = read_sweeps(path, suite_sweep_inputs(path))
        rows = {r["claim"].split(".")[0]: r for r in lab_verdicts(data, read_trials(path))}
    if data is None:
        raise SystemExit(f"{lab}/raw.tar.gz: its fixed-policy sweeps are {why}; pack the lab report with --raw")
    by_kind = kinds(data)
    bias, moment = eps_fits(data), moment_fits(data["by_eps"], "eps")
    slopes = [{"kind": k, "estimator": n, "bias": bias[n], "root_m2": next(v for (_, m), v in moment.items() if m == n)}
              for k in (RESCALING, CLIPPING) for n in by_kind[k] if n in bias]
    eps_text = "; ".join(f"{s['estimator']} ({s['kind']}): bias {_ci(s['bias'])}, √m2 {_ci(s['root_m2'])}"
                         for s in slopes)
    return {
        "a": {"verdict": "not testable on this benchmark", "statistic": f"slopes against ε, 95% CI: {eps_text}",
              "slopes": slopes},
        "b": {"verdict": LAB_VERDICT[rows["1"]["verdict"]], "statistic": rows["1"]["numbers"].split("p-values: ")[-1],
              "detail": rows["1"]["numbers"], "rule": rows["1"]["rule"], "per_delay": _b_per_delay(rows["1"]["per_delay"])},
        "c_lab": {"verdict": LAB_VERDICT[rows["2"]["verdict"]], "statistic": eps_text, "detail": rows["2"]["numbers"]},
        "e": {"verdict": LAB_VERDICT[rows["4"]["verdict"]], "statistic": rows["4"]["numbers"].split("Readings: ")[-1],
              "detail": rows["4"]["numbers"], "rule": rows["4"]["rule"]},
    }


def _b_per_delay(per: list[dict[str, Any]]) -> list[str]:
    """(b) per delay: ρ_bias with its p and, where p ≥ 0.05, the configurations that would reach 0.05."""
    out = []
    for d in per:
        ok = d["rho_bias"] > 0 and d["p_bias"] < 0.05 and d["rho_bias"] > d["rho_m2"]
        need = cv.configurations_for_rho(d["rho_bias"])
        tail = "" if ok else (f"; about {need} configurations (now {d['configurations']}) would bring it to p 0.05 "
                              "at this ρ (Fisher's z)" if need else "; no number of configurations at this ρ")
        out.append(f"delay {d['delay']:g}: ρ_bias {d['rho_bias']:.2f} (p {d['p_bias']:.2g}) against ρ_m2 "
                   f"{d['rho_m2']:.2f}: {'supported' if ok else 'inconclusive at this power'}{tail}")
    return out


def eps_claim(eps: Path) -> dict[str, Any]:
    with opened(eps) as path:
        if path is None:
            return {"verdict": NOT_RUN, "statistic": ""}
        res = load_results(path)
        readings = cv.eps_readings(res)
        seeds = min(v.size for v in cv.final_accuracies(res).values())
    (rescaler, r), = readings.items()                 # the grid holds one group rescaler
    conf = f"{100 * r['confidence']:.1f}%"
    text = "; ".join(f"D({c}) = {x['D']:+.3f} [{conf} CI {x['lo']:+.3f}, {x['hi']:+.3f}]"
                     for c, x in r["clippers"].items())
    need = [f"D({c}): {cv.seeds_to_resolve(seeds, (x['hi'] - x['lo']) / 2, x['D'])} seeds per cell (now {seeds})"
            for c, x in r["clippers"].items() if x["lo"] <= 0 <= x["hi"]]
    out = {"verdict": r["verdict"], "statistic": f"S({rescaler}) = {r['S_rescaler']:+.3f}; {text}", "reading": r}
    if need and r["verdict"].startswith("inconclusive"):
        out["resolve"] = ("at the observed D and spread, the interval would exclude 0 at " + "; ".join(need)
                          + " (about 50% power; 80% needs about twice as many)")
    return out


def g_claim(dirs: list[Path], out: Path) -> dict[str, Any]:
    readings = []
    for d in dirs:
        with opened(d) as path:
            if path is None:
                return {"verdict": NOT_RUN, "statistic": f"{d.name} is not committed yet"}
            readings.append(load_results(path))
    r = cv.g_readings(readings)
    fitted = {n: e for n, e in r["estimators"].items() if e["kind"]}
    rescaler = next(n for n, e in fitted.items() if e["kind"] == RESCALING)
    text = "; ".join(f"{n} ({e['kind']}): p = {_ci(e)}, gaps " + ", ".join(f"{g:+.3f}" for g in e["gap"])
                     for n, e in fitted.items())
    _g_figures(r, out)
    result = {"verdict": fitted[rescaler]["verdict"], "statistic": f"95% CI; {text} at G = {r['G']}", "reading": r}
    e, seeds = fitted[rescaler], min(len(v) for v in r["on_policy"])
    if e["verdict"].startswith("inconclusive") and math.isfinite(e["p"]):
        towards, theta = ("not supported", cv.RATE) if e["p"] > cv.RATE else ("supported", 0.0)
        half = e["p"] - e["lo"] if e["p"] > theta else e["hi"] - e["p"]
        result["resolve"] = (f"at the observed slope {e['p']:+.2f} and its spread, the CI would exclude {theta:g} "
                             f"(reading {towards}) at about {cv.seeds_to_resolve(seeds, half, e['p'], theta)} seeds "
                             f"per cell (now {seeds}; 50% power, 80% needs about twice as many)")
    return result


def _g_figures(r: dict[str, Any], out: Path) -> None:
    """gap_vs_g.png (gap per G with ±1.96 SE and each fit, the G^(−2/5) rate dashed) and heatmap_delay_g.png
    (mean final accuracy, on-policy row first, G across)."""
    names = list(r["estimators"])
    style = estimator_style(names, "grpo")
    G = np.asarray(r["G"], float)
    on = [np.asarray(v) for v in r["on_policy"]]
    fig = Figure(figsize=(MIN_WIDTH_IN, 3.6), dpi=DPI)
    ax = fig.add_subplot(1, 1, 1)
    for n, e in r["estimators"].items():
        ax.errorbar(G, e["gap"], 1.96 * np.asarray(e["gap_se"]), color=style[n].colour, marker=style[n].marker, capsize=3, ls="none",
                    label=f"{n}" + (f": p = {_ci(e)}" if e.get("kind") else " (neither kind: not fitted)"))
        if e.get("kind") and math.isfinite(e["p"]):
            grid = np.geomspace(G.min(), G.max(), 50)
            ax.plot(grid, e["c"] * grid ** e["p"], color=style[n].colour, lw=1)
            if e["kind"] == RESCALING:
                ax.plot(grid, e["c"] * G.min() ** e["p"] * (grid / G.min()) ** cv.RATE, color=style[n].colour,
                        ls="--", lw=1, label=f"G^(−2/5) through {n}'s fit at G = {G.min():g}")
    ax.axhline(0, color="0.6", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(G, [f"{g:g}" for g in G])
    ax.set_xlabel("group size G (128 responses per step)")
    ax.set_ylabel("on-policy − delay-32 accuracy")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.08, right=0.6, bottom=0.15, top=0.95)
    fig.savefig(out / "gap_vs_g.png")
    rows = ["on-policy (delay 0)"] + [f"{n} (delay 32)" for n in names]
    cells = [on] + [[np.asarray(v) for v in e["stale"]] for e in r["estimators"].values()]
    mean = np.array([[c.mean() for c in row] for row in cells])
    text = [[f"{c.mean():.3f}\n±{c.std(ddof=1):.3f}" for c in row] for row in cells]
    fig = Figure(figsize=(MIN_WIDTH_IN, 0.55 * len(rows) + 1.0), dpi=DPI)
    ax = fig.add_subplot(1, 1, 1)
    _heat(ax, mean, text, [f"G = {g:g}" for g in G], rows, "viridis", fitted(mean.ravel(), margin=0))
    ax.axhline(0.5, color="white", lw=3)                             # the on-policy row apart, as in the reports
    fig.subplots_adjust(left=0.22, right=0.98, bottom=0.08, top=0.95)
    fig.savefig(out / "heatmap_delay_g.png")


def f_claim(eps: Path) -> dict[str, Any]:
    tables = cv.table_reading([REPORTS / t for t in TABLES])
    against = [f"{p['table']}: {p['rescaler']} − {p['other']} = {p['diff']:+.3f} (p_Holm {p['p_holm']:.2g})"
               for p in tables["pairs"] if p["resolved"] and p["diff"] < 0]
    ahead = sum(p["resolved"] and p["diff"] > 0 for p in tables["pairs"])
    out = {"verdict": tables["verdict"], "reading": tables,
           "statistic": f"resolved above {ahead} of {len(tables['pairs'])} stable estimators; resolved below: "
                        + ("; ".join(against) or "none")}
    if (eps / "results.json").is_file():
        out["replication"] = rep = cv.table_reading([eps], slice_="ε=0.2")
        with opened(eps) as path:
            acc = cv.final_accuracies(load_results(path)) if path else {}
        tests = [t for t in (read_object(eps / "results.json")[0] or {}).get("pair_tests", []) if t["slice"] == "ε=0.2"]
        need = []
        for p in rep["pairs"]:
            if not p["resolved"]:
                x, y = (acc[(n, int(p["delay"]), 0.2)] for n in (p["rescaler"], p["other"]))
                lo, hi = cv.pair_seeds(x, y, len(tests))
                need.append(f"{p['rescaler']} − {p['other']}: {hi}–{lo} seeds per cell (now {min(x.size, y.size)})")
        if need and rep["verdict"].startswith("inconclusive"):
            rep["resolve"] = ("at the observed difference and SDs (Welch's SE), from Holm's last to its first "
                              f"threshold over the table's {len(tests)} pairs: " + "; ".join(need)
                              + " (50% power; 80% needs about twice as many)")
    if all((REPORTS / t / "results.json").is_file() for t in V3_TABLES):
        out["v3"] = cv.v3_table_reading([REPORTS / t for t in V3_TABLES])
    return out


def resolved_pairs(report: Path, label: str = "") -> list[str]:
    """The resolved pairs of a committed report at its largest delay, per slice: "slice: a > b (+diff, p_Holm)",
    each report's own exact permutation tests with Holm's correction (docs/report.md)."""
    if not (report / "results.json").is_file():
        return []
    data = read_object(report / "results.json")[0] or {}
    tests = [t for t in data.get("pair_tests", []) if t["delay"] == data.get("largest_delay")]
    return [f"{label or t['slice']}: {hi} > {lo} ({abs(t['mean_diff']):+.3f}, p_Holm {t['p_holm']:.2g})"
            for t in tests if t["resolved"]
            for hi, lo in [(t["a"], t["b"]) if t["mean_diff"] > 0 else (t["b"], t["a"])]] + \
        [f"{label or 'every slice'}: {sum(not t['resolved'] for t in tests)} of {len(tests)} pairs unresolved"]


def build(out: Path, lab: Path, eps: Path, g_dirs: list[Path]) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    lab_part = lab_claims(lab)
    c = eps_claim(eps)
    c["lab"] = lab_part.pop("c_lab")
    claims = {**lab_part, "c": c, "d": g_claim(g_dirs, out), "f": f_claim(eps)}
    claims["c"]["pairs"] = resolved_pairs(eps)
    claims["d"]["pairs"] = [p for d in g_dirs for p in resolved_pairs(d, f"G = {d.name[1:]}")]
    page = []
    for key in sorted(claims):
        words, experiment = CLAIMS[key]
        page.append({"key": key, "words": words, "experiment": experiment, "pairs": [], **claims[key],
                     "figures": [(f, caption) for f, caption in FIGURES[key] if (out / f).is_file()]})
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    html = env.from_string(PAGE).render(claims=page, css=(TEMPLATES / "style.css").read_text(encoding="utf-8"),
                                        reports=[d for d in ["lab", "eps", *(f"g{g}" for g in G_SIZES)]
                                                 if (out / d / "index.html").is_file()])
    (out / "index.html").write_text(html, encoding="utf-8")
    (out / "verdicts.json").write_text(json.dumps(claims, indent=1, default=_json, ensure_ascii=False) + "\n",
                                       encoding="utf-8")
    return claims


def _json(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")


PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>stalebench: the claims audit</title>
<style>{{ css }} .verdict { font-weight: 600; }</style></head><body>
<header><h1>The claims audit: one verdict per claim of GMC-GRPO (arXiv 2610.01896)</h1>
<p class="meta">Rules pre-registered in <a href="../../docs/claims.md">docs/claims.md</a> before the grids ran;
every number below is recomputed from the committed raw files by <code>python scripts/claims_page.py</code>.
Scope: benchmark v2 (a 0.5M-parameter Qwen3-architecture model on cumsum, CPU) and the estimator lab's synthetic
problem, not Qwen3 on reasoning benchmarks. Reports: {% for r in reports %}<a href="{{ r }}/index.html">{{ r }}</a>{{ ", " if not loop.last }}{% endfor %}.</p></header>
<main><h2>Claims</h2><div class="scroll"><table><thead><tr><th>claim</th><th>experiment</th><th>statistic [interval]</th>
<th>verdict</th></tr></thead><tbody>
{% for c in claims %}<tr><td><a href="#claim-{{ c.key }}">({{ c.key }})</a> {{ c.words }}</td><td class="wrap">{{ c.experiment }}</td>
<td class="wrap">{{ c.statistic }}</td><td class="verdict">{{ c.verdict }}</td></tr>
{% endfor %}</tbody></table></div>
{% for c in claims %}<h2 id="claim-{{ c.key }}">({{ c.key }}) {{ c.words }}</h2>
<p><b>Verdict: <span class="verdict">{{ c.verdict }}</span>.</b> {{ c.experiment }}</p>
<p>{{ c.detail if c.detail is defined else c.statistic }}</p>
{% if c.rule is defined %}<p class="hint">Rule: {{ c.rule }}</p>{% endif %}
{% if c.lab is defined %}<p class="hint">Lab illustration (verdict there: {{ c.lab.verdict }}): {{ c.lab.detail }}</p>{% endif %}
{% if c.replication is defined %}<p>Pre-registered replication, ε grid at ε 0.2: {{ c.replication.verdict }};
{% for p in c.replication.pairs %}{{ p.rescaler }} − {{ p.other }} = {{ "%+.3f"|format(p.diff) }} (p_Holm {{ "%.2g"|format(p.p_holm) }}{{ ", resolved" if p.resolved }}){{ "; " if not loop.last }}{% endfor %}.</p>{% endif %}
{% if c.resolve is defined %}<p class="hint">Seeds that would resolve it: {{ c.resolve }}</p>{% endif %}
{% if c.per_delay is defined %}<p>Per delay:</p><ul>{% for d in c.per_delay %}<li>{{ d }}</li>{% endfor %}</ul>{% endif %}
{% if c.replication is defined and c.replication.resolve is defined %}<p class="hint">Seeds that would resolve the replication: {{ c.replication.resolve }}</p>{% endif %}
{% if c.v3 is defined %}<p>On benchmark v3 (rule of 2026-12-06: testable only where the cap binds in at least {{ "%.0f"|format(100 * c.v3.threshold) }}% of groups at the largest delay): <b>{{ c.v3.verdict }}</b>.
Groups over the cap: {% for t, shares in c.v3.over_cap.items() %}{{ t }} {% for a, v in shares.items() %}{{ a }} {{ "%.1f"|format(100 * v) }}%{% endfor %}{{ "; " if not loop.last }}{% endfor %}.
As a comparison of a nearly uncapped gmc_grpo, not a verdict on (f): {% for p in c.v3.pairs %}{{ p.table }} {{ p.rescaler }} − {{ p.other }} = {{ "%+.3f"|format(p.diff) }} (p_Holm {{ "%.2g"|format(p.p_holm) }}{{ ", resolved" if p.resolved }}){{ "; " if not loop.last }}{% endfor %}.</p>{% endif %}
{% if c.pairs %}<p>Resolved pairs at delay 32 (each report's exact permutation tests, Holm within the report):</p>
<ul>{% for p in c.pairs %}<li>{{ p }}</li>{% endfor %}</ul>{% endif %}
{% for f, caption in c.figures %}<figure><img src="{{ f }}" alt="{{ f }}"><figcaption>{{ caption }} ({{ f }})</figcaption></figure>{% endfor %}
{% endfor %}</main></body></html>
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPORTS / "claims")
    args = ap.parse_args(argv)
    claims = build(args.out, args.out / "lab", args.out / "eps", [args.out / f"g{g}" for g in G_SIZES])
    for key, c in sorted(claims.items()):
        print(f"({key}) {c['verdict']}: {c['statistic']}")


if __name__ == "__main__":
    main()
