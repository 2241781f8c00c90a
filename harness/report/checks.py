"""What a trial's files must hold before the report counts it: the rules a copied or unpacked results
directory is checked against, so that no number in a report is silently changed by a damaged file.

A trial that breaks a rule is shown with status ``invalid`` and the rule in its notes (and in the page's
warnings); its cell's status counts say so, and its numbers are never used (tables.FINISHED). The rules:

- every row of metrics.jsonl has an integer ``step`` in 1..train.steps, every row of eval.jsonl one in
  0..train.steps (step 0: the evaluation before training); ``train.steps`` from config.yaml, when it has one;
- every ``eval/acc`` is a finite number in [0, 1] (a NaN last evaluation must not fall back to the one
  before it, nor 7.5 become an accuracy);
- a completed trial has metrics rows and its final evaluation: an ``eval/acc`` at the step it completed
  (status.json's ``step``, else train.steps), which the trainer always writes; a torn or missing last
  row must not leave the trial counted with an earlier evaluation;
- a diverged trial's ``diverged_step``, when recorded, is an integer in 0..train.steps (else status.json's step);
- the trial is one of the suite's: its seed in ``seeds:``, each grid key it names at one of the grid's
  values, and params.json's ``trial_id`` its directory's name (``outside_suite``: a trial copied under
  another name or with another seed is not another seed);
- params.json names no column the report computes (``final_acc``, ``collapsed``, ...: REPORT_COLUMNS);
- params.json agrees with config.yaml on every key both hold (a trial whose params say grpo and whose
  config runs another estimator is neither);
- one trial per (config, seed): a trial whose config.yaml is another trial's, byte for byte once parsed
  (a trial copied under another id), is a copy, not another seed (``duplicates``).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from harness.store import trialdir
from harness.store.untrusted import display, short

ACC_KEY = "eval/acc"
INVALID = "invalid"                                    # the status a trial that breaks a rule is shown with
NOT_SETTINGS = ("trial_id", "ignored", "stands_for")   # params.json keys that are not config settings
REPORT_COLUMNS = ("start_acc", "final_acc", "best_acc", "auc_acc", "n_evals", "diverged_at", "collapsed",
                  "collapse_step", "collapse_reason", "has_params", "status", "last_step", "error",
                  "diverged_step", "notes", "eval_size", "updates_per_batch",
                  "config_sha256")   # what the report computes per trial


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
                   metric_rows: list[dict[str, Any]], eval_rows: list[dict[str, Any]],
                   recorded: Mapping[str, Any] | None = None) -> list[str]:
    """Every rule of the module docstring a trial breaks (but the duplicate and suite rules), one note
    each. ``recorded``: status.json as written (its ``step`` and ``diverged_step``)."""
    steps, recorded = _steps(config), recorded or {}
    out = row_problems(trialdir.METRICS, metric_rows, 1, steps) + row_problems(trialdir.EVALS, eval_rows, 0, steps)
    reached = recorded.get("step") if _int(recorded.get("step")) else steps
    if status == "completed" and not metric_rows:
        out.append(f"completed, but {trialdir.METRICS} holds no rows")
    elif status == "completed" and not any(ACC_KEY in r for r in eval_rows):
        out.append(f"completed, but {trialdir.EVALS} holds no {ACC_KEY}")
    elif status == "completed" and reached is not None and not any(
            r.get("step") == reached and ACC_KEY in r for r in eval_rows):
        last = max((r["step"] for r in eval_rows if _int(r.get("step")) and ACC_KEY in r), default=None)
        out.append(f"completed at step {reached}, but {trialdir.EVALS} has no {ACC_KEY} there (the last at step "
                   f"{last}; a torn or lost final row?)")
    diverged = recorded.get("diverged_step")
    top = steps if steps is not None else (reached if _int(reached) else None)
    if status == "diverged" and diverged is not None and not (
            _int(diverged) and 0 <= diverged and (top is None or diverged <= top)):
        out.append(f"{trialdir.STATUS} diverged_step {_show(diverged)} is not an integer in 0..{top or 'steps'}")
    taken = sorted(set(params) & set(REPORT_COLUMNS))
    if taken:
        out.append(f"{trialdir.PARAMS} key {_show(taken[0])} is a column the report computes; remove it")
    if config is not None:
        out += params_problems(params, config)
    return out


def outside_suite(params: Mapping[str, Any], trial_id: str, grid: Mapping[str, list[Any]],
                  seeds: list[int]) -> list[str]:
    """Notes for a trial that is not one of its suite's (module docstring): its seed, a grid value or its
    trial_id. ``params``: params.json as read ({}: none, which its own note reports); ``seeds`` []: any seed."""
    if not params:
        return []
    out = []
    if seeds and "seed" in params and not any(_same(params["seed"], s) for s in seeds):
        out.append(f"seed {_show(params['seed'])} is not one of the suite's seeds {_show(list(seeds))}")
    for key, values in grid.items():
        if key in params and not any(_same(params[key], v) for v in values):
            out.append(f"{key}={_show(params[key])} is not a value of the suite's grid")
    named = params.get("trial_id")
    if named is not None and named != trial_id:
        out.append(f"{trialdir.PARAMS} trial_id {_show(named)} is not the directory's name")
    return out


def _same(value: Any, wanted: Any) -> bool:
    """A params.json value equals a suite value: of the same kind (True is not 1) and equal."""
    if isinstance(value, bool) != isinstance(wanted, bool) or isinstance(value, str) != isinstance(wanted, str):
        return False
    return value == wanted


def not_counted(trial_ids: Iterable[str], notes: Iterable[str]) -> list[str]:
    """One line per invalid trial, what the report's warnings and `compare` print: "trial X is not counted: ..."."""
    return [f"trial {t} is not counted: {n}" for t, n in zip(trial_ids, notes)]


def not_finished(expected: Iterable[tuple[str, Mapping[str, Any]]],
                 present: Iterable[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    """The suite's trials (``expected``: id and grid point of each trial of its expansion) without a result,
    and those of them that were started: a trial is matched by its grid point (every key of the point equal,
    so a copy named otherwise still counts), and has a result when a matching trial's status (a row of
    ``present``) is completed or diverged."""
    rows = list(present)
    missing, started = [], []
    for trial_id, point in expected:
        matches = [r for r in rows if all(_same(r.get(k), v) for k, v in point.items())]
        if not any(r.get("status") in trialdir.FINAL for r in matches):
            missing.append(trial_id)
            started += [trial_id] if matches else []
    return missing, started


def partial_suite(missing: list[str], started: list[str], n_expected: int) -> list[str]:
    """The warning of a suite that has not finished (none when every trial has a result): how many trials
    the tables cover, how many are missing and why, and how to go on."""
    if not missing:
        return []
    shown = ", ".join(map(display, missing[:3])) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return [f"partial suite: {n_expected - len(missing)} of its {n_expected} trials have a result; the tables "
            f"cover those only. Missing {len(missing)} ({len(missing) - len(started)} not started, {len(started)} "
            f"running, failed or invalid): {shown}. `stalebench run` on the same suite runs what is missing."]


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
