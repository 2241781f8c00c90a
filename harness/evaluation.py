"""Benchmark evaluation of a local model with lm-eval on the local benchmark files.

    run_eval(Path("ckpt"), ["gsm8k", "math500"], Path("results/eval"), limit=None, max_new_tokens=1024,
             mlflow_run_id=None)

The task configs ship in ``harness/tasks/lm_eval_tasks/`` (one YAML per benchmark, task name
``stalebench_<benchmark>``). Their ``data_files`` are relative to the benchmark data directory
(:func:`harness.tasks.benchmarks.default_data_dir`), so each run writes, into a temporary include
directory, one task file per benchmark that includes the shipped one and sets the absolute data path
and ``max_gen_toks``. lm-eval's ``json`` dataset builder reads the files; nothing is downloaded
(``HF_HUB_OFFLINE=1``, ``HF_DATASETS_OFFLINE=1``).

Prompts and gold answers are :class:`harness.tasks.benchmarks.BenchmarkTask`'s, ``uid`` included; a
completion is correct when :func:`harness.tasks.verify.grade_math` accepts it (``process_docs`` and
``process_results`` of :mod:`harness.tasks.lm_eval_adapters`, re-exported here). ``limit=k`` takes the first k problems in file order, as
``BenchmarkTask.problems("eval", k, seed)`` does.

Backend: lm-eval's ``vllm`` model when vLLM is installed and a CUDA GPU is visible, else ``hf``
(transformers) on CUDA if visible, else CPU in float32.

Outputs, under ``out_dir`` (`stalebench eval --model M`: results/eval/<M's name>/; `--trial T`: T/benchmarks/):

- ``results.json``: ``benchmarks`` (per benchmark: ``acc``, ``acc_stderr``, ``n``), ``config``
  (model, backend, limit, max_new_tokens, data_dir, the per-run task files), ``versions``, and
  ``lm_eval_configs`` (lm-eval's resolved task configs).
- ``samples_<benchmark>.jsonl``: one row per problem: ``id``, ``prompt`` (the exact context fed to
  the model), ``completion``, ``extracted`` (:func:`harness.tasks.verify.extract_answer`, or null),
  ``gold``, ``correct``.

Metrics logged to MLflow when ``mlflow_run_id`` is given: ``eval/<benchmark>/acc``, the fraction of
problems whose greedy completion is graded correct, at step 0.

Simplifications against the papers that report these benchmarks: zero-shot, greedy, one sample per
problem (no pass@k or averaging over seeds), no chat template (the prompt is the raw text the trainer
samples from), and the answer is the last ``\\boxed{}`` (else ``####``, else the last number).
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from harness.store import trialdir
from harness.store.safewrite import open_atomic, write_file
from harness.tasks import registered, task_entry, task_from_config
from harness.tasks.benchmarks import default_data_dir
from harness.tasks.lm_eval_adapters import (  # noqa: F401 — re-exported: the task functions
    VERIFY_TIMEOUT_S, make_process_docs, process_results, process_results_exact)
from harness.tasks.verify import extract_answer

TASKS_DIR = Path(__file__).resolve().parent / "tasks" / "lm_eval_tasks"
TASK_PREFIX = "stalebench_"
CPU_BATCH_SIZE = 8
CUDA_BATCH_SIZE = 32
VLLM_GPU_MEMORY_UTILIZATION = 0.8


def eval_names() -> list[str]:
    """The tasks lm-eval can run: every registered task with a task YAML in lm_eval_tasks/ (the benchmarks,
    and synthetic tasks such as addrev, evaluated like a benchmark on their generated eval split)."""
    return [t.name for t in registered() if (TASKS_DIR / f"{t.name}.yaml").is_file()]


# ---------------------------------------------------------------- per-run task files


class _TemplateLoader(yaml.SafeLoader):
    """Safe YAML loader that keeps lm-eval's ``!function utils.f`` tags as plain strings."""


_TemplateLoader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


def load_task_template(path: Path) -> dict[str, Any]:
    """A shipped task YAML with its ``include`` chain merged (the including file's keys win)."""
    cfg = yaml.load(path.read_text(encoding="utf-8"), Loader=_TemplateLoader)  # a SafeLoader subclass
    include = cfg.pop("include", None)
    return {**load_task_template(path.parent / include), **cfg} if include else cfg


