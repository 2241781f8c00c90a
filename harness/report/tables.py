"""Per-trial summaries, per-cell statistics and the leaderboard, as pandas frames.

A *cell* is one grid point without its seed: every params.json key but ``trial_id`` and ``seed``
(algorithm, delay, eps, group_size, ...). A *config* is a cell without its delay; its label names the
algorithm and any other grid key that varies in the suite.

Statistics use the *finished* trials of a cell (status ``completed`` or ``diverged``); running and
failed trials are counted in the status columns and listed per trial, never used in the numbers. A
diverged trial's weights are unusable, so its final accuracy counts as 0 (its best accuracy is kept).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.report import collapse as col
from harness.report import stats
from harness.report.load import ACC_KEY, CELL_AXES, SuiteResults
from harness.report.render import show

FINISHED = ("completed", "diverged")
STATUSES = ("completed", "diverged", "failed", "running")
CELL_COLUMNS = ("config", "seeds", "iqm_final", "ci_low", "ci_high", "mean_final", "iqm_best", "iqm_auc",
                "collapse_rate", "median_steps_to_collapse", "status_counts",
                *(f"n_{s}" for s in STATUSES), "poi_vs_baseline")


def summarize_trials(res: SuiteResults) -> pd.DataFrame:
    """``res.trials`` plus final/best/AUC accuracy, collapse outcome and mean realized staleness."""
    rules = res.settings.collapse
    ev_idx = res.evals.groupby("trial_id", sort=False).indices
    me_idx = res.metrics.groupby("trial_id", sort=False).indices
    ev_step, acc = res.evals["step"].to_numpy(), res.evals[ACC_KEY].to_numpy()
    m = {k: res.metrics[k].to_numpy() for k in res.metrics.columns if k != "trial_id"}
    empty = np.array([], dtype=np.int64)
    out = []
    for t in res.trials[["trial_id", "status", "last_step", "diverged_step"]].itertuples(index=False):
        ei, mi = ev_idx.get(t.trial_id, empty), me_idx.get(t.trial_id, empty)
        keep = ~np.isnan(acc[ei])
        steps_t, acc_t = ev_step[ei][keep], acc[ei][keep]
        last = _int_or_none(t.last_step)
        c = col.detect_collapse(
            rules, steps_t, acc_t, m["step"][mi], m["loss_nonfinite"][mi], m["policy/entropy"][mi],
            m["is/ratio_max"][mi], t.status, _int_or_none(t.diverged_step),
            last if last is not None else (int(m["step"][mi][-1]) if mi.size else None),
        )
        stale = m["stale/mean"][mi]
        out.append({
            "final_acc": 0.0 if t.status == "diverged" else stats.final_accuracy(acc_t),
            "best_acc": stats.best_accuracy(acc_t),
            "auc_acc": stats.accuracy_auc(steps_t, acc_t),
            "n_evals": int(acc_t.size),
            "collapsed": c.collapsed,
            "collapse_step": np.nan if c.step is None else c.step,
            "collapse_reason": c.reason,
            "stale_mean": float(np.nanmean(stale)) if np.isfinite(stale).any() else np.nan,
        })
    return pd.concat([res.trials.reset_index(drop=True), pd.DataFrame(out)], axis=1)


def _int_or_none(value: object) -> int | None:
    """An int from a status.json field that may be None, NaN or a number."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def varying_keys(trials: pd.DataFrame, keys: list[str]) -> list[str]:
    """The cell keys other than algorithm and delay that take more than one value in the suite."""
    with_params = trials[trials["has_params"]]
    return [k for k in keys if k not in CELL_AXES and with_params[k].nunique(dropna=False) > 1]


def config_label(row: pd.Series | dict, other: list[str]) -> str:
    """``algorithm`` plus ``key=value`` for every other varying key, e.g. ``m2po eps=0.2``."""
    parts = [str(row["algorithm"])] + [f"{k}={show(row[k])}" for k in other]
    return " ".join(parts)


def status_counts(statuses: pd.Series) -> str:
    """``'3 completed, 1 failed'``: counts in STATUSES order, then any other status by name."""
    counts = statuses.value_counts()
    order = [s for s in STATUSES if s in counts] + sorted(set(counts.index) - set(STATUSES))
    return ", ".join(f"{counts[s]} {s}" for s in order)


