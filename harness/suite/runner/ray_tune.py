"""Ray plumbing of the suite runner: a quiet Ray session (local or a cluster, probed first), the Tune
experiment over a suite's trials (FIFO, retries, resources checked against the cluster), the trainable
that runs one trial in a worker (or drives its Ray Train workers: ray_train.py), and the driver-side
callback that reports each trial's end.

With `runner/search.py`, the only place that imports ray (tests/test_runner.py checks it).
"""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ray
from ray import tune

from harness.trial import numerics
from harness.config.run import ConfigError
from harness.suite.status import last_eval
from harness.config.expand import Resources, Suite, Trial
from harness.store import campaign
from harness.store.tracking import RunLog, Target
from harness.trial.lifecycle import TrialFailed, mirror_params, run_trial
from harness.store.trialdir import lock_path, ray_dir, read_evals, read_status
from harness.suite.console import Say
from harness.suite.runner.ray_train import alive_nodes, check_workers_fit, concurrent_trials, run_workers, trial_resources

STORAGE_ENV = "STALEBENCH_STORAGE_PATH"    # Tune's storage_path (a shared directory or URI on a cluster)

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
def ray_session(address: str | None, say: Say) -> Iterator[None]:
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
           "RAY_worker_niceness": os.environ.get("RAY_worker_niceness", "0"),
           **numerics.env_vars()}     # the driver's float path (harness/trial/numerics.py): cluster workers get it too
    if address is None:
        env["RAY_AUTH_MODE"] = os.environ.get("RAY_AUTH_MODE", "disabled")
    with _env(env), _quiet_ray_driver():
        owned = not ray.is_initialized()
        if owned:
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
            if address is None:
                say(f"starting Ray ({os.cpu_count()} CPUs) ...")
                ray.init(address="local", num_cpus=os.cpu_count(), **kwargs)
            else:                                        # the workers of a cluster do not inherit our env
                passed = {k: v for k, v in os.environ.items() if k.startswith(("STALEBENCH_", "MLFLOW_", "WANDB_", "HF_"))}
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


def check_fits(res: Resources, workers: int = 1) -> None:
    """Fail at once when one trial's resources fit on no Ray node (or its `workers` Train workers on no set of
    nodes): Tune, or Train, would wait for them forever."""
    nodes = alive_nodes()
    if workers > 1:
        return check_workers_fit(res, workers, nodes)
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


def storage_path(suite_dir: Path) -> str:
    """Tune's storage: $STALEBENCH_STORAGE_PATH (shared storage on a cluster) or results/<suite>/ray."""
    env = os.environ.get(STORAGE_ENV)
    if env:
        return env if "://" in env else str(Path(env).resolve())
    return str(ray_dir(suite_dir))


def fit(suite: Suite, trials: list[Trial], suite_dir: Path, target: Target, say: Say, name: str | None = None,
        storage_dir: Path | None = None, land_to: Path | None = None) -> None:
    """One Tune experiment: a grid over the trial ids, FIFO (no early stopping), Tune's retries for
    transient failures; a trial failing every try is recorded as failed and the suite goes on. The trials
    live in `suite_dir` (a grid search's: results/<suite>/tune), Tune's files under `storage_dir`'s (default:
    suite_dir's) storage_path, as experiment `name` (default: the suite's name and the time). With `land_to`
    (a campaign's folder: store/campaign.py) each finished trial is committed there as it ends."""
    from ray.tune.schedulers import FIFOScheduler

    res = suite.resources
    trainable = tune.with_resources(
        tune.with_parameters(_trainable, trials={t.trial_id: t for t in trials}, suite_dir=str(suite_dir),
                             mirror=target, cwd=os.getcwd(), res=res),
        trial_resources(res, trials))
    concurrent = concurrent_trials(res, max(t.config.train.workers for t in trials), alive_nodes())
    tune.Tuner(
        trainable,
        param_space={"trial_id": tune.grid_search([t.trial_id for t in trials])},
        tune_config=tune.TuneConfig(scheduler=FIFOScheduler(), max_concurrent_trials=concurrent,
                                    reuse_actors=True,     # a worker keeps torch & co. imported between trials
                                    trial_name_creator=_trial_name, trial_dirname_creator=_trial_name),
        run_config=tune.RunConfig(name=name or f"{suite.name}-{time.strftime('%Y%m%d-%H%M%S')}",
                                  storage_path=storage_path(storage_dir or suite_dir), verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=res.max_failures),
                                  callbacks=[_TrialEvents(suite_dir, target, say,
                                                          {t.trial_id: t for t in trials},
                                                          _lander(storage_dir or suite_dir, land_to, say))])).fit()


