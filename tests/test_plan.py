"""The dry run's projections (harness/suite/plan.py): arithmetic checked by hand."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from harness.config.run import build_run_config
from harness.suite.plan import _step_seconds, gpu_projection, model_parameters, projected_seconds
from harness.config.expand import load_suite_trials, tune_split, tune_trial


def test_model_parameters_from_the_name_when_no_config_is_there(tmp_path):
    assert model_parameters(str(tmp_path / "Qwen3-1.7B")) == (1.7e9, "the size in its name 'Qwen3-1.7B'")
    assert model_parameters(str(tmp_path / "my-model"))[0] is None


def test_gpu_projection_by_hand(tmp_path):
    cfg = build_run_config({"model": {"kind": "path", "path": str(tmp_path / "Qwen3-1.7B")}, "group_size": 16,
                            "train": {"steps": 100_000, "prompts_per_step": 8, "max_new_tokens": 744}})
    # FLOPs = steps 1e5 x 128 responses x (256 + 744 = 1000 tokens) x 8 x 1.7e9 = 1.7408e20;
    # / (989e12 x 0.25 = 2.4725e14 FLOP/s) = 704,065 s = 195.6 h; with 2 GPUs per trial 97.8 h of wall time
    line = gpu_projection([SimpleNamespace(config=cfg)], 2)
    assert "projected <= 196 GPU-hours" in line and "-> 98 h of wall time" in line
    # k = 4 minibatches add the proximal policy's forward, 2N: 10N per token, 195.6 x 10 / 8 = 244.5 h (704,065 s x 1.25 = 244.47 h); two full
    # passes add a second forward and backward as well (6N): 16N, 391.1 h
    mini = build_run_config({"model": {"kind": "path", "path": str(tmp_path / "Qwen3-1.7B")}, "group_size": 16,
                             "train": {"steps": 100_000, "prompts_per_step": 8, "max_new_tokens": 744, "minibatches": 4}})
    assert "projected <= 244 GPU-hours" in gpu_projection([SimpleNamespace(config=mini)], 1) and "10N" in \
        gpu_projection([SimpleNamespace(config=mini)], 1)
    passes = build_run_config({"model": {"kind": "path", "path": str(tmp_path / "Qwen3-1.7B")}, "group_size": 16,
                               "train": {"steps": 100_000, "prompts_per_step": 8, "max_new_tokens": 744, "passes": 2}})
    assert "projected <= 391 GPU-hours" in gpu_projection([SimpleNamespace(config=passes)], 1)


def test_the_v2_step_figure_gives_back_the_reference_runs_own_steps(tmp_path, monkeypatch):
    # The cumsum figure is derived from reports/reference-v2's median perf/step_s (0.397 s: lean forward, pinned
    # path, on the 2-core machine): projecting that suite's trials must give the 0.397 s back.
    monkeypatch.delenv("STALEBENCH_FLOAT_PATH", raising=False)
    suite, trials = load_suite_trials(Path(__file__).parents[1] / "suites" / "reference-v2.yaml")
    step_s, source = _step_seconds(tmp_path, trials)
    assert abs(step_s - 0.397) < 0.002
    assert "x 0.70 for the lean forward" in source and "x 1.53 for the pinned float path" in source


def test_the_v3_step_figure_gives_back_the_reference_runs_own_steps_and_projects_the_quickstart(tmp_path):
    # reports/reference-v3's median perf/step_s was 1.609 s (engine 3, 128 responses, m = 4); the figure is kept
    # per single update (1.609 / 1.33 = 1.21) and times 1 + 0.33 for m = 4 gives 1.6093 back.
    suite, trials = load_suite_trials(Path(__file__).parents[1] / "suites" / "reference-v3.yaml")
    step_s, source = _step_seconds(tmp_path, trials)
    assert abs(step_s - 1.609) < 0.001 and "engine 3" in source
    # the quickstart, one trial at a time: 2 trials x 64 steps x 1.6093 s = 206.0 s, plus 2 x 3 evaluations
    # (steps 0, 32, 64) x 21.2 s = 127.2 s: 333.2 s
    quick, quick_trials = load_suite_trials(Path(__file__).parents[1] / "suites" / "quickstart-v3.yaml")
    assert abs(projected_seconds(quick, quick_trials, quick_trials, tmp_path, one_at_a_time=True) - 333.2) < 0.1


def test_an_evaluation_costs_the_figure_scaled_to_the_problems_it_scores(tmp_path):
    # reference-v4's figure is 21.2 s per 2,500-problem evaluation (its test split). Its tuning trials score the
    # 1,000-problem validation split: 8.48 s each (measured: a median 9.7 s over its 122 tuning trials, against
    # 20.9 s for its table trials; benchmarks/README.md). The same 128 steps, 5 evaluations: 5 x 12.72 s less.
    suite, trials = load_suite_trials(Path(__file__).parents[1] / "suites" / "reference-v4.yaml")
    table = next(t for t in trials if t.trial_id == "grpo-d0-s0")
    tuning = tune_trial(suite, "grpo", table.config.train.lr, 1000, tune_split(suite))
    assert tuning.config.eval.split == "validation" and tuning.config.train.steps == table.config.train.steps
    cost = lambda t: projected_seconds(suite, trials, [t], tmp_path, one_at_a_time=True)   # noqa: E731
    assert abs(cost(table) - cost(tuning) - 5 * 21.2 * (1 - 1000 / 2500)) < 1e-6
