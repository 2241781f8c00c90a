"""A multi-worker trial (`train.workers` N > 1) as a Ray Train run inside its Ray Tune trial.

The Tune trial only drives it: it holds the trial directory's lock (ray_tune.run_in_worker), starts a
TorchTrainer of N workers (gloo on CPUs, NCCL when the workers have GPUs; each reserves resources.cpu
CPUs and resources.gpu GPUs), waits, and reports the trial's final status like a one-process trial.
Worker rank r runs trial.run_trial_worker: shard r of every batch (harness/trial/world.py); rank 0 writes the
trial's files, status and mirror runs (MLflow, W&B). Retries stay Tune's (resources.max_failures);
Train retries nothing.

Resources: Ray Train V2 reserves its workers in a placement group of its own, which the Tune trial cannot
share. So the Tune trial of a multi-worker trial reserves one byte of memory (Tune refuses an empty
request, and any CPU fraction would keep the last worker off a full node), and the runner caps the trials
at once so that their workers fit the cluster (`concurrent_trials`); `check_fits` refuses, in one line, a
trial whose N workers fit nowhere. The pattern is Ray's own: docs.ray.io, Train "Hyperparameter Tuning
with Ray Tune" (a Tune function launching a TorchTrainer; max_concurrent_trials from the limiting resource).
"""
from __future__ import annotations

import functools
import math
import os
import time
from pathlib import Path
from typing import Any, Callable

import ray
import ray.train
from ray import tune

from harness.config.run import ConfigError
from harness.config.expand import Resources, Trial
from harness.store.tracking import Target
from harness.trial.lifecycle import TrialFailed, run_trial_worker
from harness.store.trialdir import FINAL, read_status

DRIVER_REQUEST = {"memory": 1}        # what the Tune trial of a multi-worker trial reserves (see above)


def alive_nodes() -> list[dict[str, float]]:
    return [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]


def worker_slots(res: Resources, nodes: list[dict[str, float]]) -> int:
    """How many workers of resources.cpu CPUs and resources.gpu GPUs the nodes hold together."""
    def fit(have: float, need: float) -> float:
        return math.floor(have / need + 1e-9) if need > 0 else math.inf
    return int(sum(min(fit(n.get("CPU", 0), res.cpu), fit(n.get("GPU", 0), res.gpu)) for n in nodes))


def check_workers_fit(res: Resources, workers: int, nodes: list[dict[str, float]]) -> None:
    slots = worker_slots(res, nodes)
    if slots < workers:
        raise ConfigError(f"resources: a trial of train.workers {workers} needs {workers} workers of cpu={res.cpu:g}, "
                          f"gpu={res.gpu:g} each, but the Ray cluster has room for {slots} ({len(nodes)} node(s)); "
                          f"lower train.workers or resources.cpu/gpu, or run on a cluster that has them")


def concurrent_trials(res: Resources, workers: int, nodes: list[dict[str, float]]) -> int | None:
    """Trials at once: resources.max_concurrent (None: as many as Tune fits), and with trials of up to N > 1
    workers no more than the cluster's worker slots hold (Tune cannot see Train's reservations)."""
    if workers == 1:
        return res.max_concurrent
    fits = max(1, worker_slots(res, nodes) // workers)
    return min(res.max_concurrent or fits, fits)


def trial_resources(res: Resources, trials: list[Trial]) -> dict[str, float] | Callable[[dict], Any]:
    """What Tune reserves for each trial: its process (resources.cpu/gpu; one worker), or for a multi-worker
    trial only its driver (DRIVER_REQUEST). A grid mixing both gets a request per trial id."""
    workers = {t.trial_id: t.config.train.workers for t in trials}
    kinds = {n == 1 for n in workers.values()}
    if len(kinds) == 1:
        return _request(res, next(iter(workers.values())))
    return functools.partial(_request_of_trial, res, workers)


def _request(res: Resources, workers: int) -> dict[str, float]:
    return {"cpu": res.cpu, "gpu": res.gpu} if workers == 1 else dict(DRIVER_REQUEST)


def _request_of_trial(res: Resources, workers: dict[str, int], config: dict) -> tune.PlacementGroupFactory:
    request = _request(res, workers[config["trial_id"]])        # zero amounts are dropped from the bundle
    return tune.PlacementGroupFactory([{"CPU": request.get("cpu", 0), "GPU": request.get("gpu", 0),
                                        "memory": request.get("memory", 0)}])


def run_workers(trial: Trial, suite_dir: Path, mirror: Target | None, cwd: str, res: Resources,
                storage: str) -> dict[str, Any]:
    """Run `trial` on train.workers Ray Train workers; returns its status record. A failure is raised as
    TrialFailed with one line: rank 0's recorded reason, else the first failing worker's error."""
    from ray.train.torch import TorchTrainer

    trial_dir = suite_dir / trial.trial_id
    if read_status(trial_dir).get("status") in FINAL:
        return read_status(trial_dir)
    per_worker = {"CPU": res.cpu, **({"GPU": res.gpu} if res.gpu else {})}
    trainer = TorchTrainer(
        _worker, train_loop_config={"trial": trial, "suite_dir": str(suite_dir), "mirror": mirror, "cwd": cwd},
        scaling_config=ray.train.ScalingConfig(num_workers=trial.config.train.workers, use_gpu=res.gpu > 0,
                                               resources_per_worker=per_worker),
        run_config=ray.train.RunConfig(name=f"{trial.trial_id}-train-{time.strftime('%Y%m%d-%H%M%S')}",
                                       storage_path=storage, failure_config=ray.train.FailureConfig(max_failures=0)))
    try:
        trainer.fit()
    except Exception as exc:  # noqa: BLE001 — Train's errors carry every worker's traceback: one line of it
        record = read_status(trial_dir)
        if record.get("status") == "failed" and record.get("error"):
            raise TrialFailed(record["error"]) from None
        raise TrialFailed(_reason(exc)) from None
    return read_status(trial_dir)


def _reason(exc: Exception) -> str:
    failures = getattr(exc, "worker_failures", None) or {}
    if failures:
        rank = min(failures)
        error = getattr(failures[rank], "_base_exc", failures[rank])    # Ray wraps it with its traceback text
        return f"worker {rank}: {type(error).__name__}: {error}".splitlines()[0][:500]
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:500]


def _worker(config: dict) -> None:
    """In a Ray Train worker: this rank's part of the trial (trial.run_trial_worker)."""
    if os.path.isdir(config["cwd"]):         # relative paths in a config mean what they meant to the driver
        os.chdir(config["cwd"])
    import torch

    trial: Trial = config["trial"]                  # torch threads: the trial kind's run sets them
    if torch.cuda.is_available():            # GPU workers: the device Ray Train assigned (untested on CPU-only CI)
        from ray.train.torch import get_device
        torch.cuda.set_device(get_device())
    run_trial_worker(trial, Path(config["suite_dir"]), ray.train.get_context().get_world_rank(), config["mirror"])
