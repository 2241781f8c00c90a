"""Tasks in the house's registry (harness/registry.py TASKS): each task module registers its tasks when it is
imported (harness/tasks/__init__.py imports every public module of the package), so a new task is its
module (plus, to evaluate it with lm-eval, its task YAML in lm_eval_tasks/).

    register_task("addrev", addrev_task, settings=("eval_size",), synthetic=True, vocab=ADDREV_VOCAB)

`settings` names the run-config task settings (`task.eval_size`, `task.data_dir`) its constructor takes;
a `synthetic` task generates its problems (lm-eval gets its eval split written per run, and a tiny base
can be built for it from its `vocab`, the characters of its prompts and answers).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from harness.registry import TASKS
from harness.tasks.base import Task

SETTINGS = ("eval_size", "data_dir", "validation_size")      # the run config's task settings a constructor may take


@dataclass(frozen=True)
class TaskEntry:
    name: str
    make: Callable[..., Task]
    settings: tuple[str, ...] = ()
    synthetic: bool = False
    vocab: tuple[str, ...] | None = None   # a synthetic task's characters (char tokenizer of its tiny bases)


def register_task(name: str, make: Callable[..., Task], *, settings: tuple[str, ...] = (), synthetic: bool = False,
                  vocab: list[str] | tuple[str, ...] | None = None) -> None:
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise ValueError(f"task {name!r}: unknown setting {unknown[0]!r}; valid: {', '.join(SETTINGS)}")
    TASKS.register(name)(TaskEntry(name, make, tuple(settings), synthetic, tuple(vocab) if vocab is not None else None))


def task_entry(name: str) -> TaskEntry:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid: {', '.join(task_names())}")
    return TASKS.get(name)


def task_names() -> list[str]:
    """Registered task names, sorted."""
    return sorted(TASKS.names())


def registered() -> list[TaskEntry]:
    """Every registered task, in registration order."""
    return [entry for _, entry in TASKS]


def make_task(name: str, **kwargs: Any) -> Task:
    """Build the task ``name`` with constructor ``kwargs`` (addrev: ``eval_size``; benchmarks:
    ``data_dir``, ``verify_timeout_s``)."""
    return task_entry(name).make(**kwargs)


def task_from_config(name: str, eval_size: int, data_dir: str | None, validation_size: int = 0) -> Task:
    """The task of a run config: each task takes the settings it registered."""
    values = {"eval_size": eval_size, "data_dir": data_dir, "validation_size": validation_size}
    entry = task_entry(name)
    return entry.make(**{k: values[k] for k in entry.settings})
