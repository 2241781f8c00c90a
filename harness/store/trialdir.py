"""The trial directory: the one owner of its file format (stdlib and yaml only, its row files through rowfiles.py; no torch, no ray).

    results/<suite>/<trial_id>/
        config.yaml       the resolved run config (what the trial *is*; its hash is the trial's identity)
        params.json       the grid point and seed (what distinguishes the trial within its suite)
        provenance.json   what produced it: code commit, package versions, machine, base checkpoint hash,
                          eval-set hash, config hash (written at every start and resume)
        metrics.jsonl     one row per step (consumed batch); eval.jsonl: one row per evaluation
        status.json       running | completed | diverged | failed, the step reached, the config hash
        error.log         the traceback of a failed trial; checkpoint.pt: the trainer's resumable state
        trace.jsonl       the policy version of every response, one row per step (trials whose batches mix
                          versions or are generated asynchronously; format: harness/config/trace.py)
        is_hist.jsonl     per-step histograms of the token log-ratio log ρ (docs/metrics.md)
        policy/           the kept policy (train.save), a transformers model directory
        benchmarks/results.json   its benchmark scores (`stalebench eval --trial`)
        .lock             held by the process working in the directory (one at a time)
    results/<suite>/suite.yaml                      the effective suite file of the latest run
    results/<suite>/plan.json                       every trial of the suite (id, grid point): what the report
                                                    compares with the trials it finds (a partial suite's warning)
    <merged>/reference-suite.yaml                   `report --merge`: the reference's suite, whose trials join
    results/<suite>/tune/trials.jsonl               `stalebench tune`: the search's trials, one row each
    results/<suite>/{lab,ray}/                      the lab's stored sweeps; Ray Tune's storage
    results/<suite>/.superseded/<trial_id>-<utc>/   results of a config that was changed and rerun

Everyone else reads and writes these files through this module: by its functions, or by the name
constants and path functions below where a caller needs the path itself (the trainer's checkpoint, the
MLflow artifacts). tests/test_architecture.py checks that no other module spells these names.

A trial's status is shown and counted through `read_record` only, with one meaning of a missing or
unreadable status.json: PENDING — no readable start is recorded, so the runner will run the trial.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from harness.errors import TrialDirError
from harness.store.untrusted import UntrustedError, decode, display, load_yaml_text, read_bytes
from harness.store.untrusted_json import load_json_text
from harness.store.rowfiles import append_jsonl, read_jsonl, read_rows, truncate_jsonl, write_atomic  # noqa: F401 — trialdir's API

STATUSES = ("completed", "diverged", "failed", "running")   # what a trial records, in the order reports list them
PENDING = "pending"                        # a trial without status.json: it has recorded no start yet
FINAL = STATUSES[:2]                       # completed, diverged: a result, never rerun
ENDED = STATUSES[:3]                       # final or failed: no process is working on the trial

CONFIG, PARAMS, PROVENANCE = "config.yaml", "params.json", "provenance.json"
METRICS, EVALS, STATUS = "metrics.jsonl", "eval.jsonl", "status.json"
ERROR_LOG, CHECKPOINT = "error.log", "checkpoint.pt"
TRACE, IS_HIST = "trace.jsonl", "is_hist.jsonl"
SIDE_ROWS = (TRACE, IS_HIST)               # per-step rows the trainer writes beside metrics.jsonl (not mirrored)
HIST_LOW, HIST_HIGH, HIST_BINS = -4.0, 4.0, 80   # IS_HIST's log ρ bins: width 0.1 on [−4, 4], plus the tokens
                                                 # below and above (log_ratio_counts[0], [-1]); docs/metrics.md
RECORD = (CONFIG, PARAMS, PROVENANCE, METRICS, EVALS, STATUS)   # a trial's record (what a mirror archives)
RAW = (*RECORD, *SIDE_ROWS)                # what a raw archive (--raw) and a merge carry: the record and side rows
ROW_FILES = (METRICS, EVALS)               # one JSON row per line, keyed by step
LAB_DIR, RAY_DIR, TUNE_DIR = "lab", "ray", "tune"   # beside the trials: the lab's sweeps, Tune's storage, tune's trials
SUITE_FILE, TUNE_TRIALS = "suite.yaml", "trials.jsonl"
PLAN = "plan.json"                         # beside suite.yaml: every trial of the suite (id, grid point), written at
                                           # the start of each run, so that a partial suite's report says what is missing
REFERENCE_SUITE = "reference-suite.yaml"   # beside a merged report's trials (report --merge): the reference's suite
POLICY_DIR, BENCHMARKS_DIR, BENCHMARK_RESULTS, LOCK = "policy", "benchmarks", "results.json", ".lock"
NOT_TRIALS = frozenset({LAB_DIR, RAY_DIR, TUNE_DIR})   # directories beside the trials that are not trials
SUPERSEDED = ".superseded"
MAX_OBJECT_BYTES = 16 * 2**20              # params, status, provenance, config: a few kB each


@dataclass(frozen=True)
class Outcome:
    """How a trial ended (what its final status.json records)."""
    status: str                        # completed | diverged
    step: int
    error: str | None = None
    diverged_step: int | None = None
    extra: Mapping[str, Any] | None = None


def suite_results_dir(results_root: Path, suite_name: str) -> Path:
    """results/<suite>, refusing a results root or suite directory that is a file (one line)."""
    from harness.errors import ConfigError

    root = Path(results_root)
    for path, what in ((root, "--results"), (root / suite_name, "the suite's results directory")):
        if path.exists() and not path.is_dir():
            raise ConfigError(f"{what} {str(path)[:200]}: exists and is not a directory; give a directory")
    return (root / suite_name).resolve()


def suite_file(suite_dir: Path) -> Path:
    return Path(suite_dir) / SUITE_FILE


def tune_dir(suite_dir: Path) -> Path:
    return Path(suite_dir) / TUNE_DIR


def tune_trials(suite_dir: Path) -> Path:
    return tune_dir(suite_dir) / TUNE_TRIALS


def ray_dir(suite_dir: Path) -> Path:
    return Path(suite_dir) / RAY_DIR


def policy_dir(trial_dir: Path) -> Path:
    return Path(trial_dir) / POLICY_DIR


def benchmarks_dir(trial_dir: Path) -> Path:
    """Where `stalebench eval --trial` writes the kept policy's scores (BENCHMARK_RESULTS, evaluation.py)."""
    return Path(trial_dir) / BENCHMARKS_DIR


