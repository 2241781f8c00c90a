"""Suite runner on Ray Tune: every trial of a suite is one Tune trial. The only module that imports ray.

    run_suite(suite)   the grid: results/<suite>/<trial_id>/..., MLflow experiment <suite> with one parent
                       run per invocation; returns the number of trials by status
    tune_suite(suite)  Optuna (through Ray Tune) search of one parameter, e.g. train.lr, with the same
                       budget for every estimator; writes results/<suite>/tuned-overrides.yaml

Resume (kill the driver at any moment, even with SIGKILL, and run the same command again):
- the local result files are the truth: a trial whose status.json says completed or diverged is not
  scheduled again; every other one is, and `run_trial` resumes it from its checkpoint.pt (or restarts it);
- each invocation is a fresh Tune experiment (results/<suite>/ray/<suite>-<time>) over the pending trials
  on a fresh local Ray (unless an address is given), so nothing of a killed driver's Ray is reused;
- a trial's MLflow child run is found again by its `trial_id` tag; the rows kept locally are offered to
  it again and steps it already holds are skipped (tracking.RunLog.start, MlflowSink), so MLflow ends up
  with every step exactly once.

Ray's console output is silenced; the driver prints a progress line counted from the trials' files
(status.ProgressLine) and one line per finished, retried or failed trial (tracebacks: <trial>/error.log).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import yaml
from ray import tune

from .config import DEFAULT_ESTIMATOR, ConfigError, build_run_config, from_dict
from .status import ProgressLine, count_statuses, last_eval, read_status
from .suite import Suite, Trial, expand, select_trials
from .tracking import (RunLog, TrackingUnreachable, close_suite_run, default_tracking_uri, end_orphaned_suite_runs,
                       open_suite_run, probe_tracking_uri, supersede_run)
from .trialdir import read_jsonl
from .trial import MlflowTarget, TrialFailed, check_identity, run_trial
from .trialdir import FINAL, SUPERSEDED, suite_results_dir

STORAGE_ENV = "STALEBENCH_STORAGE_PATH"    # Tune's storage_path (a shared directory or URI on a cluster)
Say = Callable[[str], None]


# ----------------------------------------------------------------------------------------------
# run_suite
# ----------------------------------------------------------------------------------------------

def run_suite(suite: Suite, *, results_root: Path = Path("results"), address: str | None = None,
              progress: bool = True, on_change: str = "error", only: list[str] = ()) -> dict[str, int]:
    """Run every trial of `suite` not yet completed or diverged; returns {status: number of trials}.

    Existing results whose resolved config differs from the suite's are never taken as finished
    (trial.check_identity; `on_change` says what to do). Raises KeyboardInterrupt when interrupted
    (Ctrl+C) after Tune stopped the trials; running the same suite again resumes them."""
    suite_dir = suite_results_dir(results_root, suite.name)
    trials = select_trials(expand(suite), only)
    ids = [t.trial_id for t in trials]
    say = _printer(progress)
    _verify_bases(trials)                              # before anything is written
    superseded = check_identity(trials, suite_dir, on_change)
    _write_suite_file(suite, suite_dir, say)
    pending = [t for t in trials if read_status(suite_dir / t.trial_id).get("status") not in FINAL]
    say(f"suite {suite.name}: {len(trials)} trials, {len(trials) - len(pending)} already finished, "
        f"{len(pending)} to run -> {suite_dir}" + (f" ({len(superseded)} rerun after a config change; old "
                                                    f"results in {suite_dir / SUPERSEDED})" if superseded else ""))
    if not pending:
        with contextlib.suppress(Exception):          # tidy up after a driver killed after its last trial
            end_orphaned_suite_runs(_tracking_uri(Path(results_root)), suite.name)
        return count_statuses(suite_dir, ids)
    uri = _tracking_uri(Path(results_root))            # before Ray starts: a dead server fails in seconds
    with _ray_session(address, say):
        _check_fits(suite.resources)                   # before a parent run or a trial is touched
        target = _open_mlflow(suite, uri, Path(results_root), "suite", len(pending))
        for tid in superseded:
            supersede_run(target.tracking_uri, target.experiment_id, tid)
        interrupted = True
        try:
            steps = {t.trial_id: t.config.train.steps for t in trials}
            with _ProgressThread(ProgressLine(suite_dir, steps), progress):
                _fit(suite, pending, suite_dir, target, say)
            interrupted = any(read_status(suite_dir / t.trial_id).get("status") not in (*FINAL, "failed")
                              for t in pending)
        finally:
            counts = count_statuses(suite_dir, ids)
            close_suite_run(target.tracking_uri, target.parent_run_id, counts, interrupted)
    if interrupted:           # Ctrl+C: Tune stops the trials and returns; the caller sees the interrupt
        raise KeyboardInterrupt(f"{counts.get('running', 0)} trial(s) did not finish")
    return counts


def _tracking_uri(results_root: Path) -> str:
    """The MLflow store, probed when it is a server (a dead one makes MLflow retry for minutes)."""
    uri = default_tracking_uri(results_root)
    try:
        probe_tracking_uri(uri)
    except TrackingUnreachable as exc:
        raise ConfigError(str(exc)) from None
    return uri


def _write_suite_file(suite: Suite, suite_dir: Path, say: Say) -> None:
    """results/<suite>/suite.yaml: the suite file of the latest run (reports and `status` read it)."""
    suite_dir.mkdir(parents=True, exist_ok=True)
    text = suite.source or yaml.safe_dump(
        {"suite": suite.name, "version": suite.version, "base": suite.base, "grid": suite.grid, "seeds": suite.seeds,
         **({"overrides": suite.overrides} if suite.overrides else {}), **({"tune": suite.tune} if suite.tune else {})},
        sort_keys=False)
    path = suite_dir / "suite.yaml"
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _verify_bases(trials: list[Trial]) -> None:
    """Check each distinct starting checkpoint once, in the driver (a frozen base's files against its
    manifest): a damaged or replaced base stops the run with one line before any trial starts."""
    from .models import base_identity

    seen = set()
    for t in trials:
        model = t.config.model
        key = (model.kind, model.base, model.path)
        if t.config.lab is None and key not in seen:
            seen.add(key)
            base_identity(model)


def _open_mlflow(suite: Suite, uri: str, results_root: Path, role: str, pending: int) -> MlflowTarget:
    """The suite's MLflow experiment (named after the suite) and a new parent run for this invocation."""
    local = uri.startswith(("sqlite:", "file:")) or "://" not in uri
    artifacts = (results_root / "mlartifacts" / suite.name).resolve().as_uri() if local else None
    tags = {"stalebench.role": role, "stalebench.suite": suite.name, "stalebench.suite_sha256": suite.sha256,
            "stalebench.pending_trials": str(pending)}          # + the driver's host, pid (open_suite_run)
    suite_file = results_root.resolve() / suite.name / "suite.yaml"
    try:
        experiment_id, run_id = open_suite_run(uri, suite.name, f"{role}-{time.strftime('%Y%m%d-%H%M%S')}", tags,
                                               artifact_location=artifacts, artifacts=(suite_file,))
    except Exception as exc:  # noqa: BLE001 — an unreachable or misconfigured store: one line, not a traceback
        raise ConfigError(f"MLflow tracking store {uri} (MLFLOW_TRACKING_URI): {type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''}"[:500]) from None
    return MlflowTarget(uri, experiment_id, run_id)


