"""Golden tests: each estimator read from a framework's code against numbers computed with that framework's own
functions on a fixed batch (tests/data/golden/*.json; the authors' code itself is never committed).

Each file holds `source` (repository@commit and the functions run), `computed` (dtype and settings), the `batch`
(tensors as lists) and `cases`: the framework's options, the stalebench estimator and parameters that should
compute the same loss, and the framework's loss and gradient w.r.t. the policy log-probs. Our loss and gradient
must match to 1e-6 (float64). A framework loss of null is NaN (verl's 0/0 when every token is rejected): ours is
then 0 with a zero gradient, the deviation each estimator's docstring states. `algorithms/framework_map.py` cites
these cases by file and name.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from algorithms import LossInputs, compute_loss

GOLDEN = Path(__file__).parent / "data" / "golden"
F64 = torch.float64
# which batch tensors are logp, logp_proximal and logp_behavior (= π_rollout): every golden batch holds π_θ
# ("theta"), π_prox ("prox") and π_rollout ("rollout"); the estimators that read no π_prox (verl's bypass mode,
# prime-rl's losses) take their own π_θ ("theta_bypass", close enough to π_rollout for Geo-RS to keep some rows)
DECOUPLED, TWO_POLICIES = ("theta", "prox", "rollout"), ("theta_bypass", None, "rollout")
POLICY_KEYS = {"rollout_rs_bypass": TWO_POLICIES, "dppo": TWO_POLICIES, "ipo": TWO_POLICIES}


def load(name: str) -> dict:
    return json.loads((GOLDEN / name).read_text())


def cases() -> list[tuple[str, dict]]:
    return [(f.name, c) for f in sorted(GOLDEN.glob("*.json")) for c in json.loads(f.read_text())["cases"]]


def inputs(batch: dict, estimator: str) -> LossInputs:
    t = {k: torch.tensor(v, dtype=F64) for k, v in batch.items()}
    theta, prox, behavior = POLICY_KEYS.get(estimator, DECOUPLED)
    mask = t["mask"].bool()
    return LossInputs(t[theta].clone().requires_grad_(True), t[behavior], t["adv"], mask,
                      torch.zeros(mask.shape[0], dtype=torch.long), None if prox is None else t[prox])


@pytest.mark.parametrize("file,case", cases(), ids=[f"{f}:{c['case']}" for f, c in cases()])
def test_matches_the_authors_numbers(file, case):
    inp = inputs(load(file)["batch"], case["estimator"])
    out = compute_loss(case["estimator"], inp, eps=case["eps"], aggregation="token-mean", **case["params"])
    out.loss.backward()
    assert inp.logp.grad.abs().max() > 0 or case["loss"] is None or case["loss"] == 0.0   # a case that tests something
    expected_loss = 0.0 if case["loss"] is None else case["loss"]
    torch.testing.assert_close(out.loss.detach(), torch.tensor(expected_loss, dtype=F64), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(inp.logp.grad, torch.tensor(case["grad"], dtype=F64), rtol=1e-6, atol=1e-6)


def test_the_golden_batches_exercise_what_they_claim():
    data = load("verl_rollout_corr.json")
    by_case = {c["case"]: c for c in data["cases"]}
    # Geo-RS keeps some responses and rejects others, so it is neither a no-op nor all-or-nothing
    geo = torch.tensor(by_case["decoupled_geo_rs"]["grad"], dtype=F64)
    assert 0 < int((geo.abs().sum(dim=1) > 0).sum()) < geo.shape[0]
    assert by_case["decoupled all rejected (seq_mean_k3 1e-12)"]["loss"] is None         # verl: 0/0
    assert by_case["bypass all rejected (seq_mean_k3 1e-12) [all]"]["loss"] == 0.0       # all tokens: 0/N
    # the two bypass normalizations differ by N_all / N_kept
    a, k = by_case["bypass_pg_geo_rs [all]"]["loss"], by_case["bypass_pg_geo_rs [kept]"]["loss"]
    assert not math.isclose(a, k) and a * k > 0
    adv = torch.tensor(data["batch"]["adv"])
    assert (adv < 0).any() and (adv > 0).any()
