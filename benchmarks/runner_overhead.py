"""What the suite runner costs: a quickstart-like suite through `run_suite` (Ray Tune + MLflow) against the
same trials run one after another in-process (`harness.trainer.train` with a RunLog without MLflow).

Three timings of the same trials, each into a fresh temp directory, the base model built beforehand:
  in-process   trainer.train per trial, one after another (no Ray, no MLflow)
  run_suite ×1 resources.max_concurrent = 1: the runner's overhead (Ray start, MLflow store, per-trial
               worker start and mirroring), total and per trial
  run_suite ×2 max_concurrent = 2: the speed-up of two trials at a time over in-process
The wall times depend on what else runs on the machine; run it on an otherwise idle one.

    python benchmarks/runner_overhead.py                          # suites/quickstart.yaml as it is (long)
    python benchmarks/runner_overhead.py --trials 4 --steps 50    # the first 4 trials, 50 steps each
    python benchmarks/runner_overhead.py --trials 2 --steps 3 --model-path DIR   # a smoke run on a local model
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

from harness.config import set_dotted
from harness.suite import Suite, expand, load_suite


def shrink(suite: Suite, trials: int | None, steps: int | None, model_path: str | None, concurrent: int) -> Suite:
    """The suite with its trials cut to the first `trials` seeds/grid points, and `train.steps` / model set."""
    base = dict(suite.base)
    if steps:
        base = set_dotted(base, "train.steps", steps)
    if model_path:
        base = set_dotted(set_dotted(base, "model.kind", "path"), "model.path", str(Path(model_path).resolve()))
    grid, seeds = dict(suite.grid), list(suite.seeds)
    out = dataclasses.replace(suite, base=base, grid=grid, seeds=seeds, source="",
                              resources=dataclasses.replace(suite.resources, max_concurrent=concurrent))
    if trials:
        # keep the first `trials` trials: cut seeds first, then the grid axes from the last one
        while len(expand(out)) > trials:
            if len(out.seeds) > 1:
                out = dataclasses.replace(out, seeds=out.seeds[:-1])
                continue
            axis = next((k for k in reversed(list(out.grid)) if len(out.grid[k]) > 1), None)
            if axis is None:
                break
            out = dataclasses.replace(out, grid={**out.grid, axis: out.grid[axis][:-1]})
    return out


def in_process(suite: Suite, root: Path) -> float:
    import torch

    from harness.tracking import RunLog
    from harness.trainer import train

    threads = torch.get_num_threads()
    start = time.perf_counter()
    for trial in expand(suite):
        train(trial.config, RunLog(root / trial.trial_id), trial.params)
    torch.set_num_threads(threads)
    return time.perf_counter() - start


def through_runner(suite: Suite, root: Path) -> float:
    from harness.runner import run_suite

    start = time.perf_counter()
    counts = run_suite(suite, results_root=root, progress=False)
    elapsed = time.perf_counter() - start
    if counts.get("completed", 0) + counts.get("diverged", 0) != len(expand(suite)):
        raise SystemExit(f"run_suite did not finish every trial: {counts}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="suites/quickstart.yaml")
    parser.add_argument("--trials", type=int, default=None, help="only the first N trials (default: all)")
    parser.add_argument("--steps", type=int, default=None, help="train.steps per trial (default: the suite's)")
    parser.add_argument("--model-path", default=None, help="a local model instead of the suite's (model.kind: path)")
    args = parser.parse_args()
    os.environ.pop("MLFLOW_TRACKING_URI", None)          # a fresh SQLite store per run, as on a laptop
    os.environ.pop("RAY_ADDRESS", None)
    suite = load_suite(args.suite)
    variants = {c: shrink(suite, args.trials, args.steps, args.model_path, c) for c in (1, 2)}
    trials = expand(variants[1])
    from harness.models import ensure_tiny_model
    for t in trials:                                      # the base model is built (or found) once, untimed
        if t.config.model.kind == "tiny" and t.config.lab is None:
            ensure_tiny_model(t.config.model, t.config.task)
    n, steps = len(trials), sum(t.config.train.steps for t in trials)
    with tempfile.TemporaryDirectory() as tmp:
        seq = in_process(variants[1], Path(tmp) / "in-process")
        one = through_runner(variants[1], Path(tmp) / "runner-1")
        two = through_runner(variants[2], Path(tmp) / "runner-2")
    print(f"suite {suite.name}: {n} trials, {steps} steps in all, os.cpu_count() = {os.cpu_count()}\n")
    print("| mode | wall s | s / trial | overhead s / trial | speed-up vs in-process |")
    print("|---|---:|---:|---:|---:|")
    print(f"| in-process, one after another | {seq:.1f} | {seq / n:.2f} | - | 1.00 |")
    print(f"| run_suite, 1 at a time | {one:.1f} | {one / n:.2f} | {(one - seq) / n:.2f} | {seq / one:.2f} |")
    print(f"| run_suite, 2 at a time | {two:.1f} | {two / n:.2f} | - | {seq / two:.2f} |")


if __name__ == "__main__":
    main()
