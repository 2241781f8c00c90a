"""Peak memory of the trainer's log-probs and entropy through the LM head: full logits against chunks.

    python benchmarks/logp_memory.py [--hidden 1024] [--cases 1x512x151936,2x1024x151936,8x512x32768]

For each (b, T, V): hidden states (b, T, C) and a head (V, C) in float32, as leaves that want gradients,
then a forward and backward through (1) the full path, rollout.token_logp's arithmetic (logits, their
float32 log_softmax, the exp for the entropy), and (2) the chunked path (rollout/logp.py) at chunks of
1,024 (the auto default) and 256 tokens. Each runs in its own process; its growth is the peak resident
set (ru_maxrss) minus the resident set once the inputs exist, so it counts everything the log-probs
allocate, the gradients of h and W included (C·(bT + V)·4 bytes in both paths: "grads"). Printed in MiB and,
in parentheses, what is beyond those gradients as a multiple of one full (b, T, V) float32 copy. CPU only;
one thread.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from types import SimpleNamespace

CHUNKS = (1024, 256)


def one(b: int, T: int, V: int, C: int, chunk: int) -> float:
    """MiB the process grows by for one forward and backward (chunk 0: the full path)."""
    import psutil
    import torch

    from harness.rollout import token_logp
    from harness.rollout.logp import Head, chunked_token_logp

    torch.set_num_threads(1)
    torch.manual_seed(0)
    h = (torch.randn(b, T, C) * 0.05).requires_grad_()
    W = (torch.randn(V, C) * 0.05).requires_grad_()
    r = SimpleNamespace(response_ids=torch.randint(0, V, (b, T)))
    base = psutil.Process().memory_info().rss
    if chunk:
        logp, entropy = chunked_token_logp(Head(h, W), r.response_ids, 1.0, chunk)
    else:
        logp, entropy = token_logp(None, r, slice(None), 1.0, forward=lambda m, r, rows, g: h @ W.T)
    (logp.sum() + 0 * entropy.sum()).backward()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=1024, help="C (Qwen3-0.6B: 1,024)")
    ap.add_argument("--cases", default="1x512x151936,2x1024x151936,8x512x32768", help="b x T x V, comma-separated")
    ap.add_argument("--one", help=argparse.SUPPRESS)            # b,T,V,C,chunk: run one case in this process
    args = ap.parse_args()
    if args.one:
        b, T, V, C, chunk = map(int, args.one.split(","))
        print(json.dumps(one(b, T, V, C, chunk)))
        return
    print(f"C = {args.hidden}; growth in MiB (peak RSS − RSS with the inputs) and (growth − grads) / full copy")
    print(f"{'b x T x V':>18} {'full copy':>10} {'grads':>7} {'full path':>16} "
          + " ".join(f"{f'chunk {c}':>16}" for c in CHUNKS))
    for case in args.cases.split(","):
        b, T, V = map(int, case.split("x"))
        copy, grads = b * T * V * 4 / 2**20, args.hidden * (b * T + V) * 4 / 2**20
        cells = []
        for chunk in (0, *CHUNKS):
            out = subprocess.run([sys.executable, __file__, "--one", f"{b},{T},{V},{args.hidden},{chunk}"],
                                 capture_output=True, text=True, check=True)
            mib = json.loads(out.stdout.strip().splitlines()[-1])
            cells.append(f"{mib:9.0f} ({(mib - grads) / copy:4.2f}x)")
        print(f"{case:>18} {copy:10.0f} {grads:7.0f} " + " ".join(f"{c:>16}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
