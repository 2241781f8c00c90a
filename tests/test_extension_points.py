"""Each kind of component can be added from one file: tests/fixtures/plugin_components.py registers an
engine, a staleness source, a figure and a tracking mirror through harness/registry.py, and each works end
to end here (a trial, a report, a mirrored trial) with no other file touched."""
from __future__ import annotations

import importlib
import json
import sys

import pytest

from harness.registry import ENGINES, FIGURES, MIRRORS, SOURCES
from harness.config.run import build_run_config
from harness.config.suite import parse_suite
from harness.config.expand import Trial
from harness.store.tracking import Mirrors, describe_mirrors
from harness.config.dicts import to_dict
from harness.errors import ConfigError
from harness.store.trialdir import read_config, read_jsonl
from harness.trial.lifecycle import run_trial

REGISTRIES = (ENGINES, FIGURES, MIRRORS, SOURCES)


@pytest.fixture
def plugin(monkeypatch):
    """The plugin module, imported afresh; every registry restored after the test."""
    for registry in REGISTRIES:
        registry.names()                                   # the built-ins first, as at any first use
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))
        monkeypatch.setattr(registry, "_settings", dict(registry._settings))
    monkeypatch.delitem(sys.modules, "tests.fixtures.plugin_components", raising=False)
    module = importlib.import_module("tests.fixtures.plugin_components")
    module.CALLS.clear()
    module.MIRRORED.clear()
    return module


def test_a_plugin_engine_and_staleness_source_run_a_trial_with_their_own_settings(plugin, tiny_base, tmp_path):
    cfg = build_run_config({**tiny_base, "engine": {"counting": {"every": 2}}, "staleness": {"lag-one": {"lag": 2}}})
    status = run_trial(Trial("t", {"seed": 0}, cfg), tmp_path)
    assert status["status"] == "completed"
    assert plugin.CALLS.count("counting every 2") == 1 and plugin.CALLS.count("lag-one 2") == 1
    assert plugin.CALLS.count("generate") >= cfg.train.steps          # every batch and evaluation sampled by it
    stale = [row["stale/max"] for row in read_jsonl(tmp_path / "t" / "metrics.jsonl")]
    assert stale == [0.0, 1.0] + [2.0] * (cfg.train.steps - 2)          # the source's own lag, two
    stored = read_config(tmp_path / "t")              # the old shape, and what has no old key under components
    assert stored["components"] == {"engine": {"counting": {"every": 2}}} and stored["model"]["engine"] == "counting"
    assert stored["staleness"] == {"lag-one": {"lag": 2}} and stored["async"] is None
    assert to_dict(build_run_config(stored)) == stored                  # read back as written


def test_a_plugin_components_settings_are_checked_in_one_line(plugin, tiny_base):
    with pytest.raises(ConfigError, match=r"^engine\.counting\.every: must be >= 1; got 0$"):
        build_run_config({**tiny_base, "engine": {"counting": {"every": 0}}})
    with pytest.raises(ConfigError, match=r"^engine\.counting\.evry: unknown key; valid keys: every$"):
        build_run_config({**tiny_base, "engine": {"counting": {"evry": 2}}})
    at_default = build_run_config({**tiny_base, "engine": {"counting": {"every": 1}}})
    assert "components" not in to_dict(at_default)                     # a default is not part of the identity


def test_an_unknown_engine_lists_the_plugin_one(plugin):
    with pytest.raises(ConfigError, match="^engine: 'nope' is not valid; choose one of hf, vllm, counting$"):
        build_run_config({"model": {"engine": "nope"}})


def test_a_plugin_figure_is_drawn_in_the_report(plugin, tmp_path):
    from harness.report.html import build_report
    from tests.fixtures.synthetic_results import write_suite

    suite = write_suite(tmp_path / "results", "tiny", ("grpo", "m2po"), (0, 8), (0, 1), steps=10)
    index = build_report(suite, tmp_path / "report")
    assert '<img src="trial_count.png"' in index.read_text()
    figures = json.loads((tmp_path / "report" / "results.json").read_text())["figures"]
    assert any(f["title"] == "Trials per estimator" for f in figures)
    assert (tmp_path / "report" / "trial_count.png").stat().st_size > 1000


