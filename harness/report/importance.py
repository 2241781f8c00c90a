"""Per-token importance diagnostics by delay and estimator (docs/metrics.md, docs/staleness.md).

Three figures from what the trials stored (reports read; runs compute), as report/load.py summarises each
trial when it reads it (load.Importance): its `metrics.jsonl`
(the `is/log_ratio_q*`, `is/adv_*_clipped_frac`, `is/group_ess_min`, `is/clipped_entropy` and
`mismatch/kl` scalars, averaged over the second half of its steps, past any warm-up) and its
`is_hist.jsonl` (log ρ counts and clipped tokens by position, summed over the same steps). Panels: one
row per slice (the grid keys other than estimator and delay, e.g. the mismatch settings), delay on the
x axis as a category (an integer delay, a delay law, a replayed trace), one line per estimator: mean
over seeds, bars min..max over seeds. A suite whose trials logged none of these draws nothing.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.store import trialdir
from harness.report.load import IMPORTANCE_KEYS, Importance, sum_lists
from harness.report.plotting import MIN_WIDTH_IN, FigureOut, Output, estimator_style, save
from harness.report.tables import FINISHED, _sort_key

TITLES = {"is/log_ratio_q99": "log ρ, 99% quantile", "is/log_ratio_q01": "log ρ, 1% quantile",
          "is/adv_pos_clipped_frac": "clipped fraction, A > 0", "is/adv_neg_clipped_frac": "clipped fraction, A < 0",
          "is/group_ess_min": "smallest group ESS", "is/clipped_entropy": "entropy of clipped tokens",
          "mismatch/kl": "KL(π_rollout ‖ π_b)"}
SCALARS = tuple((key, TITLES[key]) for key in IMPORTANCE_KEYS)
PANEL = 2.4          # inches per panel


def delay_label(value: Any) -> str:
    """An integer delay as itself; a law or trace (params.json holds it as JSON text) in a few words."""
    try:
        law = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return str(value)
    if not isinstance(law, dict):
        return str(value)
    dist = law.get("dist", "?")
    if dist == "trace":
        return f"trace {Path(str(law.get('path', ''))).stem}"
    params = " ".join(f"{k}={law[k]}" for k in ("p", "mean", "min") if law.get(k) not in (None, 0))
    return f"{dist} {params} ≤{law.get('max')}".replace("  ", " ")


def _layout(done: pd.DataFrame) -> tuple[list[str], list[Any], dict[Any, str]]:
    slices = sorted(done["slice"].unique(), key=str)
    delays = sorted(done["delay"].unique(), key=_sort_key)
    return slices, delays, {d: delay_label(d) for d in delays}


def importance_figures(cell_trials: pd.DataFrame, importance: Mapping[str, Importance], out: Output,
                       baseline: str) -> list[FigureOut]:
    """The three figures (scalars by delay, log ρ histograms, clipped fraction by position) from the
    trials' Importance (load.SuiteResults.importance), or []."""
    done = cell_trials[cell_trials["status"].isin(FINISHED)].copy()
    if done.empty:
        return []
    done["delay"] = done["delay"].astype(object).where(done["delay"].notna(), "0")
    ids = done["trial_id"].unique()
    summary = pd.DataFrame([{"trial_id": tid, **importance[tid].scalars} for tid in ids])
    hists = {tid: importance[tid].hists for tid in ids if importance[tid].hists is not None}
    done = done.drop(columns=[k for k, _ in SCALARS if k in done]).merge(summary, on="trial_id")  # ours, not the table's
    keys = [(k, t) for k, t in SCALARS if done[k].notna().any()]
    if not keys:
        return []
    styles = estimator_style(list(done["algorithm"].astype(str).unique()), baseline)
    figures = [_scalars_by_delay(done, keys, styles, out)]
    if hists:
        figures += [_histograms(done, hists, styles, out), _by_position(done, hists, styles, out)]
    return [f for f in figures if f is not None]


def _grid(n_rows: int, n_cols: int, sharey: str | bool = False) -> tuple[plt.Figure, np.ndarray]:
    width = max(PANEL * n_cols + 0.8, MIN_WIDTH_IN)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(width, PANEL * n_rows + 0.9), squeeze=False, sharey=sharey)
    return fig, axes


