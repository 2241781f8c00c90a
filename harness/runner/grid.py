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
A suite with a `lab:` base config also gets its fixed-policy sweeps computed and stored after its trials
(results/<suite>/lab/sweeps.json; a rerun with nothing to do computes only missing ones), so that the
report only reads.
"""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import yaml

from .. import coincidences
from ..config import ConfigError
from ..status import ProgressLine, count_statuses, read_status
from ..suite import Suite, Trial, expand, select_trials
from ..tracking import (Mirrors, TrackingUnreachable, WandbTarget, close_suite_run, default_tracking_uri, prepare_store,
                        end_orphaned_suite_runs, open_suite_run, probe_tracking_uri, require_wandb, supersede_run)
from ..trial import MlflowTarget, check_identity
from ..trialdir import ENDED, FINAL, SUPERSEDED, suite_results_dir
from .console import ProgressThread, Say, printer
from .ray_tune import check_fits, fit, ray_session

def run_suite(suite: Suite, *, results_root: Path = Path("results"), address: str | None = None,
              progress: bool = True, on_change: str = "error", only: list[str] = ()) -> dict[str, int]:
    """Run every trial of `suite` not yet completed or diverged; returns {status: number of trials}.

    Existing results whose resolved config differs from the suite's are never taken as finished
    (trial.check_identity; `on_change` says what to do). Raises KeyboardInterrupt when interrupted
    (Ctrl+C) after Tune stopped the trials; running the same suite again resumes them."""
    suite_dir = suite_results_dir(results_root, suite.name)
    trials = select_trials(expand(suite), only)
    ids = [t.trial_id for t in trials]
    say = printer(progress)
    verify_bases(trials)                              # before anything is written
    check_mirrors(suite)
    superseded = check_identity(trials, suite_dir, on_change)
    write_suite_file(suite, suite_dir, say)
    coincidences.write(suite_dir, coincidences.compute(expand(suite)))   # read by the report (one owner)
    pending = [t for t in trials if read_status(suite_dir / t.trial_id).get("status") not in FINAL]
    say(f"suite {suite.name}: {len(trials)} trials, {len(trials) - len(pending)} already finished, "
        f"{len(pending)} to run -> {suite_dir}" + (f" ({len(superseded)} rerun after a config change; old "
                                                    f"results in {suite_dir / SUPERSEDED})" if superseded else ""))
    if not pending:
        with contextlib.suppress(Exception):          # tidy up after a driver killed after its last trial
            end_orphaned_suite_runs(tracking_uri(Path(results_root)), suite.name)
        store_lab_sweeps(suite, suite_dir, say)
        return count_statuses(suite_dir, ids)
    uri = tracking_uri(Path(results_root))            # before Ray starts: a dead server fails in seconds
    store = prepare_store(uri, suite.name)            # a new SQLite store's migrations overlap Ray's start
    with ray_session(address, say):
        check_fits(suite.resources, max(t.config.train.workers for t in pending))   # before anything is touched
        store.join()
        target = open_mlflow(suite, uri, Path(results_root), "suite", len(pending))
        for tid in superseded:
            supersede_run(target.tracking_uri, target.experiment_id, tid)
        interrupted = True
        try:
            steps = {t.trial_id: t.config.train.steps for t in trials}
            with ProgressThread(ProgressLine(suite_dir, steps), progress):
                fit(suite, pending, suite_dir, mirrors(suite, target, Path(results_root)), say)
            interrupted = any(read_status(suite_dir / t.trial_id).get("status") not in ENDED
                              for t in pending)
        finally:
            counts = count_statuses(suite_dir, ids)
            close_suite_run(target.tracking_uri, target.parent_run_id, counts, interrupted)
    if interrupted:           # Ctrl+C: Tune stops the trials and returns; the caller sees the interrupt
        raise KeyboardInterrupt(f"{counts.get('running', 0)} trial(s) did not finish")
    store_lab_sweeps(suite, suite_dir, say)           # after Ray: the sweeps get the machine to themselves
    return counts


def store_lab_sweeps(suite: Suite, suite_dir: Path, say: Say) -> None:
    """The fixed-policy sweeps of a lab suite, computed once per config (harness/lab/sweeps.store_sweeps).
    A failure is one line, not a failed run: the trials' results stand, and the report says what is missing."""
    if suite.base.get("lab") is None:
        return
    from ..lab.sweeps import store_sweeps               # torch: only for lab suites

    try:
        line = store_sweeps(suite_dir)
    except Exception as exc:  # noqa: BLE001 — reported in one line; running the suite again retries
        line = f"lab: the fixed-policy sweeps failed ({type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''})"
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


def check_mirrors(suite: Suite) -> None:
    """Stop with one line when a mirror the suite asks for cannot work here (before Ray starts)."""
    if suite.tracking.wandb is not None:
        require_wandb(suite.tracking.wandb)


def mirrors(suite: Suite, target: MlflowTarget, results_root: Path) -> Mirrors:
    """Where the suite's trials mirror themselves: their MLflow child runs, and W&B runs when the suite's
    `tracking.wandb` asks for them (offline runs under <results>/wandb/)."""
    wandb = suite.tracking.wandb
    return Mirrors((target, *([WandbTarget.of(wandb, suite.name, results_root)] if wandb is not None else [])))


def write_suite_file(suite: Suite, suite_dir: Path, say: Say) -> None:
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


def verify_bases(trials: list[Trial]) -> None:
    """Check each distinct starting checkpoint once, in the driver (a frozen base's files against its
    manifest): a damaged or replaced base stops the run with one line before any trial starts."""
    from ..base_models import base_identity

    seen = set()
    for t in trials:
        model = t.config.model
        key = (model.kind, model.base, model.path)
        if t.config.lab is None and key not in seen:
            seen.add(key)
            base_identity(model)


def open_mlflow(suite: Suite, uri: str, results_root: Path, role: str, pending: int) -> MlflowTarget:
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
