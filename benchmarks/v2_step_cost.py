"""Step and evaluation cost of benchmark v2 (cumsum) against v1 (addrev), paired in one process.

    python benchmarks/v2_step_cost.py                       # 12 steps each after 3 not counted, 2 evaluations each
    python benchmarks/v2_step_cost.py --v2-base tiny-cumsum-v2b --forwards hf
    python benchmarks/v2_step_cost.py --forwards lean --layouts 1x1,2x1,1x4 --evals 0   # several updates per batch

The trainers are the reference suites' own configs (suites/reference.yaml and suites/reference-v2.yaml,
seed 0, delay 0, one thread), v2 once per `--forwards` value (model.forward: hf, lean) and `--layouts` value
(PxM: train.passes P and train.minibatches M; with k = P·M > 1 a step is the batch's proximal log-probs and k
updates, pass-major over the minibatches, as in the trainer's loop),
and run in lockstep:
one on-policy step of each in turn (`Trainer.make_batch` + `Trainer.update`, the order rotating each step), so
the machine's load hits all alike. The float path is the trials' own (harness/trial/numerics.py pins it before torch
is imported; STALEBENCH_FLOAT_PATH=native lets MKL and ATen choose) and is printed. The figure to carry
to another machine is the paired ratio (median of per-step v2/v1 ratios) times v1's s/step measured there
(the dry-run projection, harness/suite/plan.py, now takes v2's figures from the v2 reference run's own steps).
Process CPU seconds are printed too: other work on a shared machine disturbs them far less than wall time.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from harness.trial import numerics  # noqa: E402  (before torch: the float path is fixed at its import)

numerics.pin()

import torch  # noqa: E402

from harness.config.run import build_run_config
from harness.config.expand import load_suite_file
from harness.trial.trainer import Trainer

REPO = Path(__file__).resolve().parents[1]


def trainer(suite_file: str, overrides: dict) -> Trainer:
    suite = load_suite_file(REPO / "suites" / suite_file)
    return Trainer(build_run_config(suite.base, {"seed": 0, "delay": 0, "algorithm": "grpo", **overrides}))


def step(t: Trainer, i: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    batch, k, m = t.make_batch(i), t.cfg.train.updates_per_batch, t.cfg.train.minibatches
    if k > 1:
        batch.logp_proximal = t.logp_now(batch.rollout)
    parts = batch.minibatches(m)
    for j in range(k):
        t.update(parts[j % m])
        t.version += 1
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--evals", type=int, default=2)
    p.add_argument("--v2-base", default="tiny-cumsum-v2a")
    p.add_argument("--forwards", default="hf,lean", help="v2's model.forward values, each its own trainer")
    p.add_argument("--layouts", default="1x1", help="v2's train.passes x train.minibatches values, each its own trainer")
    args = p.parse_args()
    torch.set_num_threads(1)
    systems = {"v1": trainer("reference.yaml", {})}
    for forward in args.forwards.split(","):
        for layout in args.layouts.split(","):
            passes, minibatches = map(int, layout.split("x"))
            systems[f"v2 {forward}" + (f" {layout}" if layout != "1x1" else "")] = trainer(
                "reference-v2.yaml", {"model.base": args.v2_base, "model.forward": forward, "train.passes": passes,
                                      "train.minibatches": minibatches})
    print(f"load average {os.getloadavg()[0]:.1f} at the start; torch threads 1; float path "
          f"{numerics.record()['float_path']}")
    rows = {name: [] for name in systems}
    names = list(systems)
    for i in range(args.warmup + args.steps):
        for name in names[i % len(names):] + names[:i % len(names)]:
            rows[name].append(step(systems[name], i))
    kept = {name: r[args.warmup:] for name, r in rows.items()}
    for name, r in kept.items():
        print(f"{name}: {statistics.median(w for w, _ in r):.3f} s/step wall, "
              f"{statistics.median(c for _, c in r):.3f} CPU s/step (median of {len(r)})")
    pairs_of = [("v1", n) for n in names[1:]] + [(f"v2 {f}", n) for f in ("hf", "lean") for n in names
                                                 if n.startswith(f"v2 {f} ") and f"v2 {f}" in names]
    for a, b in pairs_of + ([("v2 hf", "v2 lean")] if {"v2 hf", "v2 lean"} <= set(names) else []):
        pairs = list(zip(kept[a], kept[b]))
        print(f"{b} / {a} per step, median of paired ratios: {statistics.median(y[0] / x[0] for x, y in pairs):.2f} "
              f"wall, {statistics.median(y[1] / x[1] for x, y in pairs):.2f} CPU")
    for name, t in systems.items() if args.evals else ():
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
