"""Per-trial summaries, per-cell statistics and the leaderboard, as pandas frames.

A *cell* is one grid point without its seed: every params.json key but the reserved ones (algorithm,
delay, eps, group_size, ...). A *config* is a cell without its delay; its label names the algorithm and
any other grid key that varies in the suite. A *slice* is a combination of the varying keys other than
algorithm and delay (e.g. ``eps=0.2 group_size=8``).

Statistics use the *finished* trials of a cell (status ``completed`` or ``diverged``); running and
failed trials are counted in the status columns and listed per trial, never used in the numbers.

Divergence: a diverged trial (status ``diverged``) scores accuracy 0 from its divergence step (status
``diverged_step``, else its last step) to the suite's horizon (the last evaluation step of any completed
trial), in final accuracy, AUC and learning curves alike (``scored_evals``); its best accuracy is kept.

Shared trials (params.json reserved keys, see ``load``): a trial that ``ignored`` an axis is counted in
every slice of that axis; a trial that ``stands_for`` estimators is counted as the delay-0 result of each
of them. ``expand_shared`` makes those copies, each with a ``shared_note`` saying so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.store import trialdir
from harness.report import collapse as col
from harness.report import families, resolve, stats
from harness.report.load import ACC_KEY, CELL_AXES, SuiteResults
from harness.report.render import show

FINISHED = trialdir.FINAL  # the statuses whose results count
STATUSES = trialdir.STATUSES  # in this order in cells.csv and status counts
AXIS_SYMBOLS = {"eps": "\u03b5", "group_size": "G"}  # how a grid key is written in notes and labels
CELL_COLUMNS = ("config", "seeds", "start_acc", "final", "ci_low", "ci_high", "statistic", "ci_method",
                "low_confidence", "iqm_final", "mean_final", "iqm_best", "iqm_auc", "n_collapsed", "collapse_rate",
                "median_steps_to_collapse", "status_counts", *(f"n_{s}" for s in STATUSES),
                "poi_vs_baseline", "poi_low", "poi_high", "shared_note")


def axis_name(key: str) -> str:
    """A grid key as readers know it (``eps`` -> ``ε``); other keys as they are."""
    return AXIS_SYMBOLS.get(key, key)


def _int_or_none(value: object) -> int | None:
    """An int from a status.json field that may be None, NaN or a number."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _horizon_and_grid(res: SuiteResults) -> tuple[float, np.ndarray]:
    """The suite's last evaluation step and its evaluation steps, from completed trials (else all)."""
    done = res.trials.loc[res.trials["status"] == "completed", "trial_id"]
    ev = res.evals[res.evals["trial_id"].isin(done)] if len(done) else res.evals
    steps = np.unique(ev["step"].to_numpy())
    return (float(steps[-1]) if steps.size else np.nan), steps


