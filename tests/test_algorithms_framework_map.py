"""The translation table (algorithms/framework_map.py) and the coincidences of the field's newest corrections.

Every row names a registered estimator (or none, with a note) and parameters it takes; every golden row names a
case of tests/data/golden/ run with that estimator and those parameters; every coincidence a row cites is a test
here; docs/framework-map.md is the table as generated; `stalebench estimators --from F` prints it.
The coincidence tests use algorithms/coincidence.py's stale probes (one update per batch: π_prox = π_θ; two:
π_prox ≠ π_θ; engine mismatch: π_rollout ≠ π_b).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from algorithms import check_params, loss_names
from algorithms.coincidence import Regime, coinciding, without_gradient
from algorithms.framework_map import FRAMEWORKS, ROWS, markdown, rows

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden"
PLACEHOLDER = "<"                                   # <lo>, <hi>, <option>, <t>: the framework's own values


def concrete(params: dict) -> dict:
    return {k: v for k, v in params.items() if not (isinstance(v, str) and v.startswith(PLACEHOLDER))}


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.framework}:{r.option}" for r in ROWS])
def test_each_row_names_an_estimator_its_parameters_and_what_backs_it(row):
    assert row.framework in FRAMEWORKS
    if row.estimator is None:
        assert row.note and not row.params, row            # an option stalebench does not compute says why
        return
    assert row.estimator in loss_names()
    check_params(row.estimator, row.params)
    assert row.backed_by.startswith(("golden: ", "coincidence: ")), row
    for cite in [part for part in row.backed_by.split("; ") + [row.note] if "golden: " in part]:
        file, case_name = cite.split("golden: ", 1)[1].split("#", 1)
        case_name = case_name.removesuffix(" (and one case per option)").removesuffix(" (and one case per setting)")
        cases = {c["case"]: c for c in json.loads((GOLDEN / file).read_text())["cases"]}
        case = cases[case_name]
        assert case["estimator"] == row.estimator, (row, case["estimator"])
        assert concrete(row.params).items() <= case["params"].items(), (row.params, case["params"])
    for cite in [part for part in (row.backed_by, row.note) if "coincidence: " in part]:
        test = cite.split("::")[1].split(")")[0].split()[0]
        assert callable(globals().get(test)), test


def test_every_framework_has_rows_and_unknown_ones_are_refused():
    assert all(rows(fw) for fw in FRAMEWORKS)
    with pytest.raises(ValueError, match="unknown framework 'foo'; valid: verl, areal"):
        rows("foo")


def test_the_docs_page_is_the_generated_table():
    assert (ROOT / "docs" / "framework-map.md").read_text() == markdown(), \
        "docs/framework-map.md is stale: python -m algorithms.framework_map > docs/framework-map.md"


def test_the_cli_prints_a_frameworks_rows(capsys):
    from harness.cli import main
    assert main(["estimators", "--from", "verl"]) == 0
    out = capsys.readouterr().out
    assert "algorithm.rollout_correction preset decoupled_geo_rs\n  -> rollout_rs (defaults)\n" \
           "  backed by: golden: verl_rollout_corr.json#decoupled_geo_rs" in out
    assert main(["estimators", "--from", "megatron"]) == 2
    assert capsys.readouterr().err.strip() == ("stalebench: unknown framework 'megatron'; valid: verl, areal, trl, "
                                               "openrlhf, nemo-rl, skyrl, prime-rl")


KEEP_ALL = {"rs": None}
GEO_099_101 = "0.9900990099009901_1.0101010101010102"        # verl's k1 bounds are on 1/g: [1/1.01, 1/0.99]


def test_verl_presets_and_the_field():
    specs = {
        "rollout_rs": ("rollout_rs", 0.2, {}), "rollout_rs_bypass": ("rollout_rs_bypass", 0.2, {}),
        "decoupled_token_is": ("rollout_rs", 0.2, {"rs": None, "is_level": "token"}), "tis": ("tis", 0.2, {}),
        "decoupled_seq_is": ("rollout_rs", 0.2, {"rs": None, "is_level": "sequence"}), "tis_seq": ("tis_seq", 0.2, {}),
        "rollout_rs no rejection": ("rollout_rs", 0.2, KEEP_ALL), "naive": ("naive", 0.2, {}),
        "bypass_ppo_clip": ("rollout_rs_bypass", 0.2, KEEP_ALL), "grpo dual_clip 3": ("grpo", 0.2, {"dual_clip": 3.0}),
        "bypass pg no rejection": ("rollout_rs_bypass", 0.2, {**KEEP_ALL, "loss": "pg"}),
        "token_k1 0.5_2.0 token IS, all tokens": ("rollout_rs", 0.2, {"rs": "token_k1", "rs_threshold": "0.5_2.0",
                                                                      "is_level": "token", "normalize": "all"}),
        "mis [0.5, 2]": ("mis", 0.2, {"cap": 2.0, "cap_low": 0.5}),
        "token_k1 0.2_2.0 token IS 5, all tokens": ("rollout_rs", 0.2, {"rs": "token_k1", "rs_threshold": "0.2_2.0",
                                                                        "is_level": "token", "is_threshold": 5.0,
                                                                        "normalize": "all"}),
        "icepop": ("icepop", 0.2, {}),
        "decoupled_token_icepop": ("rollout_rs", 0.2, {"rs": None, "is_level": "token", "is_threshold": "0.5_5.0"}),
        "seq_sum_k1 0.5_2.0 seq IS, all tokens": ("rollout_rs", 0.2, {"rs": "seq_sum_k1", "rs_threshold": "0.5_2.0",
                                                                      "is_level": "sequence", "normalize": "all"}),
        "mis_seq [0.5, 2]": ("mis_seq", 0.2, {"cap": 2.0, "cap_low": 0.5}),
    }
    one = [["bypass pg no rejection", "naive", "rollout_rs no rejection"], ["bypass_ppo_clip", "grpo dual_clip 3"],
           ["decoupled_seq_is", "tis_seq"], ["decoupled_token_is", "tis"],
           ["decoupled_token_icepop", "icepop", "token_k1 0.2_2.0 token IS 5, all tokens"], ["mis [0.5, 2]", "token_k1 0.5_2.0 token IS, all tokens"],
           ["mis_seq [0.5, 2]", "seq_sum_k1 0.5_2.0 seq IS, all tokens"]]
    assert coinciding(specs, Regime(updates_per_batch=1)) == sorted(one)
    # verl's token_k1 keeps 1/hi ≤ π_prox/π_rollout ≤ 1/lo: [0.5, 2] is symmetric, [0.2, 2] keeps [0.5, 5] (icepop's)
    # Several updates: bypass mode reads π_θ, not π_prox, so its REINFORCE form parts from naive; verl's dual clip
    # (ratio > 3 against π_prox) does not act on these probes, so the decoupled presets keep their partners.
    two = [g for g in one if g[0] != "bypass pg no rejection"] + [["naive", "rollout_rs no rejection"]]
    assert coinciding(specs, Regime(updates_per_batch=2)) == sorted(two)
    # Geo-RS at 0.999_1.001 (both defaults) rejects every response of these stale probes: no gradient at all.
    for regime in (Regime(1), Regime(2), Regime(engine_mismatch=True)):
        assert without_gradient(specs, regime) == ["rollout_rs", "rollout_rs_bypass"]


def test_seq_mask_tis_and_skyrl_and_the_field():
    big = 1e9                                                 # a cap that never binds
    specs = {
        "seq_mask_tis": ("seq_mask_tis", 0.2, {}),
        "geo_mask [0.5, 5] token TIS uncapped": ("geo_mask", 0.2, {"geo_mask_low": 0.5, "geo_mask_high": 5.0,
                                                                   "tis_ratio_type": "token", "token_tis_ratio_clip_high": big}),
        "seq_mask_tis [0.99, 1.01]": ("seq_mask_tis", 0.2, {"cap_low": 0.99, "cap": 1.01}),
        "geo_mask token TIS uncapped": ("geo_mask", 0.2, {"tis_ratio_type": "token", "token_tis_ratio_clip_high": big}),
        "rollout_rs seq_mean_k1 token IS uncapped, all tokens": ("rollout_rs", 0.2, {
            "rs": "seq_mean_k1", "rs_threshold": GEO_099_101, "is_level": "token", "is_threshold": big, "normalize": "all"}),
        "geo_mask no mask": ("geo_mask", 0.2, {"sequence_mask_metric": None}), "naive": ("naive", 0.2, {}),
        "geo_mask token TIS": ("geo_mask", 0.2, {"sequence_mask_metric": None, "tis_ratio_type": "token"}),
        "tis": ("tis", 0.2, {}),
        "geo_mask token mask [0.5, 2] + uncapped TIS": ("geo_mask", 0.2, {
            "sequence_mask_metric": None, "token_mask_low": 0.5, "token_mask_high": 2.0, "tis_ratio_type": "token",
            "token_tis_ratio_clip_high": big}),
        "mis [0.5, 2]": ("mis", 0.2, {"cap": 2.0, "cap_low": 0.5}),
        "geo_mask product [0.5, 2] + uncapped seq TIS": ("geo_mask", 0.2, {
            "sequence_mask_metric": "product", "tis_ratio_type": "sequence", "sequence_tis_ratio_clip_high": big}),
        "mis_seq [0.5, 2]": ("mis_seq", 0.2, {"cap": 2.0, "cap_low": 0.5}),
    }
    one = [["geo_mask [0.5, 5] token TIS uncapped", "seq_mask_tis"],
           ["geo_mask no mask", "naive"], ["geo_mask product [0.5, 2] + uncapped seq TIS", "mis_seq [0.5, 2]"],
           ["geo_mask token TIS", "tis"], ["geo_mask token TIS uncapped",
                                           "rollout_rs seq_mean_k1 token IS uncapped, all tokens", "seq_mask_tis [0.99, 1.01]"],
           ["geo_mask token mask [0.5, 2] + uncapped TIS", "mis [0.5, 2]"]]
    assert coinciding(specs, Regime(updates_per_batch=1)) == one
    assert coinciding(specs, Regime(engine_mismatch=True)) == one
    # Two updates: the ±1% geometric window rejects every probe response (π_prox is then further from π_rollout)
    assert without_gradient(specs, Regime(updates_per_batch=2)) == [
        "geo_mask token TIS uncapped", "rollout_rs seq_mean_k1 token IS uncapped, all tokens", "seq_mask_tis [0.99, 1.01]"]


def test_check_names_a_configuration_without_gradient(tmp_path):
    """A suite running verl's Geo-RS at its shipped bounds: `stalebench check`'s coincidence record names it."""
    import yaml

    from harness.config.expand import expand, load_suite_file
    from harness.suite import coincidences

    data = {"suite": "geo", "version": 1,
            "base": {"task": {"name": "addrev", "eval_size": 32}, "train": {"steps": 10, "prompts_per_step": 4}},
            "grid": {"algorithm": ["rollout_rs", "grpo", "naive"], "delay": [16]}, "seeds": [0]}
    path = tmp_path / "geo.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    record = coincidences.compute(expand(load_suite_file(path)))
    assert [r["without_gradient"] for r in record["regimes"]] == [["rollout_rs"]]
    assert [r["groups"] for r in record["regimes"]] == [[]]
    assert coincidences.describe(record) == [
        "no gradient on the stale probes (1 update(s) per batch, token-mean; every token rejected): rollout_rs"]


@pytest.mark.parametrize("name, params, message", [
    ("rollout_rs", {"rs": "seq_mean_k4"}, "rollout_rs: rs 'seq_mean_k4' is not a comma-separated list of token_k1"),
    ("rollout_rs", {"rs": "seq_mean_k3", "rs_threshold": "0.1_0.2"},
     "rollout_rs: rs_threshold '0.1_0.2' for seq_mean_k3 must be a number"),
    ("rollout_rs", {"rs": "token_k1,seq_mean_k3", "rs_threshold": "1,2,3"},
     "rollout_rs: rs_threshold '1,2,3' needs one value or one per rs option (2)"),
    ("rollout_rs", {"rs": "token_k1", "rs_threshold": None}, "rollout_rs: rs 'token_k1' needs an rs_threshold"),
    ("rollout_rs", {"is_level": "token", "is_threshold": "2_1"}, "rollout_rs: is_threshold '2_1': bounds must be positive"),
    ("rollout_rs", {"normalize": "some"}, "rollout_rs: normalize must be one of kept, all; got 'some'"),
    ("rollout_rs_bypass", {"loss": "reinforce"}, "rollout_rs_bypass: loss must be one of ppo_clip, pg"),
    ("geo_mask", {"sequence_mask_metric": "arith"}, "geo_mask: sequence_mask_metric must be geometric, product or None"),
    ("decoupled_rs", {"metric": "k3"}, "decoupled_rs: metric must be one of ratio, kl_k1, kl_k2, kl_k3"),
    ("dppo_binary", {"divergence": "js"}, "dppo_binary: divergence must be one of tv, kl"),
    ("dro", {"beta": 0.0}, "dro: beta must be > 0"),
    ("seq_mask_tis", {"cap_low": 6.0}, "seq_mask_tis: cap_low must be >= 0 and below cap"),
])
def test_bad_parameters_are_one_line_errors_naming_the_fix(name, params, message):
    from algorithms.testing import contract_batch
    from algorithms import compute_loss
    with pytest.raises(ValueError) as err:
        compute_loss(name, contract_batch(), eps=0.2, **params)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize("name", ["rollout_rs", "rollout_rs_bypass"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_batch_normalized_is_is_a_step_statistic(name, level):
    """verl's rollout_is_batch_normalize divides by a mean over the batch: micro-batches must see the step's."""
    from algorithms.testing import check_micro_batch_invariance, contract_batch
    from algorithms import compute_loss
    params = {"rs": None, "is_level": level, "is_batch_normalize": True, **({"loss": "pg"} if "bypass" in name else {})}
    check_micro_batch_invariance(name, "token-mean", **params)
    on = compute_loss(name, contract_batch(spread=0.6), eps=0.2, **params).metrics["rs/is_weight_mean"]
    off = compute_loss(name, contract_batch(spread=0.6), eps=0.2, **{**params, "is_batch_normalize": False}).metrics
    assert on != pytest.approx(off["rs/is_weight_mean"])             # the normalization acts on this batch
