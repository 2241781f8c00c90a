"""Tests for harness.evaluation: lm-eval on the local benchmark files, offline on CPU with the tiny model.

The tiny random model's tokenizer knows only digits, '+' and '=' (other characters become <pad>), so its
completions are garbage: the end-to-end test checks plumbing (files, fields, prompts, MLflow), and the
grading is checked on hand-written completions.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.tasks.benchmarks import BENCHMARK_NAMES, BenchmarkTask, default_data_dir

pytest.importorskip("lm_eval", reason="needs the `eval` extra: pip install 'lm-eval[hf]>=0.4.8,<0.5'")

from harness.evaluation import (  # after the importorskip
    TASKS_DIR,
    load_task_template,
    make_process_docs,
    process_results,
    run_eval,
    write_run_tasks,
)

DATA_DIR = default_data_dir()
needs_data = pytest.mark.skipif(not DATA_DIR.is_dir(), reason=f"benchmark data not at {DATA_DIR}")
SAMPLE_FIELDS = {"id", "prompt", "completion", "extracted", "gold", "correct"}


def _docs(benchmark: str, n: int) -> list[dict]:
    """The first `n` docs lm-eval sees: the shipped template's data file, read by the `json` builder."""
    import datasets

    data_file = DATA_DIR / load_task_template(TASKS_DIR / f"{benchmark}.yaml")["dataset_kwargs"]["data_files"]["test"]
    raw = datasets.load_dataset("json", data_files={"test": str(data_file)}, split="test")
    return list(make_process_docs(benchmark)(raw.select(range(n))))


# ---------------------------------------------------------------- end to end (one lm-eval run, ~20-40 s on 2 cores)


@pytest.fixture(scope="module")
def eval_run(long_context_model_dir, tmp_path_factory):
    """run_eval on gsm8k + math500, 2 problems each, logging to a fresh SQLite MLflow store."""
    from harness.store.tracking import open_suite_run

    tmp = tmp_path_factory.mktemp("eval")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    _, run_id = open_suite_run(uri, "eval-test", "suite-run", tags={})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        results_path = run_eval(long_context_model_dir, ["gsm8k", "math500"], out_dir=tmp / "out", limit=2, max_new_tokens=8,
                                mlflow_run_id=run_id)
    return {"results_path": results_path, "uri": uri, "run_id": run_id, "model_dir": long_context_model_dir}


@needs_data
def test_run_eval_writes_scores_config_and_versions(eval_run):
    path = eval_run["results_path"]
    assert path.name == "results.json"
    assert path.parent.name == "out"                                      # out_dir/results.json
    results = json.loads(path.read_text())
    assert set(results["benchmarks"]) == {"gsm8k", "math500"}
    for score in results["benchmarks"].values():
        assert 0.0 <= score["acc"] <= 1.0
        assert score["n"] == 2
    config = results["config"]
    assert config["backend"] == "hf" and config["model_args"]["device"] == "cpu"
    assert config["limit"] == 2 and config["max_new_tokens"] == 8
    for task in config["tasks"].values():
        data_file = Path(task["dataset_kwargs"]["data_files"]["test"])
        assert data_file.is_absolute() and data_file.parent == DATA_DIR.resolve()
        assert task["generation_kwargs"]["max_gen_toks"] == 8
    assert {"lm_eval", "torch", "transformers", "datasets"} <= set(results["versions"])


@needs_data
def test_run_eval_samples_have_the_fields_and_the_benchmark_prompts(eval_run):
    out = eval_run["results_path"].parent
    for name in ("gsm8k", "math500"):
        rows = [json.loads(line) for line in (out / f"samples_{name}.jsonl").read_text().splitlines()]
        assert len(rows) == 2
        problems = BenchmarkTask(name).problems("eval", 2, seed=0)
        for row, problem in zip(rows, problems):
            assert set(row) == SAMPLE_FIELDS
            assert row["id"] == problem.uid
            assert row["prompt"] == problem.prompt                     # the exact text lm-eval fed the model
            assert row["gold"] == problem.answer
            assert isinstance(row["completion"], str) and isinstance(row["correct"], bool)
            assert row["extracted"] is None or isinstance(row["extracted"], str)
        acc = json.loads(eval_run["results_path"].read_text())["benchmarks"][name]["acc"]
        assert acc == pytest.approx(sum(r["correct"] for r in rows) / 2, abs=1e-9)


