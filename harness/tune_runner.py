"""Suite runner on Ray Tune: every trial of a suite as one Tune trial; the only module that imports ray.

    run_suite(suite)   the grid: results/<suite>/<trial_id>/..., MLflow experiment <suite>, one parent run
                       per invocation; returns the number of trials by status
    tune_suite(suite)  Optuna (through Ray Tune) search of one parameter, e.g. train.lr, with the same
                       budget for every estimator; writes results/<suite>/tuned-overrides.yaml

How a run resumes (kill the driver at any moment and run the same command again):
- the truth is the local result files: a trial whose status.json says completed or diverged is not
  scheduled again; every other trial is, and `run_trial` resumes it from its checkpoint.pt (or restarts it);
- each invocation is a fresh Tune experiment (results/<suite>/ray/<suite>-<time>) over the pending trials,
  on a fresh local Ray unless an address is given, so nothing of a killed driver's Ray is reused;
- the MLflow child run of a trial is found again by its `trial_id` tag, and steps it already holds are
  not logged twice (tracking.MlflowSink), so MLflow ends with each step exactly once.

Ray's own console output is silenced; the driver prints a one-line progress summary counted from the
status.json files, and one line per failed trial with its reason (the traceback is in its error.log).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import ray
import yaml
from ray import tune

from .config import ConfigError, build_run_config, from_dict
from .suite import Suite, Trial, expand
from .tracking import RunLog, close_suite_run, default_tracking_uri, open_suite_run, read_jsonl
from .trial import MlflowTarget, TrialFailed, run_trial

DONE = ("completed", "diverged")
STORAGE_ENV = "STALEBENCH_STORAGE_PATH"    # Tune's storage_path (a shared directory or URI on a cluster)


# ----------------------------------------------------------------------------------------------
# run_suite
# ----------------------------------------------------------------------------------------------

def run_suite(suite: Suite, *, results_root: Path = Path("results"), address: str | None = None,
              progress: bool = True) -> dict[str, int]:
    """Run every trial of `suite` not yet completed or diverged; returns {status: number of trials}."""
    suite_dir = (Path(results_root) / suite.name).resolve()
    trials = expand(suite)
    _write_suite_file(suite, suite_dir, progress)
    pending = [t for t in trials if _status(suite_dir / t.trial_id) not in DONE]
    say = _printer(progress)
    say(f"suite {suite.name}: {len(trials)} trials, {len(trials) - len(pending)} already finished, "
        f"{len(pending)} to run -> {suite_dir}")
    if pending:
        broken = _prepare_models(pending, say)
        for t in pending:
            if t.trial_id in broken:
                RunLog(suite_dir / t.trial_id).status("failed", step=0, error=broken[t.trial_id])
                say(f"FAILED {t.trial_id}: {broken[t.trial_id]}")
        runnable = [t for t in pending if t.trial_id not in broken]
        target = _open_mlflow(suite, Path(results_root), "suite", len(pending))
        interrupted = True
        try:
            if runnable:
                with _ray_session(address), _Progress(suite_dir, trials, progress):
                    _fit(suite, runnable, suite_dir, target, say)
            interrupted = False
        finally:
            close_suite_run(target.tracking_uri, target.parent_run_id, count_statuses(suite_dir, trials), interrupted)
    counts = count_statuses(suite_dir, trials)
    if counts.get("running"):
        say(f"{counts['running']} trial(s) did not finish; run the same command again to resume them")
    return counts


def count_statuses(suite_dir: Path, trials: list[Trial]) -> dict[str, int]:
    """{status: n} over the suite's trials from their status.json files (no file: "pending")."""
    counts: dict[str, int] = {}
    for t in trials:
        status = _status(suite_dir / t.trial_id) or "pending"
        counts[status] = counts.get(status, 0) + 1
    return dict(sorted(counts.items()))


def _status(trial_dir: Path) -> str | None:
    try:
        return json.loads((trial_dir / "status.json").read_text())["status"]
    except (OSError, ValueError, KeyError):
        return None


