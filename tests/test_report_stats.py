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
    # one seed: nothing to resample, the CI is the point itself
    assert stats.bootstrap_ci(np.array([0.42])) == (0.42, 0.42)
    lo, hi = stats.bootstrap_ci(np.array([]))
    assert np.isnan(lo) and np.isnan(hi)


def test_bootstrap_ci_of_mean_matches_normal_approximation():
    # 200 draws of N(0, 1): the 95% CI of the mean is about +-1.96 / sqrt(200) = +-0.139 around the mean
    x = np.random.default_rng(0).normal(size=200)
    lo, hi = stats.bootstrap_ci(x, stats.mean, n_resamples=4000)
    assert hi - lo == pytest.approx(2 * 1.96 * x.std() / np.sqrt(200), rel=0.1)
