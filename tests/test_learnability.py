"""The acceptance rule of build-base's learnability probe (harness/learnability.judge), on hand-made runs."""
from __future__ import annotations

import pytest

from harness.learnability import judge
from harness.models import BaseRecipe


def _run(seed, start, final, zero_adv, status="completed"):
    return {"seed": seed, "status": status, "curve": [[0, start], [150, final]], "zero_adv_frac": zero_adv,
            "len_mean": 13.0, "entropy_step1": 0.5, "step_s": 0.3}


RECIPE = BaseRecipe(name="t", task="cumsum", probe_seeds=3, probe_steps=150)   # rule: gain>=0.30, SD<=0.03, zero-adv<=0.30


def test_a_probe_that_meets_every_rule_is_accepted():
    # gains 0.35, 0.37, 0.33: mean 0.35; finals 0.75, 0.77, 0.73: SD = sqrt((0.02² + 0 + 0.02²)/2) = 0.02
    record = judge([_run(0, 0.40, 0.75, 0.20), _run(1, 0.40, 0.77, 0.25), _run(2, 0.40, 0.73, 0.30)], RECIPE)
    assert record["accepted"] and record["reasons"] == []
    assert record["gain"] == pytest.approx(0.35) and record["seed_sd"] == pytest.approx(0.02)
    assert record["zero_adv_frac"] == pytest.approx(0.25)          # (0.20 + 0.25 + 0.30) / 3


def test_each_failed_rule_is_named():
    # gains 0.10, 0.30, 0.20: mean 0.20 < 0.30; finals 0.50, 0.70, 0.60: SD 0.10 > 0.03; zero-adv mean 0.40
    record = judge([_run(0, 0.4, 0.5, 0.4), _run(1, 0.4, 0.7, 0.4), _run(2, 0.4, 0.6, 0.4)], RECIPE)
    assert not record["accepted"]
    assert record["reasons"] == ["gain 0.200 < 0.3", "seed SD 0.100 > 0.03", "zero-advantage groups 0.400 > 0.3"]


def test_a_diverged_probe_run_rejects():
    record = judge([_run(0, 0.4, 0.75, 0.2), _run(1, 0.4, 0.75, 0.2), _run(2, 0.4, 0.75, 0.2, "diverged")], RECIPE)
    assert not record["accepted"] and record["reasons"][0].startswith("a probe run did not complete")
