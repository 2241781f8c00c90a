"""Aggregate statistics over seeds: IQM, bootstrap CIs, probability of improvement, accuracy AUC.

Pure functions over numpy arrays (no I/O, no pandas objects in signatures). The data shape follows
rliable (Agarwal et al. 2021, arXiv 2108.13264): one value per run (seed) of one configuration.

Deviations from rliable:
1. Within one report cell (algorithm x delay x other grid values) there is a single task, so the
   stratified bootstrap reduces to resampling seeds with replacement; strata are not modelled.
2. The probability of improvement is reported as a point estimate, without a bootstrap CI.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy import integrate

Statistic = Callable[..., np.ndarray]


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


def bootstrap_ci(
    x: np.ndarray,
    statistic: Statistic = iqm,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap CI of ``statistic`` over the seeds in ``x`` (shape (n_seeds,)).

    Resamples seeds with replacement ``n_resamples`` times from a generator seeded with ``seed``, so the
    result is deterministic. With one seed there is nothing to resample: the CI is the point itself
    (lo == hi == x[0]). With no seeds both ends are NaN. ``statistic`` must accept ``axis=``.
    """
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return float("nan"), float("nan")
    if x.size == 1:
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_resamples, x.size))  # (R, n)
    values = statistic(x[idx], axis=1)  # (R,)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(values, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y) + 0.5 P(X = Y) for one draw X from ``x`` and one independent draw Y from ``y``.

    Computed over all pairs (the Mann-Whitney U statistic divided by len(x) * len(y)). NaN when either
    side is empty.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.size == 0 or y.size == 0:
        return float("nan")
    greater = x[:, None] > y[None, :]  # (n_x, n_y)
    equal = x[:, None] == y[None, :]
    return float(np.mean(greater + 0.5 * equal))


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
