"""gmc_grpo_prox — Group Mass Capping with a proximal trust region [ours].

Reference: GMC-GRPO (arXiv 2610.01896) for the group mass cap (algorithms/gmc_grpo.py, whose docstring says
what is the paper's and what is ours), and decoupled PPO (Fu et al., arXiv 2505.24298; AReaL
areal/utils/functional/functional.py `ppo_actor_loss_fn`, commit 4aef98d8d818af55b43621aaadba047ae10f4e77) for
the split of the ratio at the proximal policy. The combination is **ours**: the GMC paper's abstract does not
say whether GMC keeps a proximal clip when a batch takes several updates (benchmark v4, docs/benchmark-v4.md,
runs it beside gmc_grpo to measure what the trust region is worth).
Policies read: π_θ (`logp`), π_prox (`logp_proximal`) and π_b (`logp_behavior`).

Objective, for each group g of G responses to one prompt:
    Λ_i   = Σ_t log(π_prox / π_b)(o_{i,t})          (detached: the staleness up to the proximal policy)
    w_i   = r_i · min(1, C / Σ_{j∈g} r_j),  r_i = exp(Λ_i),  C = G(1 + ε)     (gmc_grpo's cap, on Λ)
    ρ'    = π_θ / π_prox per token                   (the trust region, as decoupled PPO)
    ℓ_{i,t} = w_i · max(−A_i ρ', −A_i clip(ρ', 1 − ε, 1 + ε))

Symbols → code: Λ = `prox_behavior_log_ratio`, C's multiplier = `cap_multiplier` (default 1 + ε, as gmc_grpo),
ε = `eps` (the cap and the clip share it, as GMC's C = G(1 + ε) and PPO's clip both take the suite's ε).

Coincidence (tested): with one update per batch π_prox = π_θ at the update, so ρ' = 1, the clip is inactive,
∇ρ' = ∇log π_θ, and the gradient is −Σ w_i A_i ∇log π_θ(o_i) with Λ = log π_θ/π_b: gmc_grpo's gradient.
With several updates per batch the two part: gmc_grpo's weight follows π_θ as it moves away from π_prox (w
up to C for one response, for either sign of A); here the weight is fixed at π_prox and the move from π_prox
is clipped per token.
Deviations: [ours] the token log-ratios in Λ are clamped to ±20 like every ratio here (common.py).
"""
from __future__ import annotations

import torch

from .common import (MAX_TOKEN_LOG_RATIO, BatchContext, LossInputs, clipped_tokens, masked_mean,
                     ppo_clip_token_loss, proximal_log_prob, proximal_ratio)
from .gmc_grpo import group_mass_cap
from .registry import register


def prox_behavior_log_ratio(inp: LossInputs) -> torch.Tensor:
    """Λ_i = Σ_t log(π_prox / π_b), (B,), detached; each token's log-ratio clamped to ±MAX_TOKEN_LOG_RATIO."""
    lam = (proximal_log_prob(inp) - inp.logp_behavior.detach()) * inp.mask
    return lam.clamp(-MAX_TOKEN_LOG_RATIO, MAX_TOKEN_LOG_RATIO).sum(dim=1)


def prepare(inp: LossInputs, *, eps: float, cap_multiplier: float | None = None) -> BatchContext:
    log_r = prox_behavior_log_ratio(inp).to(torch.float64)             # (B,)
    weight, log_scale, _ = group_mass_cap(log_r, inp.group_ids, eps, cap_multiplier)
    scale = torch.exp(log_scale)
    return BatchContext(tensors={"weight": weight.to(inp.logp.dtype)}, metrics={
        "gmc/capped_frac": (log_scale < 0).float().mean(),
        "gmc/scale_mean": scale.mean(),
        "gmc/scale_min": scale.min(),
        "gmc/log_ratio_max": log_r.max(),
    })


@register("gmc_grpo_prox", prepare=prepare, trust_region="token-clip", correction="group-cap",
          reads=("theta", "prox", "behavior"),
          source="ours: gmc_grpo's cap (2610.01896) on pi_prox/pi_b x decoupled PPO's clip (AReaL "
                 "ppo_actor_loss_fn@4aef98d8d818af55b43621aaadba047ae10f4e77)")
def gmc_grpo_prox(inp: LossInputs, ctx: BatchContext, *, eps: float):
    ratio = proximal_ratio(inp)                                          # (B, T)
    loss = ppo_clip_token_loss(ratio, inp.advantages, 1.0 - eps, 1.0 + eps)
    clip_low, clip_high = clipped_tokens(ratio, inp.advantages, 1.0 - eps, 1.0 + eps)
    return ctx.tensors["weight"].detach().unsqueeze(1) * loss, {
        "gmc_prox/clip_frac": masked_mean((clip_low | clip_high).float(), inp.mask)}
