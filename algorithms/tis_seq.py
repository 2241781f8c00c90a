"""tis_seq — sequence-level truncated importance sampling (Seq-TIS) of the rollout-correction family.

References: verl verl/trainer/ppo/rollout_corr_helper.py `compute_rollout_correction_weights(rollout_is="sequence")`
(preset `decoupled_seq_is`), commit b178a3cd56f58b2d502255daba591e92833930a7; TRL trl/trainer/grpo_trainer.py
`vllm_importance_sampling_mode="sequence_truncate"`, commit f2cd57710ae345ea6428ae95363267fcf38a3dc8.
Golden-tested against TRL's own code at that commit (its default loss_type dapo): tests/data/golden/trl_grpo_is.json,
sequence_truncate.
Policies read: π_θ, π_prox and π_rollout (see rollout_correction.py).

    w_i = min(Π_t π_prox / π_rollout, C) = exp(min(clamp(Σ_t m log(π_prox/π_rollout), ±20), log C)), detached
    ℓ_{i,t} = w_i · max(−A_i ρ', −A_i clip(ρ', 1 − ε, 1 + ε_high)),   ρ' = π_θ / π_prox

Symbols → code: C = `cap` (2.0, verl's default threshold), `cap_low` (None), ε = `eps`, ε_high = `eps_high`.
With one update per batch and no mismatch: −sg(min(r_i, C)) A ∇log π_θ, which is `tic_is` at C = 1 + ε.
Deviations: as `tis` (no dual clip; the suite's aggregation).
"""
from __future__ import annotations

import math

import torch

from .common import BatchContext, LossInputs
from .registry import register
from .rollout_correction import READS, check_bounds, corrected_ppo_loss, sequence_log_weight, truncate


@register("tis_seq", trust_region="token-clip", correction="sequence-is", reads=READS,
          source="verl verl/trainer/ppo/rollout_corr_helper.py@b178a3cd56f58b2d502255daba591e92833930a7 (sequence TIS)")
def tis_seq(inp: LossInputs, ctx: BatchContext, *, eps: float, cap: float = 2.0, cap_low: float | None = None,
            eps_high: float | None = None):
    check_bounds("tis_seq", cap, cap_low, need_cap=True)
    log_w = sequence_log_weight(inp)                                                # (B, 1)
    loss, metrics = corrected_ppo_loss(inp, truncate(torch.exp(log_w), cap, cap_low), eps, eps_high, "tis")
    present = inp.mask.any(dim=1, keepdim=True)
    metrics["tis/truncated_frac"] = ((log_w > math.log(cap)) & present).float().sum() / present.sum()
    return loss, metrics
