"""tic_is — truncated trajectory importance sampling on the REINFORCE surrogate (was `tic_grpo`).

Reference: the "trajectory-wise clipping" baseline as the GMC-GRPO paper (arXiv 2610.01896) frames TIC-GRPO
(arXiv 2508.02833) [ours: our reading of that framing]. The published clipped form is `tic_grpo`.
Policies read: π_θ (`logp`, through the surrogate) and π_b (`logp_behavior`, in the weight).

Objective:
    Λ_i = Σ_t m_{i,t} (logp − logp_behavior),   w_i = min(r_i, 1 + ε) = exp(min(Λ_i, log(1 + ε))), detached
    ℓ_{i,t} = −w_i · A_i · logp_{i,t}      ⇒  ∇ = (1/…) Σ_i w_i A_i ∇log π_θ(o_i)

Symbols → code: Λ = `traj_log_ratio`, ε = `eps`, w = ctx "weight".
Deviations:
1. [ours] The TIC paper also describes an upper-only PPO form and a length-corrected group
   normalization that we could not verify; we implement the GMC paper's baseline form above.
2. Computed in log space so that Λ of hundreds of tokens cannot overflow.
"""
from __future__ import annotations

import math

import torch

from .common import BatchContext, LossInputs, reinforce_token_loss, traj_log_ratio
from .registry import register


def prepare(inp: LossInputs, *, eps: float) -> BatchContext:
    log_r = traj_log_ratio(inp)                                  # (B,)
    log_cap = math.log1p(eps)
    weight = torch.exp(torch.clamp(log_r, max=log_cap))
    return BatchContext(tensors={"weight": weight}, metrics={
        "tic/clipped_frac": (log_r > log_cap).float().mean(),
        "tic/weight_mean": weight.mean(),
        "tic/log_ratio_max": log_r.max(),
    })


@register("tic_is", prepare=prepare, trust_region="none", correction="sequence-is", reads=("theta", "behavior"),
          source="ours: the GMC paper's (2610.01896) framing of TIC-GRPO 2508.02833")
def tic_is(inp: LossInputs, ctx: BatchContext, *, eps: float):
    return reinforce_token_loss(ctx.tensors["weight"], inp), {}
