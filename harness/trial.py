"""One trial, wherever it runs (in-process for `stalebench train`, in a Ray worker for suites).

Sets up the trial's RunLog (local files + optional MLflow mirror), skips a finished trial, resumes an
interrupted one from its checkpoint, dispatches to the LLM trainer or the estimator lab, and turns an
exception into a `failed` status with a one-line reason.
"""
from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import flatten, to_dict
from .suite import Trial
from .tracking import RunLog, read_jsonl


@dataclass(frozen=True)
class MlflowTarget:
    """Where a trial mirrors itself in MLflow (picklable, sent to Ray workers)."""
    tracking_uri: str
    experiment_id: str
    parent_run_id: str | None


def run_trial(trial: Trial, suite_dir: Path, mlflow: MlflowTarget | None = None, progress: bool = False) -> dict[str, Any]:
    """Run `trial` into suite_dir/<trial_id> and return its status record.

    A finished trial (completed or diverged) is not rerun. An error inside the trial is recorded as
    `failed` with a one-line reason (traceback in error.log) and re-raised as TrialFailed, so that the
    runner can retry transient failures.
    """
    trial_dir = Path(suite_dir) / trial.trial_id
    log = RunLog(trial_dir)
    previous = log.read_status()
    if previous and previous["status"] in ("completed", "diverged"):
        return previous
    sink = None
    try:
        if mlflow is not None:
            from .tracking import MlflowSink
            sink = MlflowSink(mlflow.tracking_uri, mlflow.experiment_id, mlflow.parent_run_id, trial.trial_id,
                              {**flatten(trial.config), "trial_id": trial.trial_id})
            log.sink = sink
        if trial.config.lab is not None:
            from .lab.dynamics import run_lab_trial
            log.start(to_dict(trial.config), trial.params)
            status = run_lab_trial(trial.config, log)
            last = read_jsonl(log.dir / "metrics.jsonl")
            step = last[-1]["step"] if last else 0
            log.status(status, step=step, diverged_step=step if status == "diverged" else None)
        else:
            from .trainer import train
            train(trial.config, log, trial.params, progress=progress)
    except Exception as exc:  # noqa: BLE001 — a failing trial is a result, not a crash of the suite
        (trial_dir / "error.log").write_text(traceback.format_exc())
        message = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        log.status("failed", step=(log.read_status() or {}).get("step", 0), error=message)
        raise TrialFailed(message) from exc
    finally:
        if sink is not None:
            log.flush()
            sink.log_artifacts(trial_dir)
    return log.read_status() or {}


class TrialFailed(RuntimeError):
    """Raised after a trial's failure was recorded, so that Ray Tune can retry it."""
