"""tic_grpo — TIC-GRPO as published: GRPO's clipped objective with one trajectory-level ratio per response.

Reference: Pang, Luo, Jin, "TIC-GRPO: Provable and Efficient Optimization for RLHF" (arXiv 2508.02833):
"replaces token-level importance ratios with a single trajectory-level probability ratio" in GRPO's
clipped objective. No authors' code was found (searched GitHub and the paper pages), so this follows the
paper's text; the truncated-weight form of the GMC paper's framing is `tic_is`.
Policies read: π_θ (`logp`) and π_b (`logp_behavior`, the paper's π_old that sampled the group).

Objective, per response i (r_i = exp(Λ_i), Λ_i = Σ_t m (logp − logp_behavior)):
    J_i = min(r_i A_i, clip(r_i, 1 − ε, 1 + ε_high) A_i)
    ∇J_i = 1[clip inactive] · r_i A_i ∇log π_θ(o_i) = Σ_t 1[inactive] r_i A_i ∇logp_{i,t}
so the per-token loss is ℓ_{i,t} = −sg(w_i) A_i logp_{i,t} with w_i = r_i where the clip is inactive
(A_i > 0 ∧ r_i > 1 + ε_high, or A_i < 0 ∧ r_i < 1 − ε, are clipped: w_i = 0), reduced by the suite's
aggregation (each token of o_i carries the trajectory's weight, as GRPO's per-token form does).

Symbols → code: ε = `eps`, ε_high = `eps_high` (default ε), Λ = `traj_log_ratio`, w = ctx "weight".
Deviations:
1. [ours] The paper's length-corrected group normalization of the advantage is not part of the loss (the
   suite's advantage mode applies to every estimator); its upper-only clip variant is not offered.
2. [ours] r_i is computed as exp(clamp(Λ_i, ±20)) so that hundreds of tokens cannot overflow; a clipped
   response contributes no gradient, as in PPO.
"""
from __future__ import annotations

import math

import torch

from .common import MAX_TOKEN_LOG_RATIO, BatchContext, LossInputs, reinforce_token_loss, traj_log_ratio
from .registry import register


def prepare(inp: LossInputs, *, eps: float, eps_high: float | None = None) -> BatchContext:
    log_r = traj_log_ratio(inp)                                                     # (B,)  Λ_i
    high = eps if eps_high is None else eps_high
    adv = inp.advantages
    log_low = math.log(1.0 - eps) if eps < 1 else -math.inf                          # ε ≥ 1: no lower clip
    clipped = ((adv > 0) & (log_r > math.log1p(high))) | ((adv < 0) & (log_r < log_low))
    r = torch.exp(log_r.clamp(-MAX_TOKEN_LOG_RATIO, MAX_TOKEN_LOG_RATIO))
    weight = torch.where(clipped, torch.zeros_like(r), r)
    return BatchContext(tensors={"weight": weight}, metrics={
        "tic/clip_frac": clipped.float().mean(), "tic/weight_mean": weight.mean(), "tic/log_ratio_max": log_r.max()})


@register("tic_grpo", prepare=prepare, trust_region="sequence-clip", correction="sequence-is",
          reads=("theta", "behavior"), source="paper 2508.02833 (no authors' code found)")
def tic_grpo(inp: LossInputs, ctx: BatchContext, *, eps: float):
    return reinforce_token_loss(ctx.tensors["weight"], inp), {}
