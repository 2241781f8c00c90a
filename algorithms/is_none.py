"""is_none — plain token importance sampling, no trust region.

ℓ_{i,t} = −ρ_{i,t} A_i with ρ = exp(logp − logp_behavior). Unbiased for the behavior-policy gradient
but unbounded in variance: the baseline that prospers and then collapses under delay.
Policies read: π_θ (`logp`) and π_b (`logp_behavior`).
Deviation: [ours] log-ratios clamped to ±20 before exp (see common.py).
"""
from __future__ import annotations

from .common import BatchContext, LossInputs, token_ratio
from .registry import register


@register("is_none", uses_eps=False, trust_region="none", correction="token-is", reads=("theta", "behavior"),
          source="plain importance sampling (no trust region)")
def is_none(inp: LossInputs, ctx: BatchContext, *, eps: float):
    ratio = token_ratio(inp)                                     # (B, T)
    loss = -inp.advantages.unsqueeze(1) * ratio
    return loss, {}                  # ratio statistics are the trainer's (policy_metrics), for every estimator
