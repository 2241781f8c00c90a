"""A trial's MLflow mirror: one child run under the suite's parent run, found again by its trial id.

`MlflowTarget` (picklable) names the store, experiment and parent run; a worker opens the trial's
`MlflowSink` from it. A trial rerun after a config change supersedes its old run (never deleted).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from harness.store import trialdir
from harness.store.tracking.mlflow_store import _quiet_mlflow, mlflow_name


@dataclass(frozen=True)
class MlflowTarget:
    """Where a trial mirrors itself in MLflow (picklable, sent to Ray workers)."""
    tracking_uri: str
    experiment_id: str
    parent_run_id: str | None

    def open(self, trial_id: str, params: Mapping[str, Any]) -> "MlflowSink":
        return MlflowSink(self.tracking_uri, self.experiment_id, self.parent_run_id, trial_id, params)


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

    def log_summary(self, step: int, metrics: Mapping[str, float]) -> None:
        """Run metrics at the trial's last step (sortable columns in MLflow's runs table)."""
        self.log_rows([(step, metrics)])

    def set_tags(self, tags: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag
        self.client.log_batch(self.run_id, tags=[RunTag(k, v[:5000]) for k, v in tags.items()])

    def set_status(self, status: str, error: str | None) -> None:
        self.client.set_tag(self.run_id, "stalebench.status", status)
        if error:
            self.client.set_tag(self.run_id, "stalebench.error", error[:5000])
        self.client.set_terminated(self.run_id, "FINISHED" if status in trialdir.FINAL else "FAILED")

    def finish(self, trial_dir: Path) -> None:
        """The trial's record files as the run's artifacts (the run itself was ended by set_status)."""
        for name in trialdir.RECORD:
            if (trial_dir / name).exists():
                self.client.log_artifact(self.run_id, str(trial_dir / name))


