"""Golden tests: each estimator read from a framework's code against numbers computed with that framework's own
functions on a fixed batch (tests/data/golden/*.json; the authors' code itself is never committed).

Each file holds `source` (repository@commit and the functions run), `computed` (dtype and settings), the `batch`
(tensors as lists) and `cases`: the framework's options, the stalebench estimator and parameters that should
compute the same loss, and the framework's loss and gradient w.r.t. the policy log-probs. Our loss and gradient
must match to 1e-6 (float64), under the case's `aggregation` (token-mean unless it names one: verl's gspo, sapo
and geo_mean aggregate per sequence whatever their loss_agg_mode). A framework loss of null is NaN (verl's 0/0 when
every token is rejected): ours is then 0 with a zero gradient, the deviation each estimator's docstring states.
`algorithms/framework_map.py` cites these cases by file and name.
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
# prime-rl's losses, verl's policy losses on the sampler's log-probs) take their own π_θ ("theta_bypass", close
# enough to π_rollout for Geo-RS to keep some rows)
DECOUPLED, TWO_POLICIES = ("theta", "prox", "rollout"), ("theta_bypass", None, "rollout")
POLICY_KEYS = {name: TWO_POLICIES for name in ("rollout_rs_bypass", "dppo", "ipo", "grpo", "cispo", "gspo", "sapo",
                                               "geo_mean")}


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
    out = compute_loss(case["estimator"], inp, eps=case["eps"], aggregation=case.get("aggregation", "token-mean"),
                       **case["params"])
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


def our_grad(file: str, case_name: str, aggregation: str | None = None, **params) -> torch.Tensor:
    """Our gradient on a case of `file`, with its parameters updated by `params` (and another aggregation)."""
    data = load(file)
    case = {c["case"]: c for c in data["cases"]}[case_name]
    inp = inputs(data["batch"], case["estimator"])
    compute_loss(case["estimator"], inp, eps=case["eps"], aggregation=aggregation or case.get("aggregation", "token-mean"),
                 **{**case["params"], **params}).loss.backward()
    return inp.logp.grad


def golden_grad(file: str, case_name: str) -> torch.Tensor:
    return torch.tensor({c["case"]: c for c in load(file)["cases"]}[case_name]["grad"], dtype=F64)


def test_the_policy_loss_and_trl_cases_exercise_what_they_claim():
    """Each setting the new cases name acts on the batch: without it, ours would not give the framework's numbers."""
    verl, trl = "verl_policy_losses.json", "trl_grpo_is.json"
    vanilla = "loss_mode vanilla (clip_ratio 0.2, clip_ratio_c 3.0)"
    assert not torch.allclose(our_grad(verl, vanilla, dual_clip=None), golden_grad(verl, vanilla))   # the dual clip acts
    for mode in ("gspo (clip_ratio 0.2)", "sapo (tau_pos 1.0, tau_neg 1.05)", "geo_mean (clip_ratio 0.2)"):
        case = f"loss_mode {mode}"                                    # verl aggregates these per sequence
        assert not torch.allclose(our_grad(verl, case, aggregation="token-mean"), golden_grad(verl, case))
    bounds = " (clip_min 0.5, clip_max 1.5)", " (clip_min 0.5, clip_max 1.05)"
    for mode, bound in (("token_truncate", bounds[0]), ("token_mask", bounds[0]), ("sequence_truncate", bounds[1]),
                        ("sequence_mask", bounds[1])):
        case = f"vllm_importance_sampling_mode {mode}"               # the bounds truncate / mask something
        assert not torch.allclose(golden_grad(trl, case + bound), golden_grad(trl, case + " (clip_max 3.0)"))
    for mode in ("token_truncate", "token_mask"):                     # TRL's default clip_max 3 acts at token level
        case = f"vllm_importance_sampling_mode {mode} (clip_max 3.0)"
        assert not torch.allclose(our_grad(trl, case, cap=1e9), golden_grad(trl, case))
    opsm = "off_policy_mask_threshold 0.5 (vllm_importance_sampling_correction false)"
    assert not torch.allclose(our_grad(trl, opsm, threshold=1.1), golden_grad(trl, opsm))        # δ 0.5 masks one
