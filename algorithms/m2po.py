"""m2po — second-moment trust region (M2PO).

Reference: M2PO (arXiv 2510.01161), Algorithm 1.

Objective:
    M_{i,t} = λ_{i,t}², λ = logp − logp_behavior (detached)
    keep := all valid tokens; while mean_{kept} M > τ: drop the kept token with the largest M
    ℓ_{i,t} = −keep_{i,t} · ρ_{i,t} · A_i          (no clipping)

Symbols → code: τ = `tau` (default 0.04), keep = ctx "keep", ρ = `token_ratio`.
The loop is vectorized exactly: sort M once (descending, stable, so ties drop in token order like the
loop's first-argmax), compute suffix means of the sorted values in float64, and drop the shortest
prefix whose remaining mean is ≤ τ. The mask is a statistic of the whole optimizer-step batch.
Deviations:
1. The official code instead bounds the "harmful" tokens (A>0 ∧ ρ>1 or A<0 ∧ ρ<1) and clips there; we
   implement Algorithm 1 as written (no `variant` option).
2. Dropped tokens still count in the aggregation's denominators (they contribute a zero loss).
3. [ours] log-ratios clamped to ±20 before exp (see common.py).
"""
from __future__ import annotations

import torch

from .common import BatchContext, LossInputs, masked_mean, token_log_ratio, token_ratio
from .registry import register


def second_moment_mask(m2: torch.Tensor, mask: torch.Tensor, tau: float) -> torch.Tensor:
    """Algorithm 1's kept-token mask (B, T) for second-moment statistics m2 (B, T)."""
    values = m2[mask].to(torch.float64)                          # (N,) valid tokens in row-major order
    n = values.numel()
    order = torch.sort(values, descending=True, stable=True).indices
    sorted_vals = values[order]
    suffix_sum = torch.flip(torch.cumsum(torch.flip(sorted_vals, [0]), 0), [0])        # Σ s[k:]
    suffix_mean = suffix_sum / torch.arange(n, 0, -1, dtype=torch.float64)             # mean of s[k:]
    ok = suffix_mean <= tau
    n_drop = int(torch.argmax(ok.to(torch.int8))) if bool(ok.any()) else n
    keep_flat = torch.ones(n, dtype=torch.bool)
    keep_flat[order[:n_drop]] = False
    keep = torch.zeros_like(mask)
    keep[mask] = keep_flat
    return keep


def prepare(inp: LossInputs, *, eps: float, tau: float = 0.04) -> BatchContext:
    m2 = token_log_ratio(inp).detach() ** 2                      # (B, T)
    keep = second_moment_mask(m2, inp.mask, tau)
    return BatchContext(tensors={"keep": keep}, metrics={
        "m2po/m2_before": masked_mean(m2, inp.mask),
        "m2po/m2_after": masked_mean(m2, keep),
        "m2po/masked_frac": 1.0 - masked_mean(keep.float(), inp.mask),
    })


@register("m2po", prepare=prepare)
def m2po(inp: LossInputs, ctx: BatchContext, *, eps: float):
    ratio = token_ratio(inp)                                     # (B, T)
    loss = -(ctx.tensors["keep"] * ratio * inp.advantages.unsqueeze(1))
    return loss, {}
