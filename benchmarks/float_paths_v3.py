"""Float-path candidates for engine version 3: matmul rate at the step's GEMM shapes, and determinism.

    python benchmarks/float_paths_v3.py                        # 3 rounds, every candidate, best of 20 per shape
    python benchmarks/float_paths_v3.py --rounds 1 --repeat 5  # quick look
    python benchmarks/float_paths_v3.py --paired 200           # OpenBLAS against native MKL, call by call

`--paired N`: in one process on the native path, each shape's product by torch (MKL, native) and by gemm3
(OpenBLAS, Haswell kernels) in turn, N calls each; per shape the median of the per-call time ratios: the
figure least disturbed by a shared machine's load, since both libraries see the same moments.

A float path is fixed when the libraries load, so each candidate runs in its own process, the candidates in
turn (the order rotating each round); the ratio to native is taken within a round (paired) and its median
over rounds reported. Each process computes the same products of the same inputs (float32, drawn by
numpy's PCG64, so equal on every machine) and prints, per shape, the best time of --repeat calls and the
SHA-256 of the result's bytes.

The shapes are a training step's on the tiny Qwen3 bases (hidden C=128, MLP I=512, q|k|v 384, gate|up
1024): decode steps (M = 128 rows of a rollout), the update's forward at 2,048 and 8,192 token rows
(v2's responses of up to 21 tokens and v3's of 48-128), and the update's backward products, grad_x = gy·W
and grad_W = gyᵀ·x, whose reduction runs over the M token rows. Written y = A·B with A (m, k), B (k, n):
"nt" means B is a weight's transpose (a view), "tn" that A is a transpose.

Determinism, per candidate: the digests must be the same in every round (repeated runs), with one thread
and with two, and under the candidate's forced-ISA variants (the same path asked to use an older ISA: a CPU
of another generation). A candidate whose digests differ in any of these is not a reproducible path.

Candidates (the variables are set before torch or numpy is imported):
- pinned: the v1/v2 path, MKL_CBWR=COMPATIBLE (SSE2 SGEMM), ATEN_CPU_CAPABILITY=avx2;
- native: MKL and ATen choose;
- mkl-avx2, mkl-avx2-strict, mkl-avx512: MKL's CNR branches (documented for Intel CPUs; on AMD MKL reads
  the AVX2 and AVX512 branches back as AUTO: the branch follows the CPU);
- onednn-avx2: torch's oneDNN linear (brgemm) with ONEDNN_MAX_CPU_ISA=AVX2;
- openblas-haswell: numpy's bundled OpenBLAS SGEMM called on torch's memory, with OPENBLAS_CORETYPE=Haswell
  (its AVX2+FMA kernels and fixed blocking on every x86-64 CPU with AVX2 and FMA).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BASE = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "STALEBENCH_FLOAT_PATH": "native"}
# name -> (backend, environment, {forced-ISA variant: extra environment})
CANDIDATES = {
    "pinned": ("torch", {**BASE, "MKL_CBWR": "COMPATIBLE"}, {"mkl-isa=AVX": {"MKL_ENABLE_INSTRUCTIONS": "AVX"}}),
    "native": ("torch", {"STALEBENCH_FLOAT_PATH": "native"}, {"mkl-isa=AVX": {"MKL_ENABLE_INSTRUCTIONS": "AVX"}}),
    "mkl-avx2": ("torch", {**BASE, "MKL_CBWR": "AVX2"}, {"mkl-isa=AVX": {"MKL_ENABLE_INSTRUCTIONS": "AVX"}}),
    "mkl-avx2-strict": ("torch", {**BASE, "MKL_CBWR": "AVX2,STRICT"},
                        {"mkl-isa=AVX": {"MKL_ENABLE_INSTRUCTIONS": "AVX"}}),
    "mkl-avx512": ("torch", {**BASE, "MKL_CBWR": "AVX512"}, {"mkl-isa=AVX": {"MKL_ENABLE_INSTRUCTIONS": "AVX"}}),
    "onednn-avx2": ("onednn", {**BASE, "MKL_CBWR": "COMPATIBLE"}, {"onednn-isa=AVX": {"ONEDNN_MAX_CPU_ISA": "AVX"}}),
    "openblas-haswell": ("openblas", {**BASE, "MKL_CBWR": "COMPATIBLE", "OPENBLAS_CORETYPE": "Haswell"},
                         {"openblas-core=Zen": {"OPENBLAS_CORETYPE": "Zen"},
                          "openblas-core=Sandybridge": {"OPENBLAS_CORETYPE": "Sandybridge"}}),
}
VARIABLES = ("STALEBENCH_FLOAT_PATH", "MKL_CBWR", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "OPENBLAS_CORETYPE",
             "MKL_ENABLE_INSTRUCTIONS")
# (name, m, k, n, layout): y (m, n) = A (m, k) · B (k, n)
SHAPES = [("decode q|k|v", 128, 128, 384, "nt"), ("decode gate|up", 128, 128, 1024, "nt"),
          ("decode down", 128, 512, 128, "nt"),
          ("update q|k|v, 2k rows", 2048, 128, 384, "nt"), ("update gate|up, 2k rows", 2048, 128, 1024, "nt"),
          ("update down, 2k rows", 2048, 512, 128, "nt"),
          ("update gate|up, 8k rows", 8192, 128, 1024, "nt"), ("update down, 8k rows", 8192, 512, 128, "nt"),
          ("grad_x gate|up, 8k rows", 8192, 1024, 128, "nn"), ("grad_W gate|up, 8k rows", 1024, 8192, 128, "tn"),
          ("grad_W down, 8k rows", 128, 8192, 512, "tn"), ("1024^3", 1024, 1024, 1024, "nn")]


def operands(m: int, k: int, n: int, layout: str):
    """A (m, k) and B (k, n) as torch tensors, each contiguous or the transpose of a contiguous one."""
    import numpy as np
    import torch
    rng = np.random.Generator(np.random.PCG64(m * 1_000_003 + k * 1009 + n))
    a = rng.standard_normal((k, m) if layout[0] == "t" else (m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if layout[1] == "t" else (k, n), dtype=np.float32)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    return (ta.t() if layout[0] == "t" else ta), (tb.t() if layout[1] == "t" else tb)


def backend(name: str):
    """mm(A, B) -> A·B on the candidate's library."""
    import torch
    if name == "torch":
        return torch.mm
    if name == "onednn":
        return lambda a, b: torch.ops.mkldnn._linear_pointwise(a.contiguous(), b.t().contiguous(), None, "none", [], "")
    from harness.rollout.gemm3 import mm
    return mm


