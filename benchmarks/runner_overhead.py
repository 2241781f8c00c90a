"""What the suite runner costs: a suite through `run_suite` (Ray Tune + MLflow) against its trials run alone.

Three runs of the same trials, each into a fresh temp directory:
  alone         run_trial per trial, one after another in this process (no Ray, no MLflow mirror):
                one trainer's steps/s alone
  run_suite ×1  resources.max_concurrent = 1
  run_suite ×2  max_concurrent = 2 (the default on 2 cores: one trial per core)

and from them, as defined in benchmarks/README.md ("Suite runner"):
  efficiency      suite steps/s ÷ (workers × one trainer's steps/s alone)     target ≥ 0.90 at ×2
  runner overhead (suite wall × workers − Σ trials' own time) ÷ (suite wall × workers)   target < 3%,
                  a trial's own time being that of run_trial in its worker (status.json's started_at to
                  updated_at: model load, training, evaluation and the MLflow mirror)
  speed-up        wall ×1 ÷ wall ×2                                           target ≥ 1.8

Wall times depend on what else runs on the machine; run it on an otherwise idle one (the load average
is printed).

    python benchmarks/runner_overhead.py                          # suites/quickstart.yaml as it is (~17 min)
    python benchmarks/runner_overhead.py --trials 4 --steps 50    # the first 4 trials, 50 steps each
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from harness.config.dicts import set_dotted
from harness.store.trialdir import read_status
from harness.config.expand import Suite, expand, load_suite_file


def shrink(suite: Suite, trials: int | None, steps: int | None, concurrent: int) -> Suite:
    """The suite with `train.steps` set and its trials cut to at most `trials` (seeds first, then the
    last value of the first grid axis that has several), running `concurrent` trials at a time."""
    base = set_dotted(dict(suite.base), "train.steps", steps) if steps else suite.base
    out = dataclasses.replace(suite, base=base, source="",
                              resources=dataclasses.replace(suite.resources, max_concurrent=concurrent))
    while trials and len(expand(out)) > trials:
        if len(out.seeds) > 1:
            out = dataclasses.replace(out, seeds=out.seeds[:-1])
            continue
        axis = next((k for k in out.grid if len(out.grid[k]) > 1), None)
        if axis is None:
            break
        out = dataclasses.replace(out, grid={**out.grid, axis: out.grid[axis][:-1]})
    return out


def alone(suite: Suite, root: Path) -> float:
    """Σ wall seconds of the trials run one after another in this process."""
    import torch

    import harness.trial.trainer  # noqa: F401 — imported before the clock starts, as a Ray worker does once
    from harness.trial.lifecycle import run_trial

    threads = torch.get_num_threads()
    total = 0.0
    for trial in expand(suite):
        torch.set_num_threads(trial.config.train.threads)
        start = time.perf_counter()
        run_trial(trial, root / suite.name)
        total += time.perf_counter() - start
    torch.set_num_threads(threads)
    return total


def through_runner(suite: Suite, root: Path) -> tuple[float, float]:
    """(wall seconds of run_suite, Σ the trials' own seconds: from the start of run_trial in its worker
    to its final status, as status.json records them)."""
    from harness.suite.runner import run_suite

    start = time.perf_counter()
    counts = run_suite(suite, results_root=root, progress=False)
    wall = time.perf_counter() - start
    if counts.get("completed", 0) + counts.get("diverged", 0) != len(expand(suite)):
        raise SystemExit(f"run_suite did not finish every trial: {counts}")
    records = [read_status(root / suite.name / t.trial_id) for t in expand(suite)]
    return wall, sum(r["updated_at"] - r["started_at"] for r in records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="suites/quickstart.yaml")
    parser.add_argument("--trials", type=int, default=None, help="only the first N trials (default: all)")
    parser.add_argument("--steps", type=int, default=None, help="train.steps per trial (default: the suite's)")
    args = parser.parse_args()
    os.environ.pop("MLFLOW_TRACKING_URI", None)          # a fresh SQLite store per run, as on a laptop
    os.environ.pop("RAY_ADDRESS", None)
    suite = load_suite_file(args.suite)
    variants = {c: shrink(suite, args.trials, args.steps, c) for c in (1, 2)}
    trials = expand(variants[1])
    n, steps = len(trials), sum(t.config.train.steps for t in trials)
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        seq = alone(variants[1], Path(tmp) / "alone")
        load.append(os.getloadavg()[0])
        one, own_one = through_runner(variants[1], Path(tmp) / "runner-1")
        load.append(os.getloadavg()[0])
        two, own_two = through_runner(variants[2], Path(tmp) / "runner-2")
        load.append(os.getloadavg()[0])
    rate = steps / seq
    print(f"suite {suite.name}: {n} trials, {steps} steps in all, {len(os.sched_getaffinity(0))} CPUs; 1-min "
          f"load average {', '.join(f'{x:.2f}' for x in load)} (start, after each run)\n")
    print("| mode | wall s | steps/s | Σ trials' own s | runner overhead | efficiency | speed-up over ×1 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(f"| alone, one after another | {seq:.1f} | {rate:.2f} | {seq:.1f} | - | - | - |")
    for workers, wall, own in ((1, one, own_one), (2, two, own_two)):
        print(f"| run_suite ×{workers} | {wall:.1f} | {steps / wall:.2f} | {own:.1f} | "
              f"{(wall * workers - own) / (wall * workers):.1%} | {steps / wall / (workers * rate):.1%} | "
              f"{one / wall:.2f} |")


if __name__ == "__main__":
    main()
