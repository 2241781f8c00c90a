"""Forward + backward time of every registered estimator on CPU.

    python benchmarks/estimators.py                      # B=512, T=1024, 2 threads, 7 repeats
    python benchmarks/estimators.py --batch 64 --tokens 128 --repeats 3   # quick look

One timed call = `compute_loss` on the whole batch (input validation, the estimator's batch statistics
from `prepare`, the token loss, token-mean aggregation) followed by `loss.backward()`. This is the work
the trainer adds per optimizer step on top of the model's own forward/backward.

Inputs: float32, groups of 8 responses, response lengths uniform in [0.4 T, T] (≈70% valid tokens,
padding at the end of each row), logp ~ −Exp(1), logp_behavior = logp + N(0, 0.3²) (a stale policy:
the ratios spread over roughly [0.4, 2.5], so clipping, masking and capping all act), advantages from
binary rewards with `group_advantages`. Prints a markdown table: median and min over the repeats
(after one warm-up call), and the median relative to grpo.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms import LossInputs, compute_loss, group_advantages, loss_names  # noqa: E402


def make_inputs(batch: int, tokens: int, group_size: int, seed: int) -> LossInputs:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(int(0.4 * tokens), tokens + 1, (batch,), generator=gen)        # (B,)
    mask = torch.arange(tokens)[None, :] < lengths[:, None]                                  # (B, T)
    logp = -torch.empty(batch, tokens).exponential_(1.0, generator=gen)                      # (B, T)
    logp_behavior = logp + 0.3 * torch.randn(batch, tokens, generator=gen)
    group_ids = torch.arange(batch) // group_size                                            # (B,)
    rewards = (torch.rand(batch, generator=gen) < 0.5).float()
    adv = group_advantages(rewards, group_ids, mode="std")
    return LossInputs(logp, logp_behavior, adv, mask, group_ids)


def time_estimator(name: str, inp: LossInputs, repeats: int) -> list[float]:
    times = []
    for k in range(repeats + 1):                       # the first call is a warm-up
        logp = inp.logp.clone().requires_grad_(True)
        batch = LossInputs(logp, inp.logp_behavior, inp.advantages, inp.mask, inp.group_ids)
        start = time.perf_counter()
        out = compute_loss(name, batch, eps=0.2, aggregation="token-mean")
        out.loss.backward()
        elapsed = time.perf_counter() - start
        if k > 0:
            times.append(elapsed)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512, help="B, responses per batch")
    parser.add_argument("--tokens", type=int, default=1024, help="T, padded response length")
    parser.add_argument("--group-size", type=int, default=8, help="G, responses per prompt")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per estimator (after 1 warm-up)")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    inp = make_inputs(args.batch, args.tokens, args.group_size, args.seed)
    names = loss_names()
    results = {name: time_estimator(name, inp, args.repeats) for name in names}
    base = statistics.median(results["grpo"])

    valid = int(inp.mask.sum())
    print(f"B={args.batch}, T={args.tokens}, G={args.group_size}, float32, {valid} valid tokens "
          f"({valid / inp.mask.numel():.0%}), torch {torch.__version__}, {args.threads} threads, "
          f"{platform.processor() or platform.machine()}, median of {args.repeats}\n")
    print("| estimator | median ms | min ms | × grpo |")
    print("|---|---:|---:|---:|")
    for name in names:
        t = results[name]
        print(f"| {name} | {1e3 * statistics.median(t):.1f} | {1e3 * min(t):.1f} | "
              f"{statistics.median(t) / base:.2f} |")


if __name__ == "__main__":
    main()
