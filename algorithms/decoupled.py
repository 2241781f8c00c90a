"""decoupled — decoupled PPO (AReaL): clip against the proximal policy, correct for the behavior policy.

Reference: Fu et al., "AReaL: A Large-Scale Asynchronous Reinforcement Learning System for Language
Reasoning" (arXiv 2505.24298), decoupled PPO objective; form as in AReaL's `ppo_actor_loss_fn`
(inclusionAI/AReaL areal/utils/functional/functional.py, commit 4aef98d8d818af55b43621aaadba047ae10f4e77). The
cap default 5.0 is AReaL's documented default: its former `behave_imp_weight_cap=5.0` (token mask), which
areal/api/cli_args.py (same commit) now restores as `rejection_sampling: {level: token, action: mask,
metric: ratio, upper: 5.0}` (that dataclass's `upper` default is 5.0). `behavior_weight_cap=None` (the weight
uncapped) has no current AReaL counterpart: AReaL's `rejection_sampling: null` applies no behavior weight at
all, which is `naive` (golden-tested: tests/data/golden/areal_rejection.json, `rejection_sampling null`).
Policies read: π_θ, π_prox (`logp_proximal`) and π_rollout (`logp_rollout`, falling back to `logp_behavior`):
AReaL's "behavior" log-probs are the inference engine's.

Objective (per valid token, A broadcast over the response):
    ρ'  = π_θ / π_prox                    (the trust region is around the proximal policy)
    w   = sg(π_prox / π_b)                (behavior importance weight, detached)
    ℓ   = w · max(−A ρ', −A clip(ρ', 1 − ε, 1 + ε_high))
    dual clip c > 1 (optional): for A < 0, the clipped term is min(ℓ/w, −c A) before weighting
    weight cap (optional): tokens with w > `behavior_weight_cap` are dropped (w = 0), as AReaL filters them

Symbols → code: π_prox = `logp_proximal` (with one update per batch it is π_θ at the start of the step,
so ρ' = 1 at the update and the gradient is −w A ∇log π_θ), π_b = `rollout_log_prob` (the engine's), ε = `eps`,
ε_high = `eps_high` (clip-higher; default ε), c = `dual_clip`, cap = `behavior_weight_cap`.

Coincidence: with one update per batch and no cap, decoupled ≡ is_none (same gradient); with the cap it is
token MIS on π_prox/π_rollout with an upper bound only (`mis` with cap_low 0), the behavior weight being the
rollout-correction weight. `algorithms.coincidence` reports both.
Deviations: [ours] log-ratios clamped to ±20 (common.py), so w ≤ e^20 without a cap. AReaL normalizes
by the token count of its micro-batch; here aggregation is the suite's, with step-global denominators.
"""
from __future__ import annotations

import torch

from .common import (BatchContext, LossInputs, clipped_tokens, masked_mean, ppo_clip_token_loss,
                     prox_rollout_log_ratio, proximal_ratio)
from .registry import register


@register("decoupled", trust_region="token-clip", correction="token-is", reads=("theta", "prox", "rollout"),
          source="inclusionAI/AReaL areal/utils/functional/functional.py ppo_actor_loss_fn@4aef98d8d818af55b43621aaadba047ae10f4e77")
def decoupled(inp: LossInputs, ctx: BatchContext, *, eps: float, eps_high: float | None = None,
              dual_clip: float | None = None, behavior_weight_cap: float | None = 5.0):
    low, high = 1.0 - eps, 1.0 + (eps if eps_high is None else eps_high)
    ratio = proximal_ratio(inp)                                  # (B, T)
    loss = ppo_clip_token_loss(ratio, inp.advantages, low, high, dual_clip)
    weight = torch.exp(prox_rollout_log_ratio(inp))              # (B, T), detached
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
