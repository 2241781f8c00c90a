"""Tasks: problem sources with rewards, behind one registry (harness/tasks/registry.py).

``make_task(name, **kwargs)`` builds a task by name: ``"addrev"`` (synthetic, see
:mod:`harness.tasks.synthetic`) or a real benchmark (see :mod:`harness.tasks.benchmarks`). lm-eval reaches
the same problems and grading through :mod:`harness.tasks.lm_eval_adapters`. Every public module of this
package is imported here, and a task module registers its tasks (``register_task``) when imported: a new
task is one module (docs/contributing.md).
"""

from __future__ import annotations

import importlib
import pkgutil

from harness.tasks.base import Problem, Task
from harness.tasks.registry import make_task, register_task, registered, task_entry, task_from_config, task_names
from harness.tasks.verify import extract_answer, grade_math

__all__ = ["Problem", "Task", "extract_answer", "grade_math", "make_task", "register_task", "registered", "task_entry",
           "task_from_config", "task_names"]

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
    importlib.import_module(f"{__name__}.{_module}")          # each task module registers its tasks
