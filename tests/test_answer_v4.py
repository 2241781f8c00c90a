"""Benchmark v4's answer (studies/answer_v4.py) on hand-made table and re-tuned suites, the figures worked out in
comments: each estimator's line, the cap rule read again at D, claim (f)'s condition and the trust-region gap."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from studies import answer_v4
from tests.fixtures.synthetic_results import write_trial
from tests.test_report_cases import suite_dir

SEEDS = range(5)    # 5 + 5 seeds: an exact permutation p can reach 2/252, below 0.05 after Holm over 3 pairs


def _trial(d: Path, algorithm: str, delay: int, seed: int, accs: tuple[float, float, float], capped: float = 0.0):
    """Evaluations at steps 0, 2, 4 on 2,500 problems; steps 1..4 log gmc/capped_frac 1.0 in the first half
    (never read) and CAPPED in the second (gmc estimators only)."""
    rows = [{"step": s, "loss/value": 0.1, **({"gmc/capped_frac": 1.0 if s <= 2 else capped}
                                               if algorithm.startswith("gmc") else {})} for s in range(1, 5)]
    write_trial(d, {"trial_id": f"{algorithm}-d{delay}-s{seed}", "algorithm": algorithm, "delay": delay, "seed": seed},
                rows, [{"step": s, "eval/acc": x, "eval/n": 2500} for s, x in zip((0, 2, 4), accs)],
                {"status": "completed", "step": 4, "error": None, "diverged_step": None})


def _suites(tmp_path: Path, cap_again: float) -> tuple[Path, Path]:
    table, again = suite_dir(tmp_path, "table"), suite_dir(tmp_path, "again")
    for s in SEEDS:
        e = 0.001 * s                                                     # a small spread, the same at every delay
        _trial(table, "gmc_grpo", 0, s, (0.1, 0.60, 0.60 + e))            # flat: rise 0.002 < SE 0.0098
        _trial(table, "gmc_grpo", 8, s, (0.1, 0.50, 0.50 + e), capped=0.10)   # penalty 0.100 at every seed
        _trial(table, "gmc_grpo_prox", 0, s, (0.1, 0.50, 0.60 + e))       # still rising at 4: rise 0.102
        _trial(table, "gmc_grpo_prox", 8, s, (0.1, 0.50, 0.55 + e))       # penalty 0.050; fixed gap +0.050
        _trial(again, "gmc_grpo", 8, s, (0.1, 0.70, 0.70 + e), capped=cap_again)  # re-tuned minus fixed +0.200
        _trial(again, "gmc_grpo_prox", 8, s, (0.1, 0.60, 0.60 + e))
        _trial(again, "grpo", 8, s, (0.1, 0.40, 0.40 + e))
    _plan(again, [d.name for d in again.iterdir() if d.is_dir()])
    return table, again


def _plan(suite: Path, ids: list[str]) -> None:
    """plan.json as the runner writes it: the suite's trials (here every trial, or MORE planned than ran)."""
    (suite / "plan.json").write_text(json.dumps({"trials": [{"trial_id": i, "point": {}} for i in sorted(ids)]}))


def test_the_answer_reads_each_estimator_and_claim_f_by_the_pre_registered_rule(tmp_path):
    table, again = _suites(tmp_path, cap_again=0.20)
    lines = answer_v4.answer(table, again, labels=("T", "R"))
    assert lines[0] == "benchmark v4's answer: table T (delays 0, 8), re-tuned column R"
    gmc = next(line for line in lines if line.startswith("  gmc_grpo:"))
    assert "penalty +0.100 [+0.100, +0.100] at 8 (95% CI, 5 seeds, matched seeds, t); curve at delay 0: flat;" in gmc
    assert "re-tuned at 8: best at delay 8 (resolved above all 2 others: gmc_grpo_prox 0 of 5, fragile, " in gmc
    assert "grpo 0 of 5, fragile)" in gmc                              # 4 + 4 seeds cannot resolve after Holm
    assert "re-tuned minus fixed at 8: +0.200 [+0.198, +0.202] (95% Welch, 5 and 5 seeds)" in gmc
    prox = next(line for line in lines if line.startswith("  gmc_grpo_prox:"))
    assert "penalty +0.050 [+0.050, +0.050] at 8 (95% CI, 5 seeds, matched seeds, t); curve at delay 0: still rising at 4;" in prox
    assert "re-tuned at 8: below gmc_grpo (" in prox
    grpo = next(line for line in lines if line.startswith("  grpo:"))    # run only in the re-tuned column
    assert "penalty not yet; curve at delay 0: not yet;" in grpo and "re-tuned minus fixed at 8: not yet" in grpo
    assert "  gmc_grpo at 8, fixed lr: capped in 10.0% of groups (5 seeds; the rule asks >= 15%): the cap does not bind" in lines
    assert "  gmc_grpo at 8, re-tuned lr: capped in 20.0% of groups (5 seeds; the rule asks >= 15%): the cap binds" in lines
    verdict = next(line for line in lines if line.startswith("claim (f)"))
    assert verdict.startswith("claim (f), gmc_grpo best under large delays on v4: yes (re-tuned at 8: best")
    trust = lines[-1]
    assert trust.startswith("trust region, gmc_grpo_prox - gmc_grpo at 8: fixed +0.050 [+0.048, +0.052]")
    assert "re-tuned -0.100 [" in trust


@pytest.mark.parametrize("cap, verdict", [(0.15, "yes"), (0.1499, "no")])   # the rule: >= 15% of groups
def test_best_is_claim_f_only_where_the_cap_binds(tmp_path, cap, verdict):
    table, again = _suites(tmp_path, cap_again=cap)
    line = next(line for line in answer_v4.answer(table, again) if line.startswith("claim (f)"))
    assert f"on v4: {verdict} (re-tuned at 8: best" in line
    assert line.endswith("its cap binds there)" if verdict == "yes" else "its cap does not bind there)")


def test_claim_f_waits_for_every_planned_trial_of_the_re_tuned_column(tmp_path):
    table, again = _suites(tmp_path, cap_again=0.2)
    _plan(again, [d.name for d in again.iterdir() if d.is_dir()] + ["m2po-d8-s0"])   # planned, not run yet
    line = next(line for line in answer_v4.answer(table, again) if line.startswith("claim (f)"))
    assert line == ("claim (f), gmc_grpo best under large delays: not yet read (1 planned trial(s) of the re-tuned "
                    "column not finished)")


def test_the_same_trials_on_both_sides_are_named_not_tested(tmp_path):
    table, _ = _suites(tmp_path, cap_again=0.2)
    gmc = next(line for line in answer_v4.answer(table, table) if line.startswith("  gmc_grpo:"))
    assert gmc.endswith("re-tuned minus fixed at 8: 0 (the same trials: its lr re-tuned there is its delay-0 lr)")


def test_a_campaign_under_way_prints_what_it_has(tmp_path):
    table, _ = _suites(tmp_path, cap_again=0.2)
    lines = answer_v4.answer(table)
    assert lines[0].endswith("re-tuned column not given")
    assert any(line.startswith("claim (f), gmc_grpo best under large delays: not yet read") for line in lines)
    assert lines[-1].endswith("re-tuned not yet")


def test_the_command_reads_results_directories(tmp_path, capsys):
    table, again = _suites(tmp_path, cap_again=0.2)
    answer_v4.main([str(table), str(again)])
    assert capsys.readouterr().out.startswith(f"benchmark v4's answer: table {table} (delays 0, 8)")
    with pytest.raises(Exception, match="neither raw.tar.gz nor a suite results directory"):
        answer_v4.main([str(tmp_path / "nowhere")])
