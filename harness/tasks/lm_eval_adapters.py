"""lm-eval adapters of the benchmarks: the functions lm-eval's task YAMLs call (``process_docs``,
``process_results``), named by ``harness/tasks/lm_eval_tasks/utils.py``.

They turn a benchmark's raw rows into the documents :class:`harness.tasks.benchmarks.BenchmarkTask`
serves (same prompt, same gold answer, same ``uid``) and grade a completion as the trainer's reward
does, so that an lm-eval score and a training reward mean the same thing. No lm-eval import here:
lm-eval imports this module (through utils.py), and ``datasets`` is imported when a task runs.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.tasks.benchmarks import _BENCHMARKS, BENCHMARK_NAMES, PROMPT_SUFFIX
from harness.tasks.verify import grade_math

VERIFY_TIMEOUT_S = 1.0                     # per completion, as in training (harness.tasks.verify)


def make_process_docs(benchmark: str) -> Callable[[Any], Any]:
    """lm-eval ``process_docs`` for ``benchmark``: raw JSONL rows (a ``datasets.Dataset``) to docs
    ``{"uid", "prompt", "answer"}`` equal to ``BenchmarkTask(benchmark).problems("eval", ...)``."""
    if benchmark not in _BENCHMARKS:
        raise ValueError(f"unknown benchmark {benchmark!r}; valid: {', '.join(BENCHMARK_NAMES)}")
    spec = _BENCHMARKS[benchmark]

    def to_doc(row: dict, index: int) -> dict[str, str]:
        return {"uid": f"{benchmark}-{index}", "prompt": row[spec.question_field] + PROMPT_SUFFIX,
                "answer": spec.gold(row)}

    def process_docs(dataset):
        import datasets

        features = datasets.Features({key: datasets.Value("string") for key in ("uid", "prompt", "answer")})
        return dataset.map(to_doc, with_indices=True, remove_columns=dataset.column_names, features=features)

    return process_docs


def process_results_exact(doc: dict, results: list[str]) -> dict[str, float]:
    """lm-eval ``process_results`` of a synthetic task (addrev, and any task registered with
    ``synthetic=True``): the trainer's exact-match reward."""
    return {"acc": 1.0 if results[0].strip() == doc["answer"] else 0.0}


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """lm-eval ``process_results``: ``{"acc": 1.0}`` if ``grade_math`` accepts the completion
    ``results[0]`` for ``doc["answer"]``, else ``{"acc": 0.0}``. Never raises on the completion."""
    return {"acc": 1.0 if grade_math(results[0], doc["answer"], VERIFY_TIMEOUT_S) else 0.0}