# ----------------------------------------------------------------------------------------------
# Ray
# ----------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _env(values: dict[str, str]) -> Iterator[None]:
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _ray_session(address: str | None, say: Say) -> Iterator[None]:
    """Ray for one invocation: a fresh local instance with os.cpu_count() CPUs, or the cluster at
    `address` / $RAY_ADDRESS. Ray's console output (logs, worker output, error relays) is silenced."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address == "local":
        address = None
    # Trials keep the driver's working directory (relative paths in a config keep their meaning);
    # verbose=0 is silent only with Tune's old output engine; results live in results/, not in Tune's
    # loggers; a local cluster of our own needs no token auth (Ray 2.60 turns it on by default).
    # Ray starts workers at niceness 15, so trials lose the CPU to anything else on the machine (measured:
    # ~15% of a core each beside two busy processes); they are the work, so they run at normal priority.
    env = {"RAY_CHDIR_TO_TRIAL_DIR": "0", "RAY_AIR_NEW_OUTPUT": "0", "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
           "RAY_worker_niceness": os.environ.get("RAY_worker_niceness", "0")}
    if address is None:
        env["RAY_AUTH_MODE"] = os.environ.get("RAY_AUTH_MODE", "disabled")
    with _env(env), _quiet_ray_driver():
        owned = not ray.is_initialized()
        if owned:
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
            if address is None:
                ray.init(address="local", num_cpus=os.cpu_count(), **kwargs)
            else:                                        # the workers of a cluster do not inherit our env
                passed = {k: v for k, v in os.environ.items() if k.startswith(("STALEBENCH_", "MLFLOW_", "HF_"))}
                _probe_address(address)                  # Ray retries a wrong address for minutes
                say(f"connecting to the Ray cluster at {address} ...")
                try:
                    ray.init(address=address, runtime_env={"env_vars": {**passed, **env}}, **kwargs)
                except (ConnectionError, ValueError, RuntimeError) as exc:
                    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    raise ConfigError(f"--address/RAY_ADDRESS {address}: cannot connect to Ray: {msg}"[:500]) from None
        try:
            yield
        finally:
            if owned:
                ray.shutdown()


ADDRESS_PROBE_TIMEOUT_S = 5.0


def _probe_address(address: str) -> None:
    """Fail in seconds when nothing listens at a Ray address (host:port, or ray://host:port for Ray
    Client); 'auto' (a cluster started on this machine) is left to Ray."""
    if address == "auto":
        return
    client = address.startswith("ray://")
    hostport = address[len("ray://"):] if client else address.split("://", 1)[-1]
    host, sep, port_text = hostport.rstrip("/").rpartition(":")
    if not sep:
        host, port_text = hostport, "10001" if client else "6379"
    host = host.strip("[]")
    try:
        port = int(port_text)
        if not 0 < port < 65536 or not host:
            raise ValueError
    except ValueError:
        raise ConfigError(f"--address/RAY_ADDRESS {address[:200]!r}: expected host:port (or ray://host:port, or "
                          f"auto)") from None
    try:
        socket.create_connection((host, port), timeout=ADDRESS_PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise ConfigError(f"--address/RAY_ADDRESS {address[:200]}: nothing answers at {host}:{port} "
                          f"({exc.strerror or type(exc).__name__}); is the Ray head running (`ray start --head`)?") from None


def _check_fits(res) -> None:
    """Fail at once when one trial's resources fit on no Ray node: Tune would wait for them forever."""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if any(n.get("CPU", 0) >= res.cpu and n.get("GPU", 0) >= res.gpu for n in nodes):
        return
    cpu, gpu = max((n.get("CPU", 0) for n in nodes), default=0), max((n.get("GPU", 0) for n in nodes), default=0)
    raise ConfigError(f"resources: a trial needs cpu={res.cpu:g}, gpu={res.gpu:g}, but no Ray node has that "
                      f"(the largest has cpu={cpu:g}, gpu={gpu:g}; {len(nodes)} node(s)); lower resources.cpu/gpu "
                      f"in the suite or run on a cluster that has them")


