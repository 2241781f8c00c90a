"""The MLflow store: where it is, whether it answers, and the suite-level runs (`mlflow` is imported
only in this package, lazily).

The store is MLFLOW_TRACKING_URI, else an embedded SQLite database results/mlflow.db. Each invocation of
`stalebench run` (or `tune`) opens a parent run in the experiment named after the suite; each trial is a
child run (mlflow_sink.py). A parent run whose driver died is marked KILLED by the next run on that host.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import random
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Iterator, Mapping

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
    (<db>.lock), and a transient SQLite error ('database is locked') is retried with backoff. A new
    SQLite store is built whole in a temporary file and renamed into place (_create_sqlite_store): a
    setup cut short (a full disk) leaves no database behind, and the next run builds it again."""
    from mlflow.tracking import MlflowClient

    db = tracking_uri[len("sqlite:///"):] if tracking_uri.startswith("sqlite:///") else None
    for attempt in range(OPEN_TRIES):
        try:
            with _file_lock(Path(db + ".lock") if db else None):
                if db and not os.path.exists(db):
                    _create_sqlite_store(db)
                elif db and _setup_interrupted(db):
                    _move_aside(db)
                    _create_sqlite_store(db)
                client = MlflowClient(tracking_uri)
                return client, client.get_experiment_by_name(experiment_name)
        except Exception:  # noqa: BLE001 — SQLAlchemy errors vary by version; a server retries on its own
            if attempt == OPEN_TRIES - 1 or db is None:
                raise
            time.sleep(0.25 * 2 ** attempt * (1 + random.random()))
    raise AssertionError("unreachable")


def _create_sqlite_store(db: str) -> None:
    """Build a new SQLite store's schema in a temporary file beside ``db`` and rename it to ``db`` once
    complete; on any failure (e.g. OSError/OperationalError of a full disk) the temporary file is removed."""
    from mlflow.tracking import MlflowClient

    from harness.store.safewrite import temp_path

    tmp = str(temp_path(db))
    try:
        client = MlflowClient(f"sqlite:///{tmp}")
        client.search_experiments(max_results=1)          # the store (and its schema) is built on first use
        with contextlib.suppress(Exception):              # let go of the file before it is renamed
            client._tracking_client.store.engine.dispose()
        os.replace(tmp, db)
    finally:
        for path in (tmp, tmp + "-journal", tmp + "-wal", tmp + "-shm"):
            with contextlib.suppress(OSError):
                os.unlink(path)


def _setup_interrupted(db: str) -> bool:
    """Whether the SQLite store ``db`` is one whose first setup was cut short (built in place, before the
    store was built in a temporary file): no run in it, and alembic's temporary tables, or a schema version
    short of this MLflow's (MLflow never migrates an existing store on its own: a store of an older MLflow
    with runs is left to `mlflow db upgrade`)."""
    import sqlite3

    from mlflow.store.db.utils import _get_latest_schema_revision

    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "runs" not in tables or con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]:
                return False
            version = con.execute("SELECT version_num FROM alembic_version").fetchall() \
                if "alembic_version" in tables else []
    except sqlite3.Error:
        return False
    return any(t.startswith("_alembic_tmp_") for t in tables) or [r[0] for r in version] != [
        _get_latest_schema_revision()]


def _move_aside(db: str) -> None:
    """Keep a store whose setup was cut short as <db>.interrupted-<utc> (nothing is deleted)."""
    os.replace(db, f"{db}.interrupted-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")


def prepare_store(tracking_uri: str, experiment_name: str) -> threading.Thread:
    """Open a local SQLite store in a background thread (a new one: create its schema, seconds of
    migrations), so that it overlaps Ray's start; join the thread before opening the suite's run, which
    reports any error of the store as one line. A tracking server needs no preparation."""
    def open_quietly() -> None:
        with contextlib.suppress(Exception):
            import mlflow  # noqa: F401 — its import sets its loggers' levels: quiet them after it
            _quiet_mlflow()
            _open_store(tracking_uri, experiment_name)

    thread = threading.Thread(target=open_quietly if tracking_uri.startswith("sqlite:") else (lambda: None),
                              name="stalebench-mlflow-store", daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def _file_lock(path: Path | None) -> Iterator[None]:
    if path is None:
        yield
        return
    from harness.store.safewrite import open_append

    with open_append(path) as f:                 # never through a link planted under the lock's name
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
