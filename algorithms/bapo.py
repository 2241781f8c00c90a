"""bapo — Balanced Policy Optimization with adaptive clipping bounds.

Reference: BAPO (arXiv 2510.18927); code: WooooDyy/BAPO recipe/bapo/policy_loss.py (`compute_policy_loss_bapo`,
`_compute_effective_advantage`), recipe/bapo/config.py, commit 7287044444d5d578529ea464b45f090a36e8da3a.
Values "as used in the paper" from the same repository's README.md: ρ0 = 0.5, c_low ∈ [0.6, 0.9],
c_high ∈ [1.2, 3.0]. Everything else as the code does it.
Policies read: π_θ (`logp`) and π_b (`logp_behavior`, the code's `old_log_prob`).

Per optimizer step, with ρ = exp(logp − logp_behavior):
    start at c_low = 0.6, c_high = 1.2
    P = Σ_{A>0} m · min(ρ, c_high) · A,   N = Σ_{A<0} m · |max(ρ, c_low) · A|,   P/N := P / (N + 1e-8) (∞ if N = 0)
    while P/N < ρ0 / (1 − ρ0): raise c_low by 0.05 (to at most 0.9)          — the code moves c_low first
    while still P/N < ρ0 / (1 − ρ0): raise c_high by 0.05 (to at most 3.0)
    ℓ_{i,t} = max(−A_i ρ_{i,t}, −A_i clip(ρ_{i,t}, c_low, c_high)),  and for A_i < 0: ℓ = min(ℓ, −3 A_i) (dual clip)

Symbols → code: ρ0 = `rho0` (0.5; the code's `adv_ratio_target` is the ratio ρ0/(1 − ρ0) = 1), start/step/limit
of the bounds = `c_low` (`ratio_lower_start`), `c_low_step` (`ratio_lower_step`, 0.05), `c_low_max`
(`ratio_lower_max`), `c_high`, `c_high_step` (0.05), `c_high_max`; dual clip = `dual_clip` (the code's
`clip_ratio_c`, default 3.0; None: off). A step that would pass a limit stops at the limit (the code's
`min(cur + step, max)`).
The loops are vectorized: P depends only on c_high and N only on c_low, so every state along the path is
evaluated at once (one bucketize and two bin sums per bound) and the first that meets the target is taken
(the last state if none does).
Deviations:
1. The shipped config (recipe/bapo/config/bapo_trainer.yaml) has c_low_max 0.8 and c_high_max 2.0; we use the
   README's paper values 0.9 and 3.0.
2. The code computes the bounds on each micro-batch (all-reduced over data-parallel ranks); we compute them
   once over the whole optimizer-step batch, so micro-batching is exact. `eps` is accepted and unused.
3. [ours] log-ratios clamped to ±20 before exp (the code clamps the same way).
Note: N is non-decreasing in c_low, so raising c_low never raises P/N; the code's first loop therefore only
ever ends at the target if the start already met it, and otherwise c_low ends at its limit.
"""
from __future__ import annotations

import math

import torch

from .common import BatchContext, LossInputs, masked_mean, ppo_clip_token_loss, token_ratio
from .registry import register


def _grid(start: float, step: float, stop: float, device: torch.device) -> torch.Tensor:
    """start, start + step, … and then stop itself if the steps do not land on it (the code's
    min(cur + step, max)); just [start] if start ≥ stop or step ≤ 0. float64."""
    if step <= 0 or start >= stop:
        return torch.tensor([start], dtype=torch.float64, device=device)
    n = max(math.floor((stop - start) / step + 1e-9), 0) + 1
    values = [round(start + k * step, 10) for k in range(n)]
    if values[-1] < stop - 1e-9:
        values.append(stop)
    return torch.tensor(values, dtype=torch.float64, device=device)