def scored_curve(steps: np.ndarray, acc: np.ndarray, diverged_at: int | None, horizon: float,
                 grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A trial's accuracy curve as scored: unchanged without divergence; else the evaluations before
    ``diverged_at``, then 0 at ``diverged_at`` and at every ``grid`` step after it up to ``horizon``."""
    if diverged_at is None:
        return steps, acc
    before = steps < diverged_at
    tail = grid[(grid > diverged_at) & (grid <= horizon)] if np.isfinite(horizon) else grid[:0]
    zeros = np.r_[float(diverged_at), tail.astype(float)]
    return np.r_[steps[before], zeros], np.r_[acc[before], np.zeros(zeros.size)]


def summarize_trials(res: SuiteResults) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``res.trials`` plus final/best/AUC accuracy (diverged trials scored as above), collapse outcome,
    realized staleness after the warm-up and per-trial diagnostic means; and the scored eval frame
    (trial_id, step, eval/acc) the figures draw."""
    rules = res.settings.collapse
    horizon, grid = _horizon_and_grid(res)
    ev_idx = res.evals.groupby("trial_id", sort=False, observed=True).indices
    me_idx = res.metrics.groupby("trial_id", sort=False, observed=True).indices
    ev_step, acc = res.evals["step"].to_numpy(), res.evals[ACC_KEY].to_numpy()
    m = {k: res.metrics[k].to_numpy() for k in ("step", "loss_nonfinite", *("policy/entropy", "is/ratio_max"))}
    empty = np.array([], dtype=np.int64)
    out, scored = [], []
    for t in res.trials[["trial_id", "status", "last_step", "diverged_step", "eval_size"]].itertuples(index=False):
        ei, mi = ev_idx.get(t.trial_id, empty), me_idx.get(t.trial_id, empty)
        keep = ~np.isnan(acc[ei])
        steps_t, acc_t = ev_step[ei][keep], acc[ei][keep]
        last = _int_or_none(t.last_step)
        last = last if last is not None else (int(m["step"][mi][-1]) if mi.size else None)
        c = col.detect_collapse(rules, steps_t, acc_t, m["step"][mi], m["loss_nonfinite"][mi],
                                m["policy/entropy"][mi], m["is/ratio_max"][mi], t.status,
                                _int_or_none(t.diverged_step), last,
                                None if np.isnan(t.eval_size) else float(t.eval_size))
        diverged_at = None
        if t.status == "diverged":
            d = _int_or_none(t.diverged_step)
            diverged_at = d if d is not None else (last if last is not None else 0)
        s_steps, s_acc = scored_curve(steps_t, acc_t, diverged_at, horizon, grid)
        scored.append((t.trial_id, s_steps, s_acc))
        out.append({
            "start_acc": float(acc_t[0]) if acc_t.size else np.nan,
            "final_acc": stats.final_accuracy(s_acc),
            "best_acc": stats.best_accuracy(acc_t),
            "auc_acc": stats.accuracy_auc(s_steps, s_acc),
            "n_evals": int(acc_t.size),
            "diverged_at": np.nan if diverged_at is None else diverged_at,
            "collapsed": c.collapsed,
            "collapse_step": np.nan if c.step is None else c.step,
            "collapse_reason": c.reason,
        })
    trials = pd.concat([res.trials.reset_index(drop=True), pd.DataFrame(out)], axis=1)
    trials = trials.join(after_warmup_means(res), on="trial_id")
    ids = np.concatenate([np.full(s.size, tid, dtype=object) for tid, s, _ in scored]) if scored else []
    scored_frame = pd.DataFrame({"trial_id": ids,
                                 "step": np.concatenate([s for _, s, _ in scored]) if scored else [],
                                 ACC_KEY: np.concatenate([a for _, _, a in scored]) if scored else []})
    return trials, scored_frame


def after_warmup_means(res: SuiteResults) -> pd.DataFrame:
    """Per trial, the mean of ``stale/mean`` (as ``stale_mean``) and of each diagnostic over the steps
    after the warm-up. With k updates per batch, step s trains on batch s − 1, generated by policy version
    max(0, k·(s − 1) − delay) (trial/staleness.py): staleness is below the delay until that version is past
    0, so the warm-up is the steps s <= delay / k. NaN where nothing was logged."""
    keys = ["stale/mean", *[k for k in res.diagnostic_keys if k != "stale/mean"]]
    per_trial = res.trials.set_index("trial_id")
    m = res.metrics[["trial_id", "step", *keys]]
    d = pd.to_numeric(m["trial_id"].map(per_trial["delay"]).astype(object), errors="coerce").fillna(0)
    k = pd.to_numeric(m["trial_id"].map(per_trial["updates_per_batch"]).astype(object), errors="coerce").fillna(1)
    after = m[m["step"].to_numpy() > d.to_numpy(float) / k.to_numpy(float)]
    means = after.groupby("trial_id", observed=True)[keys].mean()
    return means.rename(columns={"stale/mean": "stale_mean"})


def expand_shared(trials: pd.DataFrame) -> pd.DataFrame:
    """Trials with params, one row per cell each counts in: a trial that ``ignored`` an axis is copied to
    every value of that axis found among the other trials; a ``stands_for`` trial is copied to each named
    algorithm. Copies keep their ``trial_id``; ``shared_note`` says why a row is there ("" for plain)."""
    rows = []
    known = trials[trials["has_params"]]
    values = {}
    for r in known.to_dict("records"):
        copies = [dict(r, shared_note="")]
        if r.get("stands_for"):
            note = (f"shared on-policy trials (delay {show(r.get('delay'))}, one update per batch: every "
                    f"estimator's gradient is grpo's) stand for {', '.join(r['stands_for'])}")
            copies = [dict(c, algorithm=a, shared_note=note) for c in copies for a in r["stands_for"]]
        for axis in r.get("ignored") or ():
            if axis not in known:
                continue
            if axis not in values:
                plain = known[known["ignored"].map(lambda ig, a=axis: a not in ig)][axis]
                values[axis] = sorted(plain.dropna().unique(), key=_sort_key)
            if not values[axis]:
                continue
            # a stands_for trial's note already says why every slice shows it (on-policy, no ratio)
            note = "" if r.get("stands_for") else f"{axis_name(axis)} not used by {r['algorithm']}"
            copies = [dict(c, **{axis: v}, shared_note="; ".join(filter(None, [c["shared_note"], note])))
                      for c in copies for v in values[axis]]
        rows += copies
    if not rows:
        return known.assign(shared_note=pd.Series(dtype=str))
    return pd.DataFrame(rows, columns=[*known.columns, "shared_note"])


def _sort_key(v: object) -> tuple[int, float, str]:
    """Numbers before text, numbers numerically (so G=4 sorts before G=16)."""
    try:
        return (0, float(v), "")  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return (1, 0.0, str(v))


def varying_keys(trials: pd.DataFrame, keys: list[str]) -> list[str]:
    """The cell keys other than algorithm and delay that take more than one value in the suite."""
    with_params = trials[trials["has_params"]]
    return [k for k in keys if k not in CELL_AXES and with_params[k].nunique(dropna=False) > 1]


def config_label(row: pd.Series | dict, other: list[str]) -> str:
    """``algorithm`` plus ``key=value`` for every other varying key, e.g. ``m2po eps=0.2``."""
    parts = [str(row["algorithm"])] + [f"{k}={show(row[k])}" for k in other]
    return " ".join(parts)


def slice_label(row: pd.Series | dict, other: list[str]) -> str:
    """``key=value`` for each of ``other`` ("" when nothing else varies), e.g. ``ε=0.2 G=8``."""
    return " ".join(f"{axis_name(k)}={show(row[k])}" for k in other)


def status_counts(statuses: pd.Series) -> str:
    """``'3 completed, 1 failed'``: counts in STATUSES order, then any other status by name."""
    counts = statuses.value_counts()
    order = [s for s in STATUSES if s in counts] + sorted(set(counts.index) - set(STATUSES))
    return ", ".join(f"{counts[s]} {s}" for s in order)


def cell_table(cells_in: pd.DataFrame, keys: list[str], baseline: str, seed: int = 0,
               statistic: stats.Statistic = stats.IQM) -> pd.DataFrame:
    """One row per cell of ``cells_in`` (``expand_shared`` rows): the final-accuracy estimate and
    interval (``stats.estimate`` of ``statistic``), IQM/mean final, IQM best and AUC, collapse counts, median steps to
    collapse, PoI vs ``baseline`` in the same other-keys cell with its bootstrap CI, status counts and
    the shared-trial note. ``keys`` are the cell keys (``SuiteResults.param_keys``)."""
    other = varying_keys(cells_in, keys)
    rows = []
    for cell_values, group in cells_in.groupby(keys, dropna=False, sort=False):
        cell = dict(zip(keys, cell_values if isinstance(cell_values, tuple) else (cell_values,)))
        done = group[group["status"].isin(FINISHED)]
        final = _finite(done["final_acc"])
        e = stats.estimate(final, seed=seed, statistic=statistic)
        rows.append({
            **cell,
            "config": config_label(cell, other),
            "slice": slice_label(cell, other),
            "seeds": len(done),
            "start_acc": stats.mean(_finite(done["start_acc"])),
            "final": e.point, "ci_low": e.lo, "ci_high": e.hi, "statistic": e.statistic,
            "ci_method": e.method, "low_confidence": e.low_confidence,
            "iqm_final": stats.iqm(final), "mean_final": stats.mean(final),
            "iqm_best": stats.iqm(_finite(done["best_acc"])),
            "iqm_auc": stats.iqm(_finite(done["auc_acc"])),
            "n_collapsed": int(done["collapsed"].sum()),
            "collapse_rate": col.collapse_rate(done["collapsed"].to_numpy(dtype=bool)),
            "median_steps_to_collapse": col.median_steps_to_collapse(done["collapse_step"].to_numpy()),
            "status_counts": status_counts(group["status"]),
            **{f"n_{s}": int((group["status"] == s).sum()) for s in STATUSES},
            "shared_note": "; ".join(sorted(set(filter(None, group["shared_note"])))),
            "_final": final,
        })
    if not rows:
        return pd.DataFrame(columns=[*keys, "slice", *CELL_COLUMNS])
    cells = pd.DataFrame(rows)
    poi = _poi(cells, keys, baseline, seed)
    cells["poi_vs_baseline"], cells["poi_low"], cells["poi_high"] = poi[:, 0], poi[:, 1], poi[:, 2]
    order = sorted(range(len(cells)), key=lambda i: (_sort_key(cells["delay"].iat[i]),
                                                     [_sort_key(cells[k].iat[i]) for k in other],
                                                     str(cells["algorithm"].iat[i])))
    return cells.drop(columns="_final").iloc[order].reset_index(drop=True)


def _finite(values: pd.Series) -> np.ndarray:
    """Float values without NaN."""
    x = values.to_numpy(dtype=float)
    return x[~np.isnan(x)]


def _poi(cells: pd.DataFrame, keys: list[str], baseline: str, seed: int) -> np.ndarray:
    """(point, lo, hi) of P(cell's final acc > baseline's) per cell (C, 3), against the baseline cell
    with the same other keys; NaN for the baseline itself and where no baseline cell exists."""
    others = [k for k in keys if k != "algorithm"]
    base = {tuple(r[k] for k in others): r["_final"]
            for _, r in cells[cells["algorithm"] == baseline].iterrows()}
    out = np.full((len(cells), 3), np.nan)
    for i, (_, r) in enumerate(cells.iterrows()):
        y = base.get(tuple(r[k] for k in others))
        if r["algorithm"] != baseline and y is not None and min(len(r["_final"]), len(y)) >= 2:   # one seed: none
            e = stats.poi_estimate(r["_final"], y, seed=seed)
            out[i] = (e.point, e.lo, e.hi)
    return out


def ranked(cells: pd.DataFrame, unranked: str = "") -> pd.DataFrame:
    """Cells sorted best first with a shared-on-ties ``rank`` (``stats.competition_ranks`` on the final
    accuracy as printed) and ``vs_leader``: "leader" (rank 1), "tied" (its 95% interval overlaps the
    leader's: not distinguishable at these seeds), "below" (intervals disjoint), or "no interval"
    (fewer than two seeds on either side). The leader is the rank-1 cell with the most seeds.
    ``unranked`` (``unranked_reason``): the cells in their table order, no rank, that reason as vs_leader."""
    if unranked:
        return cells.assign(rank=np.nan, vs_leader=f"not ranked: {unranked}").reset_index(drop=True)
    out = cells.assign(rank=stats.competition_ranks(cells["final"].to_numpy(dtype=float)))
    out = out.sort_values(["rank", "config"], kind="stable").reset_index(drop=True)
    if out.empty:
        return out.assign(vs_leader=pd.Series(dtype=str))
    top = out[out["rank"] == 1].sort_values("seeds", ascending=False, kind="stable").iloc[0]
    lead = _estimate(top)
    labels = []
    for r in out.to_dict("records"):
        if r["rank"] == 1 and np.isfinite(r["final"]):
            labels.append("leader")
            continue
        overlap = stats.intervals_overlap(_estimate(r), lead)
        labels.append("no interval" if overlap is None else ("tied" if overlap else "below"))
    return out.assign(vs_leader=labels)


def _estimate(r: pd.Series | dict) -> stats.Estimate:
    return stats.Estimate(r["final"], r["ci_low"], r["ci_high"], int(r["seeds"]), r["statistic"],
                          r["ci_method"])


def leaderboard(cells: pd.DataFrame, unranked: str = "") -> tuple[pd.DataFrame, float]:
    """Ranked cells at the largest delay, and that delay (NaN when no trial has a delay)."""
    delays = pd.to_numeric(cells["delay"], errors="coerce").to_numpy(dtype=float)
    if np.isnan(delays).all():
        return ranked(cells, unranked), float("nan")
    top = float(np.nanmax(delays))
    return ranked(cells[delays == top], unranked), top


def unranked_reason(slice_of: str, cells: pd.DataFrame) -> str:
    """Why the suite's cells are not ranked ("" when they are): a slice of another suite (its report is the
    one that ranks), or one finished seed per cell at most (nothing can be told apart)."""
    if slice_of:
        return f"a slice of {slice_of}"
    return "one seed" if len(cells) and int(cells["seeds"].max()) <= 1 else ""


def staleness_summary(trials: pd.DataFrame, rel_tol: float = 0.1, abs_tol: float = 0.5) -> pd.DataFrame:
    """Per configured delay: trials with stale/mean after the warm-up, its mean, what the delay gives
    (``expected``: the batch's k updates see it delay .. delay + k − 1 updates old, mean delay + (k − 1) / 2),
    and a flag when the two differ by more than ``max(abs_tol, rel_tol * delay)``."""
    rows = []
    for delay, group in trials[trials["has_params"]].groupby("delay", dropna=False, sort=True):
        logged = group[np.isfinite(group["stale_mean"].to_numpy(float))]
        s = logged["stale_mean"].to_numpy(float)
        realized = float(s.mean()) if s.size else np.nan
        d = _sort_key(delay)[1] if _sort_key(delay)[0] == 0 else np.nan   # a law of lags (JSON text): no one value
        expected = d + (float(logged["updates_per_batch"].mean()) - 1) / 2 if s.size else np.nan
        flag = bool(s.size and np.isfinite(d) and abs(realized - expected) > max(abs_tol, rel_tol * d))
        rows.append({"delay": delay, "trials": int(s.size), "stale_mean": realized, "expected": expected,
                     "differs": flag})
    return pd.DataFrame(rows, columns=["delay", "trials", "stale_mean", "expected", "differs"])


@dataclass(frozen=True)
class Analysis:
    """The report's tables for one suite."""

    trials: pd.DataFrame  # summarize_trials plus a "config" label (one row per trial directory)
    cell_trials: pd.DataFrame  # expand_shared(trials): one row per (trial, cell it counts in)
    scored_evals: pd.DataFrame  # eval curves as scored (diverged trials zero after divergence)
    other: list[str]  # varying grid keys other than algorithm and delay
    cells: pd.DataFrame  # cell_table
    board: pd.DataFrame  # ranked cells at the largest delay
    top_delay: float
    staleness: pd.DataFrame  # staleness_summary
    baseline: str
    pairs: list[resolve.PairTest]  # every table's estimator pairs, tested (resolve.pair_tests)
    agreement: pd.DataFrame  # Kendall's tau between slices' rankings at the largest delay
    statistic: stats.Statistic  # what a cell's value is (report.statistic names it; stats.estimate)
    unranked: str = ""  # why nothing is ranked (unranked_reason), "" when the leaderboard ranks


def analyse(res: SuiteResults) -> Analysis:
    """All tables of a suite report."""
    trials, scored = summarize_trials(res)
    cell_trials = expand_shared(trials)
    other = varying_keys(cell_trials.assign(has_params=True), res.param_keys)
    trials["config"] = [config_label(r, other) if r["has_params"] else "" for r in trials.to_dict("records")]
    cell_trials["config"] = [config_label(r, other) for r in cell_trials.to_dict("records")]
    cell_trials["slice"] = [slice_label(r, other) for r in cell_trials.to_dict("records")]
    statistic = stats.named(res.settings.statistic)
    cells = families.annotate(cell_table(cell_trials, res.param_keys, res.settings.baseline,
                                         statistic=statistic), res)
    unranked = unranked_reason(res.suite.slice_of, cells)
    board, top_delay = leaderboard(cells, unranked)
    return Analysis(trials, cell_trials, scored, other, cells, board, top_delay, staleness_summary(trials),
                    res.settings.baseline, resolve.pair_tests(cell_trials), resolve.ranking_agreement(cells, top_delay),
                    statistic, unranked)
