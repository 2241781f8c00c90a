"""The report on hand-made results directories, one per case the report used to get wrong: tied ranks,
low-confidence intervals, relative and end-of-run collapse, diverged trials, staleness warm-up, shared
trials, trial provenance, the paper table exports, palette and facet order."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.report import build_report, closing_table
from harness.report import figures as fig
from harness.report import paper, resolve, stats, tables
from harness.report.load import load_results
from tests.fixtures.synthetic_results import provenance, write_trial

EVAL_STEPS = list(range(0, 170, 10))  # 0, 10, ..., 160: a quickstart-like run of 160 steps


def suite_dir(root: Path, name: str = "cases", **report: object) -> Path:
    d = root / name
    d.mkdir(parents=True)
    suite = {"suite": name, "version": 1, "base": {}}
    if report:
        suite["report"] = report
    (d / "suite.yaml").write_text(yaml.safe_dump(suite))
    return d


def trial(d: Path, tid: str, algorithm: str, delay: int, seed: int, acc: list[float],
          steps: list[int] | None = None, status: str = "completed", diverged_step: int | None = None,
          stale: list[float] | None = None, prov: dict | None = None, **params: object) -> None:
    """One trial with the given eval curve (500 problems per evaluation); metrics rows 1..last step with stale/mean (default:
    min(step - 1, delay), i.e. a warm-up of `delay` steps then exactly `delay`)."""
    steps = steps or EVAL_STEPS[:len(acc)]
    last = diverged_step or steps[-1]
    stale = stale or [float(min(s - 1, delay)) for s in range(1, last + 1)]
    metrics = [{"step": s, "loss/value": 0.1, "stale/mean": st} for s, st in zip(range(1, last + 1), stale)]
    write_trial(d, {"trial_id": tid, "algorithm": algorithm, "delay": delay, "seed": seed, **params},
                metrics, [{"step": s, "eval/acc": a, "eval/n": 500} for s, a in zip(steps, acc)],
                {"status": status, "step": last, "error": None, "diverged_step": diverged_step}, prov)


def analysis(d: Path) -> tables.Analysis:
    return tables.analyse(load_results(d))


def test_ties_share_a_rank_and_the_leader_names_its_equals(tmp_path):
    # gmc_grpo and grpo both end at exactly 0.340 on each seed; m2po at 0.300 with a tight spread
    d = suite_dir(tmp_path)
    for seed in range(5):
        trial(d, f"grpo-{seed}", "grpo", 8, seed, [0.23, 0.34])
        trial(d, f"gmc-{seed}", "gmc_grpo", 8, seed, [0.23, 0.34])
        trial(d, f"m2po-{seed}", "m2po", 8, seed, [0.23, 0.30 + 0.001 * seed])
    board = analysis(d).board.set_index("algorithm")
    assert board.loc["grpo", "rank"] == board.loc["gmc_grpo", "rank"] == 1  # not 1 and 2 by name
    assert board.loc["m2po", "rank"] == 3  # competition ranking: 1, 1, 3
    assert board.loc["grpo", "vs_leader"] == board.loc["gmc_grpo", "vs_leader"] == "leader"
    assert board.loc["m2po", "vs_leader"] == "below"  # [0.300, 0.304] vs [0.340, 0.340]: disjoint


def test_overlapping_intervals_are_tied_with_the_leader(tmp_path):
    d = suite_dir(tmp_path)
    for seed, (a, b) in enumerate([(0.40, 0.30), (0.50, 0.45), (0.45, 0.55)]):
        trial(d, f"grpo-{seed}", "grpo", 4, seed, [0.23, a])
        trial(d, f"m2po-{seed}", "m2po", 4, seed, [0.23, b])
    board = analysis(d).board.set_index("algorithm")
    # means 0.45 and 0.433; t intervals (3 seeds) overlap widely -> indistinguishable from the leader
    assert board.loc["grpo", "rank"] == 1 and board.loc["m2po", "vs_leader"] == "tied"


def test_low_confidence_intervals_are_flagged_in_table_captions_and_page(tmp_path):
    d = suite_dir(tmp_path)
    for seed in range(3):  # 3 seeds per cell
        for algo in ("grpo", "m2po"):
            trial(d, f"{algo}-0-{seed}", algo, 0, seed, [0.23, 0.5 + 0.02 * seed])
            trial(d, f"{algo}-8-{seed}", algo, 8, seed, [0.23, 0.4 + 0.02 * seed])
    trial(d, "m2po-16-0", "m2po", 16, 0, [0.23, 0.35])  # a single seed: no interval at all
    index = build_report(d, tmp_path / "out")
    cells = json.loads((index.parent / "results.json").read_text())["cells"]
    assert all(c["low_confidence"] for c in cells)
    single = next(c for c in cells if c["delay"] == 16)
    assert single["ci_low"] is None and single["ci_method"] == "none"  # not a zero-width "CI"
    text = closing_table(index)
    assert "LOW CONFIDENCE" in text and "0.420 [" in text and "]*" in text and "0.350 (1 seed)" in text
    page = index.read_text()
    assert 'class="lowconf"' in page
    captions = json.loads((index.parent / "results.json").read_text())["figures"]
    assert any("LOW CONFIDENCE" in f["caption"] for f in captions if f["file"] == "accuracy_vs_delay.png")


def test_five_seeds_are_not_flagged(tmp_path):
    d = suite_dir(tmp_path)
    for seed in range(5):
        trial(d, f"grpo-{seed}", "grpo", 0, seed, [0.23, 0.5 + 0.01 * seed])
    cell = analysis(d).cells.iloc[0]
    assert (cell["statistic"], cell["ci_method"], cell["low_confidence"]) == ("IQM", "bootstrap", False)
    assert "LOW CONFIDENCE" not in paper.to_text(paper.paper_tables(analysis(d)), "x")


def test_run_falling_from_027_to_007_is_collapsed_and_so_is_a_late_collapse(tmp_path):
    d = suite_dir(tmp_path)
    trial(d, "falls", "grpo", 8, 0, [0.23, 0.25, 0.27, 0.27] + [0.07] * 13)
    trial(d, "late", "grpo", 8, 1, [0.23, 0.3, 0.4, 0.5] + [0.6] * 11 + [0.1, 0.1])  # last two evals
    trial(d, "fine", "grpo", 8, 2, [0.23, 0.3, 0.4, 0.5] + [0.6] * 13)
    t = analysis(d).trials.set_index("trial_id")
    assert t.loc["falls", "collapsed"] and t.loc["falls", "collapse_reason"] == "below_start"
    assert t.loc["falls", "collapse_step"] == 40
    # judged at the end: 0.23 - 0.1 = 0.13 > 3 se(0.23, 0.1) = 3 sqrt(0.1771/500 + 0.09/500) = 0.0693
    assert t.loc["late", "collapsed"] and t.loc["late", "collapse_reason"] == "below_start"
    assert t.loc["late", "collapse_step"] == 150
    assert not t.loc["fine", "collapsed"]
    cell = analysis(d).cells.iloc[0]
    assert (cell["n_collapsed"], cell["collapse_rate"]) == (2, pytest.approx(2 / 3))


def test_diverged_at_50_scores_below_a_flat_run(tmp_path):
    d = suite_dir(tmp_path)
    # flat: 0.23 for all 160 steps -> final 0.23, AUC 0.23
    trial(d, "flat", "grpo", 0, 0, [0.23] * 17)
    # diverged: rises to 0.45 by step 40, diverges at step 50 (no evaluation after it).
    # Scored: 0 at 50 and at every evaluation step 60..160. AUC by hand (trapezoids over 0..160):
    # 0-10: (0.23+0.30)/2*10 = 2.65; 10-20: (0.30+0.35)/2*10 = 3.25; 20-30: (0.35+0.40)/2*10 = 3.75;
    # 30-40: (0.40+0.45)/2*10 = 4.25; 40-50: (0.45+0)/2*10 = 2.25; 50-160: 0 -> 16.15 / 160 = 0.1009
    trial(d, "div", "m2po", 0, 0, [0.23, 0.30, 0.35, 0.40, 0.45], status="diverged", diverged_step=50)
    a = analysis(d)
    t = a.trials.set_index("trial_id")
    assert t.loc["div", "final_acc"] == 0.0 and t.loc["div", "best_acc"] == pytest.approx(0.45)
    assert t.loc["div", "auc_acc"] == pytest.approx(16.15 / 160, abs=1e-9)
    assert t.loc["flat", "auc_acc"] == pytest.approx(0.23)
    assert t.loc["div", "auc_acc"] < t.loc["flat", "auc_acc"] and t.loc["div", "final_acc"] < 0.23
    curve = a.scored_evals[a.scored_evals["trial_id"] == "div"]
    assert curve["step"].tolist() == [0, 10, 20, 30, 40, 50, *range(60, 170, 10)]
    assert curve["eval/acc"].iloc[5:].eq(0).all()  # the learning curve shows the zeros too


def test_no_staleness_alarm_for_a_quickstart_like_run(tmp_path):
    # delay 32 over 160 steps, stale/mean = min(step - 1, 32): mean over all steps is
    # (0 + 1 + ... + 32 + 127 * 32) / 160 = (528 + 4064) / 160 = 28.7 (the old false alarm);
    # after the warm-up (step > 32) it is exactly 32
    d = suite_dir(tmp_path)
    trial(d, "quick", "grpo", 32, 0, [0.23] * 17)
    trial(d, "slow", "grpo", 16, 0, [0.23] * 17, stale=[8.0] * 160)  # realized 8 for delay 16: real
    a = analysis(d)
    stale = a.staleness.set_index("delay")
    assert a.trials.set_index("trial_id").loc["quick", "stale_mean"] == pytest.approx(32.0)
    assert not stale.loc[32, "differs"]
    assert stale.loc[16, "differs"]
    page = build_report(d, tmp_path / "out").read_text()
    assert "differs from the configured delay 16" in page and "configured delay 32" not in page


def test_the_warm_up_is_counted_in_batches_when_a_batch_takes_several_updates(tmp_path):
    # k = 4 updates per batch (train.minibatches 4): step s trains on batch s - 1, generated by version
    # max(0, 4(s - 1) - delay), so stale/mean = min(4(s - 1), delay) + 1.5 and the warm-up is steps <= delay / 4.
    # Delay 256 over 128 steps is at 257.5 from step 65 on (counted in updates, the warm-up would never end);
    # delay 0 is 0..3 updates old, mean 1.5: what the delay gives at k = 4, no alarm
    d = suite_dir(tmp_path)
    for tid, delay in (("d256", 256), ("d64", 64), ("d0", 0)):
        stale = [min(4.0 * (s - 1), delay) + 1.5 for s in range(1, 129)]
        stale[-1] = 100.0 if delay == 64 else stale[-1]      # step 128 is past the warm-up: it counts
        trial(d, tid, "grpo", delay, 0, [0.23] * 17, stale=stale)
        config = yaml.safe_load((d / tid / "config.yaml").read_text())
        (d / tid / "config.yaml").write_text(yaml.safe_dump({**config, "train": {"passes": 1, "minibatches": 4}}))
    a = analysis(d)
    t = a.trials.set_index("trial_id")
    assert t.loc["d256", "updates_per_batch"] == 4 and t.loc["d256", "stale_mean"] == pytest.approx(257.5)
    assert t.loc["d64", "stale_mean"] == pytest.approx((111 * 65.5 + 100.0) / 112)     # steps 17..128
    stale = a.staleness.set_index("delay")
    assert stale.loc[256, "trials"] == 1 and not stale.loc[256, "differs"]
    assert stale.loc[0, "stale_mean"] == stale.loc[0, "expected"] == 1.5 and not stale.loc[0, "differs"]
    assert "differs from the configured delay" not in build_report(d, tmp_path / "out").read_text()


def test_shared_trials_fill_every_slice_and_every_estimator_they_stand_for(tmp_path):
    d = suite_dir(tmp_path)
    for e in (0.2, 0.28):
        for algo in ("grpo", "tic_grpo"):
            trial(d, f"{algo}-8-{e}", algo, 8, 0, [0.23, 0.4], eps=e)
    trial(d, "m2po-8", "m2po", 8, 0, [0.23, 0.45], eps=None, ignored=["eps"])  # m2po ignores eps
    trial(d, "onpolicy-0", "grpo", 0, 0, [0.23, 0.6], eps=None, ignored=["eps"],
          stands_for=["grpo", "tic_grpo"])
    a = analysis(d)
    assert a.other == ["eps"]  # ignored / stands_for are not grid axes
    cells = a.cells.set_index(["algorithm", "delay", "eps"])
    assert cells.loc[("m2po", 8, 0.2), "final"] == cells.loc[("m2po", 8, 0.28), "final"] == 0.45
    assert "\u03b5 not used by m2po" in cells.loc[("m2po", 8, 0.2), "shared_note"]
    for algo in ("grpo", "tic_grpo"):
        for e in (0.2, 0.28):
            assert cells.loc[(algo, 0, e), "final"] == 0.6
            assert "stand for grpo, tic_grpo" in cells.loc[(algo, 0, e), "shared_note"]
    assert len(a.trials) == 6  # the trial list shows each directory once
    text = paper.to_text(paper.paper_tables(a), "cases")
    assert "0.600 (1 seed)\u2020" in text   # one note per table (one table per ε slice), not one per trial
    assert text.count("shared on-policy trials (delay 0") == text.count("final held-out accuracy") == 2


def test_provenance_comes_from_the_trials_and_warns_about_mixtures(tmp_path):
    d = suite_dir(tmp_path)
    trial(d, "a", "grpo", 0, 0, [0.23, 0.4], prov=provenance())
    trial(d, "b", "grpo", 0, 1, [0.23, 0.4], prov=provenance(git_commit="f" * 40, git_dirty=True,
                                                               packages={"torch": "2.6.0"}))
    trial(d, "c", "grpo", 0, 2, [0.23, 0.4], prov=provenance(
        base_model={"name": "Qwen/Qwen3-0.6B", "sha256": "e" * 64}, eval_set_sha256="9" * 64))
    trial(d, "old", "grpo", 0, 3, [0.23, 0.4])  # older result: no provenance.json
    page = build_report(d, tmp_path / "out").read_text()
    box = page[page.index('<div class="warning-box"'):page.index("</div>", page.index('<div class="warning-box"'))]
    for needle in ("mixes 2 git commits", "mixes 2 torch versions", "dirty git tree", "base models (sha256)",
                   "eval sets (sha256)", "1 of 4 trials have no provenance.json"):
        assert needle in box, needle
    footer = page[page.index('<footer id="provenance">'):]
    assert "<code>unknown</code> (1)" in footer and "2.6.0" in footer and "2.5.1" in footer


def test_consistent_provenance_raises_no_warning(tmp_path):
    d = suite_dir(tmp_path)
    for seed in range(2):
        trial(d, f"t{seed}", "grpo", 0, seed, [0.23, 0.4], prov=provenance(config_sha256=str(seed) * 64))
    page = build_report(d, tmp_path / "out").read_text()
    assert 'class="warning-box"' not in page
    assert "2 distinct value(s)" in page  # config hashes differ per trial by design: a count, no warning


def test_paper_table_exports_and_closing_table(tmp_path):
    d = suite_dir(tmp_path, "paper_suite")
    for seed in range(2):
        for algo, base in (("grpo", 0.5), ("gmc_grpo", 0.6)):
            for delay, drop in ((0, 0.0), (4, 0.05), (32, 0.2)):
                trial(d, f"{algo}-{delay}-{seed}", algo, delay, seed, [0.23, base - drop + 0.01 * seed])
    index = build_report(d, tmp_path / "out")
    out = index.parent
    md, tex, txt = ((out / f).read_text() for f in ("paper_table.md", "paper_table.tex", "paper_table.txt"))
    assert txt == closing_table(index) == closing_table(out)
    lines = [line for line in txt.splitlines() if line.startswith(("grpo", "gmc_grpo"))]
    assert lines[0].startswith("grpo")  # the baseline's row first
    # gain retained = (acc@32 - base) / (acc@0 - base), base = the step-0 accuracy 0.23: grpo
    # ((0.3 + 0.31) / 2 - 0.23) / ((0.5 + 0.51) / 2 - 0.23) = 0.075 / 0.275 = 27% (acc@32 / acc@0 was 60%)
    assert "27%" in lines[0] and "60%" not in lines[0]
    assert "| estimator | delay 0 | delay 4 | delay 32 | gain retained @32 | delay AUC |" in md
    assert "**0.605 [" in md  # gmc_grpo's delay-0 mean is the column's best
    assert r"gmc\_grpo" in tex and r"\toprule" in tex and r"\textbf{0.605" in tex
    assert "paper_table.md" in index.read_text()


def test_every_estimator_gets_a_distinct_style():
    names = ["grpo", "tic_grpo", "gmc_grpo", "m2po", "bapo", "is_none", "gspo", "topr", "tis", "naive",
             "decoupled", "some_new_one"]
    styles = fig.estimator_style(names, "grpo")
    assert list(styles)[0] == "grpo"  # baseline first
    colours = np.array([s.colour for s in styles.values()])
    gaps = np.linalg.norm(colours[:, None] - colours[None, :], axis=-1) + np.eye(len(names))
    assert gaps.min() > 0.1  # no two estimators share (or nearly share) a colour
    assert len({s.marker for s in styles.values()}) == len(names)


def test_facets_sort_numerically(tmp_path):
    d = suite_dir(tmp_path)
    for g in (16, 4, 8):
        for delay in (0, 4):
            trial(d, f"grpo-{g}-{delay}", "grpo", delay, 0, [0.23, 0.4], group_size=g)
    a = analysis(d)
    plot = fig.PlotData.build(a, load_results(d).metrics, [])
    assert plot.slices == ["G=4", "G=8", "G=16"]
    assert [t.slice for t in paper.paper_tables(a)] == ["G=4", "G=8", "G=16"]


def test_compare_puts_two_suites_side_by_side_with_difference_intervals(tmp_path):
    """B is A + 0.2 on grpo (5 seeds each: an IQM bootstrap interval that excludes 0) and equal on
    gmc_grpo (2 seeds: a Welch interval, marked *, around 0)."""
    from harness.report.compare import compare
    from harness.report.stats import difference_estimate

    for name, shift in (("a", 0.0), ("b", 0.2)):
        d = suite_dir(tmp_path, name)
        for seed in range(5):
            trial(d, f"grpo-s{seed}", "grpo", 16, seed, [0.2, 0.3 + shift + 0.01 * seed])
        for seed in range(2):
            trial(d, f"gmc-s{seed}", "gmc_grpo", 16, seed, [0.2, 0.4 + 0.02 * seed])
    text = compare(tmp_path / "a", tmp_path / "b")
    rows = {ln.split()[0]: ln for ln in text.splitlines() if ln.startswith(("grpo", "gmc_grpo"))}
    assert "+0.200" in rows["grpo"] and rows["grpo"].endswith("differs")
    assert "+0.000" in rows["gmc_grpo"] and "*" in rows["gmc_grpo"] and not rows["gmc_grpo"].endswith("differs")
    assert not any("Kendall" in ln for ln in text.splitlines())          # two estimators: no ranking to compare
    # Kendall's tau-b at delay 16 over three estimators: A ranks x > y > z, B ranks x > z > y (one of the
    # three pairs discordant): tau = (2 - 1) / 3.
    for name, values in (("c", (0.5, 0.4, 0.3)), ("e", (0.5, 0.3, 0.4))):
        d = suite_dir(tmp_path, name)
        for algorithm, final in zip(("grpo", "tic_grpo", "m2po"), values):
            trial(d, f"{algorithm}-s0", algorithm, 16, 0, [0.2, final])
    assert compare(tmp_path / "c", tmp_path / "e").splitlines()[-1] == \
        "Kendall's tau-b of the rankings at delay=16: +0.33 over 3 estimators"
    # B varies a key A does not (its bases): each of B's slices is set against A's cells, with its own tau.
    # A ranks x > y > z at delay 16; B's base p agrees (+1), its base q reverses it (-1).
    d = suite_dir(tmp_path, "bases")
    for base, values in (("p", (0.6, 0.5, 0.4)), ("q", (0.3, 0.4, 0.5))):
        for algorithm, final in zip(("grpo", "tic_grpo", "m2po"), values):
            trial(d, f"{algorithm}-{base}-s0", algorithm, 16, 0, [0.2, final], base=base)
    text = compare(tmp_path / "c", d).splitlines()
    assert text[-2:] == ["Kendall's tau-b of the rankings at delay=16, base=p: +1.00 over 3 estimators",
                         "Kendall's tau-b of the rankings at delay=16, base=q: -1.00 over 3 estimators"]
    assert any(ln.split()[:3] == ["m2po", "16", "q"] and "+0.200" in ln for ln in text)      # 0.5 - 0.3
    with pytest.raises(ValueError, match="pass the suite with fewer as A"):
        compare(d, tmp_path / "c")
    # Welch by hand: x = y = [0.40, 0.42], difference 0, s² = 0.0002 each, se = sqrt(2 · 0.0002/2) = 0.01414,
    # dof = 2, t_0.975,2 = 4.3027: interval ±0.06085.
    d = difference_estimate(np.array([0.40, 0.42]), np.array([0.40, 0.42]))
    assert d.method == "t" and abs(d.hi - 0.060850) < 1e-5 and abs(d.lo + 0.060850) < 1e-5


def test_compare_uses_the_statistic_both_reports_print(tmp_path):
    """Suites that print the mean (benchmark v3) are compared by the mean and Welch's t even at 8 seeds, where
    an IQM would trim a collapsed seed: A's grpo has one seed at 0 (mean 0.4375, IQM 0.5), B's none (0.5)."""
    from harness.report.compare import compare

    for name, low in (("a", 0.0), ("b", 0.5)):
        d = suite_dir(tmp_path, name, statistic="mean")
        for s in range(8):
            trial(d, f"grpo-{s}", "grpo", 8, s, [0.2, low if s == 0 else 0.5])
    text = compare(tmp_path / "a", tmp_path / "b").splitlines()
    row = next(ln for ln in text if ln.startswith("grpo"))
    assert "0.438 (n=8)" in row and "+0.062 [" in row and "*" not in row and not row.endswith("differs")
    assert text[1].startswith("Difference: mean, Welch t interval")
    iqm = suite_dir(tmp_path, "iqm")
    for s in range(8):
        trial(iqm, f"grpo-{s}", "grpo", 8, s, [0.2, 0.5])
    with pytest.raises(ValueError, match="prints the mean and .* the iqm of each cell"):
        compare(tmp_path / "a", iqm)


def test_compare_reads_a_committed_report_directory_through_its_raw_archive(tmp_path, capsys, monkeypatch):
    """`stalebench compare reports/reference-v3 reports/reference-v3-bridge`: a report directory holding
    raw.tar.gz is compared through its unpacked trials, named as given, and the unpacked copy is removed."""
    import tempfile

    from harness.cli import main
    from harness.store.archive import pack_suite

    for name, final in (("a", 0.5), ("b", 0.6)):
        d = suite_dir(tmp_path, name, statistic="mean")
        for s in range(3):
            trial(d, f"grpo-{s}", "grpo", 8, s, [0.2, final + 0.01 * s])
    report = tmp_path / "reports" / "a"
    report.mkdir(parents=True)
    pack_suite(tmp_path / "a", report / "raw.tar.gz")
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(unpacked))
    assert main(["compare", str(report), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"A = {report}, B = {tmp_path / 'b'}:")
    assert "+0.100 [" in next(ln for ln in out if ln.startswith("grpo"))
    assert list(unpacked.iterdir()) == []


def test_evaluated_kept_policies_get_a_benchmark_table_with_hostile_text_escaped(tmp_path):
    d = suite_dir(tmp_path)
    trial(d, "t0", "grpo", 0, 0, [0.2, 0.3])
    trial(d, "t1", "gmc_grpo", 16, 0, [0.2, 0.25])
    (d / "t0" / "benchmarks").mkdir()
    (d / "t0" / "benchmarks" / "results.json").write_text(json.dumps(
        {"benchmarks": {"addrev": {"acc": 0.25, "acc_stderr": 0.0435, "n": 100},
                        "<script>x</script>": {"acc": 0.5, "acc_stderr": None, "n": 2}}}))
    page = build_report(d, tmp_path / "out").read_text()
    assert "Benchmark evaluation" in page and "0.250 ± 0.043 (100)" in page and "0.500 (2)" in page
    assert "<script>x</script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
    section = page[page.index("Benchmark evaluation</h2>"):]
    section = section[:section.index("</table>")]
    assert section.count("<tr") == 2 and '">t0</td>' in section and '">t1</td>' not in section  # head + t0


def test_columns_in_one_pass_equal_columns_one_by_one():
    """The one-pass reading of uniform rows (every trainer's file) gives what the per-key path gives."""
    from harness.report.load import _column, _columns

    uniform = [{"step": s, "a": s / 3, "b": None if s == 2 else -s} for s in range(1, 6)]
    mixed = uniform[:2] + [{"step": 3, "a": "text"}] + uniform[3:]
    renamed = uniform[:2] + [{"step": 3, "a": 1.0, "c": 2.0}] + uniform[3:]   # as many keys, another name
    for rows in (uniform, mixed, renamed):
        fast = _columns(rows, ("step", "a", "b", "absent"))
        for key, column in fast.items():
            np.testing.assert_array_equal(column, _column(rows, key))


def test_rows_with_nan_infinity_or_a_damaged_line_are_read_like_the_stdlib(tmp_path):
    from harness.store import trialdir
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "loss": NaN, "x": Infinity}\n')
    rows, bad = trialdir.read_rows(path)
    assert bad == 0 and rows[0] == {"step": 1, "loss": 0.5} and np.isnan(rows[1]["loss"]) and rows[1]["x"] == np.inf
    path.write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "lo\n{"step": 3, "loss": 0.25}\n')
    assert trialdir.read_rows(path) == ([{"step": 1, "loss": 0.5}, {"step": 3, "loss": 0.25}], 1)


