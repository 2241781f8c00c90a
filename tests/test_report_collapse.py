"""Collapse rules on hand-made curves. Accuracy rules in standard errors of a 500-problem evaluation:
se(a, b) = sqrt(a(1-a)/500 + b(1-b)/500), k = 3 unless a case says otherwise."""

import math

import numpy as np
import pytest

from harness.report.collapse import (
    CollapseRules,
    binomial_se,
    difference_se,
    tail_streak_start,
    collapse_rate,
    detect_collapse,
    first_streak_start,
    median_steps_to_collapse,
    survival_curve,
)

EVAL_STEPS = np.arange(0, 110, 10)  # 0, 10, ..., 100 (11 evaluations)
METRIC_STEPS = np.arange(1, 101)  # 1..100


def run(acc, rules=CollapseRules(), nonfinite=None, entropy=None, ratio=None, status="completed",
        diverged_step=None, eval_size=500):
    """detect_collapse with quiet per-step metrics unless given; 500-problem evaluations."""
    n = METRIC_STEPS.size
    return detect_collapse(
        rules, EVAL_STEPS, np.asarray(acc, dtype=float), METRIC_STEPS,
        np.zeros(n, bool) if nonfinite is None else nonfinite,
        np.full(n, 1.0) if entropy is None else entropy,
        np.full(n, 1.5) if ratio is None else ratio, status, diverged_step, 100, eval_size)


def test_standard_errors_by_hand():
    # 0.194 on 500 problems: sqrt(0.194 * 0.806 / 500) = sqrt(3.12728e-4) = 0.017684
    assert binomial_se(0.194, 500) == pytest.approx(0.017684, abs=1e-6)
    # se(0.194, 0.178) = sqrt(3.12728e-4 + 0.178 * 0.822 / 500 = 2.92632e-4) = sqrt(6.05360e-4) = 0.024604
    assert difference_se(0.194, 0.178, 500) == pytest.approx(0.024604, abs=1e-6)
    # an accuracy of 0 is clipped to half a problem: sqrt((1/1000)(999/1000)/500) = 0.0014135
    assert binomial_se(0.0, 500) == pytest.approx(0.0014135, abs=1e-7)


def test_ending_within_noise_of_the_start_is_no_collapse():
    # issue 20's tic_grpo delay-16 seed: start 0.194, end 0.178. 0.194 - 0.178 = 0.016 = 0.65 se
    # (se 0.024604, above), far from 3 se = 0.0738: not collapsed (the old 0.05-margin rule, which fired
    # 3 evaluations in a row below 0.144, is gone; this run never went below 0.17)
    acc = [0.194, 0.17, 0.18, 0.186, 0.172, 0.18, 0.19, 0.176, 0.18, 0.175, 0.178]
    assert not run(acc).collapsed
    # with k = 0.5 the same 0.65 se drop counts: 0.016 > 0.5 * 0.024604 = 0.0123
    c = run(acc, CollapseRules(k_se=0.5))
    assert c.collapsed and c.reason == "below_start"


def test_ending_far_below_the_start_collapses_at_the_start_of_the_final_fall():
    # issue 20's m2po delay-16 seed: start 0.194, end 0.074. se = sqrt(3.12728e-4 + 0.074 * 0.926 / 500
    # = 1.37048e-4) = 0.021208; 0.12 > 3 * 0.021208 = 0.0636: collapsed. The final stretch below starts at
    # step 70 (0.09: 0.104 > 3 sqrt(3.12728e-4 + 0.09 * 0.91 / 500) = 3 * 0.021829 = 0.0655); step 60
    # (0.15: 0.044 < 3 * 0.023827 = 0.0715) is not below, nor the dip at step 30 (0.10) that recovered
    acc = [0.194, 0.2, 0.21, 0.10, 0.19, 0.2, 0.15, 0.09, 0.08, 0.07, 0.074]
    c = run(acc)
    assert (c.collapsed, c.step, c.reason) == (True, 70, "below_start")


def test_run_falling_from_027_to_007_and_staying_is_collapsed():
    # 0.23 -> best 0.27 -> 0.07 from step 40: se(0.23, 0.07) = sqrt(0.1771/500 + 0.0651/500) = 0.022009,
    # 0.16 > 3 * 0.022009 = 0.066 -> below_start at 40. (The gain 0.04 < 3 se(0.27, 0.23) = 0.0813 is noise.)
    acc = [0.23, 0.25, 0.27, 0.27, 0.07, 0.07, 0.07, 0.07, 0.07, 0.07, 0.07]
    c = run(acc)
    assert (c.collapsed, c.step, c.reason) == (True, 40, "below_start")


