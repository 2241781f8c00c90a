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

``cumsum-long`` (benchmark v3) is the same task at the length where trajectory weights are heavy-tailed: a
register of 96 slots holding 24 to 96 digits, so a response is 25 to 97 tokens (mean 61), every one a
dependent decision. It has a fixed **validation** split of 1,000 problems (its own generator seed, disjoint
from the eval split), and its train split skips both: tuning and design choices read validation only, the
table reports eval. cumsum (v2) has no validation split and draws exactly as before.
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
VALIDATION_RNG_SEED = 20_261_203            # cumsum-long's validation split (v3)
DEFAULT_EVAL_SIZE = 2500
DEFAULT_TRAIN_SIZE = 100_000
MAX_TRAIN_SIZE = 10_000_000
_CHUNK = 4096                               # draws per round of _draw (part of the generator)


@dataclass(frozen=True)
class Shape:
    """A cumsum variant: the register width and the range of n, the number of digits (uniform)."""
    slots: int
    min_digits: int
    max_digits: int
    validation_size: int = 0               # a fixed validation split, disjoint from eval and train (0: none)


V2 = Shape(SLOTS, MIN_DIGITS, MAX_DIGITS)                     # cumsum: responses 6-21 tokens
LONG = Shape(96, 24, 96, validation_size=1000)                # cumsum-long: responses 25-97 tokens (v3)


def cumsum_prompt(digits: str, slots: int = SLOTS) -> str:
    """The register: ``digits`` then ``_`` up to ``slots`` slots, then ``=``: ``"371" -> "371_________________="``."""
    return digits + "_" * (slots - len(digits)) + "="


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


def _problem(digits: str, name: str = "cumsum", slots: int = SLOTS) -> Problem:
    return Problem(prompt=cumsum_prompt(digits, slots), answer=cumsum_answer(digits), uid=f"{name}-{digits}")


def _draw(rng: np.random.Generator, size: int, exclude: set[str], shape: Shape = V2) -> list[str]:
    """The first ``size`` distinct digit strings not in ``exclude`` of ``rng``'s stream, lengths uniform in
    [min_digits, max_digits]. Drawn in fixed chunks, so a smaller ``size`` is a prefix of a larger one."""
    out: list[str] = []
    seen = set(exclude)
    while len(out) < size:
        lengths = rng.integers(shape.min_digits, shape.max_digits + 1, size=_CHUNK)
        digits = rng.integers(0, 10, size=(_CHUNK, shape.max_digits))
        for n, row in zip(lengths, digits):
            s = "".join(map(str, row[:n]))
            if s not in seen and len(out) < size:
                seen.add(s)
                out.append(s)
    return out


@dataclass(frozen=True)
class CumSumTask:
    """A cumsum task; ``eval_size`` fixes the held-out set that train sampling excludes."""

    eval_size: int = DEFAULT_EVAL_SIZE
    name: str = "cumsum"
    shape: Shape = V2

    def __post_init__(self) -> None:
        if not 0 < self.eval_size <= 1_000_000:
            raise ValueError(f"eval_size must be in (0, 1000000], got {self.eval_size}")

    @property
    def splits(self) -> tuple[str, ...]:
        return ("train", "eval", "validation") if self.shape.validation_size else ("train", "eval")

    @property
    def max_train_size(self) -> int:
        """The most train problems `problems` draws."""
        return MAX_TRAIN_SIZE

    @property
    def max_response_tokens(self) -> int:
        """The longest answer and its <eos>."""
        return self.shape.max_digits + 1

    def _eval_digits(self) -> list[str]:
        return _draw(np.random.default_rng(EVAL_RNG_SEED), self.eval_size, set(), self.shape)

    def _validation_digits(self, eval_digits: list[str]) -> list[str]:
        return _draw(np.random.default_rng(VALIDATION_RNG_SEED), self.shape.validation_size, set(eval_digits),
                     self.shape)

    def problems(self, split: str, size: int | None, seed: int) -> list[Problem]:
        """``eval``: the first ``size`` (default all ``eval_size``) fixed eval problems; ``seed`` unused.
        ``validation`` (cumsum-long): the first ``size`` (default all) of the fixed validation problems.
        ``train``: ``size`` (default ``DEFAULT_TRAIN_SIZE``) distinct problems of neither, drawn with ``seed``."""
        make = lambda digits: [_problem(d, self.name, self.shape.slots) for d in digits]     # noqa: E731
        held_out = self._eval_digits()
        if split == "eval":
            return make(held_out[:_size(split, size, self.eval_size)])
        if split == "validation":
            if not self.shape.validation_size:
                raise ValueError(f"task {self.name} has no validation split; valid: 'train', 'eval'")
            return make(self._validation_digits(held_out)[:_size(split, size, self.shape.validation_size)])
        if split == "train":
            size = DEFAULT_TRAIN_SIZE if size is None else size
            if not 0 <= size <= MAX_TRAIN_SIZE:
                raise ValueError(f"train size must be in [0, {MAX_TRAIN_SIZE}], got {size}")
            if self.shape.validation_size:
                held_out += self._validation_digits(held_out)
            return make(_draw(np.random.default_rng(seed), size, set(held_out), self.shape))
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(map(repr, self.splits))}")

    def reward(self, completion: str, problem: Problem) -> float:
        """1.0 iff ``completion`` (whitespace-stripped) is exactly the answer (every running sum), else 0.0."""
        return 1.0 if completion.strip() == problem.answer else 0.0


def _size(split: str, size: int | None, available: int) -> int:
    size = available if size is None else size
    if not 0 <= size <= available:
        raise ValueError(f"{split} size must be in [0, {available}], got {size}")
    return size


def cumsum_task(eval_size: int = DEFAULT_EVAL_SIZE) -> CumSumTask:
    """The cumsum task (benchmark v2) with a held-out eval set of ``eval_size`` problems."""
    return CumSumTask(eval_size=eval_size)


def cumsum_long_task(eval_size: int = DEFAULT_EVAL_SIZE) -> CumSumTask:
    """cumsum-long (benchmark v3): 24-96 digits, a fixed validation split of 1,000 problems."""
    return CumSumTask(eval_size=eval_size, name="cumsum-long", shape=LONG)


register_task("cumsum", cumsum_task, settings=("eval_size",), synthetic=True, vocab=CUMSUM_VOCAB)
register_task("cumsum-long", cumsum_long_task, settings=("eval_size",), synthetic=True, vocab=CUMSUM_VOCAB)