def read_benchmarks(trial_dir: Path) -> dict[str, Any] | None:
    """benchmarks/results.json of a trial (None: absent or unreadable)."""
    return read_object(benchmarks_dir(trial_dir) / BENCHMARK_RESULTS)[0]


def lock_path(trial_dir: Path) -> Path:
    return Path(trial_dir) / LOCK


def is_trial_dir(path: Path) -> bool:
    return path.is_dir() and not path.name.startswith(".") and path.name not in NOT_TRIALS


def read_object(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A JSON-object file: (data, None), or (None, "missing" | "unreadable") — never raises. Read as
    untrusted (store/untrusted_json.py: a regular file of at most MAX_OBJECT_BYTES; no duplicate key,
    NaN, overlong integer or deep nesting): a results directory may have been copied from anywhere."""
    try:
        raw = read_bytes(path, Path(path).name, MAX_OBJECT_BYTES, missing_ok=True)
        if raw is None:
            return None, "missing"
        data = load_json_text(decode(raw, display(path), Path(path).name), str(path))
    except UntrustedError:
        return None, "unreadable"
    return (data, None) if isinstance(data, dict) else (None, "unreadable")


def _read_json(path: Path) -> dict[str, Any]:
    return read_object(path)[0] or {}


# ----------------------------------------------------------------------------------------------
# Identity
# ----------------------------------------------------------------------------------------------

def config_sha256(config: Mapping[str, Any]) -> str:
    """sha256 of a resolved config (the plain dict of config.yaml), key order ignored."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


# Settings renamed since trials were first written, old dotted key -> new: a stored config.yaml (or a stored
# suite snapshot, config/suite.py) is read under the new names, so the trial keeps its identity. A suite a
# user writes gets a one-line error instead (config/run.py from_dict), so the two meanings cannot be confused.
RENAMED_KEYS = {"train.updates_per_batch": "train.passes"}     # full passes; train.minibatches came beside it


def upgraded(config: Mapping[str, Any]) -> dict[str, Any]:
    """`config` (a resolved run config, or a suite's base block) with RENAMED_KEYS applied."""
    out = dict(config)
    for old, new in RENAMED_KEYS.items():
        (section, old_key), (_, new_key) = old.split("."), new.split(".")
        inner = out.get(section)
        if isinstance(inner, Mapping) and old_key in inner and new_key not in inner:
            out[section] = {(new_key if k == old_key else k): v for k, v in inner.items()}
    return out


def read_config(trial_dir: Path) -> dict[str, Any] | None:
    """The trial's resolved config.yaml, or None when it has none (or an unreadable one)."""
    try:
        return checked_config(trial_dir)
    except UntrustedError:
        return None


def checked_config(trial_dir: Path) -> dict[str, Any] | None:
    """The trial's resolved config.yaml (None: it has none); UntrustedError (one line naming the file and
    the rule) for one that is not a mapping or breaks the untrusted reader's limits (an alias bomb, deep
    nesting, a duplicate key)."""
    path = Path(trial_dir) / CONFIG
    text = read_bytes(path, CONFIG, MAX_OBJECT_BYTES, missing_ok=True)
    if text is None:
        return None
    data = load_yaml_text(decode(text, display(path), CONFIG), str(path))
    if not isinstance(data, dict):
        raise UntrustedError(f"{display(path)}: not a mapping of settings")
    return upgraded(data)


def config_changes(old: Mapping[str, Any], new: Mapping[str, Any], defaults: Mapping[str, Any] | None = None,
                   prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two resolved configs, as "key old -> new", in key order.

    A key one side lacks is no change when the other side's value is that setting's default (`defaults`, the
    resolved default config with every key): a setting added to stalebench later, left at a default that keeps
    the old behaviour, does not turn finished trials into changed ones, whether the config that lacks it was
    written before the setting existed or leaves it out at its default (config/dicts.py OMIT_AT_DEFAULT)."""
    out = []
    defaults = defaults or {}
    for key in sorted(set(old) | set(new), key=str):
        a, b, name = old.get(key, _ABSENT), new.get(key, _ABSENT), f"{prefix}{key}"
        default = defaults.get(key, _ABSENT) if isinstance(defaults, Mapping) else _ABSENT
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += config_changes(a, b, default if isinstance(default, Mapping) else {}, name + ".")
        elif (a is _ABSENT and b == default) or (b is _ABSENT and a == default):
            continue
        elif a != b:
            out.append(f"{name} {_short(a)} -> {_short(b)}")
    return out


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


_ABSENT = _Absent()


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def supersede(trial_dir: Path) -> Path:
    """Move a trial's results aside (never delete them): <suite>/.superseded/<trial_id>-<utc>/."""
    trial_dir = Path(trial_dir)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    dest = trial_dir.parent / SUPERSEDED / f"{trial_dir.name}-{stamp}"
    dest.parent.mkdir(exist_ok=True)
    os.replace(trial_dir, dest)
    return dest


# ----------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------

def read_status(trial_dir: Path) -> dict[str, Any]:
    """The trial's status.json as written ({} if it has none, or one that is not a JSON object): for the
    lifecycle's own checks (`.get("status") in FINAL`). To show or count a trial, use read_record."""
    return _read_json(Path(trial_dir) / STATUS)


@dataclass(frozen=True)
class TrialRecord:
    """A trial's status as readers show and count it (status.py, the report, the lab)."""
    status: str                        # a recorded status (STATUSES), PENDING, or "unknown" (not a string)
    step: int | None = None            # the step reached (None: not recorded)
    error: str = ""
    diverged_step: int | None = None
    problem: str | None = None         # None | "missing" | "unreadable" (not a JSON object, no status string)
    data: Mapping[str, Any] | None = None   # status.json as written ({} when missing or unreadable)

    @property
    def note(self) -> str | None:
        """The note a reader shows for a missing or damaged status.json (None: none needed)."""
        return {"missing": f"no {STATUS} ({self.status})", "unreadable": f"unreadable {STATUS} ({self.status})"
                }.get(self.problem or "")


def read_record(trial_dir: Path) -> TrialRecord:
    """The trial's TrialRecord: status.json's fields; PENDING when there is none or it is not a JSON object
    (what the runner does with it: read_status gives {}, so the trial runs); "unknown" when its status is
    not a string. Never raises."""
    data, problem = read_object(Path(trial_dir) / STATUS)
    if data is None:
        return TrialRecord(PENDING, problem=problem, data={})
    status = data.get("status", PENDING)
    step, diverged = data.get("step"), data.get("diverged_step")
    return TrialRecord(status if isinstance(status, str) else "unknown",
                       step if isinstance(step, int) and not isinstance(step, bool) else None,
                       str(data.get("error") or ""), diverged if isinstance(diverged, int) and not isinstance(
                           diverged, bool) else None, None if isinstance(status, str) else "unreadable", data)


def read_params(trial_dir: Path) -> dict[str, Any]:
    return _read_json(Path(trial_dir) / PARAMS)


def read_provenance(trial_dir: Path) -> dict[str, Any]:
    return _read_json(Path(trial_dir) / PROVENANCE)


def load(trial_dir: Path, name: str) -> tuple[dict[str, Any] | None, str | None]:
    """One of the trial's JSON-object files (PARAMS, PROVENANCE) as read_object returns it, for readers
    that tell a missing file from a damaged one (the report; the status: read_record)."""
    assert name in (PARAMS, PROVENANCE), name
    return read_object(Path(trial_dir) / name)


def has_status(trial_dir: Path) -> bool:
    return (Path(trial_dir) / STATUS).exists()


def write_status(trial_dir: Path, record: Mapping[str, Any]) -> None:
    write_atomic(Path(trial_dir) / STATUS, json.dumps(dict(record), indent=1))


def write_start(trial_dir: Path, config: Mapping[str, Any], params: Mapping[str, Any],
                provenance: Mapping[str, Any]) -> None:
    trial_dir = Path(trial_dir)
    write_atomic(trial_dir / CONFIG, yaml.safe_dump(dict(config), sort_keys=False))
    write_atomic(trial_dir / PARAMS, json.dumps(dict(params), indent=1))
    write_atomic(trial_dir / PROVENANCE, json.dumps(dict(provenance), indent=1))


def write_error(trial_dir: Path, text: str) -> Path:
    """error.log: the traceback of a failed trial (its status.json holds the one-line reason)."""
    path = Path(trial_dir) / ERROR_LOG
    write_atomic(path, text)
    return path


def read_metrics(trial_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's rows (read_jsonl: a torn last line dropped, damaged lines skipped)."""
    return read_jsonl(Path(trial_dir) / METRICS)


def read_evals(trial_dir: Path) -> list[dict[str, Any]]:
    """eval.jsonl's rows (read_jsonl: a torn last line dropped, damaged lines skipped)."""
    return read_jsonl(Path(trial_dir) / EVALS)


def scan_rows(trial_dir: Path, name: str) -> tuple[list[dict[str, Any]], int]:
    """read_rows of METRICS or EVALS: the rows and the number of unreadable lines (the report's view)."""
    assert name in ROW_FILES, name
    return read_rows(Path(trial_dir) / name)


def modified(trial_dir: Path) -> float | None:
    """When status.json or metrics.jsonl last changed (seconds since the epoch), None if neither exists."""
    times = [os.path.getmtime(p) for p in (Path(trial_dir) / n for n in (STATUS, METRICS)) if p.exists()]
    return max(times) if times else None


def last_step(trial_dir: Path) -> int:
    """The last step in metrics.jsonl, read from the end of the file (0 if none): cheap for live views."""
    try:           # non-blocking, regular files only: a FIFO or device in a copied results dir must not hang `status`
        fd = os.open(Path(trial_dir) / METRICS, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return 0
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
            continue
    return 0


def append_side_row(trial_dir: Path, name: str, row: Mapping[str, Any]) -> None:
    """One row of TRACE or IS_HIST."""
    assert name in SIDE_ROWS, name
    append_jsonl(Path(trial_dir) / name, row)


def read_side_rows(trial_dir: Path, name: str) -> list[dict[str, Any]]:
    """TRACE's or IS_HIST's rows (read_jsonl: a torn last line dropped, damaged lines skipped)."""
    assert name in SIDE_ROWS, name
    return read_jsonl(Path(trial_dir) / name)


def truncate_side_rows(trial_dir: Path, through_step: int) -> None:
    """A resume from `through_step`: drop the side rows of the steps after it (they are regenerated)."""
    for name in SIDE_ROWS:
        if (Path(trial_dir) / name).exists():
            truncate_jsonl(Path(trial_dir) / name, through_step)


def trace_file(trial_dir: Path) -> Path:
    """The trial's recorded version trace: what `delay: {dist: trace, path: ...}` replays."""
    return Path(trial_dir) / TRACE
