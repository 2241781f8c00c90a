"""gmc_grpo — Group Mass Capping.

Reference: GMC-GRPO (arXiv 2610.01896). The abstract is the primary source; the formula w = r·min(1, C/Σr)
is from a secondary summary; the cap C = G(1 + ε) appears in no source we found: it is ours (our reading of
the abstract), and so are the numerical details. The multiplier is a parameter (`cap_multiplier`, default
1 + ε) so that the choice can be varied.
Policies read: π_θ (`logp`, through the surrogate) and π_b (`logp_behavior`, in the weights).

Objective, for each group g of G responses to one prompt:
    S_g = Σ_{i∈g} r_i,   C = G · c (c = `cap_multiplier`, default 1 + ε [ours]),   scale_g = min(1, C / S_g)
    w_i = r_i · scale_g   (detached),    ℓ_{i,t} = −w_i · A_i · logp_{i,t}
computed in log space: log scale_g = min(0, log C − logsumexp_{i∈g} Λ_i), w_i = exp(Λ_i + log scale_g).

Symbols → code: r_i = exp(Λ_i), Λ = `traj_log_ratio`, ε = `eps`, G = the size of the response's
group in the batch (`group_ids`), w = ctx "weight".

Properties (tested): a group under the cap is untouched (w = r); a capped group has Σ w = C; ratios
within a group are preserved; every w_i ≤ C; no overflow for |Λ| up to 1e4 (float32).

Proposition [ours]. Among all weights w ≥ 0 with Σ_{i∈g} w_i ≤ C, uniform rescaling minimizes the worst
relative distortion δ(w) = max_i |1 − w_i / r_i|, with value δ_GMC = (1 − C/S)_+; and trajectory clipping
(w_i = min(r_i, 1 + ε)) has δ_clip = max_i (1 − (1 + ε)/r_i)_+ ≥ δ_GMC.
Proof. Let δ = δ(w). Then w_i ≥ (1 − δ) r_i for every i, so C ≥ Σ w_i ≥ (1 − δ) S, i.e. δ ≥ 1 − C/S;
and δ ≥ 0. Uniform rescaling attains it: w = r when S ≤ C (δ = 0), w = (C/S) r otherwise (δ = 1 − C/S).
Clipped weights satisfy w_i ≤ 1 + ε, hence Σ w_i ≤ G(1 + ε) = C: they are feasible, so their
distortion — which is max_i (1 − (1 + ε)/r_i)_+ — is at least the minimum δ_GMC. ∎

Deviations: 1. G is the number of the group's responses present in the batch (a group split across
optimizer steps would use its partial size). 2. [ours] everything in log space, weights detached.
"""
from __future__ import annotations

import math

import torch

from .common import (BatchContext, LossInputs, group_index, group_logsumexp, group_sum,
                     reinforce_token_loss, traj_log_ratio)
from .registry import register


def group_mass_cap(log_r: torch.Tensor, group_ids: torch.Tensor, eps: float,
                   cap_multiplier: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (w (B,), log scale per group (n_groups,), group index (B,)) for trajectory log-ratios log_r;
    the cap is C = G · cap_multiplier (default 1 + eps).

    Computed in float64 (results in log_r's dtype) and without adding a huge Λ_i to a huge negative
    log scale: with m_g = max_{i∈g} Λ_i and L_g = log Σ_{i∈g} exp(Λ_i − m_g) ∈ [0, log G], a capped
    group has w_i = exp(Λ_i − m_g + log C − L_g), every term small; an uncapped one has w_i = exp(Λ_i)
    exactly. (exp(Λ_i + log scale_g) loses ~ulp(Λ_i) in the exponent: 0.03% of w at Λ = 1e4 in float32.)
    """
    index, n_groups = group_index(group_ids)
    lam = log_r.to(torch.float64)                                      # (B,)
    size = group_sum(torch.ones_like(lam), index, n_groups)
    multiplier = 1.0 + eps if cap_multiplier is None else cap_multiplier
    if not multiplier > 0:
        raise ValueError(f"gmc_grpo: cap_multiplier must be > 0; got {cap_multiplier}")
    log_cap = torch.log(size) + math.log(multiplier)                   # log C = log G + log c
    gmax = torch.full((n_groups,), -torch.inf, dtype=lam.dtype, device=lam.device)
    gmax = gmax.scatter_reduce(0, index, lam, reduce="amax")           # (n_groups,) m_g
    shifted = lam - gmax[index]                                        # (B,) Λ_i − m_g ≤ 0
    lse_shifted = torch.log(group_sum(torch.exp(shifted), index, n_groups))      # L_g
    log_scale = torch.clamp(log_cap - gmax - lse_shifted, max=0.0)     # log min(1, C / S_g)
    capped = (log_scale < 0)[index]
    w = torch.where(capped, torch.exp(shifted + (log_cap - lse_shifted)[index]), torch.exp(lam))
    return w.to(log_r.dtype), log_scale.to(log_r.dtype), index


def prepare(inp: LossInputs, *, eps: float, cap_multiplier: float | None = None) -> BatchContext:
    log_r = traj_log_ratio(inp).to(torch.float64)                      # (B,)  Λ_i
    weight, log_scale, index = group_mass_cap(log_r, inp.group_ids, eps, cap_multiplier)
    n_groups = log_scale.numel()
    size = group_sum(torch.ones_like(log_r), index, n_groups)
    # Per-group effective sample size (Σr)² / Σr², as a fraction of G, in log space.
    log_ess = 2 * group_logsumexp(log_r, index, n_groups) - group_logsumexp(2 * log_r, index, n_groups)
    scale = torch.exp(log_scale)
    return BatchContext(tensors={"weight": weight.to(inp.logp.dtype)}, metrics={
        "gmc/capped_frac": (log_scale < 0).float().mean(),
        "gmc/scale_mean": scale.mean(),
        "gmc/scale_min": scale.min(),
        "gmc/ess_frac": (torch.exp(log_ess) / size).mean(),
        "gmc/log_ratio_max": log_r.max(),
    })


@register("gmc_grpo", prepare=prepare, trust_region="none", correction="group-cap", reads=("theta", "behavior"),
          source="abstract 2610.01896; formula secondary; C = G(1+eps) ours")
def gmc_grpo(inp: LossInputs, ctx: BatchContext, *, eps: float):
    return reinforce_token_loss(ctx.tensors["weight"], inp), {}
