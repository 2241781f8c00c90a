"""Suite files: grid expansion (pure), readable deterministic trial ids, per-estimator overrides, `select`,
and one-line ConfigErrors for bad suite files, in-process and through the CLI (exit 2, nothing written)."""
from __future__ import annotations

import json

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from harness.config.run import ConfigError
from harness.config.expand import expand, load_suite_file, parse_suite, select, trial_id

REPO = Path(__file__).resolve().parents[1]
BASE = {"task": {"name": "addrev", "eval_size": 32}, "train": {"steps": 10, "prompts_per_step": 4}}


def write(tmp_path: Path, data: dict | str, name: str = "suite.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def suite_dict(**changes) -> dict:
    data = {"suite": "unit", "version": 1, "base": dict(BASE),
            "grid": {"algorithm": ["grpo", "gmc_grpo"], "delay": [0, 16], "eps": [0.2], "group_size": [8]},
            "seeds": [0, 1]}
    data.update(changes)
    return data


# ---------------------------------------------------------------- expansion


def test_cross_product_ids_and_order(tmp_path):
    trials = expand(load_suite_file(write(tmp_path, suite_dict())))
    # 2 algorithms × 2 delays × 1 eps × 1 group size × 2 seeds = 8, algorithm-major, seeds innermost
    assert [t.trial_id for t in trials] == [
        "grpo-d0-e0.2-g8-s0", "grpo-d0-e0.2-g8-s1", "grpo-d16-e0.2-g8-s0", "grpo-d16-e0.2-g8-s1",
        "gmc_grpo-d0-e0.2-g8-s0", "gmc_grpo-d0-e0.2-g8-s1", "gmc_grpo-d16-e0.2-g8-s0", "gmc_grpo-d16-e0.2-g8-s1"]
    t = trials[6]
    assert t.params == {"algorithm": "gmc_grpo", "delay": 16, "eps": 0.2, "group_size": 8, "seed": 0}
    assert (t.config.algorithm, t.config.delay, t.config.eps, t.config.group_size, t.config.seed) == ("gmc_grpo", 16, 0.2, 8, 0)
    assert t.config.train.steps == 10 and t.config.task.eval_size == 32      # from base


def test_ids_are_deterministic_and_independent_of_key_order(tmp_path):
    a = suite_dict()
    b = suite_dict(grid={"group_size": [8], "eps": [0.2], "delay": [16, 0], "algorithm": ["gmc_grpo", "grpo"]})
    ids_a = {t.trial_id for t in expand(load_suite_file(write(tmp_path, a, "a.yaml")))}
    ids_b = {t.trial_id for t in expand(load_suite_file(write(tmp_path, b, "b.yaml")))}
    assert ids_a == ids_b
    assert trial_id({"algorithm": "gmc_grpo", "delay": 16, "eps": 0.2, "group_size": 8, "seed": 0}) == "gmc_grpo-d16-e0.2-g8-s0"


def test_other_grid_keys_use_their_last_name_segment(tmp_path):
    trials = expand(load_suite_file(write(tmp_path, suite_dict(grid={"algorithm": ["grpo"], "train.lr": [0.0001, 0.001]},
                                                          seeds=[3]))))
    assert [t.trial_id for t in trials] == ["grpo-lr0.0001-s3", "grpo-lr0.001-s3"]
    assert [t.config.train.lr for t in trials] == [1e-4, 1e-3]


def test_overrides_apply_per_estimator_and_grid_wins(tmp_path):
    data = suite_dict(overrides={"gmc_grpo": {"train.lr": 3e-5, "eps": 0.1}, "grpo": {"train.steps": 7}})
    trials = {t.trial_id: t for t in expand(load_suite_file(write(tmp_path, data)))}
    gmc, grpo = trials["gmc_grpo-d0-e0.2-g8-s0"], trials["grpo-d0-e0.2-g8-s0"]
    assert gmc.config.train.lr == 3e-5 and gmc.config.train.steps == 10
    assert gmc.config.eps == 0.2                    # the grid point beats the override
    assert grpo.config.train.lr == 1e-4 and grpo.config.train.steps == 7


def test_shared_on_policy_run_and_the_scope_of_tuned_overrides(tmp_path):
    tuned = {"gmc_grpo": {"train.lr": 3e-5}, "grpo": {"train.lr": 2e-4}}
    grid = {"algorithm": ["grpo", "gmc_grpo"], "delay": [0, 16]}
    ids = lambda trials: [t.trial_id for t in trials]                                  # noqa: E731
    shared = expand(load_suite_file(write(tmp_path, suite_dict(grid=grid, share_on_policy=True), "a.yaml")))
    assert ids(shared) == ["grpo-d0-s0", "grpo-d0-s1", "grpo-d16-s0", "grpo-d16-s1", "gmc_grpo-d16-s0",
                           "gmc_grpo-d16-s1"]
    assert shared[0].params["stands_for"] == ["grpo", "gmc_grpo"]
    # overrides at every trial (the default scope): the estimators' delay-0 runs differ, so none is shared
    everywhere = expand(load_suite_file(write(tmp_path, suite_dict(grid=grid, share_on_policy=True, overrides=tuned),
                                              "b.yaml")))
    assert "gmc_grpo-d0-s0" in ids(everywhere) and not any("stands_for" in t.params for t in everywhere)
    # overrides_scope: stale -- the tuned lrs apply at delay 16 only; delay 0 is shared at the base's lr
    stale = {t.trial_id: t for t in expand(load_suite_file(write(
        tmp_path, suite_dict(grid=grid, share_on_policy=True, overrides=tuned, overrides_scope="stale"), "c.yaml")))}
    assert list(stale) == ids(shared)
    assert stale["grpo-d0-s0"].config.train.lr == 1e-4 and stale["grpo-d0-s0"].params["stands_for"] == ["grpo", "gmc_grpo"]
    assert stale["grpo-d16-s0"].config.train.lr == 2e-4 and stale["gmc_grpo-d16-s1"].config.train.lr == 3e-5


def test_estimator_params_through_overrides(tmp_path):
    data = suite_dict(grid={"algorithm": ["grpo", "m2po"]}, overrides={"m2po": {"params.tau": 0.02}})
    trials = {t.config.algorithm: t for t in expand(load_suite_file(write(tmp_path, data)))}
    assert trials["m2po"].config.params["tau"] == 0.02 and dict(trials["grpo"].config.params) == {}


def test_no_grid_is_one_trial_per_seed(tmp_path):
    trials = expand(load_suite_file(write(tmp_path, {"suite": "one", "base": {"algorithm": "tis"}, "seeds": [0, 1]})))
    assert [t.trial_id for t in trials] == ["s0", "s1"] and trials[0].config.algorithm == "tis"


def test_select(tmp_path):
    trials = expand(load_suite_file(write(tmp_path, suite_dict())))
    assert select(trials, "algorithm=gmc_grpo,delay=16,seed=0").trial_id == "gmc_grpo-d16-e0.2-g8-s0"
    assert select(trials, "algo=grpo, delay=0, seed=1").trial_id == "grpo-d0-e0.2-g8-s1"
    assert select(trials, "id=grpo-d16-e0.2-g8-s1").params["seed"] == 1
    assert select(trials, "algorithm=grpo,delay=16,seed=0,train.steps=10").trial_id == "grpo-d16-e0.2-g8-s0"
    with pytest.raises(ConfigError, match="matches 4 trials"):
        select(trials, "algorithm=grpo")
    with pytest.raises(ConfigError, match="matches 0 trials"):
        select(trials, "algorithm=grpo,delay=3,seed=0")
    with pytest.raises(ConfigError, match="is not key=value"):
        select(trials, "grpo")


def test_suite_keeps_source_and_hash(tmp_path):
    path = write(tmp_path, suite_dict())
    suite = load_suite_file(path)
    assert suite.source == path.read_text() and len(suite.sha256) == 64


# ---------------------------------------------------------------- bad suite files

BAD = [
    ("unknown-top-key", suite_dict(grids={}), "unknown key 'grids'"),
    ("missing-base", {"suite": "x"}, "missing key 'base'"),
    ("unknown-base-key", suite_dict(base={**BASE, "trian": {}}), "base.trian: unknown key"),
    ("unknown-nested-key", suite_dict(base={"train": {"stepz": 3}}), "base.train.stepz: unknown key"),
    ("empty-grid-axis", suite_dict(grid={"algorithm": ["grpo"], "delay": []}), "grid.delay: expected a non-empty list"),
    ("grid-axis-not-list", suite_dict(grid={"delay": 4}), "grid.delay: expected a non-empty list"),
    ("grid-not-mapping", suite_dict(grid=["delay"]), "grid: expected a mapping"),
    ("duplicate-values", suite_dict(grid={"delay": [0, 4, 4]}), "grid.delay: duplicate values"),
    ("seed-in-grid", suite_dict(grid={"seed": [0, 1]}), "grid.seed: list seeds under the top-level key 'seeds'"),
    ("duplicate-seeds", suite_dict(seeds=[0, 1, 0]), "seeds: duplicate values"),
    ("seeds-not-ints", suite_dict(seeds=["a"]), "seeds: expected a non-empty list of integers"),
    ("unknown-estimator", suite_dict(grid={"algorithm": ["grpo", "ppo"]}), "algorithm: 'ppo' is not valid"),
    ("unknown-estimator-param", suite_dict(grid={"algorithm": ["m2po"]}, base={**BASE, "params": {"tua": 1}}),
     "params: estimator 'm2po' has no parameter 'tua'"),
    ("wrong-type", suite_dict(base={"train": {"steps": "ten"}}), "base.train.steps: expected int"),
    ("wrong-type-grid", suite_dict(grid={"group_size": ["eight"]}), "group_size: expected int"),
    ("negative-delay", suite_dict(grid={"delay": [0, -4]}), "delay: must be >= 0"),
    ("group-size-1", suite_dict(grid={"group_size": [1]}), "group_size: must be >= 2"),
    ("eps-0", suite_dict(grid={"eps": [0]}), "eps: must be > 0"),
    ("steps-0", suite_dict(base={"train": {"steps": 0}}), "train.steps: must be > 0"),
    ("unknown-task", suite_dict(base={"task": {"name": "mnist"}}), "task.name: 'mnist' is not valid"),
    ("bad-yaml", "suite: x\nbase: {train: [\n", "not valid YAML: line"),
    ("not-a-mapping", "- just\n- a list\n", "a suite file must be a mapping"),
    ("bad-suite-name", suite_dict(suite="my suite/1"), "suite: 'my suite/1' is not a valid name"),
    ("bad-version", suite_dict(version="one"), "version: expected an integer"),
    ("overrides-unused-estimator", suite_dict(overrides={"tis": {"train.lr": 1e-5}}),
     "overrides.tis: no trial of the suite uses this estimator"),
    ("overrides-scope", suite_dict(overrides_scope="delayed"), "overrides_scope: expected one of all, stale"),
    ("overrides-not-mapping", suite_dict(overrides={"grpo": 1e-5}), "overrides: expected a mapping"),
    ("bad-override-key", suite_dict(overrides={"grpo": {"train.lrr": 1e-5}}), "base.train.lrr: unknown key"),
    ("bad-resources", suite_dict(resources={"cpu": 0}), "resources: cpu must be > 0"),
    ("unknown-resources-key", suite_dict(resources={"cpus": 2}), "resources.cpus: unknown key"),
    ("bad-max-concurrent", suite_dict(resources={"max_concurrent": 0}), "resources.max_concurrent: must be >= 1"),
    ("bad-max-failures", suite_dict(resources={"max_failures": -2}), "resources.max_failures: must be between 0 and 10"),
    ("colliding-ids", suite_dict(grid={"eps": [0.2, "0.2"]}), "get the same id"),
    ("notes-not-string", suite_dict(notes=["a"]), "notes: expected a string"),
    # every section is the schema's (harness/config/suite.py), checked by `stalebench check`, not after the run
    ("report-unknown-key", suite_dict(report={"colapse": {}}), "report.colapse: unknown key; valid keys: baseline"),
    ("report-bad-rule", suite_dict(report={"collapse": {"patience": 0}}), "report.collapse.patience must be an integer"),
    ("report-unknown-rule", suite_dict(report={"collapse": {"patiense": 2}}), "report.collapse: unknown collapse rule"),
    ("report-foreign-baseline", suite_dict(report={"baseline": "tis"}), "report.baseline: 'tis' is not an estimator of"),
    ("report-figures-list", suite_dict(report={"figures": ["accuracy"]}), "report.figures: expected a mapping of figure names"),
    ("tune-reversed-range", suite_dict(tune={"param": "train.lr", "low": 1e-3, "high": 1e-5}), "need 0 < low < high"),
    ("tune-unknown-key", suite_dict(tune={"param": "train.lr", "low": 1e-5, "high": 1e-3, "trails": 2}),
     "tune.trails: unknown key"),
    ("tune-bound-refused", suite_dict(tune={"param": "train.temperature", "low": 1e-5, "high": 1e-3},
                                      base={**BASE, "train": {**BASE["train"], "temperature": "x"}}),
     "base.train.temperature: expected float"),
    # what a trial kind cannot honour (kinds.py): a lab trial takes one update per batch
    ("lab-two-updates", suite_dict(base={**BASE, "lab": {"measure_groups": 0}, "train": {**BASE["train"],
                                                                                       "minibatches": 2}}),
     "train.passes, train.minibatches: a lab trial takes one optimizer update per batch"),
    ("lab-prox-logp", suite_dict(base={**BASE, "lab": {"measure_groups": 0}, "train": {**BASE["train"],
                                                                                      "prox_logp": "loglinear"}}),
     "train.prox_logp: a lab trial takes π_prox = π_θ (one update per batch); remove train.prox_logp"),
]


@pytest.mark.parametrize("name,data,needle", BAD, ids=[b[0] for b in BAD])
def test_bad_suite_is_one_line_naming_the_key(tmp_path, name, data, needle):
    with pytest.raises(ConfigError) as err:
        load_suite_file(write(tmp_path, data))
    message = str(err.value)
    assert needle in message
    assert "\n" not in message and len(message) < 600


def test_missing_suite_file(tmp_path):
    with pytest.raises(ConfigError, match="no such suite file"):
        load_suite_file(tmp_path / "nope.yaml")


def test_a_grid_over_max_trials_is_one_line(tmp_path):
    # 2 algorithms x 2 delays x 2 seeds = 8 trials, over a limit of 7
    with pytest.raises(ConfigError) as err:
        load_suite_file(write(tmp_path, suite_dict()), max_trials=7)
    assert "the grid has 8 trials, more than the limit 7" in str(err.value)


def test_parse_suite_is_pure():
    suite = parse_suite(suite_dict(), "inline")
    assert suite.name == "unit" and len(expand(suite)) == 8


CLI_CASES = ["unknown-estimator", "bad-yaml"]   # each is a fresh interpreter importing torch: keep few


@pytest.mark.parametrize("name", CLI_CASES)
def test_cli_bad_suite_exit_2_one_line_nothing_written(tmp_path, name):
    data, needle = next((d, n) for b, d, n in BAD if b == name)
    path = write(tmp_path, data, "bad.yaml")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(path)], check=False, cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "results").exists()


