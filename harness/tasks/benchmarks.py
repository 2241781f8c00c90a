"""Real math benchmarks read from JSONL files (see data/benchmarks/README.md: sources, licences, sha256).

Benchmarks: gsm8k, math500, aime24, amc23, minerva, olympiadbench. Each has an eval split (the
``*_test.jsonl`` file); only gsm8k has a train split (``gsm8k_train.jsonl``). Problems come in file
order, so ``size=k`` is the same k problems in every run. The reward is
:func:`harness.tasks.verify.grade_math` of the completion against the gold answer.

Gold answers per benchmark (field names from PROVENANCE.md):

- gsm8k: text after ``#### `` in ``answer``, commas removed (``"1,000"`` -> ``"1000"``).
- math500, aime24: ``answer``.
- amc23: ``answer`` is a float; integral values are rendered without ``.0`` (``12.0`` -> ``"12"``).
- minerva: content of the last ``\\boxed{}`` in ``solution`` (balanced braces).
- olympiadbench: ``final_answer`` (a list) joined with ``", "``, with LaTeX ``$`` delimiters removed
  (some entries hold several, e.g. ``"$69$,$84$"`` -> ``"69,84"``).
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.tasks.base import Problem
from harness.tasks.registry import register_task
from harness.tasks.verify import grade_math, last_boxed_content

DATA_DIR_ENV = "STALEBENCH_DATA_DIR"
PROMPT_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."
_UNESCAPED_DOLLAR_RE = re.compile(r"(?<!\\)\$")


REPO_DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "benchmarks"   # the copy that ships in the repository


def default_data_dir() -> Path:
    """Where every reader finds the benchmark files: ``$STALEBENCH_DATA_DIR`` if set, else the repository's
    ``data/benchmarks`` (found from a clone anywhere and from its editable install)."""
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV])
    return REPO_DATA_DIR


def _gsm8k_gold(row: dict) -> str:
    return row["answer"].split("####")[-1].strip().replace(",", "")


def _amc23_gold(row: dict) -> str:
    value = float(row["answer"])
    return str(int(value)) if value.is_integer() else str(value)


def _minerva_gold(row: dict) -> str:
    boxed = last_boxed_content(row["solution"])
    if boxed is None:
        raise ValueError("minerva row has no \\boxed{} answer in its solution")
    return boxed.strip()


def _olympiadbench_gold(row: dict) -> str:
    return ", ".join(_UNESCAPED_DOLLAR_RE.sub("", answer).strip() for answer in row["final_answer"])


@dataclass(frozen=True)
class _Benchmark:
    eval_file: str
    question_field: str
    gold: Callable[[dict], str]
    train_file: str | None = None


_BENCHMARKS: dict[str, _Benchmark] = {
    "gsm8k": _Benchmark("gsm8k_test.jsonl", "question", _gsm8k_gold, train_file="gsm8k_train.jsonl"),
    "math500": _Benchmark("math500_test.jsonl", "problem", lambda row: row["answer"]),
    "aime24": _Benchmark("aime24_test.jsonl", "problem", lambda row: str(row["answer"])),
    "amc23": _Benchmark("amc23_test.jsonl", "question", _amc23_gold),
    "minerva": _Benchmark("minerva_math_test.jsonl", "problem", _minerva_gold),
    "olympiadbench": _Benchmark("olympiadbench_test.jsonl", "question", _olympiadbench_gold),
}
BENCHMARK_NAMES: tuple[str, ...] = tuple(_BENCHMARKS)


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(
            f"benchmark file not found: {path} (set {DATA_DIR_ENV} to the directory holding it)"
        )
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class BenchmarkTask:
    """One benchmark as a :class:`harness.tasks.base.Task`.

    Args:
        name: one of ``BENCHMARK_NAMES``.
        data_dir: directory of the JSONL files; None means :func:`default_data_dir`.
        verify_timeout_s: ``timeout_s`` passed to :func:`grade_math`.
    """

    def __init__(self, name: str, data_dir: str | Path | None = None, verify_timeout_s: float = 1.0,
                 validation_size: int = 0):
        if name not in _BENCHMARKS:
            raise ValueError(f"unknown benchmark {name!r}; valid: {', '.join(BENCHMARK_NAMES)}")
        if validation_size and _BENCHMARKS[name].train_file is None:
            raise ValueError(f"benchmark {name} has no train file to hold out a validation split from")
        self.name = name
        self.data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
        self.verify_timeout_s = verify_timeout_s
        self.validation_size = validation_size

    @property
    def splits(self) -> tuple[str, ...]:
        """``validation`` (with ``validation_size``): the last ``validation_size`` problems of the train file,
        held out of ``train`` (fixed, file order; the test file is never touched)."""
        spec = _BENCHMARKS[self.name]
        return ("eval",) + (("train",) if spec.train_file else ()) + (("validation",) if self.validation_size else ())

    def problems(self, split: str, size: int | None, seed: int) -> list[Problem]:
        """The first ``size`` problems (None: all) of ``split`` in file order; ``seed`` is unused."""
        spec = _BENCHMARKS[self.name]
        if split not in self.splits:
            if split == "train":
                raise ValueError(f"benchmark {self.name} has no train split; use it for eval only")
            raise ValueError(f"unknown split {split!r}; valid: {', '.join(map(repr, self.splits))}")
        if size is not None and size < 0:
            raise ValueError(f"size must be >= 0 or None, got {size}")
        if split == "eval":
            rows, uid_prefix, first = _read_jsonl(self.data_dir / spec.eval_file), self.name, 0
        else:
            rows, uid_prefix = _read_jsonl(self.data_dir / spec.train_file), f"{self.name}-train"
            held = len(rows) - self.validation_size
            if held < 1:
                raise ValueError(f"validation_size {self.validation_size} leaves no train problem of {len(rows)}")
            rows, first = (rows[:held], 0) if split == "train" else (rows[held:], held)
        return [
            Problem(
                prompt=row[spec.question_field] + PROMPT_SUFFIX,
                answer=spec.gold(row),
                uid=f"{uid_prefix}-{first + i}",
            )
            for i, row in enumerate(rows[:size])
        ]

    def reward(self, completion: str, problem: Problem) -> float:
        """1.0 if :func:`grade_math` accepts ``completion`` for ``problem.answer``, else 0.0."""
        return 1.0 if grade_math(completion, problem.answer, self.verify_timeout_s) else 0.0


for _name in BENCHMARK_NAMES:
    register_task(_name, functools.partial(BenchmarkTask, _name),
                  settings=("data_dir", "validation_size") if _BENCHMARKS[_name].train_file else ("data_dir",))
