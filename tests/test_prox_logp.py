"""train.prox_logp: π_prox by AReaL's A-3PO interpolation (algorithms/proximal.py) instead of a forward.

Golden numbers: tests/data/areal_prox_logp.json, computed with AReaL's own `compute_prox_logp_approximations`
(inclusionAI/AReaL@4aef98d8, areal/trainer/ppo/actor.py) on the batch stored beside them (the code itself is not
committed). The hand-computed cases below carry their arithmetic in comments.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from algorithms.proximal import interpolate_proximal, interpolation_weight
from harness.config.dicts import to_dict
from harness.config.run import build_run_config
from harness.errors import ConfigError
from harness.trial.trainer import Trainer
from tests.test_trainer import run

GOLDEN = json.loads((Path(__file__).parent / "data" / "areal_prox_logp.json").read_text())


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=[c["case"] for c in GOLDEN["cases"]])
def test_matches_areals_numbers(case):
    b = GOLDEN["batch"]
    old, new = torch.tensor(b["old_logp"]), torch.tensor(b["logprobs"])          # float32, as AReaL's
    got = interpolate_proximal(old, new, torch.tensor(b["versions"]), case["current_version"], case["method"])
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch.tensor(case["logp_proximal"]), rtol=1e-6, atol=1e-6)


def test_the_golden_batch_exercises_every_weight():
    # rows of versions 5, 4, 2, 0 and one of versions 1,1,3,3,4,4: at v_θ = 5 the weights 0, 0, 2/3, 4/5 and
    # 3/4, 1/2, 0 all occur, so an error in α's numerator, denominator or clamp shows in some case
    alpha = interpolation_weight(torch.tensor(GOLDEN["batch"]["versions"]), 5)
    assert sorted({round(float(a), 6) for a in alpha.flatten()}) == [0.0, 0.5, 0.666667, 0.75, 0.8]


def test_interpolation_by_hand():
    versions = torch.tensor([[5, 4, 2, 0, 6]])
    # v_θ = 5, v_prox = 4: α = (4 − v) / (5 − v) clamped to [0, 1], 0 where v ≥ 5
    #   v=5: 0 (on-policy)  v=4: 0/1 = 0  v=2: 2/3  v=0: 4/5  v=6: 0 (5 − 6 < 0)
    alpha = interpolation_weight(versions, 5)
    torch.testing.assert_close(alpha, torch.tensor([[0.0, 0.0, 2 / 3, 0.8, 0.0]]), rtol=0, atol=1e-7)
    old = torch.tensor([[-1.0, -1.0, -1.0, -0.5, -1.0]], dtype=torch.float64)
    new = torch.tensor([[-2.5, -2.5, -2.5, -3.0, -2.5]], dtype=torch.float64)
    # loglinear: old + α (new − old); v=2: −1 + (2/3)(−1.5) = −2.0; v=0: −0.5 + 0.8 (−2.5) = −2.5
    loglinear = interpolate_proximal(old, new, versions, 5, "loglinear")
    torch.testing.assert_close(loglinear, torch.tensor([[-1.0, -1.0, -2.0, -2.5, -1.0]], dtype=torch.float64),
                               rtol=0, atol=1e-7)
    # linear: log((1 − α) e^old + α e^new + 1e-10); v=2: log(e^−1 / 3 + 2 e^−2.5 / 3 + 1e-10) = log(0.17735...)
    linear = interpolate_proximal(old, new, versions, 5, "linear")
    assert float(linear[0, 2]) == pytest.approx(math.log(math.exp(-1) / 3 + 2 * math.exp(-2.5) / 3 + 1e-10), abs=1e-7)
    assert float(linear[0, 3]) == pytest.approx(math.log(0.2 * math.exp(-0.5) + 0.8 * math.exp(-3.0) + 1e-10), abs=1e-7)
    assert float(linear[0, 0]) == pytest.approx(math.log(math.exp(-1) + 1e-10), abs=1e-7)
    # AReaL's 1e-10 floor shows on an improbable token: log(e^−30 + 1e-10) = log(1.0000000000936e-10) ≈ −23.02585
    tiny = torch.full((1, 1), -30.0, dtype=torch.float64)
    far = interpolate_proximal(tiny, tiny, torch.tensor([[2]]), 5, "linear")
    assert float(far) == pytest.approx(math.log(1e-10 + math.exp(-30)), abs=1e-7) and float(far) > -23.03


def test_the_default_is_kept_out_of_the_identity_and_bad_values_are_refused(tiny_base):
    assert "prox_logp" not in to_dict(build_run_config(tiny_base, {}))["train"]
    assert to_dict(build_run_config(tiny_base, {"train.prox_logp": "loglinear"}))["train"]["prox_logp"] == "loglinear"
    with pytest.raises(ConfigError, match="train.prox_logp: 'geometric' is not valid; choose one of recompute, "
                                          "loglinear, linear"):
        build_run_config(tiny_base, {"train.prox_logp": "geometric"})


def test_a_trial_with_the_interpolation_runs_without_the_forward(learning_base, tmp_path, monkeypatch):
    """Delay 2, two minibatches: no recomputing forward of π_prox, and each update's π_prox is the interpolation
    of its own rows, v_θ the version at the batch's first update (the same for the batch's two updates)."""
    forwards, seen = [], []
    real_now, real_update = Trainer.logp_now, Trainer.update

    def logp_now(self, r):
        forwards.append(r.response_ids.shape[0])
        return real_now(self, r)

    def update(self, batch):
        r = batch.rollout
        seen.append((self.version, batch.version_start, r.version.tolist()))
        logp = real_now(self, r)                                       # π_θ as this update sees it
        # α = (v_θ − 1 − v) / (v_θ − v) where v < v_θ, else 0 (all rows of a batch share v here)
        v, start = float(r.version[0]), batch.version_start
        alpha = (start - 1 - v) / (start - v) if start > v else 0.0
        expected = r.logp_behavior + alpha * (logp - r.logp_behavior)
        torch.testing.assert_close(self._proximal(batch, slice(None), logp), expected, rtol=0, atol=1e-7)
        return real_update(self, batch)

    monkeypatch.setattr(Trainer, "logp_now", logp_now)
    monkeypatch.setattr(Trainer, "update", update)
    status, rows, _ = run(learning_base, tmp_path, delay=2, **{"train.minibatches": 2, "train.steps": 3,
                                                                "train.prox_logp": "loglinear", "algorithm": "decoupled"})
    assert status == "completed" and len(rows) == 3
    assert forwards == []                                  # recompute calls logp_now once per batch
    # batch s starts at version 2s and was generated by version max(0, 2s − 2): α = 0, 1/2, 1/2
    assert [(version, start, set(vs)) for version, start, vs in seen] == [
        (0, 0, {0}), (1, 0, {0}), (2, 2, {0}), (3, 2, {0}), (4, 4, {2}), (5, 4, {2})]


def test_the_framework_map_rows_name_settings_the_config_accepts(tiny_base):
    from algorithms.framework_map import rows

    settings = [r.setting for r in rows("areal") if r.setting]
    assert settings == ["train.prox_logp: loglinear", "train.prox_logp: linear"]
    for setting in settings:
        key, value = setting.split(": ")
        assert build_run_config(tiny_base, {key: value}).train.prox_logp == value


def test_with_one_update_per_batch_the_interpolation_replaces_pi_theta(learning_base, tmp_path, monkeypatch):
    """As in AReaL with one minibatch: π_prox is the interpolation, not π_θ detached. Delay 3: batch s is generated
    by version max(0, s − 3) and used at v_θ = s, so α = 0, 0, 1/2 (v_θ 2, v 0: (1 − 0) / (2 − 0)), 2/3 (3, 0)."""
    alphas, real = [], Trainer._proximal

    def proximal(self, batch, rows, logp):
        prox = real(self, batch, rows, logp)
        r, m = batch.rollout, batch.rollout.response_mask
        # linear: π_prox / π_b − 1 = α (π_θ / π_b − 1) (+ 1e-10 / π_b), read on the token that moved most
        ratio = torch.exp(logp - r.logp_behavior)[m] - 1
        at = int(ratio.abs().argmax())
        alphas.append(round(float((torch.exp(prox - r.logp_behavior)[m] - 1)[at] / ratio[at]), 3))
        return prox

    monkeypatch.setattr(Trainer, "_proximal", proximal)
    status, rows, _ = run(learning_base, tmp_path, delay=3, **{"train.steps": 4, "train.prox_logp": "linear",
                                                               "algorithm": "naive"})
    assert status == "completed" and len(rows) == 4
    assert alphas[2:] == [0.5, 0.667]          # steps 0 and 1: π_θ = π_b (nothing moved yet) or α = 0
