"""geo_mask — SkyRL's off-policy correction: geometric (or product) sequence mask, outlier-token and token masks, TIS.

Reference: SkyRL skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py `compute_off_policy_correction`
(applied to the PPO loss in skyrl/backends/skyrl_train/utils/ppo_utils.py `ppo_policy_loss`), defaults from
skyrl/train/config/config.py `OffPolicyCorrectionConfig`, commit a9564572eb8e91076be43c1bd5e4615e3de17265; docs
https://docs.skyrl.ai/docs/algorithms/off_policy_correction. Policies read: π_θ, π_prox (SkyRL's
old_log_probs) and π_rollout (its rollout_logprobs).

    λ = log(π_prox / π_rollout) per token; every mask below is detached and applied in this order:
    outlier:   a response is dropped if any valid token has e^λ < `outlier_low` or > `outlier_high`
    token:     a token is dropped if e^λ ∉ [`token_mask_low`, `token_mask_high`]
    sequence:  over the tokens left, "geometric" drops a response with exp(mean λ) ∉ [`geo_mask_low`, `geo_mask_high`];
               "product" one with exp(Σ λ) ∉ [`product_mask_low`, `product_mask_high`]
    w = min(e^λ, `token_tis_ratio_clip_high`) ("token"), min(exp(Σ λ), `sequence_tis_ratio_clip_high`) over the
        tokens the outlier and token masks left ("sequence"), or 1 (None)
    ℓ_{i,t} = keep · w · max(−A ρ', −A clip(ρ', 1 − ε, 1 + ε_high)),   ρ' = π_θ / π_prox

Symbols → code: SkyRL's option names, with `sequence_mask_metric` ("geometric", SkyRL's documented choice, its
bounds 0.99/1.01 the config defaults; SkyRL's own default is None), `tis_ratio_type` (None), ε = `eps`
(eps_clip_low), ε_high = `eps_high` (eps_clip_high). Dropped tokens still count in the token-mean denominator:
SkyRL divides the advantages by the mini-batch's token count before masking (`token_mean` loss reduction).
Golden test: tests/test_algorithms_golden.py against SkyRL's functions (tests/data/golden/skyrl_off_policy.json).
Deviations: SkyRL exponentiates in float32 (`safe_exp_delta`); ours in the inputs' dtype. Its optional dual clip
(policy_loss_type "dual_clip") is off, its default. [ours] A NaN λ is refused by `validate`.
"""
from __future__ import annotations

import torch

from .common import MAX_TOKEN_LOG_RATIO, BatchContext, LossInputs, masked_mean, proximal_log_prob, rollout_log_prob
from .registry import register
from .rollout_correction import READS, corrected_ppo_loss

SEQUENCE_METRICS = ("geometric", "product")
TIS_TYPES = ("token", "sequence")


def _exp(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(x.clamp(-MAX_TOKEN_LOG_RATIO, MAX_TOKEN_LOG_RATIO))


def _check(sequence_mask_metric, tis_ratio_type, bounds: dict[str, float | None]) -> None:
    if sequence_mask_metric is not None and sequence_mask_metric not in SEQUENCE_METRICS:
        raise ValueError(f"geo_mask: sequence_mask_metric must be geometric, product or None; got {sequence_mask_metric!r}")
    if tis_ratio_type is not None and tis_ratio_type not in TIS_TYPES:
        raise ValueError(f"geo_mask: tis_ratio_type must be token, sequence or None; got {tis_ratio_type!r}")
    bad = [k for k, v in bounds.items() if v is not None and not v >= 0]
    if bad:
        raise ValueError(f"geo_mask: {bad[0]} must be >= 0 or None; got {bounds[bad[0]]}")


@register("geo_mask", trust_region="sequence-mask", correction="none", reads=READS,
          source="SkyRL skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py@a9564572eb8e91076be43c1bd5e4615e3de17265")
def geo_mask(inp: LossInputs, ctx: BatchContext, *, eps: float, sequence_mask_metric: str | None = "geometric",
             geo_mask_low: float = 0.99, geo_mask_high: float = 1.01, product_mask_low: float = 0.5,
             product_mask_high: float = 2.0, outlier_low: float | None = None, outlier_high: float | None = None,
             token_mask_low: float | None = None, token_mask_high: float | None = None,
             tis_ratio_type: str | None = None, token_tis_ratio_clip_high: float = 2.0,
             sequence_tis_ratio_clip_high: float = 5.0, eps_high: float | None = None):
    _check(sequence_mask_metric, tis_ratio_type, dict(geo_mask_low=geo_mask_low, geo_mask_high=geo_mask_high,
           product_mask_low=product_mask_low, product_mask_high=product_mask_high, outlier_low=outlier_low,
           outlier_high=outlier_high, token_mask_low=token_mask_low, token_mask_high=token_mask_high,
           token_tis_ratio_clip_high=token_tis_ratio_clip_high, sequence_tis_ratio_clip_high=sequence_tis_ratio_clip_high))
    lam = (proximal_log_prob(inp) - rollout_log_prob(inp)) * inp.mask               # (B, T), 0 on padding
    ratio = _exp(lam)
    keep = inp.mask.clone()
    if outlier_low is not None or outlier_high is not None:
        bad = ((ratio < outlier_low) if outlier_low is not None else torch.zeros_like(keep)) | \
              ((ratio > outlier_high) if outlier_high is not None else torch.zeros_like(keep))
        keep = keep & ~(bad & inp.mask).any(dim=1, keepdim=True)
    if token_mask_low is not None and token_mask_high is not None:
        keep = keep & (ratio >= token_mask_low) & (ratio <= token_mask_high)
    m = keep.to(lam.dtype)
    total = (lam * m).sum(dim=1, keepdim=True)                     # (B, 1), over the tokens the token masks left
    if tis_ratio_type == "token":
        weight = ratio.clamp(max=token_tis_ratio_clip_high)
    elif tis_ratio_type == "sequence":
        weight = _exp(total).clamp(max=sequence_tis_ratio_clip_high)
    else:
        weight = torch.ones_like(ratio)
    if sequence_mask_metric is not None:
        if sequence_mask_metric == "geometric":
            seq, low, high = _exp(total / m.sum(dim=1, keepdim=True).clamp_min(1)), geo_mask_low, geo_mask_high
        else:
            seq, low, high = _exp(total), product_mask_low, product_mask_high
        keep = keep & (seq >= low) & (seq <= high)
    loss, metrics = corrected_ppo_loss(inp, weight * keep, eps, eps_high, "geo_mask")
    present = inp.mask.any(dim=1)
    metrics["geo_mask/masked_frac"] = masked_mean((inp.mask & ~keep).float(), inp.mask)
    metrics["geo_mask/seq_masked_frac"] = masked_mean((inp.mask & ~keep).any(dim=1).float(), present)
    return loss, metrics