def test_resolved_pairs_per_delay_and_kendall_tau_across_slices(tmp_path):
    # 8 seeds; at delay 8 grpo ends at 0.300 + 0.001 s, gmc_grpo at 0.400 + 0.001 s, m2po at
    # 0.300 + 0.001 (7 - s) (grpo's values reversed: the same mean). gmc vs grpo and gmc vs m2po separate
    # perfectly: p = 2 / C(16, 8) = 1.554e-4 each; grpo vs m2po: p = 1. Holm over the 3 pairs: 1.554e-4 x 3
    # = 4.66e-4 <= 0.05, 1.554e-4 x 2 -> 4.66e-4, 1 -> 1: 2 of 3 resolved. Delay 0 is one shared trial set
    # (stands_for) and has no pair to test.
    d = suite_dir(tmp_path)
    for s in range(8):
        trial(d, f"on-{s}", "grpo", 0, s, [0.23, 0.5 + 0.001 * s], stands_for=["grpo", "gmc_grpo", "m2po"])
        for algo, acc in (("grpo", 0.3 + 0.001 * s), ("gmc_grpo", 0.4 + 0.001 * s), ("m2po", 0.3 + 0.001 * (7 - s))):
            trial(d, f"{algo}-{s}", algo, 8, s, [0.23, acc])
    a = analysis(d)
    t = paper.paper_tables(a)[0]
    assert t.resolved == [(0, 0), (2, 3)]
    assert paper.footer(t) == ["resolved pairs", "\u2014", "2/3", "", ""]
    assert "resolved pairs" in paper.to_text([t], "x") and "Holm-adjusted over the table's 3 pairs" in t.caption("x")
    assert t.resolution_floor == "" and "No pair can be resolved" not in t.caption("x")   # 8 seeds can
    by_pair = {(p.a, p.b): p for p in a.pairs}
    assert by_pair[("gmc_grpo", "grpo")].p == pytest.approx(2 / 12870)
    assert by_pair[("gmc_grpo", "grpo")].p_holm == pytest.approx(3 * 2 / 12870)
    assert not by_pair[("grpo", "m2po")].resolved and by_pair[("grpo", "m2po")].p == pytest.approx(1.0)
    assert a.agreement.empty  # one slice
    # the standings at delay 8 (the largest): gmc_grpo above both; grpo and m2po tie below it
    answers = {s.estimator: (s.answer, s.rival.a, s.rival.b) for s in resolve.standings(a.cell_trials, a.pairs)}
    assert answers == {"gmc_grpo": ("best at delay 8 (resolved above all 2 others)", "gmc_grpo", "grpo"),
                       "grpo": ("below gmc_grpo at delay 8", "gmc_grpo", "grpo"),
                       "m2po": ("below gmc_grpo at delay 8", "gmc_grpo", "m2po")}


