"""Seconds per step with π_prox recomputed (a forward of the batch) and interpolated (A-3PO), paired.

    python benchmarks/prox_logp.py                          # 16 prompts x G=8, 2 minibatches, 20 timed steps
    python benchmarks/prox_logp.py --minibatches 4 --forward lean

Two trainers from the same frozen base (tiny-addrev-v1) differ only in `train.prox_logp` (recompute,
loglinear). Each step one batch is sampled (by the first trainer, on-policy) and both consume it the way the
trial loop does (harness/trial/trainer.py `_loop`: π_prox at the first update, then one update per minibatch),
in alternating order; the rollout is not timed. Printed: the median seconds of that consumption per step for
each, their difference (the forward saved) and its share of the recompute step; then the median seconds of the
rollout, for scale.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from harness.trial import numerics  # noqa: E402  (before torch: the float path is fixed at its import)

numerics.pin()

import torch  # noqa: E402

from harness.config.run import build_run_config  # noqa: E402
from harness.trial.batches import Batch  # noqa: E402
from harness.trial.trainer import Trainer  # noqa: E402

METHODS = ("recompute", "loglinear")


def consume(trainer: Trainer, batch: Batch) -> None:
    """The batch's k updates as the trial loop runs them: π_prox first (recompute: a forward), then the updates."""
    tc = trainer.cfg.train
    k, m = tc.updates_per_batch, tc.minibatches
    batch = replace(batch, version_start=trainer.version, logp_proximal=None)
    if k > 1 and tc.prox_logp == "recompute":
        batch.logp_proximal = trainer.logp_now(batch.rollout)
    minibatches = batch.minibatches(m)
    for j in range(k):
        trainer.update(minibatches[j % m])
        trainer.version += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--minibatches", type=int, default=2)
    ap.add_argument("--forward", default="hf", help="model.forward: hf | lean | lean3")
    ap.add_argument("--algorithm", default="decoupled", help="an estimator that reads π_prox")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    base = {"model": {"kind": "tiny", "forward": args.forward}, "task": {"name": "addrev"}, "algorithm": args.algorithm,
            "group_size": args.group_size,
            "train": {"prompts_per_step": args.prompts, "minibatches": args.minibatches, "max_new_tokens": 8}}
    trainers = {m: Trainer(build_run_config(base, {"train.prox_logp": m})) for m in METHODS}
    seconds: dict[str, list[float]] = {m: [] for m in METHODS}
    rollout_s = []
    for s in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        batch = trainers[METHODS[0]].make_batch(s)
        rollout = time.perf_counter() - t0
        for m in (METHODS if s % 2 == 0 else METHODS[::-1]):
            t0 = time.perf_counter()
            consume(trainers[m], batch)
            if s >= args.warmup:
                seconds[m].append(time.perf_counter() - t0)
        if s >= args.warmup:
            rollout_s.append(rollout)
    med = {m: statistics.median(v) for m, v in seconds.items()}
    saved = [a - b for a, b in zip(seconds["recompute"], seconds["loglinear"])]
    print(f"{args.prompts} prompts x G={args.group_size}, {args.minibatches} minibatches, forward {args.forward}, "
          f"{args.algorithm}, {args.steps} steps after {args.warmup}, 1 thread")
    for m in METHODS:
        print(f"  {m:10s} {med[m]:.4f} s per step (pi_prox + updates; median)")
    print(f"  saved      {statistics.median(saved):.4f} s per step (median of paired differences), "
          f"{statistics.median(saved) / med['recompute']:.0%} of the recompute step")
    print(f"  rollout    {statistics.median(rollout_s):.4f} s per step (median; not timed above)")


if __name__ == "__main__":
    main()
