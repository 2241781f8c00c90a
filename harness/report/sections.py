"""Extra report sections: a registry of sources, each adding sections to a suite's report.

Built in: the trajectory regime of the suite's baseline and the kept policies' benchmark table (below); the
estimator lab registers its sections from harness/lab/report.py; a study above harness registers its own
through its composition root (studies/builtins.py). A section source is a function
`(SuiteResults, out_dir) -> [Section]`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness.registry import SECTIONS
from harness.report.load import REGIME_KEYS, SuiteResults
from harness.report.render import show
from harness.store import trialdir


@dataclass(frozen=True)
class Section:
    """An extra report section: a title and blocks, each {"text": str}, {"figure": file in out_dir,
    "caption": str} or {"table": {"columns": [str], "rows": [{column: str}]}}. The report's templates
    render them like the rest of the page (every string escaped; tables sortable)."""

    title: str
    blocks: list[dict[str, Any]] = field(default_factory=list)


class SectionSource(Protocol):
    """Sections of one kind for a suite's report: read from the stored files (never computed), figures
    written straight into `out_dir`; [] when the suite has none."""

    def __call__(self, res: SuiteResults, out_dir: Path) -> list[Section]: ...


def report_sections(res: SuiteResults, out_dir: Path) -> list[Section]:
    """Every registered source's sections, in registration order (after the report's own)."""
    return [section for _, source in SECTIONS for section in source(res, out_dir)]


@SECTIONS.register("regime")
def regime_sections(res: SuiteResults, out_dir: Path) -> list[Section]:
    """How heavy-tailed staleness makes the trajectory weights, on the suite's baseline estimator (the common
    baseline, never the ranking) at each delay: per trial the mean over the second half of its steps of the
    regime metrics (harness/trial/metrics.py trajectory_regime), then the mean over its seeds (min..max)."""
    m = res.metrics
    if m.empty or any(k not in m.columns for k in REGIME_KEYS):
        return []
    baseline = res.settings.baseline
    trials = res.trials[(res.trials["algorithm"].astype(str) == baseline) & res.trials["delay"].notna()]
    m = m[m["trial_id"].isin(set(trials["trial_id"])) & m[REGIME_KEYS[1]].notna()]
    if m.empty:
        return []
    late = m[m["step"] > m.groupby("trial_id")["step"].transform("max") / 2]
    per_trial = late.groupby("trial_id")[list(REGIME_KEYS)].mean().join(trials.set_index("trial_id")["delay"])
    columns = ["delay", "trials", *(_REGIME_NAMES[k] for k in REGIME_KEYS)]
    rows = []
    for delay, g in per_trial.groupby("delay"):
        rows.append(dict(zip(columns, [show(delay), str(len(g)), *(
            f"{g[k].mean():.3g}" + (f" ({g[k].min():.3g}..{g[k].max():.3g})" if len(g) > 1 else "")
            for k in REGIME_KEYS)])))
    text = (f"The trajectory regime of {baseline} (the report's baseline) at each delay: per trial the mean over "
            f"the second half of its updates, then the mean over its trials (min..max). Λ_i is a response's "
            f"summed log-ratio to the behaviour policy, r_i = exp(Λ_i); 'over G(1+ε)' is the share of prompt "
            f"groups whose ratio mass exceeds G(1+ε), the groups a group mass cap at that level rescales. "
            f"Benchmark v3 accepted a design when, at its largest delay, the median |Λ| is at least 1.5 nats and "
            f"at least 40% of groups are over G(1+ε); for ratios of mean one that share peaks near 24%, so the "
            f"rule was replaced by quantities that can move, measured per cell at its own step size (\"Each "
            f"cell's regime\" above; docs/benchmark-v3.md, amendment of 2026-12-06); benchmark v2's grpo at delay "
            f"32: 0.47 nats and 14% (quickstart-v2's two seeds).")
    return [Section("Trajectory regime", [{"text": text}, {"table": {"columns": columns, "rows": rows}}])]


_REGIME_NAMES = {"policy/kl_behavior": "per-token KL to π_b", "is/traj_abs_log_ratio_q50": "median |Λ|",
                 "is/traj_abs_log_ratio_q90": "q90 |Λ|", "is/traj_abs_log_ratio_max": "max |Λ|",
                 "is/traj_ess_frac": "trajectory ESS / B", "is/group_over_cap_frac": "groups over G(1+ε)"}


@SECTIONS.register("benchmarks")
def benchmark_sections(res: SuiteResults, out_dir: Path) -> list[Section]:
    """The per-benchmark table of the trials whose kept policy was evaluated (`stalebench eval --trial`
    wrote <trial>/benchmarks/results.json): one row per trial, one column per benchmark, accuracy ±
    standard error (problems)."""
    rows = []
    for r in res.trials.to_dict("records"):
        scores = trialdir.read_benchmarks(res.path / str(r["trial_id"]))
        if scores and isinstance(scores.get("benchmarks"), dict):
            rows.append((r, scores["benchmarks"]))
    if not rows:
        return []
    names = sorted({b for _, scores in rows for b in scores})

    def cell(score: Any) -> str:
        if not isinstance(score, dict) or not isinstance(score.get("acc"), (int, float)):
            return "—"
        err = score.get("acc_stderr")
        return f"{score['acc']:.3f}" + (f" ± {err:.3f}" if isinstance(err, (int, float)) else "") + f" ({score.get('n')})"

    columns = ["trial", "algorithm", "delay", "seed", *names]
    table = [dict(zip(columns, [str(r["trial_id"]), str(r.get("algorithm", "")), show(r.get("delay")),
                                show(r.get("seed")), *(cell(scores.get(b)) for b in names)])) for r, scores in rows]
    text = ("Kept policies (train.save) evaluated with `stalebench eval --trial`: lm-eval on the local benchmark "
            "files, greedy, zero-shot; accuracy ± its standard error (problems).")
    return [Section("Benchmark evaluation", [{"text": text}, {"table": {"columns": columns, "rows": table}}])]