@needs_data
def test_run_eval_logs_acc_to_the_given_mlflow_run(eval_run):
    from mlflow.tracking import MlflowClient

    metrics = MlflowClient(eval_run["uri"]).get_run(eval_run["run_id"]).data.metrics
    results = json.loads(eval_run["results_path"].read_text())
    assert set(metrics) == {"eval/gsm8k/acc", "eval/math500/acc"}
    for name in ("gsm8k", "math500"):
        assert metrics[f"eval/{name}/acc"] == pytest.approx(results["benchmarks"][name]["acc"], abs=1e-9)


@needs_data
def test_run_eval_on_every_benchmark(long_context_model_dir, tmp_path):
    results_path = run_eval(long_context_model_dir, list(BENCHMARK_NAMES), tmp_path, limit=1, max_new_tokens=4,
                            mlflow_run_id=None)
    results = json.loads(results_path.read_text())
    assert set(results["benchmarks"]) == set(BENCHMARK_NAMES)
    for name in BENCHMARK_NAMES:
        (row,) = [json.loads(line) for line in (results_path.parent / f"samples_{name}.jsonl").read_text().splitlines()]
        (problem,) = BenchmarkTask(name).problems("eval", 1, seed=0)
        assert (row["id"], row["prompt"], row["gold"]) == (problem.uid, problem.prompt, problem.answer)
        assert results["benchmarks"][name]["acc_stderr"] is None                   # undefined for n == 1


# ---------------------------------------------------------------- task configs and scoring


@needs_data
@pytest.mark.parametrize("name", BENCHMARK_NAMES)        # not `benchmark`: pytest-benchmark owns that fixture
def test_docs_equal_benchmark_task_problems(name):
    docs = _docs(name, 3)
    problems = BenchmarkTask(name).problems("eval", 3, seed=0)
    assert [(d["uid"], d["prompt"], d["answer"]) for d in docs] == [(p.uid, p.prompt, p.answer) for p in problems]


def test_every_benchmark_ships_a_task_yaml_with_a_relative_data_file():
    for name in BENCHMARK_NAMES:
        cfg = load_task_template(TASKS_DIR / f"{name}.yaml")
        assert cfg["task"] == f"stalebench_{name}"
        assert cfg["output_type"] == "generate_until"
        assert cfg["process_docs"] == f"utils.process_docs_{name}"
        assert cfg["process_results"] == "utils.process_results"
        assert not Path(cfg["dataset_kwargs"]["data_files"]["test"]).is_absolute()


@needs_data
def test_process_results_grades_the_boxed_gold_as_correct():
    gsm8k = _docs("gsm8k", 1)[0]                                       # gold "18"
    assert gsm8k["answer"] == "18"
    assert process_results(gsm8k, ["16 - 3 - 4 = 9 eggs, 9 * 2 = 18 dollars. \\boxed{18}"]) == {"acc": 1.0}
    assert process_results(gsm8k, ["\\boxed{17}"]) == {"acc": 0.0}
    assert process_results(gsm8k, [""]) == {"acc": 0.0}
    math500 = _docs("math500", 1)[0]                                   # a LaTeX gold answer
    assert process_results(math500, [f"So the answer is $\\boxed{{{math500['answer']}}}$."]) == {"acc": 1.0}


