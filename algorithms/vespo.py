"""vespo — Variational sEquence-level Soft Policy Optimization: a Gamma-shaped kernel on the sequence ratio.

Reference: VESPO (arXiv 2602.10693); code: TRL trl/trainer/grpo_trainer.py `GRPOTrainer.get_gamma_weights` and
the `loss_type == "vespo"` branches of `_compute_loss`, defaults from trl/trainer/grpo_config.py (`vespo_*`,
`vllm_importance_sampling_*`), commit f2cd57710ae345ea6428ae95363267fcf38a3dc8 (the same lines in release
v1.9.0, 35def3ee000a87f6839e66f4b7749b06274ed1b3, and in the PyPI wheel trl 1.16.0: grpo_trainer.py L2972-3018,
L3125-3137, L3146, L3168-3174; grpo_config.py's `vespo_*` defaults 2.0, 3.0, 3.0, 2.0).
Policies read: π_θ (`logp`), π_b (`logp_behavior`, TRL's `old_per_token_logps`: computed once when the batch is generated, with the trainer's weights of that moment;
as for `sapo` and `gspo`) and π_rollout (`logp_rollout`, TRL's vLLM `sampling_per_token_logps`).

    L_i  = Σ_t m clamp(logp − logp_behavior, ±20) + Σ_t m clamp(log c_{i,t}, log 1e-8, 20)
    c    = clamp(π_b/π_rollout, cap_low, cap)              rollout_is = "token_truncate" (TRL's VESPO default)
         = π_b/π_rollout, or 0 outside [cap_low, cap]       rollout_is = "token_mask"
         = 1 (no term)                                     rollout_is = None (TRL with use_vllm=False)
    w_i  = exp(clamp(L_i, log 1e-8, 20))
    (k, λ) = (k_pos, λ_pos) if A_i ≥ 0 else (k_neg, λ_neg),   λ ← max(λ, 1e-4)
    φ_i  = exp(λ + k log w_i − λ w_i) = w_i^k e^{λ(1 − w_i)}   (NaN/±inf → 0; φ(1) = 1), detached
    ℓ_{i,t} = −φ_i A_i logp_{i,t}                            gradient −φ_i A_i ∇log π_θ(o_i)

Without engine mismatch (π_rollout = π_b) c = 1 and w_i = Π_t π_θ/π_b. On-policy w = 1, φ = 1: the plain
policy gradient, grpo's. φ peaks at w = k/λ (2/3 for A ≥ 0, 3/2 for A < 0 at the defaults: φ ≤ 1.25).
Symbols → code: k_pos/λ_pos/k_neg/λ_neg = `k_pos`, `lambda_pos`, `k_neg`, `lambda_neg` (TRL's `vespo_k_pos` 2.0,
`vespo_lambda_pos` 3.0, `vespo_k_neg` 3.0, `vespo_lambda_neg` 2.0; the paper's (c1, c2) = (2, 3) and (3, 2));
`rollout_is`, `cap`, `cap_low` = TRL's `vllm_importance_sampling_mode` (VESPO accepts only the two token modes;
"token_truncate" is its documented mode), `vllm_importance_sampling_clip_max` (3.0), `..._clip_min` (None).
`eps` is accepted and unused: VESPO has no clip range.
Paper and code agree on the kernel (the paper's Appendix I pseudocode: sequence log-ratio without length
normalization, k and λ chosen by A ≥ 0, φ detached); the ±20 / log 1e-8 clamps, λ ≥ 1e-4, the NaN guard and the
rollout term are the code's (TRL says its clamps match the authors' verl recipe).
Deviations: TRL aggregates VESPO's token losses by the global token count (token-mean); here the suite's
aggregation ("token-mean" gives TRL's loss). TRL sums log c over every position; we over valid tokens only (the
same unless [cap_low, cap] excludes 1, where TRL's padding would change a response's weight). k and λ are in
the inputs' dtype (TRL's `torch.where` on Python floats makes them float32).
"""
from __future__ import annotations

