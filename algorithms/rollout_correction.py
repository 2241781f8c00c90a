"""The rollout-correction building block that tis, tis_seq, mis, mis_seq and icepop share (not an estimator).

verl (verl/trainer/ppo/rollout_corr_helper.py, "decoupled" mode), TRL (trl/trainer/grpo_trainer.py,
`vllm_importance_sampling_mode`) and OpenRLHF (openrlhf/models/loss.py, `is_correction_type`) all compute

    ℓ_{i,t} = sg(w_{i,t}) · max(−A_i ρ'_{i,t}, −A_i clip(ρ'_{i,t}, 1 − ε, 1 + ε_high)),   ρ' = π_θ / π_old

with their π_old the trainer's recomputed log-probs at the step's start (our π_prox) and w a function of the
rollout-correction ratio π_old / π_rollout (our π_prox / π_rollout). With one update per batch ρ' = 1 at
the update, so the gradient is −w A ∇log π_θ; without engine mismatch w is then a function of π_θ / π_b.
The estimators differ only in w (token or sequence level; truncated, masked, or filtered at [α, β]).
"""
from __future__ import annotations

import torch
from torch import Tensor

from .common import (MAX_TOKEN_LOG_RATIO, LossInputs, clipped_tokens, masked_mean, ppo_clip_token_loss,
                     prox_rollout_log_ratio, proximal_ratio)

READS = ("theta", "prox", "rollout")


def check_bounds(name: str, cap: float | None, cap_low: float | None, need_cap: bool = False) -> None:
    if cap is None and need_cap:
        raise ValueError(f"{name}: cap must be a number > 0 (the truncation level C); got None")
    if cap is not None and not cap > 0:
        raise ValueError(f"{name}: cap must be > 0 (the upper bound C on the correction weight); got {cap}")
    if cap_low is not None and not (cap_low >= 0 and (cap is None or cap_low < cap)):
        raise ValueError(f"{name}: cap_low must be >= 0 and below cap; got cap_low={cap_low}, cap={cap}")


def token_log_weight(inp: LossInputs) -> Tensor:
    """log(π_prox / π_rollout) per token, (B, T), detached, clamped to ±20 (verl's SAFETY_BOUND)."""
    return prox_rollout_log_ratio(inp)


def sequence_log_weight(inp: LossInputs) -> Tensor:
    """Σ_t m log(π_prox / π_rollout) per response, (B, 1), clamped to ±20 as verl does before exp."""
    return token_log_weight(inp).sum(dim=1, keepdim=True).clamp(-MAX_TOKEN_LOG_RATIO, MAX_TOKEN_LOG_RATIO)


def truncate(w: Tensor, cap: float | None, cap_low: float | None) -> Tensor:
    """TRL's *_truncate: clamp(w, cap_low, cap) (either bound may be None)."""
    return torch.clamp(w, min=cap_low, max=cap)


def outside(w: Tensor, cap: float | None, cap_low: float | None) -> Tensor:
    """TRL's *_mask / OpenRLHF's icepop: where w lies outside [cap_low, cap] (a bound that is None is open)."""
    out = torch.zeros_like(w, dtype=torch.bool)
    if cap is not None:
        out = out | (w > cap)
    if cap_low is not None:
        out = out | (w < cap_low)
    return out


def corrected_ppo_loss(inp: LossInputs, weight: Tensor, eps: float, eps_high: float | None,
                       area: str, dual_clip: float | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """sg(weight) (B, T) or (B, 1) times the PPO clip of π_θ / π_prox (dual clip c for A < 0 when given);
    metrics named `area/…`."""
    low, high = 1.0 - eps, 1.0 + (eps if eps_high is None else eps_high)
    ratio = proximal_ratio(inp)                                                     # (B, T)
    loss = weight.detach() * ppo_clip_token_loss(ratio, inp.advantages, low, high, dual_clip)
    clip_low, clip_high = clipped_tokens(ratio, inp.advantages, low, high)
    w = weight.detach().expand_as(ratio)
    return loss, {f"{area}/clip_frac": masked_mean((clip_low | clip_high).float(), inp.mask),
                  f"{area}/weight_mean": masked_mean(w, inp.mask)}
