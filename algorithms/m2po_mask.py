"""m2po_mask — M2PO's Algorithm 1 as written: a second-moment token mask on an unclipped ratio.

Reference: M2PO (arXiv 2510.01161), Algorithm 1. The authors' shipped loss is a different thing (a clip
whose bounds the second moment of the harmful tokens sets): that is `m2po` (m2po.py).
Policies read: π_θ (`logp`) and π_b (`logp_behavior`).

Objective:
    M_{i,t} = λ_{i,t}², λ = logp − logp_behavior (detached)
    keep := all valid tokens; while mean_{kept} M > τ: drop the kept token with the largest M
    ℓ_{i,t} = −keep_{i,t} · ρ_{i,t} · A_i          (no clipping)

Symbols → code: τ = `tau` (default 0.04), keep = ctx "keep", ρ = `token_ratio`.
The loop is vectorized exactly (see `second_moment_mask`): only tokens with M > τ can ever be dropped,
so those are sorted once (descending), suffix means in float64 give the number of drops, and the
smallest dropped value's ties are dropped in row-major order like the loop's first-argmax. The mask
is a statistic of the whole optimizer-step batch.
Deviations:
1. The official code (Infini-AI-Lab/M2PO verl/trainer/ppo/core_algos.py `compute_m2po_policy_loss`) instead
   measures the harmful tokens (A>0 ∧ ρ>1 or A<0 ∧ ρ<1) only and clips; that is `m2po`. This is Algorithm 1
   as the paper writes it (AReaL's `_apply_m2po_masking` is this mask too, applied to its PPO loss).
2. Dropped tokens still count in the aggregation's denominators (they contribute a zero loss).
3. [ours] log-ratios clamped to ±20 before exp (see common.py).
"""
from __future__ import annotations

import torch

from .common import BatchContext, LossInputs, masked_mean, token_log_ratio, token_ratio
from .registry import register


def second_moment_mask(m2: torch.Tensor, mask: torch.Tensor, tau: float) -> torch.Tensor:
    """Algorithm 1's kept-token mask (B, T) for second-moment statistics m2 (B, T), bool.

    Reference loop: keep := mask; while mean_{keep} m2 > τ: drop the kept token with the largest m2
    (the first in row-major order on ties). An empty kept set stops the loop.

    Vectorized: a dropped token is the kept maximum while the kept mean exceeds τ, so its m2 > τ; the
    tokens with m2 ≤ τ are always kept and enter only through their sum and count. The candidates
    (m2 > τ) are sorted once in descending order; after dropping the k largest, the kept mean is
    (base_sum + Σ sorted[k:]) / (base_count + n_cand − k), a suffix sum. The loop stops at the first
    k whose mean is ≤ τ (k = n_cand if none). The values above the k-th largest are dropped, and of the
    tokens tied with it the first ones in row-major order, as many as the loop drops.
    """
    mask = mask.bool()
    dev = m2.device
    zero = torch.zeros((), dtype=torch.float64, device=dev)
    x = torch.where(mask, m2.to(torch.float64), zero)   # (B, T); float64 so that `> tau` compares exactly
    cand = mask & (x > tau)                                                          # (B, T)
    desc = torch.sort(x[cand], descending=True).values                              # (n_cand,)
    n_cand = desc.numel()
    if n_cand == 0:
        return mask.clone()
    base_sum = torch.where(cand, zero, x).sum()                  # Σ m2 over valid tokens with m2 ≤ τ
    base_count = mask.sum() - n_cand
    suffix_sum = base_sum + torch.flip(torch.cumsum(torch.flip(desc, [0]), 0), [0])   # kept sum after k drops
    kept_count = base_count + torch.arange(n_cand, 0, -1, device=dev)
    ok = suffix_sum / kept_count <= tau                                              # (n_cand,)
    n_drop = int(torch.argmax(ok.to(torch.int8))) if bool(ok.any()) else n_cand
    if n_drop == 0:
        return mask.clone()
    cut = desc[n_drop - 1]                                                           # smallest dropped value
    n_above = int((desc[:n_drop] > cut).sum())
    n_tied = int((desc == cut).sum())
    if n_above + n_tied == n_drop:                       # every token equal to the cut is dropped
        return mask & (x < cut)
    tie = cand & (x == cut)
    tie_rank = torch.cumsum(tie.flatten(), 0).view(tie.shape)                     # 1, 2, … in row-major order
    drop = (cand & (x > cut)) | (tie & (tie_rank <= n_drop - n_above))
    return mask & ~drop


def prepare(inp: LossInputs, *, eps: float, tau: float = 0.04) -> BatchContext:
    m2 = token_log_ratio(inp).detach() ** 2                      # (B, T)
    keep = second_moment_mask(m2, inp.mask, tau)
    return BatchContext(tensors={"keep": keep}, metrics={
        "m2po/m2_before": masked_mean(m2, inp.mask),
        "m2po/m2_after": masked_mean(m2, keep),
        "m2po/masked_frac": 1.0 - masked_mean(keep.float(), inp.mask),
    })


@register("m2po_mask", prepare=prepare, uses_eps=False, trust_region="token-mask", correction="token-is",
          reads=("theta", "behavior"), source="paper 2510.01161 Algorithm 1")
def m2po_mask(inp: LossInputs, ctx: BatchContext, *, eps: float):
    ratio = token_ratio(inp)                                     # (B, T)
    loss = -(ctx.tensors["keep"] * ratio * inp.advantages.unsqueeze(1))
    return loss, {}