def test_best_needs_every_other_estimator_tested_and_resolved_below(tmp_path):
    # a separates perfectly from b over 8 seeds (p = 2 / C(16, 8), one pair: resolved); c has one seed at delay
    # 8, so no pair of it is tested: a cannot be shown above c, and is "not resolved from the best".
    d = suite_dir(tmp_path)
    for s in range(8):
        trial(d, f"a-{s}", "gmc_grpo", 8, s, [0.23, 0.4 + 0.001 * s])
        trial(d, f"b-{s}", "grpo", 8, s, [0.23, 0.3 + 0.001 * s])
    answers = {t.estimator: t.answer for t in resolve.standings(analysis(d).cell_trials, analysis(d).pairs)}
    assert answers == {"gmc_grpo": "best at delay 8 (resolved above the other)", "grpo": "below gmc_grpo at delay 8"}
    trial(d, "c-0", "m2po", 8, 0, [0.23, 0.9])
    a = analysis(d)
    answers = {t.estimator: t.answer for t in resolve.standings(a.cell_trials, a.pairs)}
    assert answers == {"m2po": "not tested at delay 8 (fewer than 2 scored seeds)",
                       "gmc_grpo": "not resolved from the best at delay 8", "grpo": "below gmc_grpo at delay 8"}


@pytest.mark.parametrize("seeds, kept", [(4, 0), (5, 5)])
def test_a_resolved_pair_counts_the_tables_with_one_seed_left_out_that_still_resolve_it(tmp_path, seeds, kept):
    # One pair, separated perfectly on every seed: its p is 2 / C(2n, n). 4 seeds: 2/70 = 0.029 <= 0.05,
    # resolved; left out one seed, 3 vs 3 can reach only 2/20 = 0.1: resolved in 0 of 4. 5 seeds: 2/252,
    # and each 4 vs 4 table reaches 0.029 again: resolved in 5 of 5.
    d = suite_dir(tmp_path)
    for s in range(seeds):
        trial(d, f"grpo-{s}", "grpo", 8, s, [0.23, 0.3 + 0.001 * s])
        trial(d, f"gmc_grpo-{s}", "gmc_grpo", 8, s, [0.23, 0.4 + 0.001 * s])
    a = analysis(d)
    (pair,) = a.pairs
    assert pair.resolved and pair.p == pytest.approx(2 / math.comb(2 * seeds, seeds))
    assert (pair.loso_resolved, pair.loso_tables) == (kept, seeds)
    page = build_report(d, tmp_path / "out").read_text()
    section = page[page.index("Resolved pairs</h2>"):]
    mark = ", fragile" if kept < 0.75 * seeds else ""     # 0 of 4 rests on single seeds; 5 of 5 on none
    assert ">gmc_grpo &gt; grpo</td>" in section and f">{kept} of {seeds}{mark}</td>" in section


