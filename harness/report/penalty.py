"""The staleness penalty: what a delay costs each estimator, apart from where its step size put it.

*Penalty.* In each table (slice), for each estimator and each delay D above the table's smallest delay
d0 (normally 0): the mean final accuracy at d0 minus the mean at D, with a 95% interval. When the two cells
hold the same seeds (each once), the seeds are matched: the penalty is the mean of the per-seed differences
with a Student-t interval of that mean (``paired``); otherwise the difference of the two means with Welch's t
interval (``stats.difference_estimate``, statistic "mean", as ``stalebench compare`` prints it).

*Pairwise test of penalties.* For two estimators at the same D, the difference of their penalties. Matched
on both sides: an exact two-sample permutation test on the per-seed penalties (``significance.permutation_p``: the
labels of the per-seed differences are exchangeable under "same penalty"); otherwise Welch's t on the
contrast (mean_a(d0) − mean_a(D)) − (mean_b(d0) − mean_b(D)), variance the sum of the four s²/n, degrees
of freedom by Welch–Satterthwaite. Two-sided p-values of all a table's penalty pairs (every D) are
Holm-adjusted together (``significance.holm``); a pair is resolved at ``resolve.ALPHA``.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats as sps

from harness.report import significance, stats
from harness.report.horizon import Horizon
from harness.report.resolve import ALPHA
from harness.report.render import show
from harness.report.sections import Section
from harness.store import trialdir


@dataclass(frozen=True)
class Penalty:
    """One estimator's accuracy at the table's smallest delay minus at ``delay``."""

    slice: str
    estimator: str
    reference_delay: float
    delay: float
    seeds: int  # matched seeds (paired), else the smaller cell's
    penalty: float
    lo: float
    hi: float
    paired: bool
    per_seed: tuple[float, ...] = ()  # the per-seed differences when paired (for the pair tests)
    parts: tuple[tuple[float, float, int], ...] = ()  # (mean, variance, n) at the reference and at delay


@dataclass(frozen=True)
class PenaltyTest:
    """The difference of two estimators' penalties at one delay of one table (a minus b)."""

    slice: str
    delay: float
    a: str
    b: str
    difference: float
    p: float
    p_holm: float
    resolved: bool
    method: str  # "permutation" (matched seeds on both sides) or "welch"


def penalties(cell_trials: pd.DataFrame) -> tuple[list[Penalty], list[PenaltyTest]]:
    """Every estimator's penalty at every delay of every table of ``cell_trials`` (``tables.expand_shared``
    rows with ``slice``, ``final_acc``, ``status``, ``seed``) and the Holm-adjusted pair tests of penalties."""
    done = cell_trials[cell_trials["status"].isin(trialdir.FINAL) & cell_trials["delay"].notna()]
    out, tests = [], []
    for label, part in done.groupby("slice", sort=True):
        delays = sorted(part["delay"].astype(float).unique())
        mine = []
        for algo, g in part.groupby("algorithm", sort=True):
            ref = _seeds(g[g["delay"].astype(float) == delays[0]])
            for d in delays[1:]:
                at = _seeds(g[g["delay"].astype(float) == d])
                if len(ref) >= 2 and len(at) >= 2:
                    mine.append(_penalty(str(label), str(algo), delays[0], d, ref, at))
        out += mine
        tests += _tests(mine)
    return out, tests


def _seeds(g: pd.DataFrame) -> pd.Series:
    """Final accuracy by seed (NaN dropped); a repeated seed makes the index non-unique (no matching)."""
    s = pd.Series(g["final_acc"].to_numpy(dtype=float), index=g["seed"].to_numpy())
    return s[s.notna()]


def _penalty(label: str, algo: str, d0: float, d: float, ref: pd.Series, at: pd.Series) -> Penalty:
    parts = tuple((float(x.mean()), float(x.var(ddof=1)), int(x.size)) for x in (ref, at))
    if ref.index.is_unique and at.index.is_unique and set(ref.index) == set(at.index):
        diff = (ref - at.reindex(ref.index)).to_numpy()
        lo, hi = stats.t_interval(diff)
        return Penalty(label, algo, d0, d, int(diff.size), float(diff.mean()), lo, hi, True, tuple(diff), parts)
    e = stats.difference_estimate(ref.to_numpy(), at.to_numpy(), statistic=stats.MEAN)
    return Penalty(label, algo, d0, d, e.n, e.point, e.lo, e.hi, False, (), parts)


