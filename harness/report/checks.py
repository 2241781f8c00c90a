"""What a trial's files must hold before the report counts it: the rules a copied or unpacked results
directory is checked against, so that no number in a report is silently changed by a damaged file.

A trial that breaks a rule is shown with status ``invalid`` and the rule in its notes (and in the page's
warnings); its cell's status counts say so, and its numbers are never used (tables.FINISHED). The rules:

- every row of metrics.jsonl has an integer ``step`` in 1..train.steps, every row of eval.jsonl one in
  0..train.steps (step 0: the evaluation before training); ``train.steps`` from config.yaml, when it has one;
- every ``eval/acc`` is a finite number in [0, 1] (a NaN last evaluation must not fall back to the one
  before it, nor 7.5 become an accuracy);
- a completed trial has metrics rows and an evaluation (it is not a seed otherwise);
- params.json agrees with config.yaml on every key both hold (a trial whose params say grpo and whose
  config runs another estimator is neither);
- one trial per (config, seed): a trial whose config.yaml is another trial's, byte for byte once parsed
  (a trial copied under another id), is a copy, not another seed (``duplicates``).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from harness.store import trialdir
from harness.store.untrusted import short

ACC_KEY = "eval/acc"
INVALID = "invalid"                                    # the status a trial that breaks a rule is shown with
NOT_SETTINGS = ("trial_id", "ignored", "stands_for")   # params.json keys that are not config settings


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _steps(config: Mapping[str, Any] | None) -> int | None:
    train = (config or {}).get("train")
    steps = train.get("steps") if isinstance(train, Mapping) else None
    return steps if _int(steps) and steps >= 1 else None


def row_problems(name: str, rows: list[dict[str, Any]], first: int, last: int | None) -> list[str]:
    """The first broken rule among ``rows`` of the row file ``name`` (steps in first..last; eval/acc in
    [0, 1]), as one note; [] when none."""
    top = "" if last is None else str(last)
    for n, row in enumerate(rows, start=1):
        step = row.get("step")
        if not _int(step) or step < first or (last is not None and step > last):
            return [f"{name} row {n}: step {_show(step)} is not an integer in {first}..{top or 'steps'}"]
        if ACC_KEY in row:
            acc = row[ACC_KEY]
            if not isinstance(acc, (int, float)) or isinstance(acc, bool) or not math.isfinite(acc) \
                    or not 0 <= acc <= 1:
                return [f"{name} step {step}: {ACC_KEY} {_show(acc)} is not a number in [0, 1]"]
    return []


def trial_problems(params: Mapping[str, Any], config: Mapping[str, Any] | None, status: str,
                   metric_rows: list[dict[str, Any]], eval_rows: list[dict[str, Any]]) -> list[str]:
    """Every rule of the module docstring a trial breaks (but the duplicate rule), one note each."""
    steps = _steps(config)
    out = row_problems(trialdir.METRICS, metric_rows, 1, steps) + row_problems(trialdir.EVALS, eval_rows, 0, steps)
    if status == "completed" and not metric_rows:
        out.append(f"completed, but {trialdir.METRICS} holds no rows")
    elif status == "completed" and not any(ACC_KEY in r for r in eval_rows):
        out.append(f"completed, but {trialdir.EVALS} holds no {ACC_KEY}")
    if config is not None:
        out += params_problems(params, config)
    return out


def params_problems(params: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """One note per params.json key that contradicts the setting of the same (dotted) name in config.yaml."""
    out = []
    ignored = params.get("ignored") if isinstance(params.get("ignored"), list) else []
    for key, value in params.items():
        if key in NOT_SETTINGS or key in ignored:
            continue
        found, setting = _lookup(config, key)
        if found and not _agrees(value, setting):
            out.append(f"{trialdir.PARAMS} {key}={_show(value)} contradicts {trialdir.CONFIG} {_show(setting)}")
    return out


def duplicates(config_shas: dict[str, str | None]) -> dict[str, str]:
    """trial_id -> the trial it copies, for every trial whose resolved config (its sha256; None: no
    config.yaml) is an earlier trial's, by id order: a config includes the seed, so equal configs are
    one run."""
    first: dict[str, str] = {}
    out = {}
    for tid in sorted(config_shas):
        sha = config_shas[tid]
        if sha is None:
            continue
        if sha in first:
            out[tid] = first[sha]
        else:
            first[sha] = tid
    return out


def _lookup(config: Mapping[str, Any], key: str) -> tuple[bool, Any]:
    node: Any = config
    for part in str(key).split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _agrees(value: Any, setting: Any) -> bool:
    """A params value agrees with its setting: equal, or for a mapping (a delay law) each of its keys."""
    if isinstance(value, Mapping) and isinstance(setting, Mapping):
        return all(k in setting and _agrees(v, setting[k]) for k, v in value.items())
    if isinstance(value, bool) != isinstance(setting, bool):
        return False
    return value == setting


def _show(value: Any) -> str:
    return short(value, 40)