def test_the_suite_chooses_the_printed_statistic_and_the_caption_says_what_the_test_compares(tmp_path):
    # 8 seeds, grpo's first collapsed: the IQM trims it (0.5), the mean does not (0.4375); the pair test
    # always compares means
    def table(name: str, **report: object) -> tables.Analysis:
        d = suite_dir(tmp_path, name, **report)
        for s in range(8):
            trial(d, f"grpo-{s}", "grpo", 8, s, [0.23, 0.0 if s == 0 else 0.5])
            trial(d, f"gmc_grpo-{s}", "gmc_grpo", 8, s, [0.23, 0.6])
        return analysis(d)

    iqm = table("iqm")
    assert iqm.cells.set_index("algorithm").loc["grpo", "final"] == pytest.approx(0.5)
    assert "the test compares means, not the IQMs printed" in paper.paper_tables(iqm)[0].caption("x")
    mean = table("mean", statistic="mean")
    cell = mean.cells.set_index("algorithm").loc["grpo"]
    assert (cell["final"], cell["statistic"], cell["ci_method"]) == (pytest.approx(0.5 * 7 / 8), "mean", "t")
    caption = paper.paper_tables(mean)[0].caption("x")
    assert "mean over seeds [95% Student-t CI]" in caption and "IQM" not in caption
    with pytest.raises(ValueError, match=r"report.statistic: 'median' is not a statistic the report prints; "
                                         r"choose one of iqm, mean"):
        table("median", statistic="median")


