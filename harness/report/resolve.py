"""How much a table can say: which estimator pairs it resolves, and whether slices rank alike.

*Resolved pairs.* In each paper table (one slice), every pair of estimators at the same delay is tested
on its seeds' final accuracies with a two-sample permutation test on the difference of means
(``significance.permutation_p``), and the p-values of all the table's pairs (every delay) are adjusted together
by Holm's method (``significance.holm``); a pair is *resolved* when its adjusted p is at most ``ALPHA``, so the
chance that a table shows any resolved pair where there is no difference is at most 5%. Why this test:
it assumes no distribution (only that the seeds' labels are exchangeable) and is exact at the seed counts
a table has: at 8 vs 8 seeds its smallest p is 2/C(16, 8) = 1.6e-4, below Holm's strictest threshold for a
135-pair table (10 estimators x 3 delays: 0.05/135 = 3.7e-4), so a clear difference can be resolved;
at 3 vs 3 seeds the smallest p is 2/C(6, 3) = 0.1 and nothing can be, which the count shows and
the caption then says (``resolution_floor``). A rank test (Mann-Whitney) has the same smallest p but
ignores how far apart the seeds are.
Pairs whose cells are the same trials (the shared on-policy trial at delay 0 standing for every
estimator) are not tested: they are one measurement.

*Leave-one-seed-out stability.* A resolved pair may rest on one seed. For each seed of a table that
resolves any pair, the whole table is tested again without that seed (every cell loses it; Holm over the
pairs still testable), and each pair records in how many of those tables it stays resolved
(``loso_resolved`` of ``loso_tables``): 8 of 8 says no single seed carries it, 2 of 8 that most do. A pair
kept in fewer than ``FRAGILE_SHARE`` of them (fewer than 6 of 8) is *fragile*, and the report says so beside
every standing that rests on it.

*Standing at the largest delay.* Each estimator's answer to "is it the one to trust at the largest
delay?", read off the resolved pairs by one rule (pre-registered for v3 in docs/benchmark-v3.md §5): *best*
when it is resolved above every other estimator there; *below X, Y* when X and Y are resolved above it;
else *not resolved from the best*. With it, the pair with its rival (the other estimator of highest mean
there): the difference, Holm-adjusted p and, when resolved, the leave-one-seed-out count.

*Ranking agreement.* Between every two slices (for a grid over ``model.base``: every two bases), Kendall's
tau-b between the estimators' values at the largest delay (``significance.kendall_tau``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import combinations

import numpy as np
import pandas as pd

from harness.store import trialdir
from harness.report import significance
from harness.report.render import show

ALPHA = 0.05  # family-wise error rate of one table's resolved pairs
FRAGILE_SHARE = 0.75  # a resolved pair kept in fewer than this share of leave-one-seed-out tables is fragile


@dataclass(frozen=True)
class PairTest:
    """One estimator pair at one delay of one table."""

    slice: str
    delay: float
    a: str
    b: str
    seeds_a: int
    seeds_b: int
    mean_diff: float  # mean final accuracy of a minus b
    p: float  # permutation test, two-sided
    p_holm: float  # Holm-adjusted over the table's pairs
    resolved: bool
    loso_resolved: int = 0  # tables with one seed left out in which the pair is still resolved
    loso_tables: int = 0  # tables with one seed left out (0: the table resolves no pair, so none was made)


def pair_tests(cell_trials: pd.DataFrame) -> list[PairTest]:
    """Every testable pair of every table (slice) of ``cell_trials`` (``tables.expand_shared`` rows with
    ``slice``, ``final_acc``, ``status``, ``seed``), with Holm's adjustment per table and, where the table
    resolves a pair, each pair's leave-one-seed-out count."""
    out: list[PairTest] = []
    for slice_label, part in _finished(cell_trials).groupby("slice", sort=True):
        tests = _table_tests(part)
        seeds = sorted(part["seed"].dropna().unique()) if "seed" in part else []
        left_out = seeds if any(t.resolved for t in tests) and len(seeds) > 1 else []
        kept: dict[tuple[float, str, str], int] = {}
        for seed in left_out:
            for t in _table_tests(part[part["seed"] != seed]):
                kept[(t.delay, t.a, t.b)] = kept.get((t.delay, t.a, t.b), 0) + t.resolved
        out += [replace(t, slice=str(slice_label), loso_resolved=kept.get((t.delay, t.a, t.b), 0),
                        loso_tables=len(left_out)) for t in tests]
    return out