def test_giving_back_more_than_half_of_a_real_gain_collapses():
    # start 0.2, best 0.5 (gain 0.3 > 3 se(0.5, 0.2) = 3 sqrt(0.25/500 + 0.16/500) = 3 * 0.028636 = 0.0859)
    # ends at 0.34 < 0.5 - 0.5 * 0.3 = 0.35, and 0.5 - 0.34 = 0.16 > 3 se(0.5, 0.34) = 3 sqrt(0.25/500 +
    # 0.2244/500) = 3 * 0.030802 = 0.0924: gain_lost, from step 70 (the first of the final 0.34s); it is
    # still above its start (no below_start)
    acc = [0.2, 0.3, 0.4, 0.5, 0.5, 0.45, 0.4, 0.34, 0.34, 0.34, 0.34]
    c = run(acc)
    assert (c.collapsed, c.step, c.reason) == (True, 70, "gain_lost")
    # ending at 0.36 keeps more than half the gain (0.36 > 0.35): not collapsed
    assert not run(acc[:-1] + [0.36]).collapsed


def test_half_of_a_gain_given_back_within_noise_is_no_collapse():
    # start 0.2, best 0.32: gain 0.12 > 3 se(0.32, 0.2) = 3 sqrt(0.2176/500 + 0.16/500) = 3 * 0.027482
    # = 0.0824 (a real gain); end 0.255 < 0.32 - 0.06 = 0.26 gives back more than half, but only
    # 0.32 - 0.255 = 0.065 < 3 se(0.32, 0.255) = 3 sqrt(0.2176/500 + 0.190/500) = 3 * 0.028552 = 0.0857:
    # the best of 11 noisy evaluations sits above the plateau, so this is noise: not collapsed
    acc = [0.2, 0.25, 0.28, 0.32, 0.29, 0.27, 0.28, 0.26, 0.27, 0.26, 0.255]
    assert not run(acc).collapsed
    # ending at 0.22 gives back 0.10 > 3 se(0.32, 0.22) = 3 sqrt(0.2176/500 + 0.1716/500) = 0.0837: collapsed
    assert run(acc[:-1] + [0.22]).reason == "gain_lost"


def test_a_noise_sized_gain_given_back_is_no_collapse():
    # start 0.30, best 0.36: gain 0.06 < 3 se(0.36, 0.30) = 3 sqrt(0.2304/500 + 0.21/500) = 3 * 0.029678
    # = 0.0890, so ending at 0.31 (83% of it given back) is noise, and 0.31 is above the start
    acc = [0.30, 0.33, 0.36, 0.34, 0.33, 0.32, 0.31, 0.31, 0.31, 0.31, 0.31]
    assert not run(acc).collapsed


def test_dips_the_run_recovers_from_are_no_collapse():
    # falls to 0.1 at steps 40-50 (far below the 0.5 start), then recovers to 0.6: judged at the end
    acc = [0.5, 0.6, 0.55, 0.35, 0.1, 0.1, 0.58, 0.6, 0.6, 0.59, 0.6]
    assert not run(acc).collapsed
    assert not run(np.linspace(0.2, 0.8, EVAL_STEPS.size)).collapsed


def test_a_fall_at_the_last_evaluation_counts():
    # start 0.2, best 0.6, last 0.1: below_start (0.1 > 3 se(0.2, 0.1) = 3 sqrt(0.16/500 + 0.09/500) =
    # 0.0671) and gain_lost (0.1 < 0.6 - 0.2) both hold at step 100 only; the tie keeps below_start
    c = run([0.2, 0.3, 0.4, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.1])
    assert (c.collapsed, c.step, c.reason) == (True, 100, "below_start")


def test_unknown_eval_size_is_not_judged_by_the_accuracy_rules():
    acc = [0.23, 0.25, 0.27, 0.27, 0.07, 0.07, 0.07, 0.07, 0.07, 0.07, 0.07]
    assert not run(acc, eval_size=None).collapsed
    # the other rules still apply
    assert run(acc, status="diverged", diverged_step=33, eval_size=None).reason == "status_diverged"


def test_nan_loss_collapses_at_that_step_even_with_good_accuracy():
    nonfinite = np.zeros(100, bool)
    nonfinite[56] = True  # metric step 57
    c = run(np.linspace(0.2, 0.8, 11), nonfinite=nonfinite)
    assert (c.collapsed, c.step, c.reason) == (True, 57, "nonfinite_loss")


def test_status_diverged_collapses_at_diverged_step():
    c = run(np.linspace(0.2, 0.8, 11), status="diverged", diverged_step=33)
    assert (c.collapsed, c.step, c.reason) == (True, 33, "status_diverged")
    # without diverged_step: the trial's last step
    assert run(np.linspace(0.2, 0.8, 11), status="diverged").step == 100


