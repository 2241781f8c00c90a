"""Read a suite's results directory into three pandas frames (trials, per-step metrics, evaluations).

Layout (written by the suite runner)::

    results/<suite>/suite.yaml
    results/<suite>/<trial_id>/{params.json, config.yaml, metrics.jsonl, eval.jsonl, status.json,
                                provenance.json}

Files may be missing or partial: a trial without a readable status.json is shown as ``pending``
(trialdir.read_record: what the runner will do with it), and unparseable JSONL lines (e.g. a truncated last line) are skipped and
counted in the trial's ``notes``. No trial directory is dropped. A ``lab/`` directory (estimator lab
output) and hidden directories are not trials. config.yaml is not read: params.json holds the grid point.

params.json may carry two reserved list-valued keys that are not grid axes: ``ignored`` (axes the
estimator does not read) and ``stands_for`` (estimators a shared on-policy trial stands for); they are
kept as tuples in the ``ignored`` / ``stands_for`` columns (empty tuple when absent) for ``tables`` to
expand. provenance.json (where the trial ran, with what) is kept per trial in ``SuiteResults.provenance``.
Per-step metrics: the ones collapse and staleness use (``METRIC_KEYS``) plus estimator diagnostics
(``DIAGNOSTIC_KEYS`` and every ``area/...frac`` key a trial logs).
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.store import campaign, trialdir
from harness.store.untrusted import load_yaml_text
from harness.errors import ConfigError
from harness.report import checks
from harness.report.parallel import fork_map
from harness.config.suite import ReportSection, Suite, read_suite_yaml

TRIAL_FILES = trialdir.RECORD
REGIME_KEYS = ("policy/kl_behavior", "is/traj_abs_log_ratio_q50", "is/traj_abs_log_ratio_q90",
               "is/traj_abs_log_ratio_max", "is/traj_ess_frac", "is/group_over_cap_frac")   # the trajectory regime
CAP_SCALE_KEY = "gmc/scale_mean"  # a group mass cap's mean scale, logged by the estimators that apply one
METRIC_KEYS = ("policy/entropy", "is/ratio_max", "stale/mean", "stale/max", *REGIME_KEYS[1:4],
               CAP_SCALE_KEY)  # per-step metrics the report uses
DIAGNOSTIC_KEYS = ("is/ess_frac", "is/ratio_max", "policy/kl_behavior")  # plus every */...frac key logged
PARALLEL_TRIALS = 100  # from this many trials on, they are read in forked workers (parallel.fork_map)
LOSS_KEY = "loss/value"
ACC_KEY = "eval/acc"
EVAL_N_KEY = "eval/n"  # problems per evaluation (the collapse rules' standard errors); else from config.yaml
LIST_PARAMS = ("ignored", "stands_for")  # reserved list-valued params.json keys (not grid axes)
RESERVED_PARAMS = ("trial_id", "seed", *LIST_PARAMS)  # params.json keys that do not define a cell
CELL_AXES = ("algorithm", "delay")  # the two cell keys every report is organised by
IMPORTANCE_KEYS = ("is/log_ratio_q99", "is/log_ratio_q01", "is/adv_pos_clipped_frac", "is/adv_neg_clipped_frac",
                   "is/group_ess_min", "is/clipped_entropy", "mismatch/kl")  # report/importance.py's scalars
HIST_KEYS = ("log_ratio_counts", "clipped_by_position", "tokens_by_position")  # is_hist.jsonl's lists


@dataclass(frozen=True)
class Importance:
    """A trial's per-token importance diagnostics over the second half of its steps (past any warm-up),
    what report/importance.py draws: read with the trial, so the figures need not read its files again."""

    scalars: dict[str, float]  # each IMPORTANCE_KEYS metric's mean over the steps that logged a number (else NaN)
    hists: dict[str, np.ndarray] | None  # is_hist.jsonl's HIST_KEYS lists summed over them; None: no rows


@dataclass
class SuiteResults:
    """Everything the report needs from one results directory."""

    path: Path
    name: str  # the suite's `suite:` name (user text: escape before rendering)
    suite: Suite  # suite.yaml, parsed by the suite schema
    suite_sha256: str
    settings: ReportSection  # the suite's `report:` section
    param_keys: list[str]  # params.json keys that define a cell (all but trial_id and seed)
    trials: pd.DataFrame  # one row per trial directory: trial_id, status, last_step, error, ... + params
    metrics: pd.DataFrame  # long (trial_id, step, loss_nonfinite, METRIC_KEYS..., diagnostics...)
    evals: pd.DataFrame  # long (trial_id, step, eval/acc)
    provenance: dict[str, dict[str, Any] | None]  # trial_id -> provenance.json (None: absent/unreadable)
    importance: dict[str, Importance]  # trial_id -> its importance diagnostics
    expected: tuple[tuple[str, dict[str, Any]], ...] = ()  # plan.json: each trial of the suite, id and grid point
    plan_notes: tuple[str, ...] = ()  # a warning when plan.json is unreadable

    @property
    def diagnostic_keys(self) -> list[str]:
        """Estimator diagnostics present in the metrics frame, in a stable order."""
        keys = [c for c in self.metrics.columns if is_diagnostic(c)]
        first, last = ("is/ess_frac", "is/ratio_max"), ("policy/kl_behavior",)
        return sorted(keys, key=lambda k: (k in last, first.index(k) if k in first else len(first), k))


def is_diagnostic(key: str) -> bool:
    """Whether a metrics.jsonl key is an estimator diagnostic the report plots: DIAGNOSTIC_KEYS and any
    ``area/...frac`` key (``is/clip_frac``, ``gmc/capped_frac``, ``m2po/masked_frac``, ...)."""
    return key in DIAGNOSTIC_KEYS or ("/" in key and key.endswith("frac"))


def _to_float(value: Any) -> float:
    """A JSON value as float; NaN for anything that is not a number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return math.nan


