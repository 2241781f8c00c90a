"""Micro-batching is exact: whole batch == sum over micro-batches, value and gradient.

The trainer computes the batch statistics once (`prepare_context` on the full step batch) and the
global denominators (valid tokens, responses), then calls `compute_loss` per micro-batch with
`context=ctx.rows(idx)`. Splits here cut groups in half, are uneven, and are not contiguous.
"""
from __future__ import annotations

import pytest
import torch

from algorithms import AGGREGATIONS, LossInputs, compute_loss, loss_names, prepare_context

B, T = 10, 4
GROUP_IDS = torch.tensor([5, 5, 5, 5, 2, 2, 2, 9, 9, 9])        # groups of 4, 3, 3

SPLITS = {
    "halves (cut group 2)": [range(0, 5), range(5, 10)],
    "uneven": [range(0, 1), range(1, 7), range(7, 9), range(9, 10)],
    "one row each": [range(i, i + 1) for i in range(B)],
    "interleaved": [[0, 4, 7, 2], [9, 1], [3, 5, 6, 8]],
}


def make_batch() -> LossInputs:
    """Stale enough that every estimator's statistics act: ratios far from 1 (clipping, GMC capping,
    M2PO dropping some tokens), negative advantages outweighing positive ones (BAPO must move its bounds)."""
    gen = torch.Generator().manual_seed(0)
    lengths = torch.tensor([4, 2, 3, 1, 4, 4, 2, 3, 1, 4])
    mask = torch.arange(T)[None, :] < lengths[:, None]                        # (B, T)
    logp_behavior = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 2 - 0.1
    logp = logp_behavior + 0.3 * torch.randn(B, T, generator=gen, dtype=torch.float64)
    adv = torch.tensor([0.9, -1.5, -0.85, 0.4, -1.8, 0.5, -1.1, 1.0, -0.7, 0.3], dtype=torch.float64)
    return LossInputs(logp.requires_grad_(True), logp_behavior, adv, mask, GROUP_IDS)


# Estimators whose defaults reject every token of a batch this stale (verl's Geo-RS at 0.999_1.001 keeps mean
# log-ratios within ±0.001, SkyRL's geometric mask within ±1%): here with bounds that reject some responses (for
# verl's, a K3 threshold that rejects 60% of the tokens, normalized by the tokens kept: a batch statistic).
BATCH_STAT_PARAMS = {name: {"rs": "seq_mean_k3", "rs_threshold": 0.03, "normalize": "kept"}
                     for name in ("rollout_rs", "rollout_rs_bypass")}
STALE_PARAMS = {**BATCH_STAT_PARAMS, "geo_mask": {"geo_mask_low": 0.8, "geo_mask_high": 1.25}}


def agg_kwargs(aggregation: str) -> dict:
    return {"aggregation": aggregation, "max_tokens": T if aggregation == "seq-mean-token-sum-norm" else None}


def test_the_batch_exercises_the_batch_statistics():
    m = {}
    for name in ("grpo", "gmc_grpo", "m2po_mask", "bapo", "tic_is"):
        m.update(compute_loss(name, make_batch(), eps=0.2).metrics)
    assert m["is/clip_frac"] > 0
    assert 0 < m["gmc/capped_frac"] < 1
    assert 0 < m["m2po/masked_frac"] < 1
    assert m["bapo/c_low"] == 0.9 and m["bapo/c_high"] > 1.2          # both bounds moved (c_low first)
    assert 0 < m["tic/clipped_frac"] < 1


def whole_and_micro(name: str, aggregation: str, split: list, use_context: bool = True, **params):
    whole = make_batch()
    loss_whole = compute_loss(name, whole, eps=0.2, **agg_kwargs(aggregation), **params).loss
    loss_whole.backward()

    full = make_batch()
    ctx = prepare_context(name, full, eps=0.2, **params)
    n_tokens, n_seqs = float(full.mask.sum()), float(B)
    loss_micro = torch.zeros((), dtype=torch.float64)
    for rows in split:
        idx = torch.tensor(list(rows))
        out = compute_loss(name, full.rows(idx), eps=0.2, **agg_kwargs(aggregation), total_tokens=n_tokens,
                           total_seqs=n_seqs, context=ctx.rows(idx) if use_context else None, **params)
        out.loss.backward()                                   # gradients accumulate in full.logp.grad
        loss_micro = loss_micro + out.loss.detach()
    return loss_whole.detach(), whole.logp.grad, loss_micro, full.logp.grad


@pytest.mark.parametrize("split", sorted(SPLITS))
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("name", loss_names())
def test_micro_batches_sum_to_the_whole_batch(name, aggregation, split):
    loss_whole, grad_whole, loss_micro, grad_micro = whole_and_micro(name, aggregation, SPLITS[split],
                                                                     **STALE_PARAMS.get(name, {}))
    torch.testing.assert_close(loss_micro, loss_whole, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(grad_micro, grad_whole, rtol=1e-6, atol=1e-9)
    assert grad_whole.abs().max() > 1e-3


# m2po without its minimum widths: at this batch's spread (λ ~ 0.3) the widened bounds never bind.
@pytest.mark.parametrize("name, params", [("gmc_grpo", {}), ("m2po_mask", {}), ("bapo", {}),
                                          ("m2po", {"min_eps_low": None, "min_eps_high": None}),
                                          *BATCH_STAT_PARAMS.items()])
def test_without_the_shared_context_micro_batches_differ(name, params):
    # The control: the estimators with batch-wide statistics give a different answer when each
    # micro-batch computes its own, so the test above would notice a context that is not used.
    loss_whole, grad_whole, loss_micro, grad_micro = whole_and_micro(
        name, "token-mean", SPLITS["one row each"], use_context=False, **params)
    assert (grad_micro - grad_whole).abs().max() > 1e-4
