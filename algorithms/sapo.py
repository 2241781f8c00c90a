"""sapo — Soft Adaptive Policy Optimization: a sigmoid gate on the token ratio instead of a hard clip.

Reference: SAPO (arXiv 2511.20347); code: verl verl/trainer/ppo/core_algos.py `compute_policy_loss_sapo`,
commit b178a3cd56f58b2d502255daba591e92833930a7; defaults τ_pos = 1.0, τ_neg = 1.05 from TRL
trl/trainer/grpo_config.py (`sapo_temperature_pos/neg`), commit f2cd57710ae345ea6428ae95363267fcf38a3dc8.
Golden-tested against verl's own function at b178a3cd and at verl-project/verl
1dda039b9c6311889a9c9a26040677e1254814f9 (same numbers): tests/data/golden/verl_policy_losses.json,
loss_mode sapo.
Policies read: π_θ (`logp`) and π_b (`logp_behavior`, the code's `old_log_prob`; see `cispo`).

    ρ = exp(clamp(logp − logp_behavior, ±20)),   τ = τ_pos if A > 0 else τ_neg
    f(ρ) = σ(τ (ρ − 1)) · 4 / τ,   ℓ_{i,t} = −f(ρ_{i,t}) · A_i        (f(1) = 2/τ, f′(1) = 1)

Symbols → code: τ_pos = `tau_pos`, τ_neg = `tau_neg`; `eps` is accepted and unused.
Deviations: verl always aggregates SAPO with seq-mean-token-mean; here the suite's aggregation (set the suite
to seq-mean-token-mean for verl's exact loss).
"""
from __future__ import annotations

import torch

from .common import BatchContext, LossInputs, masked_mean, token_ratio
from .registry import register


@register("sapo", uses_eps=False, trust_region="token-clip", correction="token-is", reads=("theta", "behavior"),
          source="verl verl/trainer/ppo/core_algos.py compute_policy_loss_sapo@b178a3cd56f58b2d502255daba591e92833930a7")
def sapo(inp: LossInputs, ctx: BatchContext, *, eps: float, tau_pos: float = 1.0, tau_neg: float = 1.05):
    if not (tau_pos > 0 and tau_neg > 0):
        raise ValueError(f"sapo: tau_pos and tau_neg must be > 0; got {tau_pos}, {tau_neg}")
    ratio = token_ratio(inp)                                                         # (B, T)
    adv = inp.advantages.unsqueeze(1)
    tau = torch.where(adv > 0, torch.full_like(adv, tau_pos), torch.full_like(adv, tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    loss = -gate * adv
    return loss, {"sapo/gate_mean": masked_mean(gate.detach(), inp.mask)}
