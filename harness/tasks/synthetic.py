"""``addrev``: 3-digit addition with the 4-digit sum written reversed (a CPU-sized task).

Prompt ``"042+913="``; answer: the sum zero-padded to 4 digits, reversed
(042 + 913 = 955 -> ``"0955"`` -> ``"5590"``). Reversing puts the least significant digit first, so a
small left-to-right model can produce each digit from the operands and the carry so far.

The problem space is all 10^6 ordered pairs, indexed ``a * 1000 + b``. The eval split is a fixed set
of ``eval_size`` pairs drawn by ``numpy.random.default_rng(EVAL_RNG_SEED)`` (independent of the run
seed); the train split is drawn without replacement from the remaining pairs with the run seed, so
train and eval are disjoint for every seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harness.tasks.base import Problem
from harness.tasks.registry import register_task

ADDREV_VOCAB: list[str] = list("0123456789+=")
EVAL_RNG_SEED = 12345
DEFAULT_TRAIN_SIZE = 100_000
_NUM_PAIRS = 1000 * 1000


def addrev_prompt(a: int, b: int) -> str:
    """``"abc+def="`` with both operands zero-padded to 3 digits."""
    return f"{a:03d}+{b:03d}="


def addrev_answer(a: int, b: int) -> str:
    """The sum zero-padded to 4 digits, reversed: ``addrev_answer(42, 913) == "5590"``."""
    return f"{a + b:04d}"[::-1]


def _problem(index: int) -> Problem:
    a, b = divmod(int(index), 1000)
    return Problem(prompt=addrev_prompt(a, b), answer=addrev_answer(a, b), uid=f"addrev-{index:06d}")


@dataclass(frozen=True)
class AddRevTask:
    """The addrev task; ``eval_size`` fixes the held-out set that train sampling excludes."""

    eval_size: int = 500
    name: str = field(default="addrev", init=False)

    def __post_init__(self) -> None:
        if not 0 < self.eval_size < _NUM_PAIRS:
            raise ValueError(f"eval_size must be in (0, {_NUM_PAIRS}), got {self.eval_size}")

    @property
    def max_train_size(self) -> int:
        """The train pool: every pair outside the eval set."""
        return _NUM_PAIRS - self.eval_size

    def _eval_indices(self) -> np.ndarray:
        rng = np.random.default_rng(EVAL_RNG_SEED)
        return rng.choice(_NUM_PAIRS, size=self.eval_size, replace=False)

    def problems(self, split: str, size: int | None, seed: int) -> list[Problem]:
        """``eval``: the first ``size`` (default all ``eval_size``) fixed eval pairs; ``seed`` unused.
        ``train``: ``size`` (default ``DEFAULT_TRAIN_SIZE``) distinct non-eval pairs drawn with ``seed``."""
        eval_indices = self._eval_indices()
        if split == "eval":
            size = self.eval_size if size is None else size
            if not 0 <= size <= self.eval_size:
                raise ValueError(f"eval size must be in [0, {self.eval_size}], got {size}")
            return [_problem(i) for i in eval_indices[:size]]
        if split == "train":
            size = DEFAULT_TRAIN_SIZE if size is None else size
            is_train = np.ones(_NUM_PAIRS, dtype=bool)
            is_train[eval_indices] = False
            pool = np.flatnonzero(is_train)
            if not 0 <= size <= len(pool):
                raise ValueError(f"train size must be in [0, {len(pool)}], got {size}")
            rng = np.random.default_rng(seed)
            return [_problem(i) for i in rng.choice(pool, size=size, replace=False)]
        raise ValueError(f"unknown split {split!r}; valid: 'train', 'eval'")

    def reward(self, completion: str, problem: Problem) -> float:
        """1.0 iff ``completion`` (whitespace-stripped) is exactly the answer, else 0.0."""
        return 1.0 if completion.strip() == problem.answer else 0.0


def addrev_task(eval_size: int = 500) -> AddRevTask:
    """The addrev task with a held-out eval set of ``eval_size`` pairs."""
    return AddRevTask(eval_size=eval_size)


register_task("addrev", addrev_task, settings=("eval_size",), synthetic=True, vocab=ADDREV_VOCAB)
