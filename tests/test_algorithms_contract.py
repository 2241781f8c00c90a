"""Contract tests run over every registered estimator and every aggregation.

What every estimator must do, whatever its math: a finite differentiable loss; zero gradient on padding
whatever the padding holds; metrics as plain floats named "area/name"; the on-policy limit (logp ==
logp_behavior, one update) gives the plain policy gradient −∇ aggregate(A · logp); and bad input or
configuration is a ValueError that names what is wrong.
"""
from __future__ import annotations

import math
import re

import pytest
import torch

from algorithms import (AGGREGATIONS, LossInputs, aggregate, compute_loss, estimator_defaults, loss_names,
                        prepare_context)

NAMES = loss_names()
B, T = 6, 5            # two groups of three responses, five token slots each


def make_batch(seed: int = 0, dtype: torch.dtype = torch.float64, spread: float = 0.3) -> LossInputs:
    """A small float64 batch with padding at the end of rows and one row of a single token."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([5, 3, 1, 4, 2, 5])                                   # (B,)
    mask = torch.arange(T)[None, :] < lengths[:, None]                           # (B, T)
    logp_behavior = -torch.rand(B, T, generator=gen, dtype=dtype) * 2 - 0.1
    logp = logp_behavior + spread * torch.randn(B, T, generator=gen, dtype=dtype)
    adv = torch.tensor([1.2, -0.7, 0.4, -1.5, 0.9, -0.3], dtype=dtype)
    group_ids = torch.tensor([0, 0, 0, 1, 1, 1])
    return LossInputs(logp.requires_grad_(True), logp_behavior, adv, mask, group_ids)


def agg_kwargs(aggregation: str) -> dict:
    return {"aggregation": aggregation, "max_tokens": T if aggregation == "seq-mean-token-sum-norm" else None}


def test_registry_holds_the_specified_estimators():
    assert set(NAMES) >= {"grpo", "tic_grpo", "gmc_grpo", "m2po", "bapo", "is_none", "gspo", "topr", "tis",
                          "vespo", "luspo"}
    assert NAMES == sorted(NAMES)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("name", NAMES)
def test_loss_is_finite_and_metrics_are_named_floats(name, aggregation):
    inp = make_batch()
    out = compute_loss(name, inp, eps=0.2, **agg_kwargs(aggregation))
    assert out.loss.dim() == 0 and out.loss.requires_grad
    assert math.isfinite(float(out.loss.detach()))
    out.loss.backward()
    assert torch.isfinite(inp.logp.grad).all()
    for key, value in out.metrics.items():
        assert re.fullmatch(r"[a-z0-9_]+/[a-z0-9_]+", key), key
        assert type(value) is float, (key, type(value))
        assert math.isfinite(value), (key, value)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("name", NAMES)
def test_padding_gets_zero_gradient_even_when_it_holds_nan_or_inf(name, aggregation):
    clean = make_batch()
    pad = ~clean.mask
    junk = torch.tensor([math.nan, math.inf, -math.inf], dtype=torch.float64).repeat(B * T)[: B * T].view(B, T)
    logp = torch.where(pad, junk, clean.logp.detach()).requires_grad_(True)
    logp_behavior = torch.where(pad, junk.flip(1), clean.logp_behavior)
    dirty = LossInputs(logp, logp_behavior, clean.advantages, clean.mask, clean.group_ids)

    out = compute_loss(name, dirty, eps=0.2, **agg_kwargs(aggregation))
    out.loss.backward()
    assert pad.any() and torch.isfinite(logp.grad).all()
    assert torch.equal(logp.grad[pad], torch.zeros(int(pad.sum()), dtype=torch.float64))
    # And the padding's contents change nothing: same loss and gradient as with clean padding.
    ref = compute_loss(name, clean, eps=0.2, **agg_kwargs(aggregation))
    ref.loss.backward()
    torch.testing.assert_close(out.loss, ref.loss, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(logp.grad, clean.logp.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("name", NAMES)
def test_on_policy_gradient_is_the_plain_policy_gradient(name, aggregation):
    # logp == logp_behavior with one update: every ratio is 1, so every trust region is inactive and
    # each estimator's gradient must equal that of −aggregate(A · logp) (REINFORCE with advantages).
    base = make_batch(seed=3)
    logp = base.logp_behavior.clone().requires_grad_(True)
    inp = LossInputs(logp, base.logp_behavior, base.advantages, base.mask, base.group_ids)
    compute_loss(name, inp, eps=0.2, **agg_kwargs(aggregation)).loss.backward()

    ref_logp = base.logp_behavior.clone().requires_grad_(True)
    token_loss = -base.advantages[:, None] * ref_logp                                   # (B, T)
    aggregate(token_loss, base.mask, aggregation, max_tokens=agg_kwargs(aggregation)["max_tokens"]).backward()
    assert ref_logp.grad.abs().max() > 0.01
    torch.testing.assert_close(logp.grad, ref_logp.grad, rtol=1e-6, atol=1e-9)


def test_unknown_estimator_lists_the_valid_names():
    with pytest.raises(ValueError, match="no_such_estimator") as err:
        compute_loss("no_such_estimator", make_batch())
    for name in NAMES:
        assert name in str(err.value)
    with pytest.raises(ValueError, match="no_such_estimator"):
        prepare_context("no_such_estimator", make_batch())


@pytest.mark.parametrize("name", NAMES)
def test_unknown_parameter_names_the_valid_ones(name):
    with pytest.raises(ValueError, match="bogus_param") as err:
        compute_loss(name, make_batch(), eps=0.2, bogus_param=1.0)
    for param in ["eps", *estimator_defaults(name)]:
        assert re.search(rf"\b{param}\b", str(err.value)), (param, str(err.value))
    with pytest.raises(ValueError, match="bogus_param"):
        prepare_context(name, make_batch(), eps=0.2, bogus_param=1.0)


@pytest.mark.parametrize("name", NAMES)
def test_defaults_are_accepted_as_parameters(name):
    # Passing an estimator's own defaults explicitly must give the same loss as passing nothing.
    inp = make_batch()
    default = compute_loss(name, inp, eps=0.2).loss
    explicit = compute_loss(name, inp, eps=0.2, **estimator_defaults(name)).loss
    assert torch.equal(default, explicit)


def test_unknown_aggregation_and_missing_k_are_errors():
    with pytest.raises(ValueError, match="token-mean"):
        compute_loss("grpo", make_batch(), aggregation="sum")
    with pytest.raises(ValueError, match="max_tokens"):
        compute_loss("grpo", make_batch(), aggregation="seq-mean-token-sum-norm")


def _replace(inp: LossInputs, **fields) -> LossInputs:
    values = {f: getattr(inp, f) for f in ("logp", "logp_behavior", "advantages", "mask", "group_ids",
                                           "logp_proximal")}
    values.update(fields)
    return LossInputs(**values)


def _with_value(t: torch.Tensor, row: int, col: int | None, value: float) -> torch.Tensor:
    t = t.detach().clone()
    if col is None:
        t[row] = value
    else:
        t[row, col] = value
    return t


# (input named in the error, how to corrupt a valid batch). Row 0 has 5 valid tokens, so (0, 2) is valid.
BAD_INPUTS = {
    "logp_behavior shape": ("logp_behavior", lambda i: _replace(i, logp_behavior=i.logp_behavior[:, :-1])),
    "mask shape": ("mask", lambda i: _replace(i, mask=i.mask[:-1])),
    "advantages shape": ("advantages", lambda i: _replace(i, advantages=i.advantages[:, None])),
    "group_ids shape": ("group_ids", lambda i: _replace(i, group_ids=i.group_ids[:-1])),
    "logp_proximal shape": ("logp_proximal", lambda i: _replace(i, logp_proximal=i.logp_behavior[:, :2])),
    "logp not 2-d": ("logp", lambda i: _replace(i, logp=i.logp[0])),
    "logp nan": ("logp", lambda i: _replace(i, logp=_with_value(i.logp, 0, 2, math.nan))),
    "logp inf": ("logp", lambda i: _replace(i, logp=_with_value(i.logp, 0, 2, -math.inf))),
    "logp_behavior nan": ("logp_behavior", lambda i: _replace(i, logp_behavior=_with_value(i.logp_behavior, 0, 2, math.nan))),
    "logp_behavior inf": ("logp_behavior", lambda i: _replace(i, logp_behavior=_with_value(i.logp_behavior, 0, 2, math.inf))),
    "logp_proximal nan": ("logp_proximal", lambda i: _replace(i, logp_proximal=_with_value(i.logp_behavior, 0, 2, math.nan))),
    "advantages nan": ("advantages", lambda i: _replace(i, advantages=_with_value(i.advantages, 1, None, math.nan))),
    "advantages inf": ("advantages", lambda i: _replace(i, advantages=_with_value(i.advantages, 1, None, math.inf))),
    "all masked": ("mask", lambda i: _replace(i, mask=torch.zeros_like(i.mask))),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
@pytest.mark.parametrize("name", NAMES)
def test_bad_inputs_raise_value_error_naming_the_input(name, case):
    field, corrupt = BAD_INPUTS[case]
    bad = corrupt(make_batch())
    # \b…\b around the name, and "_" is a word character: "logp" does not match inside "logp_behavior".
    with pytest.raises(ValueError, match=rf"\b{field}\b"):
        compute_loss(name, bad, eps=0.2)


def test_mask_may_be_zero_one_numbers():
    inp = make_batch()
    as_int = _replace(inp, mask=inp.mask.to(torch.int64))
    assert torch.equal(compute_loss("grpo", as_int).loss, compute_loss("grpo", inp).loss)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", NAMES)
def test_cuda_matches_cpu(name):
    # Every tensor an estimator creates must live on the inputs' device (a CPU-only grid or mask
    # would fail here), and the results must match the CPU's.
    cpu = make_batch(spread=0.5)
    dev = LossInputs(cpu.logp.detach().cuda().requires_grad_(True), cpu.logp_behavior.cuda(),
                     cpu.advantages.cuda(), cpu.mask.cuda(), cpu.group_ids.cuda())
    out_cpu = compute_loss(name, cpu, eps=0.2)
    out_dev = compute_loss(name, dev, eps=0.2)
    out_cpu.loss.backward()
    out_dev.loss.backward()
    torch.testing.assert_close(out_dev.loss.cpu(), out_cpu.loss, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(dev.logp.grad.cpu(), cpu.logp.grad, rtol=1e-9, atol=1e-12)
    assert out_dev.metrics.keys() == out_cpu.metrics.keys()


@pytest.mark.parametrize("name", NAMES)
def test_the_public_contract_helper_passes_for_every_estimator(name):
    from algorithms.testing import check_estimator
    check_estimator(name)


def test_the_public_contract_helper_catches_a_broken_estimator():
    """A plugin author's safety net must be able to fail: an estimator whose on-policy gradient is twice
    the policy gradient is caught, with a message naming the estimator and the rule."""
    from algorithms import register
    from algorithms.registry import _REGISTRY
    from algorithms.testing import check_estimator

    @register("test_doubled")
    def doubled(inp, ctx, *, eps):
        return -inp.advantages[:, None] * torch.exp(inp.logp - inp.logp_behavior.detach()) * 2, {}

    try:
        with pytest.raises(AssertionError, match="test_doubled: on-policy"):
            check_estimator("test_doubled")
    finally:
        del _REGISTRY["test_doubled"]
