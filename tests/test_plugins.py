"""Bring your own estimator: a package that registers an estimator through the `stalebench.estimators`
entry point group runs in a suite like a built-in one, and the public contract checks apply to it.

The example package (examples/stalebench-plugin-example) is "installed" the way pip lays it out: the
package and a dist-info with its entry_points.txt on sys.path, so importlib.metadata finds the entry point.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from algorithms import registry

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "stalebench-plugin-example"


@pytest.fixture
def installed_plugin(tmp_path, monkeypatch):
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE / "stalebench_example", site / "stalebench_example")
    dist = site / "stalebench_example-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: stalebench-example\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[stalebench.estimators]\nseq_tis = stalebench_example.seq_tis\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    yield site
    registry._REGISTRY.pop("seq_tis", None)
    for module in [m for m in sys.modules if m.startswith("stalebench_example")]:
        del sys.modules[module]


def test_an_installed_plugin_estimator_is_registered_and_meets_the_contract(installed_plugin):
    from algorithms import loss_names, uses_eps
    from algorithms.testing import check_estimator

    assert "seq_tis" in loss_names() and not uses_eps("seq_tis")
    check_estimator("seq_tis")
    check_estimator("seq_tis", cap=4.0)


def test_a_plugin_estimator_trains_in_a_suite_like_a_built_in_one(installed_plugin, tiny_base, tmp_path):
    from harness.config.expand import expand, parse_suite
    from harness.trial.lifecycle import run_trial
    from harness.store.trialdir import read_jsonl

    suite = parse_suite({"suite": "plug", "base": tiny_base, "grid": {"algorithm": ["grpo", "seq_tis"], "delay": [2],
                                                                      "eps": [0.1, 0.2]}})
    trials = expand(suite)
    assert [t.trial_id for t in trials] == ["grpo-d2-e0.1-s0", "grpo-d2-e0.2-s0", "seq_tis-d2-s0"]  # ε not used
    status = run_trial(trials[-1], tmp_path)
    assert status["status"] == "completed"
    rows = read_jsonl(tmp_path / "seq_tis-d2-s0" / "metrics.jsonl")
    assert len(rows) == 6 and all("seq_tis/weight_mean" in r for r in rows)


def test_a_broken_plugin_is_one_line(monkeypatch, tmp_path, capsys):
    from harness.cli import main

    monkeypatch.setattr(registry, "_plugins_loaded", False)
    # main() writes the variable for Ray workers; setenv first so that the test's undo removes it again
    monkeypatch.setenv("STALEBENCH_PLUGINS", "")
    assert main(["--plugin", "no_such_plugin_module", "check", "suites/quickstart.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "estimator plugin 'no_such_plugin_module' failed to load" in err
