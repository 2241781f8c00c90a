"""The mirror of a trial: the interface every sink implements, the null sink, and fan-out to several.

A sink receives what RunLog writes to the trial's files, in the order it writes it:

    set_tags(tags)              provenance as flat string tags (stalebench.git_commit, ...) at every start
    log_rows([(step, row)])     per-step metrics and evaluation rows, in batches; a resume offers kept rows
                                again, and a sink skips the steps it already holds
    log_summary(step, metrics)  one-number results of a finished trial (summary/final_acc, ...)
    set_status(status, error)   the trial ended: completed | diverged | failed
    finish(trial_dir)           the process is done with the mirror: archive the record files, release it

Targets are the picklable descriptions a suite driver hands to its workers (MlflowTarget, WandbTarget,
or several as `Mirrors`); `target.open(trial_id, params)` opens a trial's sink in the worker, with the
trial's flat config as params.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence


class Sink(Protocol):
    def log_rows(self, rows: list[tuple[int, Mapping[str, float]]]) -> None: ...
    def log_summary(self, step: int, metrics: Mapping[str, float]) -> None: ...
    def set_tags(self, tags: Mapping[str, str]) -> None: ...
    def set_status(self, status: str, error: str | None) -> None: ...
    def finish(self, trial_dir: Path) -> None: ...


class Target(Protocol):
    def open(self, trial_id: str, params: Mapping[str, Any]) -> Sink: ...


class NullSink:
    """The mirror of a trial when there is none: code that logs never asks whether logging is on."""

    def log_rows(self, rows: list[tuple[int, Mapping[str, float]]]) -> None:
        pass

    def log_summary(self, step: int, metrics: Mapping[str, float]) -> None:
        pass

    def set_tags(self, tags: Mapping[str, str]) -> None:
        pass

    def set_status(self, status: str, error: str | None) -> None:
        pass

    def finish(self, trial_dir: Path) -> None:
        pass


class TeeSink:
    """Every call to each of `sinks`, in order (MLflow and W&B side by side)."""

    def __init__(self, sinks: Sequence[Sink]):
        self.sinks = list(sinks)

    def log_rows(self, rows: list[tuple[int, Mapping[str, float]]]) -> None:
        for s in self.sinks:
            s.log_rows(rows)

    def log_summary(self, step: int, metrics: Mapping[str, float]) -> None:
        for s in self.sinks:
            s.log_summary(step, metrics)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        for s in self.sinks:
            s.set_tags(tags)

    def set_status(self, status: str, error: str | None) -> None:
        for s in self.sinks:
            s.set_status(status, error)

    def finish(self, trial_dir: Path) -> None:
        for s in self.sinks:
            s.finish(trial_dir)


@dataclass(frozen=True)
class Mirrors:
    """Several targets as one: `open` gives a TeeSink over their sinks (a NullSink when there are none)."""
    targets: tuple[Any, ...] = ()

    def open(self, trial_id: str, params: Mapping[str, Any]) -> Sink:
        sinks = [t.open(trial_id, params) for t in self.targets]
        return sinks[0] if len(sinks) == 1 else TeeSink(sinks) if sinks else NullSink()