def worker(name: str, threads: int, repeat: int) -> None:
    import torch
    torch.set_num_threads(threads)
    if CANDIDATES[name][0] == "openblas":
        from harness.rollout import gemm3
        gemm3._lib = lambda: gemm3._load()[:3]     # the forced-core variants run other kernels on purpose
        gemm3.set_threads(threads)
    mm = backend(CANDIDATES[name][0])
    rows = {}
    for label, m, k, n, layout in SHAPES:
        a, b = operands(m, k, n, layout)
        y = mm(a, b)
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            mm(a, b)
            best = min(best, time.perf_counter() - t0)
        rows[label] = {"gflops": 2 * m * k * n / best / 1e9,
                       "digest": hashlib.sha256(y.contiguous().numpy().tobytes()).hexdigest()[:16]}
    from harness.trial import numerics
    path = numerics.record()["float_path"]
    if CANDIDATES[name][0] == "openblas":
        from harness.rollout import gemm3
        path += f" openblas={gemm3._load()[3]}"
    elif CANDIDATES[name][0] == "onednn":
        path += f" onednn<={os.environ.get('ONEDNN_MAX_CPU_ISA')}"
    print(json.dumps({"rows": rows, "float_path": path}))


def paired(calls: int) -> None:
    """In this process (native path): OpenBLAS-Haswell's rate over MKL's, shape by shape, call by call."""
    import torch
    from harness.rollout import gemm3
    from harness.trial import numerics
    torch.set_num_threads(1)
    print(f"# load average at start: {os.getloadavg()[0]:.2f}; {numerics.record()['float_path']} against "
          f"{gemm3.path()}; {calls} calls each, alternating")
    print("\n| shape | MKL native GFLOP/s | OpenBLAS GFLOP/s | OpenBLAS / native, median of per-call ratios |")
    print("|---|---:|---:|---:|")
    ratios_all = []
    for label, m, k, n, layout in SHAPES:
        a, b = operands(m, k, n, layout)
        times: dict[str, list[float]] = {"mkl": [], "openblas": []}
        for i in range(calls + 3):
            for name, f in (("mkl", torch.mm), ("openblas", gemm3.mm))[::1 if i % 2 else -1]:
                t0 = time.perf_counter()
                f(a, b)
                if i >= 3:
                    times[name].append(time.perf_counter() - t0)
        ratio = statistics.median(x / y for x, y in zip(times["mkl"], times["openblas"]))
        ratios_all.append(ratio)
        flop = 2 * m * k * n / 1e9
        print(f"| {label} | {flop / statistics.median(times['mkl']):.0f} | {flop / statistics.median(times['openblas']):.0f} "
              f"| {ratio:.0%} |")
    print(f"\nmedian over shapes: {statistics.median(ratios_all):.0%}; load average at end: {os.getloadavg()[0]:.2f}")


