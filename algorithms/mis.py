"""mis — token-level masked importance sampling (Token-MIS) of the rollout-correction family.

Reference: TRL trl/trainer/grpo_trainer.py `vllm_importance_sampling_mode="token_mask"` (a weight outside
[clip_min, clip_max] is set to 0), commit f2cd57710ae345ea6428ae95363267fcf38a3dc8; verl's rejection
sampling at token level (rollout_corr_helper.py `compute_rollout_rejection_mask`, commit
b178a3cd56f58b2d502255daba591e92833930a7) is the same filter on log(π_old/π_rollout).
Golden-tested against TRL's own code at that commit (its default loss_type dapo): tests/data/golden/trl_grpo_is.json,
token_mask.
Policies read: π_θ, π_prox and π_rollout (see rollout_correction.py).

    ρ_w = π_prox / π_rollout per token,   w_{i,t} = ρ_w if cap_low ≤ ρ_w ≤ C else 0   (detached)
    ℓ_{i,t} = w_{i,t} · max(−A_i ρ', −A_i clip(ρ', 1 − ε, 1 + ε_high)),   ρ' = π_θ / π_prox

Symbols → code: C = `cap` (2.0, as `tis`; TRL's clip_max default is 3.0), `cap_low` (None: TRL's clip_min
default), ε = `eps`, ε_high = `eps_high`.
Coincidences: `decoupled` with behavior_weight_cap = C is this estimator at cap_low None; `icepop` is this
estimator at [0.5, 5.0]. Masked tokens still count in the aggregation's denominators (as in TRL and AReaL).
"""
from __future__ import annotations

import torch

from .common import BatchContext, LossInputs, masked_mean
from .registry import register
from .rollout_correction import READS, check_bounds, corrected_ppo_loss, outside, token_log_weight


@register("mis", trust_region="token-mask", correction="token-is", reads=READS,
          source="TRL trl/trainer/grpo_trainer.py@f2cd57710ae345ea6428ae95363267fcf38a3dc8 (token_mask)")
def mis(inp: LossInputs, ctx: BatchContext, *, eps: float, cap: float = 2.0, cap_low: float | None = None,
        eps_high: float | None = None):
    check_bounds("mis", cap, cap_low)
    raw = torch.exp(token_log_weight(inp))                                          # (B, T)
    dropped = outside(raw, cap, cap_low) & inp.mask
    loss, metrics = corrected_ppo_loss(inp, torch.where(dropped, torch.zeros_like(raw), raw), eps, eps_high, "mis")
    metrics["mis/masked_frac"] = masked_mean(dropped.float(), inp.mask)
    return loss, metrics
