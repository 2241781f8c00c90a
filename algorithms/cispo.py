"""cispo — CISPO (MiniMax-M1): REINFORCE with a clipped, detached token importance weight.

Reference: MiniMax-M1 (arXiv 2506.13585); code: verl verl/trainer/ppo/core_algos.py `compute_policy_loss_cispo`,
commit b178a3cd56f58b2d502255daba591e92833930a7 (TRL's `loss_type="cispo"` clips the upper side only, at
`epsilon_high`).
Golden-tested against verl's own function at b178a3cd and at verl-project/verl
1dda039b9c6311889a9c9a26040677e1254814f9 (same numbers): tests/data/golden/verl_policy_losses.json,
loss_mode cispo.
Policies read: π_θ (`logp`) and π_b (`logp_behavior`, verl's `old_log_prob`: in verl's bypass mode the
sampling policy's log-probs, which is the stale-batch reading stalebench gives every policy loss, as `grpo`).

    ρ = exp(clamp(logp − logp_behavior, ±20)),   ℓ_{i,t} = −sg(clip(ρ, 1 − ε_low, 1 + ε_high)) · A_i · logp_{i,t}

Symbols → code: ε_low = `eps_low` (default ε), ε_high = `eps_high` (default ε): verl's clip_ratio_low/high,
which default to its clip_ratio 0.2. (The paper sets ε_low large — effectively no lower clip — and tunes ε_high;
set eps_low ≥ 1 for that.)
Deviations: none in the formula; the suite's aggregation. No gradient is ever zeroed (the clipped weight
keeps the token's gradient), hence trust region "none".
"""
from __future__ import annotations

import torch

from .common import BatchContext, LossInputs, masked_mean, token_ratio
from .registry import register


@register("cispo", trust_region="none", correction="token-is", reads=("theta", "behavior"),
          source="verl verl/trainer/ppo/core_algos.py compute_policy_loss_cispo@b178a3cd56f58b2d502255daba591e92833930a7")
def cispo(inp: LossInputs, ctx: BatchContext, *, eps: float, eps_low: float | None = None,
          eps_high: float | None = None):
    low = 1.0 - (eps if eps_low is None else eps_low)
    high = 1.0 + (eps if eps_high is None else eps_high)
    ratio = token_ratio(inp).detach()                                                # (B, T)
    weight = torch.clamp(ratio, min=low, max=high)
    loss = -weight * inp.advantages.unsqueeze(1) * inp.logp
    return loss, {"cispo/clip_frac": masked_mean((weight != ratio).float(), inp.mask)}
