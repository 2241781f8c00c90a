"""LabRun: rows, delay semantics, determinism; LabConfig validation; the lab suite file."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.run import ConfigError, build_run_config
from harness.lab.dynamics import LabRun
from harness.store.tracking import RunLog
from harness.store.trialdir import read_jsonl

REPO = Path(__file__).resolve().parents[1]
STEP_KEYS = {"train/reward_mean", "loss/value", "opt/grad_norm", "stale/mean", "stale/max", "lab/J",
             "lab/kl_behavior", "policy/entropy", "policy/kl_behavior", "perf/step_s"}
MEASURED = {"lab/bias_true", "lab/bias_tis", "lab/bias_is", "lab/second_moment", "lab/mse", "lab/cosine",
            "lab/bias_true_se", "lab/second_moment_se", "lab/pair_kl"}


def tiny(**over) -> dict:
    base = {"algorithm": "gmc_grpo", "delay": 3, "eps": 0.2, "group_size": 4, "seed": 0,
            "train": {"steps": 12, "lr": 5.0, "prompts_per_step": 2, "advantage": "mean", "grad_clip": 0.0},
            "eval": {"every_steps": 5},
            "lab": {"vocab": 3, "length": 2, "reward_frac": 0.3, "measure_groups": 40, "loop_groups": 8}}
    base.update(over)
    return base


def run(tmp_path: Path, name: str, base: dict) -> tuple[str, list[dict], list[dict]]:
    log = RunLog(tmp_path / name)
    status = LabRun(build_run_config(base), log).run().status
    return status, read_jsonl(log.dir / "metrics.jsonl"), read_jsonl(log.dir / "eval.jsonl")


def test_trial_writes_metric_and_eval_rows(tmp_path):
    status, metrics, evals = run(tmp_path, "a", tiny())
    assert status == "completed"
    assert [r["step"] for r in metrics] == list(range(1, 13))
    assert all(STEP_KEYS <= set(r) for r in metrics)
    assert "gmc/capped_frac" in metrics[0]                         # the estimator's own metrics
    assert [r["step"] for r in evals] == [0, 5, 10, 12]
    assert all(0.0 <= r["eval/acc"] <= 1.0 and r["eval/acc"] == r["lab/J"] for r in evals)   # binary rewards
    assert MEASURED <= set(evals[-1])
    assert [r["stale/mean"] for r in metrics] == [min(t, 3) for t in range(12)]   # realized = min(t, d)
    assert metrics[0]["lab/kl_behavior"] == 0.0 and metrics[5]["lab/kl_behavior"] > 0.0


def test_trial_is_deterministic(tmp_path):
    def strip(rows):
        return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]

    _, m1, e1 = run(tmp_path, "a", tiny(algorithm="m2po"))
    _, m2, e2 = run(tmp_path, "b", tiny(algorithm="m2po"))
    assert strip(m1) == strip(m2) and e1 == e2
    _, m3, _ = run(tmp_path, "c", tiny(algorithm="m2po", seed=1))
    assert strip(m3) != strip(m1)


def test_on_policy_measurement_has_no_bias_against_plain_is(tmp_path):
    _, _, evals = run(tmp_path, "a", tiny(delay=0, algorithm="tic_is"))
    assert evals[-1]["lab/pair_kl"] == 0.0 and evals[-1]["lab/bias_tis"] == 0.0


def test_kl_divergence_measurement(tmp_path):
    base = tiny(algorithm="grpo")
    base["lab"] = {**base["lab"], "divergence": "kl", "kl": 0.3, "log_every": 5}
    _, metrics, evals = run(tmp_path, "a", base)
    assert [r["step"] for r in metrics] == [5, 10, 12]
    assert evals[-1]["lab/pair_kl"] == pytest.approx(0.3, rel=1e-3)


def test_unsupported_settings_are_refused(tmp_path):
    base = tiny()
    base["train"] = {**base["train"], "minibatches": 2}
    with pytest.raises(ValueError, match="train.passes, train.minibatches"):
        run(tmp_path, "a", base)


@pytest.mark.parametrize("lab, key", [
    ({"reward": "gauss"}, "lab.reward"), ({"vocab": 10, "length": 6}, "lab"), ({"divergence": "far"}, "lab.divergence"),
    ({"sweep_group_sizes": [1, 4]}, "lab.sweep_group_sizes"), ({"loop_groups": 1}, "lab.loop_groups"),
    ({"nope": 1}, "lab.nope")])
def test_lab_config_errors_name_the_key(lab, key):
    with pytest.raises(ConfigError) as err:
        build_run_config(tiny(lab=lab))
    message = str(err.value)
    assert message.split(":")[0].removeprefix("base.") == key and "\n" not in message


def test_the_lab_suite_loads_and_expands():
    from harness.config.expand import expand, load_suite_file

    suite = load_suite_file(REPO / "suites" / "estimator-lab.yaml")
    trials = expand(suite)
    assert {t.config.algorithm for t in trials} >= {"grpo", "tic_is", "gmc_grpo", "m2po", "bapo", "is_none"}
    assert all(t.config.lab is not None for t in trials)
    assert len(trials) <= 100                                     # sized for < 3 minutes on 2 cores


@pytest.mark.parametrize("algorithm", ["naive", "decoupled"])
def test_new_estimators_run_as_lab_trials(tmp_path, algorithm):
    status, metrics, evals = run(tmp_path, "a", tiny(algorithm=algorithm))
    assert status == "completed" and f"{algorithm}/clip_frac" in metrics[0]
    assert evals[-1]["lab/batched"] == 1.0 and evals[-1]["lab/batch_groups"] == 2.0
    assert evals[-1]["lab/measure_groups"] == 40.0


def test_measurement_needs_two_batches(tmp_path):
    base = tiny()
    base["lab"] = {**base["lab"], "measure_groups": 3}               # prompts_per_step = 2: one batch and a half
    with pytest.raises(ValueError, match="measure_groups"):
        run(tmp_path, "a", base)