def write_run_tasks(benchmarks: list[str], data_dir: Path, max_new_tokens: int, include_dir: Path) -> dict[str, dict]:
    """Write one lm-eval task file per benchmark into ``include_dir``; returns their contents by benchmark.

    Each includes the shipped ``<benchmark>.yaml`` and overrides ``dataset_kwargs`` (the absolute path
    of the benchmark file in ``data_dir``) and ``generation_kwargs.max_gen_toks``.
    """
    written = {}
    for name in benchmarks:
        template_path = TASKS_DIR / f"{name}.yaml"
        template = load_task_template(template_path)
        if task_entry(name).synthetic:
            data_dir = include_dir                   # the synthetic task's eval split, written for this run
            (include_dir / template["dataset_kwargs"]["data_files"]["test"]).write_text("".join(
                json.dumps({"uid": p.uid, "prompt": p.prompt, "answer": p.answer}) + "\n" for p in _synthetic_eval(name)))
        data_file = (data_dir / template["dataset_kwargs"]["data_files"]["test"]).resolve()
        if not data_file.is_file():
            raise FileNotFoundError(f"benchmark file not found: {data_file} (set STALEBENCH_DATA_DIR to the "
                                    f"directory holding it)")
        cfg = {"include": str(template_path), "task": template["task"],
               "dataset_kwargs": {"data_files": {"test": str(data_file)}},
               "generation_kwargs": {**template["generation_kwargs"], "max_gen_toks": max_new_tokens}}
        (include_dir / f"{template['task']}.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        written[name] = cfg
    return written


# ---------------------------------------------------------------- run


def _backend(model_path: Path) -> tuple[str, dict[str, Any], int | str]:
    """(lm-eval model name, model_args, batch_size) for this machine."""
    import torch

    if importlib.util.find_spec("vllm") is not None and torch.cuda.is_available():
        args = {"pretrained": str(model_path), "dtype": "auto", "gpu_memory_utilization": VLLM_GPU_MEMORY_UTILIZATION,
                "seed": 0}
        return "vllm", args, "auto"
    if torch.cuda.is_available():
        return "hf", {"pretrained": str(model_path), "dtype": "auto", "device": "cuda"}, CUDA_BATCH_SIZE
    return "hf", {"pretrained": str(model_path), "dtype": "float32", "device": "cpu"}, CPU_BATCH_SIZE


def _versions(backend: str) -> dict[str, str]:
    names = ["lm_eval", "torch", "transformers", "datasets", "math-verify"] + (["vllm"] if backend == "vllm" else [])
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _synthetic_eval(name: str):
    return task_from_config(name, eval_size=500, data_dir=None).problems("eval", None, 0)


def _prompts(benchmark: str, limit: int | None, data_dir: Path) -> list[str]:
    if task_entry(benchmark).synthetic:
        return [p.prompt for p in _synthetic_eval(benchmark)[:limit]]
    return [p.prompt for p in task_from_config(benchmark, 500, str(data_dir)).problems("eval", limit, 0)]


def check_context(model_path: Path, benchmarks: list[str], limit: int | None, max_new_tokens: int,
                  data_dir: Path) -> None:
    """Refuse, in one line, a model whose context cannot hold a benchmark's longest prompt plus the
    generation budget (lm-eval would silently cut the prompt's start, or assert deep inside)."""
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(model_path, local_files_only=True)
    context = getattr(config, "max_position_embeddings", None)
    if not context:
        return
    tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
    for name in benchmarks:
        longest = max((len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in _prompts(name, limit, data_dir)),
                      default=0)
        if longest + max_new_tokens > context:
            raise ValueError(f"{name}: the model's context is {context} tokens but its longest prompt is {longest} "
                             f"tokens plus --max-new-tokens {max_new_tokens}; use a model with a longer context "
                             f"(or a smaller --max-new-tokens / --limit)")


def _check_args(model_path: Path, benchmarks: list[str], limit: int | None, max_new_tokens: int) -> list[str]:
    """The benchmarks without duplicates, in the given order; raises ValueError / FileNotFoundError."""
    if not benchmarks:
        raise ValueError(f"no benchmarks given; valid: {', '.join(eval_names())}")
    unknown = [b for b in benchmarks if b not in eval_names()]
    if unknown:
        raise ValueError(f"unknown benchmark {', '.join(map(repr, unknown))}; valid: {', '.join(eval_names())}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1 or None (all problems), got {limit}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not (model_path / "config.json").is_file():
        raise FileNotFoundError(f"no model at {model_path} (expected a transformers model directory with config.json)")
    return list(dict.fromkeys(benchmarks))


def _sample_row(sample: dict) -> dict[str, Any]:
    """One row of samples_<benchmark>.jsonl from one lm-eval logged sample."""
    completion = sample["filtered_resps"][0]
    context = sample["arguments"]
    # lm-eval 0.4.x logs arguments as [[context, gen_kwargs]] or {"gen_args_0": {"arg_0": context, ...}}.
    context = context["gen_args_0"]["arg_0"] if isinstance(context, dict) else context[0][0]
    return {"id": sample["doc"]["uid"], "prompt": context, "completion": completion,
            "extracted": extract_answer(completion), "gold": sample["doc"]["answer"], "correct": sample["acc"] == 1.0}


def run_eval(model_path: Path, benchmarks: list[str], out_dir: Path, limit: int | None, max_new_tokens: int,
             mlflow_run_id: str | None, results_root: Path = Path("results")) -> Path:
    """Evaluate the model at ``model_path`` on ``benchmarks``; returns the path of results.json.

    Args:
        model_path: local transformers model directory (with config.json and a tokenizer).
        benchmarks: names from ``BENCHMARK_NAMES`` (gsm8k, math500, aime24, amc23, minerva, olympiadbench).
        out_dir: the directory results.json and the samples go to.
        limit: the first ``limit`` problems of each benchmark; None: all.
        max_new_tokens: generation budget per completion.
        mlflow_run_id: an existing MLflow run (e.g. a trial's) to log ``eval/<benchmark>/acc`` to, in the
            store of MLFLOW_TRACKING_URI or else ``results_root``/mlflow.db.

    Raises:
        ValueError: unknown benchmark name, empty list, or a bad limit / max_new_tokens.
        FileNotFoundError: no model directory, or a benchmark file missing from the data directory.
    """
    model_path = Path(model_path)
    benchmarks = _check_args(model_path, benchmarks, limit, max_new_tokens)
    data_dir = default_data_dir()
    check_context(model_path, benchmarks, limit, max_new_tokens, data_dir)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    import lm_eval
    from lm_eval.tasks import TaskManager

    backend, model_args, batch_size = _backend(model_path)
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="stalebench-lm-eval-") as include_dir:
        run_tasks = write_run_tasks(benchmarks, data_dir, max_new_tokens, Path(include_dir))
        task_manager = TaskManager(include_path=include_dir, include_defaults=False)
        res = lm_eval.simple_evaluate(model=backend, model_args=model_args, tasks=[TASK_PREFIX + b for b in benchmarks],
                                      task_manager=task_manager, batch_size=batch_size, limit=limit, log_samples=True)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    scores = {}
    for name in benchmarks:
        task = TASK_PREFIX + name
        rows = [_sample_row(s) for s in sorted(res["samples"][task], key=lambda s: s["doc_id"])]
        with open_atomic(out / f"samples_{name}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        stderr = res["results"][task].get("acc_stderr,none")          # "N/A" when n == 1
        scores[name] = {"acc": res["results"][task]["acc,none"],
                        "acc_stderr": stderr if isinstance(stderr, (int, float)) else None, "n": len(rows)}
    summary = {
        "benchmarks": scores,
        "config": {"model": str(model_path.resolve()), "backend": backend, "model_args": model_args,
                   "batch_size": batch_size, "limit": limit, "max_new_tokens": max_new_tokens,
                   "data_dir": str(data_dir.resolve()), "tasks": run_tasks, "elapsed_s": round(time.time() - start, 1)},
        "versions": _versions(backend),
        "lm_eval_configs": res.get("configs", {}),
    }
    results_path = out / trialdir.BENCHMARK_RESULTS
    write_file(results_path, json.dumps(summary, indent=1, default=str))

    if mlflow_run_id:
        from harness.store.tracking import default_tracking_uri, log_metrics_to_run

        log_metrics_to_run(default_tracking_uri(Path(results_root)), mlflow_run_id,
                           {f"eval/{name}/acc": score["acc"] for name, score in scores.items()})
    return results_path


def eval_trials(trial_dirs: list[Path], benchmarks: list[str], limit: int | None, max_new_tokens: int,
                say: Callable[[str], None] = print) -> list[Path]:
    """`stalebench eval --trial/--suite`: evaluate each trial's kept policy (train.save) into
    <trial>/benchmarks/ and log the scores to the trial's MLflow run. Returns the results.json paths."""
    from harness.store.tracking import default_tracking_uri, find_trial_run

    kept = [(d, trialdir.read_status(d).get("policy")) for d in trial_dirs]
    missing = [d.name for d, policy in kept if not policy]
    if missing and len(trial_dirs) == 1:
        raise ValueError(f"trial {missing[0]} kept no policy (set train.save: final or best, and rerun it)")
    paths = []
    for trial_dir, policy in kept:
        if not policy:
            say(f"skipped {trial_dir.name}: no kept policy")
            continue
        results_root = trial_dir.parent.parent
        run_id = find_trial_run(default_tracking_uri(results_root), trial_dir.parent.name, trial_dir.name)
        paths.append(run_eval(trial_dir / policy["path"], benchmarks, trialdir.benchmarks_dir(trial_dir), limit, max_new_tokens,
                              run_id, results_root=results_root))
        say(f"{trial_dir.name} ({policy['kind']} policy, step {policy['step']}): " + ", ".join(
            f"{b} {v['acc']:.3f}" for b, v in json.loads(paths[-1].read_text())["benchmarks"].items()))
    return paths
