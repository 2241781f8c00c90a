"""The estimator-lab report section: slope fits, verdict rules, and lab_sections on a tiny suite."""
from __future__ import annotations

import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.config import build_run_config
from harness.lab.dynamics import run_lab_trial
from harness.lab.report import lab_sections
from harness.lab.results import fit_loglog, read_trials
from harness.tracking import RunLog


def test_fit_recovers_a_power_law():
    x = np.array([8.0, 16, 32, 64, 128])
    y = 3.0 * x ** -1.0                                   # exact: slope −1, zero residuals
    fit = fit_loglog(x, y, 1e-6 * y)
    assert fit["slope"] == pytest.approx(-1.0, abs=1e-9) and fit["lo"] < -1.0 < fit["hi"]
    rng = np.random.default_rng(0)
    se = 0.1 * y                                          # 10% noise: the CI must still cover −1
    fit = fit_loglog(x, y * (1 + 0.1 * rng.standard_normal(5)), se)
    assert fit["lo"] < -1.0 < fit["hi"] and fit["hi"] - fit["lo"] < 1.0


def test_fit_drops_unresolved_and_small_points():
    x = np.array([2.0, 4, 8, 16, 32])
    y = np.array([1.0, 0.5, 0.25, 0.0, 0.01])
    se = np.array([0.01, 0.01, 0.01, 0.01, 0.01])         # the last two are not > 2 SE
    fit = fit_loglog(x, y, se, x_min=4)
    assert fit["x_used"] == [4.0, 8.0] and fit["n"] == 2 and math.isnan(fit["slope"])


TINY_LAB = {"vocab": 3, "length": 2, "reward_frac": 0.3, "measure_groups": 40, "loop_groups": 8,
            "sweep_group_sizes": [2, 4, 8, 16], "sweep_group_size": 4, "sweep_groups": 150, "sweep_fit_min_g": 2}


@pytest.fixture(scope="module")
def lab_results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("results") / "lab-tiny"
    base = {"algorithm": "grpo", "eps": 0.2, "group_size": 4,
            "train": {"steps": 10, "lr": 5.0, "prompts_per_step": 2, "advantage": "mean", "grad_clip": 0.0},
            "eval": {"every_steps": 5}, "lab": TINY_LAB}
    suite = {"suite": "lab-tiny", "version": 1, "base": base,
             "grid": {"algorithm": ["gmc_grpo", "tic_grpo"], "delay": [0, 2, 6]}, "seeds": [0, 1]}
    root.mkdir(parents=True)
    (root / "suite.yaml").write_text(yaml.safe_dump(suite))
    for algo in suite["grid"]["algorithm"]:
        for delay in suite["grid"]["delay"]:
            for seed in suite["seeds"]:
                params = {"algorithm": algo, "delay": delay, "seed": seed}
                log = RunLog(root / f"{algo}-d{delay}-s{seed}")
                log.start({}, params, {"config_sha256": "x"})
                outcome = run_lab_trial(build_run_config(base, params), log, lambda: None)
                log.status(outcome.status, step=outcome.step)
    return root


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.srcs = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.srcs += [v for k, v in attrs if k == "src"]


def test_read_trials(lab_results):
    trials = read_trials(lab_results)
    assert len(trials) == 12 and all(t.status == "completed" for t in trials)
    assert {t.delay for t in trials} == {0, 2, 6} and all("lab/bias_true" in t.measured for t in trials)
    assert all(0 <= t.auc_acc <= 1 for t in trials)


def test_lab_sections_render_and_cache(lab_results, tmp_path):
    sections = lab_sections(lab_results, tmp_path / "out")
    titles = [t for t, _ in sections]
    assert titles[0] == "Estimator lab: bias vs group size" and titles[-1] == "Estimator lab: verdicts per claim"
    assert "Estimator lab: convergence vs delay" in titles
    for _, fragment in sections:
        parser = _Tags()
        parser.feed(fragment)
        assert "script" not in parser.tags
        for src in parser.srcs:
            assert (tmp_path / "out" / src).is_file()
    verdicts = sections[-1][1]
    for claim in ("1.", "2.", "3.", "4.", "5."):
        assert f"<td>{claim}" in verdicts
    assert re.findall(r"<td>(consistent|inconsistent|inconclusive|not testable here)</td>", verdicts)
    cache = lab_results / "lab" / "sweeps.json"
    stamp = cache.stat().st_mtime_ns
    assert json.loads(cache.read_text())["data"]["by_g"]
    lab_sections(lab_results, tmp_path / "again")                # cached: not recomputed
    assert cache.stat().st_mtime_ns == stamp


def test_non_lab_suite_has_no_section(tmp_path):
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump({"suite": "x", "version": 1, "base": {}, "grid": {}}))
    assert lab_sections(tmp_path, tmp_path / "out") == []
    assert lab_sections(tmp_path / "missing", tmp_path / "out") == []