def cell_table(trials: pd.DataFrame, keys: list[str], baseline: str, seed: int = 0) -> pd.DataFrame:
    """One row per cell: seeds, IQM final accuracy with 95% bootstrap CI, mean final, IQM best, IQM
    AUC, collapse rate, median steps-to-collapse, PoI vs ``baseline`` in the same cell otherwise,
    status counts. ``keys`` are the cell keys (``SuiteResults.param_keys``)."""
    other = varying_keys(trials, keys)
    rows = []
    known = trials[trials["has_params"]]
    for cell_values, group in known.groupby(keys, dropna=False, sort=False):
        cell = dict(zip(keys, cell_values if isinstance(cell_values, tuple) else (cell_values,)))
        done = group[group["status"].isin(FINISHED)]
        final = done["final_acc"].to_numpy(dtype=float)
        final = final[~np.isnan(final)]
        lo, hi = stats.bootstrap_ci(final, stats.iqm, seed=seed)
        rows.append({
            **cell,
            "config": config_label(cell, other),
            "seeds": len(done),
            "iqm_final": stats.iqm(final),
            "ci_low": lo,
            "ci_high": hi,
            "mean_final": stats.mean(final),
            "iqm_best": stats.iqm(_finite(done["best_acc"])),
            "iqm_auc": stats.iqm(_finite(done["auc_acc"])),
            "collapse_rate": col.collapse_rate(done["collapsed"].to_numpy()),
            "median_steps_to_collapse": col.median_steps_to_collapse(done["collapse_step"].to_numpy()),
            "status_counts": status_counts(group["status"]),
            **{f"n_{s}": int((group["status"] == s).sum()) for s in STATUSES},
            "_final": final,
        })
    if not rows:
        return pd.DataFrame(columns=[*keys, *CELL_COLUMNS])
    cells = pd.DataFrame(rows)
    cells["poi_vs_baseline"] = _poi(cells, keys, baseline)
    return cells.drop(columns="_final").sort_values(["delay", "config"], kind="stable", ignore_index=True)


def _finite(values: pd.Series) -> np.ndarray:
    """Float values without NaN."""
    x = values.to_numpy(dtype=float)
    return x[~np.isnan(x)]


def _poi(cells: pd.DataFrame, keys: list[str], baseline: str) -> list[float]:
    """P(cell's final acc > baseline's) per cell, against the baseline cell with the same other keys;
    NaN for the baseline itself and where no baseline cell exists."""
    others = [k for k in keys if k != "algorithm"]
    base = {tuple(r[k] for k in others): r["_final"]
            for _, r in cells[cells["algorithm"] == baseline].iterrows()}
    out = []
    for _, r in cells.iterrows():
        y = base.get(tuple(r[k] for k in others))
        mine = r["algorithm"] == baseline or y is None
        out.append(np.nan if mine else stats.probability_of_improvement(r["_final"], y))
    return out


def ranked(cells: pd.DataFrame) -> pd.DataFrame:
    """Cells sorted by IQM final accuracy (best first, NaN last) with a 1-based ``rank`` column."""
    out = cells.sort_values(["iqm_final", "config"], ascending=[False, True], na_position="last")
    return out.reset_index(drop=True).assign(rank=lambda d: np.arange(1, len(d) + 1))


def leaderboard(cells: pd.DataFrame) -> tuple[pd.DataFrame, float]:
    """Ranked cells at the largest delay, and that delay (NaN when no trial has a delay)."""
    delays = cells["delay"].to_numpy(dtype=float)
    if np.isnan(delays).all():
        return ranked(cells), float("nan")
    top = float(np.nanmax(delays))
    return ranked(cells[cells["delay"] == top]), top


def staleness_summary(trials: pd.DataFrame, rel_tol: float = 0.1, abs_tol: float = 0.5) -> pd.DataFrame:
    """Per configured delay: trials with stale/mean, mean realized staleness, and a flag when it
    differs from the delay by more than ``max(abs_tol, rel_tol * delay)`` (a warm-up of ``delay`` steps
    with less staleness lowers the mean a little, hence the tolerance)."""
    rows = []
    for delay, group in trials[trials["has_params"]].groupby("delay", dropna=False, sort=True):
        s = _finite(group["stale_mean"])
        realized = float(s.mean()) if s.size else np.nan
        d = float(delay)
        flag = bool(s.size and np.isfinite(d) and abs(realized - d) > max(abs_tol, rel_tol * d))
        rows.append({"delay": delay, "trials": int(s.size), "stale_mean": realized, "differs": flag})
    return pd.DataFrame(rows, columns=["delay", "trials", "stale_mean", "differs"])


@dataclass(frozen=True)
class Analysis:
    """The report's tables for one suite."""

    trials: pd.DataFrame  # summarize_trials plus a "config" label
    other: list[str]  # varying grid keys other than algorithm and delay
    cells: pd.DataFrame  # cell_table
    board: pd.DataFrame  # ranked cells at the largest delay
    top_delay: float
    staleness: pd.DataFrame  # staleness_summary


def analyse(res: SuiteResults) -> Analysis:
    """All tables of a suite report."""
    trials = summarize_trials(res)
    other = varying_keys(trials, res.param_keys)
    trials["config"] = [config_label(r, other) if r["has_params"] else "" for r in trials.to_dict("records")]
    cells = cell_table(trials, res.param_keys, res.settings.baseline)
    board, top_delay = leaderboard(cells)
    return Analysis(trials, other, cells, board, top_delay, staleness_summary(trials))