@contextlib.contextmanager
def _quiet_ray_driver() -> Iterator[None]:
    """Silence Tune's error tracebacks and the driver's '(raylet) A worker died ...' relays; the runner
    prints one line per failed trial instead."""
    import ray._private.worker as ray_worker

    loggers = [logging.getLogger(n) for n in ("ray", "ray.tune", "ray.train", "ray.air")]
    levels = [lg.level for lg in loggers]
    relay = getattr(ray_worker, "print_to_stdstream", None)   # a private hook: best effort across versions
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    if relay is not None:
        ray_worker.print_to_stdstream = lambda data, ignore_prefix=False: None
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        if relay is not None:
            ray_worker.print_to_stdstream = relay


def _storage_path(suite_dir: Path) -> str:
    """Tune's storage: $STALEBENCH_STORAGE_PATH (shared storage on a cluster) or results/<suite>/ray."""
    env = os.environ.get(STORAGE_ENV)
    if env:
        return env if "://" in env else str(Path(env).resolve())
    return str(suite_dir / "ray")


def _fit(suite: Suite, trials: list[Trial], suite_dir: Path, target: MlflowTarget, say: Say) -> None:
    """One Tune experiment: a grid over the trial ids, FIFO (no early stopping), Tune's retries for
    transient failures; a trial failing every try is recorded as failed and the suite goes on."""
    from ray.tune.schedulers import FIFOScheduler

    res = suite.resources
    trainable = tune.with_resources(
        tune.with_parameters(_trainable, trials={t.trial_id: t for t in trials}, suite_dir=str(suite_dir),
                             mlflow=target, cwd=os.getcwd()),
        {"cpu": res.cpu, "gpu": res.gpu})
    tune.Tuner(
        trainable,
        param_space={"trial_id": tune.grid_search([t.trial_id for t in trials])},
        tune_config=tune.TuneConfig(scheduler=FIFOScheduler(), max_concurrent_trials=res.max_concurrent,
                                    reuse_actors=True,     # a worker keeps torch & co. imported between trials
                                    trial_name_creator=_trial_name, trial_dirname_creator=_trial_name),
        run_config=tune.RunConfig(name=f"{suite.name}-{time.strftime('%Y%m%d-%H%M%S')}",
                                  storage_path=_storage_path(suite_dir), verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=res.max_failures),
                                  callbacks=[_TrialEvents(suite_dir, target, say)])).fit()