def welch_contrast_p(a: Penalty, b: Penalty) -> float:
    """Two-sided p of Welch's t for (a's penalty − b's penalty) from the four cells' means and variances."""
    cells = [*a.parts, *b.parts]
    terms = np.array([v / n for _, v, n in cells])
    se2 = float(terms.sum())
    diff = a.penalty - b.penalty
    if se2 == 0:
        return 1.0 if diff == 0 else 0.0
    dof = se2 ** 2 / float(sum(t ** 2 / (n - 1) for t, (_, _, n) in zip(terms, cells)))
    return float(2 * sps.t.sf(abs(diff) / np.sqrt(se2), dof))


def _tests(mine: list[Penalty]) -> list[PenaltyTest]:
    raw = []
    for a, b in combinations(mine, 2):
        if a.delay != b.delay:
            continue
        if a.paired and b.paired:
            raw.append((a, b, significance.permutation_p(np.array(a.per_seed), np.array(b.per_seed)), "permutation"))
        else:
            raw.append((a, b, welch_contrast_p(a, b), "welch"))
    adjusted = significance.holm(np.array([r[2] for r in raw]))
    return [PenaltyTest(a.slice, a.delay, a.estimator, b.estimator, a.penalty - b.penalty, p, float(q),
                        bool(q <= ALPHA), method) for (a, b, p, method), q in zip(raw, adjusted)]


def penalty_section(found: list[Penalty], tests: list[PenaltyTest], reference: dict[float, str],
                    curves: list[Horizon] = ()) -> list[Section]:
    """The first-screen section "Staleness penalty"; ``reference`` labels each reference delay with its real
    staleness (regime.staleness_label); ``curves`` (horizon.horizons) say beside each penalty whether the
    estimator's curve at the reference delay is flat at the last evaluation. [] when no table has two delays."""
    if not found:
        return []
    tables = any(p.slice for p in found)
    curve = {(h.slice, h.estimator): h for h in curves}
    rows = [{**({"table": p.slice} if tables else {}), "estimator": p.estimator,
             "from → to": f"delay {reference.get(p.reference_delay, show(p.reference_delay))} → {show(p.delay)}",
             "penalty [95% CI]": f"{p.penalty:+.3f} [{p.lo:+.3f}, {p.hi:+.3f}]",
             "seeds": f"{p.seeds} {'matched' if p.paired else 'per cell (Welch)'}",
             **({"curve at the reference delay": _curve_words(curve.get((p.slice, p.estimator)))} if curve else {})}
            for p in found]
    text = ("What the delay costs each estimator at its own step size: mean final accuracy at the table's "
            "smallest delay minus at the larger one (positive: it lost accuracy), with a 95% interval: the seeds "
            "matched where both cells hold the same seeds (Student-t interval of the per-seed differences), "
            "else Welch's t. Below, each pair of estimators' difference of penalties: an exact permutation test "
            "on the per-seed penalties where both are matched, else Welch's t on the four cells; p-values "
            f"Holm-adjusted over the table, resolved at {ALPHA:g}. This is not the table's ranking: an estimator "
            "can lose little to staleness and still rank low because of the step size it tolerates."
            + (" Beside each, its curve at the reference delay: flat when the mean rise from the evaluation nearest "
               "half the budget to the last is below one binomial standard error of one evaluation; else still "
               "rising, and the penalty is that of a recipe tuned for this budget." if curve else ""))
    blocks = [{"text": text}, {"table": {"columns": list(rows[0]), "rows": rows}}]
    if tests:
        trows = [{**({"table": t.slice} if tables else {}), "delay": show(t.delay), "pair": f"{t.a} − {t.b}",
                  "difference of penalties": f"{t.difference:+.3f}", "test": t.method, "p": f"{t.p:.2g}",
                  "p (Holm)": f"{t.p_holm:.2g}", "resolved": "yes" if t.resolved else "no"} for t in tests]
        blocks.append({"table": {"columns": list(trows[0]), "rows": trows}})
    return [Section("Staleness penalty", blocks)]


def _curve_words(h: Horizon | None) -> str:
    return "—" if h is None else f"{h.words} (rise {h.rise:+.3f}, SE {h.se:.3f})"
