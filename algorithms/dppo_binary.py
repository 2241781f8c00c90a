"""dppo_binary — verl's DPPO-Binary-TV / DPPO-Binary-KL: a divergence mask around π_prox on a truncated-IS REINFORCE loss.

Reference: verl verl/trainer/ppo/core_algos.py `compute_policy_loss_dppo_tv` and `compute_policy_loss_dppo_kl`
(arXiv 2602.04879), commit 1dda039b9c6311889a9c9a26040677e1254814f9 (verl-project/verl); the truncation level
is the actor config's `clip_ratio_c`, 3.0 by default (verl/workers/config/actor.py, actor.yaml), which the
function reads before its own fallback of 20.0. Policies read: π_θ and π_prox (verl's old_log_prob), and
π_rollout when `is_level` applies verl's rollout IS weight (algorithms/rejection.py), as its decoupled mode does.

    ρ = π_θ / π_prox,  p = π_θ, p' = π_prox (token probabilities, no grad)
    "tv":  valid = (p − p' ≤ δ_high) if A > 0 else (p − p' ≥ −δ_low)
    "kl":  D = p' log(p'/p) + (1 − p') log((1 − p' + 1e-8) / (1 − p + 1e-8))
           valid = (D ≤ δ_high ∨ p ≤ p') if A > 0 else (D ≤ δ_low ∨ p ≥ p')
    ℓ_{i,t} = −A_i · sg(min(ρ, c)) · w · valid · log π_θ,   w = verl's rollout IS weight (1 when is_level is None)

Symbols → code: δ_low, δ_high = `eps`, or `eps_low` / `eps_high` when set (verl's clip_ratio, clip_ratio_low,
clip_ratio_high: the divergence thresholds, 0.2 for TV and 0.05 for KL in its examples), c = `clip_ratio_c` (3.0),
`divergence` ("tv" | "kl"), `is_level` / `is_threshold` (verl's rollout_is / rollout_is_threshold).
With one update per batch π_prox = π_θ: every token is valid, ρ = 1, and the gradient is naive's (−w A ∇log π_θ).
Golden test: tests/test_algorithms_golden.py against verl's functions (tests/data/golden/verl_policy_losses.json).
Deviations: none on token-mean; the suite's aggregation otherwise.
"""
from __future__ import annotations

import torch

from .common import (MAX_TOKEN_LOG_RATIO, BatchContext, LossInputs, masked_mean, proximal_log_prob,
                     rollout_log_prob)
from .registry import register
from .rejection import check_is, is_weight

DIVERGENCES = ("tv", "kl")


@register("dppo_binary", trust_region="token-mask", correction="none", reads=("theta", "prox", "rollout"),
          source="verl verl/trainer/ppo/core_algos.py@1dda039b9c6311889a9c9a26040677e1254814f9 (dppo_tv, dppo_kl)")
def dppo_binary(inp: LossInputs, ctx: BatchContext, *, eps: float, divergence: str = "tv", eps_low: float | None = None,
                eps_high: float | None = None, clip_ratio_c: float = 3.0, is_level: str | None = None,
                is_threshold: float = 2.0):
    if divergence not in DIVERGENCES:
        raise ValueError(f"dppo_binary: divergence must be one of {', '.join(DIVERGENCES)} (verl's dppo_tv, dppo_kl); "
                         f"got {divergence!r}")
    if not clip_ratio_c > 0:
        raise ValueError(f"dppo_binary: clip_ratio_c must be > 0 (the truncation of π_θ/π_prox); got {clip_ratio_c}")
    check_is("dppo_binary", is_level, is_threshold)
    low, high = (eps if eps_low is None else eps_low), (eps if eps_high is None else eps_high)
    logp, logp_old = inp.logp.detach(), proximal_log_prob(inp)
    ratio = torch.exp(((logp - logp_old) * inp.mask).clamp(-MAX_TOKEN_LOG_RATIO, MAX_TOKEN_LOG_RATIO))
    p, p_old = torch.exp(logp), torch.exp(logp_old)
    positive = (inp.advantages > 0).unsqueeze(1)
    if divergence == "tv":
        valid = torch.where(positive, p - p_old <= high, p - p_old >= -low)
    else:
        d = p_old * (logp_old - logp) + (1 - p_old) * torch.log((1.0 - p_old + 1e-8) / (1.0 - p + 1e-8))
        valid = torch.where(positive, (d <= high) | (p <= p_old), (d <= low) | (p >= p_old))
    weight = is_weight((logp_old - rollout_log_prob(inp)) * inp.mask, inp.mask, is_level, is_threshold)
    coef = inp.advantages.unsqueeze(1) * ratio.clamp(max=clip_ratio_c) * weight * valid.to(ratio.dtype)
    return -coef.detach() * inp.logp, {"dppo/masked_frac": masked_mean((~valid & inp.mask).float(), inp.mask),
                                       "dppo/truncated_frac": masked_mean((ratio > clip_ratio_c).float(), inp.mask)}