def test_a_report_that_prints_the_mean_says_so_in_its_leaderboard_figures_and_heatmaps(tmp_path, monkeypatch):
    """report.statistic: mean (benchmark v3): the leaderboard, the statistics section, the figures and the
    heatmaps show means with t intervals and their captions say so, never "IQM"; at 8 seeds with one
    collapsed, grpo's heatmap cells read the mean (0.44), not the IQM (0.50)."""
    import html
    import re

    from harness.report import heatmaps

    written, heat = [], heatmaps._heat
    monkeypatch.setattr(heatmaps, "_heat", lambda ax, v, text, *rest: (written.append(text), heat(ax, v, text, *rest)))
    d = suite_dir(tmp_path, "mean", statistic="mean")
    for s in range(8):
        for eps in (0.1, 0.2):
            for delay in (0, 8):
                trial(d, f"grpo-{eps}-{delay}-{s}", "grpo", delay, s, [0.23, 0.0 if s == 0 else 0.5], eps=eps)
                trial(d, f"m2po-{eps}-{delay}-{s}", "m2po", delay, s, [0.23, 0.6], eps=eps)
    index = build_report(d, tmp_path / "out")
    bundle = json.loads((index.parent / "results.json").read_text())
    captions = {f["file"]: f["caption"] for f in bundle["figures"]}
    for name in ("accuracy_vs_delay.png", "final_accuracy_intervals.png"):
        assert "the mean over seeds with a 95% Student-t" in captions[name] and "IQM" not in captions[name]
    assert "(the mean over seeds)" in captions["heatmap_delay_eps.png"]
    page = " ".join(re.sub(r"<[^>]+>", " ", html.unescape(index.read_text())).split())
    assert "Ranked by final held-out accuracy across seeds (the mean over seeds with a 95% Student-t CI;" in page
    assert "A cell's value is the mean over its seeds with a 95% Student-t interval" in page
    assert "IQM over seeds" not in page and "a cell's value is the IQM" not in page
    assert {c["final"] for c in bundle["cells"] if c["algorithm"] == "grpo"} == {0.4375}
    a = analysis(d)
    written.clear()
    heatmaps.eps_heatmap(a, fig.PlotData.build(a, load_results(d).metrics, []), fig.Output(tmp_path))
    assert sorted({t for panel in written for row in panel for t in row}) == ["0.44", "0.60"]