def test_earliest_rule_wins():
    # below_start from step 50 (0.1 vs start 0.2: 0.1 > 3 * 0.0671); gain_lost from 40 (0.3 < 0.6 - 0.2)
    acc = [0.2, 0.4, 0.5, 0.6, 0.3, 0.1, 0.05, 0.05, 0.05, 0.05, 0.05]
    nonfinite = np.zeros(100, bool)
    nonfinite[79] = True  # step 80
    assert run(acc, nonfinite=nonfinite).reason == "gain_lost"
    nonfinite[19] = True  # step 20, before 40
    c = run(acc, nonfinite=nonfinite)
    assert (c.step, c.reason) == (20, "nonfinite_loss")


def test_entropy_rule_is_off_by_default_and_uses_patience():
    entropy = np.full(100, 1.0)
    entropy[60:] = 0.01  # steps 61.. near-deterministic policy
    assert not run(np.full(11, 0.5), entropy=entropy).collapsed
    c = run(np.full(11, 0.5), CollapseRules(entropy_min=0.05), entropy=entropy)
    assert (c.step, c.reason) == (61, "entropy")
    # two low steps are not enough with patience 3
    short = np.full(100, 1.0)
    short[[10, 11, 40, 41]] = 0.0
    assert not run(np.full(11, 0.5), CollapseRules(entropy_min=0.05), entropy=short).collapsed


def test_ratio_rule_fires_only_when_set():
    ratio = np.full(100, 2.0)
    ratio[24] = 1e4  # step 25
    assert not run(np.full(11, 0.5), ratio=ratio).collapsed
    c = run(np.full(11, 0.5), CollapseRules(ratio_max_bound=100.0), ratio=ratio)
    assert (c.step, c.reason) == (25, "ratio_max")


def test_first_streak_start():
    assert first_streak_start(np.array([0, 1, 1, 0, 1, 1, 1, 1], bool), 3) == 4
    assert first_streak_start(np.array([1, 1], bool), 3) is None
    assert first_streak_start(np.array([0, 1], bool), 1) == 1


def test_tail_streak_start():
    assert tail_streak_start(np.array([0, 1, 1, 0, 1, 1], bool), 2) == 4  # last two are True
    assert tail_streak_start(np.array([0, 1, 1, 0, 1, 1], bool), 3) is None
    assert tail_streak_start(np.array([1, 1, 1], bool), 2) == 0
    assert tail_streak_start(np.array([1, 1, 0], bool), 1) is None  # the run ended recovered
    assert tail_streak_start(np.array([], bool), 1) is None


def test_rules_from_mapping_are_strict():
    rules = CollapseRules.from_mapping({"k_se": 2, "patience": 2, "entropy_max": None})
    assert (rules.k_se, rules.patience, rules.entropy_max) == (2, 2, math.inf)
    assert CollapseRules.from_mapping(None) == CollapseRules()
    with pytest.raises(ValueError, match="k_sE.*valid keys.*k_se"):
        CollapseRules.from_mapping({"k_sE": 0.3})
    # a key of the replaced fixed-margin rules says what replaced it
    with pytest.raises(ValueError, match="drop_points.*replaced by rules in standard errors.*k_se"):
        CollapseRules.from_mapping({"drop_points": 0.3})
    with pytest.raises(ValueError, match="patience"):
        CollapseRules(patience=0)
    with pytest.raises(ValueError, match="k_se"):
        CollapseRules(k_se=0)
    with pytest.raises(ValueError, match="gain_lost_frac"):
        CollapseRules(gain_lost_frac=1.5)
    with pytest.raises(ValueError, match="k_se must be a number"):
        CollapseRules.from_mapping({"k_se": "3"})
    with pytest.raises(ValueError, match="entropy_min"):
        CollapseRules(entropy_min=2.0, entropy_max=1.0)


def test_describe_names_every_rule():
    text = " ".join(CollapseRules(ratio_max_bound=50).describe())
    for name in ("below_start", "3 SE", "gain_lost", "50%", "nonfinite_loss", "status_diverged", "entropy: off",
                 "above 50"):
        assert name in text


def test_cell_level_summaries():
    steps = np.array([np.nan, 30.0, 10.0, np.nan])  # 2 of 4 collapsed, at 30 and 10
    assert collapse_rate(~np.isnan(steps)) == 0.5
    assert median_steps_to_collapse(steps) == 20.0  # median(10, 30)
    assert np.isnan(median_steps_to_collapse(np.array([np.nan])))
    # at step 0 all alive; at 10 the one collapsing at 10 is down (3/4); at 30 two are down (2/4)
    np.testing.assert_allclose(survival_curve(steps, np.array([0, 9, 10, 29, 30, 100])),
                               [1.0, 1.0, 0.75, 0.75, 0.5, 0.5])
