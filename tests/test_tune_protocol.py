"""`stalebench tune`'s protocol (benchmark v3): a log grid of values with edge extensions, several tuning
seeds whose mean is a value's objective, the validation split; and the default TPE search unchanged.

Without Ray: the grid's values, the refusals, a tuning trial on the validation split (in-process), the edge
rule on a fake objective (tuning.grid_rounds), the overrides file, the dry run, and today's TPE trial ids and
configs. With Ray (real Ray Tune, a random tiny model; `-m slow`, as the other tune_suite test: about a
minute each on 2 cores, mostly starting Ray): a grid on cumsum-long's validation split with two seeds and one
extension, and TPE with two seeds.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from harness.bases.models import problems_sha256
from harness.config.expand import load_suite_file, parse_suite, resolve_config, tune_split, tune_trial
from harness.config.run import ConfigError
from harness.store import trialdir
from harness.suite import tuning
from harness.tasks.cumsum import cumsum_long_task

REPO = Path(__file__).resolve().parents[1]
LR = {"param": "train.lr", "low": 1e-5, "high": 1e-3}


def suite_of(base: dict, tune: dict, algorithms=("grpo", "tis"), seeds=(0, 1), name="t"):
    return parse_suite({"suite": name, "base": base, "grid": {"algorithm": list(algorithms), "delay": [4]},
                        "seeds": list(seeds), "tune": tune})


# ---------------------------------------------------------------- the schema


def test_grid_values_are_log_spaced_from_low_to_high_at_4_significant_digits(tiny_base):
    spec = suite_of(tiny_base, {**LR, "method": "grid"}).tune
    # ratio r = (1e-3 / 1e-5) ** (1/5) = 10 ** 0.4 = 2.51189; 1e-5 r^k for k = 0..5:
    # 1e-5, 2.51189e-5, 6.30957e-5, 1.58489e-4, 3.98107e-4, 1e-3, rounded to 4 significant digits
    assert spec.grid_values() == [1e-5, 2.512e-5, 6.31e-5, 1.585e-4, 3.981e-4, 1e-3]
    # one step beyond each edge: 1e-5 / r = 3.98107e-6, 1e-3 * r = 2.51189e-3
    assert spec.grid_values(below=1, above=1) == [3.981e-6, *spec.grid_values(), 2.512e-3]
    ratios = [b / a for a, b in zip(spec.grid_values(2, 2), spec.grid_values(2, 2)[1:])]
    assert all(abs(r / 10 ** 0.4 - 1) < 5e-4 for r in ratios)           # one log step, up to the rounding
    spec = suite_of(tiny_base, {**LR, "method": "grid", "points": 3}).tune
    assert spec.grid_values() == [1e-5, 1e-4, 1e-3] and spec.points == 3
    default = suite_of(tiny_base, LR).tune
    assert (default.method, default.points, default.max_extend, default.split, default.seeds) == \
        ("tpe", 6, 2, "auto", None)


def test_tuning_seeds_default_to_the_one_tune_seed_and_are_never_reported(tiny_base):
    s = suite_of(tiny_base, LR, seeds=(0, 1, 7))
    assert s.tune.tune_seeds(s) == [1007]                                  # today's single seed
    s = suite_of(tiny_base, {**LR, "seeds": [500, 501]}, seeds=(0, 1, 7))
    assert s.tune.tune_seeds(s) == [500, 501]


@pytest.mark.parametrize("tune, base, needle", [
    ({**LR, "seeds": [500, 1]}, None, "tune.seeds: 1 is one of the suite's reported seeds [0, 1]"),
    ({**LR, "seeds": [500, 500]}, None, "tune.seeds: expected a non-empty list of distinct integers"),
    ({**LR, "seeds": []}, None, "tune.seeds: expected a non-empty list"),
    ({**LR, "seed": 500, "seeds": [501]}, None, "tune.seed, tune.seeds: set one"),
    ({**LR, "method": "grid", "points": 1}, None, "tune.points: a grid needs 2 to 100 points"),
    ({**LR, "method": "grid", "max_extend": -1}, None, "tune.max_extend: must be >= 0"),
    ({**LR, "method": "random"}, None, "tune.method: 'random' is not valid; choose one of tpe, grid"),
    ({**LR, "split": "val"}, None, "tune.split: 'val' is not valid; choose one of auto, validation, test"),
    ({**LR, "split": "validation"}, None, "tune.split: task 'addrev' has no validation split; set tune.split: auto"),
    ({"param": "train.lr", "low": 1e-4, "high": 1.0001e-4, "method": "grid", "points": 3}, None,
     "tune.points: 3 points in [0.0001, 0.00010001] repeat at 4 significant digits"),
    # sigma must lie in [0, 10]: two extensions above 5 at the step 5 / 0.1 = 50 would reach 12,500
    ({"param": "mismatch.sigma", "low": 0.1, "high": 5.0, "method": "grid", "points": 2}, {"mismatch": {"sigma": 0.1}},
     "tune.max_extend: 2 extensions could reach mismatch.sigma=12500, which is refused"),
])
def test_protocol_refusals_are_one_line(tiny_base, tune, base, needle):
    from harness.suite.runner import tune_spec
    with pytest.raises(ConfigError) as err:
        tune_spec(suite_of({**tiny_base, **(base or {})}, tune))
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_the_split_is_validation_where_the_task_has_one(tiny_base, cumsum_model_dir):
    addrev = suite_of(tiny_base, LR)
    assert tune_split(addrev) == "test"
    trial = tune_trial(addrev, "grpo", 1e-4, 1001, "test")
    assert "eval.split" not in trial.params and trial.config.eval.split == "test"
    long = suite_of(cumsum_base(cumsum_model_dir), LR)
    assert tune_split(long) == "validation"
    trial = tune_trial(long, "grpo", 1e-4, 1001, "validation")
    assert trial.params["eval.split"] == "validation" and trial.config.eval.split == "validation"
    # a benchmark's held-out train problems count too (task.validation_size); only the task is built here
    gsm8k = {**tiny_base, "task": {"name": "gsm8k", "eval_size": 4, "validation_size": 8}}
    assert tune_split(suite_of(gsm8k, LR)) == "validation"
    assert tune_split(suite_of(cumsum_base(cumsum_model_dir), {**LR, "split": "test"})) == "test"


def test_a_tuning_trial_evaluates_on_the_validation_split(tmp_path, cumsum_model_dir):
    """The trial `stalebench tune` builds for cumsum-long, run in-process: its resolved config reads the
    validation split and its provenance records the validation set's hash, not the test set's."""
    from harness.trial.lifecycle import run_trial

    suite = suite_of(cumsum_base(cumsum_model_dir), {**LR, "method": "grid", "seeds": [1001]})
    trial = tune_trial(suite, "grpo", 1e-4, 1001, tune_split(suite))
    assert run_trial(trial, tmp_path)["status"] == "completed"
    validation = problems_sha256(cumsum_long_task(16).problems("validation", 4, 0))
    assert validation != problems_sha256(cumsum_long_task(16).problems("eval", 4, 0))
    assert trialdir.read_config(tmp_path / trial.trial_id)["eval"]["split"] == "validation"
    assert trialdir.read_provenance(tmp_path / trial.trial_id)["eval_set_sha256"] == validation


# ---------------------------------------------------------------- today's TPE search, unchanged


@pytest.mark.parametrize("name", ["tune-lr", "reference-v2", "claims-g8"])
def test_tpe_tuning_trials_keep_their_ids_and_configs(name):
    """The default (tpe, one seed, a task without a validation split): each trial is the one the search made
    before the protocol, `tune-<estimator>-lr<value:.4e>` with the same params and resolved config."""
    suite = load_suite_file(REPO / "suites" / f"{name}.yaml")
    spec, split = suite.tune, tune_split(suite)
    assert (spec.method, spec.tune_seeds(suite), split) == ("tpe", [spec.tune_seed(suite)], "test")
    for algorithm in suite.algorithms:
        value = 1.2345678e-4
        # before: fixed = the first value of every other axis, the tuning delay and seed; params in this order
        fixed = {**{k: v[0] for k, v in suite.grid.items() if k != "algorithm"}, "delay": spec.tune_delay(suite),
                 "seed": spec.tune_seed(suite)}
        params = {"algorithm": algorithm, **fixed, spec.param: value}
        config = resolve_config(suite.base, {**suite.overrides.get(algorithm, {}), **params})
        trial = tune_trial(suite, algorithm, value, spec.tune_seed(suite), split)
        assert trial.trial_id == f"tune-{algorithm}-lr1.2346e-04"
        assert list(trial.params.items()) == list(params.items()) and trial.config == config


def test_tpe_overrides_file_keeps_its_lines(tmp_path, tiny_base):
    from harness.suite.runner.search import _plan_line, _write_overrides

    suite = suite_of(tiny_base, {**LR, "trials_per_algorithm": 2})
    rows = [{"algorithm": "grpo", "train.lr": 1e-4, "status": "completed", "objective": 0.5},
            {"algorithm": "grpo", "train.lr": 3e-4, "status": "diverged", "objective": -math.inf}]
    text = _write_overrides(suite, suite.tune, {"grpo": rows}, tmp_path).read_text()
    assert ("# Optuna TPE through Ray Tune, 2 trials per estimator, log-uniform in [1e-05, 0.001], delay 4, "
            "seed 1001, objective: final eval/acc (max).") in text
    assert "#   grpo       train.lr=1.000e-04  eval/acc=0.5  (completed)\n" in text
    assert "#   grpo       train.lr=3.000e-04  eval/acc=-inf  (diverged)\n" in text
    assert "# tuning reads the test split: task addrev has no validation split\n" in text
    assert _plan_line(suite, suite.tune, [1001]) == "tuning train.lr in [1e-05, 0.001] for grpo, tis: 2 trials each at delay 4"


# ---------------------------------------------------------------- the grid's rounds on a fake objective


def fake_run(spec, objective, seeds=(1, 2), ran=None):
    """A `run` for tuning.grid_rounds: every value on every seed, scored by objective(value, seed)."""
    def run(values):
        (ran if ran is not None else []).append(list(values))
        out = []
        for v in values:
            for s in seeds:
                score = objective(v, s)
                out.append({"algorithm": "grpo", spec.param: v, "seed": s, "trial_id": f"{v}-{s}",
                            "status": "completed" if score is not None and math.isfinite(score) else "diverged",
                            "objective": score if score is not None else -math.inf})
        return out
    return run


def test_a_value_scores_the_mean_over_its_seeds_and_the_worst_when_one_diverges(tiny_base):
    spec = suite_of(tiny_base, {**LR, "method": "grid", "points": 2}).tune
    rows = fake_run(spec, lambda v, s: {(1e-5, 1): 0.2, (1e-5, 2): 0.5, (1e-3, 1): 0.9, (1e-3, 2): None}[(v, s)])(
        spec.grid_values())
    scores = tuning.value_scores(spec, rows)
    assert [s["value"] for s in scores] == [1e-5, 1e-3]
    assert scores[0]["objective"] == pytest.approx((0.2 + 0.5) / 2, abs=1e-12) and scores[0]["ok"]
    assert scores[1]["objective"] == -math.inf and not scores[1]["ok"] and scores[1]["status"] == "diverged"
    assert tuning.best(spec, scores)["value"] == 1e-5           # 0.9 on one seed does not outweigh a divergence


def test_the_grid_extends_beyond_an_edge_and_stops_after_max_extend(tiny_base):
    spec = suite_of(tiny_base, {**LR, "method": "grid", "points": 3, "max_extend": 2}).tune   # 1e-5, 1e-4, 1e-3
    ran = []
    rows = tuning.grid_rounds(spec, fake_run(spec, lambda v, s: math.log10(v) + s, ran=ran))     # best: the largest
    assert ran == [[1e-5, 1e-4, 1e-3], [1e-2], [1e-1]]                  # two points above, then it stops
    summary = tuning.bracket(spec, rows)
    assert summary == {"values": [1e-5, 1e-4, 1e-3, 1e-2, 1e-1], "bracket": [1e-5, 1e-1], "extensions": 2,
                       "best": 1e-1, "at_edge": True}
    assert tuning.bracket_line(spec, summary).endswith("best at the edge of the range after 2 extensions")
    assert len(rows) == 5 * 2                                           # every value on both seeds


def test_the_grid_stops_extending_once_the_best_is_inside(tiny_base):
    spec = suite_of(tiny_base, {**LR, "method": "grid", "points": 3, "max_extend": 3}).tune
    ran = []
    # peaked at 1e-6, one step below low: extend to 1e-6 (best, at the edge), to 1e-7 (worse): inside, stop
    rows = tuning.grid_rounds(spec, fake_run(spec, lambda v, s: -abs(math.log10(v) + 6), ran=ran))
    assert ran == [[1e-5, 1e-4, 1e-3], [1e-6], [1e-7]]
    summary = tuning.bracket(spec, rows)
    assert (summary["best"], summary["extensions"], summary["at_edge"]) == (1e-6, 2, False)
    assert "edge" not in tuning.bracket_line(spec, summary)
    ran.clear()
    tuning.grid_rounds(spec, fake_run(spec, lambda v, s: -abs(math.log10(v) + 4), ran=ran))       # best inside
    assert ran == [[1e-5, 1e-4, 1e-3]]
    ran.clear()
    tuning.grid_rounds(spec, fake_run(spec, lambda v, s: 0.0, ran=ran))          # a tie everywhere: no edge
    assert ran == [[1e-5, 1e-4, 1e-3]]
    ran.clear()
    none = suite_of(tiny_base, {**LR, "method": "grid", "points": 3, "max_extend": 0}).tune
    rows = tuning.grid_rounds(none, fake_run(none, lambda v, s: v, ran=ran))
    assert ran == [[1e-5, 1e-4, 1e-3]] and tuning.bracket_line(none, tuning.bracket(none, rows)).endswith(
        "best at the edge of the range after 0 extensions")


def test_the_grid_refines_where_the_objective_falls_off_a_cliff_beside_the_best(tiny_base):
    spec = suite_of(tiny_base, {**LR, "method": "grid", "points": 3, "max_refine": 2, "cliff": 0.1}).tune
    score = {1e-5: 0.5, 1e-4: 0.6, 1e-3: 0.0, 3.162e-4: 0.7, 5.623e-4: 0.65}
    ran = []
    tuning.grid_rounds(spec, fake_run(spec, lambda v, s: score[v], ran=ran))
    # Best 1e-4: 1e-5 falls 0.1 (not more than the cliff), 1e-3 falls 0.6: the midpoint √(1e-4 · 1e-3) = 3.162e-4.
    # Best 3.162e-4 (0.7): 1e-4 falls 0.1, 1e-3 falls 0.7: √(3.162e-4 · 1e-3) = 5.623e-4; then max_refine stops it.
    assert ran == [[1e-5, 1e-4, 1e-3], [3.162e-4], [5.623e-4]]
    ran.clear()
    tuning.grid_rounds(spec, fake_run(spec, lambda v, s: -abs(math.log10(v) + 4) / 100, ran=ran))   # no cliff
    assert ran == [[1e-5, 1e-4, 1e-3]]
    ran.clear()
    off = suite_of(tiny_base, {**LR, "method": "grid", "points": 3}).tune                # max_refine 0: never
    tuning.grid_rounds(off, fake_run(off, lambda v, s: score[v], ran=ran))
    assert ran == [[1e-5, 1e-4, 1e-3]]


def test_a_resumed_grid_hands_only_its_unfinished_trials_to_tune(tmp_path, tiny_base, monkeypatch):
    # a campaign's restored tuning trials are read, never run (nor packed and committed) again: a second tune of
    # the same suite hands Tune nothing and decides the same values (Tune itself is faked: no Ray here)
    import json

    from harness.config.dicts import to_dict
    from harness.config.expand import tune_spec
    from harness.suite.plan import tune_dry_run
    from harness.suite.runner import search

    handed = []

    def fake_fit(suite, trials, tune_dir, *args, **kwargs):
        handed.append([t.trial_id for t in trials])
        for t in trials:                               # the objective rises with the lr: the grid extends once
            d = Path(tune_dir) / t.trial_id
            d.mkdir(parents=True, exist_ok=True)
            (d / "config.yaml").write_text(yaml.safe_dump(to_dict(t.config)))
            (d / "status.json").write_text('{"status": "completed", "step": 4}')
            (d / "eval.jsonl").write_text(json.dumps({"step": 4, "eval/acc": t.config.train.lr}) + "\n")

    monkeypatch.setattr(search, "fit", fake_fit)
    suite = suite_of(tiny_base, {**LR, "method": "grid", "points": 2, "max_extend": 1, "seeds": [500, 501]},
                     algorithms=("grpo",))
    spec = tune_spec(suite)

    def tune_once():
        return search._grid(suite, spec, "grpo", [500, 501], tune_split(suite), tmp_path / "t", None, lambda _: None)

    def dry_run() -> list[str]:                       # its lines without the seeds and values
        return [line for line in tune_dry_run(suite, tmp_path).splitlines() if not line.startswith(("  train", "  seeds"))]

    assert dry_run()[0].endswith(", 0 already finished") and dry_run()[2].startswith(
        "cost with every extension (2 more at most): 36 steps")       # 6 trials of 6 steps
    first = tune_once()
    assert handed == [[f"tune-grpo-lr{v:.4e}-seed{s}" for v in (1e-5, 1e-3) for s in (500, 501)],
                      ["tune-grpo-lr1.0000e-01-seed500", "tune-grpo-lr1.0000e-01-seed501"]]
    assert dry_run()[0].endswith(", 4 already finished (2 of the added ones too)")
    assert dry_run()[1].startswith("cost: 0 steps") and dry_run()[2] == (
        "  the tuning is complete: every estimator's grid, its edge extensions and cliff midpoints have their results")
    (trialdir.tune_dir(tmp_path / "t") / "tune-grpo-lr1.0000e-01-seed501" / "status.json").write_text(
        '{"status": "running", "step": 2}')           # in flight when the machine went
    lines = dry_run()           # the replayed rounds: the extension's unfinished trial is next, and nothing after it
    assert lines[0].endswith(", 4 already finished (1 of the added ones too)") and len(lines) == 2
    assert lines[1].startswith("cost: 6 steps")
    assert tune_once() == first
    assert handed[2:] == [["tune-grpo-lr1.0000e-01-seed501"]]
    # a campaign on a new machine: no results/ here; the dry run reads the landed trials as a run restores them
    from dataclasses import replace

    from harness.store import campaign

    monkeypatch.chdir(tmp_path)
    (tmp_path / "t" / trialdir.SUITE_FILE).write_text("suite: t\n")
    for d in trialdir.tune_dir(tmp_path / "t").iterdir():
        campaign.land(tmp_path / "t", d, campaign.campaign_dir("t", tuning=True), commit=False)
    (tmp_path / "t").rename(tmp_path / "old-machine")
    suite = replace(suite, campaign=True)
    assert dry_run()[0].endswith(", 4 already finished (2 of the added ones too)")
    assert dry_run()[2].startswith("  the tuning is complete")

def test_grid_overrides_file_documents_the_protocol(tmp_path, tiny_base):
    from harness.suite.runner.search import _header

    suite = suite_of(tiny_base, {**LR, "method": "grid", "points": 3, "max_extend": 1, "seeds": [500, 501]})
    spec = suite.tune
    results = {a: tuning.grid_rounds(spec, fake_run(spec, lambda v, s: s / 1000 + math.log10(v), seeds=(500, 501)))
               for a in ("grpo", "tis")}
    header = _header(suite, spec, [500, 501], "validation", "cumsum-long")
    text = tuning.write_overrides(suite, spec, results, tmp_path, header).read_text()
    assert yaml.safe_load(text) == {"overrides": {"grpo": {"train.lr": 0.01}, "tis": {"train.lr": 0.01}}}
    assert ("# Grid through Ray Tune: 3 log-spaced values in [1e-05, 0.001] (4 significant digits), each on every "
            "seed, then up to 1 more beyond an edge where an estimator's best value lies; delay 4, seeds 500, 501, "
            "objective: final eval/acc (max), the mean over the seeds.") in text
    assert "# tuning reads the validation split of task cumsum-long" in text
    assert ("#   grpo: 4 values in [1e-05, 0.01] (1 added beyond [1e-05, 0.001]); best train.lr=0.01; best at the "
            "edge of the range after 1 extensions") in text
    # log10(1e-2) = -2; seeds 500, 501 add 0.5, 0.501: mean -1.4995
    assert "#   grpo       train.lr=1.000e-02  eval/acc=-1.5 (mean over seeds 500: -1.5, 501: -1.499)  (completed)" in text


def test_tune_dry_run_counts_values_seeds_estimators_and_extensions(tmp_path, tiny_base):
    from harness.suite.plan import tune_dry_run

    grid = suite_of(tiny_base, {**LR, "method": "grid", "seeds": [500, 501]})
    lines = tune_dry_run(grid, tmp_path).splitlines()
    assert lines[0] == ("tune t: 6 values x 2 seeds x 2 estimators = 24 trials, up to 8 more if every best value is "
                        "at an edge (2 extensions x 2 seeds x 2 estimators), 0 already finished")
    assert lines[1] == "  train.lr: 1e-05, 2.512e-05, 6.31e-05, 0.0001585, 0.0003981, 0.001"
    assert lines[2] == "  seeds: 500, 501; delay 4; split: test"
    # the tiny random model (kind: path) has no measured step: its cost line says so, for 24 and 32 trials x 6 steps
    assert lines[3].startswith("cost: 144 steps to run")
    assert lines[4].startswith("cost with every extension (8 more at most): 192 steps")
    tpe = tune_dry_run(suite_of(tiny_base, {**LR, "trials_per_algorithm": 3}), tmp_path).splitlines()
    assert tpe[0] == "tune t: 3 values x 1 seed x 2 estimators = 6 trials"
    assert tpe[1] == "  train.lr: 3 TPE proposals in [1e-05, 0.001]" and len(tpe) == 4


# ---------------------------------------------------------------- real Ray Tune


def cumsum_base(model_dir: Path) -> dict:
    """cumsum-long on the random tiny model: 2 steps, 4 validation problems per evaluation."""
    return {"model": {"kind": "path", "path": str(model_dir)}, "task": {"name": "cumsum-long", "eval_size": 16},
            "train": {"steps": 2, "prompts_per_step": 2, "lr": 1e-3, "max_new_tokens": 4, "checkpoint_every": 0},
            "eval": {"every_steps": 2, "size": 4}, "group_size": 2}


@pytest.mark.slow
def test_grid_tuning_runs_values_by_seeds_on_the_validation_split(tmp_path, cumsum_model_dir, monkeypatch, capfd):
    """points 2 (1e-4, 1e-3) x seeds 1001, 1002 on cumsum-long, then one extension (1e-2): the objective is
    faked as 1000 lr + (seed - 1001) / 10 (the best is always the largest), read where the driver reads it."""
    from harness.suite.runner import search, tune_suite

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    real = search.last_eval

    def fake(trial_dir, metric):
        assert real(trial_dir, metric) is not None                 # the trial evaluated; its score is replaced
        config = trialdir.read_config(trial_dir)
        return 1000 * config["train"]["lr"] + (config["seed"] - 1001) / 10

    monkeypatch.setattr(search, "last_eval", fake)
    suite = suite_of(cumsum_base(cumsum_model_dir), {**LR, "low": 1e-4, "method": "grid", "points": 2, "max_extend": 1,
                                                     "seeds": [1001, 1002]}, algorithms=("grpo",), name="grid")
    path = tune_suite(suite, results_root=tmp_path / "results")
    out = "".join(capfd.readouterr())
    rows = trialdir.read_jsonl(trialdir.tune_trials(tmp_path / "results" / "grid"))
    trials = [r for r in rows if "trial_id" in r]
    assert sorted((r["train.lr"], r["seed"]) for r in trials) == [(v, s) for v in (1e-4, 1e-3, 1e-2) for s in (1001, 1002)]
    assert {r["trial_id"] for r in trials} == {f"tune-grpo-lr{v:.4e}-seed{s}" for v in (1e-4, 1e-3, 1e-2)
                                               for s in (1001, 1002)}
    assert [r for r in rows if "bracket" in r] == [{"algorithm": "grpo", "method": "grid", "values": [1e-4, 1e-3, 1e-2],
                                                    "bracket": [1e-4, 1e-2], "extensions": 1, "best": 1e-2, "at_edge": True}]
    validation = problems_sha256(cumsum_long_task(16).problems("validation", 4, 0))
    assert validation != problems_sha256(cumsum_long_task(16).problems("eval", 4, 0))
    for r in trials:
        trial_dir = trialdir.tune_dir(tmp_path / "results" / "grid") / r["trial_id"]
        assert trialdir.read_config(trial_dir)["eval"]["split"] == "validation"
        assert trialdir.read_provenance(trial_dir)["eval_set_sha256"] == validation
        assert r["status"] == "completed" and trialdir.read_evals(trial_dir)        # a real trial ran
    text = path.read_text()
    assert yaml.safe_load(text) == {"overrides": {"grpo": {"train.lr": 0.01}}}
    # 1000 x 1e-2 = 10 on seed 1001, 10.1 on 1002: mean 10.05
    assert "eval/acc=10.05 (mean over seeds 1001: 10, 1002: 10.1)" in text
    assert "tune grpo: 3 values in [0.0001, 0.01] (1 added beyond [0.0001, 0.001]); best train.lr=0.01; best at " \
           "the edge of the range after 1 extensions" in out
    assert "tuning reads the validation split of task cumsum-long" in out


@pytest.mark.slow
def test_tpe_with_two_seeds_runs_every_value_on_both(tmp_path, tiny_base, monkeypatch, capfd):
    from harness.suite.runner import tune_suite

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    base = {**tiny_base, "train": {**tiny_base["train"], "steps": 2}, "eval": {"every_steps": 2, "size": 4}}
    suite = suite_of(base, {**LR, "trials_per_algorithm": 2, "seeds": [1001, 1002]}, algorithms=("grpo",), name="tpe2")
    path = tune_suite(suite, results_root=tmp_path / "results")
    out = "".join(capfd.readouterr())
    rows = trialdir.read_jsonl(trialdir.tune_trials(tmp_path / "results" / "tpe2"))
    values = sorted({r["train.lr"] for r in rows})
    assert len(values) == 2 and sorted((r["train.lr"], r["seed"]) for r in rows) == \
        [(v, s) for v in values for s in (1001, 1002)]
    assert all(r["trial_id"].endswith(f"-seed{r['seed']}") for r in rows)
    scores = tuning.value_scores(suite.tune, rows)
    chosen = yaml.safe_load(path.read_text())["overrides"]["grpo"]["train.lr"]
    assert chosen == float(f"{tuning.best(suite.tune, scores)['value']:.4g}")
    assert "tuning reads the test split: task addrev has no validation split" in out
