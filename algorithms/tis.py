"""tis — token-level truncated importance sampling (Token-TIS) of the rollout-correction family.

References: verl verl/trainer/ppo/rollout_corr_helper.py `compute_rollout_correction_weights(rollout_is="token")`
with the decoupled PPO loss (preset `RolloutCorrectionConfig.decoupled_token_is`, docs/algo/rollout_corr.md),
commit b178a3cd56f58b2d502255daba591e92833930a7; TRL trl/trainer/grpo_trainer.py
`vllm_importance_sampling_mode="token_truncate"`, commit f2cd57710ae345ea6428ae95363267fcf38a3dc8.
Golden-tested against TRL's own code at that commit (its default loss_type dapo): tests/data/golden/trl_grpo_is.json,
token_truncate.
Policies read: π_θ, π_prox and π_rollout (see rollout_correction.py).

    w_{i,t} = min(π_prox / π_rollout, C)  (detached; lower bound `cap_low` optional, TRL's clip_min)
    ℓ_{i,t} = w_{i,t} · max(−A_i ρ', −A_i clip(ρ', 1 − ε, 1 + ε_high)),   ρ' = π_θ / π_prox

Symbols → code: C = `cap` (2.0, verl's `rollout_is_threshold` default; TRL's clip_max default is 3.0),
`cap_low` (None), ε = `eps`, ε_high = `eps_high` (default ε).
With one update per batch and no engine mismatch this is −sg(min(ρ, C)) A ∇log π_θ, ρ = π_θ/π_b: the
`tis` stalebench had before (REINFORCE with a truncated token weight), which it equals in that regime.
Deviations: verl's PPO loss also applies a dual clip (clip_ratio_c = 3) for A < 0; TRL's does not, and
neither do we (it only acts when π_θ/π_prox > 3, i.e. with several updates per batch). Aggregation is the suite's.
"""
from __future__ import annotations

import torch

from .common import BatchContext, LossInputs, masked_mean
from .registry import register
from .rollout_correction import READS, check_bounds, corrected_ppo_loss, token_log_weight, truncate


@register("tis", trust_region="token-clip", correction="token-is", reads=READS,
          source="verl verl/trainer/ppo/rollout_corr_helper.py@b178a3cd56f58b2d502255daba591e92833930a7 (token TIS)")
def tis(inp: LossInputs, ctx: BatchContext, *, eps: float, cap: float = 2.0, cap_low: float | None = None,
        eps_high: float | None = None):
    check_bounds("tis", cap, cap_low, need_cap=True)
    raw = torch.exp(token_log_weight(inp))                                          # (B, T)
    loss, metrics = corrected_ppo_loss(inp, truncate(raw, cap, cap_low), eps, eps_high, "tis")
    metrics["tis/truncated_frac"] = masked_mean((raw > cap).float(), inp.mask)
    return loss, metrics
