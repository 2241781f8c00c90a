"""How fast does RL visibly help on the CPU default? grpo at delay 0, one trial on one core.

Prints held-out greedy accuracy at each evaluation against wall time since the start of training
(model loading excluded, evaluation included) and the first time it is ≥ 30 points above the base model.

    python benchmarks/rl_gain.py [--steps 500] [--lr 1e-4] [--seed 0]
"""
from __future__ import annotations

import argparse
import time

import torch

from harness.config.run import build_run_config
from harness.trial.trainer import Trainer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--every", type=int, default=25)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = build_run_config({"train": {"steps": args.steps, "lr": args.lr, "checkpoint_every": 0},
                            "eval": {"every_steps": args.every}, "seed": args.seed})
    trainer = Trainer(cfg)
    trainer.start_source()
    base = trainer.evaluate()["eval/acc"]
    print(f"base greedy accuracy {base:.3f}; steps {args.steps}, lr {args.lr}, seed {args.seed}, 1 thread")
    print("| step | wall s | eval/acc | gain (points) |\n|---:|---:|---:|---:|")
    start, reached = time.perf_counter(), None
    for s in range(args.steps):
        trainer.source.ready(trainer.version)
        trainer.update(trainer.source.take(s))
        trainer.version += 1
        if (s + 1) % args.every == 0:
            acc = trainer.evaluate()["eval/acc"]
            wall = time.perf_counter() - start
            print(f"| {s + 1} | {wall:.1f} | {acc:.3f} | {100 * (acc - base):+.1f} |")
            if reached is None and acc - base >= 0.30:
                reached = (s + 1, wall)
    print(f"first +30 points: {'step %d at %.1f s' % reached if reached else 'not reached'}")


if __name__ == "__main__":
    main()
