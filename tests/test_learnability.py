"""The acceptance rule of build-base's learnability probe (harness/learnability.judge), on hand-made runs."""
from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest

import harness.suite.learnability as learnability
from harness.suite.learnability import judge, run_probe
from harness.bases.models import BaseRecipe


def _run(seed, start, final, zero_adv, status="completed"):
    return {"seed": seed, "status": status, "curve": [[0, start], [150, final]], "zero_adv_frac": zero_adv,
            "len_mean": 13.0, "entropy_step1": 0.5, "step_s": 0.3}


V2A = Path(__file__).resolve().parents[1] / "harness" / "bases" / "tiny-cumsum-v2a"
RECIPE = BaseRecipe(name="t", task="cumsum", probe_seeds=3, probe_steps=150)   # rule: gain>=0.30, SD<=0.03, zero-adv<=0.30


def test_a_probe_that_meets_every_rule_is_accepted():
    # gains 0.35, 0.37, 0.33: mean 0.35; finals 0.75, 0.77, 0.73: SD = sqrt((0.02² + 0 + 0.02²)/2) = 0.02
    record = judge([_run(0, 0.40, 0.75, 0.20), _run(1, 0.40, 0.77, 0.25), _run(2, 0.40, 0.73, 0.30)], RECIPE)
    assert record["accepted"] and record["reasons"] == []
    assert record["gain"] == pytest.approx(0.35) and record["seed_sd"] == pytest.approx(0.02)
    assert record["zero_adv_frac"] == pytest.approx(0.25)          # (0.20 + 0.25 + 0.30) / 3


def test_each_failed_rule_is_named():
    # gains 0.10, 0.30, 0.20: mean 0.20 < 0.30; finals 0.50, 0.70, 0.60: SD 0.10 > 0.03; zero-adv mean 0.40
    record = judge([_run(0, 0.4, 0.5, 0.4), _run(1, 0.4, 0.7, 0.4), _run(2, 0.4, 0.6, 0.4)], RECIPE)
    assert not record["accepted"]
    assert record["reasons"] == ["gain 0.200 < 0.3", "seed SD 0.100 > 0.03", "zero-advantage groups 0.400 > 0.3"]


def test_a_diverged_probe_run_rejects():
    record = judge([_run(0, 0.4, 0.75, 0.2), _run(1, 0.4, 0.75, 0.2), _run(2, 0.4, 0.75, 0.2, "diverged")], RECIPE)
    assert not record["accepted"] and record["reasons"][0].startswith("a probe run did not complete")


@pytest.mark.parametrize("forward", ["hf", "lean3"])
def test_the_probe_trains_from_a_candidate_directory_without_a_trial_directory(tmp_path, forward):
    """run_probe end to end for 2 steps on the frozen v2 base: the trainer's side rows (version trace, log-ratio
    histograms) go through the probe's in-memory log, never to the candidate's missing probe directory; on
    the transformers forward (v2's probes) and engine 3 (v3's), a model from a path."""
    candidate = tmp_path / "candidate"
    shutil.copytree(V2A, candidate)
    recipe = BaseRecipe(name="t", task="cumsum", eval_size=8, probe_seeds=2, probe_steps=2, probe_eval_every=1,
                        probe_forward=forward, probe_temperature=0.7)
    assert learnability.probe_config(candidate, recipe, 0, 21).train.temperature == 0.7
    record = run_probe(candidate, recipe, max_new_tokens=21, say=lambda line: None)
    assert [r["status"] for r in record["runs"]] == ["completed", "completed"]
    assert [[s for s, _ in r["curve"]] for r in record["runs"]] == [[0, 1, 2], [0, 1, 2]]
    assert not list(candidate.glob("probe-seed*"))


def test_a_build_stopped_during_its_probe_resumes_at_the_probe(tmp_path, monkeypatch):
    """A candidate already warm-started and saved with this recipe (.candidate-<name>, its files intact) is probed
    again without a new warm start; one saved with another recipe, or with a changed file, is not reused."""
    import harness.bases.models as models

    monkeypatch.setattr(models, "CANDIDATES", tmp_path / "candidates.jsonl")
    recipe = BaseRecipe(name="t", task="cumsum", eval_size=8, probe_seeds=2, probe_steps=1, probe_eval_every=1,
                        probe_min_gain=-1.0, probe_max_seed_sd=1.0, probe_max_zero_adv=1.0)
    out = tmp_path / "bases" / "t"
    candidate = tmp_path / "bases" / ".candidate-t"
    shutil.copytree(V2A, candidate)
    manifest = json.loads((candidate / "base.json").read_text())
    (candidate / "base.json").write_text(json.dumps({**manifest, "recipe": asdict(recipe)}))
    assert learnability.saved_candidate(candidate, recipe) is not None
    assert learnability.saved_candidate(candidate, BaseRecipe(name="t", task="cumsum", warmup_seed=5)) is None
    other_probe = BaseRecipe(**{**asdict(recipe), "probe_temperature": 0.7})     # the same weights, another probe
    assert learnability.saved_candidate(candidate, other_probe)["recipe"]["probe_temperature"] == 0.7

    def no_warm_start(*args):
        raise AssertionError("the saved candidate should have been reused")
    monkeypatch.setattr(learnability, "warm_start_base", no_warm_start)
    built = learnability.build_probed_base(recipe, out)
    assert built["sha256"] == manifest["sha256"] and built["probe"]["accepted"] and (out / "model.safetensors").is_file()
    assert not candidate.exists()
    line = json.loads((tmp_path / "candidates.jsonl").read_text())
    assert line["accepted"] and line["sha256"] == manifest["sha256"]

    shutil.copytree(out, candidate)                                  # a damaged file: not reused
    (candidate / "model.safetensors").write_bytes(b"x")
    assert learnability.saved_candidate(candidate, recipe) is None


def test_build_base_refuses_an_unknown_recipe_key_in_one_line(tmp_path, capsys):
    from harness.cli import main

    out = tmp_path / "tiny-x"
    assert main(["build-base", "--name", "tiny-x", "--set", "warmup_sed=1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stalebench: recipe.warmup_sed: unknown key; valid keys: ") and err.count("\n") == 1
    assert "warmup_seed" in err and not out.exists()
