"""`check` refuses every value `run` would fail on: a seeded enumeration over the leaves of the run-config schema.

Every leaf of RunConfig (config/run.py, its sections and the optional ones: lab, mismatch, inflight; the async staleness source's settings) gets
boundary and bad values for its type (negative, zero, one, large, 2**63, a float for an integer, NaN, inf, a
string, a boolean, null). For each, validation (expand.resolve_config, what `check` runs for every trial) either
refuses in one line that names the leaf, or a one-step trial of that config runs in-process (run_trial, the
lifecycle `train` runs) and ends completed or diverged: a result, never a crash. Values of the wrong type are
refused by every leaf whatever its range (the typed rule). Hypothesis is not a dependency: the values are a
fixed list per type, so a failure names its leaf and value and reruns the same.
"""
from __future__ import annotations

import dataclasses
import math
import typing

import pytest
import torch

from harness.config.delays import DelayDistribution
from harness.config.components import COMPONENTS
from harness.config.dicts import PARSE, yaml_name
from harness.config.expand import Trial, resolve_config
from harness.config.run import RunConfig
from harness.errors import ConfigError
from harness.trial.lifecycle import run_trial

# What a leaf of an optional section needs around it: the section itself (and what it requires).
CONTEXT = {"staleness": {"staleness": {"async": {}}}, "lab": {"lab": {}}, "mismatch": {"mismatch": {}},
           "inflight": {"inflight": {}, "model.forward": "lean"}}
LARGE = 10 ** 6
VALUES = {int: [-1, 0, 1, 2, LARGE, 2 ** 63, 1.5, "x", True, None],
          float: [-1.0, 0.0, 1e-300, 0.5, 1.0, 2.0, 1e6, 1e300, math.nan, math.inf, "x", True, None],
          str: ["", "bogus", 1, None],
          bool: ["yes", 1, None]}
# Leaves whose large values are valid but make one step take minutes (a million responses per prompt, passes over
# the batch, tokens per response, Monte Carlo groups of a lab measurement): their large value is checked by
# validation only.
COSTLY_AT_LARGE = {"group_size", "train.passes", "train.max_new_tokens", "lab.measure_groups"}
# Leaves whose validity depends on the machine, not the schema (a directory that may exist where the run runs).
MACHINE = {"model.path", "task.data_dir", "model.base"}
# The components whose own settings are walked (engine vllm and backend deepspeed need their extras to run).
RUNNABLE = {"staleness.async"}


