"""Report statistics against hand-computed values."""

import numpy as np
import pytest
from scipy import stats as sps

from harness.report import stats


def test_iqm_of_one_to_eight_is_mean_of_middle_four():
    # 8 values, 25% trimmed each side = 2 values each side: mean(3, 4, 5, 6) = 18 / 4 = 4.5
    assert stats.iqm(np.arange(1, 9)) == pytest.approx(4.5, abs=1e-12)


def test_iqm_matches_scipy_trim_mean():
    # reference: rliable's IQM is scipy.stats.trim_mean(x, 0.25); odd sizes cut int(0.25 n) per side
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 5, 7, 10, 33):
        x = rng.normal(size=(4, n))
        np.testing.assert_allclose(stats.iqm(x, axis=1), sps.trim_mean(x, 0.25, axis=1), rtol=1e-12)
        np.testing.assert_allclose(stats.iqm(x[0]), sps.trim_mean(x[0], 0.25), rtol=1e-12)


def test_iqm_ignores_outliers_unlike_mean():
    # [0, 1, 1, 1, 1, 1, 1, 100]: middle four are all 1 -> IQM 1; mean = 106 / 8 = 13.25
    x = np.array([0, 1, 1, 1, 1, 1, 1, 100])
    assert stats.iqm(x) == pytest.approx(1.0, abs=1e-12)
    assert stats.mean(x) == pytest.approx(13.25, abs=1e-12)


def test_iqm_along_axis_and_empty():
    x = np.array([[1, 2, 3, 4, 5, 6, 7, 8], [2, 2, 2, 2, 4, 4, 4, 4]])
    # row 2: middle four (2, 2, 4, 4) -> 3
    np.testing.assert_allclose(stats.iqm(x, axis=1), [4.5, 3.0], atol=1e-12)
    assert np.isnan(stats.iqm(np.array([])))
    assert np.isnan(stats.mean(np.array([])))


def test_probability_of_improvement_is_vectorized_over_leading_axes():
    # row 0 is the hand case below (0.375); row 1: x = [5, 6] beats y = [2, 3] in every pair -> 1.0
    x = np.array([[1.0, 3.0], [5.0, 6.0]])
    y = np.array([[2.0, 3.0], [2.0, 3.0]])
    np.testing.assert_allclose(stats.probability_of_improvement(x, y, axis=-1), [0.375, 1.0])


def test_probability_of_improvement_by_counting_pairs():
    # x = [1, 3], y = [2, 3]: pairs (1,2) lose, (1,3) lose, (3,2) win, (3,3) tie
    # -> (0 + 0 + 1 + 0.5) / 4 = 0.375
    poi = stats.probability_of_improvement
    assert poi(np.array([1.0, 3.0]), np.array([2.0, 3.0])) == pytest.approx(0.375)
    # complementary: P(Y > X) + 0.5 P(tie) = (1 + 1 + 0 + 0.5) / 4 = 0.625 = 1 - 0.375
    assert poi(np.array([2.0, 3.0]), np.array([1.0, 3.0])) == pytest.approx(0.625)
    # all equal -> every pair ties -> 0.5
    assert poi(np.ones(3), np.ones(2)) == pytest.approx(0.5)
    assert np.isnan(poi(np.array([]), np.ones(2)))


def test_auc_of_hand_made_curve():
    # steps 0, 10, 30; acc 0.2, 0.4, 0.4
    # trapezoids: 10 * (0.2 + 0.4) / 2 = 3.0; 20 * (0.4 + 0.4) / 2 = 8.0; total 11.0 over span 30
    # -> 11 / 30 = 0.366666...
    auc = stats.accuracy_auc(np.array([0, 10, 30]), np.array([0.2, 0.4, 0.4]))
    assert auc == pytest.approx(11 / 30, abs=1e-12)
    assert stats.accuracy_auc(np.array([5]), np.array([0.7])) == pytest.approx(0.7)
    assert np.isnan(stats.accuracy_auc(np.array([]), np.array([])))


