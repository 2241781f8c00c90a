"""Tracking: always-on local result files for every trial, optionally mirrored to MLflow.

Local files are the source of truth for reports; their format is owned by harness/trialdir.py.
MLflow (embedded SQLite by default, a tracking server via MLFLOW_TRACKING_URI) is a mirror: one child
run per trial under the suite's parent run. `mlflow` is imported only in this module.

Resume without duplicates: rows are keyed by step. On resume the local files are cut back to the
checkpoint's step, and the mirror skips steps MLflow already holds (a deterministic rerun reproduces them).
"""
from __future__ import annotations

import contextlib
import fcntl
import math
import os
import random
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator, Mapping

from . import trialdir
from .provenance import mlflow_tags as mlflow_provenance_tags


def _clean(row: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class NullSink:
    """The mirror of a trial when there is none (the interface MlflowSink implements)."""

    def log_rows(self, rows: list[tuple[int, Mapping[str, float]]]) -> None:
        pass

    def set_status(self, status: str, error: str | None) -> None:
        pass

    def set_tags(self, tags: Mapping[str, str]) -> None:
        pass

    def log_artifacts(self, trial_dir: Path) -> None:
        pass


class RunLog:
    """The result files of one trial (and their MLflow mirror)."""

    def __init__(self, trial_dir: Path, sink: NullSink | None = None, flush_every: int = 20):
        self.dir = Path(trial_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sink = sink or NullSink()
        self.flush_every = flush_every
        self._pending: list[tuple[int, Mapping[str, float]]] = []

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, config: Mapping[str, Any], params: Mapping[str, Any], provenance: Mapping[str, Any],
              resume_step: int = 0) -> None:
        """Write config/params/provenance and mark running; keep rows up to `resume_step` (0 = fresh).

        A damaged row before `resume_step` stops the resume (trialdir.TrialDirError) instead of
        silently dropping the rows after it; a torn last line is a killed writer's and is dropped."""
        trialdir.write_start(self.dir, config, params, provenance)
        self.sink.set_tags(mlflow_provenance_tags(provenance))
        self.config_sha256 = provenance["config_sha256"]
        self.started_at = time.time()                  # this process's start on the trial (status.json)
        for name in ("metrics.jsonl", "eval.jsonl"):
            kept = trialdir.truncate_jsonl(self.dir / name, resume_step)
            # Kept rows may never have reached the mirror (it is fed in batches, and the process may
            # have been killed between a row and its flush): offer them again; the sink skips the
            # steps it already holds.
            self._pending.extend((r["step"], _clean({k: v for k, v in r.items() if k != "step"})) for r in kept)
        self.flush()
        self.status("running", step=resume_step)

    def status(self, status: str, step: int, error: str | None = None, diverged_step: int | None = None,
               extra: Mapping[str, Any] | None = None) -> None:
        assert status in trialdir.STATUSES, status
        record = {"trial_id": self.dir.name, "status": status, "step": step, "error": error,
                  "diverged_step": diverged_step, "config_sha256": getattr(self, "config_sha256", None),
                  "started_at": getattr(self, "started_at", None), "updated_at": time.time(), **(extra or {})}
        try:
            if status != "running":
                # The mirror first: a rerun skips a trial whose status.json says it finished, so a kill
                # between the two must leave the trial unfinished, not its last rows unmirrored.
                if status in trialdir.FINAL:
                    self._pending.append((step, self.summary(diverged_step)))
                self.flush()
                self.sink.set_status(status, error)
        finally:
            trialdir.write_status(self.dir, record)

    def read_status(self) -> dict[str, Any]:
        return trialdir.read_status(self.dir)

    def summary(self, diverged_step: int | None) -> dict[str, float]:
        """One-number results of a finished trial, as run metrics to sort and filter by in MLflow's UI.
        (Collapse needs the report's rules over the whole suite and is not among them.)"""
        accs = [float(r["eval/acc"]) for r in trialdir.read_jsonl(self.dir / "eval.jsonl") if "eval/acc" in r]
        out = {"summary/final_acc": accs[-1], "summary/best_acc": max(accs), "summary/start_acc": accs[0]} if accs else {}
        return {**out, "summary/diverged": float(diverged_step is not None),
                **({"summary/diverged_step": float(diverged_step)} if diverged_step is not None else {})}

    # -- rows --------------------------------------------------------------------------------
    def metrics(self, step: int, row: Mapping[str, Any]) -> None:
        self._append("metrics.jsonl", step, row)

    def eval(self, step: int, row: Mapping[str, Any]) -> None:
        self._append("eval.jsonl", step, row)

    def _append(self, name: str, step: int, row: Mapping[str, Any]) -> None:
        trialdir.append_jsonl(self.dir / name, {"step": step, **row})
        self._pending.append((step, _clean(row)))
        if len(self._pending) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            self.sink.log_rows(self._pending)
        self._pending = []


# ----------------------------------------------------------------------------------------------
# MLflow
# ----------------------------------------------------------------------------------------------

_BAD_CHARS = re.compile(r"[^0-9A-Za-z_\-. :/]")


def mlflow_name(name: str) -> str:
    """A metric or param name MLflow accepts (alphanumerics, _ - . space : /)."""
    return _BAD_CHARS.sub("_", name)


def default_tracking_uri(results_root: Path) -> str:
    """MLFLOW_TRACKING_URI if set, else an embedded SQLite store results/mlflow.db."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    results_root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(results_root / 'mlflow.db').resolve()}"


PROBE_TIMEOUT_S = 5.0            # an MLflow server that does not answer within this is reported unreachable
OPEN_TRIES = 5                   # attempts at opening the store (two first drivers race to create SQLite's schema)


class TrackingUnreachable(ValueError):
    """MLFLOW_TRACKING_URI names a server that does not answer (one line naming the variable)."""


def probe_tracking_uri(uri: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail fast when an http(s) tracking URI does not answer: MLflow's own client retries a dead server
    with backoff for minutes. Any HTTP answer (even an error status) counts as reachable; a local store
    (sqlite:, file:, a path) is not probed."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme not in ("http", "https"):
        return
    where = f"MLFLOW_TRACKING_URI={uri[:200]}"
    try:
        host, port = parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError as exc:                                   # a port that is not a number
        raise TrackingUnreachable(f"{where}: not a valid URL ({exc})") from None
    if not host:
        raise TrackingUnreachable(f"{where}: not a valid URL (no host)")
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        raise TrackingUnreachable(f"{where}: cannot connect to {host}:{port} ({exc.strerror or type(exc).__name__}"
                                  f"); start the MLflow server or unset the variable (local store results/mlflow.db)") from None
    try:                                                        # a listening process that never answers
        urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s).close()
    except urllib.error.HTTPError:
        pass                                                    # it answered: reachable
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, (ConnectionError, socket.timeout, TimeoutError)):
            raise TrackingUnreachable(f"{where}: no answer from {host}:{port} within {timeout_s:g} s "
                                      f"({type(reason).__name__}); is it an MLflow server?") from None


def _live_run(client, experiment_id: str, trial_id: str):
    """The trial's current MLflow child run (superseded runs carry a changed trial_id tag), or None."""
    found = client.search_runs([experiment_id], f"tags.trial_id = '{trial_id}'", max_results=1)
    return found[0] if found else None


def find_trial_run(tracking_uri: str, experiment_name: str, trial_id: str) -> str | None:
    """The run id of a trial's live MLflow run (experiment = suite name), or None if it has none."""
    from mlflow.tracking import MlflowClient

    _quiet_mlflow()
    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name(experiment_name)
    run = _live_run(client, experiment.experiment_id, trial_id) if experiment is not None else None
    return run.info.run_id if run is not None else None


def supersede_run(tracking_uri: str, experiment_id: str, trial_id: str) -> None:
    """Mark a trial's MLflow run as superseded by a rerun after a config change (never deleted): it keeps
    its data, loses the trial_id tag that resume looks up, and says which trial it was."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    run = _live_run(client, experiment_id, trial_id)
    if run is not None:
        client.set_tag(run.info.run_id, "stalebench.superseded", "true")
        client.set_tag(run.info.run_id, "stalebench.superseded_trial", trial_id)
        client.set_tag(run.info.run_id, "trial_id", f"{trial_id}~superseded-{int(time.time())}")


class MlflowSink:
    """Mirror of one trial as an MLflow child run, found again by its trial id on resume."""

    def __init__(self, tracking_uri: str, experiment_id: str, parent_run_id: str | None, trial_id: str,
                 params: Mapping[str, Any]):
        import mlflow
        from mlflow.tracking import MlflowClient

        self._mlflow = mlflow
        self.client = MlflowClient(tracking_uri)
        run = _live_run(self.client, experiment_id, trial_id)
        found = [run] if run is not None else []
        if found:
            self.run_id = found[0].info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            tags = {"trial_id": trial_id, "mlflow.runName": trial_id}
            if parent_run_id:
                tags["mlflow.parentRunId"] = parent_run_id
            self.run_id = self.client.create_run(experiment_id, tags=tags, run_name=trial_id).info.run_id
        # The params the run lacks: all of them for a new run; on resume, any a killed process did not log.
        from mlflow.entities import Param
        held = found[0].data.params if found else {}
        items = [Param(mlflow_name(k), str(v)[:6000]) for k, v in params.items() if mlflow_name(k) not in held]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[i:i + 100])
        # Per metric, the last step MLflow already holds (only non-empty when resuming).
        self.logged_through = {key: max(m.step for m in self.client.get_metric_history(self.run_id, key))
                               for key in self.client.get_run(self.run_id).data.metrics}

    def log_rows(self, rows: list[tuple[int, Mapping[str, float]]]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = []
        for step, row in rows:
            for key, value in row.items():
                name = mlflow_name(key)
                if step > self.logged_through.get(name, -1):
                    metrics.append(Metric(name, value if math.isfinite(value) else float("nan"), now, step))
                    self.logged_through[name] = step
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000])

    def set_tags(self, tags: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag
        self.client.log_batch(self.run_id, tags=[RunTag(k, v[:5000]) for k, v in tags.items()])

    def set_status(self, status: str, error: str | None) -> None:
        self.client.set_tag(self.run_id, "stalebench.status", status)
        if error:
            self.client.set_tag(self.run_id, "stalebench.error", error[:5000])
        self.client.set_terminated(self.run_id, "FINISHED" if status in ("completed", "diverged") else "FAILED")

    def log_artifacts(self, trial_dir: Path) -> None:
        for name in ("config.yaml", "params.json", "provenance.json", "metrics.jsonl", "eval.jsonl", "status.json"):
            if (trial_dir / name).exists():
                self.client.log_artifact(self.run_id, str(trial_dir / name))


def _quiet_mlflow() -> None:
    """MLflow and its database migrations log INFO lines to stderr ('Creating initial MLflow database
    tables...'); a suite run shows its own progress instead."""
    import logging

    for name in ("mlflow", "alembic"):
        logger = logging.getLogger(name)
        if logger.level < logging.WARNING:
            logger.setLevel(logging.WARNING)


def _open_store(tracking_uri: str, experiment_name: str):
    """(client, experiment or None). The first use of a new SQLite store creates its schema (alembic
    migrations); two drivers starting at once would both migrate and one would fail, leaving a
    half-migrated database. So the open is serialized by a lock file beside the database
    (<db>.lock), and a transient SQLite error ('database is locked') is retried with backoff."""
    from mlflow.tracking import MlflowClient

    db = tracking_uri[len("sqlite:///"):] if tracking_uri.startswith("sqlite:///") else None
    for attempt in range(OPEN_TRIES):
        try:
            with _file_lock(Path(db + ".lock") if db else None):
                client = MlflowClient(tracking_uri)
                return client, client.get_experiment_by_name(experiment_name)
        except Exception:  # noqa: BLE001 — SQLAlchemy errors vary by version; a server retries on its own
            if attempt == OPEN_TRIES - 1 or db is None:
                raise
            time.sleep(0.25 * 2 ** attempt * (1 + random.random()))
    raise AssertionError("unreachable")


@contextlib.contextmanager
def _file_lock(path: Path | None) -> Iterator[None]:
    if path is None:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def driver_tags() -> dict[str, str]:
    """Tags that identify this driver process, so that a later run can tell whether it is still alive."""
    return {"stalebench.host": os.uname().nodename, "stalebench.driver_pid": str(os.getpid()),
            "stalebench.driver_start": _process_start(os.getpid()) or ""}


def _process_start(pid: int) -> str | None:
    """The start time of process `pid` in clock ticks since boot (Linux), telling a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]     # field 22; the command name (field 2) may hold spaces


def _driver_alive(tags: Mapping[str, str]) -> bool | None:
    """Whether the driver that opened a run is alive: None when it ran on another host (unknowable)."""
    if tags.get("stalebench.host") != os.uname().nodename:
        return None
    try:
        pid = int(tags.get("stalebench.driver_pid", ""))
    except ValueError:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass                                      # alive, another user's
    started = tags.get("stalebench.driver_start")
    return not started or _process_start(pid) in (None, started)


def end_orphaned_runs(client, experiment_id: str) -> list[str]:
    """Mark KILLED the parent runs of this experiment still RUNNING whose driver is gone (killed with
    SIGKILL, or its machine rebooted): only runs opened on this host, where the pid can be checked."""
    found = client.search_runs([experiment_id], "attributes.status = 'RUNNING' and tags.`stalebench.driver_pid` != ''",
                               max_results=1000)
    ended = []
    for run in found:
        if _driver_alive(run.data.tags) is False:
            client.set_tag(run.info.run_id, "stalebench.ended_by", "a later run: its driver process was gone")
            client.set_terminated(run.info.run_id, "KILLED")
            ended.append(run.info.run_id)
    return ended


EXPERIMENT_KIND = "mlflow.experimentKind"


def open_suite_run(tracking_uri: str, experiment_name: str, run_name: str, tags: Mapping[str, str],
                   artifact_location: str | None = None, artifacts: tuple[Path, ...] = ()) -> tuple[str, str]:
    """(experiment_id, run_id): a new parent run in experiment `experiment_name`, which is created if missing.

    Safe when several drivers create the same experiment at once (the loser of the race finds the
    winner's), or the SQLite store's schema (retried), and restores an experiment of that name that was
    deleted in the UI. Earlier parent runs whose driver died on this host are marked KILLED; the new
    run carries this driver's host, pid and start time for the next run to do the same.
    """
    from mlflow.exceptions import MlflowException

    _quiet_mlflow()
    client, experiment = _open_store(tracking_uri, experiment_name)
    if experiment is None:
        try:
            # MLflow 3's UI opens an experiment on its runs table only when it is marked as model training
            experiment_id = client.create_experiment(experiment_name, artifact_location=artifact_location,
                                                     tags={EXPERIMENT_KIND: "custom_model_development"})
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            experiment = client.get_experiment_by_name(experiment_name)
            if experiment is None:
                raise
            experiment_id = experiment.experiment_id
    else:
        experiment_id = experiment.experiment_id
        if experiment.lifecycle_stage == "deleted":
            client.restore_experiment(experiment_id)
    end_orphaned_runs(client, experiment_id)
    run = client.create_run(experiment_id, tags={**tags, **driver_tags(), "mlflow.runName": run_name}, run_name=run_name)
    for path in artifacts:
        client.log_artifact(run.info.run_id, str(path))
    return experiment_id, run.info.run_id


def close_suite_run(tracking_uri: str, run_id: str, counts: Mapping[str, int], interrupted: bool = False) -> None:
    """End a parent run: FINISHED unless a trial failed (FAILED) or the run was interrupted (KILLED)."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    now = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(f"trials/{k}", float(v), now, 0) for k, v in counts.items()])
    status = "KILLED" if interrupted else "FAILED" if counts.get("failed") else "FINISHED"
    client.set_terminated(run_id, status)


def log_metrics_to_run(tracking_uri: str, run_id: str, metrics: Mapping[str, float]) -> None:
    """Log `metrics` (name -> value, at step 0) to the existing MLflow run `run_id`, e.g. `eval/gsm8k/acc`."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    _quiet_mlflow()
    now = int(time.time() * 1000)
    batch = [Metric(mlflow_name(k), float(v), now, 0) for k, v in metrics.items()]
    MlflowClient(tracking_uri).log_batch(run_id, metrics=batch)


def end_orphaned_suite_runs(tracking_uri: str, experiment_name: str) -> list[str]:
    """end_orphaned_runs for the experiment named `experiment_name`, if it exists (a run that had
    nothing left to do still tidies up after a driver killed after its last trial finished)."""
    _quiet_mlflow()
    client, experiment = _open_store(tracking_uri, experiment_name)
    return [] if experiment is None else end_orphaned_runs(client, experiment.experiment_id)
