"""Per-op profile of one training step of the CPU default (rollout and update apart), and the matmul rate.

    python benchmarks/step_profile.py                     # transformers forward (model.forward: hf)
    python benchmarks/step_profile.py --forward lean      # the lean forward (harness/rollout/lean.py)
    python benchmarks/step_profile.py --matmul-only       # just the plain matmul rates
    python benchmarks/step_profile.py --forward lean --shape v2   # a reference-v2 trial's step

Shape: the v1 shape of benchmarks/train_throughput.py (frozen base tiny-addrev-v1, 16 prompts × G=8,
≤ 8 new tokens, temperature 1, one torch thread), or with `--shape v2` a reference-v2 trial's (tiny-cumsum-v2a,
8 prompts × G=16, ≤ 21 new tokens). `--warmup` steps run first, then `--steps` steps under
torch.profiler; each table lists the aten ops by self CPU time summed over those steps, per step.

The matmul rate is the best of 10 timed calls (after 3) of `a @ b` at 1024³ and at the shapes a step's
projections have (M = 1024 token rows), on one thread: the machine's arithmetic rate on this float path, the
trials' pinned one unless STALEBENCH_FLOAT_PATH=native (printed).
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from harness.trial import numerics  # noqa: E402  (before torch: the float path is fixed at its import)

numerics.pin()   # the trials' float path (STALEBENCH_FLOAT_PATH=native: MKL and ATen choose)

import torch  # noqa: E402

from harness.config.run import build_run_config
from harness.config.expand import load_suite_file
from harness.trial.trainer import Trainer

SHAPES = [(1024, 1024, 1024), (1024, 128, 384), (1024, 128, 1024), (1024, 512, 128), (128, 128, 1024)]


def matmul_rate(m: int, k: int, n: int) -> float:
    """GFLOP/s of a plain float32 (m×k)·(k×n) matmul on the current thread count, best of 10 after 3."""
    a, b = torch.randn(m, k), torch.randn(k, n)
    times = []
    for _ in range(13):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * m * k * n / min(times[3:]) / 1e9


def table(prof: torch.profiler.profile, steps: int, rows: int) -> str:
    events = [e for e in prof.key_averages() if e.key.startswith("aten::") or e.key.startswith("autograd")]
    total = sum(e.self_cpu_time_total for e in events) or 1
    calls = sum(e.count for e in events if e.key.startswith("aten::"))
    lines = [f"{total / steps / 1e3:.1f} ms self CPU per step in aten/autograd ops, {calls / steps:.0f} aten calls per step",
             "", "| op | ms/step | share | calls/step |", "|---|---:|---:|---:|"]
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:rows]:
        lines.append(f"| `{e.key}` | {e.self_cpu_time_total / steps / 1e3:.2f} | {e.self_cpu_time_total / total:.0%} | "
                     f"{e.count / steps:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--forward", default="hf", help="model.forward: hf | lean")
    parser.add_argument("--steps", type=int, default=10, help="profiled steps")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rows", type=int, default=15, help="ops per table")
    parser.add_argument("--matmul-only", action="store_true")
    parser.add_argument("--shape", choices=("v1", "v2"), default="v1",
                        help="v1: the throughput script's shape; v2: a reference-v2 trial (cumsum, tiny-cumsum-v2a)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    import os
    print(f"torch {torch.__version__}, float path {numerics.record()['float_path']}, 1 thread, "
          f"load average {os.getloadavg()[0]:.2f}\n")
    print("| matmul (m×k)·(k×n) | GFLOP/s |\n|---|---:|")
    for m, k, n in SHAPES:
        print(f"| {m}×{k}·{k}×{n} | {matmul_rate(m, k, n):.0f} |")
    if args.matmul_only:
        return
    if args.shape == "v2":                                   # reference-v2's own trial config (8 prompts × G=16)
        base = load_suite_file(Path(__file__).resolve().parents[1] / "suites" / "reference-v2.yaml").base
        cfg = build_run_config(base, {"seed": 0, "delay": 0, "algorithm": "grpo", "model.forward": args.forward})
    else:
        cfg = build_run_config({"train": {"steps": 40, "prompts_per_step": 16, "lr": 1e-4, "max_new_tokens": 8,
                                          "threads": 1}, "group_size": 8,
                                "model": {"device": "cpu", "forward": args.forward}})
    trainer = Trainer(cfg)
    for i in range(args.warmup):
        trainer.update(trainer.make_batch(i))
        trainer.version += 1
    batches, t_roll, t_upd = [], 0.0, 0.0
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as rollout:
        for i in range(args.steps):
            t0 = time.process_time()
            batches.append(trainer.make_batch(args.warmup + i))
            t_roll += time.process_time() - t0
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as update:
        for batch in batches:
            t0 = time.process_time()
            trainer.update(batch)
            t_upd += time.process_time() - t0
            trainer.version += 1
    print(f"\nforward {args.forward}: rollout {t_roll / args.steps * 1e3:.1f} ms, update {t_upd / args.steps * 1e3:.1f} ms "
          f"CPU per step under the profiler (which adds its own cost), load average {os.getloadavg()[0]:.2f}")
    print("\nRollout (`Trainer.make_batch`):\n")
    print(table(rollout, args.steps, args.rows))
    print("\nUpdate (`Trainer.update`, forward + backward + AdamW):\n")
    print(table(update, args.steps, args.rows))


if __name__ == "__main__":
    main()
