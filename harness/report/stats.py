"""Aggregate statistics over seeds: the cells' statistics (``Statistic`` objects, registered: IQM and the
mean, a suite names one), intervals, probability of improvement, ranks, accuracy AUC. Whether two cells
differ (permutation tests, Holm) is significance.py's.

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

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import integrate
from scipy import stats as sps

from harness.registry import STATISTICS

Point = Callable[..., np.ndarray]   # a statistic over seeds along ``axis=`` (rliable's convention)
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
    statistic: Point = iqm,
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


def welch_interval(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Welch's t interval of mean(x) − mean(y) (two independent samples of at least 2 each)."""
    point = float(x.mean() - y.mean())
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    se = float(np.sqrt(vx + vy))
    dof = (vx + vy) ** 2 / (vx ** 2 / (x.size - 1) + vy ** 2 / (y.size - 1)) if se > 0 else 1.0
    half = float(sps.t.ppf((1 + CONFIDENCE) / 2, dof)) * se
    return point - half, point + half


def bootstrap_difference(x: np.ndarray, y: np.ndarray, statistic: Point, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of statistic(x) − statistic(y), each side resampled independently."""
    res = sps.bootstrap((x, y), lambda a, b, axis: statistic(a, axis=axis) - statistic(b, axis=axis),
                        n_resamples=N_RESAMPLES, vectorized=True, confidence_level=CONFIDENCE, method="percentile",
                        rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


@dataclass(frozen=True)
class Interval:
    """How a statistic's 95% interval is computed: for one cell (`cell(x, point, seed)`) and for the
    difference of two independent cells (`difference(x, y, point, seed)`). ``method`` is Estimate.method;
    ``words``, ``brief`` and ``between`` name it in captions (a cell's, the paper table's, a difference's)."""

    method: str
    words: str
    brief: str
    between: str
    cell: Callable[[np.ndarray, Point, int], tuple[float, float]]
    difference: Callable[[np.ndarray, np.ndarray, Point, int], tuple[float, float]]


BOOTSTRAP = Interval("bootstrap", "percentile bootstrap", "bootstrap", "bootstrap",
                     lambda x, point, seed: bootstrap_ci(x, point, seed=seed), bootstrap_difference)
STUDENT_T = Interval("t", "Student-t", "Student-t", "Welch t",            # of the mean, whatever the point
                     lambda x, point, seed: t_interval(x), lambda x, y, point, seed: welch_interval(x, y))


@dataclass(frozen=True)
class Statistic:
    """A cell statistic the report prints, as rliable passes one: a function over seeds and its interval.
    A suite names one (`report.statistic`), the registry STATISTICS holds them (harness/registry.py).

    ``name``: the suite's word; ``label``: what the tables print (Estimate.statistic, the cells'
    "statistic" column); ``point``: the estimate over seeds (accepts ``axis=``); ``interval``: its 95%
    interval; a cell of fewer than ``min_seeds`` seeds prints ``fallback`` instead; ``short`` and
    ``definition`` name it in captions."""

    name: str
    label: str
    point: Point
    interval: Interval
    short: str
    definition: str = ""
    min_seeds: int = 2
    fallback: Statistic | None = None

    def at(self, n: int) -> Statistic:
        """What a cell of ``n`` seeds prints: this statistic from min_seeds seeds on, its fallback below."""
        return self if n >= self.min_seeds or self.fallback is None else self.fallback


MEAN = Statistic("mean", "mean", mean, STUDENT_T, "the mean")
IQM = Statistic("iqm", "IQM", iqm, BOOTSTRAP, "the IQM", " (mean of the middle 50%)", MIN_CONFIDENT_SEEDS, MEAN)
for _statistic in (IQM, MEAN):                         # the default first: an unknown name lists them in this order
    STATISTICS.register(_statistic.name)(_statistic)


def named(name: str) -> Statistic:
    """The registered statistic a suite's `report.statistic` names (one line listing them when unknown)."""
    return STATISTICS.get(name, "report.statistic")


def estimate(x: np.ndarray, seed: int = 0, bounds: tuple[float, float] = (0.0, 1.0),
             statistic: Statistic = IQM) -> Estimate:
    """The report's point estimate and 95% interval of one cell's per-seed values ``x`` (n,).

    IQM (the default): n >= MIN_CONFIDENT_SEEDS: IQM with a percentile bootstrap interval (rliable's choice,
    via scipy). 2 <= n < MIN_CONFIDENT_SEEDS: mean with a Student-t interval. At n <= 3 the IQM *is* the mean
    (no value is trimmed) and the percentile bootstrap covers the truth far less often than 95% (measured on
    normal seeds: 51% at n=2, 75% at n=3, 88% at n=4) while the t interval keeps ~95% (docs/report.md). MEAN:
    the mean with a Student-t interval at every n >= 2 (what the pair tests compare, resolve.py). n = 1: the
    value, no interval. n = 0: NaN. NaN values are dropped; intervals are clipped to ``bounds`` (accuracy
    lies in 0..1).
    """
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    n = int(x.size)
    if n == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0, MEAN.label, "none")
    if n == 1:
        return Estimate(float(x[0]), float("nan"), float("nan"), 1, MEAN.label, "none")
    s = statistic.at(n)
    lo, hi = s.interval.cell(x, s.point, seed)
    return Estimate(float(s.point(x)), max(lo, bounds[0]), min(hi, bounds[1]), n, s.label, s.interval.method)


def cell_rule(statistic: Statistic, band: str | None = "interval") -> str:
    """How ``estimate(..., statistic=statistic)`` computes a cell's value and (unless BAND is None) its 95%
    BAND, in words, for captions (the report prints the statistic its suite asks for: ``report.statistic``)."""
    s, below = statistic, statistic.fallback
    if band is None:
        return f"{s.short} over seeds" + (f"; {below.short} below {s.min_seeds} seeds" if below else "")
    return (f"{s.short} over seeds{s.definition} with a 95% {s.interval.words} {band}"
            + (f", or with fewer than {s.min_seeds} seeds {below.short} with a {below.interval.words} {band}"
               if below else ""))


def table_rule(statistic: Statistic) -> str:
    """The paper table's words for its cells: "mean over seeds [95% Student-t CI]"."""
    s, below = statistic, statistic.fallback
    return (f"{s.label} over seeds [95% {s.interval.brief} CI]"
            + (f" ({below.short} [{below.interval.brief} CI] in cells with fewer than {s.min_seeds} seeds)"
               if below else ""))


def difference_rule(statistic: Statistic) -> str:
    """``difference_estimate``'s interval in words: "mean, Welch t interval"; * marks the fallback's cells, or
    with no fallback the low-confidence ones."""
    s, below = statistic, statistic.fallback
    if below is None:
        return (f"{s.label}, {s.interval.between} interval; * = fewer than {MIN_CONFIDENT_SEEDS} seeds a side "
                f"(low confidence)")
    return (f"{s.label} {s.interval.between} with >= {s.min_seeds} seeds a side; * = fewer seeds ({below.label}, "
            f"{below.interval.between} interval)")


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


def difference_estimate(x: np.ndarray, y: np.ndarray, seed: int = 0, statistic: Statistic = IQM) -> Estimate:
    """The difference of two independent cells' statistics (x − y) with a 95% interval, matched to
    ``estimate``: IQM with >= MIN_CONFIDENT_SEEDS seeds on both sides, IQM(x) − IQM(y) with a two-sample
    percentile bootstrap (each side resampled independently, scipy); with >= 2 on both (or MEAN at any
    n >= 2), mean difference with Welch's t interval (flagged low-confidence below MIN_CONFIDENT_SEEDS);
    else the point difference alone."""
    x, y = (np.asarray(v, dtype=float) for v in (x, y))
    x, y = x[~np.isnan(x)], y[~np.isnan(y)]
    n = int(min(x.size, y.size))
    if n == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0, MEAN.label, "none")
    if n < 2:
        return Estimate(float(x.mean() - y.mean()), float("nan"), float("nan"), n, MEAN.label, "none")
    s = statistic.at(n)
    lo, hi = s.interval.difference(x, y, s.point, seed)
    return Estimate(float(s.point(x) - s.point(y)), lo, hi, n, s.label, s.interval.method)