def _write_suite_file(suite: Suite, suite_dir: Path, progress: bool) -> None:
    """results/<suite>/suite.yaml: the suite file this run used (reports and `status` read it)."""
    suite_dir.mkdir(parents=True, exist_ok=True)
    text = suite.source or yaml.safe_dump(
        {"suite": suite.name, "version": suite.version, "base": suite.base, "grid": suite.grid, "seeds": suite.seeds,
         **({"overrides": suite.overrides} if suite.overrides else {}), **({"tune": suite.tune} if suite.tune else {})},
        sort_keys=False)
    path = suite_dir / "suite.yaml"
    if path.exists() and path.read_text() != text:
        _printer(progress)(f"note: {path} differs from this suite file; finished trials keep their results "
                           f"(delete their directories to rerun them)")
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _prepare_models(pending: list[Trial], say) -> dict[str, str]:
    """Build each distinct tiny base model once, here in the driver, so that trials never race to build
    it. Returns {trial_id: reason} for the trials whose base model cannot be built."""
    from .models import ensure_tiny_model, recipe

    broken: dict[str, str] = {}
    done: dict[str, str | None] = {}
    for t in pending:
        cfg = t.config
        if cfg.lab is not None or cfg.model.kind == "path":
            continue
        key = json.dumps(recipe(cfg.model, cfg.task), sort_keys=True)
        if key not in done:
            say(f"base model for task {cfg.task.name} (built once per recipe and cached; minutes the first time)...")
            try:
                ensure_tiny_model(cfg.model, cfg.task)
                done[key] = None
            except Exception as exc:  # noqa: BLE001 — becomes those trials' failure reason
                done[key] = f"base model: {type(exc).__name__}: {exc}".splitlines()[0][:500]
        if done[key]:
            broken[t.trial_id] = done[key]
    return broken


def _open_mlflow(suite: Suite, results_root: Path, role: str, pending: int) -> MlflowTarget:
    """The suite's MLflow experiment (named after the suite) and a new parent run for this invocation."""
    uri = default_tracking_uri(results_root)
    local = uri.startswith(("sqlite:", "file:", "/")) or "://" not in uri
    artifacts = (results_root / "mlartifacts" / suite.name).resolve().as_uri() if local else None
    tags = {"stalebench.role": role, "stalebench.suite": suite.name, "stalebench.suite_sha256": suite.sha256,
            "stalebench.pending_trials": str(pending), "stalebench.host": os.uname().nodename}
    suite_file = results_root.resolve() / suite.name / "suite.yaml"
    experiment_id, run_id = open_suite_run(uri, suite.name, f"{role}-{time.strftime('%Y%m%d-%H%M%S')}", tags,
                                           artifact_location=artifacts,
                                           artifacts=(suite_file,) if suite_file.exists() else ())
    return MlflowTarget(uri, experiment_id, run_id)


# ----------------------------------------------------------------------------------------------
# Ray
# ----------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
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
def _ray_session(address: str | None) -> Iterator[None]:
    """Ray for one suite invocation: a fresh local instance sized to this machine, or the cluster at
    `address` / $RAY_ADDRESS. Ray's console output (logs, worker output, error messages) is silenced."""
    import logging

    address = address or os.environ.get("RAY_ADDRESS") or None
    env = {"RAY_CHDIR_TO_TRIAL_DIR": "0",           # trials use absolute paths; keep relative config paths valid
           "RAY_AIR_NEW_OUTPUT": "0",               # with verbose=0: no tables, no per-trial lines
           "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1"}   # results live in results/<suite>, not in Tune's loggers
    if address is None:
        env["RAY_AUTH_MODE"] = os.environ.get("RAY_AUTH_MODE", "disabled")   # our own local cluster
    with _env(**env), _quiet_ray_driver():
        owned = not ray.is_initialized()
        if owned:
            kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
            if address is None:
                ray.init(address="local", num_cpus=os.cpu_count(), **kwargs)
            else:
                passed = {k: v for k, v in os.environ.items() if k.startswith(("STALEBENCH_", "MLFLOW_", "HF_"))}
                ray.init(address=address, runtime_env={"env_vars": {**passed, **env}}, **kwargs)
        try:
            yield
        finally:
            if owned:
                ray.shutdown()