def _table_tests(part: pd.DataFrame) -> list[PairTest]:
    """The pair tests of one table's finished trials, Holm-adjusted together (slice left blank)."""
    raw = []
    for delay, at in part.groupby("delay", sort=True):
        cells = {}
        for algo, g in at.groupby("algorithm", sort=True):
            finals = g["final_acc"].to_numpy(dtype=float)
            cells[str(algo)] = (finals[~np.isnan(finals)], frozenset(g["trial_id"]))
        for a, b in combinations(sorted(cells), 2):
            (x, ids_a), (y, ids_b) = cells[a], cells[b]
            if ids_a == ids_b or x.size < 2 or y.size < 2:
                continue
            raw.append((float(delay), a, b, x, y, significance.permutation_p(x, y)))
    adjusted = significance.holm(np.array([r[-1] for r in raw]))
    return [PairTest("", d, a, b, x.size, y.size, float(x.mean() - y.mean()), p, float(q), bool(q <= ALPHA))
            for (d, a, b, x, y, p), q in zip(raw, adjusted)]


@dataclass(frozen=True)
class Standing:
    """One estimator at the largest tested delay of one table (see the module docstring)."""

    slice: str
    delay: float
    estimator: str
    mean: float  # mean final accuracy over its seeds (NaN: none scored)
    verdict: str  # "best" | "not resolved from the best" | "below" | "not tested"
    above_it: tuple[str, ...]  # the estimators resolved above it (verdict "below"), highest mean first
    rival: PairTest | None  # its pair with the other estimator of highest mean there (None: not tested)
    others: int  # the other estimators at that delay
    held: tuple[tuple[str, int, int], ...] = ()  # per resolved pair: (other, loso_resolved, loso_tables)

    @property
    def fragile(self) -> tuple[str, ...]:
        """The others of its resolved pairs that stay resolved in fewer than FRAGILE_SHARE of the tables with
        one seed left out (e.g. fewer than 6 of 8)."""
        return tuple(o for o, k, n in self.held if is_fragile(k, n))

    @property
    def answer_loso(self) -> str:
        """``answer`` with each resolved pair's leave-one-seed-out count, e.g. "below m2po (3 of 8, fragile),
        topr (8 of 8) at delay 64"."""
        counts = {o: f"{k} of {n}" + (", fragile" if is_fragile(k, n) else "") for o, k, n in self.held}
        if self.verdict == "below":
            return (f"below {', '.join(f'{o} ({counts[o]})' for o in self.above_it)} at delay {show(self.delay)}")
        if self.verdict == "best":
            return f"{self.answer[:-1]}: {', '.join(f'{o} {c}' for o, c in counts.items())})"
        return self.answer

    @property
    def answer(self) -> str:
        """One line, e.g. "best at delay 64 (resolved above all 4 others)"."""
        d = show(self.delay)
        if self.verdict == "best":
            return f"best at delay {d} (resolved above " + (
                "the other)" if self.others == 1 else f"all {self.others} others)")
        if self.verdict == "below":
            return f"below {', '.join(self.above_it)} at delay {d}"
        if self.verdict == "not tested":
            return f"not tested at delay {d} (fewer than 2 scored seeds)"
        return f"not resolved from the best at delay {d}"


