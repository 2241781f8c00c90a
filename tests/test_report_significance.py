"""Pair tests and ranking agreement (harness/report/significance.py) against hand-computed values."""

import numpy as np
import pytest
from scipy import stats as sps

from harness.report import significance


def test_permutation_p_by_hand():
    # x = (1, 2), y = (3, 4): the 6 splits of {1, 2, 3, 4} into two pairs have |mean difference|
    # {1,2}: 2, {1,3}: 1, {1,4}: 0, {2,3}: 0, {2,4}: 1, {3,4}: 2; observed 2 -> 2 of 6 = 1/3
    assert significance.permutation_p([1, 2], [3, 4]) == pytest.approx(1 / 3)
    # x = (1, 3), y = (2, 4): observed 1 -> the splits with |d| >= 1: {1,2}, {1,3}, {2,4}, {3,4} = 4/6
    assert significance.permutation_p([1, 3], [2, 4]) == pytest.approx(2 / 3)
    # 3 vs 3 that separate perfectly: only the observed split and its mirror, 2 of C(6, 3) = 20 -> 0.1,
    # so at 3 seeds no pair can reach 5%
    assert significance.permutation_p([0.1, 0.2, 0.3], [0.4, 0.5, 0.6]) == pytest.approx(0.1)
    # 8 vs 8 that separate: 2 / C(16, 8) = 2 / 12870, the smallest p at 8 seeds
    assert significance.permutation_p(np.arange(8.0), np.arange(8.0) + 10) == pytest.approx(2 / 12870)
    assert significance.permutation_p([0.3, 0.3], [0.3, 0.3]) == 1.0
    assert np.isnan(significance.permutation_p([], [0.3]))


def test_permutation_p_random_splits_above_the_exact_limit():
    # 10 vs 10: C(20, 10) = 184,756 splits > EXACT_SPLITS -> 10,000 random splits counted with the
    # observed one: a perfect separation gives (hits + 1) / 10,001, hits almost surely 0 or 1
    p = significance.permutation_p(np.arange(10.0), np.arange(10.0) + 20)
    assert 1 / 10001 <= p <= 3 / 10001
    # same values on both sides: every split is as extreme (d = 0 >= 0): p = 1
    rng = np.random.default_rng(3)
    x = rng.normal(size=10)
    assert significance.permutation_p(x, x[::-1]) == 1.0
    # against scipy's exact test on an overlapping 6 vs 6 (C(12, 6) = 924 splits, both exact)
    a, b = rng.normal(0, 1, 6), rng.normal(0.8, 1, 6)
    ref = sps.permutation_test((a, b), lambda u, v, axis: u.mean(axis=axis) - v.mean(axis=axis),
                               permutation_type="independent", n_resamples=np.inf).pvalue
    assert significance.permutation_p(a, b) == pytest.approx(ref, abs=1e-12)


def test_smallest_permutation_p_is_what_a_perfect_separation_gets():
    for k, m in ((3, 3), (5, 5), (8, 8), (3, 4), (2, 5)):
        x, y = np.arange(float(k)), np.arange(float(m)) + 100
        assert significance.smallest_permutation_p(k, m) == pytest.approx(significance.permutation_p(x, y)), (k, m)
    assert significance.smallest_permutation_p(5, 5) == pytest.approx(2 / 252)
    assert significance.smallest_permutation_p(3, 4) == pytest.approx(1 / 35)      # no mirror split when k != m
    assert significance.smallest_permutation_p(10, 10) == pytest.approx(1 / 10001)  # sampled splits


def test_holm_by_hand():
    # p = (0.01, 0.04, 0.03, 0.005), m = 4; sorted 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06,
    # 0.04 x 1 = 0.04 -> made non-decreasing 0.06; back in the input order:
    np.testing.assert_allclose(significance.holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(significance.holm([0.5, 0.9]), [1.0, 1.0])  # 0.5 x 2 = 1.0, capped
    assert significance.holm([]).size == 0


def test_kendall_tau_by_hand():
    # a: x < y < z; b: x < z < y. Pairs (x,y) and (x,z) agree, (y,z) disagrees: (2 - 1) / 3 = 1/3
    tau, n = significance.kendall_tau({"x": 1, "y": 2, "z": 3}, {"x": 1, "y": 3, "z": 2, "w": 9})
    assert (tau, n) == (pytest.approx(1 / 3), 3)  # w is in one ranking only
    assert significance.kendall_tau({"x": 1, "y": 2}, {"x": 2, "y": 1})[0] == pytest.approx(-1.0)
    assert np.isnan(significance.kendall_tau({"x": 1}, {"x": 1})[0])