def _bin_sum(x: torch.Tensor, bins: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Σ of x per bin, (n_bins,). (index_add_, not bincount: bincount scans its input for min/max.)"""
    return torch.zeros(n_bins, dtype=x.dtype, device=x.device).index_add_(0, bins, x)


def prepare(inp: LossInputs, *, eps: float, rho0: float = 0.5, c_low: float = 0.6, c_low_step: float = 0.05,
            c_low_max: float = 0.9, c_high: float = 1.2, c_high_step: float = 0.05,
            c_high_max: float = 3.0) -> BatchContext:
    dev = inp.logp.device
    r = token_ratio(inp).detach().to(torch.float64).flatten()            # (B·T,)  ρ
    adv = inp.advantages.to(torch.float64).unsqueeze(1)
    m = inp.mask.to(torch.float64)
    pos = (m * adv.clamp(min=0)).flatten()                      # m·A of A>0 tokens, else 0
    neg = (m * (-adv).clamp(min=0)).flatten()                   # m·|A| of A<0 tokens, else 0
    highs = _grid(c_high, c_high_step, c_high_max, dev)         # (H,) increasing
    lows = _grid(c_low, c_low_step, c_low_max, dev)             # (L,) increasing
    H, L = len(highs), len(lows)
    # P(h_k) = Σ pos·min(ρ, h_k) for every k at once. With j = #{k: h_k < ρ} (bucketize), min(ρ, h_k) is
    # ρ for k ≥ j and h_k for k < j, so P(h_k) = Σ_{j ≤ k} pos·ρ + h_k · Σ_{j > k} pos (two bin sums).
    j = torch.bucketize(r, highs, right=False)
    pos_r = torch.cumsum(_bin_sum(pos * r, j, H + 1), 0)[:H]
    pos_w = torch.cumsum(_bin_sum(pos, j, H + 1), 0)[:H]
    p_of_high = pos_r + highs * (pos.sum() - pos_w)                     # (H,)
    # N(l_k) = Σ neg·max(ρ, l_k). With j = #{k: l_k ≤ ρ}, max(ρ, l_k) is ρ for k < j and l_k for k ≥ j.
    j = torch.bucketize(r, lows, right=True)
    neg_times_r = neg * r
    neg_r = torch.cumsum(_bin_sum(neg_times_r, j, L + 1), 0)[:L]
    neg_w = torch.cumsum(_bin_sum(neg, j, L + 1), 0)[:L]
    n_of_low = neg_times_r.sum() - neg_r + lows * neg_w                 # (L,)
    # The loops' path: (c_low_k, c_high_0) for k = 0..L-1, then (c_low_max, c_high_j) for j = 1..H-1.
    path_low = torch.cat([lows, lows[-1:].expand(H - 1)])
    path_n = torch.cat([n_of_low, n_of_low[-1:].expand(H - 1)])
    path_high = torch.cat([highs[:1].expand(L), highs[1:]])
    path_p = torch.cat([p_of_high[:1].expand(L), p_of_high[1:]])
    if not 0 < rho0 < 1:
        raise ValueError(f"bapo: rho0 must be in (0, 1) (the target positive share); got {rho0}")
    target = rho0 / (1.0 - rho0)
    inf = torch.full((), torch.inf, dtype=torch.float64, device=dev)
    path_ratio = torch.where(path_n > 0, path_p / (path_n + 1e-8), inf)       # the code's P / (N + 1e-8)
    done = path_ratio >= target
    k = int(torch.argmax(done.to(torch.int8))) if bool(done.any()) else len(path_p) - 1
    ratio_pn = path_ratio[k]
    return BatchContext(tensors={"c_low": path_low[k], "c_high": path_high[k]}, metrics={
        "bapo/c_low": path_low[k], "bapo/c_high": path_high[k], "bapo/pos_neg_ratio": ratio_pn})


@register("bapo", prepare=prepare, uses_eps=False, trust_region="token-clip", correction="token-is",
          reads=("theta", "behavior"),
          source="WooooDyy/BAPO recipe/bapo/policy_loss.py@7287044444d5d578529ea464b45f090a36e8da3a; README values")
def bapo(inp: LossInputs, ctx: BatchContext, *, eps: float, dual_clip: float | None = 3.0):
    low = ctx.tensors["c_low"].to(inp.logp.dtype)
    high = ctx.tensors["c_high"].to(inp.logp.dtype)
    ratio = token_ratio(inp)                                     # (B, T)
    loss = ppo_clip_token_loss(ratio, inp.advantages, low, high, dual_clip)
    r = ratio.detach()
    adv = inp.advantages.unsqueeze(1)
    clipped = ((adv < 0) & (r < low)) | ((adv > 0) & (r > high))
    return loss, {"is/clip_frac": masked_mean(clipped.float(), inp.mask)}