import math

import torch

from .common import MAX_TOKEN_LOG_RATIO, BatchContext, LossInputs, masked_mean, reinforce_token_loss, rollout_log_prob
from .registry import register
from .rollout_correction import outside, truncate

LOG_MIN_WEIGHT = math.log(1e-8)          # TRL's lower clamp of log weights (≈ −18.42)
ROLLOUT_IS_MODES = ("token_truncate", "token_mask")


def _check(rollout_is: str | None, cap: float | None, cap_low: float | None) -> None:
    if rollout_is is not None and rollout_is not in ROLLOUT_IS_MODES:
        raise ValueError(f"vespo: rollout_is must be None or one of {', '.join(ROLLOUT_IS_MODES)} (TRL refuses "
                         f"the sequence modes for VESPO); got {rollout_is!r}")
    if cap is not None and cap_low is not None and not cap_low < cap:
        raise ValueError(f"vespo: cap_low must be below cap; got cap_low={cap_low}, cap={cap}")
    if rollout_is == "token_truncate" and cap is None and cap_low is None:
        raise ValueError("vespo: rollout_is 'token_truncate' needs cap or cap_low")


def rollout_log_weight(inp: LossInputs, rollout_is: str | None, cap: float | None,
                       cap_low: float | None) -> torch.Tensor:
    """Σ_t m clamp(log c, log 1e-8, 20) per response, (B,), detached: TRL's token-level vLLM IS term."""
    if rollout_is is None:
        return torch.zeros(inp.mask.shape[0], dtype=inp.logp.dtype, device=inp.logp.device)
    ratio = torch.exp((inp.logp_behavior - rollout_log_prob(inp)) * inp.mask)         # π_old / π_sampler
    if rollout_is == "token_truncate":
        ratio = truncate(ratio, cap, cap_low)
    else:
        ratio = ratio.masked_fill(outside(ratio, cap, cap_low), 0.0)
    return (torch.log(ratio).clamp(LOG_MIN_WEIGHT, MAX_TOKEN_LOG_RATIO) * inp.mask).sum(dim=1)


@register("vespo", uses_eps=False, trust_region="none", correction="sequence-is",
          reads=("theta", "behavior", "rollout"),
          source="TRL trl/trainer/grpo_trainer.py get_gamma_weights@f2cd57710ae345ea6428ae95363267fcf38a3dc8")
def vespo(inp: LossInputs, ctx: BatchContext, *, eps: float, k_pos: float = 2.0, lambda_pos: float = 3.0,
          k_neg: float = 3.0, lambda_neg: float = 2.0, rollout_is: str | None = "token_truncate",
          cap: float | None = 3.0, cap_low: float | None = None):
    _check(rollout_is, cap, cap_low)
    lam_tok = (inp.logp.detach() - inp.logp_behavior).clamp(-MAX_TOKEN_LOG_RATIO, MAX_TOKEN_LOG_RATIO)
    seq_log = (lam_tok * inp.mask).sum(dim=1) + rollout_log_weight(inp, rollout_is, cap, cap_low)    # (B,)
    log_w = seq_log.clamp(LOG_MIN_WEIGHT, MAX_TOKEN_LOG_RATIO)
    w = torch.exp(log_w)
    nonneg = inp.advantages >= 0
    k = torch.where(nonneg, torch.full_like(w, k_pos), torch.full_like(w, k_neg))
    lam = torch.where(nonneg, torch.full_like(w, lambda_pos), torch.full_like(w, lambda_neg)).clamp(min=1e-4)
    phi = torch.exp(lam + k * log_w - lam * w).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    present = inp.mask.any(dim=1)
    return reinforce_token_loss(phi, inp), {"vespo/phi_seq_mean": masked_mean(phi, present),
                                            "vespo/log_w_mean": masked_mean(log_w, present)}
