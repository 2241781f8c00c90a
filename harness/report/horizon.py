"""Whether the budget is long enough: each estimator's curve at its table's smallest delay, flat or still rising.

The rule (docs/benchmark-v4.md §2, fixed 2026-12-06 before any v4 trial): over a cell's finished seeds (at least
2), the mean of acc(T) − acc(T/2), T the last evaluation and T/2 the evaluation nearest half of it (the earlier
on a tie), on the curves as scored (a diverged trial 0 from its divergence on: tables.scored_curve). The cell is
**still rising at T** when that rise is at least one binomial standard error of one evaluation at the mean
acc(T), √(p(1 − p)/n), n the smallest evaluation set of its trials; otherwise it is **flat** (the rule's word),
printed "falling at T" where the rise is at most −1 SE and "0 at T on every seed" where nothing is left (SE 0:
rising only if the rise is above 0). A penalty read from a rising cell is that of a recipe tuned for T steps.
The report prints it beside each estimator's staleness penalty.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.report.load import ACC_KEY
from harness.store import trialdir


@dataclass(frozen=True)
class Horizon:
    """One estimator's curve at its table's smallest delay."""

    slice: str
    estimator: str
    delay: float
    last_step: int
    mid_step: int
    rise: float  # mean over seeds of acc(last_step) - acc(mid_step)
    se: float  # one binomial SE of one evaluation at the mean acc(last_step)
    seeds: int
    final: float  # the mean acc(last_step)

    @property
    def flat(self) -> bool:
        """The rule's answer: not still rising (flat or falling)."""
        return self.rise < self.se if self.se > 0 else self.rise <= 0

    @property
    def words(self) -> str:
        if not self.flat:
            return f"still rising at {self.last_step}"
        if self.final == 0:
            return f"0 at {self.last_step} on every seed"
        return f"falling at {self.last_step}" if self.rise < 0 and self.rise <= -self.se else "flat"

    def record(self) -> dict:
        return {**self.__dict__, "flat": self.flat, "words": self.words}


def horizons(cell_trials: pd.DataFrame, scored_evals: pd.DataFrame) -> list[Horizon]:
    """The check for every estimator at the smallest delay of every table (``tables.Analysis``'s cell_trials and
    scored_evals). A cell is left out when its finished trials have no evaluation set size or disagree on their
    last two evaluation steps."""
    done = cell_trials[cell_trials["status"].isin(trialdir.FINAL) & cell_trials["delay"].notna()]
    curves = {tid: g.set_index("step")[ACC_KEY] for tid, g in scored_evals.groupby("trial_id", sort=False)}
    out = []
    for label, part in done.groupby("slice", sort=True):
        d0 = float(part["delay"].astype(float).min())
        for algo, g in part[part["delay"].astype(float) == d0].groupby("algorithm", sort=True):
            rises, lasts, steps = [], [], set()
            for tid in g["trial_id"]:
                c = curves.get(tid)
                if c is None or c.empty:
                    continue
                last = float(c.index.max())
                mid = min(c.index, key=lambda s: (abs(s - last / 2), s))
                rises.append(float(c[last] - c[mid]))
                lasts.append(float(c[last]))
                steps.add((int(last), int(mid)))
            sizes = g["eval_size"].to_numpy(dtype=float)
            if len(rises) < 2 or len(steps) != 1 or not np.isfinite(sizes).all():
                continue
            p = float(np.mean(lasts))
            (last, mid), = steps
            out.append(Horizon(str(label), str(algo), d0, last, mid, float(np.mean(rises)),
                               math.sqrt(p * (1 - p) / float(sizes.min())), len(rises), p))
    return out
