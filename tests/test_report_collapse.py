"""Collapse rules on hand-made curves."""

import math

import numpy as np
import pytest

from harness.report.collapse import (
    CollapseRules,
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
        diverged_step=None):
    """detect_collapse with quiet per-step metrics unless given."""
    n = METRIC_STEPS.size
    return detect_collapse(
        rules, EVAL_STEPS, np.asarray(acc, dtype=float), METRIC_STEPS,
        np.zeros(n, bool) if nonfinite is None else nonfinite,
        np.full(n, 1.0) if entropy is None else entropy,
        np.full(n, 1.5) if ratio is None else ratio, status, diverged_step, 100)


def test_collapsing_curve_collapses_at_first_eval_of_the_drop_streak():
    # start 0.2, best 0.6 at step 30 (gain 0.4); from step 40 on acc <= 0.3 < 0.6 - 0.5 * 0.4 = 0.4 for
    # 3+ evaluations -> gain_lost at 40 (accuracy_drop, 0.3 < 0.6 - 0.2, also fires at 40: rule order)
    acc = [0.2, 0.4, 0.5, 0.6, 0.3, 0.1, 0.05, 0.05, 0.05, 0.05, 0.05]
    c = run(acc)
    assert (c.collapsed, c.step, c.reason) == (True, 40, "gain_lost")
    # with the relative rules made unreachable, the absolute drop rule alone fires at the same step
    only_drop = CollapseRules(start_margin=1.0, min_gain=1.0)
    assert (run(acc, only_drop).step, run(acc, only_drop).reason) == (40, "accuracy_drop")


def test_run_falling_from_027_to_007_and_staying_is_collapsed():
    # The run: 0.23 -> best 0.27 -> 0.07 for the rest. The absolute rule misses it: 0.27 - 0.07
    # = 0.20 is not more than drop_points 0.2. Relative to the run's own start it is a collapse:
    # 0.07 < 0.23 - 0.05 = 0.18 (below_start) from step 40 on, 7 evaluations in a row.
    acc = [0.23, 0.25, 0.27, 0.27, 0.07, 0.07, 0.07, 0.07, 0.07, 0.07, 0.07]
    assert not run(acc, CollapseRules(start_margin=1.0, min_gain=1.0)).collapsed  # old rule alone
    c = run(acc)
    assert (c.collapsed, c.step, c.reason) == (True, 40, "below_start")


def test_collapse_in_the_last_two_evaluations_is_counted():
    # Flat-then-good run that falls only at the last two evaluations (steps 90, 100): no 3-evaluation
    # streak fits, but the end-of-run streak (end_patience 2) does. Start 0.2, best 0.6 (gain 0.4);
    # 0.1 < 0.2 - 0.05 (below_start) at 90 and 100 -> collapsed at 90.
    acc = [0.2, 0.3, 0.4, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.1, 0.1]
    c = run(acc)
    assert (c.collapsed, c.step, c.reason) == (True, 90, "below_start@end")
    # the same two low evaluations in the middle of the run, followed by recovery, are not a collapse
    assert not run([0.2, 0.3, 0.4, 0.6, 0.1, 0.1, 0.6, 0.6, 0.6, 0.6, 0.6]).collapsed
    # one low last evaluation is below end_patience 2: not a collapse (it still shows in final acc)
    assert not run([0.2, 0.3, 0.4, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.1]).collapsed


def test_gain_lost_needs_a_real_gain():
    # start 0.30, best 0.36 (gain 0.06 < min_gain 0.1): ending at 0.31 lost 83% of a noise-sized gain,
    # which is no collapse; and 0.31 is above the start (no below_start either)
    acc = [0.30, 0.33, 0.36, 0.34, 0.33, 0.32, 0.31, 0.31, 0.31, 0.31, 0.31]
    assert not run(acc).collapsed
    # with a real gain (0.30 -> 0.50 = 0.2), ending at 0.35 < 0.50 - 0.1 = 0.40 for 5 evaluations is
    acc = [0.30, 0.40, 0.50, 0.50, 0.50, 0.50, 0.35, 0.35, 0.35, 0.35, 0.35]
    assert (run(acc).step, run(acc).reason) == (60, "gain_lost")


def test_prospering_curve_does_not_collapse():
    acc = np.linspace(0.2, 0.8, EVAL_STEPS.size)
    assert not run(acc).collapsed
    assert run(acc).step is None


def test_noisy_but_stable_curve_does_not_collapse():
    # dips of 0.25 below the best (0.6) but never 3 evaluations in a row: steps 30, 50, 80 dip alone
    acc = [0.5, 0.6, 0.55, 0.35, 0.6, 0.34, 0.58, 0.6, 0.33, 0.59, 0.6]
    assert not run(acc).collapsed
    # a drop of exactly the threshold is not "more than" it: 0.6 - 0.2 = 0.4 is allowed
    assert not run([0.6] + [0.4] * 10, CollapseRules(start_margin=1.0)).collapsed


def test_two_dips_then_recovery_is_not_a_streak():
    acc = [0.6, 0.3, 0.3, 0.6, 0.3, 0.3, 0.6, 0.6, 0.6, 0.6, 0.6]
    assert not run(acc).collapsed
    # with patience 2 the first pair (steps 10, 20) is a streak
    assert run(acc, CollapseRules(patience=2)).step == 10


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
    acc = [0.2, 0.4, 0.5, 0.6, 0.3, 0.1, 0.05, 0.05, 0.05, 0.05, 0.05]  # gain_lost at 40
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
    rules = CollapseRules.from_mapping({"drop_points": 0.3, "patience": 2, "entropy_max": None})
    assert (rules.drop_points, rules.patience, rules.entropy_max) == (0.3, 2, math.inf)
    assert CollapseRules.from_mapping(None) == CollapseRules()
    with pytest.raises(ValueError, match="drop_pts.*valid keys.*drop_points"):
        CollapseRules.from_mapping({"drop_pts": 0.3})
    with pytest.raises(ValueError, match="patience"):
        CollapseRules(patience=0)
    with pytest.raises(ValueError, match="end_patience"):
        CollapseRules(end_patience=0)
    with pytest.raises(ValueError, match="gain_lost_frac"):
        CollapseRules(gain_lost_frac=1.5)
    with pytest.raises(ValueError, match="drop_points must be a number"):
        CollapseRules.from_mapping({"drop_points": "20%"})
    with pytest.raises(ValueError, match="entropy_min"):
        CollapseRules(entropy_min=2.0, entropy_max=1.0)


def test_describe_names_every_rule():
    text = " ".join(CollapseRules(ratio_max_bound=50).describe())
    for name in ("below_start", "gain_lost", "accuracy_drop", "last 2 or more", "nonfinite_loss",
                 "status_diverged", "entropy: off", "above 50"):
        assert name in text


def test_cell_level_summaries():
    steps = np.array([np.nan, 30.0, 10.0, np.nan])  # 2 of 4 collapsed, at 30 and 10
    assert collapse_rate(~np.isnan(steps)) == 0.5
    assert median_steps_to_collapse(steps) == 20.0  # median(10, 30)
    assert np.isnan(median_steps_to_collapse(np.array([np.nan])))
    # at step 0 all alive; at 10 the one collapsing at 10 is down (3/4); at 30 two are down (2/4)
    np.testing.assert_allclose(survival_curve(steps, np.array([0, 9, 10, 29, 30, 100])),
                               [1.0, 1.0, 0.75, 0.75, 0.5, 0.5])
