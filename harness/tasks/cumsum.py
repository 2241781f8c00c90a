"""``cumsum``: running digit sums mod 10, written out step by step (the benchmark v2 task, CPU-sized).

Prompt: a register of ``SLOTS`` = 20 slots holding n digits (n from 5 to 20) and ``_`` for the empty
slots, then ``=``: ``"37195_______________="``. Answer: every running sum mod 10, one digit per prompt
digit: s_1 = d_1, s_i = (s_{i-1} + d_i) mod 10; for 3,7,1,9,5 that is 3, 0, 1, 0, 5 -> ``"30105"``.
The answer is a scratchpad of intermediate results whose last digit is the total mod 10; it is graded
exactly (every digit right, nothing after it). A response is n digits and ``<eos>``, so its length varies
with the problem (6 to 21 tokens, mean 13.5), and n is the problem's difficulty: one slip anywhere makes
the whole response wrong, so long problems are much harder than short ones.

Why this shape (benchmark v2): v1's addrev has 5-token responses, too short for trajectory-level
weighting to differ from token-level weighting. Here each answer digit needs the previous answer digit
(one token back) and the prompt digit at a fixed distance (``SLOTS + 1`` tokens back: the register is
fixed-width), so a 0.5M-parameter model learns it in a few hundred warm-up steps, while a response is a
chain of 5-20 dependent decisions.

The eval split is ``eval_size`` (default 2,500: binomial SE <= 0.01 at any accuracy) distinct problems
drawn by ``numpy.random.default_rng(EVAL_RNG_SEED)`` (independent of the run seed); the train split is
drawn with the run seed, skipping every eval problem, so train and eval are disjoint for every seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harness.tasks.base import Problem
from harness.tasks.registry import register_task

CUMSUM_VOCAB: list[str] = list("0123456789_=")
SLOTS = 20                                  # register width: every prompt is SLOTS + 1 tokens
MIN_DIGITS, MAX_DIGITS = 5, SLOTS           # n, the number of digits (the difficulty), uniform in this range
MAX_RESPONSE_TOKENS = MAX_DIGITS + 1        # the longest answer and its <eos>
EVAL_RNG_SEED = 20_261_201
DEFAULT_EVAL_SIZE = 2500
DEFAULT_TRAIN_SIZE = 100_000
_CHUNK = 4096                               # draws per round of _draw (part of the generator)


def cumsum_prompt(digits: str) -> str:
    """The register: ``digits`` then ``_`` up to SLOTS slots, then ``=``: ``"371" -> "371_________________="``."""
    return digits + "_" * (SLOTS - len(digits)) + "="


def cumsum_answer(digits: str) -> str:
    """Running sums mod 10: ``cumsum_answer("37195") == "30105"`` (3, 3+7=10->0, 0+1=1, 1+9=10->0, 0+5=5)."""
    out, total = [], 0
    for d in digits:
        total = (total + int(d)) % 10
        out.append(str(total))
    return "".join(out)


def difficulty(problem: Problem) -> int:
    """The number of digits n of a cumsum problem (its answer's length)."""
    return len(problem.answer)


def _problem(digits: str) -> Problem:
    return Problem(prompt=cumsum_prompt(digits), answer=cumsum_answer(digits), uid=f"cumsum-{digits}")


def _draw(rng: np.random.Generator, size: int, exclude: set[str]) -> list[str]:
    """The first ``size`` distinct digit strings not in ``exclude`` of ``rng``'s stream, lengths uniform in
    [MIN_DIGITS, MAX_DIGITS]. Drawn in fixed chunks, so a smaller ``size`` is a prefix of a larger one."""
    out: list[str] = []
    seen = set(exclude)
    while len(out) < size:
        lengths = rng.integers(MIN_DIGITS, MAX_DIGITS + 1, size=_CHUNK)
        digits = rng.integers(0, 10, size=(_CHUNK, MAX_DIGITS))
        for n, row in zip(lengths, digits):
            s = "".join(map(str, row[:n]))
            if s not in seen and len(out) < size:
                seen.add(s)
                out.append(s)
    return out


@dataclass(frozen=True)
class CumSumTask:
    """The cumsum task; ``eval_size`` fixes the held-out set that train sampling excludes."""

    eval_size: int = DEFAULT_EVAL_SIZE
    name: str = field(default="cumsum", init=False)
    max_response_tokens: int = field(default=MAX_RESPONSE_TOKENS, init=False)

    def __post_init__(self) -> None:
        if not 0 < self.eval_size <= 1_000_000:
            raise ValueError(f"eval_size must be in (0, 1000000], got {self.eval_size}")

    def _eval_digits(self) -> list[str]:
        return _draw(np.random.default_rng(EVAL_RNG_SEED), self.eval_size, set())

    def problems(self, split: str, size: int | None, seed: int) -> list[Problem]:
        """``eval``: the first ``size`` (default all ``eval_size``) fixed eval problems; ``seed`` unused.
        ``train``: ``size`` (default ``DEFAULT_TRAIN_SIZE``) distinct non-eval problems drawn with ``seed``."""
        if split == "eval":
            size = self.eval_size if size is None else size
            if not 0 <= size <= self.eval_size:
                raise ValueError(f"eval size must be in [0, {self.eval_size}], got {size}")
            return [_problem(d) for d in self._eval_digits()[:size]]
        if split == "train":
            size = DEFAULT_TRAIN_SIZE if size is None else size
            if not 0 <= size <= 10_000_000:
                raise ValueError(f"train size must be in [0, 10000000], got {size}")
            return [_problem(d) for d in _draw(np.random.default_rng(seed), size, set(self._eval_digits()))]
        raise ValueError(f"unknown split {split!r}; valid: 'train', 'eval'")

    def reward(self, completion: str, problem: Problem) -> float:
        """1.0 iff ``completion`` (whitespace-stripped) is exactly the answer (every running sum), else 0.0."""
        return 1.0 if completion.strip() == problem.answer else 0.0


def cumsum_task(eval_size: int = DEFAULT_EVAL_SIZE) -> CumSumTask:
    """The cumsum task with a held-out eval set of ``eval_size`` problems."""
    return CumSumTask(eval_size=eval_size)


register_task("cumsum", cumsum_task, settings=("eval_size",), synthetic=True, vocab=CUMSUM_VOCAB)
