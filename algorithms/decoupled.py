"""decoupled — decoupled PPO (AReaL): clip against the proximal policy, correct for the behavior policy.

Reference: Fu et al., "AReaL: A Large-Scale Asynchronous Reinforcement Learning System for Language
Reasoning" (arXiv 2505.24298), decoupled PPO objective; form as in AReaL's `ppo_actor_loss_fn`.

Objective (per valid token, A broadcast over the response):
    ρ'  = π_θ / π_prox                    (the trust region is around the proximal policy)
    w   = sg(π_prox / π_b)                (behavior importance weight, detached)
    ℓ   = w · max(−A ρ', −A clip(ρ', 1 − ε, 1 + ε_high))
    dual clip c > 1 (optional): for A < 0, the clipped term is min(ℓ/w, −c A) before weighting
    weight cap (optional): tokens with w > `behavior_weight_cap` are dropped (w = 0), as AReaL filters them

Symbols → code: π_prox = `logp_proximal` (with one update per batch it is π_θ at the start of the step,
so ρ' = 1 at the update and the gradient is −w A ∇log π_θ), π_b = `logp_behavior`, ε = `eps`,
ε_high = `eps_high` (clip-higher; default ε), c = `dual_clip`, cap = `behavior_weight_cap`.

Deviations: [ours] log-ratios clamped to ±20 (common.py), so w ≤ e^20 without a cap. AReaL normalizes
by the token count of its micro-batch; here aggregation is the suite's, with step-global denominators.
"""
from __future__ import annotations

import torch

from .common import (MAX_TOKEN_LOG_RATIO, BatchContext, LossInputs, clipped_tokens, masked_mean,
                     ppo_clip_token_loss, proximal_log_prob, proximal_ratio)
from .registry import register


@register("decoupled")
def decoupled(inp: LossInputs, ctx: BatchContext, *, eps: float, eps_high: float | None = None,
              dual_clip: float | None = None, behavior_weight_cap: float | None = None):
    low, high = 1.0 - eps, 1.0 + (eps if eps_high is None else eps_high)
    ratio = proximal_ratio(inp)                                  # (B, T)
    loss = ppo_clip_token_loss(ratio, inp.advantages, low, high, dual_clip)
    behavior_log = ((proximal_log_prob(inp) - inp.logp_behavior) * inp.mask).clamp(-MAX_TOKEN_LOG_RATIO,
                                                                                   MAX_TOKEN_LOG_RATIO)
    weight = torch.exp(behavior_log)                             # (B, T), detached
    dropped = torch.zeros_like(inp.mask)
    if behavior_weight_cap is not None:
        if behavior_weight_cap <= 1.0:
            raise ValueError(f"behavior_weight_cap must be > 1; got {behavior_weight_cap}")
        dropped = (weight > behavior_weight_cap) & inp.mask
        weight = torch.where(dropped, torch.zeros_like(weight), weight)
    clip_low, clip_high = clipped_tokens(ratio, inp.advantages, low, high)
    return weight * loss, {"decoupled/clip_frac": masked_mean((clip_low | clip_high).float(), inp.mask),
                           "decoupled/behavior_weight_mean": masked_mean(weight, inp.mask),
                           "decoupled/dropped_frac": masked_mean(dropped.float(), inp.mask)}
