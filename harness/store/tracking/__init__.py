"""Tracking: always-on local result files for every trial, mirrored to MLflow and optionally to W&B.

Local files are the source of truth for reports; their format is owned by harness/store/trialdir.py. The
mirrors are sinks behind one interface (sinks.py), so code that logs never asks which are on:

    runlog.py        RunLog: a trial's result files, fed to its sink
    sinks.py         the Sink interface, NullSink, TeeSink (several at once), Mirrors (targets -> a sink)
    mlflow_store.py  the MLflow store: URI, reachability, the suite's parent runs, orphaned runs
    mlflow_sink.py   MlflowTarget / MlflowSink: a trial as a child run of the suite's parent run
    wandb_sink.py    WandbTarget / WandbSink: a trial as a W&B run (extra `wandb`, imported lazily)
    config.py        the suite's `tracking:` section (which mirrors besides MLflow), and the mirrors built from it

MLflow (embedded SQLite by default, a tracking server via MLFLOW_TRACKING_URI) is the default mirror;
`mlflow` and `wandb` are imported only in this package (tests/test_architecture.py).
"""
from harness.store.tracking.mirrors import TrackingConfig, check_mirrors, describe_mirrors, suite_mirrors
from harness.store.tracking.mlflow_sink import MlflowSink, MlflowTarget, find_trial_run, supersede_run
from harness.store.tracking.mlflow_store import (TrackingUnreachable, close_suite_run, default_tracking_uri, driver_tags,
                           end_orphaned_runs, end_orphaned_suite_runs, log_metrics_to_run, mlflow_name,
                           open_suite_run, prepare_store, probe_tracking_uri)
from harness.store.tracking.runlog import RunLog
from harness.store.tracking.sinks import Mirrors, NullSink, Sink, Target, TeeSink
from harness.store.tracking.wandb_sink import WandbConfig, WandbSink, WandbTarget, require_wandb

__all__ = ["Mirrors", "MlflowSink", "MlflowTarget", "NullSink", "RunLog", "Sink", "Target", "TeeSink", "TrackingConfig",
           "TrackingUnreachable", "WandbConfig", "WandbSink", "WandbTarget", "check_mirrors", "close_suite_run", "default_tracking_uri",
           "describe_mirrors", "driver_tags", "end_orphaned_runs", "end_orphaned_suite_runs", "find_trial_run", "log_metrics_to_run",
           "mlflow_name", "open_suite_run", "prepare_store", "probe_tracking_uri", "require_wandb", "suite_mirrors", "supersede_run"]
