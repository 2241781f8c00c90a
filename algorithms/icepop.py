"""icepop — IcePop token filtering: the rollout-correction weight, zeroed outside [α, β].

Reference: OpenRLHF openrlhf/models/loss.py `PolicyLoss.forward` with `vllm_is_correction_type="icepop"`
and its CLI default thresholds [0.5, 5.0] (openrlhf/cli/train_ppo_ray.py `--algo.advantage.is_correction_threshold`),
commit 3c3be6234e0cb353e76bb8019947db9dfe99fca7. (IcePop: the Ring-1T / "Every step evolves" report.)
Policies read: π_θ, π_prox (OpenRLHF's old_log_probs) and π_rollout (its rollout_log_probs).

    ρ_w = sg(π_prox / π_rollout) per token,   w = ρ_w · 1[α ≤ ρ_w ≤ β]
    ℓ_{i,t} = w · max(−A ρ', −A clip(ρ', 1 − ε, 1 + ε_high)),   ρ' = π_θ / π_prox

Symbols → code: α = `cap_low` (0.5), β = `cap` (5.0), ε = `eps`, ε_high = `eps_high` (OpenRLHF's clip_eps_high).
Same formula as `mis` with both bounds: kept as its own entry because the field ships it under this name
with these bounds. Deviations: OpenRLHF's optional dual clip is off (its default); the suite's aggregation.
OpenRLHF clamps the policy log-ratio to ±20 but not the correction's; we clamp both (common.py).
"""
from __future__ import annotations

import torch

from .common import BatchContext, LossInputs, masked_mean
from .registry import register
from .rollout_correction import READS, check_bounds, corrected_ppo_loss, outside, token_log_weight


@register("icepop", trust_region="token-mask", correction="token-is", reads=READS,
          source="OpenRLHF openrlhf/models/loss.py@3c3be6234e0cb353e76bb8019947db9dfe99fca7 (icepop)")
def icepop(inp: LossInputs, ctx: BatchContext, *, eps: float, cap: float = 5.0, cap_low: float = 0.5,
           eps_high: float | None = None):
    check_bounds("icepop", cap, cap_low)
    raw = torch.exp(token_log_weight(inp))                                          # (B, T)
    dropped = outside(raw, cap, cap_low) & inp.mask
    loss, metrics = corrected_ppo_loss(inp, torch.where(dropped, torch.zeros_like(raw), raw), eps, eps_high, "icepop")
    metrics["icepop/masked_frac"] = masked_mean(dropped.float(), inp.mask)
    return loss, metrics
