"""opsm — off-policy sequence masking (DeepSeek-V3.2): drop negative-advantage responses that drifted.

References: DeepSeek-V3.2 (arXiv 2512.02556), Equation 9; code: TRL trl/trainer/grpo_trainer.py
`GRPOTrainer.get_off_policy_mask` and `off_policy_mask_threshold`, commit f2cd57710ae345ea6428ae95363267fcf38a3dc8.
Golden-tested against TRL's own code at that commit (its default loss_type dapo): tests/data/golden/trl_grpo_is.json,
off_policy_mask_threshold, with vllm_importance_sampling_correction false.
Policies read: π_θ (detached, in the mask; with grad, in the loss), π_prox (the PPO clip's π_old, as TRL's
recomputed `old_per_token_logps`) and π_rollout (TRL's `sampling_per_token_logps`).

    D_i = Σ_t m (log π_rollout − log sg(π_θ)) / Σ_t m        (mean per-token KL(π_rollout ‖ π_θ) estimate)
    M_i = 1 if A_i ≥ 0 or D_i ≤ δ, else 0
    ℓ_{i,t} = M_i · max(−A_i ρ', −A_i clip(ρ', 1 − ε, 1 + ε_high)),   ρ' = π_θ / π_prox

Symbols → code: δ = `threshold` (0.5: TRL's documented example value; TRL's default None disables the mask),
ε = `eps`, ε_high = `eps_high`.
Deviations: TRL multiplies in its vLLM importance-sampling weight as well when that is enabled; this entry is
the mask alone (combine with a correction by choosing `mis_seq` etc. instead). Masked responses still count
in the aggregation's denominators (as in TRL). The mask is per response, so no batch statistic is needed.
"""
from __future__ import annotations

import torch

from .common import (BatchContext, LossInputs, clipped_tokens, masked_mean, ppo_clip_token_loss, proximal_ratio,
                     rollout_log_prob)
from .registry import register


@register("opsm", trust_region="sequence-mask", correction="none", reads=("theta", "prox", "rollout"),
          source="TRL trl/trainer/grpo_trainer.py get_off_policy_mask@f2cd57710ae345ea6428ae95363267fcf38a3dc8")
def opsm(inp: LossInputs, ctx: BatchContext, *, eps: float, threshold: float = 0.5, eps_high: float | None = None):
    if not threshold >= 0:
        raise ValueError(f"opsm: threshold must be >= 0 (the KL bound δ); got {threshold}")
    lengths = inp.mask.sum(dim=1).clamp_min(1)                                       # (B,)
    drift = ((rollout_log_prob(inp) - inp.logp.detach()) * inp.mask).sum(dim=1) / lengths
    keep = (inp.advantages >= 0) | (drift <= threshold)                               # (B,)
    low, high = 1.0 - eps, 1.0 + (eps if eps_high is None else eps_high)
    ratio = proximal_ratio(inp)                                                      # (B, T)
    loss = keep.unsqueeze(1) * ppo_clip_token_loss(ratio, inp.advantages, low, high)
    clip_low, clip_high = clipped_tokens(ratio, inp.advantages, low, high)
    present = inp.mask.any(dim=1)
    return loss, {"opsm/masked_frac": masked_mean((~keep).float(), present),
                  "opsm/drift_mean": masked_mean(drift, present),
                  "opsm/clip_frac": masked_mean((clip_low | clip_high).float(), inp.mask)}
