"""Report figures, training dynamics (after the heatmaps, in page order): estimator diagnostics vs step and
vs delay, survival curves (when they say something) and realized staleness. Registered in FIGURES as
figures.py describes.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import pandas as pd
import seaborn as sns

from harness.registry import FIGURES
from harness.report import collapse as col
from harness.report import stats
from harness.report.plotting import (MIN_WIDTH_IN, PANEL_IN, FigureOut, Output, PlotData, facet_grid, facet_titles,
                                     log2_delay_axis, save, seed_range, shared_legend, wrapped_grid)
from harness.report.render import show
from harness.report.tables import Analysis


@FIGURES.register("diagnostics")
def diagnostics_vs_step(a: Analysis, d: PlotData, out: Output) -> FigureOut | None:
    """Each estimator diagnostic vs step at the largest delay, mean over seeds and slices, one panel
    per metric (wrapped)."""
    if not d.diagnostics or d.done.empty:
        return None
    top = d.delays[-1]
    # at the largest delay each trial belongs to one estimator (stands_for trials are on-policy)
    algo_of = dict(d.done.loc[d.done["delay"] == top, ["trial_id", "algorithm"]].drop_duplicates(
        "trial_id").itertuples(index=False))
    algo = d.metrics["trial_id"].map(algo_of)  # categorical: maps each category once
    keep = algo.notna().to_numpy()
    if not keep.any():
        return None
    m = d.metrics.loc[keep, ["step", *d.diagnostics]].assign(algorithm=algo[keep].astype(str).to_numpy())
    long = _binned(m, d.diagnostics).melt(["algorithm", "step"], var_name="metric", value_name="value")
    long = long.dropna(subset=["value"])
    metrics = [k for k in d.diagnostics if k in set(long["metric"])]
    if not metrics:
        return None

    png, svg = _metric_panels(long, metrics, d, out, "diagnostics_vs_step", "step",
                              lambda g: g["step"], {"ms": 3, "markevery": 0.25})
    return FigureOut(png, "Estimator diagnostics vs step",
                     f"Estimator diagnostics logged in metrics.jsonl ({', '.join(metrics)}) vs step at the "
                     f"largest delay ({show(top)}), mean over seeds and slices in bins of steps; an "
                     f"estimator that does not log a metric has no line in its panel; is/ratio_max on a "
                     f"log scale.", svg)


def _metric_panels(long: pd.DataFrame, metrics: list[str], d: PlotData, out: Output, stem: str, xlabel: str,
                   x: Callable[[pd.DataFrame], Any], marker: dict[str, Any],
                   decorate: Callable[[plt.Axes], None] | None = None) -> tuple[str, str]:
    """One panel per diagnostic of ``long`` (algorithm, metric, value, ...), one line per estimator at
    ``x(rows)``; is/ratio_max on a log scale; returns the saved (png, svg)."""
    def draw(data: pd.DataFrame, color: object = None, label: str = "") -> None:
        ax = plt.gca()
        for algo, g in data.groupby("algorithm"):
            st = d.styles[algo]
            ax.plot(x(g), g["value"], color=st.colour, lw=1.2, marker=st.marker, **marker)
        if data["metric"].iloc[0].endswith("ratio_max") and (data["value"] > 0).all():
            _log_y(ax)
        if decorate is not None:
            decorate(ax)

    g = wrapped_grid(long, "metric", metrics, 3, sharey=False)
    g.map_dataframe(draw)
    g.set_titles(col_template="{col_name}")
    g.set_axis_labels(xlabel, "")
    return save(g, out, stem, shared_legend(g, d, [n for n in d.hue_order if n in set(long["algorithm"])]))


@FIGURES.register("diagnostics_delay")
def diagnostics_vs_delay(a: Analysis, d: PlotData, out: Output) -> FigureOut | None:
    """Each diagnostic's after-warm-up mean per trial, averaged over seeds and slices, vs delay."""
    metrics = [k for k in d.diagnostics if k in d.done and d.done[k].notna().any()]
    if not metrics or len(d.delays) < 2:
        return None
    agg = d.done.groupby(["algorithm", "delay"])[metrics].mean().reset_index()
    long = agg.melt(["algorithm", "delay"], var_name="metric", value_name="value").dropna(subset=["value"])

    long = long.sort_values("delay")
    png, svg = _metric_panels(long, metrics, d, out, "diagnostics_vs_delay", "delay (log2 scale)",
                              lambda g: 1 + g["delay"], {"ms": 4},
                              decorate=lambda ax: log2_delay_axis(ax, d.delays))
    return FigureOut(png, "Estimator diagnostics vs delay",
                     "Per trial, the mean of each diagnostic over the steps after the warm-up (step > delay / k, "
                     "k updates per batch); then the mean over seeds and slices, vs configured delay on a "
                     "log2(1 + delay) axis.", svg)


