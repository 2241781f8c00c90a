"""Config identity: results whose resolved config changed are never taken as that trial's; --rerun-changed
reruns exactly those trials and keeps the old results aside; provenance records what produced each trial."""
from __future__ import annotations

import json

import pytest
import yaml

from harness.cli import main
from harness.config.run import ConfigError
from harness.config.expand import expand, parse_suite
from harness.trial.lifecycle import check_identity, run_trial
from harness.store.trialdir import SUPERSEDED, config_changes


def suite(tiny_base, **train):
    base = {**tiny_base, "train": {**tiny_base["train"], "steps": 2, **train}}
    return parse_suite({"suite": "ident", "base": base, "grid": {"algorithm": ["grpo", "tis"]}})


def test_a_changed_config_stops_and_rerun_changed_moves_exactly_those_aside(tiny_base, tmp_path):
    trials = expand(suite(tiny_base))
    for t in trials:
        run_trial(t, tmp_path)
    assert check_identity(expand(suite(tiny_base)), tmp_path) == []          # unchanged: nothing to do
    edited = [t if t.config.algorithm == "grpo" else expand(suite(tiny_base, lr=2e-3))[1] for t in trials]
    with pytest.raises(ConfigError) as err:
        check_identity(edited, tmp_path)
    assert "\n" not in str(err.value) and "trial tis-s0" in str(err.value) and "train.lr 0.001 -> 0.002" in str(err.value)
    assert "--rerun-changed" in str(err.value) and "--force" in str(err.value)
    assert check_identity(edited, tmp_path, "rerun-changed") == ["tis-s0"]
    moved = list((tmp_path / SUPERSEDED).iterdir())
    assert [p.name.rsplit("-", 1)[0] for p in moved] == ["tis-s0"] and (moved[0] / "metrics.jsonl").is_file()
    assert not (tmp_path / "tis-s0").exists() and (tmp_path / "grpo-s0" / "status.json").is_file()
    assert check_identity(edited, tmp_path, "force") == ["grpo-s0"]           # the only one left with results


def test_new_settings_at_their_default_are_no_change():
    old = {"train": {"lr": 1e-3}}
    assert config_changes(old, {"train": {"lr": 1e-3, "save": "none"}}, {"train": {"save": "none"}}) == []
    assert config_changes(old, {"train": {"lr": 1e-3, "save": "final"}}, {"train": {"save": "none"}}) == [
        "train.save <absent> -> 'final'"]
    # the other way round: a config written while a new setting was emitted at its default, read by a version
    # that leaves it out at its default (config/dicts.py OMIT_AT_DEFAULT)
    written = {"train": {"lr": 1e-3, "minibatches": 1}}
    assert config_changes(written, {"train": {"lr": 1e-3}}, {"train": {"minibatches": 1}}) == []
    assert config_changes({"train": {"minibatches": 4}}, {"train": {}}, {"train": {"minibatches": 1}}) == [
        "train.minibatches 4 -> <absent>"]


def test_a_new_setting_is_left_out_of_a_config_at_its_default():
    from harness.config.dicts import to_dict
    from harness.config.run import RunConfig, build_run_config
    plain, full = to_dict(RunConfig()), to_dict(RunConfig(), every_key=True)
    assert "minibatches" not in plain["train"] and full["train"]["minibatches"] == 1 and full["eval"]["split"] == "test"
    assert "passes" in plain["train"]                     # the renamed setting keeps its place (train.updates_per_batch)
    assert to_dict(build_run_config({"eval": {"split": "test"}})) == plain        # written or not: the same config


def test_train_cli_refuses_an_edited_suite_in_one_line(tiny_base, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "s.yaml"
    data = {"suite": "cli", "base": {**tiny_base, "train": {**tiny_base["train"], "steps": 2}}}
    path.write_text(yaml.safe_dump(data))
    assert main(["train", str(path), "--trial", "seed=0"]) == 0
    capsys.readouterr()                                   # the first run's progress bar
    assert main(["train", str(path), "--trial", "seed=0", "--set", "train.lr=5e-3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "train.lr 0.001 -> 0.005" in err
    assert main(["train", str(path), "--trial", "seed=0", "--set", "train.lr=5e-3", "--rerun-changed"]) == 0
    config = yaml.safe_load((tmp_path / "results" / "cli" / "s0" / "config.yaml").read_text())
    assert config["train"]["lr"] == 5e-3


def test_provenance_records_base_eval_set_and_config(tiny_base, tmp_path):
    trial = expand(suite(tiny_base))[0]
    status = run_trial(trial, tmp_path)
    prov = json.loads((tmp_path / trial.trial_id / "provenance.json").read_text())
    assert prov["config_sha256"] == status["config_sha256"] and len(prov["config_sha256"]) == 64
    assert prov["base_model"]["name"].endswith("tiny-model0") and len(prov["base_model"]["sha256"]) == 64
    assert len(prov["eval_set_sha256"]) == 64 and prov["torch_threads"] == 1
    assert {"torch", "transformers", "ray", "mlflow"} <= set(prov["packages"]) and prov["git_commit"]