def test_a_plugin_figure_takes_its_own_settings_from_the_suite_and_bad_ones_are_one_line(plugin, tmp_path):
    from harness.report.html import build_report
    from tests.fixtures.synthetic_results import write_suite

    def report(figures):
        suite = write_suite(tmp_path / "results", f"s{len(list(tmp_path.glob('results/*')))}", ("grpo", "m2po"), (0, 8),
                            (0, 1), steps=10, suite_extra={"report": {"figures": figures}})
        return build_report(suite, tmp_path / "report" / suite.name)

    index = report({"trial_count": {"title": "Finished trials"}})
    titles = [f["title"] for f in json.loads((index.parent / "results.json").read_text())["figures"]]
    assert "Finished trials" in titles and "Trials per estimator" not in titles
    for figures, message in (({"trial_count": {"title": " "}}, "^report.figures.trial_count.title: must not be empty$"),
                             ({"trial_count": {"colour": "red"}}, "report.figures.trial_count.colour"),
                             ({"accuracy": {"x": 1}}, "^report.figures.accuracy: takes no settings; remove it$"),
                             ({"nope": {}}, "^report.figures.nope: no such figure; registered: accuracy, ")):
        with pytest.raises(ConfigError, match=message):
            report(figures)
    assert not list((tmp_path / "report").glob("s[1-4]"))          # refused before anything was written


def test_a_plugin_mirror_is_a_tracking_section_and_receives_a_trials_rows(plugin, tiny_base, tmp_path):
    suite = parse_suite({"suite": "s", "base": tiny_base, "tracking": {"memory": {"label": "here"}}})
    assert suite.tracking.memory == plugin.MemoryConfig("here")
    assert describe_mirrors(suite.tracking) == "MLflow and an in-memory mirror (here)"
    mirror = Mirrors(tuple(cfg.target("s", tmp_path) for _, cfg in suite.tracking.mirrors()))
    run_trial(Trial("t", {"seed": 0}, build_run_config(tiny_base)), tmp_path, mirror=mirror)
    steps = [step for trial, step in plugin.MIRRORED if trial == "t"]
    assert list(range(1, tiny_base["train"]["steps"] + 1)) == sorted({s for s in steps if s > 0}) and -1 in steps


def test_a_plugin_forward_declares_its_engine_version_and_what_it_runs_with(monkeypatch, tiny_base, tmp_path):
    """The run config asks the registered forward (rollout/base.py Forward), not a table of names: a plugin
    forward has an engine version (before: a KeyError at trial start) and may need the tiny bases' setup."""
    from harness.errors import ConfigError
    from harness.registry import FORWARDS
    from harness.rollout.base import Forward

    hf = FORWARDS.get("hf")
    monkeypatch.setattr(FORWARDS, "_entries", {**FORWARDS._entries, "mine": Forward(hf.response_logits, hf.engine),
                                               "mine_lean": Forward(hf.response_logits, hf.engine, engine_version=2,
                                                                    tiny_qwen3_only=True)})
    versions = [build_run_config({"model": {"forward": f}}).engine_version
                for f in ("hf", "lean", "lean3", "mine", "mine_lean")]
    assert versions == [1, 2, 3, 1, 2]
    assert build_run_config({"model": {"forward": "mine", "dtype": "bfloat16"}}).model.dtype == "bfloat16"
    with pytest.raises(ConfigError, match=r"^forward: 'mine_lean' is written for Qwen3 models like the tiny "
                                          r"bases, .* for dtype 'bfloat16'"):
        build_run_config({"model": {"forward": "mine_lean", "dtype": "bfloat16"}})
    with pytest.raises(ConfigError, match=r"'lean3' is written for Qwen3 .* backend 'deepspeed'$"):
        build_run_config({"model": {"forward": "lean3", "backend": "deepspeed"}})
    cfg = build_run_config({**tiny_base, "model": {**tiny_base["model"], "forward": "mine"},
                            "train": {**tiny_base["train"], "steps": 2}})
    assert run_trial(Trial("t", {"seed": 0}, cfg), tmp_path)["status"] == "completed"
