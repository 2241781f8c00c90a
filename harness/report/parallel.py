"""Independent CPU-bound jobs of a report (reading trials, drawing figures) in forked worker processes.

A fork copies only the calling thread, so the pool is used only when this process runs no other thread;
the workers inherit the jobs (closures over the loaded data), so only their small results travel back.
Otherwise, or on one core, the jobs run one after another here. The results are the same either way
(tests/test_report_html.py compares both).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

T = TypeVar("T")
_JOBS: list[Callable[[], object]] = []   # the jobs being run, inherited by the forked workers


def _run(i: int) -> object:
    return _JOBS[i]()


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


def fork_map(jobs: list[Callable[[], T]], chunks_per_worker: int = 0) -> list[T]:
    """Each job's result, in order. Jobs are handed out one at a time (put the longest first), or in
    `chunks_per_worker` chunks per worker for many short jobs."""
    global _JOBS
    workers = min(len(jobs), _cores())
    if workers < 2 or threading.active_count() > 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [job() for job in jobs]
    chunksize = -(-len(jobs) // (workers * chunks_per_worker)) if chunks_per_worker else 1
    _JOBS = jobs
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            return list(pool.map(_run, range(len(jobs)), chunksize=chunksize))
    finally:
        _JOBS = []
