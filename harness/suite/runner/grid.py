"""`stalebench run`: every trial of a suite as one Ray Tune trial, results in results/<suite>/, MLflow.

Resume (kill the driver at any moment, even with SIGKILL, and run the same command again):
- the local result files are the truth: a trial whose status.json says completed or diverged is not
  scheduled again; every other one is, and `run_trial` resumes it from its checkpoint.pt (or restarts it);
- each invocation is a fresh Tune experiment (results/<suite>/ray/<suite>-<time>) over the pending trials
  on a fresh local Ray (unless an address is given), so nothing of a killed driver's Ray is reused;
- a trial's MLflow child run is found again by its `trial_id` tag; the rows kept locally are offered to
  it again and steps it already holds are skipped (tracking.RunLog.start, MlflowSink), so MLflow ends up
  with every step exactly once.
Results whose resolved config differs from the suite's are never taken as finished (trial.check_identity).
After its trials, each trial kind of the suite takes its after-suite step (kinds.py): a lab suite gets
its fixed-policy sweeps computed and stored (results/<suite>/lab/sweeps.json; a rerun with nothing to do
computes only missing ones), so that the report only reads.
"""
from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Iterator

from harness.suite import coincidences
from harness.config.run import ConfigError
from harness.config.kinds import suite_kinds
from harness.store.campaign import campaign_dir
from harness.suite.session import SuiteSession, check_tuned
from harness.suite.plan import projected_seconds
from harness.suite.status import ProgressLine, count_statuses
from harness.config.expand import Suite, Trial, expand, select_trials
from harness.store.tracking import (Mirrors, TrackingUnreachable, close_suite_run, default_tracking_uri, end_orphaned_suite_runs,
                        open_suite_run, prepare_store, probe_tracking_uri, suite_mirrors, supersede_run)
from harness.trial.lifecycle import MlflowTarget
from harness.store.trialdir import ENDED, SUITE_FILE, SUPERSEDED, read_status
from harness.suite.console import ProgressThread, Say, printer
from harness.suite.runner.ray_tune import check_fits, fit, ray_session

def run_suite(suite: Suite, *, results_root: Path = Path("results"), address: str | None = None,
              progress: bool = True, on_change: str = "error", only: list[str] = (),
              trials: list[Trial] | None = None) -> dict[str, int]:
    """Run every trial of `suite` not yet completed or diverged; returns {status: number of trials}.

    `trials`: the suite's trials as load_suite_file's caller expanded them (None: expanded here).
    The preflight is the suite session's (session.py: nothing is written before the bases and mirrors
    are checked); existing results whose resolved config differs from the suite's are never taken as
    finished (`on_change` says what to do). Raises KeyboardInterrupt when interrupted (Ctrl+C) after
    Tune stopped the trials; running the same suite again resumes them."""
    every = expand(suite) if trials is None else trials
    trials = select_trials(every, only)
    say = printer(progress)
    check_tuned(suite)
    session = SuiteSession.open(suite, trials, Path(results_root), on_change)
    suite_dir, superseded, ids = session.suite_dir, session.superseded, [t.trial_id for t in trials]
    coincidences.write(suite_dir, coincidences.compute(every))      # read by the report (its one owner)
    pending = session.pending()
    say(f"suite {suite.name}: {len(trials)} trials, {len(trials) - len(pending)} already finished, "
        f"{len(pending)} to run -> {suite_dir}" + (f" ({len(superseded)} rerun after a config change; old "
                                                    f"results in {suite_dir / SUPERSEDED})" if superseded else ""))
    if not pending:
        with contextlib.suppress(Exception):          # tidy up after a driver killed after its last trial
            end_orphaned_suite_runs(tracking_uri(Path(results_root)), suite.name)
        after_suite(trials, suite_dir, say)
        return count_statuses(suite_dir, ids)
    uri = tracking_uri(Path(results_root))            # before Ray starts: a dead server fails in seconds
    store = prepare_store(uri, suite.name)            # a new SQLite store's migrations overlap Ray's start
    with _joined(store), ray_session(address, say):   # a refusal below leaves no thread importing mlflow behind
        check_fits(suite.resources, max(t.config.train.workers for t in pending))   # before anything is touched
        store.join()
        target = open_mlflow(suite, uri, Path(results_root), "suite", len(pending))
        for tid in superseded:
            supersede_run(target.tracking_uri, target.experiment_id, tid)
        interrupted = True
        try:
            steps = {t.trial_id: t.config.train.steps for t in trials}
            projected = projected_seconds(suite, trials, pending, suite_dir)
            with ProgressThread(ProgressLine(suite_dir, steps, projected), progress):
                fit(suite, pending, suite_dir, mirrors(suite, target, Path(results_root)), say,
                    land_to=campaign_dir(suite.name) if suite.campaign else None)
            interrupted = any(read_status(suite_dir / t.trial_id).get("status") not in ENDED
                              for t in pending)
        finally:
            counts = count_statuses(suite_dir, ids)
            close_suite_run(target.tracking_uri, target.parent_run_id, counts, interrupted)
    if interrupted:           # Ctrl+C: Tune stops the trials and returns; the caller sees the interrupt
        raise KeyboardInterrupt(f"{counts.get('running', 0)} trial(s) did not finish")
    after_suite(trials, suite_dir, say)               # after Ray: e.g. the lab's sweeps get the machine to themselves
    return counts


