"""The estimator contract, as checks anyone can run on their own estimator (a plugin's tests, too).

    from algorithms.testing import check_estimator
    check_estimator("my_estimator")            # raises AssertionError naming the broken rule

Every registered estimator must: give a finite, differentiable 0-d loss with metrics that are plain
finite floats named "area/name"; give zero gradient on padding whatever the padding holds; reduce to the
plain policy gradient −∇ aggregate(A · logp) on-policy (logp == logp_behavior, one update), where every
trust region is inactive; read logp_rollout = None as logp_behavior; and give the same loss and gradient when the batch is split into micro-batches
(batch statistics from `prepare_context` on the whole batch, step-global denominators). stalebench's own
contract tests run these over every built-in estimator and aggregation.
"""
from __future__ import annotations

import math
import re

import torch

from .common import AGGREGATIONS, LossInputs, aggregate
from .registry import compute_loss, prepare_context

B, T = 6, 5                                    # two groups of three responses, five token slots each


def contract_batch(seed: int = 0, spread: float = 0.3) -> LossInputs:
    """A small float64 batch with padding at the end of rows and a one-token row; ratios exp(±spread)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([5, 3, 1, 4, 2, 5])                                   # (B,)
    mask = torch.arange(T)[None, :] < lengths[:, None]                           # (B, T)
    logp_behavior = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 2 - 0.1
    logp = logp_behavior + spread * torch.randn(B, T, generator=gen, dtype=torch.float64)
    adv = torch.tensor([1.2, -0.7, 0.4, -1.5, 0.9, -0.3], dtype=torch.float64)
    return LossInputs(logp.requires_grad_(True), logp_behavior, adv, mask, torch.tensor([0, 0, 0, 1, 1, 1]))


def _agg(aggregation: str) -> dict:
    return {"aggregation": aggregation, "max_tokens": T if aggregation == "seq-mean-token-sum-norm" else None}


def check_finite_and_metrics(name: str, aggregation: str = "token-mean", **params) -> None:
    inp = contract_batch()
    out = compute_loss(name, inp, eps=0.2, **_agg(aggregation), **params)
    assert out.loss.dim() == 0 and out.loss.requires_grad, f"{name}: the loss must be a differentiable 0-d tensor"
    assert math.isfinite(float(out.loss.detach())), f"{name}: the loss is not finite"
    out.loss.backward()
    assert torch.isfinite(inp.logp.grad).all(), f"{name}: the gradient is not finite"
    for key, value in out.metrics.items():
        assert re.fullmatch(r"[a-z0-9_]+/[a-z0-9_]+", key), f"{name}: metric {key!r} is not named area/name"
        assert type(value) is float and math.isfinite(value), f"{name}: metric {key!r} = {value!r} is not a finite float"


def check_zero_gradient_on_padding(name: str, aggregation: str = "token-mean", **params) -> None:
    clean = contract_batch()
    pad = ~clean.mask
    junk = torch.tensor([math.nan, math.inf, -math.inf], dtype=torch.float64).repeat(B * T)[: B * T].view(B, T)
    logp = torch.where(pad, junk, clean.logp.detach()).requires_grad_(True)
    dirty = LossInputs(logp, torch.where(pad, junk.flip(1), clean.logp_behavior), clean.advantages, clean.mask,
                       clean.group_ids)
    out = compute_loss(name, dirty, eps=0.2, **_agg(aggregation), **params)
    out.loss.backward()
    assert torch.equal(logp.grad[pad], torch.zeros(int(pad.sum()), dtype=torch.float64)), \
        f"{name}: padding tokens get a gradient"
    ref = compute_loss(name, clean, eps=0.2, **_agg(aggregation), **params)
    ref.loss.backward()
    assert torch.allclose(out.loss, ref.loss, rtol=1e-12, atol=1e-12) and torch.allclose(
        logp.grad, clean.logp.grad, rtol=1e-12, atol=1e-12), f"{name}: what the padding holds changes the result"


def check_on_policy_limit(name: str, aggregation: str = "token-mean", **params) -> None:
    base = contract_batch(seed=3)
    logp = base.logp_behavior.clone().requires_grad_(True)
    inp = LossInputs(logp, base.logp_behavior, base.advantages, base.mask, base.group_ids)
    compute_loss(name, inp, eps=0.2, **_agg(aggregation), **params).loss.backward()
    ref = base.logp_behavior.clone().requires_grad_(True)
    aggregate(-base.advantages[:, None] * ref, base.mask, aggregation, max_tokens=_agg(aggregation)["max_tokens"]).backward()
    assert torch.allclose(logp.grad, ref.grad, rtol=1e-6, atol=1e-9), \
        f"{name}: on-policy, the gradient is not the plain policy gradient −∇ aggregate(A·logp)"


def check_rollout_defaults_to_behavior(name: str, aggregation: str = "token-mean", **params) -> None:
    """logp_rollout = None means "the same as logp_behavior": passing it explicitly (with junk on the padding)
    changes neither the loss nor the gradient."""
    implicit = contract_batch(spread=0.5)
    compute_loss(name, implicit, eps=0.2, **_agg(aggregation), **params).loss.backward()
    base = contract_batch(spread=0.5)
    junk = torch.full((B, T), math.nan, dtype=torch.float64)
    explicit = LossInputs(base.logp, base.logp_behavior, base.advantages, base.mask, base.group_ids, None,
                          torch.where(base.mask, base.logp_behavior, junk))
    out = compute_loss(name, explicit, eps=0.2, **_agg(aggregation), **params)
    out.loss.backward()
    assert torch.allclose(base.logp.grad, implicit.logp.grad, rtol=1e-12, atol=1e-12), \
        f"{name}: logp_rollout equal to logp_behavior changes the gradient"


def check_micro_batch_invariance(name: str, aggregation: str = "token-mean", **params) -> None:
    whole = contract_batch(spread=0.6)
    compute_loss(name, whole, eps=0.2, **_agg(aggregation), **params).loss.backward()
    full = contract_batch(spread=0.6)
    ctx = prepare_context(name, full, eps=0.2, **params)
    total = {"total_tokens": float(full.mask.sum()), "total_seqs": float(B)}
    for rows in ([0, 4], [5, 1, 2], [3]):                      # cuts both groups, uneven, not contiguous
        idx = torch.tensor(rows)
        compute_loss(name, full.rows(idx), eps=0.2, **_agg(aggregation), **total, context=ctx.rows(idx),
                     **params).loss.backward()
    assert torch.allclose(full.logp.grad, whole.logp.grad, rtol=1e-6, atol=1e-9), \
        f"{name}: micro-batches do not sum to the whole batch's gradient"


CHECKS = (check_finite_and_metrics, check_zero_gradient_on_padding, check_on_policy_limit,
          check_rollout_defaults_to_behavior, check_micro_batch_invariance)


def check_estimator(name: str, **params) -> None:
    """Run every contract check for every aggregation; raises AssertionError naming the first failure."""
    for aggregation in AGGREGATIONS:
        for check in CHECKS:
            check(name, aggregation, **params)