def test_three_seeds_resolve_nothing_and_slices_are_compared_by_kendall_tau(tmp_path):
    # 3 seeds: the smallest p is 2 / C(6, 3) = 0.1 > 0.05, even for a perfect separation. Two slices
    # (eps 0.1, 0.2) at the largest delay: eps=0.1 ranks gmc > grpo > m2po, eps=0.2 the reverse -> tau = -1
    d = suite_dir(tmp_path)
    for s in range(3):
        for eps, values in ((0.1, (0.3, 0.4, 0.2)), (0.2, (0.3, 0.2, 0.4))):
            for algo, acc in zip(("grpo", "gmc_grpo", "m2po"), values):
                trial(d, f"{algo}-{eps}-{s}", algo, 8, s, [0.23, acc + 0.001 * s], eps=eps)
    a = analysis(d)
    assert [t.resolved for t in paper.paper_tables(a)] == [[(0, 3)], [(0, 3)]]
    assert min(p.p for p in a.pairs) == pytest.approx(0.1)
    caption = paper.paper_tables(a)[0].caption("x")   # and the caption says that 0 is all 3 seeds can show
    assert ("No pair can be resolved at these seed counts: the smallest p a pair can reach is 0.1, above Holm's "
            "first threshold 0.05/3 = 0.017") in caption
    row = a.agreement.iloc[0]
    assert (row["slice_a"], row["slice_b"], row["estimators"]) == ("\u03b5=0.1", "\u03b5=0.2", 3)
    assert row["tau"] == pytest.approx(-1.0)