def after_suite(trials: list[Trial], suite_dir: Path, say: Say) -> None:
    """Each trial kind's step after the suite's trials (kinds.py; the lab's fixed-policy sweeps)."""
    for kind in suite_kinds([t.config for t in trials]):
        line = kind.after_suite(suite_dir)
        if line:
            say(line)


def tracking_uri(results_root: Path) -> str:
    """The MLflow store, probed when it is a server (a dead one makes MLflow retry for minutes)."""
    uri = default_tracking_uri(results_root)
    try:
        probe_tracking_uri(uri)
    except TrackingUnreachable as exc:
        raise ConfigError(str(exc)) from None
    return uri


def mirrors(suite: Suite, target: MlflowTarget, results_root: Path) -> Mirrors:
    """Where the suite's trials mirror themselves: their MLflow child runs, and the mirrors of the suite's
    `tracking:` section (tracking.suite_mirrors)."""
    return suite_mirrors(suite.tracking, target, suite.name, results_root)


def open_mlflow(suite: Suite, uri: str, results_root: Path, role: str, pending: int) -> MlflowTarget:
    """The suite's MLflow experiment (named after the suite) and a new parent run for this invocation."""
    local = uri.startswith(("sqlite:", "file:")) or "://" not in uri
    artifacts = (results_root / "mlartifacts" / suite.name).resolve().as_uri() if local else None
    tags = {"stalebench.role": role, "stalebench.suite": suite.name, "stalebench.suite_sha256": suite.sha256,
            "stalebench.pending_trials": str(pending)}          # + the driver's host, pid (open_suite_run)
    suite_file = results_root.resolve() / suite.name / SUITE_FILE
    try:
        experiment_id, run_id = open_suite_run(uri, suite.name, f"{role}-{time.strftime('%Y%m%d-%H%M%S')}", tags,
                                               artifact_location=artifacts, artifacts=(suite_file,))
    except Exception as exc:  # noqa: BLE001 — an unreachable or misconfigured store: one line, not a traceback
        raise ConfigError(f"MLflow tracking store {uri} (MLFLOW_TRACKING_URI): {type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''}"[:500]) from None
    return MlflowTarget(uri, experiment_id, run_id)


@contextlib.contextmanager
def _joined(thread: threading.Thread) -> Iterator[None]:
    """Join ``thread`` when the block ends, however it ends: the store's thread imports mlflow, and a later
    import of mlflow in this process while that one runs can see a half-imported module."""
    try:
        yield
    finally:
        thread.join()