@contextlib.contextmanager
def _quiet_ray_driver() -> Iterator[None]:
    """Silence Tune's error tracebacks and the driver's '(raylet) A worker died ...' messages; the runner
    prints one line per failed trial instead (its traceback is in the trial's error.log)."""
    import logging

    import ray._private.worker as ray_worker

    loggers = [logging.getLogger(n) for n in ("ray", "ray.tune", "ray.train", "ray.air")]
    levels = [lg.level for lg in loggers]
    printer = getattr(ray_worker, "print_to_stdstream", None)
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    if printer is not None:      # the driver thread that relays cluster error messages calls this
        ray_worker.print_to_stdstream = lambda data, ignore_prefix=False: None
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        if printer is not None:
            ray_worker.print_to_stdstream = printer


def _storage_path(suite_dir: Path) -> str:
    """Tune's storage: $STALEBENCH_STORAGE_PATH (shared storage on a cluster) or results/<suite>/ray."""
    env = os.environ.get(STORAGE_ENV)
    if env:
        return env if "://" in env else str(Path(env).resolve())
    return str(suite_dir / "ray")


def _fit(suite: Suite, trials: list[Trial], suite_dir: Path, target: MlflowTarget, say) -> None:
    """One Tune experiment: a grid over the trial ids, FIFO scheduling (no early stopping), Tune's
    retries for transient failures; a trial failing every try is recorded as failed and the suite goes on."""
    from ray.tune.schedulers import FIFOScheduler

    res = suite.resources
    trainable = tune.with_resources(
        tune.with_parameters(_trainable, trials={t.trial_id: t for t in trials}, suite_dir=str(suite_dir),
                             mlflow=target, cwd=os.getcwd()),
        {"cpu": res.cpu, "gpu": res.gpu})
    tuner = tune.Tuner(
        trainable,
        param_space={"trial_id": tune.grid_search([t.trial_id for t in trials])},
        tune_config=tune.TuneConfig(scheduler=FIFOScheduler(), max_concurrent_trials=res.max_concurrent,
                                    reuse_actors=True,     # a worker keeps torch & co. imported between trials
                                    trial_name_creator=_trial_name, trial_dirname_creator=_trial_name),
        run_config=tune.RunConfig(name=f"{suite.name}-{time.strftime('%Y%m%d-%H%M%S')}",
                                  storage_path=_storage_path(suite_dir), verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=res.max_failures),
                                  callbacks=[_TrialEvents(suite_dir, target, say)]))
    tuner.fit()


def _trial_name(trial) -> str:
    return str(trial.config["trial_id"])


def _trainable(config: dict, *, trials: dict[str, Trial], suite_dir: str, mlflow: MlflowTarget, cwd: str) -> None:
    """Runs in a Ray worker: one trial via run_trial; reports its final status (per-step metrics go to
    the trial's RunLog and MLflow, not to Tune)."""
    trial = trials[config["trial_id"]]
    _set_up_worker(cwd, trial.config.train.threads)
    with _trial_lock(Path(suite_dir) / trial.trial_id):
        try:
            status = run_trial(trial, Path(suite_dir), mlflow, progress=False)
        except TrialFailed as exc:      # recorded; re-raised short so that Tune retries it
            raise TrialFailed(str(exc)) from None
    tune.report(_final_report(Path(suite_dir) / trial.trial_id, status))


def _set_up_worker(cwd: str, threads: int) -> None:
    if os.path.isdir(cwd):           # relative paths in a config mean what they meant to the driver
        os.chdir(cwd)
    import torch
    torch.set_num_threads(threads)