def run(name: str, threads: int, repeat: int, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env.update(CANDIDATES[name][1], **(extra or {}), PYTHONPATH=str(REPO), OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, __file__, "--child", name, str(threads), str(repeat)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=20, help="calls per shape; the best is kept")
    ap.add_argument("--only", nargs="*", default=list(CANDIDATES), help="candidates (native is always run)")
    ap.add_argument("--paired", type=int, metavar="N", help="OpenBLAS against native MKL in one process, N calls each")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--paired-child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return worker(args.child[0], int(args.child[1]), int(args.child[2]))
    if args.paired:
        env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
        env.update(CANDIDATES["native"][1], OPENBLAS_CORETYPE="Haswell", PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
        subprocess.run([sys.executable, __file__, "--paired-child", str(args.paired)], env=env, check=True)
        return
    if args.paired_child:
        return paired(args.paired_child)
    names = ["native"] + [n for n in args.only if n != "native"]
    print(f"# load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(args.rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            runs[n].append(run(n, 1, args.repeat))
    checks = {n: {"threads=2": run(n, 2, 2), **{v: run(n, 1, 2, e) for v, e in CANDIDATES[n][2].items()}}
              for n in names}
    print(f"# load average at end: {os.getloadavg()[0]:.2f}")
    print("\n| shape | " + " | ".join(names) + " |\n|---|" + "---:|" * len(names))
    for label, *_ in SHAPES:
        cells = []
        for n in names:
            rates = [x["rows"][label]["gflops"] for x in runs[n]]
            ratio = statistics.median(x["rows"][label]["gflops"] / y["rows"][label]["gflops"]
                                      for x, y in zip(runs[n], runs["native"]))
            cells.append(f"{statistics.median(rates):.0f} ({ratio:.0%})")
        print(f"| {label} | " + " | ".join(cells) + " |")
    print("\nGFLOP/s, median over rounds (in brackets: of native, paired by round), one thread")
    print("\n| candidate | read back | median of native, all shapes | repeated runs | threads 1 = 2 | forced ISA |")
    print("|---|---|---:|---|---|---|")
    for n in names:
        first = {k: v["digest"] for k, v in runs[n][0]["rows"].items()}
        same = lambda x: {k: v["digest"] for k, v in x["rows"].items()} == first  # noqa: E731
        ratio = statistics.median(x["rows"][s]["gflops"] / y["rows"][s]["gflops"] for x, y in zip(runs[n], runs["native"])
                                  for s, *_ in SHAPES)
        isa = ", ".join(f"{v} {'same' if same(x) else 'DIFFERS'}" for v, x in checks[n].items() if v != "threads=2")
        print(f"| {n} | `{runs[n][0]['float_path']}` | {ratio:.0%} | {'same' if all(map(same, runs[n])) else 'DIFFER'} "
              f"| {'same' if same(checks[n]['threads=2']) else 'DIFFER'} | {isa} |")
    groups: dict[tuple, list[str]] = {}
    for n in names:
        groups.setdefault(tuple(runs[n][0]["rows"][s]["digest"] for s, *_ in SHAPES), []).append(n)
    print("\ncandidates with the same bits on every shape: "
          + ("; ".join(" = ".join(g) for g in groups.values() if len(g) > 1) or "none"))


if __name__ == "__main__":
    main()