@needs_data
def test_run_task_files_point_at_the_configured_data_dir(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    shutil.copy(DATA_DIR / "aime24_test.jsonl", data_dir)
    include_dir = tmp_path / "include"
    include_dir.mkdir()
    write_run_tasks(["aime24"], data_dir, max_new_tokens=5, include_dir=include_dir)
    cfg = load_task_template(include_dir / "stalebench_aime24.yaml")  # follows the include into the repo
    assert cfg["dataset_kwargs"]["data_files"]["test"] == str((data_dir / "aime24_test.jsonl").resolve())
    assert cfg["generation_kwargs"]["max_gen_toks"] == 5
    assert cfg["doc_to_text"] == "prompt"                              # from the shared template
    with pytest.raises(FileNotFoundError, match="gsm8k_test.jsonl"):
        write_run_tasks(["gsm8k"], data_dir, max_new_tokens=5, include_dir=include_dir)


# ---------------------------------------------------------------- bad input


def test_unknown_benchmark_is_a_value_error_listing_the_valid_names(long_context_model_dir, tmp_path):
    with pytest.raises(ValueError, match="unknown benchmark 'gsm9k'") as info:
        run_eval(long_context_model_dir, ["gsm8k", "gsm9k"], tmp_path, limit=1, max_new_tokens=4, mlflow_run_id=None)
    assert all(name in str(info.value) for name in BENCHMARK_NAMES)
    with pytest.raises(ValueError, match="no benchmarks"):
        run_eval(long_context_model_dir, [], tmp_path, limit=1, max_new_tokens=4, mlflow_run_id=None)
    with pytest.raises(ValueError, match="limit"):
        run_eval(long_context_model_dir, ["gsm8k"], tmp_path, limit=0, max_new_tokens=4, mlflow_run_id=None)


def test_missing_model_dir_is_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no model at"):
        run_eval(tmp_path / "nope", ["gsm8k"], tmp_path, limit=1, max_new_tokens=4, mlflow_run_id=None)


def test_cli_turns_bad_input_into_one_line_errors(long_context_model_dir, tmp_path, capsys):
    from harness.cli import main

    assert main(["eval", "--model", str(long_context_model_dir), "--benchmarks", "gsm8k,nope", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stalebench: unknown benchmark 'nope'; valid: gsm8k") and err.count("\n") == 1
    assert main(["eval", "--model", str(tmp_path / "missing"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stalebench: no model at") and err.count("\n") == 1


@needs_data
def test_a_model_whose_context_is_too_short_is_refused_in_one_line(tiny_model_dir, tmp_path, capsys):
    """64-token context: GSM8K's prompts do not fit; lm-eval would cut their start silently."""
    from harness.cli import main

    assert main(["eval", "--model", str(tiny_model_dir), "--benchmarks", "gsm8k", "--limit", "3",
                 "--max-new-tokens", "8", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gsm8k: the model's context is 64 tokens but its longest prompt is" in err
    assert not any(tmp_path.iterdir())


def test_kept_policy_is_evaluated_and_logged_to_its_trial_run(tiny_base, tmp_path, monkeypatch):
    """train.save: final keeps a loadable model dir; `eval --trial` runs lm-eval on it (the synthetic task,
    which fits the tiny model's context) and logs the score to the trial's MLflow run."""
    from mlflow.tracking import MlflowClient

    from harness.cli import main
    from harness.config.run import build_run_config
    from harness.config.expand import Trial
    from harness.store.tracking import default_tracking_uri, open_suite_run
    from harness.trial.lifecycle import MlflowTarget, run_trial

    results = tmp_path / "results"
    uri = default_tracking_uri(results)
    experiment, parent = open_suite_run(uri, "keep", "suite-1", {},          # artifacts in tmp, not ./mlruns
                                        artifact_location=(tmp_path / "mlartifacts").as_uri())
    cfg = build_run_config(tiny_base, {"train.save": "final"})
    status = run_trial(Trial("t0", {"seed": 0}, cfg), results / "keep", MlflowTarget(uri, experiment, parent))
    assert status["policy"] == {"path": "policy", "kind": "final", "step": 6, "eval_acc": status["policy"]["eval_acc"]}
    assert (results / "keep" / "t0" / "policy" / "model.safetensors").is_file()
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--trial", str(results / "keep" / "t0"), "--benchmarks", "addrev", "--limit", "4",
                 "--max-new-tokens", "6"]) == 0
    scores = json.loads((results / "keep" / "t0" / "benchmarks" / "results.json").read_text())["benchmarks"]
    assert scores["addrev"]["n"] == 4
    client = MlflowClient(uri)
    run = client.search_runs([experiment], "tags.trial_id = 't0'")[0]
    assert run.data.metrics["eval/addrev/acc"] == scores["addrev"]["acc"]