@contextlib.contextmanager
def _trial_lock(trial_dir: Path) -> Iterator[None]:
    """Exclusive use of a trial directory, so a straggling worker of a killed driver never writes into
    it alongside the rerun (the rerun waits for it to exit)."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    with open(trial_dir / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _final_report(trial_dir: Path, status: dict[str, Any]) -> dict[str, Any]:
    evals = read_jsonl(trial_dir / "eval.jsonl")
    final = {k.replace("/", "_"): v for k, v in (evals[-1] if evals else {}).items()
             if isinstance(v, (int, float)) and k != "step"}
    return {"status": status.get("status", "unknown"), "step": status.get("step", 0), **final}


def _error_reason(trial) -> str:
    """The last line of a Tune trial's error file (e.g. 'ray.exceptions.ActorDiedError: ...')."""
    path = getattr(trial, "error_file", None)
    try:
        lines = [ln.strip() for ln in Path(path).read_text().splitlines() if ln.strip()] if path else []
    except OSError:
        lines = []
    return (lines[-1] if lines else "the trial's worker process died")[:500]


class _TrialEvents(tune.Callback):
    """Driver-side Tune callback: one line per finished/failed/retried trial, and a `failed` status for
    a trial whose worker died before it could record anything itself (crash, OOM kill)."""

    def __init__(self, suite_dir: Path, target: MlflowTarget | None, say):
        self.suite_dir, self.target, self.say = Path(suite_dir), target, say

    def on_trial_complete(self, iteration, trials, trial, **info):
        record = _read_status(self.suite_dir / _trial_name(trial))
        acc = _last_eval(self.suite_dir / _trial_name(trial), "eval/acc")
        extra = f", eval/acc {acc:.3f}" if acc is not None else ""
        if record.get("status") == "diverged":
            extra += f" (diverged at step {record.get('diverged_step')}: {record.get('error')})"
        self.say(f"{record.get('status', 'finished')} {_trial_name(trial)}{extra}")

    def on_trial_recover(self, iteration, trials, trial, **info):
        self.say(f"retrying {_trial_name(trial)}: {self._reason(trial, final=False)}")

    def on_trial_error(self, iteration, trials, trial, **info):
        self.say(f"FAILED {_trial_name(trial)}: {self._reason(trial, final=True)}")

    def _reason(self, trial, final: bool) -> str:
        trial_dir = self.suite_dir / _trial_name(trial)
        record = _read_status(trial_dir)
        if record.get("status") == "failed" and record.get("error"):
            return record["error"]
        reason = _error_reason(trial)            # the worker died without recording its failure
        if not final:
            return reason
        log = RunLog(trial_dir)
        log.status("failed", step=_last_step(trial_dir), error=reason)
        if self.target is not None:
            with contextlib.suppress(Exception):     # the mirror is best effort; the files are the truth
                from .tracking import MlflowSink
                MlflowSink(self.target.tracking_uri, self.target.experiment_id, self.target.parent_run_id,
                           trial_dir.name, {"trial_id": trial_dir.name}).set_status("failed", reason)
        return reason