def leaves(cls: type = RunConfig, prefix: str = "") -> typing.Iterator[tuple[str, list[type], bool]]:
    """(dotted key, the leaf's value types, whether it may be null) of every leaf of `cls`, sections walked
    (optional ones included)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key, tp = prefix + yaml_name(f), hints[f.name]
        if PARSE in f.metadata:                            # a component chosen by name: the name, its settings
            yield key, [str], f.default is None
            registry = COMPONENTS[f.name]
            for name in registry.names():
                if f"{key}.{name}" in RUNNABLE:
                    yield from leaves(registry.settings(name), f"{key}.{name}.")
            continue
        types = [a for a in typing.get_args(tp) if a is not type(None)] or [tp]
        sections = [a for a in types if dataclasses.is_dataclass(a) and a is not DelayDistribution]
        if sections:
            yield from leaves(sections[0], key + ".")
        elif key not in ("params", "delay"):               # the estimator's own parameters; delay: below
            yield key, [t for t in types if t in VALUES], type(None) in typing.get_args(tp)
    if cls is RunConfig:
        yield "delay", [int], False                        # its distributions: tests/test_delay_dist.py


def wrong_type(types: list[type], nullable: bool, value: object) -> bool:
    """The typed rule: a value no leaf of these types may take, whatever its range."""
    if value is None:
        return not nullable
    if isinstance(value, bool):
        return bool not in types
    if isinstance(value, int):
        return not (int in types or float in types) or (abs(value) >= 2 ** 63 and float not in types)
    if isinstance(value, float):
        return float not in types or not math.isfinite(value)
    return str not in types


def cases() -> list[tuple[str, list[type], bool, object]]:
    return [(key, types, nullable, v) for key, types, nullable in leaves() if key not in MACHINE
            for t in types for v in VALUES[t]]


def resolve(tiny_base: dict, key: str, value: object) -> RunConfig:
    section = key.split(".")[0]
    base = {**tiny_base, "model": {}} if section == "lab" else tiny_base   # a lab trial builds no model
    return resolve_config(base, {**CONTEXT.get(section, {}), key: value})


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()              # a trial sets torch's threads (train.threads) and keeps them
    yield
    torch.set_num_threads(before)


def test_the_walk_reaches_every_section():
    keys = {key for key, _, _ in leaves()}
    assert {"eps", "seed", "delay", "train.beta2", "eval.size", "staleness.async.max_staleness", "lab.kl", "mismatch.top_k",
            "inflight.tokens_per_update", "task.eval_size", "model.logp_chunk_tokens"} <= keys
    assert len(cases()) > 300


def test_validation_refuses_in_one_line_or_a_one_step_trial_runs(tiny_base, tmp_path, restore_threads):
    accepted, trained = [], 0
    for key, types, nullable, value in cases():
        try:
            cfg = resolve(tiny_base, key, value)
        except ConfigError as exc:
            message = str(exc)
            assert "\n" not in message and key.split(".")[-1] in message, (key, value, message)
            continue
        assert not wrong_type(types, nullable, value), f"{key}={value!r}: a value of the wrong type accepted"
        accepted.append((key, value))
        if value == LARGE and key in COSTLY_AT_LARGE:
            continue
        if key != "train.steps":                  # the first step is what must start
            cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=1))
        trained += 1
        record = run_trial(Trial(f"t{trained}", {"seed": cfg.seed}, cfg), tmp_path)
        assert record["status"] in ("completed", "diverged"), (key, value, record)
    assert trained > 100 and ("train.kl_beta", 1e300) not in accepted


@pytest.mark.parametrize("key, value, says", [
    ("eps", 1e300, "eps: at most 3.403e+38 (the trainer holds it as a float32); got 1e+300"),    # was: overflow
    ("train.lr", 1e300, "train.lr: at most 3.403e+38"),
    ("train.temperature", 1e-40, "train.temperature: at least 1e-06"),        # was: NaN probabilities
    ("group_size", 2 ** 63, "group_size: 9223372036854775808 does not fit a 64-bit integer"),
    ("task.eval_size", 10 ** 6, "task: task 'addrev' refuses these settings: eval_size must be in (0, 1000000)"),
    ("task.train_size", 999_969, "task.train_size: 999969 train problems, more than task 'addrev' has (999968 "
                                 "with task.eval_size 32); lower it"),                # 1,000,000 pairs - 32 eval
    ("train.threads", 10 ** 6, "train.threads: at most 1024 torch CPU threads per process"),   # was: a segfault
    ("eval.pass_k", 10 ** 6, "eval.pass_k: at most 1024 samples per problem"),      # was: 32 GB allocation refused
    ("eval.size", 33, "eval.size: 33 is more than the task's held-out set"),        # task.eval_size 32
    ("train.steps", 250_000, "train.steps x train.prompts_per_step: 1000000 train problems"),      # 250,000 x 4
])
def test_what_the_trial_failed_on_is_refused_at_check(tiny_base, key, value, says):
    with pytest.raises(ConfigError) as exc:
        resolve(tiny_base, key, value)
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_the_largest_train_pool_and_the_smallest_temperature_are_accepted(tiny_base):
    assert resolve(tiny_base, "task.train_size", 999_968).task.train_size == 999_968
    assert resolve(tiny_base, "train.temperature", 1e-6).train.temperature == 1e-6
    assert resolve(tiny_base, "train.steps", 249_992).train.steps == 249_992      # 249,992 x 4 = 999,968
