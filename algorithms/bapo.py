"""bapo — Balanced Policy Optimization with adaptive clipping bounds.

Reference: BAPO (arXiv 2510.18927) and its official code.

Per optimizer step, with ρ = exp(logp − logp_behavior):
    start at c_low = 0.6, c_high = 1.2
    P = Σ_{A>0} m · min(ρ, c_high) · A          (positive contribution)
    N = Σ_{A<0} m · |max(ρ, c_low) · A|         (negative contribution)
    while P/N < ρ0 / (1 − ρ0) and a bound can still move:
        raise c_high by 0.05 (up to 3.0), else raise c_low by 0.02 (up to 0.9)
    ℓ_{i,t} = max(−A_i ρ_{i,t}, −A_i clip(ρ_{i,t}, c_low, c_high))

Symbols → code: ρ0 = `rho0` (0.4), start/step/limit of the bounds = `c_low`, `c_low_step`, `c_low_max`,
`c_high`, `c_high_step`, `c_high_max`. The loop is vectorized: P depends only on c_high and N only on
c_low, so every state along the loop's path is evaluated at once (one bucketize and two bin sums per
bound, not a (bounds × tokens) matrix) and the first that meets the target is taken (the last state if
none does). A bound moves in whole steps and never past its limit.
Deviations: we follow the spec's order (c_high first, then c_low). The official code raises c_low first
and ships other defaults. `eps` is accepted and unused (the bounds replace 1 ± ε). Bounds are a
statistic of the whole optimizer-step batch. [ours] log-ratios clamped to ±20 before exp.
Note: N is non-decreasing in c_low, so raising c_low never raises P/N: once c_high has reached its
limit below the target, c_low always ends at its limit. The official code's P and N have the same
property (it computes the same sums).
"""
from __future__ import annotations

import math

import torch

from .common import BatchContext, LossInputs, masked_mean, ppo_clip_token_loss, token_ratio
from .registry import register


def _grid(start: float, step: float, stop: float, device: torch.device) -> torch.Tensor:
    """start, start + step, … up to stop (never beyond it; just [start] if start ≥ stop), float64."""
    n = max(math.floor((stop - start) / step + 1e-9), 0) + 1
    return torch.tensor([round(start + k * step, 10) for k in range(n)], dtype=torch.float64, device=device)


def _bin_sum(x: torch.Tensor, bins: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Σ of x per bin, (n_bins,). (index_add_, not bincount: bincount scans its input for min/max.)"""
    return torch.zeros(n_bins, dtype=x.dtype, device=x.device).index_add_(0, bins, x)


def prepare(inp: LossInputs, *, eps: float, rho0: float = 0.4, c_low: float = 0.6, c_low_step: float = 0.02,
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
    # The loop's path: (c_high_k, c_low_0) for k = 0..H-1, then (c_high_max, c_low_j) for j = 1..L-1.
    path_high = torch.cat([highs, highs[-1:].expand(L - 1)])
    path_p = torch.cat([p_of_high, p_of_high[-1:].expand(L - 1)])
    path_low = torch.cat([lows[:1].expand(H), lows[1:]])
    path_n = torch.cat([n_of_low[:1].expand(H), n_of_low[1:]])
    target = rho0 / (1.0 - rho0)
    # P/N ≥ target written without division (N may be 0: then the target is met at once).
    done = path_p >= target * path_n
    k = int(torch.argmax(done.to(torch.int8))) if bool(done.any()) else len(path_p) - 1
    inf = torch.full((), torch.inf, dtype=torch.float64, device=dev)
    ratio_pn = torch.where(path_n[k] > 0, path_p[k] / path_n[k], inf)  # P/N, inf when N = 0
    return BatchContext(tensors={"c_low": path_low[k], "c_high": path_high[k]}, metrics={
        "bapo/c_low": path_low[k], "bapo/c_high": path_high[k], "bapo/pos_neg_ratio": ratio_pn})


@register("bapo", prepare=prepare, uses_eps=False)
def bapo(inp: LossInputs, ctx: BatchContext, *, eps: float):
    low = ctx.tensors["c_low"].to(inp.logp.dtype)
    high = ctx.tensors["c_high"].to(inp.logp.dtype)
    ratio = token_ratio(inp)                                     # (B, T)
    loss = ppo_clip_token_loss(ratio, inp.advantages, low, high)
    r = ratio.detach()
    adv = inp.advantages.unsqueeze(1)
    clipped = ((adv < 0) & (r < low)) | ((adv > 0) & (r > high))
    return loss, {"is/clip_frac": masked_mean(clipped.float(), inp.mask)}