def _read_status(trial_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((trial_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def _last_step(trial_dir: Path) -> int:
    """The last step in metrics.jsonl (read from the end; the file may be long)."""
    path = trial_dir / "metrics.jsonl"
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


def _last_eval(trial_dir: Path, metric: str) -> float | None:
    rows = [r for r in read_jsonl(trial_dir / "eval.jsonl") if metric in r]
    return float(rows[-1][metric]) if rows else None


# ----------------------------------------------------------------------------------------------
# Progress
# ----------------------------------------------------------------------------------------------

def _printer(enabled: bool):
    def say(line: str) -> None:
        if enabled:
            _Progress.clear_line()
            print(f"[stalebench] {line}", file=sys.stderr, flush=True)
    return say


def _fmt_s(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class _Progress:
    """A driver thread printing one summary line (a live line on a terminal, a new line every
    `interval_s` otherwise) counted from the trials' status.json and metrics.jsonl files."""
    _live = False          # a live (\\r-rewritten) line is on screen

    def __init__(self, suite_dir: Path, trials: list[Trial], enabled: bool, interval_s: float | None = None):
        self.suite_dir, self.trials, self.enabled = suite_dir, trials, enabled
        self.tty = sys.stderr.isatty()
        self.interval_s = interval_s or (1.0 if self.tty else 15.0)
        self.total = sum(t.config.train.steps for t in trials)
        self._stop = threading.Event()
        self._start_steps, self._t0 = 0, time.time()

    def __enter__(self):
        if self.enabled:
            self._start_steps, self._t0 = self._count()[1], time.time()   # the ETA counts this run's pace
            self._thread = threading.Thread(target=self._loop, name="stalebench-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self._stop.set()
            self._thread.join(timeout=5)
            self.clear_line()
            print(f"[stalebench] {self.line()}", file=sys.stderr, flush=True)

    @classmethod
    def clear_line(cls) -> None:
        if cls._live:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
            cls._live = False

    def _loop(self) -> None:
        last = ""
        while not self._stop.wait(self.interval_s):
            line = self.line()
            if self.tty:
                print(f"\r\033[K[stalebench] {line}", end="", file=sys.stderr, flush=True)
                _Progress._live = True
            elif line != last:
                print(f"[stalebench] {line}", file=sys.stderr, flush=True)
            last = line

    def _count(self) -> tuple[dict[str, int], int]:
        counts: dict[str, int] = {}
        steps = 0
        for t in self.trials:
            trial_dir = self.suite_dir / t.trial_id
            status = _status(trial_dir) or "pending"
            counts[status] = counts.get(status, 0) + 1
            steps += t.config.train.steps if status in ("completed", "diverged", "failed") else _last_step(trial_dir)
        return counts, steps

    def line(self) -> str:
        counts, steps = self._count()
        elapsed = time.time() - self._t0
        rate = (steps - self._start_steps) / elapsed if elapsed > 0 else 0.0
        eta = _fmt_s((self.total - steps) / rate) if rate > 0 else "?"
        finished = sum(counts.get(s, 0) for s in ("completed", "diverged", "failed"))
        parts = [f"{finished}/{len(self.trials)} trials done", f"{counts.get('running', 0)} running",
                 f"{counts.get('failed', 0)} failed"]
        if counts.get("diverged"):
            parts.append(f"{counts['diverged']} diverged")
        parts += [f"step {steps}/{self.total}", f"elapsed {_fmt_s(elapsed)}", f"ETA {eta}"]
        return " | ".join(parts)


# ----------------------------------------------------------------------------------------------
# tune_suite: per-estimator search of one parameter (Optuna through Ray Tune)
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TuneSpec:
    """The suite's `tune:` section."""
    param: str = "train.lr"               # dotted run-config key searched log-uniformly
    low: float = 0.0                       # search range [low, high], 0 < low < high
    high: float = 0.0
    trials_per_algorithm: int = 8          # the same budget for every estimator
    metric: str = "eval/acc"               # objective: this metric's last row in the trial's eval.jsonl
    mode: str = "max"                      # max | min
    sampler_seed: int = 0                  # Optuna TPE sampler seed

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
            build_run_config(suite.base, {self.param: bound})     # e.g. a value the setting refuses


def parse_tune(suite: Suite) -> TuneSpec:
    """The validated `tune:` section of a suite (one-line ConfigError naming the key otherwise)."""
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
    """Search `tune.param` per estimator of the suite's grid (delay 0, first value of every other grid
    axis, first seed) with the same number of trials each; write the best values as per-estimator
    overrides to results/<suite>/tuned-overrides.yaml and return that path."""
    spec = parse_tune(suite)
    say = _printer(progress)
    suite_dir = (Path(results_root) / suite.name).resolve()
    tune_dir = suite_dir / "tune"
    _write_suite_file(suite, suite_dir, progress)
    algorithms = [str(a) for a in suite.grid.get("algorithm", [suite.base.get("algorithm", "grpo")])]
    fixed = {k: v[0] for k, v in suite.grid.items() if k != "algorithm"}
    fixed.update(delay=0, seed=suite.seeds[0])
    probes = [_tune_trial(suite, spec, a, fixed, spec.low) for a in algorithms]
    for trial_id, reason in _prepare_models(probes, say).items():
        raise ConfigError(f"model: the base model for {trial_id} cannot be built: {reason}")
    say(f"tuning {spec.param} in [{spec.low:g}, {spec.high:g}] for {', '.join(algorithms)}: "
        f"{spec.trials_per_algorithm} trials each at delay 0 -> {tune_dir}")
    target = _open_mlflow(suite, Path(results_root), "tune", len(algorithms) * spec.trials_per_algorithm)
    results: dict[str, list[dict[str, Any]]] = {}
    interrupted = True
    try:
        with _ray_session(address):
            for algorithm in algorithms:
                results[algorithm] = _search(suite, spec, algorithm, fixed, tune_dir, target, say)
        interrupted = False
    finally:
        flat = [r for rs in results.values() for r in rs]
        close_suite_run(target.tracking_uri, target.parent_run_id,
                        {s: sum(r["status"] == s for r in flat) for s in {r["status"] for r in flat}}, interrupted)
    return _write_overrides(suite, spec, results, suite_dir)


def _tune_trial(suite: Suite, spec: TuneSpec, algorithm: str, fixed: dict[str, Any], value: float) -> Trial:
    params = {"algorithm": algorithm, **fixed, spec.param: value}
    config = build_run_config(suite.base, {**suite.overrides.get(algorithm, {}), **params})
    short = spec.param.rsplit(".", 1)[-1]
    return Trial(f"tune-{algorithm}-{short}{value:.4e}", params, config)


def _search(suite: Suite, spec: TuneSpec, algorithm: str, fixed: dict[str, Any], tune_dir: Path,
            target: MlflowTarget, say) -> list[dict[str, Any]]:
    """One Tune experiment: Optuna's TPE proposes `trials_per_algorithm` values for one estimator."""
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch
    import optuna

    res = suite.resources
    fits = max(1, int(ray.cluster_resources().get("CPU", 1) // res.cpu))
    if res.gpu:
        fits = min(fits, max(1, int(ray.cluster_resources().get("GPU", 0) // res.gpu)))
    concurrent = min(res.max_concurrent or fits, spec.trials_per_algorithm)
    sampler = optuna.samplers.TPESampler(seed=spec.sampler_seed, n_startup_trials=max(2, spec.trials_per_algorithm // 2))
    searcher = ConcurrencyLimiter(OptunaSearch(metric="objective", mode=spec.mode, sampler=sampler),
                                  max_concurrent=concurrent)
    trainable = tune.with_resources(
        tune.with_parameters(_tune_trainable, suite=suite, spec=spec, algorithm=algorithm, fixed=fixed,
                             tune_dir=str(tune_dir), mlflow=target, cwd=os.getcwd()),
        {"cpu": res.cpu, "gpu": res.gpu})
    events = _TuneEvents(algorithm, spec, say)
    tuner = tune.Tuner(
        trainable, param_space={"value": tune.loguniform(spec.low, spec.high)},
        tune_config=tune.TuneConfig(search_alg=searcher, num_samples=spec.trials_per_algorithm),
        run_config=tune.RunConfig(name=f"{suite.name}-tune-{algorithm}-{time.strftime('%Y%m%d-%H%M%S')}",
                                  storage_path=_storage_path(tune_dir.parent), verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=res.max_failures),
                                  callbacks=[events]))
    grid = tuner.fit()
    rows = []
    for result in grid:
        value = float(result.config["value"])
        m = result.metrics or {}
        rows.append({"algorithm": algorithm, spec.param: value, "status": m.get("status", "failed"),
                     "objective": m.get("objective"), "trial_id": _tune_trial(suite, spec, algorithm, fixed, value).trial_id})
    rows.sort(key=lambda r: r[spec.param])
    with open(tune_dir / "trials.jsonl", "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return rows


def _tune_trainable(config: dict, *, suite: Suite, spec: TuneSpec, algorithm: str, fixed: dict[str, Any],
                    tune_dir: str, mlflow: MlflowTarget, cwd: str) -> None:
    """Runs in a Ray worker: one tuning trial; reports the objective (a diverged run gets the worst value)."""
    trial = _tune_trial(suite, spec, algorithm, fixed, float(config["value"]))
    _set_up_worker(cwd, trial.config.train.threads)
    with _trial_lock(Path(tune_dir) / trial.trial_id):
        try:
            status = run_trial(trial, Path(tune_dir), mlflow, progress=False)
        except TrialFailed as exc:
            raise TrialFailed(str(exc)) from None
    value = _last_eval(Path(tune_dir) / trial.trial_id, spec.metric)
    if status.get("status") != "completed" or value is None or not math.isfinite(value):
        value = -math.inf if spec.mode == "max" else math.inf
    tune.report({"objective": value, "status": status.get("status", "unknown")})


class _TuneEvents(tune.Callback):
    def __init__(self, algorithm: str, spec: TuneSpec, say):
        self.algorithm, self.spec, self.say, self.n = algorithm, spec, say, 0

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.n += 1
        m = trial.last_result or {}
        self.say(f"tune {self.algorithm} {self.n}/{self.spec.trials_per_algorithm}: {self.spec.param}="
                 f"{trial.config['value']:.3e} -> {self.spec.metric} {m.get('objective')} ({m.get('status')})")

    def on_trial_error(self, iteration, trials, trial, **info):
        self.n += 1
        self.say(f"tune {self.algorithm} {self.n}/{self.spec.trials_per_algorithm}: {self.spec.param}="
                 f"{trial.config['value']:.3e} FAILED: {_error_reason(trial)}")


def _write_overrides(suite: Suite, spec: TuneSpec, results: dict[str, list[dict[str, Any]]], suite_dir: Path) -> Path:
    """results/<suite>/tuned-overrides.yaml: the best value per estimator as a suite `overrides:` mapping."""
    sign = 1 if spec.mode == "max" else -1
    chosen, lines = {}, []
    for algorithm, rows in results.items():
        ok = [r for r in rows if r["status"] == "completed" and r["objective"] is not None and math.isfinite(r["objective"])]
        for r in rows:
            lines.append(f"#   {algorithm:<10} {spec.param}={r[spec.param]:.3e}  {spec.metric}="
                         f"{r['objective'] if r['objective'] is not None else 'n/a'}  ({r['status']})")
        if ok:
            best = max(ok, key=lambda r: (sign * r["objective"], -r[spec.param]))   # ties: the smaller value
            chosen[algorithm] = {spec.param: float(f"{best[spec.param]:.4g}")}
    missing = sorted(set(results) - set(chosen))
    header = [
        f"# Tuned {spec.param} per estimator for suite {suite.name} by `stalebench tune` on {time.strftime('%Y-%m-%d %H:%M')}:",
        f"# Optuna TPE through Ray Tune, {spec.trials_per_algorithm} trials per estimator, log-uniform in "
        f"[{spec.low:g}, {spec.high:g}], delay 0, objective: final {spec.metric} ({spec.mode}).",
        "# To use: copy the `overrides:` mapping into a suite file as its top-level `overrides:` key (keep only",
        "# the estimators that suite runs; the loader rejects overrides for estimators it does not use).",
        *([f"# No completed trial for: {', '.join(missing)} (no override written)."] if missing else []),
        "# Trials:", *lines, ""]
    path = suite_dir / "tuned-overrides.yaml"
    path.write_text("\n".join(header) + yaml.safe_dump({"overrides": chosen}, sort_keys=False))
    return path
