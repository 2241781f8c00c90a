"""How often a group's ratio mass exceeds the cap G(1+ε) when the ratios have mean one (docs/benchmark-v3.md,
amendment of 2026-12-06).

    python -m studies.cap_share_simulation [--groups 200000] [--G 16] [--eps 0.2]

Responses sampled from the behaviour policy π_b have importance ratios r = π_θ/π_b with E_b[r] = 1, so a
group of G responses has E[Σ_g r] = G whatever the drift. Model: Λ = log r ~ Normal(−σ²/2, σ²) (log-normal
with mean one), G independent responses per group. For each σ, the share of groups with Σ_g r > G(1+ε),
and the median |Λ| (what the reports' `is/traj_abs_log_ratio_q50` measures), from ``--groups`` simulated groups
(numpy, seeded with 0). As σ grows the sum's mean stays G while its median falls (the mass moves into rare
large ratios), so the share over the cap rises, peaks and falls: it cannot be driven towards 1 by more drift.
"""
from __future__ import annotations

import argparse

import numpy as np

SIGMAS = (0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0)


def share_over_cap(sigma: float, groups: int, G: int, eps: float, rng: np.random.Generator) -> tuple[float, float]:
    """(share of groups with Σ r > G(1+ε), median |Λ|) for log-normal mean-one ratios with log-SD sigma."""
    log_r = rng.normal(-sigma ** 2 / 2, sigma, size=(groups, G))       # (groups, G)
    over = np.exp(log_r).sum(axis=1) > G * (1 + eps)
    return float(over.mean()), float(np.median(np.abs(log_r)))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=200_000)
    ap.add_argument("--G", type=int, default=16)
    ap.add_argument("--eps", type=float, default=0.2)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"G = {args.G}, ε = {args.eps}, cap G(1+ε) = {args.G * (1 + args.eps):g}, {args.groups} groups per σ")
    print(f"{'σ':>5}  {'median |Λ|':>10}  {'groups over cap':>15}")
    for sigma in SIGMAS:
        share, med = share_over_cap(sigma, args.groups, args.G, args.eps, rng)
        print(f"{sigma:>5g}  {med:>10.3f}  {100 * share:>14.1f}%")


if __name__ == "__main__":
    main()
