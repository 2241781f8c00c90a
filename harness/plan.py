"""`stalebench run --dry-run`: what a run would do — the trials, the axes, and a cost estimate.

The estimate is steps × seconds per step ÷ parallel trials. Seconds per step come from this suite's own
finished steps when results exist (median `perf/step_s`), else from the measured default of the CPU
default model (benchmarks/README.md), else it is unknown. Evaluation time is not included.
"""
from __future__ import annotations

import os
import statistics
from pathlib import Path

from . import trialdir
from .suite import Suite, Trial, expand, select_trials, trial_count

# s per step of the CPU default, 16 prompts x 8 responses, one thread, by model.forward (benchmarks/README.md:
# hf measured on an idle machine; lean = hf's / 1.08, the median of four paired lean-vs-hf CPU-time ratios
# of benchmarks/train_throughput.py (1.04-1.15) on a loaded machine, where no idle figure could be taken)
TINY_STEP_S = {"hf": 0.084, "lean": 0.078}
TINY_RESPONSES = 16 * 8


def dry_run(suite: Suite, only: list[str], results_root: Path, trials: list[Trial] | None = None) -> str:
    trials = select_trials(expand(suite) if trials is None else trials, only)
    suite_dir = Path(results_root) / suite.name
    done = [t for t in trials if trialdir.read_status(suite_dir / t.trial_id).get("status") in trialdir.FINAL]
    lines = [f"suite {suite.name}: {len(trials)} trials ({trial_count(suite)} grid points x seeds before removing "
             f"duplicates), {len(done)} already finished"]
    for key, values in suite.grid.items():
        lines.append(f"  {key}: {', '.join(map(str, values))}")
    lines.append(f"  seeds: {', '.join(map(str, suite.seeds))}")
    shared = [t for t in trials if "stands_for" in t.params]
    skipped_eps = [t for t in trials if "eps" in t.params.get("ignored", []) and "stands_for" not in t.params]
    if shared:
        lines.append(f"  {len(shared)} shared on-policy trials (delay 0) stand for every estimator")
    if skipped_eps:
        lines.append(f"  {len(skipped_eps)} trials of estimators that ignore eps run once, not per eps value")
    for t in trials:
        lines.append(f"  {'done ' if t in done else 'run  '}{t.trial_id}")
    steps = sum(t.config.train.steps for t in trials if t not in done)
    step_s, source = _step_seconds(suite_dir, trials)
    processes = max(t.config.train.workers for t in trials)           # per trial (train.workers)
    parallel = suite.resources.parallel_trials(os.cpu_count() or 1, workers=processes)
    if step_s is None:
        lines.append(f"cost: {steps} steps to run; seconds per step unknown for this model (run a few steps first)")
    else:
        hours = steps * step_s / parallel / 3600
        lines.append(f"cost: {steps} steps x {step_s:.3f} s/step ({source}) / {parallel} parallel trials "
                     f"~ {hours * 60:.0f} min of training (evaluation not included)")
    return "\n".join(lines)


def _step_seconds(suite_dir: Path, trials) -> tuple[float | None, str]:
    measured = [r["perf/step_s"] for t in trials[:50]
                for r in trialdir.read_metrics(suite_dir / t.trial_id) if "perf/step_s" in r]
    if measured:
        return statistics.median(measured), f"median of {len(measured)} measured steps of this suite"
    if all(t.config.model.kind == "tiny" for t in trials):
        responses = statistics.mean(t.config.train.prompts_per_step * t.config.group_size for t in trials)
        forwards = sorted({t.config.model.forward for t in trials})
        step_s = statistics.mean(TINY_STEP_S[t.config.model.forward] * t.config.train.prompts_per_step
                                 * t.config.group_size / TINY_RESPONSES for t in trials)
        return (step_s, f"the tiny CPU model's measured s per {TINY_RESPONSES}-response step with the "
                        f"{' and '.join(forwards)} forward ({', '.join(str(TINY_STEP_S[f]) for f in forwards)}), "
                        f"scaled to this suite's {responses:.0f} responses per step")
    return None, ""