def test_final_and_best_accuracy():
    acc = np.array([0.2, 0.6, np.nan, 0.5])
    assert stats.final_accuracy(acc) == pytest.approx(0.5)
    assert stats.best_accuracy(acc) == pytest.approx(0.6)
    assert np.isnan(stats.final_accuracy(np.array([])))
    assert np.isnan(stats.best_accuracy(np.array([np.nan])))


def test_bootstrap_ci_is_deterministic_and_contains_point():
    x = np.array([0.41, 0.45, 0.52, 0.39, 0.48, 0.50])
    a = stats.bootstrap_ci(x, stats.iqm, seed=3)
    b = stats.bootstrap_ci(x, stats.iqm, seed=3)
    assert a == b
    assert a[0] <= stats.iqm(x) <= a[1]
    assert x.min() <= a[0] < a[1] <= x.max()
    # a different generator seed gives (slightly) different ends
    assert stats.bootstrap_ci(x, stats.iqm, seed=4) != a


def test_bootstrap_ci_of_constant_and_single_seed():
    # every resample of a constant is that constant
    assert stats.bootstrap_ci(np.full(5, 0.3), stats.mean) == pytest.approx((0.3, 0.3))
    # one seed: nothing to resample, so no interval (not a zero-width "95% CI")
    for x in (np.array([0.42]), np.array([])):
        lo, hi = stats.bootstrap_ci(x)
        assert np.isnan(lo) and np.isnan(hi)


def test_bootstrap_ci_matches_scipy_percentile_bootstrap():
    # the maintained implementation, called directly with the same seeded generator
    x = np.array([0.41, 0.45, 0.52, 0.39, 0.48, 0.50, 0.44])
    ref = sps.bootstrap((x,), lambda s, axis: sps.trim_mean(s, 0.25, axis=axis), n_resamples=2000,
                        vectorized=True, method="percentile", rng=np.random.default_rng(7))
    got = stats.bootstrap_ci(x, stats.iqm, seed=7)
    np.testing.assert_allclose(got, (ref.confidence_interval.low, ref.confidence_interval.high), atol=1e-12)


def test_t_interval_by_hand():
    # x = [0.40, 0.42, 0.44]: mean 0.42, s = sqrt((0.02^2 + 0 + 0.02^2) / 2) = 0.02,
    # t_{0.975, 2} = 4.302653; half width = 4.302653 * 0.02 / sqrt(3) = 0.0496827
    lo, hi = stats.t_interval(np.array([0.40, 0.42, 0.44]))
    assert lo == pytest.approx(0.42 - 0.0496827, abs=1e-6)
    assert hi == pytest.approx(0.42 + 0.0496827, abs=1e-6)


def test_estimate_switches_statistic_and_flags_low_confidence():
    # 1 seed: the value, no interval (the old report printed a zero-width "95% CI" here)
    e = stats.estimate(np.array([0.42]))
    assert (e.point, e.n, e.method, e.low_confidence) == (0.42, 1, "none", True)
    assert np.isnan(e.lo) and np.isnan(e.hi)
    # 2 seeds [0.3, 0.5]: mean 0.4, s = 0.1414, t_{0.975,1} = 12.706 -> 0.4 +- 1.27, clipped to [0, 1]
    e = stats.estimate(np.array([0.3, 0.5]))
    assert (e.point, e.lo, e.hi, e.statistic, e.method) == (pytest.approx(0.4), 0.0, 1.0, "mean", "t")
    assert e.low_confidence
    # 3 and 4 seeds: still the mean with a t interval, still low-confidence
    for n in (3, 4):
        e = stats.estimate(np.linspace(0.40, 0.44, n))
        assert (e.statistic, e.method, e.low_confidence) == ("mean", "t", True)
        assert e.point == pytest.approx(0.42)
    # 5 seeds: IQM with a percentile bootstrap interval, not low-confidence
    x = np.array([0.30, 0.40, 0.41, 0.42, 0.90])
    e = stats.estimate(x)
    assert (e.statistic, e.method, e.low_confidence) == ("IQM", "bootstrap", False)
    assert e.point == pytest.approx((0.40 + 0.41 + 0.42) / 3)  # int(0.25 * 5) = 1 cut per side
    assert e.lo <= e.point <= e.hi
    assert stats.estimate(x, seed=1) == stats.estimate(x, seed=1)  # seeded: deterministic
    assert stats.estimate(np.array([])).n == 0