def _log_y(ax: plt.Axes) -> None:
    """Log y axis with plain tick labels (``%g``; the default mathtext labels cost ~1 s to parse)."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def _binned(m: pd.DataFrame, keys: list[str], bins: int = 60) -> pd.DataFrame:
    """Mean of ``keys`` per (algorithm, step bin): at most ``bins`` points per line."""
    top = float(m["step"].max()) or 1.0
    width = max(1.0, np.ceil(top / bins))
    m = m.assign(step=(np.floor((m["step"] - 1) / width) + 0.5) * width + 1)
    return m.groupby(["algorithm", "step"], observed=True)[keys].mean().reset_index()


@FIGURES.register("survival")
def survival_curves(a: Analysis, d: PlotData, out: Output) -> FigureOut | None:
    """Fraction of seeds not yet collapsed vs step; drawn only when it says something: some line has
    at least MIN_CONFIDENT_SEEDS seeds and some seed collapsed."""
    seeds = d.done.groupby(["slice", "delay", "algorithm"]).size()
    if d.done.empty or seeds.max() < stats.MIN_CONFIDENT_SEEDS or not d.done["collapsed"].any():
        return None
    last = pd.to_numeric(d.done["last_step"], errors="coerce").max()
    top = float(np.nanmax([last, d.done["collapse_step"].max(), 1.0]))
    grid = np.unique(np.linspace(0, top, 100).round())
    parts = []
    for (s, delay, algo), g in d.done.groupby(["slice", "delay", "algorithm"]):
        alive = col.survival_curve(g["collapse_step"].to_numpy(dtype=float), grid)
        parts.append(pd.DataFrame({"slice": s, "delay": delay, "algorithm": algo, "step": grid,
                                   "alive": alive}))
    data = pd.concat(parts, ignore_index=True)

    def draw(data: pd.DataFrame, color: object = None, label: str = "") -> None:
        for algo, g in data.groupby("algorithm"):
            plt.gca().plot(g["step"], g["alive"], drawstyle="steps-post", color=d.styles[algo].colour, lw=1.3)

    g = facet_grid(data, d, facet_delay=True, ylim=(-0.03, 1.03))
    g.map_dataframe(draw)
    facet_titles(g, facet_delay=True)
    g.set_axis_labels("step", "fraction not collapsed")
    png, svg = save(g, out, "survival", shared_legend(g, d), right=1.0 if len(d.slices) > 1 else 0.35)
    return FigureOut(png, "Survival curves (secondary)",
                     f"Fraction of seeds not yet collapsed vs step, one panel per delay and slice "
                     f"({seed_range(seeds)} per line). Secondary to the collapse-rate heatmap.", svg)


@FIGURES.register("staleness")
def staleness(a: Analysis, d: PlotData, out: Output) -> FigureOut | None:
    """Realized staleness (stale/mean) vs step, averaged over trials per configured delay."""
    trials, metrics = a.trials, d.metrics
    delay_of = trials.loc[trials["has_params"]].set_index("trial_id")["delay"]
    m = metrics[["trial_id", "step", "stale/mean"]].dropna()
    m = m.assign(delay=pd.to_numeric(m["trial_id"].map(delay_of).astype(object), errors="coerce"))
    m = m.dropna(subset=["delay"])
    if m.empty:
        return None
    curves = m.groupby(["delay", "step"])["stale/mean"].mean()
    n = m.groupby("delay")["trial_id"].nunique()
    fig, ax = plt.subplots(figsize=(MIN_WIDTH_IN, PANEL_IN[1] + 1.0))
    palette = sns.color_palette("rocket", len(n))
    for colour, (delay, g) in zip(palette, curves.groupby(level=0)):
        ax.plot(g.index.get_level_values("step"), g.to_numpy(), color=colour, lw=1.3,
                label=f"delay={show(delay)} ({n[delay]} trials)")
        ax.axhline(float(delay), color=colour, ls="--", lw=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("stale/mean (steps)")
    ax.legend(fontsize=7, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.subplots_adjust(left=0.08, right=0.8, bottom=0.16, top=0.95)
    png, svg = save(fig, out, "staleness")
    return FigureOut(png, "Realized staleness",
                     "Realized staleness stale/mean vs step, averaged over all trials (any status) of each "
                     "configured delay; dashed lines mark the configured delay. The first `delay` steps are "
                     "the warm-up (staleness < delay by construction); the staleness check uses the steps "
                     "after it.", svg)
