"""Which estimators compute the same gradient in a regime (so that no table counts one method twice).

    from algorithms.coincidence import Regime, coinciding
    coinciding({"decoupled": ("decoupled", 0.2, {"behavior_weight_cap": None}), "is_none": ("is_none", 0.2, {})},
               Regime(updates_per_batch=1))          # [["decoupled", "is_none"]]

A regime is what the trainer hands the estimators: with one update per batch π_prox is π_θ itself (no
`logp_proximal`), with several it differs from π_θ; without engine mismatch π_rollout is π_b (no
`logp_rollout`). The probe batches are stale (token log-ratios ~ N(0, 0.7²), with 15% of tokens ~ N(0, 3²), beyond every
clip, cap and mask of the built-in estimators) and hold several groups; two estimators coincide when their gradients agree
on every probe to 1e-9 (absolute) and 1e-7 (relative). Gradients that agree on these probes but differ
elsewhere are possible in principle; the probes are chosen so that every built-in estimator's own mechanism
acts on them. An estimator whose gradient is zero on every probe (a rejection that drops every stale token, as
verl's Geo-RS at its shipped 0.999_1.001 does) has nothing to compare: `coinciding` leaves it out of every
group and `without_gradient` names it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from .common import LossInputs
from .registry import compute_loss

B, T, G = 12, 6, 3             # four groups of three responses, six token slots


@dataclass(frozen=True)
class Regime:
    updates_per_batch: int = 1          # > 1: π_prox differs from π_θ at the update
    engine_mismatch: bool = False       # True: π_rollout differs from π_b

    def describe(self) -> dict[str, object]:
        return {"updates_per_batch": self.updates_per_batch, "engine_mismatch": self.engine_mismatch}


def probe_batch(regime: Regime, seed: int) -> LossInputs:
    """A stale float64 batch of the regime: padding at the ends of rows, mixed-sign advantages."""
    gen = torch.Generator().manual_seed(1000 + seed)
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    mask = torch.arange(T)[None, :] < lengths[:, None]                               # (B, T)
    logp_behavior = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 3 - 0.05
    spread = torch.where(torch.rand(B, T, generator=gen) < 0.15, 3.0, 0.7)          # some tokens far out
    logp = logp_behavior + spread * torch.randn(B, T, generator=gen, dtype=torch.float64)
    adv = torch.randn(B, generator=gen, dtype=torch.float64)
    prox = None
    if regime.updates_per_batch > 1:
        prox = logp - 0.15 * torch.randn(B, T, generator=gen, dtype=torch.float64)
    rollout = None
    if regime.engine_mismatch:
        rollout = logp_behavior + 0.2 * torch.randn(B, T, generator=gen, dtype=torch.float64)
    return LossInputs(logp.clamp(max=-1e-3).requires_grad_(True), logp_behavior, adv, mask,
                      torch.arange(B) // G, prox, rollout)


def gradient(name: str, inp: LossInputs, eps: float, params: Mapping[str, object], aggregation: str) -> torch.Tensor:
    """∇ of estimator `name`'s loss w.r.t. logp on `inp` (B, T)."""
    logp = inp.logp.detach().clone().requires_grad_(True)
    fresh = LossInputs(logp, inp.logp_behavior, inp.advantages, inp.mask, inp.group_ids, inp.logp_proximal,
                       inp.logp_rollout)
    max_tokens = T if aggregation == "seq-mean-token-sum-norm" else None
    compute_loss(name, fresh, eps=eps, aggregation=aggregation, max_tokens=max_tokens, **params).loss.backward()
    return logp.grad


def coinciding(specs: Mapping[str, tuple[str, float, Mapping[str, object]]], regime: Regime = Regime(),
               aggregation: str = "token-mean", probes: int = 2) -> list[list[str]]:
    """Groups (of two or more labels, sorted) of `specs` — label -> (estimator, ε, params) — whose gradients
    coincide on every probe batch of `regime`."""
    grads = _gradients(specs, regime, aggregation, probes)
    labels = [lb for lb in sorted(specs) if any(bool(g.any()) for g in grads[lb])]
    groups: list[list[str]] = []
    for lb in labels:
        for group in groups:
            if all(torch.allclose(g, h, rtol=1e-7, atol=1e-9) for g, h in zip(grads[lb], grads[group[0]])):
                group.append(lb)
                break
        else:
            groups.append([lb])
    return [g for g in groups if len(g) > 1]


def without_gradient(specs: Mapping[str, tuple[str, float, Mapping[str, object]]], regime: Regime = Regime(),
                     aggregation: str = "token-mean", probes: int = 2) -> list[str]:
    """The labels of `specs` whose gradient is zero on every probe batch of `regime` (sorted)."""
    grads = _gradients(specs, regime, aggregation, probes)
    return [lb for lb in sorted(specs) if not any(bool(g.any()) for g in grads[lb])]


def _gradients(specs: Mapping[str, tuple[str, float, Mapping[str, object]]], regime: Regime, aggregation: str,
               probes: int) -> dict[str, list[torch.Tensor]]:
    batches = [probe_batch(regime, s) for s in range(probes)]
    return {lb: [gradient(name, b, eps, params, aggregation) for b in batches]
            for lb, (name, eps, params) in specs.items()}