def _finish(fig: plt.Figure, axes: np.ndarray, styles: dict, out: Output, stem: str) -> tuple[str, str]:
    handles = [plt.Line2D([], [], color=s.colour, marker=s.marker, label=n) for n, s in styles.items()]
    fig.legend(handles=handles, loc="upper center", ncol=min(len(handles), 6), frameon=False, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    return save(fig, out, stem)


def _scalars_by_delay(done: pd.DataFrame, keys: list[tuple[str, str]], styles: dict, out: Output) -> FigureOut:
    slices, delays, labels = _layout(done)
    fig, axes = _grid(len(slices), len(keys), sharey="col")      # a column compares the slices
    x = {d: i for i, d in enumerate(delays)}
    for r, sl in enumerate(slices):
        for c, (key, title) in enumerate(keys):
            ax = axes[r, c]
            part = done[done["slice"] == sl]
            for algo, g in part.groupby(part["algorithm"].astype(str)):
                agg = g.groupby("delay", sort=False)[key].agg(["mean", "min", "max"]).dropna()
                agg = agg.loc[sorted(agg.index, key=_sort_key)]
                xs, st = [x[d] for d in agg.index], styles[algo]
                ax.errorbar(xs, agg["mean"], yerr=[agg["mean"] - agg["min"], agg["max"] - agg["mean"]],
                            color=st.colour, marker=st.marker, ms=4, lw=1.2, capsize=2)
            ax.set_xticks(range(len(delays)), [labels[d] for d in delays], rotation=30, ha="right", fontsize=7)
            ax.set_title(title if r == 0 else "", fontsize=8)
            ax.tick_params(labelsize=7)
            if c == 0:
                ax.set_ylabel(str(sl) or "all", fontsize=7)
    png, svg = _finish(fig, axes, styles, out, "importance_by_delay")
    seeds = done.groupby(["slice", "delay", "algorithm"]).size()
    return FigureOut(png, "Importance diagnostics by delay",
                     f"Per-token importance diagnostics (docs/metrics.md) by delay (x; a law or a replayed trace "
                     f"as its own category) and estimator (lines), one row per slice: each trial's mean over the "
                     f"second half of its steps, then mean over seeds with bars min..max ({int(seeds.min())}-"
                     f"{int(seeds.max())} seeds per point). Clipped = where the PPO clip at ε stops the gradient, "
                     f"whatever the estimator does there.", svg)


def _histograms(done: pd.DataFrame, hists: dict, styles: dict, out: Output) -> FigureOut | None:
    slices, delays, labels = _layout(done)
    HIST_LOW, HIST_HIGH, HIST_BINS = trialdir.HIST_LOW, trialdir.HIST_HIGH, trialdir.HIST_BINS
    centers = HIST_LOW + (np.arange(HIST_BINS) + 0.5) * (HIST_HIGH - HIST_LOW) / HIST_BINS
    fig, axes = _grid(len(slices), len(delays), sharey=True)
    for r, sl in enumerate(slices):
        for c, d in enumerate(delays):
            ax = axes[r, c]
            part = done[(done["slice"] == sl) & (done["delay"] == d)]
            for algo, g in part.groupby(part["algorithm"].astype(str)):
                counts = sum_lists([hists[t]["log_ratio_counts"].tolist() for t in g["trial_id"] if t in hists])
                if counts.size == HIST_BINS + 2 and counts.sum() > 0:
                    ax.plot(centers, counts[1:-1] / counts.sum(), color=styles[algo].colour, lw=1.1)
            ax.set_yscale("log")
            ax.set_xlim(-2, 2)
            ax.set_title(f"delay {labels[d]}" + (f"\n{sl}" if sl else ""), fontsize=7)
            ax.tick_params(labelsize=7)
    png, svg = _finish(fig, axes, styles, out, "importance_log_ratio_hist")
    return FigureOut(png, "Token log-ratio histograms",
                     "Share of response tokens per log ρ bin (width 0.1; log scale; tokens beyond ±4 are counted "
                     "but not drawn), summed over the second half of each trial's steps and over seeds, one panel "
                     "per delay (columns) and slice (rows), one line per estimator (is_hist.jsonl).", svg)


def _by_position(done: pd.DataFrame, hists: dict, styles: dict, out: Output) -> FigureOut | None:
    slices, delays, labels = _layout(done)
    fig, axes = _grid(len(slices), len(delays))
    for r, sl in enumerate(slices):
        for c, d in enumerate(delays):
            ax = axes[r, c]
            part = done[(done["slice"] == sl) & (done["delay"] == d)]
            for algo, g in part.groupby(part["algorithm"].astype(str)):
                ids = [t for t in g["trial_id"] if t in hists]
                clipped = sum_lists([hists[t]["clipped_by_position"].tolist() for t in ids])
                tokens = sum_lists([hists[t]["tokens_by_position"].tolist() for t in ids])
                if tokens.size and clipped.size == tokens.size:
                    frac = np.divide(clipped, tokens, out=np.full(tokens.size, np.nan), where=tokens > 0)
                    ax.plot(np.arange(tokens.size), frac, color=styles[algo].colour, marker=styles[algo].marker, ms=3, lw=1.1)
            ax.set_title(f"delay {labels[d]}" + (f"\n{sl}" if sl else ""), fontsize=7)
            ax.set_xlabel("response position", fontsize=7)
            ax.tick_params(labelsize=7)
    png, svg = _finish(fig, axes, styles, out, "importance_clipped_by_position")
    return FigureOut(png, "Clipped tokens by position",
                     "Fraction of response tokens at each position where the PPO clip at ε stops the gradient, "
                     "over the second half of each trial's steps and over seeds, one panel per delay and slice, "
                     "one line per estimator (is_hist.jsonl).", svg)
