"""Whether two cells differ, and whether two rankings agree: exact two-sample permutation tests on the
seeds' mean final accuracy, Holm's adjustment over a table's pairs, Kendall's tau-b between rankings.

Pure functions over numpy arrays, like stats.py (the cells' statistics); the report's pair tests
(resolve.py), the staleness penalty's (penalty.py) and `stalebench compare` read them.
"""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np
from scipy import stats as sps


EXACT_SPLITS = 20_000  # exact permutation test up to this many splits (8 vs 8 seeds: C(16, 8) = 12,870)
PERMUTATIONS = 10_000  # random splits above it (seeded, the same for every pair of that size)


@functools.lru_cache(maxsize=8)
def _splits(n: int, k: int) -> tuple[np.ndarray, bool]:
    """Splits of n pooled values into a first group of k, as a 0/1 matrix (S, n) for one matrix-vector
    product per test, and whether it is every split (C(n, k) <= EXACT_SPLITS) or PERMUTATIONS random ones
    (from a generator seeded with 0, so a report is reproducible)."""
    if math.comb(n, k) <= EXACT_SPLITS:
        idx = np.array(list(itertools.combinations(range(n), k)), dtype=np.int64).reshape(-1, k)
    else:
        idx = np.argsort(np.random.default_rng(0).random((PERMUTATIONS, n)), axis=1)[:, :k]
    mask = np.zeros((idx.shape[0], n))
    np.put_along_axis(mask, idx, 1.0, axis=1)
    return mask, math.comb(n, k) <= EXACT_SPLITS


def permutation_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided p-value of the difference of means of two independent samples by a permutation test:
    the fraction of the ways to split the pooled values into groups of len(x) and len(y) whose mean
    difference is at least as large in absolute value as the observed one. Exact when there are at most
    ``EXACT_SPLITS`` splits (8 + 8 seeds: all 12,870, so the smallest p is 2/12,870 = 1.6e-4: the observed
    split and its mirror), else over ``PERMUTATIONS`` random splits counted with the observed one
    ((b + 1) / (R + 1), never 0). No normality assumption: the null is only that the labels are
    exchangeable. NaN values are dropped; NaN when a side has no value."""
    x, y = (np.asarray(v, dtype=float) for v in (x, y))
    x, y = x[~np.isnan(x)], y[~np.isnan(y)]
    if x.size == 0 or y.size == 0:
        return float("nan")
    pooled, k, n = np.r_[x, y], x.size, x.size + y.size
    total = pooled.sum()
    observed = abs(x.mean() - y.mean())
    tol = 1e-12 * max(1.0, float(np.abs(pooled).max()))  # splits equal in exact arithmetic count as equal
    splits, exact = _splits(n, k)
    sums = splits @ pooled  # (S,) sum of the first group per split
    hits = int(np.sum(np.abs(sums / k - (total - sums) / (n - k)) >= observed - tol))
    return hits / splits.shape[0] if exact else (hits + 1) / (splits.shape[0] + 1)


def smallest_permutation_p(k: int, m: int) -> float:
    """The smallest p ``permutation_p`` can return for samples of k and m values (without ties): the observed
    split alone, or with its mirror when k == m, among all C(k + m, k) splits (exact), or 1 / (R + 1) when
    the splits are sampled. A table whose every pair's smallest p is above Holm's first threshold can resolve
    nothing, whatever the data."""
    n = k + m
    if math.comb(n, k) > EXACT_SPLITS:
        return 1.0 / (PERMUTATIONS + 1)
    return (2 if k == m else 1) / math.comb(n, k)


def holm(pvalues: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (same order as ``pvalues``): the i-th smallest p times (m - i + 1),
    made non-decreasing, capped at 1. A hypothesis is rejected at level a when its adjusted p <= a; this
    controls the family-wise error rate at a for any dependence among the tests (Holm 1979)."""
    p = np.asarray(pvalues, dtype=float)
    if p.size == 0:
        return p
    order = np.argsort(p, kind="stable")
    scaled = p[order] * (p.size - np.arange(p.size))
    out = np.empty_like(p)
    out[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return out


def kendall_tau(a: dict[str, float], b: dict[str, float]) -> tuple[float, int]:
    """Kendall's tau-b between two rankings given as estimator -> value (higher is better), over the
    estimators both name, and how many that is; NaN below 2 common estimators or when one side is constant.
    tau-b counts ties (``scipy.stats.kendalltau``'s default), so tied cells neither agree nor disagree."""
    common = sorted(set(a) & set(b))
    if len(common) < 2:
        return float("nan"), len(common)
    x, y = np.array([a[k] for k in common], float), np.array([b[k] for k in common], float)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan"), len(common)
    return float(sps.kendalltau(x, y).statistic), len(common)