# ---------------------------------------------------------------- schema, kinds


def test_the_suite_schema_imports_no_torch():
    """The schema (and so the report's reading of suite.yaml) parses a suite with every section without torch."""
    code = ("import sys; from harness.config.suite import read_suite_yaml; s = read_suite_yaml('suites/tune-lr.yaml'); "
            "assert s.tune is not None and s.report.baseline; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'algorithms', 'ray')))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_parallel_trials_is_one_count_of_what_fits():
    from harness.config.suite import Resources

    assert Resources(cpu=2).parallel_trials(7) == 3                        # 7 // 2
    assert Resources(cpu=4).parallel_trials(2) == 1                        # none fits: still one at a time
    assert Resources(cpu=1, max_concurrent=2).parallel_trials(16) == 2     # capped
    assert Resources(cpu=1, gpu=1).parallel_trials(16, gpus=3) == 3        # the GPUs bind: 3 // 1
    assert Resources(cpu=1, gpu=1).parallel_trials(16) == 16               # GPUs unknown (the dry run): CPUs
    assert Resources(cpu=1).parallel_trials(8, workers=3) == 2             # 8 // (1 x 3)


def test_trial_kinds_answer_for_their_configs():
    from harness.config.run import build_run_config
    from harness.config.kinds import kind_of

    llm, lab = build_run_config(BASE), build_run_config({**BASE, "lab": {"measure_groups": 0}})
    assert (kind_of(llm).name, kind_of(lab).name) == ("llm", "lab")
    assert kind_of(llm).needs_base(llm) and not kind_of(lab).needs_base(lab)
    assert kind_of(llm).shares_on_policy and not kind_of(lab).shares_on_policy
    with pytest.raises(ConfigError, match="^train.workers: an estimator-lab trial runs in one process"):
        kind_of(lab).validate(build_run_config({**BASE, "lab": {"measure_groups": 0},
                                                "train": {**BASE["train"], "workers": 2}}))


def test_v2_companion_suites_configure_their_trials_as_the_reference_does():
    """A companion of reference-v2 (the field table) shares its base and tune sections, so a trial of an
    estimator configured there is configured as it would be in the reference (same resolved config); the
    updates table differs from it only in full passes per batch, the shared-lr table only in having no tuned lrs, the bases table only in its bases."""
    reference = load_suite_file(REPO / "suites" / "reference-v2.yaml")
    updates = load_suite_file(REPO / "suites" / "reference-v2-updates.yaml")
    assert updates.base["train"].pop("passes") == 2 and reference.base["train"]["passes"] == 1
    assert updates.base == {**reference.base, "train": {k: v for k, v in reference.base["train"].items()
                                                        if k != "passes"}}
    assert (updates.algorithms, updates.overrides) == (reference.algorithms, reference.overrides)
    bases = load_suite_file(REPO / "suites" / "reference-v2-bases.yaml")
    assert (bases.base, bases.algorithms, bases.overrides) == (reference.base, reference.algorithms, reference.overrides)
    assert "tiny-cumsum-v2a" not in bases.grid["model.base"] and bases.grid["delay"] == [0, max(reference.grid["delay"])]
    shared = load_suite_file(REPO / "suites" / "reference-v2-shared-lr.yaml")
    assert (shared.base, shared.algorithms, shared.overrides) == (reference.base, reference.algorithms, {})
    field = load_suite_file(REPO / "suites" / "reference-v2-field.yaml")
    assert field.base == reference.base
    assert replace(field.tune, seed=None) == replace(reference.tune, seed=None)
    assert field.tune.tune_seed(field) == reference.tune.tune_seed(reference) == 1007
    assert (field.overrides_scope, field.share_on_policy) == (reference.overrides_scope, reference.share_on_policy)
    assert set(field.algorithms).isdisjoint(reference.algorithms)
    followup = load_suite_file(REPO / "suites" / "reference-v2-followup.yaml")   # pre-registered: its lrs are the tuned ones
    assert followup.base == reference.base and followup.grid["delay"] == [max(reference.grid["delay"])]
    assert followup.overrides == {a: {**reference.overrides, **field.overrides}[a] for a in followup.algorithms}
    assert set(followup.seeds).isdisjoint({*reference.seeds, *field.seeds, reference.tune.tune_seed(reference)})


def test_the_v3_bridge_configures_its_trials_as_the_table_does_but_for_one_update_per_batch():
    """reference-v3-bridge (docs/benchmark-v3.md §7) is the table's base block with train.minibatches 1, the first
    three of its estimators at its largest delay, its seeds and its tuned lrs."""
    reference = load_suite_file(REPO / "suites" / "reference-v3.yaml")
    bridge = load_suite_file(REPO / "suites" / "reference-v3-bridge.yaml")
    assert bridge.base["train"].pop("minibatches") == 1 and reference.base["train"].pop("minibatches") == 4
    assert bridge.base == reference.base
    assert bridge.algorithms == reference.algorithms[:3] and bridge.grid["delay"] == [max(reference.grid["delay"])]
    assert bridge.seeds == reference.seeds and bridge.report == reference.report
    assert bridge.overrides == {a: reference.overrides[a] for a in bridge.algorithms}


def test_the_v3_second_base_suite_is_the_bridges_cells_at_k_4_on_the_second_accepted_base():
    """reference-v3-bases (docs/benchmark-v3.md §7, τ on the second base) is the table's base block but for
    model.base, which names an accepted v3 candidate other than the table's, with the bridge's estimators,
    delay, seeds and lrs."""
    reference = load_suite_file(REPO / "suites" / "reference-v3.yaml")
    bases = load_suite_file(REPO / "suites" / "reference-v3-bases.yaml")
    bridge = load_suite_file(REPO / "suites" / "reference-v3-bridge.yaml")
    second, first = bases.base["model"].pop("base"), reference.base["model"].pop("base")
    assert bases.base == reference.base
    candidates = [json.loads(line) for line in (REPO / "harness" / "bases" / "candidates.jsonl").read_text().splitlines()]
    accepted = [c["name"] for c in candidates if c["accepted"] and c["recipe"]["task"] == "cumsum-long"]
    assert accepted[:2] == [first, second]                    # §2: warm-up seeds in order, the first two accepted
    assert (bases.algorithms, bases.grid["delay"], bases.seeds, bases.report, bases.overrides) == \
        (bridge.algorithms, bridge.grid["delay"], bridge.seeds, bridge.report, bridge.overrides)


def test_the_v3_regime_on_the_second_base_is_the_design_runs_largest_delay_on_that_base():
    """regime-v3-bases (docs/benchmark-v3.md §3 on each accepted base) is design-v3 but for model.base, which is
    reference-v3-bases', and its delays, only the table's largest."""
    design = load_suite_file(REPO / "suites" / "design-v3.yaml")
    regime = load_suite_file(REPO / "suites" / "regime-v3-bases.yaml")
    second = load_suite_file(REPO / "suites" / "reference-v3-bases.yaml").base["model"]["base"]
    assert regime.base["model"].pop("base") == second and design.base["model"].pop("base") != second
    assert regime.base == design.base and regime.algorithms == design.algorithms == ["grpo"]
    table = load_suite_file(REPO / "suites" / "reference-v3.yaml")
    assert regime.grid["delay"] == [max(table.grid["delay"])] and regime.seeds == design.seeds


@pytest.mark.parametrize("slice_name, reference_name", [("quickstart.yaml", "reference.yaml"),
                                                        ("quickstart-v2.yaml", "reference-v2.yaml"),
                                                        ("quickstart-v3.yaml", "reference-v3.yaml")])
def test_a_quickstart_runs_its_references_own_trials(slice_name, reference_name):
    """The README's quickstart is a slice of a reference suite: each of its trials has a trial of the reference
    with the same id and the same resolved config but for a shorter train.steps (its first steps: reproduce
    --steps), so its rows can be read against the committed report."""
    from harness.reproduce import check_prefix

    reference = {t.trial_id: t for t in expand(load_suite_file(REPO / "suites" / reference_name))}
    trials = expand(load_suite_file(REPO / "suites" / slice_name))
    assert trials
    for t in trials:
        full = reference[t.trial_id]
        assert t.config.train.steps <= full.config.train.steps, t.trial_id
        same = replace(t.config, train=replace(t.config.train, steps=full.config.train.steps))
        assert same == full.config, t.trial_id
        if t.config.train.steps < full.config.train.steps:
            check_prefix(full, t)


def test_a_grid_over_the_trial_limit_is_one_line():
    """The refusal of --max-trials names the file, the count and the fix (it once raised a NameError)."""
    with pytest.raises(ConfigError, match=r"quickstart-v2\.yaml: the grid has 20 trials, more than the limit 1; "
                                          r"shrink the grid or raise the limit with --max-trials"):
        load_suite_file(Path(__file__).resolve().parents[1] / "suites" / "quickstart-v2.yaml", max_trials=1)


def test_tuning_at_a_delay_law_asks_for_an_integer_delay():
    """The tuning delay defaults to the grid's largest delay; a delay law has none, so tune.delay is required."""
    tune = {"param": "train.lr", "low": 1e-5, "high": 1e-3}
    law = {"dist": "geometric", "p": 0.5, "max": 4}
    suite = parse_suite({"suite": "t", "base": {}, "grid": {"delay": [0, 8]}, "tune": tune})
    assert suite.tune.tune_delay(suite) == 8
    suite = parse_suite({"suite": "t", "base": {}, "grid": {"delay": [0, law]}, "tune": tune})
    with pytest.raises(ConfigError, match="tune.delay: the suite's delays include a delay law or trace; set tune.delay"):
        suite.tune.tune_delay(suite)
    suite = parse_suite({"suite": "t", "base": {}, "grid": {"delay": [0, law]}, "tune": {**tune, "delay": 2}})
    assert suite.tune.tune_delay(suite) == 2