def _column(rows: list[dict[str, Any]], key: str) -> np.ndarray:
    """Values of ``key`` over ``rows`` as float (N,), NaN where absent, null or not a number."""
    values = [r.get(key) for r in rows]
    try:  # fast path: numbers and None (-> NaN)
        return np.array(values, dtype=float)
    except (TypeError, ValueError):
        return np.fromiter((_to_float(v) for v in values), dtype=float, count=len(values))


def _columns(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """``_column`` of each key; in one pass when every row has the same keys (a file written by one
    trainer), which is what makes a report of thousands of trials fast."""
    names = tuple(rows[0]) if rows else ()
    if names and set(map(len, rows)) == {len(names)}:  # same sizes; a row with other keys raises KeyError
        values = operator.itemgetter(*names)
        try:
            matrix = np.array(list(map(values, rows)), dtype=float).reshape(len(rows), len(names))
        except (KeyError, TypeError, ValueError):  # other keys, or a list or dict among the values
            pass
        else:
            index = {k: i for i, k in enumerate(names)}
            return {k: matrix[:, index[k]] if k in index else np.full(len(rows), np.nan) for k in keys}
    return {k: _column(rows, k) for k in keys}


def _curve(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Step-sorted columns of ``rows``; rows without a numeric step are dropped, a repeated step keeps
    its last row (a resumed run may rewrite steps)."""
    cols = _columns(rows, ("step", *keys))
    steps = cols.pop("step")
    if LOSS_KEY in keys:  # a logged NaN/inf/null loss is divergence; an absent loss is not
        loss = cols.pop(LOSS_KEY)
        present = np.fromiter((LOSS_KEY in r for r in rows), dtype=bool, count=len(rows))
        cols["loss_nonfinite"] = present & ~np.isfinite(loss)
    keep = ~np.isnan(steps)
    steps = steps[keep]
    order = np.argsort(steps, kind="stable")
    _, last_first = np.unique(steps[order][::-1], return_index=True)  # last occurrence of each step
    idx = order[::-1][last_first]
    return {"step": steps[idx].astype(np.int64), **{k: v[keep][idx] for k, v in cols.items()}}


def _read_params(trial_dir: Path, params: dict[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
    """params.json (as read) with non-scalar values flattened to JSON text, with a note when
    missing/unreadable."""
    if params is None:
        return {}, [f"{'no' if not (trial_dir / trialdir.PARAMS).exists() else 'unreadable'} params.json"]
    notes: list[str] = []
    flat = {k: v if isinstance(v, (str, int, float, bool)) or v is None else json.dumps(v, sort_keys=True)
            for k, v in params.items() if k not in LIST_PARAMS}
    for key in LIST_PARAMS:
        value = params.get(key) or []
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            notes.append(f"params.json '{key}' is not a list of names (ignored)")
            value = []
        flat[key] = tuple(value)
    return flat, notes


def _read_provenance(trial_dir: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """provenance.json as a dict; None (shown as "unknown") when absent, with a note when unreadable."""
    prov, problem = trialdir.load(trial_dir, trialdir.PROVENANCE)
    return prov, (["unreadable provenance.json"] if problem == "unreadable" else [])


def _metric_keys(rows: list[dict[str, Any]]) -> tuple[str, ...]:
    """The per-step keys to keep: loss, METRIC_KEYS, and the diagnostics named in the first or last row
    (reading two rows keeps this O(1) per trial; a metric logged only mid-run is not plotted)."""
    named = {k for r in (rows[:1] + rows[-1:]) for k in r if is_diagnostic(k)}
    return (LOSS_KEY, *METRIC_KEYS, *sorted(named - set(METRIC_KEYS)))


def _trial_dirs(results_dir: Path) -> list[Path]:
    """Subdirectories holding at least one trial file, sorted by name."""
    return sorted(d for d in results_dir.iterdir()
                  if trialdir.is_trial_dir(d) and any((d / f).exists() for f in TRIAL_FILES))


def _read_suite(results_dir: Path) -> tuple[Suite, str]:
    """suite.yaml through the suite schema, and its sha256; ValueError naming the path when it is not a
    suite dir or the file does not parse (the same one-line error `stalebench check` gives)."""
    if not results_dir.is_dir():
        raise ValueError(f"results dir {results_dir} does not exist; pass results/<suite> written by "
                         "`stalebench run`")
    path = trialdir.suite_file(results_dir)
    if not path.is_file():
        raise ValueError(f"{results_dir} is not a suite results dir (no suite.yaml); pass results/<suite> "
                         "written by `stalebench run`")
    try:
        suite = read_suite_yaml(path)
    except ConfigError as exc:
        raise ValueError(f"{exc}; fix or re-copy it") from None
    return suite, hashlib.sha256(path.read_bytes()).hexdigest()


def _suite_points(results_dir: Path, suite: Suite) -> tuple[dict[str, list[Any]], list[int]]:
    """The grid values and seeds a trial of ``results_dir`` may have: its suite's, and in a merged report's
    directory (report/merge.py) the reference suite's too; a tuned suite's tuning seeds (its tune/ trials,
    tune.raw.tar.gz). A suite file that lists no ``seeds:`` (a results directory written by hand) bounds no
    seed: seeds are [] then, which checks.outside_suite skips."""
    grid, seeds = {k: list(v) for k, v in suite.grid.items()}, _seeds(suite)
    other = results_dir / trialdir.REFERENCE_SUITE
    if other.is_file():
        try:
            reference = read_suite_yaml(other)
        except ConfigError as exc:
            raise ValueError(f"{exc}; fix or re-copy it") from None
        for key, values in reference.grid.items():
            grid[key] = grid.get(key, []) + list(values) if key in grid else list(values)
        seeds = seeds + _seeds(reference) if seeds and _seeds(reference) else []
    return grid, seeds


def _seeds(suite: Suite) -> list[int]:
    """The seeds a trial of ``suite`` may have: its reported seeds and tuning seeds; [] (any) when its file
    lists no ``seeds:``."""
    data = load_yaml_text(suite.source, trialdir.SUITE_FILE) if suite.source else None
    if not (isinstance(data, dict) and "seeds" in data):
        return []
    return [*suite.seeds, *(suite.tune.tune_seeds(suite) if suite.tune is not None else [])]


def importance_summary(metric_rows: list[dict[str, Any]], trial_dir: Path) -> Importance:
    """The Importance of a trial from its metrics rows (all of them) and its is_hist.jsonl."""
    mid = len(metric_rows) // 2
    half = [r for r in metric_rows if _step(r) > mid]
    scalars = {}
    for key, values in _columns(half, IMPORTANCE_KEYS).items():   # NaN: not logged, or not a number
        values = values[~np.isnan(values)]
        scalars[key] = float(values.mean()) if values.size else np.nan
    side = [h for h in trialdir.read_side_rows(trial_dir, trialdir.IS_HIST) if _step(h) > mid]
    return Importance(scalars, {k: sum_lists([h.get(k) for h in side]) for k in HIST_KEYS} if side else None)


def _step(row: dict[str, Any]) -> float:
    """A row's step as a number (-inf when it is not one: checks.py marks that trial)."""
    step = row.get("step")
    return step if isinstance(step, (int, float)) and not isinstance(step, bool) else -math.inf


def sum_lists(lists: list[Any]) -> np.ndarray:
    """The element-wise sum of the lists of numbers among ``lists`` (shorter ones zero-padded)."""
    good = [np.asarray(x, dtype=float) for x in lists if isinstance(x, list) and all(isinstance(v, (int, float)) for v in x)]
    if not good:
        return np.zeros(0)
    out = np.zeros(max(len(x) for x in good))
    for x in good:
        out[:len(x)] += x
    return out


def _read_trial(trial_dir: Path, grid: dict[str, list[Any]], seeds: list[int]) -> tuple[
        dict[str, Any], dict[str, np.ndarray], dict[str, np.ndarray], dict[str, Any] | None, Importance]:
    """One trial of a suite of ``grid`` and ``seeds`` (_suite_points): its table row (params, status,
    notes), metric curve, eval curve, provenance and importance diagnostics."""
    raw_params, _ = trialdir.load(trial_dir, trialdir.PARAMS)
    params, notes = _read_params(trial_dir, raw_params)
    record = trialdir.read_record(trial_dir)
    status_notes = [record.note] if record.note else []
    prov, prov_notes = _read_provenance(trial_dir)
    metric_rows, bad_m = trialdir.scan_rows(trial_dir, trialdir.METRICS)
    eval_rows, bad_e = trialdir.scan_rows(trial_dir, trialdir.EVALS)
    try:
        config, problems = trialdir.checked_config(trial_dir), []
    except ConfigError as exc:
        config, problems = None, [str(exc).replace(str(trial_dir / trialdir.CONFIG), trialdir.CONFIG)]
    problems += checks.trial_problems(raw_params or {}, config, record.status, metric_rows, eval_rows, record.data)
    problems += checks.outside_suite(raw_params or {}, trial_dir.name, grid, seeds)
    if record.problem == "unreadable":       # damaged (the runner writes it whole): shown invalid, warned of
        problems, status_notes = [*status_notes, *problems], []
    notes += status_notes + prov_notes + problems
    notes += [f"{n} unreadable line(s) in {f}" for n, f in ((bad_m, trialdir.METRICS), (bad_e, trialdir.EVALS))
              if n]
    row = {
        "trial_id": trial_dir.name,
        **{k: v for k, v in params.items() if k != "trial_id" and k not in checks.REPORT_COLUMNS},
        "has_params": bool(params),
        "status": checks.INVALID if problems else record.status,
        "config_sha256": trialdir.config_sha256(config) if config else None,
        "last_step": record.step,
        "error": record.error,
        "diverged_step": record.diverged_step,
        "notes": "; ".join(notes),
    }
    for key in LIST_PARAMS:
        row.setdefault(key, ())
    evals = _curve(eval_rows, (ACC_KEY, EVAL_N_KEY))
    row["eval_size"] = _eval_size(evals.pop(EVAL_N_KEY), config)
    row["updates_per_batch"] = _updates_per_batch(config)
    return (row, _curve(metric_rows, _metric_keys(metric_rows)), evals, prov,
            importance_summary(metric_rows, trial_dir))


def _eval_size(logged: np.ndarray, config: dict[str, Any] | None) -> float:
    """Problems per evaluation: the last ``eval/n`` the trial logged, else its config.yaml's ``eval.size``
    or ``task.eval_size`` (trials written before ``eval/n`` existed), else NaN (unknown)."""
    logged = logged[np.isfinite(logged)]
    if logged.size:
        return float(logged[-1])
    config = config or {}
    for section, key in (("eval", "size"), ("task", "eval_size")):
        value = (config.get(section) or {}).get(key) if isinstance(config.get(section) or {}, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1:
            return float(value)
    return math.nan


def _updates_per_batch(config: dict[str, Any] | None) -> int:
    """Optimizer updates per batch, ``train.passes`` x ``train.minibatches`` of config.yaml (each 1 when
    absent: the defaults, and what trials written before either setting ran)."""
    train = (config or {}).get("train")
    train = train if isinstance(train, dict) else {}
    counts = [train.get(key, 1) for key in ("passes", "minibatches")]
    ok = all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in counts)
    return counts[0] * counts[1] if ok else 1


def load_results(results_dir: Path) -> SuiteResults:
    """Load ``results_dir`` (results/<suite>). Raises ValueError for a missing or non-suite dir."""
    results_dir = Path(results_dir)
    suite, sha = _read_suite(results_dir)
    dirs = _trial_dirs(results_dir)
    if not dirs:
        landed = campaign.summary(results_dir.name)
        raise ValueError(f"{results_dir} holds no trial directories (<trial_id>/params.json, ...); run the "
                         "suite first or pass another results dir" + (f"; {landed}" if landed else ""))
    trial_rows, metric_parts, eval_parts, provenance, importance = [], [], [], {}, {}
    expected, plan_notes = _expected(results_dir)
    grid, seeds = _suite_points(results_dir, suite)
    read = [partial(_read_trial, d, grid, seeds) for d in dirs]
    parts = fork_map(read, chunks_per_worker=4) if len(dirs) >= PARALLEL_TRIALS else [job() for job in read]
    for d, (row, metric_curve, eval_curve, prov, imp) in zip(dirs, parts):
        trial_rows.append(row)
        metric_parts.append((d.name, metric_curve))
        eval_parts.append((d.name, eval_curve))
        provenance[d.name] = prov
        importance[d.name] = imp
    for tid, original in checks.duplicates({r["trial_id"]: r["config_sha256"] for r in trial_rows}).items():
        row = next(r for r in trial_rows if r["trial_id"] == tid)
        row["status"] = checks.INVALID
        row["notes"] = "; ".join(filter(None, [row["notes"], f"a copy of trial {original} (the same resolved "
                                                             f"config and seed): counted once"]))
    trials = pd.DataFrame(trial_rows)
    for key in CELL_AXES:  # every report is organised by these, even if no params.json names them
        if key not in trials:
            trials[key] = np.nan
    param_keys = [c for c in trials.columns if c not in RESERVED_PARAMS and c not in checks.REPORT_COLUMNS]
    return SuiteResults(
        path=results_dir,
        name=suite.name,
        suite=suite,
        suite_sha256=sha,
        settings=suite.report,
        param_keys=param_keys,
        trials=trials,
        metrics=_long_frame(metric_parts),
        evals=_long_frame(eval_parts),
        provenance=provenance,
        importance=importance,
        expected=expected,
        plan_notes=plan_notes,
    )


def _expected(results_dir: Path) -> tuple[tuple[tuple[str, dict[str, Any]], ...], tuple[str, ...]]:
    """plan.json's trials (each an id and its grid point; what a finished suite holds) and a note when it is
    unreadable; no trials (and no claim about completeness) without one (results written before it was)."""
    data, problem = trialdir.read_object(results_dir / trialdir.PLAN)
    if problem == "missing":
        return (), ()
    rows = data.get("trials") if data is not None else None
    if not (isinstance(rows, list) and all(isinstance(r, dict) and isinstance(r.get("trial_id"), str)
                                           and isinstance(r.get("point"), dict) for r in rows)):
        return (), (f"{trialdir.PLAN} is unreadable or not a list of trials: the report cannot say which of the "
                    "suite's trials are missing (run the suite again to rewrite it)",)
    return tuple((r["trial_id"], r["point"]) for r in rows), ()


def _long_frame(parts: list[tuple[str, dict[str, np.ndarray]]]) -> pd.DataFrame:
    """Concatenate per-trial column dicts into one long frame with a categorical ``trial_id`` column; a
    column some trials lack is NaN (False for the boolean ``loss_nonfinite``) in their rows."""
    n = [len(cols["step"]) for _, cols in parts]
    ids = pd.Categorical.from_codes(np.repeat(np.arange(len(parts)), n), [tid for tid, _ in parts])
    keys = list(dict.fromkeys(k for _, cols in parts for k in cols))
    data = {}
    for k in keys:
        kind = next(cols[k].dtype for _, cols in parts if k in cols)
        fill = False if kind == bool else np.nan
        data[k] = np.concatenate([cols[k] if k in cols else np.full(len(cols["step"]), fill, dtype=kind)
                                  for _, cols in parts])
    return pd.DataFrame({"trial_id": ids, **data})
