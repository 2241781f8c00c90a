"""Step and evaluation cost of benchmark v2 (cumsum) against v1 (addrev), paired in one process.

    python benchmarks/v2_step_cost.py                       # 12 steps each after 3 not counted, 2 evaluations each
    python benchmarks/v2_step_cost.py --v2-base tiny-cumsum-v2b

The two trainers are the reference suites' own configs (suites/reference.yaml and suites/reference-v2.yaml,
seed 0, delay 0, one thread) and run in lockstep: one on-policy step of each in turn (`Trainer.make_batch` +
`Trainer.update`, which goes first alternating), so the machine's load hits both alike. The figure to carry
to another machine is the paired ratio (median of per-step v2/v1 ratios) times v1's s/step measured there;
the dry-run projection (harness/plan.py) uses ratio x 0.084 s, v1's idle-machine figure (train_throughput.py).
Process CPU seconds are printed too: other work on a shared machine disturbs them far less than wall time.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from harness.config import build_run_config
from harness.suite import load_suite_file
from harness.trainer import Trainer

REPO = Path(__file__).resolve().parents[1]


def trainer(suite_file: str, overrides: dict) -> Trainer:
    suite = load_suite_file(REPO / "suites" / suite_file)
    return Trainer(build_run_config(suite.base, {"seed": 0, "delay": 0, "algorithm": "grpo", **overrides}))


def step(t: Trainer, i: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    t.update(t.make_batch(i))
    t.version += 1
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--evals", type=int, default=2)
    p.add_argument("--v2-base", default="tiny-cumsum-v2a")
    args = p.parse_args()
    torch.set_num_threads(1)
    v1 = trainer("reference.yaml", {})
    v2 = trainer("reference-v2.yaml", {"model.base": args.v2_base})
    print(f"load average {os.getloadavg()[0]:.1f} at the start; torch threads 1")
    rows = {"v1": [], "v2": []}
    for i in range(args.warmup + args.steps):
        order = [("v1", v1), ("v2", v2)] if i % 2 == 0 else [("v2", v2), ("v1", v1)]
        for name, t in order:
            rows[name].append(step(t, i))
    pairs = list(zip(rows["v1"][args.warmup:], rows["v2"][args.warmup:]))
    for name in ("v1", "v2"):
        kept = rows[name][args.warmup:]
        print(f"{name}: {statistics.median(w for w, _ in kept):.3f} s/step wall, "
              f"{statistics.median(c for _, c in kept):.3f} CPU s/step (median of {len(kept)})")
    print(f"v2/v1 per step, median of paired ratios: {statistics.median(b[0] / a[0] for a, b in pairs):.2f} wall, "
          f"{statistics.median(b[1] / a[1] for a, b in pairs):.2f} CPU")
    for name, t in (("v1", v1), ("v2", v2)):
        times = []
        for _ in range(args.evals):
            wall, cpu = time.perf_counter(), time.process_time()
            t.evaluate()
            times.append((time.perf_counter() - wall, time.process_time() - cpu))
        print(f"{name} evaluation ({len(t.eval_problems)} problems): {statistics.median(w for w, _ in times):.2f} s "
              f"wall, {statistics.median(c for _, c in times):.2f} CPU s (median of {args.evals})")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
