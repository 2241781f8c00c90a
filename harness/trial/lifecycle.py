"""One trial, wherever it runs (in-process for `stalebench train`, in a Ray worker for suites, or across
the Ray Train workers of a multi-worker trial: run_trial_worker), and the rule that decides whether
existing results still belong to a trial.

The lifecycle is the same for every trial kind (spec/kinds.py: the LLM trainer, the estimator lab): skip a
finished trial; prepare it (built, resumed from its checkpoint); write config, params and provenance at the
start (and at a resume, from the checkpoint's step); run; write the final status.
An exception becomes a `failed` status with a one-line reason (traceback in error.log).

Config identity: a trial *is* its resolved config. Results whose config.yaml differs from the suite's
resolved config for that trial are never taken as that trial's: `check_identity` stops with the first
changed keys, or (when asked) moves the old results aside and lets the trial run again.
"""
from __future__ import annotations

import functools
import traceback
from pathlib import Path
from typing import Any, Callable

from harness.store import provenance, trialdir
from harness.registry import FORWARDS
from harness.trial import numerics
from harness.config.run import ConfigError, RunConfig
from harness.config.dicts import flatten, to_dict
from harness.config.kinds import kind_of
from harness.config.expand import Trial
from harness.store.tracking import MlflowTarget, RunLog, Target  # noqa: F401 — MlflowTarget: callers import it from here

ON_CHANGE = ("error", "rerun-changed", "force")


def check_identity(trials: list[Trial], suite_dir: Path, on_change: str = "error") -> list[str]:
    """Compare each trial's resolved config with the results already in suite_dir; returns the ids of
    the trials whose results were moved aside (to <suite>/.superseded/) and will run again.

    on_change: "error" raises ConfigError naming the first changed trial and keys; "rerun-changed"
    supersedes exactly the changed trials; "force" supersedes every trial that has results.
    """
    changed: list[tuple[Trial, list[str]]] = []
    for t in trials:
        old = trialdir.read_config(Path(suite_dir) / t.trial_id)
        if old is None:
            continue
        diff = changes(t, old)
        if diff or on_change == "force":
            changed.append((t, diff))
    if on_change == "error" and changed:
        t, diff = changed[0]
        more = f" (and {len(changed) - 1} more trials)" if len(changed) > 1 else ""
        raise ConfigError(f"trial {t.trial_id}: its config changed since its results were written "
                          f"({'; '.join(diff[:3])}{', ...' if len(diff) > 3 else ''}){more}; rerun the changed "
                          f"trials with --rerun-changed (old results are kept under .superseded/) or all with --force")
    for t, _ in changed:
        trialdir.supersede(Path(suite_dir) / t.trial_id)
    return [t.trial_id for t, _ in changed]


def changes(trial: Trial, old: dict[str, Any]) -> list[str]:
    """The keys in which the resolved config ``old`` (a config.yaml) differs from ``trial``'s, as
    "key old -> new" (trialdir.config_changes; a key at its default counts as absent)."""
    return trialdir.config_changes(old, to_dict(trial.config), _defaults())


@functools.lru_cache(maxsize=1)
def _defaults() -> dict[str, Any]:
    """Every key of a default RunConfig (built once: `changes` runs for each trial of a suite; read only)."""
    return to_dict(RunConfig(), every_key=True)


def same_as(trials: list[Trial]) -> Callable[[Path], bool]:
    """Whether results found elsewhere (another campaign's landed trial, unpacked) are one of ``trials``: the
    trial of their directory's name, with the same resolved config (check_identity's rule)."""
    by_id = {t.trial_id: t for t in trials}

    def same(trial_dir: Path) -> bool:
        old = trialdir.read_config(Path(trial_dir))
        trial = by_id.get(Path(trial_dir).name)
        return old is not None and trial is not None and not changes(trial, old)
    return same


