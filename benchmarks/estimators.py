"""Forward + backward time of every registered estimator on CPU.

    python benchmarks/estimators.py                      # B=512, T=1024, 2 threads, 9 repeats
    python benchmarks/estimators.py --batch 64 --tokens 128 --repeats 3   # quick look

One timed call = `compute_loss` on the whole batch (input validation, the estimator's batch statistics
from `prepare`, the token loss, token-mean aggregation) followed by `loss.backward()`. This is the work
the trainer adds per optimizer step on top of the model's own forward/backward.

Inputs: float32, groups of 8 responses, response lengths uniform in [0.4 T, T] (≈70% valid tokens,
padding at the end of each row), logp ~ −Exp(1), logp_behavior = logp + N(0, σ²) with σ =
`--log-ratio-std` 0.3 (a stale policy: ratios spread over roughly [0.4, 2.5], so clipping, M2PO's
masking, GMC's capping and BAPO's bound search all act), advantages from
binary rewards with `group_advantages`. Prints a markdown table of the median and the minimum over the
repeats (after one warm-up round; the estimators take turns) and their ratios to grpo's. On a shared
machine the minimum is the steadier figure: other processes' load only ever adds time.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from algorithms import LossInputs, compute_loss, group_advantages, loss_names  # noqa: E402


def make_inputs(batch: int, tokens: int, group_size: int, seed: int, log_ratio_std: float = 0.3) -> LossInputs:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(int(0.4 * tokens), tokens + 1, (batch,), generator=gen)        # (B,)
    mask = torch.arange(tokens)[None, :] < lengths[:, None]                                  # (B, T)
    logp = -torch.empty(batch, tokens).exponential_(1.0, generator=gen)                      # (B, T)
    logp_behavior = logp + log_ratio_std * torch.randn(batch, tokens, generator=gen)
    group_ids = torch.arange(batch) // group_size                                            # (B,)
    rewards = (torch.rand(batch, generator=gen) < 0.5).float()
    adv = group_advantages(rewards, group_ids, mode="std")
    return LossInputs(logp, logp_behavior, adv, mask, group_ids)


def time_once(name: str, inp: LossInputs) -> float:
    """Wall seconds of one forward + backward."""
    logp = inp.logp.clone().requires_grad_(True)
    batch = LossInputs(logp, inp.logp_behavior, inp.advantages, inp.mask, inp.group_ids)
    start = time.perf_counter()
    out = compute_loss(name, batch, eps=0.2, aggregation="token-mean")
    out.loss.backward()
    return time.perf_counter() - start


def time_all(names: list[str], inp: LossInputs, repeats: int) -> dict[str, list[float]]:
    """Round-robin over the estimators (one warm-up round first), so that a change in machine load
    during the run hits every estimator alike instead of whichever ran at that moment."""
    for name in names:
        time_once(name, inp)
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(repeats):
        for name in names:
            times[name].append(time_once(name, inp))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512, help="B, responses per batch")
    parser.add_argument("--tokens", type=int, default=1024, help="T, padded response length")
    parser.add_argument("--group-size", type=int, default=8, help="G, responses per prompt")
    parser.add_argument("--repeats", type=int, default=9, help="timed calls per estimator (after 1 warm-up)")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--log-ratio-std", type=float, default=0.3,
                        help="std of logp − logp_behavior per token (how stale the batch is)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    inp = make_inputs(args.batch, args.tokens, args.group_size, args.seed, args.log_ratio_std)
    names = loss_names()
    results = time_all(names, inp, args.repeats)
    med = {name: statistics.median(ts) for name, ts in results.items()}
    low = {name: min(ts) for name, ts in results.items()}

    valid = int(inp.mask.sum())
    load = f", load average {os.getloadavg()[0]:.1f} at the end" if hasattr(os, "getloadavg") else ""
    print(f"B={args.batch}, T={args.tokens}, G={args.group_size}, float32, {valid} valid tokens "
          f"({valid / inp.mask.numel():.0%}), log-ratio std {args.log_ratio_std}, torch {torch.__version__}, {args.threads} threads, "
          f"{os.cpu_count()} CPUs{load}, {args.repeats} repeats\n")
    print("| estimator | median ms | min ms | median / grpo's | min / grpo's |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        print(f"| {name} | {1e3 * med[name]:.1f} | {1e3 * low[name]:.1f} | {med[name] / med['grpo']:.2f} | "
              f"{low[name] / low['grpo']:.2f} |")


if __name__ == "__main__":
    main()
