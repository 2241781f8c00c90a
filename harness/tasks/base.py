"""The task interface: a task hands out problems and scores completions.

A task knows nothing about models or tokenizers: ``Problem.prompt`` is the exact text fed to the
model, and ``Task.reward`` receives the generated text after the prompt, with end/pad markers
already stripped by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Problem:
    """One prompt with its gold answer.

    Attributes:
        prompt: text fed to the model, already formatted.
        answer: gold answer string.
        uid: stable id across runs, e.g. ``"addrev-042913"`` or ``"gsm8k-17"``.
    """

    prompt: str
    answer: str
    uid: str


@runtime_checkable
class Task(Protocol):
    """A source of problems with a reward in [0, 1]. A task whose train pool is bounded states the bound as a
    ``max_train_size`` attribute, which the run config checks (config/run.py TaskConfig.check_train_size)."""

    name: str

    def problems(self, split: str, size: int | None, seed: int) -> list[Problem]:
        """Problems of ``split`` ("train", "eval", or "validation" where the task has one: a ``splits``
        attribute naming it); ``size`` None means the task's default."""
        ...

    def reward(self, completion: str, problem: Problem) -> float:
        """Score in [0, 1] of ``completion`` for ``problem``; never raises."""
        ...