def standings(cell_trials: pd.DataFrame, tests: list[PairTest]) -> list[Standing]:
    """Every estimator's standing at the largest delay with tested pairs, per table (``cell_trials`` as
    pair_tests reads them). Best means resolved above every other estimator at that delay, so one that could
    not be tested there (fewer than 2 scored seeds) leaves every other one at most "not resolved from the
    best"."""
    out: list[Standing] = []
    for slice_label, part in _finished(cell_trials).groupby("slice", sort=True):
        mine = [t for t in tests if t.slice == str(slice_label)]
        if not mine:
            continue
        delay = max(t.delay for t in mine)
        at = [t for t in mine if t.delay == delay]
        finals = {str(a): g["final_acc"].to_numpy(dtype=float)
                  for a, g in part[part["delay"] == delay].groupby("algorithm", sort=True)}
        means = {a: float(x[~np.isnan(x)].mean()) if (~np.isnan(x)).any() else float("nan")
                 for a, x in finals.items()}
        rank = lambda n: (np.isnan(means[n]), -np.nan_to_num(means[n]), n)        # noqa: E731  highest first
        for e in sorted(means, key=rank):
            pairs = {(t.b if t.a == e else t.a): t for t in at if e in (t.a, t.b)}
            above = tuple(sorted((o for o, t in pairs.items() if t.resolved and higher(t) == o), key=rank))
            wins = sum(t.resolved and higher(t) == e for t in pairs.values())
            if not pairs:
                verdict = "not tested"
            else:
                verdict = "below" if above else ("best" if wins == len(means) - 1 else "not resolved from the best")
            rival = pairs[min(pairs, key=rank)] if pairs else None
            held = tuple((o, t.loso_resolved, t.loso_tables) for o, t in sorted(pairs.items(), key=lambda p: rank(p[0]))
                         if t.resolved)
            out.append(Standing(str(slice_label), delay, e, means[e], verdict, above, rival, len(means) - 1, held))
    return out


def is_fragile(kept: int, tables: int) -> bool:
    """Whether a resolved pair rests on few seeds: it stays resolved in fewer than FRAGILE_SHARE of the
    leave-one-seed-out tables (6 of 8 holds, 5 of 8 is fragile); False when no such table was made."""
    return tables > 0 and kept < FRAGILE_SHARE * tables


def _finished(cell_trials: pd.DataFrame) -> pd.DataFrame:
    """The rows the pair tests read: trials that ended, at a delay."""
    return cell_trials[cell_trials["status"].isin(trialdir.FINAL) & cell_trials["delay"].notna()]


def higher(t: PairTest) -> str:
    """The estimator of the pair with the higher mean."""
    return t.a if t.mean_diff > 0 else t.b


def resolved_counts(tests: list[PairTest], slice_label: str, delays: list[float]) -> list[tuple[int, int]]:
    """(resolved, tested) pairs at each of ``delays`` in one table."""
    mine = [t for t in tests if t.slice == slice_label]
    return [(sum(t.resolved for t in mine if t.delay == d), sum(t.delay == d for t in mine)) for d in delays]


def resolution_floor(tests: list[PairTest], slice_label: str) -> str:
    """A caption sentence when one table's seeds cannot resolve any pair at all: every pair's smallest
    attainable p (``significance.smallest_permutation_p``) is above Holm's first threshold, ALPHA / (tested pairs);
    else ""."""
    mine = [t for t in tests if t.slice == slice_label]
    if not mine:
        return ""
    floor = min(significance.smallest_permutation_p(t.seeds_a, t.seeds_b) for t in mine)
    threshold = ALPHA / len(mine)
    if floor <= threshold:
        return ""
    return (f"No pair can be resolved at these seed counts: the smallest p a pair can reach is {floor:.2g}, above "
            f"Holm's first threshold {ALPHA:g}/{len(mine)} = {threshold:.2g}, so a 0 says nothing about the "
            f"differences; more seeds per cell or fewer pairs can resolve them.")


def ranking_agreement(cells: pd.DataFrame, delay: float) -> pd.DataFrame:
    """Kendall's tau-b between every two slices' estimator values (``final``) at ``delay``: one row per
    slice pair (slice_a, slice_b, delay, tau, estimators); empty with fewer than two slices."""
    at = cells[(pd.to_numeric(cells["delay"], errors="coerce") == delay) & cells["final"].notna()]
    rankings = {str(s): dict(zip(g["algorithm"].astype(str), g["final"].astype(float)))
                for s, g in at.groupby("slice", sort=True)}
    rows = []
    for a, b in combinations(sorted(rankings), 2):
        tau, n = significance.kendall_tau(rankings[a], rankings[b])
        rows.append({"slice_a": a, "slice_b": b, "delay": delay, "tau": tau, "estimators": n})
    return pd.DataFrame(rows, columns=["slice_a", "slice_b", "delay", "tau", "estimators"])