def test_a_tuned_table_states_each_estimators_step_size_and_an_untuned_one_does_not():
    from harness.config.suite import parse_suite

    def suite(**extra):
        return parse_suite({"suite": "s", "version": 1, "base": {"train": {"lr": 1e-4}}, "seeds": [0],
                            "grid": {"algorithm": ["grpo", "m2po", "naive"], "delay": [0, 8]}, **extra})

    tuned = suite(overrides={"grpo": {"train.lr": 1.023e-4}, "naive": {"train.lr": 2.113e-5}}, overrides_scope="stale")
    assert paper.step_sizes(tuned, ["grpo", "m2po", "naive"]) == (
        "Step sizes (train.lr, the suite's overrides, except in on-policy trials, which keep 0.0001): grpo 0.0001023, "
        "m2po 0.0001, naive 2.113e-05.")
    assert paper.step_sizes(suite(overrides={"naive": {"train.lr": 2e-5}}), ["grpo", "naive"]) == (
        "Step sizes (train.lr, the suite's overrides): grpo 0.0001, naive 2e-05.")
    assert paper.step_sizes(suite(overrides={"m2po": {"train.lr": 2e-5}}), ["grpo", "naive"]) == ""
    assert paper.step_sizes(suite(overrides={"grpo": {"eps": 0.3}}), ["grpo", "m2po", "naive"]) == ""


def test_a_row_missing_a_delay_has_no_delay_auc(tmp_path):
    # grpo has every delay of the table; m2po's delay-32 cell is not run yet: its average over delays 0 and 8
    # alone would not be comparable with grpo's over 0, 8 and 32, so it is a dash
    d = suite_dir(tmp_path)
    for s in range(2):
        for algo, cells in (("grpo", ((0, 0.9), (8, 0.8), (32, 0.6))), ("m2po", ((0, 0.9), (8, 0.85)))):
            for delay, acc in cells:
                trial(d, f"{algo}-{delay}-{s}", algo, delay, s, [0.5, acc])
    rows = {r.algorithm: r for r in paper.paper_tables(analysis(d))[0].rows}
    assert rows["grpo"].delay_auc == pytest.approx(stats.delay_auc(np.array([0, 8, 32]), np.array([0.9, 0.8, 0.6])))
    assert np.isnan(rows["m2po"].delay_auc) and paper.text_rows(paper.paper_tables(analysis(d))[0])[1][-1] == "\u2014"


def _drawn(monkeypatch, figure, a: tables.Analysis, d: Path, tmp_path: Path):
    """Draw one registered figure and return (its Grid or Figure, its FigureOut), captured before saving."""
    kept = []
    real, home = fig.save, sys.modules[figure.__module__]            # figures.py, heatmaps.py or dynamics.py
    monkeypatch.setattr(home, "save", lambda g, *args, **kw: kept.append(g) or real(g, *args, **kw))
    out = figure(a, fig.PlotData.build(a, load_results(d).metrics, []), fig.Output(tmp_path))
    return kept[0], out


