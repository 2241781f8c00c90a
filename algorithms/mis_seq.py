"""mis_seq — sequence-level masked importance sampling (Seq-MIS) of the rollout-correction family.

References: TRL trl/trainer/grpo_trainer.py `vllm_importance_sampling_mode="sequence_mask"` (TRL's default
mode), commit f2cd57710ae345ea6428ae95363267fcf38a3dc8; verl preset `decoupled_seq_is_rs` ("Seq-MIS",
docs/algo/rollout_corr.md, commit b178a3cd56f58b2d502255daba591e92833930a7).
Golden-tested against TRL's own code at that commit (its default loss_type dapo): tests/data/golden/trl_grpo_is.json,
sequence_mask.
Policies read: π_θ, π_prox and π_rollout (see rollout_correction.py).

    r_w,i = Π_t π_prox / π_rollout (log space, clamped ±20),   w_i = r_w,i if cap_low ≤ r_w,i ≤ C else 0 (detached)
    ℓ_{i,t} = w_i · max(−A_i ρ', −A_i clip(ρ', 1 − ε, 1 + ε_high)),   ρ' = π_θ / π_prox

Symbols → code: C = `cap` (2.0; TRL's default clip_max 3.0), `cap_low` (None), ε = `eps`, ε_high = `eps_high`.
Deviation: verl's Seq-MIS preset rejects on a separate sequence statistic and then truncates the kept
weights at its IS threshold; this is TRL's single mask (the two agree when the bounds are the same).
"""
from __future__ import annotations

import torch

from .common import BatchContext, LossInputs
from .registry import register
from .rollout_correction import READS, check_bounds, corrected_ppo_loss, outside, sequence_log_weight


@register("mis_seq", trust_region="sequence-mask", correction="sequence-is", reads=READS,
          source="TRL trl/trainer/grpo_trainer.py@f2cd57710ae345ea6428ae95363267fcf38a3dc8 (sequence_mask)")
def mis_seq(inp: LossInputs, ctx: BatchContext, *, eps: float, cap: float = 2.0, cap_low: float | None = None,
            eps_high: float | None = None):
    check_bounds("mis_seq", cap, cap_low)
    raw = torch.exp(sequence_log_weight(inp))                                       # (B, 1)
    present = inp.mask.any(dim=1, keepdim=True)
    dropped = outside(raw, cap, cap_low) & present
    loss, metrics = corrected_ppo_loss(inp, torch.where(dropped, torch.zeros_like(raw), raw), eps, eps_high, "mis")
    metrics["mis/masked_frac"] = dropped.float().sum() / present.sum()
    return loss, metrics
