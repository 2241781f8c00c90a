"""decoupled_rs — AReaL's decoupled PPO with its full `rejection_sampling` (level × action × metric × aggregation).

Reference: AReaL areal/utils/functional/functional.py `apply_rejection_sampling` and `ppo_actor_loss_fn`, the
config areal/api/cli_args.py `RejectionSamplingConfig` (defaults level token, action mask, metric ratio, agg mean,
upper 5.0, lower None) and the KL estimators areal/utils/data.py `KLEstimator._compute_approx_kl`, commit
4aef98d8d818af55b43621aaadba047ae10f4e77. Policies read: π_θ, π_prox (AReaL's proximal_logprobs) and π_rollout
(its old_logprobs, the inference engine's).

    λ = log(π_prox / π_rollout) per token (AReaL: in float32);  w = e^λ
    metric m: "ratio" e^λ;  "kl_k1" λ;  "kl_k2" λ²/2;  "kl_k3" e^{−λ} − 1 + λ = 1/r − 1 + log r
              (verl's k1 is −λ and its k3 r − 1 − log r: the same names, other estimators)
    level "token": m per token.  level "sequence": m aggregated over the response's valid tokens by `agg`
              ("sum", "mean", "max"), for "ratio" in log space (exp of the sum, mean or max of λ), and then w
              is the geometric mean exp(mean λ) for every token of the response (ratio metric only)
    in bounds: lower ≤ m ≤ upper (lower None: m ≤ upper)
    action "mask": w = 0 out of bounds;  "clamp": w = clamp(w, lower or 0, upper) for every token at level "token"
              (whatever the metric: with a KL metric the ratio is clamped to the KL bounds, as AReaL does), for
              the tokens of out-of-bounds responses at level "sequence"
    ℓ_{i,t} = w · max(−A ρ', −A clip(ρ', 1 − ε, 1 + ε_high)), dual clip c for A < 0 when set,  ρ' = π_θ / π_prox

Symbols → code: AReaL's names `level`, `action`, `metric`, `agg`, `upper`, `lower`; ε = `eps` (eps_clip),
ε_high = `eps_high` (eps_clip_higher), c = `dual_clip` (c_clip, None). Rejected tokens still count in the
denominator (AReaL divides by the loss mask's count before rejection), as in the suite's aggregation.
At the defaults this is `decoupled` (cap 5): the coincidence test checks it.
Golden test: tests/test_algorithms_golden.py against AReaL's functions (tests/data/golden/areal_rejection.json).
Deviations: AReaL takes λ in float32; ours in the inputs' dtype. [ours] log-ratios clamped to ±20 (AReaL clamps
neither λ nor the policy log-ratio). AReaL's sequence-level PPO ratio (importance_sampling_level, GSPO) is not
offered: that is `gspo`'s.
"""
from __future__ import annotations

import torch

from .common import MAX_TOKEN_LOG_RATIO, BatchContext, LossInputs, masked_mean
from .registry import register
from .rollout_correction import READS, corrected_ppo_loss, prox_rollout_log_ratio

CHOICES = {"level": ("token", "sequence"), "action": ("mask", "clamp"), "metric": ("ratio", "kl_k1", "kl_k2", "kl_k3"),
           "agg": ("sum", "mean", "max")}


def _metric(lam: torch.Tensor, metric: str) -> torch.Tensor:
    if metric == "ratio":
        return torch.exp(lam)
    if metric == "kl_k1":
        return lam
    if metric == "kl_k2":
        return lam ** 2 / 2.0
    return torch.exp(-lam) - 1 + lam


def _aggregate(values: torch.Tensor, mask: torch.Tensor, agg: str) -> torch.Tensor:
    """(B, 1): sum, mean or max of `values` over each row's valid tokens (0 for a row without any)."""
    if agg == "max":
        top = values.masked_fill(~mask, -torch.inf).amax(dim=1, keepdim=True)
        return torch.where(mask.any(dim=1, keepdim=True), top, torch.zeros_like(top))
    total = torch.where(mask, values, torch.zeros_like(values)).sum(dim=1, keepdim=True)
    return total if agg == "sum" else total / mask.sum(dim=1, keepdim=True).clamp_min(1)


@register("decoupled_rs", trust_region="token-clip", correction="token-is", reads=READS,
          source="AReaL areal/utils/functional/functional.py@4aef98d8d818af55b43621aaadba047ae10f4e77 (rejection_sampling)")
def decoupled_rs(inp: LossInputs, ctx: BatchContext, *, eps: float, level: str = "token", action: str = "mask",
                 metric: str = "ratio", agg: str = "mean", upper: float = 5.0, lower: float | None = None,
                 eps_high: float | None = None, dual_clip: float | None = None):
    for key, value in (("level", level), ("action", action), ("metric", metric), ("agg", agg)):
        if value not in CHOICES[key]:
            raise ValueError(f"decoupled_rs: {key} must be one of {', '.join(CHOICES[key])} (AReaL's "
                             f"rejection_sampling.{key}); got {value!r}")
    if lower is not None and not lower <= upper:
        raise ValueError(f"decoupled_rs: lower must be <= upper; got lower={lower}, upper={upper}")
    lam = prox_rollout_log_ratio(inp)                                               # (B, T), 0 on padding
    weight = torch.exp(lam)
    m = _metric(lam, metric)
    if level == "sequence":
        if metric == "ratio":
            m = torch.exp(_aggregate(lam, inp.mask, agg).clamp(max=MAX_TOKEN_LOG_RATIO))
            weight = torch.exp(_aggregate(lam, inp.mask, "mean")).expand_as(lam)
        else:
            m = _aggregate(m, inp.mask, agg)
    inside = (m <= upper) if lower is None else (m >= lower) & (m <= upper)
    inside = inside.expand_as(lam)
    clamped = weight.clamp(min=0.0 if lower is None else lower, max=upper)
    if action == "mask":
        weight = torch.where(inside, weight, torch.zeros_like(weight))
    elif level == "token":                    # AReaL clamps every token's ratio to [lower, upper], whatever the metric
        weight = clamped
    else:
        weight = torch.where(inside, weight, clamped)
    loss, metrics = corrected_ppo_loss(inp, weight, eps, eps_high, "decoupled_rs", dual_clip=dual_clip)
    metrics["decoupled_rs/out_of_bounds_frac"] = masked_mean((~inside).float(), inp.mask)
    return loss, metrics