def test_accuracy_figures_fit_their_axes_mark_base_and_on_policy_and_draw_the_cells_intervals(tmp_path, monkeypatch):
    """Base model 0.50 (step 0), finals 0.70..0.91 over 2 slices (eps): the accuracy axis is fitted to
    0.50..0.91 (not 0..1) with both levels drawn; the interval plot's bars are the cells' 95% intervals
    (hatched for 3 seeds); one learning-curve panel per estimator and slice, each with the grey on-policy
    curve; the eps heatmap keeps its on-policy row."""
    from harness.registry import FIGURES
    d = suite_dir(tmp_path)
    final = {("grpo", 0): 0.90, ("m2po", 0): 0.905, ("tic_grpo", 0): 0.91,
             ("grpo", 8): 0.70, ("m2po", 8): 0.80, ("tic_grpo", 8): 0.75}
    for (algo, delay), acc in final.items():
        for eps in (0.1, 0.4):
            for seed in range(3 if algo == "tic_grpo" else 5):
                trial(d, f"{algo}-{delay}-{eps}-{seed}", algo, delay, seed, [0.5, 0.6, acc + 0.002 * seed], eps=eps)
    a = analysis(d)
    g, out = _drawn(monkeypatch, FIGURES.get("accuracy"), a, d, tmp_path)
    on = 0.904                                # grpo at delay 0: IQM of 0.900..0.908 = mean(0.902, 0.904, 0.906)
    for ax in g.axes.flat:
        lo, hi = ax.get_ylim()
        assert 0.45 < lo < 0.5 and 0.912 < hi < 0.95
        levels = sorted(line.get_ydata()[0] for line in ax.lines if len(set(line.get_ydata())) == 1)
        assert levels == pytest.approx([0.5, on]) and ax.get_legend() is None
    assert g.figure.legends and "delay 0: 0.90" in [t.get_text() for t in g.figure.legends[0].texts]

    g, out = _drawn(monkeypatch, FIGURES.get("intervals"), a, d, tmp_path)
    assert out.file == "final_accuracy_intervals.png" and "IQM" in out.caption and "LOW CONFIDENCE" in out.caption
    assert list(g.col_names) == [0.0, 8.0]      # delay 0 differs per estimator: a panel of its own
    cells = a.cells.set_index(["algorithm", "delay", "slice"])
    ax = g.axes[0, 1]                                  # delay 8, eps 0.1; rows grpo, m2po, tic_grpo
    for row, (bar, algo) in enumerate(zip(ax.patches, ("grpo", "m2po", "tic_grpo"))):
        c = cells.loc[(algo, 8, "ε=0.1")]
        assert bar.get_y() + bar.get_height() / 2 == pytest.approx(row)
        assert (bar.get_x(), bar.get_x() + bar.get_width()) == pytest.approx((c["ci_low"], c["ci_high"]))
        assert bar.get_fill() == (not c["low_confidence"]) == (algo != "tic_grpo")
    points = [float(c.get_segments()[0][0][0]) for c in ax.collections]
    assert points == pytest.approx([cells.loc[(n, 8, "ε=0.1"), "final"] for n in ("grpo", "m2po", "tic_grpo")])

    g, out = _drawn(monkeypatch, FIGURES.get("learning"), a, d, tmp_path)
    assert list(g.col_names) == [f"{n} · ε={e}" for e in (0.1, 0.4) for n in ("grpo", "m2po", "tic_grpo")]
    for ax in g.axes.flat:
        assert [line.get_color() for line in ax.lines][0] == "0.6"    # the on-policy reference, drawn first
        assert ax.get_ylim()[0] > 0.45

    g, out = _drawn(monkeypatch, FIGURES.get("eps"), a, d, tmp_path)
    assert [t.get_text() for t in g.axes.flat[0].get_yticklabels()] == ["0 (on-policy)", "8"]


def test_the_trajectory_regime_of_the_baseline_reads_the_second_half_of_each_trial(tmp_path):
    """The regime section: grpo (the baseline) only, per delay; per trial the mean of steps > last/2, then the
    mean over trials with their range. Trials logged before the regime metrics existed get no section."""
    from harness.report.sections import regime_sections

    d = suite_dir(tmp_path)
    keys = ("policy/kl_behavior", "is/traj_abs_log_ratio_q50", "is/traj_abs_log_ratio_q90",
            "is/traj_abs_log_ratio_max", "is/traj_ess_frac", "is/group_over_cap_frac")
    for tid, algorithm, delay, seed, late in (("g0", "grpo", 8, 0, 2.0), ("g1", "grpo", 8, 1, 3.0),
                                              ("m0", "m2po", 8, 0, 9.0), ("z0", "grpo", 0, 0, 0.5)):
        rows = [{"step": s, "loss/value": 0.1, "stale/mean": float(delay),
                 **{k: (late if s > 2 else 100.0) for k in keys}} for s in range(1, 5)]   # steps 3, 4 count
        write_trial(d, {"trial_id": tid, "algorithm": algorithm, "delay": delay, "seed": seed}, rows,
                    [{"step": 0, "eval/acc": 0.5, "eval/n": 500}, {"step": 4, "eval/acc": 0.6, "eval/n": 500}],
                    {"status": "completed", "step": 4, "error": None, "diverged_step": None})
    (section,) = regime_sections(load_results(d), tmp_path / "out")
    table = section.blocks[1]["table"]
    assert [r["delay"] for r in table["rows"]] == ["0", "8"] and [r["trials"] for r in table["rows"]] == ["1", "2"]
    assert table["rows"][1]["median |Λ|"] == "2.5 (2..3)" and table["rows"][0]["groups over G(1+ε)"] == "0.5"
    old = suite_dir(tmp_path, "old")
    trial(old, "g0", "grpo", 8, 0, [0.5, 0.6])
    assert regime_sections(load_results(old), tmp_path / "out") == []
