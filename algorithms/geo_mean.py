"""geo_mean — GMPO (geometric-mean policy optimization) as verl ships it: a clipped geometric-mean sequence ratio.

Reference: GMPO (arXiv 2507.20673); code: verl verl/trainer/ppo/core_algos.py `compute_policy_loss_geo_mean`,
commit b178a3cd56f58b2d502255daba591e92833930a7 (adapted there from callsys/GMPO). Not verl's Geo-RS rejection
sampling, which is a sequence mask.
Golden-tested against verl's own function at b178a3cd and at verl-project/verl
1dda039b9c6311889a9c9a26040677e1254814f9 (same numbers): tests/data/golden/verl_policy_losses.json,
loss_mode geo_mean.
Policies read: π_θ (`logp`) and π_b (`logp_behavior`, the code's `old_log_prob`; see `cispo`).

    λ = logp − logp_behavior,   s = sign(A_i)
    λ̃_{i,t} = s · min(s λ_{i,t}, s clamp(λ_{i,t}, −ε_low, ε_high))        (token clip in log space)
    g_i = exp(Σ_t m λ̃ / |o_i|),   ℓ_i = −A_i g_i   (broadcast over the response's tokens)

Symbols → code: ε_low = `eps_low`, ε_high = `eps_high` (both default ε: verl's clip_ratio_low/high).
Deviations: verl averages ℓ_i over sequences (it ignores loss_agg_mode); here the suite's aggregation of the
broadcast loss, so "seq-mean-token-mean" gives verl's exact loss. verl divides by |o_i| + 1e-8, we by |o_i|.
[ours] the mean log-ratio is clamped to ±20 before exp (verl leaves its clamp commented out).
"""
from __future__ import annotations

import torch

from .common import MAX_TOKEN_LOG_RATIO, BatchContext, LossInputs, masked_mean, token_log_ratio
from .registry import register


@register("geo_mean", trust_region="sequence-clip", correction="sequence-is", reads=("theta", "behavior"),
          source="verl verl/trainer/ppo/core_algos.py compute_policy_loss_geo_mean@b178a3cd56f58b2d502255daba591e92833930a7")
def geo_mean(inp: LossInputs, ctx: BatchContext, *, eps: float, eps_low: float | None = None,
             eps_high: float | None = None):
    low = eps if eps_low is None else eps_low
    high = eps if eps_high is None else eps_high
    lam = token_log_ratio(inp)                                                       # (B, T), 0 on padding
    sign = torch.sign(inp.advantages).unsqueeze(1)
    lam_clip = lam.clamp(-low, high)
    lam_min = sign * torch.minimum(sign * lam, sign * lam_clip)
    lengths = inp.mask.sum(dim=1).clamp_min(1)                                      # (B,)
    log_g = ((lam_min * inp.mask).sum(dim=1) / lengths).clamp(-MAX_TOKEN_LOG_RATIO, MAX_TOKEN_LOG_RATIO)
    ratio = torch.exp(log_g)                                                         # (B,)
    loss = (-inp.advantages * ratio).unsqueeze(1).expand_as(inp.logp)
    clipped = (lam.detach() != lam_clip.detach()) & inp.mask
    present = inp.mask.any(dim=1)
    return loss, {"geo_mean/clip_frac": masked_mean(clipped.float(), inp.mask),
                  "geo_mean/seq_ratio_mean": masked_mean(ratio.detach(), present)}
