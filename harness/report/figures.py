"""Report figures: learning curves, accuracy vs delay, collapse-rate heatmap, estimator diagnostics,
realized staleness (and survival curves when they say something).

Each figure is registered in FIGURES (harness/registry.py) in page order, as a function
``(a: tables.Analysis, d: PlotData, out: Output) -> FigureOut | None``: it draws from the frames of
``tables`` (never one figure per trial), writes its files into ``out`` (``plotting.Output``: PNG by
default, SVG on request) and returns a ``FigureOut`` whose caption says what is shown and over how many
seeds, or None when the suite has nothing to show. A plugin's figure registers the same way and is drawn
after these. How they look
(facets, styles, legend, margins, files) is ``plotting.py``'s; ``FigureOut``, ``PlotData`` and
``estimator_style`` are re-exported from it. Only finished trials are drawn; diverged trials as scored
(accuracy 0 from the divergence on; ``tables.scored_curve``).

Delay axes are log2 of (1 + delay), labelled with the delays, so delay 0 shows and 0 / 4 do not overlap.
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
from harness.report.load import ACC_KEY
from harness.report.plotting import (PANEL_IN, WRAP, FigureOut, Output, PlotData, autoscaled, estimator_style, facet_grid,  # noqa: F401
                                     facet_titles, log2_delay_axis, low_note, save, seed_range, shared_legend,
                                     wrapped_grid)
from harness.report.render import show
from harness.report.tables import Analysis, _sort_key, axis_name


@FIGURES.register("accuracy")
def accuracy_vs_delay(a: Analysis, d: PlotData, out: Output) -> FigureOut | None:
    """Final accuracy (IQM, or mean below 5 seeds) vs delay per estimator, band = 95% interval; one
    panel per slice (wrapped); hollow markers = fewer than 5 seeds."""
    cells = a.cells[(a.cells["seeds"] > 0) & a.cells["delay"].notna()].copy()
    if cells["delay"].nunique() < 2:
        return None
    cells["algorithm"] = cells["algorithm"].astype(str)
    cells["delay"] = cells["delay"].astype(float)

    def draw(data: pd.DataFrame, color: object = None, label: str = "") -> None:
        ax = plt.gca()
        for algo, g in data.sort_values("delay").groupby("algorithm"):
            st = d.styles[algo]
            x = 1 + g["delay"].to_numpy()
            ax.plot(x, g["final"], color=st.colour, lw=1.3)
            low = g["low_confidence"].to_numpy(dtype=bool)
            ax.scatter(x[~low], g["final"].to_numpy()[~low], color=st.colour, marker=st.marker, s=18, zorder=3)
            ax.scatter(x[low], g["final"].to_numpy()[low], facecolors="white", edgecolors=[st.colour],
                       marker=st.marker, s=18, zorder=3, linewidths=1.0)
            ax.fill_between(x, g["ci_low"], g["ci_high"], color=st.colour, alpha=0.15, lw=0)
        log2_delay_axis(ax, d.delays)

    g = facet_grid(cells, d, facet_delay=False, ylim=(0, 1), sharex=True)
    g.map_dataframe(draw)
    facet_titles(g, facet_delay=False)
    g.set_axis_labels("delay (log2 scale)", "final accuracy")
    png, svg = save(g, out, "accuracy_vs_delay", shared_legend(g, d))
    return FigureOut(png, "Accuracy vs delay",
                     f"Final held-out accuracy vs configured delay on a log2(1 + delay) axis, one panel per "
                     f"slice, one line per estimator: IQM over seeds with a 95% bootstrap band, or with "
                     f"fewer than {stats.MIN_CONFIDENT_SEEDS} seeds the mean with a Student-t band and a "
                     f"hollow marker ({seed_range(cells['seeds'])} per point)."
                     f"{low_note(cells['seeds'])}", svg)


@FIGURES.register("learning")
def learning_curves(a: Analysis, d: PlotData, out: Output) -> FigureOut | None:
    """Held-out accuracy vs step: mean over seeds, band min..max over seeds; panels delay x slice."""
    if d.done.empty or d.evals.empty:
        return None
    ev = d.evals.merge(d.done[["trial_id", "algorithm", "delay", "slice"]], on="trial_id")
    agg = (ev.groupby(["slice", "delay", "algorithm", "step"])[ACC_KEY].agg(["mean", "min", "max"])
           .reset_index())

    def draw(data: pd.DataFrame, color: object = None, label: str = "") -> None:
        ax = plt.gca()
        for algo, g in data.groupby("algorithm"):
            st = d.styles[algo]
            ax.plot(g["step"], g["mean"], color=st.colour, lw=1.3, marker=st.marker, ms=3, markevery=0.2)
            ax.fill_between(g["step"], g["min"], g["max"], color=st.colour, alpha=0.15, lw=0)

    g = facet_grid(agg, d, facet_delay=True, ylim=(0, 1), xlim=autoscaled(agg["step"]))
    g.map_dataframe(draw)
    facet_titles(g, facet_delay=True)
    g.set_axis_labels("step", "held-out accuracy")
    png, svg = save(g, out, "learning_curves", shared_legend(g, d), right=1.0 if len(d.slices) > 1 else 0.35)
    seeds = d.done.groupby(["slice", "delay", "algorithm"]).size()
    return FigureOut(png, "Learning curves",
                     f"Held-out accuracy (eval/acc) vs step, one panel per delay (columns) and slice "
                     f"(rows), one line per estimator: mean over seeds, shaded band = min..max over seeds "
                     f"({seed_range(seeds)} per line; diverged seeds count as accuracy 0 from their "
                     f"divergence on).{low_note(seeds)}", svg)


@FIGURES.register("collapse")
def collapse_heatmap(a: Analysis, d: PlotData, out: Output) -> FigureOut | None:
    """Collapse rate per estimator (rows) x delay (columns), annotated K/N; one panel per slice."""
    cells = a.cells[(a.cells["seeds"] > 0) & a.cells["delay"].notna()].copy()
    if cells.empty:
        return None
    cells["algorithm"] = cells["algorithm"].astype(str)
    cells["delay"] = cells["delay"].astype(float)
    rows = [n for n in d.hue_order if n in set(cells["algorithm"])]

    def draw(data: pd.DataFrame, color: object = None, label: str = "") -> None:
        wide = data.pivot_table(index="algorithm", columns="delay", values=["collapse_rate", "n_collapsed",
                                                                            "seeds"])
        rate, k, n = (wide[v].reindex(index=rows, columns=d.delays).to_numpy(float)
                      for v in ("collapse_rate", "n_collapsed", "seeds"))
        text = [[f"{a:.0f}/{b:.0f}" if b == b else "" for a, b in zip(ra, rb)] for ra, rb in zip(k, n)]
        _heat(plt.gca(), rate, text, [show(x) for x in d.delays], rows, "rocket_r")

    height = max(PANEL_IN[1], 0.28 * len(rows) + 0.8)
    g = wrapped_grid(cells, "slice", d.slices, WRAP, height=height, sharex=False, sharey=False)
    g.map_dataframe(draw)
    g.set_titles(col_template="{col_name}")
    g.set_axis_labels("delay", "")
    left = 0.3 + 0.075 * max(len(r) for r in rows)
    png, svg = save(g, out, "collapse_heatmap", left=left)
    return FigureOut(png, "Collapse rate",
                     f"Fraction of finished seeds that collapsed (colour 0..1, text K/N) per estimator and "
                     f"delay, one panel per slice ({seed_range(cells['seeds'])} per cell). The collapse "
                     f"rules are listed below.{low_note(cells['seeds'])}", svg)


def _heat(ax: plt.Axes, values: np.ndarray, text: list[list[str]], xlabels: list[str], ylabels: list[str],
          cmap: str) -> None:
    """An annotated heatmap of ``values`` (rows, cols) on a fixed 0..1 colour scale; NaN cells blank.
    Drawn with ``imshow`` rather than ``sns.heatmap``, which redraws the whole figure per panel to
    check tick-label overlap (quadratic in the number of panels)."""
    cm = matplotlib.colormaps[cmap] if cmap in matplotlib.colormaps else sns.color_palette(cmap, as_cmap=True)
    ax.imshow(np.ma.masked_invalid(values), cmap=cm, vmin=0, vmax=1, aspect="auto", interpolation="none")
    for i, row in enumerate(text):
        for j, t in enumerate(row):
            if t:
                light = values[i, j] > 0.55 if cmap.endswith("_r") else values[i, j] < 0.55
                ax.text(j, i, t, ha="center", va="center", fontsize=7, color="white" if light else "black")
    ax.set_xticks(range(len(xlabels)), xlabels, fontsize=8)
    ax.set_yticks(range(len(ylabels)), ylabels, fontsize=8)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)


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
                     "Per trial, the mean of each diagnostic over the steps after the warm-up (step > delay); "
                     "then the mean over seeds and slices, vs configured delay on a log2(1 + delay) axis.", svg)


def heatmap(axis: str, d: PlotData, out: Output) -> FigureOut | None:
    """Final accuracy (IQM over seeds) over delay x ``axis``, one panel per estimator, pooled over other
    keys; axis values in numeric order."""
    if axis not in d.other or len(d.delays) < 2:
        return None
    pooled = [k for k in d.other if k != axis]
    values = sorted(d.done[axis].dropna().unique(), key=_sort_key)
    grouped = d.done.groupby(["algorithm", "delay", axis])["final_acc"]
    table = grouped.agg(lambda x: stats.iqm(x.dropna().to_numpy())).rename("iqm").reset_index()

    def draw(data: pd.DataFrame, color: object = None, label: str = "") -> None:
        grid = data.pivot_table(index="delay", columns=axis, values="iqm").reindex(index=d.delays,
                                                                                  columns=values)
        v = grid.to_numpy(float)
        _heat(plt.gca(), v, [[f"{x:.2f}" if x == x else "" for x in row] for row in v],
              [show(x) for x in values], [show(x) for x in d.delays], "viridis")

    names = [n for n in d.hue_order if n in set(table["algorithm"])]
    g = wrapped_grid(table, "algorithm", names, WRAP, sharex=False, sharey=False)
    g.map_dataframe(draw)
    g.set_titles(col_template="{col_name}")
    g.set_axis_labels(axis_name(axis), "delay")
    png, svg = save(g, out, f"heatmap_delay_{axis}")
    counts = grouped.size()
    note = f", pooled over {', '.join(axis_name(k) for k in pooled)}" if pooled else ""
    return FigureOut(png, f"Heatmap: delay x {axis_name(axis)}",
                     f"IQM final held-out accuracy across seeds (colour 0..1) for each delay (rows) and "
                     f"{axis_name(axis)} (columns), one panel per estimator{note} "
                     f"({seed_range(counts)} per cell).", svg)


@FIGURES.register("eps")
def eps_heatmap(a: Analysis, d: PlotData, out: Output) -> FigureOut | None:
    """Final accuracy over delay x ε (heatmap)."""
    return heatmap("eps", d, out)


@FIGURES.register("group_size")
def group_size_heatmap(a: Analysis, d: PlotData, out: Output) -> FigureOut | None:
    """Final accuracy over delay x G (heatmap)."""
    return heatmap("group_size", d, out)


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
    fig, ax = plt.subplots(figsize=(PANEL_IN[0] * 2, PANEL_IN[1] + 0.5))
    palette = sns.color_palette("rocket", len(n))
    for colour, (delay, g) in zip(palette, curves.groupby(level=0)):
        ax.plot(g.index.get_level_values("step"), g.to_numpy(), color=colour, lw=1.3,
                label=f"delay={show(delay)} ({n[delay]} trials)")
        ax.axhline(float(delay), color=colour, ls="--", lw=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("stale/mean (steps)")
    ax.legend(fontsize=7, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.subplots_adjust(left=0.12, right=0.7, bottom=0.18, top=0.95)
    png, svg = save(fig, out, "staleness")
    return FigureOut(png, "Realized staleness",
                     "Realized staleness stale/mean vs step, averaged over all trials (any status) of each "
                     "configured delay; dashed lines mark the configured delay. The first `delay` steps are "
                     "the warm-up (staleness < delay by construction); the staleness check uses the steps "
                     "after it.", svg)
