"""topr — Tapered Off-Policy REINFORCE.

Reference: TOPR (arXiv 2503.14286). Policies read: π_θ (`logp`) and π_b (`logp_behavior`).
    w_i = 1 if A_i ≥ 0, else clip(r_i, 0, 1) = exp(min(Λ_i, 0)); detached
    ℓ_{i,t} = −w_i · A_i · logp_{i,t}
Deviation: the paper splits by the sign of the reward; with group-relative advantages we split by the
sign of A (a response better than its group is a "positive"). `eps` is accepted and unused.
"""
from __future__ import annotations

import torch

from .common import BatchContext, LossInputs, reinforce_token_loss, traj_log_ratio
from .registry import register


def prepare(inp: LossInputs, *, eps: float) -> BatchContext:
    log_r = traj_log_ratio(inp)                                  # (B,)
    negative = inp.advantages < 0
    weight = torch.where(negative, torch.exp(torch.clamp(log_r, max=0.0)), torch.ones_like(log_r))
    frac = ((weight < 1) & negative).float().mean()
    return BatchContext(tensors={"weight": weight}, metrics={"topr/tapered_frac": frac})


@register("topr", prepare=prepare, uses_eps=False, trust_region="none", correction="sequence-is",
          reads=("theta", "behavior"), source="paper 2503.14286")
def topr(inp: LossInputs, ctx: BatchContext, *, eps: float):
    return reinforce_token_loss(ctx.tensors["weight"], inp), {}
