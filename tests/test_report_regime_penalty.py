"""Each cell's own regime, the staleness penalty and its pair tests, and the leave-one-seed-out marks beside
the standings, on hand-made trials with the expected numbers worked out in comments."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.report import penalty, regime, resolve, tables
from harness.report.load import load_results
from tests.fixtures.synthetic_results import write_trial
from tests.test_report_cases import suite_dir

KEYS = ("is/traj_abs_log_ratio_q50", "is/traj_abs_log_ratio_q90", "is/traj_ess_frac", "is/group_over_cap_frac",
        "policy/kl_behavior")


def _trial(d: Path, tid: str, algorithm: str, delay: int, seed: int, late: list[float], stale: float,
           finals: tuple[float, float] = (0.5, 0.6), cap_scale: list[float] | None = None) -> None:
    """Four steps: steps 1 and 2 log 100 for every regime metric (the first half, never read), steps 3 and 4
    log late[0] and late[1]; every step logs stale/mean STALE and stale/max STALE + 0.5 (two minibatches a
    batch: staleness delay..delay + 1)."""
    rows = []
    for s in range(1, 5):
        v = 100.0 if s <= 2 else late[s - 3]
        row = {"step": s, "loss/value": 0.1, "stale/mean": stale, "stale/max": stale + 0.5, **{k: v for k in KEYS}}
        if cap_scale is not None:
            row["gmc/scale_mean"] = 100.0 if s <= 2 else cap_scale[s - 3]
        rows.append(row)
    write_trial(d, {"trial_id": tid, "algorithm": algorithm, "delay": delay, "seed": seed}, rows,
                [{"step": 0, "eval/acc": finals[0], "eval/n": 500}, {"step": 4, "eval/acc": finals[1], "eval/n": 500}],
                {"status": "completed", "step": 4, "error": None, "diverged_step": None})


def test_each_cell_reports_the_mean_over_its_trials_of_the_second_half(tmp_path):
    d = suite_dir(tmp_path)
    _trial(d, "c0", "gmc_grpo", 8, 0, [0.2, 0.4], 8.5, cap_scale=[0.9, 1.0])   # trial means 0.3, scale 0.95
    _trial(d, "c1", "gmc_grpo", 8, 1, [0.5, 0.7], 8.5, cap_scale=[0.8, 0.8])   # trial means 0.6, scale 0.8
    _trial(d, "g0", "grpo", 8, 0, [1.0, 2.0], 8.5)                              # 1.5; logs no cap scale
    _trial(d, "z0", "grpo", 0, 0, [0.0, 0.1], 0.5)                              # delay 0, staleness 0..1
    a = tables.analyse(load_results(d))
    r = regime.cell_regime(load_results(d).metrics, a.cell_trials, ["slice", "algorithm", "delay"])
    r = r.set_index(["algorithm", "delay"])
    gmc = r.loc[("gmc_grpo", 8)]
    assert gmc["trials"] == 2
    assert gmc["median_abs_log_ratio"] == pytest.approx((0.3 + 0.6) / 2)       # 0.45
    assert gmc["over_cap"] == pytest.approx(0.45) and gmc["kl_behavior"] == pytest.approx(0.45)
    assert gmc["cap_scale"] == pytest.approx((0.95 + 0.8) / 2)                 # 0.875
    assert r.loc[("grpo", 8), "median_abs_log_ratio"] == pytest.approx(1.5)
    assert r.loc[("grpo", 8), "cap_scale"] != r.loc[("grpo", 8), "cap_scale"]   # NaN: grpo applies no cap
    # stale/mean after the warm-up (step > delay / k, k = 1 here): delay 8 over 4 steps has none, so it is NaN
    # there; delay 0: 0.5
    assert r.loc[("grpo", 0), "stale_mean"] == pytest.approx(0.5) and r.loc[("grpo", 0), "stale_max"] == 1.0
    assert regime.staleness_label(0, 0.5, 1.0) == "0 (staleness 0–1, mean 0.5)"
    assert regime.staleness_label(0, 1.5, 3.0) == "0 (staleness 0–3, mean 1.5)"
    assert regime.staleness_label(32, 32.0, 32.0) == "32"                       # one update per batch


def test_the_report_prints_the_regime_first_and_writes_it_to_results_json(tmp_path):
    from harness.report import build_report

    d = suite_dir(tmp_path)
    for seed in (0, 1):
        _trial(d, f"c{seed}", "gmc_grpo", 8, seed, [0.2, 0.4], 8.5, cap_scale=[0.9, 1.0])
        _trial(d, f"g{seed}", "grpo", 8, seed, [1.0, 2.0], 8.5)
    index = build_report(d, tmp_path / "out")
    page = index.read_text()
    assert page.index("Each cell&#39;s regime") < page.index('id="leaderboard"')
    bundle = json.loads((tmp_path / "out" / "results.json").read_text())
    cells = {(c["algorithm"], c["delay"]): c for c in bundle["cell_regime"]}
    assert cells[("gmc_grpo", 8)]["median_abs_log_ratio"] == pytest.approx(0.3)
    assert cells[("grpo", 8)]["cap_scale"] is None


def _cells(d: Path, algorithm: str, delay: int, finals: dict[int, float]) -> None:
    for seed, acc in finals.items():
        _trial(d, f"{algorithm}-d{delay}-s{seed}", algorithm, delay, seed, [0.1, 0.1], float(delay), (0.3, acc))


def test_matched_seeds_give_a_paired_penalty_and_a_permutation_test(tmp_path):
    d = suite_dir(tmp_path)
    _cells(d, "a", 0, {0: 0.60, 1: 0.62, 2: 0.58})
    _cells(d, "a", 8, {0: 0.50, 1: 0.55, 2: 0.45})     # per seed 0.10, 0.07, 0.13
    _cells(d, "b", 0, {0: 0.60, 1: 0.60, 2: 0.60})
    _cells(d, "b", 8, {0: 0.60, 1: 0.59, 2: 0.61})     # per seed 0.00, 0.01, -0.01
    found, tests = penalty.penalties(tables.analyse(load_results(d)).cell_trials)
    pa, pb = found
    assert (pa.estimator, pa.paired, pa.seeds) == ("a", True, 3)
    # mean 0.10, SD 0.03, t(0.975, 2) = 4.302653 -> half width 4.302653 * 0.03 / sqrt(3) = 0.074524
    assert (pa.penalty, pa.lo, pa.hi) == pytest.approx((0.10, 0.025476, 0.174524), abs=1e-6)
    assert pb.penalty == pytest.approx(0.0, abs=1e-12)
    (t,) = tests
    # 6 per-seed penalties split 3/3: C(6, 3) = 20 splits; only the observed one and its mirror are as far
    # apart as 0.10 -> p = 2/20; one pair, so Holm leaves it
    assert (t.a, t.b, t.method) == ("a", "b", "permutation")
    assert t.difference == pytest.approx(0.10) and t.p == pytest.approx(0.1) and t.p_holm == pytest.approx(0.1)
    assert not t.resolved


def _curve(d: Path, tid: str, algorithm: str, delay: int, seed: int, accs: tuple[float, ...],
           diverged_at: int | None = None, steps: tuple[int, ...] = (0, 2, 4)) -> None:
    """Evaluations at STEPS (default 0, 2, 4: T = 4, T/2 = 2) on 2,500 problems with accuracies ACCS; a
    diverged trial stops at DIVERGED_AT (the report scores it 0 from there)."""
    evals = [{"step": s, "eval/acc": a, "eval/n": 2500} for s, a in zip(steps, accs)
             if diverged_at is None or s < diverged_at]
    last = steps[-1]
    status = ({"status": "diverged", "step": diverged_at, "error": None, "diverged_step": diverged_at} if diverged_at
              else {"status": "completed", "step": last, "error": None, "diverged_step": None})
    write_trial(d, {"trial_id": tid, "algorithm": algorithm, "delay": delay, "seed": seed},
                [{"step": s, "loss/value": 0.1} for s in range(1, last + 1)], evals, status)


def test_the_horizon_rule_says_flat_or_still_rising_beside_each_penalty(tmp_path):
    from harness.report import horizon

    d = suite_dir(tmp_path)
    _curve(d, "a0", "a", 0, 0, (0.1, 0.50, 0.52))            # rises 0.02 and 0.00: mean 0.010
    _curve(d, "a1", "a", 0, 1, (0.1, 0.50, 0.50))            # mean acc(4) 0.51: SE sqrt(.51 * .49 / 2500) = 0.0099980
    _curve(d, "b0", "b", 0, 0, (0.1, 0.40, 0.41))            # rises 0.01 and -0.40 (diverged at 3: 0 at step 4)
    _curve(d, "b1", "b", 0, 1, (0.1, 0.40, 0.0), diverged_at=3)
    _curve(d, "c0", "c", 0, 0, (0.1, 0.30, 0.0), diverged_at=1)   # both diverged at step 1: 0 at 2 and 4
    _curve(d, "c1", "c", 0, 1, (0.1, 0.30, 0.0), diverged_at=1)
    _curve(d, "e0", "e", 0, 0, (0.1, 0.50, 0.60))            # one seed: no verdict
    _curve(d, "a8", "a", 8, 0, (0.1, 0.30, 0.30))            # delay 8: its curves are not read; a's penalty
    _curve(d, "a9", "a", 8, 1, (0.1, 0.30, 0.35))
    a = tables.analyse(load_results(d))
    found = {h.estimator: h for h in horizon.horizons(a.cell_trials, a.scored_evals)}
    assert sorted(found) == ["a", "b", "c"]
    ha, hb, hc = found["a"], found["b"], found["c"]
    assert (ha.delay, ha.last_step, ha.mid_step, ha.seeds) == (0.0, 4, 2, 2)
    assert ha.rise == pytest.approx(0.010) and ha.se == pytest.approx(0.0099980, abs=1e-7)
    assert not ha.flat and ha.words == "still rising at 4"  # 0.010 is not below 0.0099980
    assert hb.rise == pytest.approx((0.01 - 0.40) / 2) and hb.flat and hb.words == "falling at 4"
    assert (hc.rise, hc.se, hc.flat, hc.words) == (0.0, 0.0, True, "0 at 4 on every seed")
    costs, tests = penalty.penalties(a.cell_trials)
    (section,) = penalty.penalty_section(costs, tests, {}, list(found.values()))
    row = section.blocks[1]["table"]["rows"][0]
    assert row["estimator"] == "a" and row["curve at the reference delay"] == "still rising at 4 (rise +0.010, SE 0.010)"


def test_the_horizon_compares_the_last_evaluation_with_the_one_nearest_half_the_budget(tmp_path):
    from harness.report import horizon

    d = suite_dir(tmp_path)
    v4 = (0, 32, 64, 96, 128)                                # benchmark v4's evaluations: acc(128) - acc(64)
    _curve(d, "a0", "a", 0, 0, (0.1, 0.2, 0.40, 0.90, 0.41), steps=v4)
    _curve(d, "a1", "a", 0, 1, (0.1, 0.2, 0.40, 0.10, 0.41), steps=v4)   # rise 0.01 each; SE sqrt(.41 .59/2500) .0098
    (h,) = horizon.horizons(*(lambda a: (a.cell_trials, a.scored_evals))(tables.analyse(load_results(d))))
    assert (h.last_step, h.mid_step) == (128, 64) and h.rise == pytest.approx(0.01)
    assert h.se == pytest.approx(0.0098367, abs=1e-6) and h.words == "still rising at 128"


def test_unmatched_seeds_give_welch_intervals_and_a_welch_contrast(tmp_path):
    d = suite_dir(tmp_path)
    _cells(d, "c", 0, {0: 0.6, 1: 0.7})
    _cells(d, "c", 8, {2: 0.5, 3: 0.6})                # other seeds: not matched; penalty 0.1
    _cells(d, "e", 0, {0: 0.6, 1: 0.7})
    _cells(d, "e", 8, {0: 0.6, 1: 0.7})                # matched; penalty 0
    found, (t,) = penalty.penalties(tables.analyse(load_results(d)).cell_trials)
    pc = found[0]
    # Welch: each cell's s^2 = 0.005, s^2/n = 0.0025; SE = sqrt(0.005) = 0.070711, dof = 0.005^2 / (2 * 0.0025^2)
    # = 2, t(0.975, 2) = 4.302653 -> 0.1 -+ 4.302653 x 0.070711 = 0.1 -+ 0.304243
    assert not pc.paired and (pc.penalty, pc.lo, pc.hi) == pytest.approx((0.1, -0.204243, 0.404243), abs=1e-6)
    # contrast 0.1 - 0 = 0.1; variance 4 x 0.0025 = 0.01, SE 0.1, t = 1; dof = 0.01^2 / (4 x 0.0025^2 / 1) = 4;
    # two-sided p = 2 P(T_4 > 1) = 2 x 0.186950 = 0.373901
    assert t.method == "welch" and t.p == pytest.approx(0.373901, abs=1e-6)


def test_a_pair_kept_in_fewer_than_six_of_eight_tables_is_fragile():
    assert resolve.is_fragile(5, 8) and not resolve.is_fragile(6, 8) and not resolve.is_fragile(0, 0)
    s = resolve.Standing("", 64.0, "gmc_grpo", 0.58, "below", ("topr", "m2po"), None, 4,
                         (("topr", 8, 8), ("m2po", 3, 8)))
    assert s.answer == "below topr, m2po at delay 64"                          # unchanged, as results.json had it
    assert s.answer_loso == "below topr (8 of 8), m2po (3 of 8, fragile) at delay 64"
    assert s.fragile == ("m2po",)
    best = resolve.Standing("", 64.0, "topr", 0.74, "best", (), None, 2, (("grpo", 8, 8), ("m2po", 7, 8)))
    assert best.answer_loso == "best at delay 64 (resolved above all 2 others: grpo 8 of 8, m2po 7 of 8)"


def test_the_tolerance_section_reads_the_tuning_trials_and_marks_the_tuned_lr(tmp_path):
    import yaml

    from harness.report.tolerance import FIGURE, tolerance_sections

    d = suite_dir(tmp_path)
    suite = yaml.safe_load((d / "suite.yaml").read_text())
    (d / "suite.yaml").write_text(yaml.safe_dump({**suite, "overrides": {"grpo": {"train.lr": 2e-5}}}))
    _cells(d, "grpo", 8, {0: 0.5, 1: 0.5})
    tune = d / "tune"
    tune.mkdir()                                   # as `stalebench tune` leaves it: trials, no suite.yaml
    for lr, accs in ((1e-5, (0.40, 0.50)), (2e-5, (0.60, 0.70)), (4e-5, (0.0, 0.2))):
        for seed, acc in zip((1000, 1001), accs):
            write_trial(tune, {"trial_id": f"t-{lr:g}-{seed}", "algorithm": "grpo", "delay": 8, "seed": seed,
                               "train.lr": lr}, [{"step": 1, "loss/value": 0.1, "stale/mean": 8.0}],
                        [{"step": 0, "eval/acc": 0.3, "eval/n": 500}, {"step": 4, "eval/acc": acc, "eval/n": 500}],
                        {"status": "completed", "step": 4, "error": None, "diverged_step": None})
    (section,) = tolerance_sections(load_results(d), tmp_path)
    (row,) = section.blocks[2]["table"]["rows"]
    # means over the two seeds: (0.4 + 0.5)/2 = 0.45, (0.6 + 0.7)/2 = 0.65, (0 + 0.2)/2 = 0.1; 2e-5 is the suite's
    assert row["accuracy by lr (mean over seeds)"] == "1e-05: 0.450, 2e-05: 0.650 (tuned), 4e-05: 0.100"
    assert row["tuned lr"] == "2e-05" and (tmp_path / FIGURE).is_file()
    assert "6 tuning trials" in section.blocks[0]["text"]
    (tmp_path / "untuned").mkdir()
    assert tolerance_sections(load_results(d), tmp_path / "untuned") != []      # read from results/<suite>/tune
    shutil.rmtree(d / "tune")
    assert tolerance_sections(load_results(d), tmp_path / "untuned") == []      # no tuning anywhere: no section


def test_the_paper_table_says_what_its_delays_mean_at_several_minibatches():
    note = regime.staleness_note({0.0: "0 (staleness 0–3, mean 1.5)", 64.0: "64 (staleness 64–67, mean 65.5)"})
    assert note.endswith("delay 0 (staleness 0–3, mean 1.5); delay 64 (staleness 64–67, mean 65.5). Delay 0 here "
                         "is not on-policy.")
    assert regime.staleness_note({0.0: "0", 32.0: "32"}) == ""           # one update per batch: nothing to say


def test_print_readings_prints_a_reports_first_screen_from_its_results_json(tmp_path):
    import importlib.util

    from harness.report import build_report

    spec = importlib.util.spec_from_file_location("print_readings", Path(__file__).resolve().parents[1] / "scripts"
                                                  / "print_readings.py")
    pr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pr)
    d = suite_dir(tmp_path)
    _cells(d, "a", 0, {0: 0.60, 1: 0.62, 2: 0.58})
    _cells(d, "a", 8, {0: 0.50, 1: 0.55, 2: 0.45})     # the paired penalty of the test above: 0.10 [0.025, 0.175]
    build_report(d, tmp_path / "out")
    lines = pr.readings(json.loads((tmp_path / "out" / "results.json").read_text()))
    assert "  - | a | 0 -> 8 | +0.100 [+0.025, +0.175] | 3 seeds, matched seeds, t" in lines
    # evaluations at 0 and 4 only: the one nearest half the budget (2) is 0 (the earlier of a tie); 0.3 -> 0.60
    assert "  curve of a at delay 0: still rising at 4 (acc(4) - acc(0) +0.300, SE 0.022, 3 seeds)" in lines
    # _cells logs |Λ| 0.1 on the second half and stale/mean = the delay, stale/max = delay + 0.5 (warm-up: none
    # after step 8 in 4 steps, so the delay-8 cell's mean staleness is NaN, shown as a dash)
    assert "  - | a | 0 | 0 (0.5) | 3 | 0.100 | 0.100 | 0.100 | 10.0% | — | 0.1000" in lines
