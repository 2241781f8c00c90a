"""dppo — DPPO-style token mask on the probability difference, with a squared-log-ratio regularizer (prime-rl's default loss).

Reference: prime-rl src/prime_rl/trainer/rl/loss.py `default_loss_fn` ("DPPO+KL": DPPO-Binary TV, arXiv
2602.04879; Kimi-K2.5 KL, arXiv 2602.02276); defaults from packages/prime-rl-configs/src/prime_rl/configs/trainer.py
(dppo_mask_low = dppo_mask_high = 0.2, adv_tau = 1.0, kl_tau = 1e-3), commit 559b44772e471d1538537b8805cc77f3824a5e64.
Policies read: π_θ (`logp`) and π_rollout (prime-rl's `inference_logprobs`, the engine's log-probs of the
stale weights: with one update per batch, its ratio is π_θ / π_rollout, not π_θ / π_prox).

    ρ = π_θ / π_rollout,   Δp = π_θ − π_rollout (token probabilities, no grad)
    masked: A > 0 ∧ Δp > δ_high,  or  A ≤ 0 ∧ Δp < −δ_low
    ℓ_{i,t} = −(1 − masked) · A_i ρ_{i,t} + κ (log ρ_{i,t})²

Symbols → code: δ_low = `mask_low`, δ_high = `mask_high`, κ = `kl_tau`; `eps` is accepted and unused.
Deviations: prime-rl sums the per-token loss per sample and normalizes elsewhere; here the suite's
aggregation. The advantage temperature adv_tau is fixed at its default 1. [ours] log-ratio clamped to ±20.
"""
from __future__ import annotations

import torch

from .common import MAX_TOKEN_LOG_RATIO, BatchContext, LossInputs, masked_mean, rollout_log_prob
from .registry import register


@register("dppo", uses_eps=False, trust_region="token-mask", correction="token-is", reads=("theta", "rollout"),
          source="PrimeIntellect-ai/prime-rl src/prime_rl/trainer/rl/loss.py default_loss_fn@559b44772e471d1538537b8805cc77f3824a5e64")
def dppo(inp: LossInputs, ctx: BatchContext, *, eps: float, mask_low: float = 0.2, mask_high: float = 0.2,
         kl_tau: float = 1e-3):
    if not (mask_low >= 0 and mask_high >= 0 and kl_tau >= 0):
        raise ValueError(f"dppo: mask_low, mask_high and kl_tau must be >= 0; got {mask_low}, {mask_high}, {kl_tau}")
    logp_rollout = rollout_log_prob(inp)
    log_ratio = ((inp.logp - logp_rollout) * inp.mask).clamp(-MAX_TOKEN_LOG_RATIO, MAX_TOKEN_LOG_RATIO)
    ratio = torch.exp(log_ratio)                                                     # (B, T)
    probs_diff = torch.exp(inp.logp.detach()) - torch.exp(logp_rollout)
    positive = (inp.advantages > 0).unsqueeze(1)
    masked = torch.where(positive, probs_diff > mask_high, probs_diff < -mask_low) & inp.mask
    keep = (~masked).to(ratio.dtype)
    loss = -keep * inp.advantages.unsqueeze(1) * ratio + kl_tau * log_ratio ** 2
    return loss, {"dppo/masked_frac": masked_mean(masked.float(), inp.mask),
                  "dppo/masked_high_frac": masked_mean((masked & positive).float(), inp.mask)}
