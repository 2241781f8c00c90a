"""What the pinned float path costs: s/step of one reference trial under each float path, paired.

    python benchmarks/float_paths.py                       # 3 rounds x 30 steps (10 not counted) per path
    python benchmarks/float_paths.py --rounds 1 --steps 8 --warmup 3     # quick look

A float path is fixed when torch is imported, so each path runs in its own process. The processes run one
at a time, the paths in turn (A B C, then B C A, ...), so a change in the machine's load hits every path
alike. Each process builds the reference suite's trial `algorithm=grpo,delay=0,seed=0` (the frozen base
tiny-addrev-v1, 16 prompts x G=8, one torch thread) and times `--steps` optimizer steps (rollout
`Trainer.make_batch` + `Trainer.update`), the first `--warmup` not counted. Reported per path: median wall
and process-CPU s/step over every counted step of every round, and the median of the per-round ratios to
the pinned path (CPU time, which other work on a shared machine disturbs less than wall time). The header
prints the 1-minute load average at the start and end.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

# name -> the environment of its process (STALEBENCH_FLOAT_PATH=native: pin() leaves the variables alone)
PATHS = {
    "pinned (default: MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2)": {},
    "native (MKL and ATen choose)": {"STALEBENCH_FLOAT_PATH": "native"},
    "MKL_CBWR=AVX2": {"STALEBENCH_FLOAT_PATH": "native", "MKL_CBWR": "AVX2"},
    "MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=default": {"STALEBENCH_FLOAT_PATH": "native", "MKL_CBWR": "COMPATIBLE",
                                                        "ATEN_CPU_CAPABILITY": "default"},
}
VARIABLES = ("STALEBENCH_FLOAT_PATH", "MKL_CBWR", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")


def worker(steps: int, warmup: int) -> None:
    """In the child: pin (or not, per the environment), build the trial, time the steps, print JSON."""
    from harness.trial import numerics
    numerics.warn_once(numerics.pin())
    import torch

    from harness.config.expand import expand, load_suite_file, select
    from harness.trial.trainer import Trainer

    torch.set_num_threads(1)
    trial = select(expand(load_suite_file(REPO / "suites" / "reference.yaml")), "algorithm=grpo,delay=0,seed=0")
    trainer = Trainer(trial.config)
    wall, cpu = [], []
    for i in range(steps):
        c0, t0 = time.process_time(), time.perf_counter()
        trainer.update(trainer.make_batch(i))
        trainer.version += 1                               # as `train()` does after each update
        if i >= warmup:
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    print(json.dumps({"wall": wall, "cpu": cpu, "float_path": numerics.record()["float_path"]}))


def run(env: dict[str, str], steps: int, warmup: int) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), clean.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, __file__, "--worker", "--steps", str(steps), "--warmup", str(warmup)],
                         env={**clean, **env}, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps per process, warm-up included")
    parser.add_argument("--warmup", type=int, default=10, help="first steps not counted")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 0 <= args.warmup < args.steps:
        parser.error("--warmup must be in [0, --steps)")
    if args.worker:
        worker(args.steps, args.warmup)
        return
    names = list(PATHS)
    load = [os.getloadavg()[0]]
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:        # rotate the order each round
            runs[name].append(run(PATHS[name], args.steps, args.warmup))
    load.append(os.getloadavg()[0])
    pinned = names[0]
    print(f"{args.rounds} rounds x {args.steps - args.warmup} counted steps per path; 1-minute load average "
          f"{load[0]:.2f} at the start, {load[1]:.2f} at the end")
    print("| float path | read back | wall s/step | CPU s/step | CPU time vs pinned (median of rounds) |")
    print("|---|---|---:|---:|---:|")
    for name in names:
        wall = statistics.median(x for run_ in runs[name] for x in run_["wall"])
        cpu = statistics.median(x for run_ in runs[name] for x in run_["cpu"])
        ratio = statistics.median(statistics.median(a["cpu"]) / statistics.median(b["cpu"])
                                  for a, b in zip(runs[name], runs[pinned]))
        print(f"| {name} | `{runs[name][0]['float_path']}` | {wall:.3f} | {cpu:.3f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
