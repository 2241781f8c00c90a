"""Aggregate statistics over seeds: IQM, intervals, probability of improvement, ranks, accuracy AUC.

Pure functions over numpy arrays (no I/O, no pandas objects in signatures). The data shape follows
rliable (Agarwal et al. 2021, arXiv 2108.13264): one value per run (seed) of one configuration.

Deviations from rliable:
1. Within one report cell (algorithm x delay x other grid values) there is a single task, so the
   stratified bootstrap reduces to resampling seeds with replacement; strata are not modelled.
2. Below ``MIN_CONFIDENT_SEEDS`` seeds the cell statistic is the mean with a Student-t interval instead
   of the IQM with a percentile bootstrap interval (``estimate``; why: docs/report.md), and every such
   interval is marked low-confidence.
Bootstraps use ``scipy.stats.bootstrap(method="percentile")`` (maintained and vectorized; rliable itself
is not a dependency) with a seeded ``numpy.random.Generator``, so a report is reproducible bit for bit.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import integrate
from scipy import stats as sps

Statistic = Callable[..., np.ndarray]
MIN_CONFIDENT_SEEDS = 5  # below this many seeds an interval is marked low-confidence
CONFIDENCE = 0.95
N_RESAMPLES = 2000


def iqm(x: np.ndarray, axis: int = -1) -> np.ndarray | float:
    """Interquartile mean: the mean of the middle 50% of values along ``axis``.

    Same cut as ``scipy.stats.trim_mean(x, 0.25)`` (int(0.25 n) values dropped at each end), without
    its per-call overhead (the bootstrap calls this on thousands of resamples). NaN for an empty input.
    """
    x = np.asarray(x, dtype=float)
    n = x.shape[axis]
    if n == 0:
        return float("nan")
    cut = int(0.25 * n)
    middle = np.sort(x, axis=axis).take(np.arange(cut, n - cut), axis=axis)
    out = middle.mean(axis=axis)
    return float(out) if out.ndim == 0 else out


def mean(x: np.ndarray, axis: int = -1) -> np.ndarray | float:
    """Arithmetic mean along ``axis``; NaN for an empty input."""
    x = np.asarray(x, dtype=float)
    if x.shape[axis] == 0:
        return float("nan")
    return np.mean(x, axis=axis)


@dataclass(frozen=True)
class Estimate:
    """A point estimate over seeds with its interval and how both were computed.

    ``statistic``: "IQM", "mean" or "PoI"; ``method``: "bootstrap", "t" or "none" (no interval, ``lo``
    and ``hi`` NaN); ``n``: seeds used (for a PoI, the smaller side).
    """

    point: float
    lo: float
    hi: float
    n: int
    statistic: str
    method: str

    @property
    def low_confidence(self) -> bool:
        """True when fewer than MIN_CONFIDENT_SEEDS seeds stand behind the interval."""
        return self.n < MIN_CONFIDENT_SEEDS


def bootstrap_ci(
    x: np.ndarray,
    statistic: Statistic = iqm,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap CI of ``statistic`` over the seeds in ``x`` (shape (n_seeds,)).

    ``scipy.stats.bootstrap(method="percentile")`` with a generator seeded by ``seed`` (deterministic).
    Fewer than two seeds have no interval: both ends NaN. ``statistic`` must accept ``axis=``.
    """
    x = np.asarray(x, dtype=float)
    if x.size < 2:
        return float("nan"), float("nan")
    res = sps.bootstrap((x,), lambda s, axis: statistic(s, axis=axis), n_resamples=n_resamples,
                        vectorized=True, confidence_level=confidence, method="percentile",
                        rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def t_interval(x: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Student-t interval of the mean: mean +- t_{(1+c)/2, n-1} * s / sqrt(n); NaN ends for n < 2."""
    x = np.asarray(x, dtype=float)
    if x.size < 2:
        return float("nan"), float("nan")
    half = sps.t.ppf((1 + confidence) / 2, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)
    return float(x.mean() - half), float(x.mean() + half)


def estimate(x: np.ndarray, seed: int = 0, bounds: tuple[float, float] = (0.0, 1.0),
             statistic: str = "iqm") -> Estimate:
    """The report's point estimate and 95% interval of one cell's per-seed values ``x`` (n,).

    statistic "iqm" (the default): n >= MIN_CONFIDENT_SEEDS: IQM with a percentile bootstrap interval
    (rliable's choice, via scipy). 2 <= n < MIN_CONFIDENT_SEEDS: mean with a Student-t interval. At n <= 3
    the IQM *is* the mean (no value is trimmed) and the percentile bootstrap covers the truth far less often
    than 95% (measured on normal seeds: 51% at n=2, 75% at n=3, 88% at n=4) while the t interval keeps ~95%
    (docs/report.md). statistic "mean": the mean with a Student-t interval at every n >= 2 (what the pair
    tests compare, resolve.py). n = 1: the value, no interval. n = 0: NaN. NaN values are dropped; intervals
    are clipped to ``bounds`` (accuracy lies in 0..1).
    """
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    n = int(x.size)
    if n == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0, "mean", "none")
    if n == 1:
        return Estimate(float(x[0]), float("nan"), float("nan"), 1, "mean", "none")
    if n < MIN_CONFIDENT_SEEDS or statistic == "mean":
        point, (lo, hi), name, method = float(x.mean()), t_interval(x), "mean", "t"
    else:
        point, (lo, hi), name, method = float(iqm(x)), bootstrap_ci(x, iqm, seed=seed), "IQM", "bootstrap"
    return Estimate(point, max(lo, bounds[0]), min(hi, bounds[1]), n, name, method)


def cell_rule(statistic: str, band: str | None = "interval") -> str:
    """How ``estimate(..., statistic=statistic)`` computes a cell's value and (unless BAND is None) its 95%
    BAND, in words, for captions (the report prints the statistic its suite asks for: ``report.statistic``)."""
    if statistic == "mean":
        return "the mean over seeds" + (f" with a 95% Student-t {band}" if band else "")
    if band is None:
        return f"the IQM over seeds; the mean below {MIN_CONFIDENT_SEEDS} seeds"
    return (f"the IQM over seeds (mean of the middle 50%) with a 95% percentile bootstrap {band}, or with fewer "
            f"than {MIN_CONFIDENT_SEEDS} seeds the mean with a Student-t {band}")


def intervals_overlap(a: Estimate, b: Estimate) -> bool | None:
    """Whether the intervals of ``a`` and ``b`` overlap; None when either has no interval."""
    if not (np.isfinite(a.lo) and np.isfinite(b.lo)):
        return None
    return bool(a.lo <= b.hi and b.lo <= a.hi)


def probability_of_improvement(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray | float:
    """P(X > Y) + 0.5 P(X = Y) for one draw X from ``x`` and one independent draw Y from ``y``.

    Computed over all pairs (the Mann-Whitney U statistic divided by len(x) * len(y)) along ``axis``;
    leading axes are batch axes (scipy's vectorized bootstrap passes resamples that way). NaN when
    either side is empty.
    """
    x = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
    y = np.moveaxis(np.asarray(y, dtype=float), axis, -1)
    if x.shape[-1] == 0 or y.shape[-1] == 0:
        return float("nan")
    xx, yy = x[..., :, None], y[..., None, :]  # (..., n_x, 1), (..., 1, n_y)
    out = np.mean((xx > yy) + 0.5 * (xx == yy), axis=(-2, -1))
    return float(out) if out.ndim == 0 else out


def poi_estimate(x: np.ndarray, y: np.ndarray, seed: int = 0) -> Estimate:
    """PoI of ``x`` over ``y`` with a percentile bootstrap CI (``scipy.stats.bootstrap``, the two samples
    resampled independently). ``n`` is the smaller side. No interval when n < MIN_CONFIDENT_SEEDS: with
    few seeds that separate perfectly every resample separates too, and the bootstrap returns the
    zero-width "interval" [1, 1] (3 vs 3 seeds), which would claim certainty the data cannot give."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    x, y = x[~np.isnan(x)], y[~np.isnan(y)]
    n = int(min(x.size, y.size))
    point = float(probability_of_improvement(x, y))
    if n < MIN_CONFIDENT_SEEDS:
        return Estimate(point, float("nan"), float("nan"), n, "PoI", "none")
    res = sps.bootstrap((x, y), probability_of_improvement, n_resamples=N_RESAMPLES, vectorized=True,
                        confidence_level=CONFIDENCE, method="percentile", rng=np.random.default_rng(seed))
    ci = res.confidence_interval
    return Estimate(point, float(ci.low), float(ci.high), n, "PoI", "bootstrap")


def competition_ranks(values: np.ndarray, decimals: int = 3) -> np.ndarray:
    """1-based ranks, largest first, equal values sharing the best rank ("1224" ranking).

    Values are compared after rounding to ``decimals`` (the precision the table prints), so two cells
    that print as 0.340 share a rank. NaNs rank after every number and share one rank.
    """
    v = np.round(np.asarray(values, dtype=float), decimals)
    key = np.where(np.isnan(v), -np.inf, v)
    return 1 + (key[None, :] > key[:, None]).sum(axis=1).astype(np.int64)


def accuracy_auc(steps: np.ndarray, acc: np.ndarray) -> float:
    """Area under the accuracy curve by the trapezoid rule, divided by the step span.

    The result is the time-averaged accuracy, on the same 0..1 scale as the accuracy. One evaluation
    gives that accuracy; none gives NaN. ``steps`` must be increasing.
    """
    steps = np.asarray(steps, dtype=float)
    acc = np.asarray(acc, dtype=float)
    if acc.size == 0:
        return float("nan")
    span = steps[-1] - steps[0]
    if span <= 0:
        return float(acc[-1])
    return float(integrate.trapezoid(acc, steps) / span)


def delay_auc(delays: np.ndarray, acc: np.ndarray) -> float:
    """Area under the accuracy-vs-delay curve on the figure's axis x = log2(1 + delay), divided by the
    x span: the accuracy averaged over delays as the figure shows them. NaN points are dropped; one
    point gives its value; none gives NaN."""
    d, a = np.asarray(delays, dtype=float), np.asarray(acc, dtype=float)
    keep = ~(np.isnan(d) | np.isnan(a))
    order = np.argsort(d[keep])
    return accuracy_auc(np.log2(1.0 + d[keep][order]), a[keep][order])


def final_accuracy(acc: np.ndarray) -> float:
    """Accuracy at the last evaluation; NaN when there is none."""
    acc = np.asarray(acc, dtype=float)
    return float(acc[-1]) if acc.size else float("nan")


def best_accuracy(acc: np.ndarray) -> float:
    """Highest accuracy over all evaluations (NaN evaluations ignored); NaN when there is none."""
    acc = np.asarray(acc, dtype=float)
    if acc.size == 0 or np.all(np.isnan(acc)):
        return float("nan")
    return float(np.nanmax(acc))


def difference_estimate(x: np.ndarray, y: np.ndarray, seed: int = 0, statistic: str = "iqm") -> Estimate:
    """The difference of two independent cells' statistics (x − y) with a 95% interval, matched to
    ``estimate``: statistic "iqm" with >= MIN_CONFIDENT_SEEDS seeds on both sides, IQM(x) − IQM(y) with a
    two-sample percentile bootstrap (each side resampled independently, scipy); with >= 2 on both (or statistic
    "mean" at any n >= 2), mean difference with Welch's t interval (flagged low-confidence below
    MIN_CONFIDENT_SEEDS); else the point difference alone."""
    x, y = (np.asarray(v, dtype=float) for v in (x, y))
    x, y = x[~np.isnan(x)], y[~np.isnan(y)]
    n = int(min(x.size, y.size))
    if n == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0, "mean", "none")
    if n >= MIN_CONFIDENT_SEEDS and statistic == "iqm":
        res = sps.bootstrap((x, y), lambda a, b, axis: iqm(a, axis=axis) - iqm(b, axis=axis), n_resamples=N_RESAMPLES,
                            vectorized=True, confidence_level=CONFIDENCE, method="percentile",
                            rng=np.random.default_rng(seed))
        return Estimate(float(iqm(x) - iqm(y)), float(res.confidence_interval.low),
                        float(res.confidence_interval.high), n, "IQM", "bootstrap")
    point = float(x.mean() - y.mean())
    if n < 2:
        return Estimate(point, float("nan"), float("nan"), n, "mean", "none")
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    se = float(np.sqrt(vx + vy))
    dof = (vx + vy) ** 2 / (vx ** 2 / (x.size - 1) + vy ** 2 / (y.size - 1)) if se > 0 else 1.0
    half = float(sps.t.ppf((1 + CONFIDENCE) / 2, dof)) * se
    return Estimate(point, point - half, point + half, n, "mean", "t")


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
