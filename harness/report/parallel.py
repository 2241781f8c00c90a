"""Independent CPU-bound jobs of a report (reading trials, drawing figures) in forked worker processes.

A fork copies only the calling thread, so the pool is used only when this process runs no other Python
thread and has never loaded Ray: Ray's core library (_raylet.so) keeps native threads and locks that a
forked child inherits half-held, and a child that touches them dies with a segfault. A process that ran
a suite therefore draws in order here (and `run --report` renders the report in a fresh process).
The workers inherit the jobs (closures over the loaded data), so only their small results travel back.
Otherwise, or on one core, the jobs run one after another here. The results are the same either way
(tests/test_report_html.py compares both).

``fork_map(..., isolate=True)`` keeps one job's failure from losing the others: a job that raises, or
whose worker process dies, comes back as a :class:`Failed` naming why, and the rest are still returned.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
_JOBS: list[Callable[[], object]] = []   # the jobs being run, inherited by the forked workers


@dataclass(frozen=True)
class Failed:
    """A job that raised or whose worker process died (``isolate=True``); ``reason`` is one line."""
    reason: str


def _run(i: int) -> object:
    return _JOBS[i]()


def _run_caught(i: int) -> object:
    try:
        return _JOBS[i]()
    except Exception as exc:  # noqa: BLE001  # one job's failure must not lose the others
        return Failed(_one_line(exc))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


def can_fork() -> bool:
    """Whether forking workers is safe here: no other Python thread, and Ray never loaded (see above)."""
    return (threading.active_count() == 1 and "ray" not in sys.modules
            and "fork" in multiprocessing.get_all_start_methods())


def fork_map(jobs: list[Callable[[], T]], chunks_per_worker: int = 0, isolate: bool = False) -> list[T | Failed]:
    """Each job's result, in order. Jobs are handed out one at a time (put the longest first), or in
    `chunks_per_worker` chunks per worker for many short jobs. With `isolate`, a job that raises or whose
    worker dies gives a :class:`Failed` in its place; without, the first error is raised."""
    global _JOBS
    workers = min(len(jobs), _cores())
    if workers < 2 or not can_fork():
        return [_run_here(job, isolate) for job in jobs]
    chunksize = -(-len(jobs) // (workers * chunks_per_worker)) if chunks_per_worker else 1
    _JOBS = jobs
    try:
        if not isolate:
            with _pool(workers) as pool:
                return list(pool.map(_run, range(len(jobs)), chunksize=chunksize))
        with _pool(workers) as pool:
            futures = [pool.submit(_run_caught, i) for i in range(len(jobs))]
            results = [_result(f) for f in futures]
        for i, res in enumerate(results):      # a dead worker takes every unfinished job with it: retry each
            if res is _DIED:                   # alone, so the one that kills its worker again is named
                with _pool(1) as pool:
                    results[i] = _result(pool.submit(_run_caught, i))
                if results[i] is _DIED:
                    results[i] = Failed("its worker process died (a crash in native code, e.g. a segfault)")
        return results
    finally:
        _JOBS = []


_DIED = Failed("worker died")


def _pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))


def _result(future) -> object:
    try:
        return future.result()
    except BrokenProcessPool:
        return _DIED


def _run_here(job: Callable[[], T], isolate: bool) -> T | Failed:
    if not isolate:
        return job()
    try:
        return job()
    except Exception as exc:  # noqa: BLE001
        return Failed(_one_line(exc))
