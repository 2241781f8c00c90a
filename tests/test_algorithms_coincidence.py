"""The coincidence check: estimators whose gradients agree in a regime are grouped, others are not; the
family metadata of every registered estimator is well formed; `stalebench estimators` lists them all."""
from __future__ import annotations

import json

import pytest

from algorithms import CORRECTIONS, POLICIES, TRUST_REGIONS, describe, loss_names, register
from algorithms.coincidence import Regime, coinciding
from algorithms.registry import _REGISTRY


def test_one_update_per_batch_uncapped_decoupled_is_is_none():
    # With one update per batch π_prox = π_θ, so decoupled's clip is inactive and, uncapped, its weight
    # π_θ/π_b times −A ∇log π_θ is is_none's gradient. With AReaL's cap (5.0, the default) they differ.
    specs = {"decoupled uncapped": ("decoupled", 0.2, {"behavior_weight_cap": None}),
             "decoupled": ("decoupled", 0.2, {}), "is_none": ("is_none", 0.2, {}), "grpo": ("grpo", 0.2, {})}
    assert coinciding(specs, Regime(updates_per_batch=1)) == [["decoupled uncapped", "is_none"]]
    # With several updates π_prox ≠ π_θ: the PPO clip around π_prox acts and they part.
    assert coinciding(specs, Regime(updates_per_batch=2)) == []


def test_the_documented_coincidences_of_the_built_in_estimators():
    specs = {n: (n, 0.2, {}) for n in loss_names()}
    specs.update({"mis cap 5": ("mis", 0.2, {"cap": 5.0}), "mis [0.5, 5]": ("mis", 0.2, {"cap": 5.0, "cap_low": 0.5}),
                  "tis_seq cap 1.2": ("tis_seq", 0.2, {"cap": 1.2}),
                  "gspo 0.2": ("gspo", 0.2, {"eps_low": 0.2, "eps_high": 0.2})})
    groups = coinciding(specs, Regime(updates_per_batch=1))
    # verl's dppo_binary and dro are trust regions around π_prox = π_θ: with one update per batch, REINFORCE (naive)
    # decoupled_rs at its defaults is AReaL's token/mask/ratio/upper 5: decoupled's cap 5
    # gmc_grpo_prox's clip is inactive at one update per batch: gmc_grpo's gradient
    assert groups == [["decoupled", "decoupled_rs", "mis cap 5"], ["dppo_binary", "dro", "naive"],
                      ["gmc_grpo", "gmc_grpo_prox"], ["gspo 0.2", "luspo"], ["icepop", "mis [0.5, 5]"],
                      ["tic_is", "tis_seq cap 1.2"]]
    # Engine mismatch: decoupled and mis read π_rollout alike, is_none reads π_b; luspo and gspo read π_b alike
    # (vespo reads π_rollout too, and coincides with nothing); gmc_grpo_prox reads π_b as gmc_grpo does.
    assert coinciding(specs, Regime(engine_mismatch=True)) == [["decoupled", "decoupled_rs", "mis cap 5"],
                                                              ["dppo_binary", "dro", "naive"], ["gmc_grpo", "gmc_grpo_prox"],
                                                              ["gspo 0.2", "luspo"], ["icepop", "mis [0.5, 5]"]]


@pytest.mark.parametrize("name", loss_names())
def test_every_estimator_declares_its_family_and_source(name):
    d = describe(name)
    assert d["trust_region"] in TRUST_REGIONS and d["correction"] in CORRECTIONS, d
    assert d["reads"] and all(p in POLICIES for p in d["reads"].split("+")) and "theta" in d["reads"], d
    assert d["source"] and d["source"] != "unspecified", d


def test_a_plugin_without_a_family_is_unspecified_and_a_bad_family_is_refused():
    @register("test_plain")
    def plain(inp, ctx, *, eps):
        return -inp.advantages[:, None] * inp.logp, {}
    try:
        d = describe("test_plain")
        assert (d["trust_region"], d["correction"], d["reads"], d["source"]) == ("unspecified",) * 4
    finally:
        del _REGISTRY["test_plain"]
    with pytest.raises(ValueError, match="trust_region 'soft' is not one of"):
        register("test_bad", trust_region="soft")(plain)
    with pytest.raises(ValueError, match="reads 'old'"):
        register("test_bad", reads=("theta", "old"))(plain)
    assert "test_bad" not in _REGISTRY


def test_the_cli_lists_every_estimator(capsys):
    from harness.cli import main
    assert main(["estimators", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["name"] for r in rows] == loss_names()
    bapo = next(r for r in rows if r["name"] == "bapo")
    assert bapo["params"]["rho0"] == 0.5 and bapo["trust_region"] == "token-clip" and not bapo["uses_eps"]
    assert main(["estimators"]) == 0
    assert "decoupled\n  family: token-clip / token-is / reads theta+prox+rollout" in capsys.readouterr().out


def test_a_suites_coincidences_are_written_read_and_marked_in_the_report(tmp_path, capsys):
    """harness.suite.coincidences at check/run time (the suite's configurations at delay > 0), then the report's
    reading of coincidences.json and of each trial's recorded family, without the estimators imported."""
    import yaml

    from harness.suite import coincidences
    from harness.report import families
    from harness.store import trialdir
    from harness.report.load import load_results
    from tests.fixtures.synthetic_results import provenance, write_suite
    from harness.config.expand import expand, load_suite_file

    data = {"suite": "coin", "version": 1,
            "base": {"task": {"name": "addrev", "eval_size": 32}, "train": {"steps": 10, "prompts_per_step": 4}},
            "grid": {"algorithm": ["decoupled", "is_none", "grpo"], "delay": [0, 16]}, "seeds": [0],
            "overrides": {"decoupled": {"params.behavior_weight_cap": None}}}
    path = tmp_path / "coin.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    record = coincidences.compute(expand(load_suite_file(path)))
    assert [r["groups"] for r in record["regimes"]] == [[["decoupled", "is_none"]]]
    assert coincidences.describe(record) == ["coincide (1 update(s) per batch, token-mean): decoupled = is_none"]
    from harness.cli import main
    assert main(["check", str(path)]) == 0                    # `stalebench check` prints the group
    assert "coincide (1 update(s) per batch, token-mean): decoupled = is_none" in capsys.readouterr().out

    suite_dir = write_suite(tmp_path / "results", "coin", ("decoupled", "is_none", "grpo"), (16,), (0,))
    coincidences.write(suite_dir, record)
    assert coincidences.read(suite_dir) == {"decoupled": ["is_none"], "is_none": ["decoupled"]}
    for tid in [d.name for d in suite_dir.iterdir() if d.is_dir() and d.name.startswith("grpo")]:
        prov = provenance(estimator={"name": "grpo", "trust_region": "token-clip", "correction": "token-is",
                                     "reads": "theta+behavior", "source": "paper"})
        (suite_dir / tid / trialdir.PROVENANCE).write_text(json.dumps(prov))
    res = load_results(suite_dir)
    board = families.annotate(res.trials, res)
    by = {r["algorithm"]: r for r in board.to_dict("records")}
    assert by["grpo"]["family"] == "token-clip / token-is / theta+behavior" and by["is_none"]["family"] == ""
    assert by["decoupled"]["coincides_with"] == "is_none" and by["grpo"]["coincides_with"] == ""
    (suite_dir / coincidences.FILE).write_text("[not an object")          # unreadable: no marks, no error
    assert coincidences.read(suite_dir) == {}
