"""seq_mask_tis — OpenRLHF's and NeMo-RL's seq-mask-tis: a geometric-mean sequence filter, then raw token IS weights.

References: OpenRLHF openrlhf/models/loss.py `PolicyLoss.forward` with `vllm_is_correction_type="seq-mask-tis"`
and its CLI default thresholds [0.5, 5.0] (openrlhf/cli/train_ppo_ray.py `--algo.advantage.is_correction_threshold`),
commit 3c3be6234e0cb353e76bb8019947db9dfe99fca7; NeMo-RL nemo_rl/algorithms/loss/loss_functions.py
`truncated_importance_sampling_type: "seq-mask-tis"` (bounds `truncated_importance_sampling_ratio_min` and
`truncated_importance_sampling_ratio`, reference bounds 0.999–1.002 in its comments), commit
7ea279abfbeb698b092856d0dab61e7cf39bc909. Policies read: π_θ, π_prox (their old_log_probs) and π_rollout.

    λ = log(π_prox / π_rollout) per token,   g_i = exp(Σ_t m λ / Σ_t m)   (the geometric-mean ratio)
    w_{i,t} = 1[α ≤ g_i ≤ β] · e^{λ_{i,t}}   (detached; not truncated, despite the name)
    ℓ_{i,t} = w_{i,t} · max(−A ρ', −A clip(ρ', 1 − ε, 1 + ε_high)),   ρ' = π_θ / π_prox

Symbols → code: α = `cap_low` (0.5), β = `cap` (5.0), ε = `eps`, ε_high = `eps_high`. A filtered response's
tokens still count in the aggregation's denominators, as in OpenRLHF and NeMo-RL (they multiply the loss by 0).
Golden tests: tests/test_algorithms_golden.py against OpenRLHF's PolicyLoss (tests/data/golden/openrlhf_policy_loss.json)
and NeMo-RL's ClippedPGLossFn (tests/data/golden/nemo_rl_clipped_pg.json; NeMo-RL divides by its token count + 1e-8).
Deviations: OpenRLHF clamps the policy log-ratio to ±20 but not the correction's; we clamp both (common.py).
NeMo-RL also zeroes NaN/inf log-ratios (ours refuses them in `validate`). OpenRLHF's optional dual clip is off
(its default).
"""
from __future__ import annotations

import torch

from .common import BatchContext, LossInputs, masked_mean
from .registry import register
from .rollout_correction import READS, check_bounds, corrected_ppo_loss, token_log_weight


@register("seq_mask_tis", trust_region="sequence-mask", correction="token-is", reads=READS,
          source="OpenRLHF openrlhf/models/loss.py@3c3be6234e0cb353e76bb8019947db9dfe99fca7 (seq-mask-tis)")
def seq_mask_tis(inp: LossInputs, ctx: BatchContext, *, eps: float, cap: float = 5.0, cap_low: float = 0.5,
                 eps_high: float | None = None):
    check_bounds("seq_mask_tis", cap, cap_low)
    lam = token_log_weight(inp)                                                     # (B, T)
    geo = torch.exp(lam.sum(dim=1, keepdim=True) / inp.mask.sum(dim=1, keepdim=True).clamp_min(1))   # (B, 1)
    kept = (geo >= cap_low) & (geo <= cap)
    loss, metrics = corrected_ppo_loss(inp, torch.exp(lam) * kept, eps, eps_high, "seq_mask_tis")
    present = inp.mask.any(dim=1, keepdim=True)
    metrics["seq_mask_tis/seq_masked_frac"] = masked_mean((~kept & present).float().squeeze(1), present.squeeze(1))
    return loss, metrics
