"""ipo — prime-rl's IPO loss: a symmetric mask on the probability difference, with a squared-log-ratio regularizer.

Reference: prime-rl src/prime_rl/trainer/rl/loss.py `ipo_loss_fn`; defaults from
packages/prime-rl-configs/src/prime_rl/configs/trainer.py `IPOLossConfig` (ipo_threshold = 0.1, adv_tau = 1.0,
kl_tau = 1e-3), commit 559b44772e471d1538537b8805cc77f3824a5e64. Policies read: π_θ (`logp`) and π_rollout
(prime-rl's `inference_logprobs`), as `dppo`, whose advantage-signed mask this one makes symmetric.

    ρ = π_θ / π_rollout,   Δp = π_θ − π_rollout (token probabilities, no grad)
    masked: |Δp| > δ
    ℓ_{i,t} = −(1 − masked) · A_i ρ_{i,t} + κ (log ρ_{i,t})²

Symbols → code: δ = `threshold` (ipo_threshold), κ = `kl_tau`; `eps` is accepted and unused.
Golden test: tests/test_algorithms_golden.py against `ipo_loss_fn` (tests/data/golden/prime_rl_loss.json).
Deviations: prime-rl sums the per-token loss per sample and normalizes elsewhere; here the suite's aggregation
(the golden test divides prime-rl's summed loss by the token count). The advantage temperature adv_tau is fixed at
its default 1. [ours] log-ratio clamped to ±20 (prime-rl does not clamp).
"""
from __future__ import annotations

import torch

from .common import MAX_TOKEN_LOG_RATIO, BatchContext, LossInputs, masked_mean, rollout_log_prob
from .registry import register


@register("ipo", uses_eps=False, trust_region="token-mask", correction="token-is", reads=("theta", "rollout"),
          source="PrimeIntellect-ai/prime-rl src/prime_rl/trainer/rl/loss.py ipo_loss_fn@559b44772e471d1538537b8805cc77f3824a5e64")
def ipo(inp: LossInputs, ctx: BatchContext, *, eps: float, threshold: float = 0.1, kl_tau: float = 1e-3):
    if not (threshold >= 0 and kl_tau >= 0):
        raise ValueError(f"ipo: threshold and kl_tau must be >= 0; got {threshold}, {kl_tau}")
    logp_rollout = rollout_log_prob(inp)
    log_ratio = ((inp.logp - logp_rollout) * inp.mask).clamp(-MAX_TOKEN_LOG_RATIO, MAX_TOKEN_LOG_RATIO)
    ratio = torch.exp(log_ratio)                                                     # (B, T)
    masked = (torch.exp(inp.logp.detach()) - torch.exp(logp_rollout)).abs().gt(threshold) & inp.mask
    keep = (~masked).to(ratio.dtype)
    loss = -keep * inp.advantages.unsqueeze(1) * ratio + kl_tau * log_ratio ** 2
    return loss, {"ipo/masked_frac": masked_mean(masked.float(), inp.mask)}
