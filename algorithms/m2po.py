"""m2po — the M2PO authors' loss: a PPO clip whose bounds a second-moment budget on the harmful tokens sets.

Reference: M2PO (arXiv 2510.01161); code: Infini-AI-Lab/M2PO, verl/trainer/ppo/core_algos.py
(`compute_m2po_policy_loss`, `kpo_clip_harmful_tokens`, `_solve_tau_from_sorted_delta2`), commit
af54a3e8feffb7a66a8258003aebefa37759cec0. Algorithm 1's plain mask is `m2po_mask`.
Policies read: π_θ (`logp`) and π_b (`logp_behavior`, the code's `old_log_prob`).

Per optimizer step, with Δ = logp_behavior − logp (detached) and ρ = exp(−Δ):
    harmful tokens H: (A > 0 ∧ ρ > 1 + 1e-12) or (A < 0 ∧ ρ < 1 − 1e-12), over valid tokens
    M2 = mean_H Δ²;  if M2 ≤ τ (or H is empty): no clip (bounds [0, 1e5])
    else, v = sort(Δ²_H) ascending, n = |H|, S = τ n:
        k = the first index with Σ_{j≤k} v_j + (v_k − 1e-12)(n − k − 1) ≥ S − 1e-12
        κ = 0 if k = 0 else sqrt(v_{k−1} − 1e-12)             (the code's τ, a |Δ| cap)
    ε_low = 1 − e^{−κ}, ε_high = e^{κ} − 1, widened: ε_low = max(ε_low, min_eps_low), ε_high = max(ε_high, min_eps_high)
    ℓ_{i,t} = max(−A_i ρ_{i,t}, −A_i clip(ρ_{i,t}, 1 − ε_low, 1 + ε_high))

Symbols → code: τ = `tau` (the code's `M2_budget`; 0.04 in the authors' train scripts), minimum widths =
`min_eps_low` / `min_eps_high` (the code's `miniclip_low` / `miniclip_high`, function defaults 0.3 / 0.5;
None: no widening).
Deviations:
1. The authors' dp_actor passes `config.get("miniclip_low", None)` and their train-scripts set no minimum,
   so their runs do not widen; we default to the function's own defaults (0.3 / 0.5), as the spec asks.
   `min_eps_low=None, min_eps_high=None` gives the scripts' behaviour.
2. The code computes the bounds per micro-batch it is called on; we compute them once over the whole
   optimizer-step batch (a batch statistic), so micro-batching is exact.
3. The unconstrained case keeps the code's sentinel bounds (lower 0, upper 1e5); [ours] log-ratios clamped
   to ±20 before exp, as everywhere (common.py).
"""
from __future__ import annotations

import math

import torch

from .common import BatchContext, LossInputs, clipped_tokens, masked_mean, ppo_clip_token_loss, token_ratio
from .registry import register

NO_CLIP_HIGH = 100000.0       # the code's "no constraint" upper ratio bound (its clip_high sentinel)
_TINY = 1e-12                 # the code's tolerances, kept as written


def harmful_cap(delta_sq: torch.Tensor, tau: float) -> tuple[float | None, torch.Tensor]:
    """(κ, M2 over harmful tokens) for the harmful tokens' Δ² (1-d): κ is None when no cap is needed.

    Vectorized `_solve_tau_from_sorted_delta2`: f_k = Σ_{j≤k} v_j + (v_k − 1e-12)(n − k − 1) is
    Σ_j min(v_j, v_k) up to the tolerance, increasing in k; the code takes the first k with f_k ≥ S − 1e-12."""
    n = delta_sq.numel()
    if n == 0:
        return None, torch.zeros((), dtype=torch.float64, device=delta_sq.device)
    v = torch.sort(delta_sq.to(torch.float64)).values
    m2 = v.sum() / n
    if float(m2) <= tau + _TINY:
        return None, m2
    target = tau * n
    rest = torch.arange(n - 1, -1, -1, dtype=torch.float64, device=v.device)        # n − k − 1
    f = torch.cumsum(v, 0) + (v - _TINY) * rest
    k = int(torch.argmax((f >= target - _TINY).to(torch.int8)))
    if k == 0:
        return 0.0, m2
    return math.sqrt(max(float(v[k - 1]) - _TINY, 0.0)), m2


def prepare(inp: LossInputs, *, eps: float, tau: float = 0.04, min_eps_low: float | None = 0.3,
            min_eps_high: float | None = 0.5) -> BatchContext:
    if not tau > 0:
        raise ValueError(f"m2po: tau must be > 0 (the second-moment budget); got {tau}")
    delta = ((inp.logp_behavior - inp.logp) * inp.mask).to(torch.float64)          # (B, T)  Δ, detached
    ratio = torch.exp(-delta)
    adv = inp.advantages.to(torch.float64).unsqueeze(1)
    harmful = inp.mask & (((adv > _TINY) & (ratio > 1 + _TINY)) | ((adv < -_TINY) & (ratio < 1 - _TINY)))
    kappa, m2 = harmful_cap((delta ** 2)[harmful], tau)
    if kappa is None:
        eps_low, eps_high = 1.0, NO_CLIP_HIGH - 1.0
    else:
        eps_low, eps_high = 1.0 - math.exp(-kappa), math.exp(kappa) - 1.0
    if min_eps_low is not None:
        eps_low = max(eps_low, min_eps_low)
    if min_eps_high is not None:
        eps_high = max(eps_high, min_eps_high)
    dev = inp.logp.device
    low = torch.tensor(1.0 - eps_low, dtype=torch.float64, device=dev)
    high = torch.tensor(1.0 + eps_high, dtype=torch.float64, device=dev)
    capped = (delta ** 2).clamp(max=kappa ** 2) if kappa is not None else delta ** 2
    m2_after = capped[harmful].sum() / harmful.sum().clamp_min(1)
    return BatchContext(tensors={"low": low, "high": high}, metrics={
        "m2po/m2_harmful": m2, "m2po/m2_after": m2_after if harmful.any() else m2,
        "m2po/clip_low": low, "m2po/clip_high": high,
        "m2po/harmful_frac": masked_mean(harmful.to(torch.float64), inp.mask)})


@register("m2po", prepare=prepare, uses_eps=False, trust_region="token-clip", correction="token-is",
          reads=("theta", "behavior"),
          source="Infini-AI-Lab/M2PO verl/trainer/ppo/core_algos.py@af54a3e8feffb7a66a8258003aebefa37759cec0")
def m2po(inp: LossInputs, ctx: BatchContext, *, eps: float):
    low = ctx.tensors["low"].to(inp.logp.dtype)
    high = ctx.tensors["high"].to(inp.logp.dtype)
    ratio = token_ratio(inp)                                                         # (B, T)
    loss = ppo_clip_token_loss(ratio, inp.advantages, low, high)
    clip_low, clip_high = clipped_tokens(ratio, inp.advantages, low, high)
    return loss, {"m2po/clip_frac": masked_mean((clip_low | clip_high).float(), inp.mask)}