def _lander(suite_dir: Path, land_to: Path | None, say: Say) -> Callable[[Path], None] | None:
    """The callback that lands a finished trial in a campaign (None: the suite is not one)."""
    if land_to is None:
        return None

    def land_trial(trial_dir: Path) -> None:
        try:
            out = campaign.land(Path(suite_dir), trial_dir, Path(land_to))
        except (OSError, ValueError) as exc:   # the run goes on; the trial is in results/
            say(f"could not land {trial_dir.name} in {land_to}: {type(exc).__name__}: {exc}".splitlines()[0])
            return
        if out is not None:
            say(f"landed {trial_dir.name} -> {out}")
    return land_trial


def _trial_name(trial) -> str:
    return str(trial.config["trial_id"])


def _trainable(config: dict, *, trials: dict[str, Trial], suite_dir: str, mirror: Target, cwd: str,
               res: Resources) -> None:
    """In a Ray worker: one trial via run_trial; reports its final status and evaluation to Tune (the
    per-step metrics go to the trial's files and MLflow)."""
    trial = trials[config["trial_id"]]
    status = run_in_worker(trial, Path(suite_dir), mirror, cwd, res)
    evals = {k.replace("/", "_"): v for k, v in _last_row(Path(suite_dir) / trial.trial_id).items() if k != "step"}
    tune.report({"status": status.get("status", "unknown"), "step": status.get("step", 0), **evals})


def run_in_worker(trial: Trial, suite_dir: Path, mirror: Target, cwd: str, res: Resources) -> dict[str, Any]:
    """One trial in this Tune trial's process, or on its train.workers Ray Train workers (ray_train.py)."""
    if os.path.isdir(cwd):             # relative paths in a config mean what they meant to the driver
        os.chdir(cwd)
    trial_dir = suite_dir / trial.trial_id
    trial_dir.mkdir(parents=True, exist_ok=True)
    # Exclusive use of the trial directory: a straggling worker of a killed driver finishes (or dies)
    # before the rerun's worker touches the files.
    with open(lock_path(trial_dir), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if trial.config.train.workers > 1:
                return run_workers(trial, suite_dir, mirror, cwd, res, storage_path(suite_dir))
            return run_trial(trial, suite_dir, mirror, progress=False)
        except TrialFailed as exc:     # already recorded; re-raised short, so that Tune retries it
            raise TrialFailed(str(exc)) from None


def _last_row(trial_dir: Path) -> dict[str, float]:
    rows = read_evals(trial_dir)
    return {k: v for k, v in (rows[-1] if rows else {}).items() if isinstance(v, (int, float))}


def error_reason(trial) -> str:
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

    def __init__(self, suite_dir: Path, target: Target | None, say: Say, trials: dict[str, Trial] | None = None,
                 land: Callable[[Path], None] | None = None):
        self.suite_dir, self.target, self.say, self.trials = Path(suite_dir), target, say, trials or {}
        self.land = land

    def on_trial_complete(self, iteration, trials, trial, **info):
        trial_dir = self.suite_dir / _trial_name(trial)
        record, acc = read_status(trial_dir), last_eval(trial_dir)
        extra = f", eval/acc {acc:.3f}" if acc is not None else ""
        if record.get("status") == "diverged":
            extra += f" (diverged at step {record.get('diverged_step')}: {record.get('error')})"
        self.say(f"{record.get('status', 'finished')} {trial_dir.name}{extra}")
        if self.land is not None:
            self.land(trial_dir)

    def on_trial_recover(self, iteration, trials, trial, **info):
        self.say(f"retrying {_trial_name(trial)}: {self._reason(trial, final=False)}")

    def on_trial_error(self, iteration, trials, trial, **info):
        self.say(f"FAILED {_trial_name(trial)}: {self._reason(trial, final=True)}")

    def _reason(self, trial, final: bool) -> str:
        trial_dir = self.suite_dir / _trial_name(trial)
        record = read_status(trial_dir)
        if record.get("status") == "failed" and record.get("error"):
            return record["error"]
        reason = error_reason(trial)            # the worker died without recording its failure
        if final:
            _record_failure(trial_dir, reason, self.target, self.trials.get(trial_dir.name),
                            step=int(record.get("step") or 0))
        return reason


def _record_failure(trial_dir: Path, reason: str, target: Target | None, trial: Trial | None,
                    step: int = 0) -> None:
    """A `failed` status written by the driver (the trial could not record it), mirrored to its runs."""
    RunLog(trial_dir).status("failed", step=step, error=reason)
    if target is not None:
        with contextlib.suppress(Exception):     # the mirror is best effort; the files are the truth
            params = mirror_params(trial) if trial is not None else {"trial_id": trial_dir.name}
            sink = target.open(trial_dir.name, params)
            sink.set_status("failed", reason)
            sink.finish(trial_dir)
