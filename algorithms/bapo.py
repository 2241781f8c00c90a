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
c_low, so every state along the loop's path is evaluated at once and the first that meets the target
is taken (the last state if none does).
Deviations: we follow the spec's order (c_high first, then c_low). The official code raises c_low first
and ships other defaults. `eps` is accepted and unused (the bounds replace 1 ± ε). Bounds are a
statistic of the whole optimizer-step batch. [ours] log-ratios clamped to ±20 before exp.
"""
from __future__ import annotations

import torch

from .common import BatchContext, LossInputs, masked_mean, ppo_clip_token_loss, token_ratio
from .registry import register


def _grid(start: float, step: float, stop: float) -> torch.Tensor:
    n = int(round((stop - start) / step)) + 1
    return torch.tensor([round(start + k * step, 10) for k in range(n)], dtype=torch.float64)


def prepare(inp: LossInputs, *, eps: float, rho0: float = 0.4, c_low: float = 0.6, c_low_step: float = 0.02,
            c_low_max: float = 0.9, c_high: float = 1.2, c_high_step: float = 0.05,
            c_high_max: float = 3.0) -> BatchContext:
    ratio = token_ratio(inp).detach().to(torch.float64)          # (B, T)
    adv = inp.advantages.to(torch.float64).unsqueeze(1)
    m = inp.mask.to(torch.float64)
    highs = _grid(c_high, c_high_step, c_high_max)              # (H,)
    lows = _grid(c_low, c_low_step, c_low_max)                  # (L,)
    pos = (m * adv.clamp(min=0)).flatten()                      # weights of A>0 tokens
    neg = (m * (-adv).clamp(min=0)).flatten()                   # |A| of A<0 tokens
    r = ratio.flatten()
    p_of_high = (torch.minimum(r, highs[:, None]) * pos).sum(dim=1)     # (H,)
    n_of_low = (torch.maximum(r, lows[:, None]) * neg).sum(dim=1)       # (L,)
    # The loop's path: (c_high_k, c_low_0) for k = 0..H-1, then (c_high_max, c_low_j) for j = 1..L-1.
    path_high = torch.cat([highs, highs[-1:].expand(len(lows) - 1)])
    path_p = torch.cat([p_of_high, p_of_high[-1:].expand(len(lows) - 1)])
    path_low = torch.cat([lows[:1].expand(len(highs)), lows[1:]])
    path_n = torch.cat([n_of_low[:1].expand(len(highs)), n_of_low[1:]])
    target = rho0 / (1.0 - rho0)
    # P/N ≥ target written without division (N may be 0: then the target is met at once).
    done = path_p >= target * path_n
    k = int(torch.argmax(done.to(torch.int8))) if bool(done.any()) else len(path_p) - 1
    ratio_pn = path_p[k] / path_n[k] if bool(path_n[k] > 0) else torch.tensor(torch.inf, dtype=torch.float64)
    return BatchContext(tensors={"c_low": path_low[k], "c_high": path_high[k]}, metrics={
        "bapo/c_low": path_low[k], "bapo/c_high": path_high[k], "bapo/pos_neg_ratio": ratio_pn})


@register("bapo", prepare=prepare)
def bapo(inp: LossInputs, ctx: BatchContext, *, eps: float):
    low = ctx.tensors["c_low"].to(inp.logp.dtype)
    high = ctx.tensors["c_high"].to(inp.logp.dtype)
    ratio = token_ratio(inp)                                     # (B, T)
    loss = ppo_clip_token_loss(ratio, inp.advantages, low, high)
    r = ratio.detach()
    adv = inp.advantages.unsqueeze(1)
    clipped = ((adv < 0) & (r < low)) | ((adv > 0) & (r > high))
    return loss, {"is/clip_frac": masked_mean(clipped.float(), inp.mask)}