def test_t_interval_covers_better_than_percentile_bootstrap_at_three_seeds():
    # Why the report switches below 5 seeds: 400 draws of 3 seeds from N(0.4, 0.05); the 95% percentile
    # bootstrap covers the true 0.4 far less often than the t interval (measured ~75% vs ~95%, see
    # docs/report.md; here only the ordering and rough levels are checked).
    rng = np.random.default_rng(0)
    boot = t = 0
    for _ in range(400):
        x = rng.normal(0.4, 0.05, size=3)
        lo, hi = stats.bootstrap_ci(x, stats.mean, n_resamples=500, seed=1)
        boot += lo <= 0.4 <= hi
        lo, hi = stats.t_interval(x)
        t += lo <= 0.4 <= hi
    assert boot / 400 < 0.85 < 0.9 < t / 400


def test_poi_estimate_has_an_interval():
    x, y = np.array([0.5, 0.6, 0.55, 0.52, 0.58]), np.array([0.4, 0.45, 0.5, 0.56, 0.42])
    e = stats.poi_estimate(x, y, seed=0)
    # pairs where x > y: 0.5>{0.4,0.45,0.42}=3, 0.6>all 5, 0.55>4, 0.52>4, 0.58>5; ties: 0.5=0.5 -> 0.5
    # -> (3 + 0.5 + 5 + 4 + 4 + 5) / 25 = 21.5 / 25 = 0.86
    assert e.point == pytest.approx(0.86)
    assert e.method == "bootstrap" and e.lo <= e.point <= e.hi and not e.low_confidence
    assert stats.poi_estimate(x[:1], y).method == "none"
    # 3 vs 3 seeds that separate perfectly: every resample separates too, so the percentile bootstrap
    # would print [1.00, 1.00]; below 5 seeds the estimate carries no interval instead
    e = stats.poi_estimate(np.array([0.6, 0.7, 0.8]), np.array([0.1, 0.2, 0.3]))
    assert e.point == 1.0 and e.method == "none" and np.isnan(e.lo) and e.low_confidence


def test_competition_ranks_share_ties():
    # the case: gmc_grpo and grpo both 0.340 -> both rank 1; the next value is rank 3
    np.testing.assert_array_equal(stats.competition_ranks(np.array([0.34, 0.34, 0.30])), [1, 1, 3])
    # equal at the printed precision (3 decimals) -> tied; NaN last
    np.testing.assert_array_equal(stats.competition_ranks(np.array([0.5, 0.3402, 0.3399, np.nan])),
                                  [1, 2, 2, 4])


def test_delay_auc_on_log2_axis():
    # delays 0, 1, 3 -> x = log2(1, 2, 4) = 0, 1, 2; acc 0.6, 0.4, 0.4
    # trapezoids: (0.6 + 0.4) / 2 * 1 + (0.4 + 0.4) / 2 * 1 = 0.9 over span 2 -> 0.45
    assert stats.delay_auc(np.array([0, 1, 3]), np.array([0.6, 0.4, 0.4])) == pytest.approx(0.45)
    assert stats.delay_auc(np.array([3, 0, 1]), np.array([0.4, 0.6, 0.4])) == pytest.approx(0.45)  # order


def test_bootstrap_ci_of_mean_matches_normal_approximation():
    # 200 draws of N(0, 1): the 95% CI of the mean is about +-1.96 / sqrt(200) = +-0.139 around the mean
    x = np.random.default_rng(0).normal(size=200)
    lo, hi = stats.bootstrap_ci(x, stats.mean, n_resamples=4000)
    assert hi - lo == pytest.approx(2 * 1.96 * x.std() / np.sqrt(200), rel=0.1)
