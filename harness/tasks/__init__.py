"""Tasks: problem sources with rewards, behind one registry.

``make_task(name, **kwargs)`` builds a task by name: ``"addrev"`` (synthetic, see
:mod:`harness.tasks.synthetic`), ``"cumsum"`` (synthetic, benchmark v2: :mod:`harness.tasks.cumsum`) or a real benchmark (see :mod:`harness.tasks.benchmarks`). lm-eval reaches
the same problems and grading through :mod:`harness.tasks.lm_eval_adapters`.
"""

from __future__ import annotations

from typing import Any, Callable

from harness.tasks.base import Problem, Task
from harness.tasks.benchmarks import BENCHMARK_NAMES, BenchmarkTask
from harness.tasks.cumsum import cumsum_task
from harness.tasks.synthetic import addrev_task
from harness.tasks.verify import extract_answer, grade_math

__all__ = ["Problem", "Task", "extract_answer", "grade_math", "make_task", "task_from_config", "task_names"]


def _benchmark_constructor(name: str) -> Callable[..., Task]:
    return lambda **kwargs: BenchmarkTask(name, **kwargs)


_REGISTRY: dict[str, Callable[..., Task]] = {
    "addrev": addrev_task,
    "cumsum": cumsum_task,                      # benchmark v2 (harness/tasks/cumsum.py)
    **{name: _benchmark_constructor(name) for name in BENCHMARK_NAMES},
}


def task_names() -> list[str]:
    """Registered task names, sorted."""
    return sorted(_REGISTRY)


def make_task(name: str, **kwargs: Any) -> Task:
    """Build the task ``name`` with constructor ``kwargs`` (addrev, cumsum: ``eval_size``; benchmarks:
    ``data_dir``, ``verify_timeout_s``)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown task {name!r}; valid: {', '.join(task_names())}")
    return _REGISTRY[name](**kwargs)


def task_from_config(name: str, eval_size: int, data_dir: str | None) -> Task:
    """The task of a run config: each task takes the settings that apply to it."""
    return make_task(name, eval_size=eval_size) if name in ("addrev", "cumsum") else make_task(name, data_dir=data_dir)
