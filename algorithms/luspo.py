"""luspo — Length-Unbiased Sequence Policy Optimization: GSPO's clipped sequence ratio, summed over tokens.

Reference: LUSPO (arXiv 2602.05261); code: TRL trl/trainer/grpo_trainer.py `_compute_loss` with
`loss_type="luspo"` and `importance_sampling_level="sequence"` (the paper's setting; TRL warns otherwise),
commit f2cd57710ae345ea6428ae95363267fcf38a3dc8 (the same lines in release v1.9.0,
35def3ee000a87f6839e66f4b7749b06274ed1b3, and in the PyPI wheel trl 1.16.0, grpo_trainer.py L3112-3121 and
L3175-3182, where the aggregation reads `(per_token_loss * mask).sum(-1).mean()`: the same value).
Policies read: π_θ (`logp`) and π_b (`logp_behavior`, TRL's `old_per_token_logps`, as for `gspo` and `sapo`).

    s_i = exp(Σ_t m λ / max(|o_i|, 1))  (with grad),   λ = logp − logp_behavior
    ℓ_i = −min(min(s_i, δ) A_i, clip(s_i, 1 − ε, 1 + ε_high) A_i)      (δ: TRL's optional `delta`; None: no cap)
    TRL's loss: (1/B) Σ_i |o_i| ℓ_i    (`(per_token_loss * mask.sum(1, keepdim=True)).mean()`)

Here ℓ_i is broadcast over the response's tokens and reduced by the suite's aggregation, so
"seq-mean-token-sum-norm" gives TRL's loss divided by K (`max_tokens`), and "token-mean" gives it times
B/Σ_i |o_i| (one factor per batch): every token of every response weighs the same, LUSPO's length-unbiased
weighting. "seq-mean-token-mean" gives GSPO's mean over responses instead. Where unclipped, each token's
gradient is −A_i s_i / (the aggregation's denominator, N tokens or K·B), whatever the response's length.
Symbols → code: ε = `eps` (TRL's `epsilon`, default 0.2), ε_high = `eps_high` (TRL's `epsilon_high`; None: ε),
δ = `delta` (TRL's `delta`, None). The paper's values, per TRL's docs (section 5.1): ε = 2e-3, ε_high = 2.5e-3.
Coincidence: at eps_high = None and delta = None this is `gspo` with eps_low = eps_high = ε.
Deviations: the suite's aggregation (above). TRL multiplies every loss but VESPO's by its vLLM importance weight
when `use_vllm` (default mode sequence_mask, clip_max 3.0); as for grpo, gspo and sapo here, that correction is
a separate estimator (`mis_seq`), not part of this one. Token-level LUSPO (TRL's warned-against
importance_sampling_level="token") is not offered. [ours] the mean log-ratio is clamped to ±20 before exp.
"""
from __future__ import annotations

import torch

from .common import BatchContext, LossInputs, length_normalized_ratio, sequence_clip_metrics
from .registry import register


@register("luspo", trust_region="sequence-clip", correction="sequence-is", reads=("theta", "behavior"),
          source="TRL trl/trainer/grpo_trainer.py (loss_type luspo)@f2cd57710ae345ea6428ae95363267fcf38a3dc8")
def luspo(inp: LossInputs, ctx: BatchContext, *, eps: float, eps_high: float | None = None,
          delta: float | None = None):
    low, high = 1.0 - eps, 1.0 + (eps if eps_high is None else eps_high)
    s = length_normalized_ratio(inp)                                                # TRL's coef_1, (B,)
    unclipped = s if delta is None else s.clamp(max=delta)
    adv = inp.advantages
    loss = -torch.minimum(unclipped * adv, s.clamp(low, high) * adv)               # (B,)
    return loss.unsqueeze(1).expand_as(inp.logp), sequence_clip_metrics("luspo", s, inp, low, high)