def run_trial(trial: Trial, suite_dir: Path, mirror: Target | None = None, progress: bool = False) -> dict[str, Any]:
    """Run `trial` into suite_dir/<trial_id> and return its status record, mirrored to the sink that
    `mirror` opens (an MlflowTarget, or several targets as tracking.Mirrors; None: files only).

    A finished trial (completed or diverged) is not rerun. An error inside the trial is recorded as
    `failed` with a one-line reason and re-raised as TrialFailed, so that the runner can retry it.
    """
    trial_dir = Path(suite_dir) / trial.trial_id
    log = RunLog(trial_dir)
    previous = log.read_status()
    if previous.get("status") in trialdir.FINAL:
        return previous
    config = to_dict(trial.config)

    def record_start(resume_step: int, base: dict | None, eval_set_sha256: str | None) -> None:
        import torch
        from algorithms import describe
        on_gpu = torch.cuda.is_available() and trial.config.model.device != "cpu"     # as the trainer decides
        now = numerics.record("cuda" if on_gpu else "cpu", FORWARDS.get(trial.config.forward.name, "forward").gemm)
        record = provenance.collect(config_sha256=trialdir.config_sha256(config), base=base,
                                    eval_set_sha256=eval_set_sha256, torch_threads=torch.get_num_threads(),
                                    gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                                    numerics=numerics.resumed(trialdir.read_provenance(log.dir).get("numerics"), now,
                                                              resume_step))
        est = describe(trial.config.algorithm)          # the estimator's family, recorded for the report
        record["estimator"] = {k: est[k] for k in ("name", "trust_region", "correction", "reads", "source")}
        log.start(config, trial.params, record, resume_step=resume_step)

    try:
        if mirror is not None:
            log.sink = mirror.open(trial.trial_id, mirror_params(trial))
        run = kind_of(trial.config).prepare(trial.config, log)
        record_start(run.resume_step, run.base, run.eval_set_sha256)
        outcome = run.run(progress)
        log.status(outcome.status, step=outcome.step, error=outcome.error, diverged_step=outcome.diverged_step,
                   extra=outcome.extra)
    except Exception as exc:  # noqa: BLE001 — a failing trial is a result, not a crash of the suite
        trialdir.write_error(trial_dir, traceback.format_exc())
        message = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        log.status("failed", step=log.read_status().get("step", 0), error=message)
        raise TrialFailed(message) from exc
    finally:
        log.close()
    return log.read_status()


def mirror_params(trial: Trial) -> dict[str, Any]:
    """What a trial's mirror runs record as their params: the flat resolved config and the trial id."""
    return {**flatten(trial.config), "trial_id": trial.trial_id}


def run_trial_worker(trial: Trial, suite_dir: Path, rank: int, mirror: Target | None = None) -> None:
    """One process of a multi-worker trial (a Ray Train worker; harness/trial/world.py). Rank 0 runs the trial's
    lifecycle (run_trial: its files, status, failure record and mirror runs); the other ranks train beside it
    and write nothing but their part of each checkpoint."""
    if rank == 0:
        run_trial(trial, suite_dir, mirror)
        return
    trial_dir = Path(suite_dir) / trial.trial_id
    if trialdir.read_status(trial_dir).get("status") in trialdir.FINAL:    # rank 0 skips it too
        return
    kind_of(trial.config).prepare(trial.config, NullRunLog(trial_dir)).run()


class NullRunLog:
    """The log of a process that trains beside the one writing the trial's files (ranks > 0 of a multi-worker
    trial): it knows the trial directory (each worker writes its part of a checkpoint there), writes nothing."""

    def __init__(self, trial_dir: Path):
        self.dir = Path(trial_dir)

    def metrics(self, step: int, row: dict[str, Any]) -> None:
        pass

    def eval(self, step: int, row: dict[str, Any]) -> None:
        pass

    def side(self, name: str, step: int, row: dict[str, Any]) -> None:
        pass


class TrialFailed(RuntimeError):
    """Raised after a trial's failure was recorded, so that Ray Tune can retry it."""
