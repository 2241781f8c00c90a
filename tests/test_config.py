"""The strict run-config loader: every bad value is a one-line ConfigError naming the key."""
from __future__ import annotations

import pytest

from harness.config.run import ConfigError, RunConfig, build_run_config

from harness.config.dicts import flatten, to_dict


@pytest.mark.parametrize("base,overrides,needle", [
    ({"algoritm": "grpo"}, {}, "base.algoritm: unknown key; valid keys: algorithm"),
    ({"train": {"stepz": 3}}, {}, "base.train.stepz: unknown key"),
    ({"train": {"steps": "many"}}, {}, "base.train.steps: expected int"),
    ({"train": {"steps": 0}}, {}, "train.steps: must be > 0"),
    ({"delay": -1}, {}, "delay: must be >= 0"),
    ({"delay": True}, {}, "base.delay: expected int"),
    ({"eps": 0}, {}, "eps: must be > 0"),
    ({"group_size": 1}, {}, "group_size: must be >= 2"),
    ({"algorithm": "ppo"}, {}, "algorithm: 'ppo' is not valid; choose one of bapo"),
    ({"task": {"name": "mnist"}}, {}, "task.name: 'mnist' is not valid"),
    ({"params": {"tau": 0.1}}, {}, "params: estimator 'grpo' has no parameter 'tau'"),
    ({"train": {"aggregation": "sum"}}, {}, "train.aggregation: 'sum' is not valid"),
    ({"model": {"kind": "path"}}, {}, "model.path: required"),
    ({"train": "fast"}, {}, "base.train: expected a mapping"),
    ({}, {"train.lr": -1.0}, "train.lr: must be > 0"),
    ({"async": {"max_staleness": 2}}, {"delay": 4}, "staleness: set either delay"),
])
def test_bad_values_name_the_key(base, overrides, needle):
    with pytest.raises(ConfigError) as err:
        build_run_config(base, overrides)
    message = str(err.value)
    assert needle in message
    assert "\n" not in message


def test_overrides_types_and_round_trip():
    cfg = build_run_config({"algorithm": "m2po", "params": {"tau": 0.02}, "train": {"lr": "3e-4"}},
                           {"delay": 16, "train.steps": 10, "async": None})
    assert isinstance(cfg, RunConfig)
    assert cfg.train.lr == 3e-4 and cfg.delay == 16 and cfg.train.steps == 10 and cfg.params["tau"] == 0.02
    assert build_run_config(to_dict(cfg)) == cfg
    flat = flatten(cfg)
    assert flat["train.lr"] == 3e-4 and flat["params.tau"] == 0.02 and flat["algorithm"] == "m2po"


def test_config_is_frozen():
    cfg = build_run_config({})
    with pytest.raises(Exception):
        cfg.delay = 3  # type: ignore[misc]


def test_eval_split_validation_needs_a_task_with_one():
    from harness.config.run import build_run_config
    assert build_run_config({"task": {"name": "cumsum-long"}, "eval": {"split": "validation"}}).eval.split == "validation"
    with pytest.raises(ConfigError, match="eval.split: task 'cumsum' has no validation split"):
        build_run_config({"task": {"name": "cumsum"}, "eval": {"split": "validation"}})
    with pytest.raises(ConfigError, match="eval.split"):
        build_run_config({"task": {"name": "cumsum-long"}, "eval": {"split": "train"}})