def _trial_name(trial) -> str:
    return str(trial.config["trial_id"])


def _trainable(config: dict, *, trials: dict[str, Trial], suite_dir: str, mlflow: MlflowTarget, cwd: str) -> None:
    """In a Ray worker: one trial via run_trial; reports its final status and evaluation to Tune (the
    per-step metrics go to the trial's files and MLflow)."""
    trial = trials[config["trial_id"]]
    status = _run_in_worker(trial, Path(suite_dir), mlflow, cwd)
    evals = {k.replace("/", "_"): v for k, v in _last_row(Path(suite_dir) / trial.trial_id).items() if k != "step"}
    tune.report({"status": status.get("status", "unknown"), "step": status.get("step", 0), **evals})


def _run_in_worker(trial: Trial, suite_dir: Path, mlflow: MlflowTarget, cwd: str) -> dict[str, Any]:
    if os.path.isdir(cwd):             # relative paths in a config mean what they meant to the driver
        os.chdir(cwd)
    import torch
    torch.set_num_threads(trial.config.train.threads)
    trial_dir = suite_dir / trial.trial_id
    trial_dir.mkdir(parents=True, exist_ok=True)
    # Exclusive use of the trial directory: a straggling worker of a killed driver finishes (or dies)
    # before the rerun's worker touches the files.
    with open(trial_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return run_trial(trial, suite_dir, mlflow, progress=False)
        except TrialFailed as exc:     # already recorded; re-raised short, so that Tune retries it
            raise TrialFailed(str(exc)) from None


def _last_row(trial_dir: Path) -> dict[str, float]:
    rows = read_jsonl(trial_dir / "eval.jsonl")
    return {k: v for k, v in (rows[-1] if rows else {}).items() if isinstance(v, (int, float))}


def _error_reason(trial) -> str:
    """The last line of a Tune trial's error file (e.g. 'ray.exceptions.ActorDiedError: ...')."""
    path = getattr(trial, "error_file", None)
    try:
        lines = [ln.strip() for ln in Path(path).read_text().splitlines() if ln.strip()] if path else []
    except OSError:
        lines = []
    reason = lines[-1] if lines else "the trial's worker process died"
    return reason.split(" Some common causes")[0][:500]      # Ray's dead-worker text goes on for lines


class _TrialEvents(tune.Callback):
    """Driver-side: one line per finished, retried or failed trial, and a `failed` status for a trial
    whose worker died before it could record anything itself (a crash, the OOM killer)."""

    def __init__(self, suite_dir: Path, target: MlflowTarget | None, say: Say):
        self.suite_dir, self.target, self.say = Path(suite_dir), target, say

    def on_trial_complete(self, iteration, trials, trial, **info):
        trial_dir = self.suite_dir / _trial_name(trial)
        record, acc = read_status(trial_dir), last_eval(trial_dir)
        extra = f", eval/acc {acc:.3f}" if acc is not None else ""
        if record.get("status") == "diverged":
            extra += f" (diverged at step {record.get('diverged_step')}: {record.get('error')})"
        self.say(f"{record.get('status', 'finished')} {trial_dir.name}{extra}")

    def on_trial_recover(self, iteration, trials, trial, **info):
        self.say(f"retrying {_trial_name(trial)}: {self._reason(trial, final=False)}")

    def on_trial_error(self, iteration, trials, trial, **info):
        self.say(f"FAILED {_trial_name(trial)}: {self._reason(trial, final=True)}")

    def _reason(self, trial, final: bool) -> str:
        trial_dir = self.suite_dir / _trial_name(trial)
        record = read_status(trial_dir)
        if record.get("status") == "failed" and record.get("error"):
            return record["error"]
        reason = _error_reason(trial)            # the worker died without recording its failure
        if final:
            _record_failure(trial_dir, reason, self.target, step=int(record.get("step") or 0))
        return reason


def _record_failure(trial_dir: Path, reason: str, target: MlflowTarget | None, step: int = 0) -> None:
    """A `failed` status written by the driver (the trial could not record it), mirrored to MLflow."""
    RunLog(trial_dir).status("failed", step=step, error=reason)
    if target is not None:
        with contextlib.suppress(Exception):     # the mirror is best effort; the files are the truth
            from .tracking import MlflowSink
            MlflowSink(target.tracking_uri, target.experiment_id, target.parent_run_id, trial_dir.name,
                       {"trial_id": trial_dir.name}).set_status("failed", reason)


# ----------------------------------------------------------------------------------------------
# Console
# ----------------------------------------------------------------------------------------------

_live_line = threading.Event()          # a \r-rewritten progress line is on the terminal


@dataclass(frozen=True)
class _printer:                         # a picklable function: Tune pickles its callbacks
    enabled: bool

    def __call__(self, line: str) -> None:
        if self.enabled:
            if _live_line.is_set():
                print("\r\033[K", end="", file=sys.stderr)
                _live_line.clear()
            print(f"[stalebench] {line}", file=sys.stderr, flush=True)


class _ProgressThread:
    """Prints a ProgressLine: rewritten every second on a terminal, else a new line when it changed
    (at most every 15 s); once more at the end."""

    def __init__(self, line: ProgressLine, enabled: bool):
        self.line, self.enabled, self.tty = line, enabled, sys.stderr.isatty()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stalebench-progress", daemon=True)

    def __enter__(self):
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join(timeout=5)
            _printer(True)(str(self.line))

    def _loop(self) -> None:
        last = ""
        while not self._stop.wait(1.0 if self.tty else 15.0):
            text = str(self.line)
            if self.tty:
                print(f"\r\033[K[stalebench] {text}", end="", file=sys.stderr, flush=True)
                _live_line.set()
            elif text != last:
                print(f"[stalebench] {text}", file=sys.stderr, flush=True)
            last = text


# ----------------------------------------------------------------------------------------------
# tune_suite: a per-estimator search of one parameter (Optuna through Ray Tune)
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TuneSpec:
    """The suite's `tune:` section."""
    param: str = "train.lr"                # a float run-config setting, searched log-uniformly
    low: float = 0.0                       # the range [low, high], 0 < low < high (required)
    high: float = 0.0
    trials_per_algorithm: int = 8          # the same budget for every estimator
    metric: str = "eval/acc"               # objective: this metric in the last row of the trial's eval.jsonl
    mode: str = "max"                      # max | min
    sampler_seed: int = 0                  # Optuna TPE sampler seed (every estimator gets the same one)
    delay: int | None = None               # the delay tuned at (default: the grid's largest). Not 0 with one
                                           # update per batch: there every estimator's gradient equals grpo's

    def validate(self, suite: Suite) -> None:
        if not 0 < self.low < self.high:
            raise ConfigError(f"tune.low, tune.high: need 0 < low < high (a log-uniform range); got {self.low}, {self.high}")
        if self.trials_per_algorithm < 1:
            raise ConfigError(f"tune.trials_per_algorithm: must be >= 1; got {self.trials_per_algorithm}")
        if self.mode not in ("max", "min"):
            raise ConfigError(f"tune.mode: {self.mode!r} is not valid; choose one of max, min")
        if not self.metric:
            raise ConfigError("tune.metric: must name an eval metric, e.g. eval/acc")
        value: Any = build_run_config(suite.base)
        for part in self.param.split("."):
            if not hasattr(value, part.replace("async", "async_")):
                raise ConfigError(f"tune.param: {self.param!r} is not a run-config key (e.g. train.lr)")
            value = getattr(value, part.replace("async", "async_"))
        if not isinstance(value, float):
            raise ConfigError(f"tune.param: {self.param!r} must be a float setting (e.g. train.lr); got {value!r}")
        for bound in (self.low, self.high):
            build_run_config(suite.base, {self.param: bound})     # a value the setting refuses
        if self.delay is not None and self.delay < 0:
            raise ConfigError(f"tune.delay: must be >= 0; got {self.delay}")

    def tune_delay(self, suite: Suite) -> int:
        return self.delay if self.delay is not None else max([0, *suite.grid.get("delay", [suite.base.get("delay", 0)])])


def parse_tune(suite: Suite) -> TuneSpec:
    """The validated `tune:` section of a suite (a one-line ConfigError naming the key otherwise)."""
    if not suite.tune:
        raise ConfigError(f"tune: suite {suite.name!r} has no tune section, e.g. "
                          f"tune: {{param: train.lr, low: 1e-5, high: 1e-3, trials_per_algorithm: 8}}")
    for key in ("low", "high"):
        if key not in suite.tune:
            raise ConfigError(f"tune.{key}: required (the log-uniform search range)")
    spec = from_dict(TuneSpec, suite.tune, "tune")
    spec.validate(suite)
    return spec


def tune_suite(suite: Suite, results_root: Path = Path("results"), address: str | None = None,
               progress: bool = True) -> Path:
    """Search `tune.param` for every estimator of the suite's grid with the same number of trials, at
    `tune.delay` (default: the grid's largest delay, where the estimators differ), the first value of
    every other grid axis and the first seed; write the best value per
    estimator as suite `overrides:` to results/<suite>/tuned-overrides.yaml and return that path.

    Trials live in results/<suite>/tune/<estimator>-<param><value>; an interrupted search starts again
    (the seeded sampler proposes the same values first, and a finished trial of a value is not rerun)."""
    spec = parse_tune(suite)
    say = _printer(progress)
    suite_dir = suite_results_dir(results_root, suite.name)
    _write_suite_file(suite, suite_dir, say)
    algorithms = [str(a) for a in suite.grid.get("algorithm", [suite.base.get("algorithm", DEFAULT_ESTIMATOR)])]
    delay = spec.tune_delay(suite)
    fixed = {**{k: v[0] for k, v in suite.grid.items() if k != "algorithm"}, "delay": delay, "seed": suite.seeds[0]}
    _verify_bases([_tune_trial(suite, spec, a, fixed, spec.low) for a in algorithms])
    say(f"tuning {spec.param} in [{spec.low:g}, {spec.high:g}] for {', '.join(algorithms)}: "
        f"{spec.trials_per_algorithm} trials each at delay {delay} -> {suite_dir / 'tune'}")
    uri = _tracking_uri(Path(results_root))
    results: dict[str, list[dict[str, Any]]] = {}
    with _ray_session(address, say):
        _check_fits(suite.resources)
        target = _open_mlflow(suite, uri, Path(results_root), "tune", len(algorithms) * spec.trials_per_algorithm)
        (suite_dir / "tune").mkdir(parents=True, exist_ok=True)
        (suite_dir / "tune" / "trials.jsonl").write_text("")     # this search's trials, one row each
        try:
            for algorithm in algorithms:
                results[algorithm] = _search(suite, spec, algorithm, fixed, suite_dir, target, say)
        finally:
            statuses = [r["status"] for rows in results.values() for r in rows]
            close_suite_run(target.tracking_uri, target.parent_run_id, {s: statuses.count(s) for s in set(statuses)},
                            interrupted=len(results) < len(algorithms))
    return _write_overrides(suite, spec, results, suite_dir)


def _tune_trial(suite: Suite, spec: TuneSpec, algorithm: str, fixed: dict[str, Any], value: float) -> Trial:
    params = {"algorithm": algorithm, **fixed, spec.param: value}
    config = build_run_config(suite.base, {**suite.overrides.get(algorithm, {}), **params})
    return Trial(f"tune-{algorithm}-{spec.param.rsplit('.', 1)[-1]}{value:.4e}", params, config)


def _search(suite: Suite, spec: TuneSpec, algorithm: str, fixed: dict[str, Any], suite_dir: Path,
            target: MlflowTarget, say: Say) -> list[dict[str, Any]]:
    """One Tune experiment: Optuna's TPE proposes `trials_per_algorithm` values for one estimator."""
    import optuna
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    optuna.logging.set_verbosity(optuna.logging.WARNING)      # not 'A new study created in memory ...'
    res = suite.resources
    cluster = ray.cluster_resources()
    fits = int(cluster.get("CPU", 1) // res.cpu) if not res.gpu else int(cluster.get("GPU", 0) // res.gpu)
    concurrent = max(1, min(res.max_concurrent or fits, spec.trials_per_algorithm))
    # TPE's default 10 random start-up trials would make a budget of 8 a random search.
    sampler = optuna.samplers.TPESampler(seed=spec.sampler_seed, n_startup_trials=max(2, spec.trials_per_algorithm // 2))
    searcher = ConcurrencyLimiter(OptunaSearch(metric="objective", mode=spec.mode, sampler=sampler), concurrent)
    trainable = tune.with_resources(
        tune.with_parameters(_tune_trainable, suite=suite, spec=spec, algorithm=algorithm, fixed=fixed,
                             tune_dir=str(suite_dir / "tune"), mlflow=target, cwd=os.getcwd()),
        {"cpu": res.cpu, "gpu": res.gpu})
    grid = tune.Tuner(
        trainable, param_space={"value": tune.loguniform(spec.low, spec.high)},
        tune_config=tune.TuneConfig(search_alg=searcher, num_samples=spec.trials_per_algorithm, reuse_actors=True),
        run_config=tune.RunConfig(name=f"{suite.name}-tune-{algorithm}-{time.strftime('%Y%m%d-%H%M%S')}",
                                  storage_path=_storage_path(suite_dir), verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=res.max_failures),
                                  callbacks=[_TuneEvents(algorithm, spec, say)])).fit()
    if any(r.error is None and not (r.metrics or {}).get("status") for r in grid):
        raise KeyboardInterrupt(f"tuning {algorithm} was interrupted")      # Ctrl+C: Tune stopped and returned
    rows = []
    for result in grid:
        value, metrics = float(result.config["value"]), result.metrics or {}
        rows.append({"algorithm": algorithm, spec.param: value, "status": metrics.get("status", "failed"),
                     "objective": metrics.get("objective"), "trial_id": _tune_trial(suite, spec, algorithm, fixed, value).trial_id})
    rows.sort(key=lambda r: r[spec.param])
    with open(suite_dir / "tune" / "trials.jsonl", "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return rows


def _tune_trainable(config: dict, *, suite: Suite, spec: TuneSpec, algorithm: str, fixed: dict[str, Any],
                    tune_dir: str, mlflow: MlflowTarget, cwd: str) -> None:
    """In a Ray worker: one tuning trial; reports the objective (a diverged run gets the worst value)."""
    trial = _tune_trial(suite, spec, algorithm, fixed, float(config["value"]))
    status = _run_in_worker(trial, Path(tune_dir), mlflow, cwd)
    value = last_eval(Path(tune_dir) / trial.trial_id, spec.metric)
    if status.get("status") != "completed" or value is None or not math.isfinite(value):
        value = -math.inf if spec.mode == "max" else math.inf
    tune.report({"objective": value, "status": status.get("status", "unknown")})


class _TuneEvents(tune.Callback):
    def __init__(self, algorithm: str, spec: TuneSpec, say: Say):
        self.algorithm, self.spec, self.say, self.n = algorithm, spec, say, 0

    def _line(self, trial, outcome: str) -> None:
        self.n += 1
        self.say(f"tune {self.algorithm} {self.n}/{self.spec.trials_per_algorithm}: "
                 f"{self.spec.param}={trial.config['value']:.3e} -> {outcome}")

    def on_trial_complete(self, iteration, trials, trial, **info):
        m = trial.last_result or {}
        self._line(trial, f"{self.spec.metric} {m.get('objective')} ({m.get('status')})")

    def on_trial_error(self, iteration, trials, trial, **info):
        self._line(trial, f"FAILED: {_error_reason(trial)}")


def _write_overrides(suite: Suite, spec: TuneSpec, results: dict[str, list[dict[str, Any]]], suite_dir: Path) -> Path:
    """results/<suite>/tuned-overrides.yaml: the best value per estimator as a suite `overrides:` mapping."""
    sign = 1 if spec.mode == "max" else -1
    chosen, lines = {}, []
    for algorithm, rows in results.items():
        ok = [r for r in rows if r["status"] == "completed" and r["objective"] is not None and math.isfinite(r["objective"])]
        lines += [f"#   {algorithm:<10} {spec.param}={r[spec.param]:.3e}  {spec.metric}="
                  f"{'n/a' if r['objective'] is None else r['objective']}  ({r['status']})" for r in rows]
        if ok:
            best = max(ok, key=lambda r: (sign * r["objective"], -r[spec.param]))   # ties: the smaller value
            chosen[algorithm] = {spec.param: float(f"{best[spec.param]:.4g}")}
    missing = sorted(set(results) - set(chosen))
    header = [
        f"# Tuned {spec.param} per estimator for suite {suite.name} by `stalebench tune` on {time.strftime('%Y-%m-%d %H:%M')}:",
        (f"# Optuna TPE through Ray Tune, {spec.trials_per_algorithm} trials per estimator, log-uniform in "
         f"[{spec.low:g}, {spec.high:g}], delay 0, objective: final {spec.metric} ({spec.mode})."),
        "# To use: copy the `overrides:` mapping into a suite file as its top-level `overrides:` key (keep only",
        "# the estimators that suite runs; the loader rejects overrides for estimators it does not use).",
        *([f"# No completed trial for: {', '.join(missing)} (no override written)."] if missing else []),
        "# Trials:", *lines, ""]
    path = suite_dir / "tuned-overrides.yaml"
    path.write_text("\n".join(header) + yaml.safe_dump({"overrides": chosen}, sort_keys=False))
    return path
