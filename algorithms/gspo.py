"""gspo — Group Sequence Policy Optimization: PPO clip on a length-normalized sequence ratio.

Reference: GSPO (arXiv 2507.18071). Policies read: π_θ (`logp`) and π_b (`logp_behavior`).
verl's `compute_policy_loss_gspo` (verl/trainer/ppo/core_algos.py; its token ratio sg[s_i] π_θ/sg[π_θ] has the same
value and, under seq-mean-token-mean, the same gradient) is golden-tested at volcengine/verl
b178a3cd56f58b2d502255daba591e92833930a7 and verl-project/verl 1dda039b9c6311889a9c9a26040677e1254814f9:
tests/data/golden/verl_policy_losses.json, loss_mode gspo (verl clamps the log sequence ratio above at 10, we at ±20).
    s_i = exp(Λ_i / |o_i|)  (with grad),   ℓ_i = max(−A_i s_i, −A_i clip(s_i, 1 − ε_low, 1 + ε_high))
The sequence loss is broadcast over the response's tokens and reduced by the suite's aggregation;
"seq-mean-token-mean" gives the paper's exact form.
Deviation: GSPO's own clip range (ε_low = 3e-4, ε_high = 4e-4, paper defaults) is used regardless of
the grid's `eps`, which is accepted and unused; set `eps_low`/`eps_high` to change it.
"""
from __future__ import annotations

from .common import BatchContext, LossInputs, length_normalized_ratio, ppo_clip_token_loss, sequence_clip_metrics
from .registry import register


@register("gspo", uses_eps=False, trust_region="sequence-clip", correction="sequence-is", reads=("theta", "behavior"),
          source="paper 2507.18071")
def gspo(inp: LossInputs, ctx: BatchContext, *, eps: float, eps_low: float = 3e-4, eps_high: float = 4e-4):
    seq_ratio = length_normalized_ratio(inp)                      # (B,)
    low, high = 1.0 - eps_low, 1.0 + eps_high
    loss = ppo_clip_token_loss(seq_ratio.unsqueeze(1), inp.advantages, low, high).expand_as(inp.logp)
    return loss, sequence_clip_metrics("gspo", seq_ratio, inp, low, high)
