"""Report figures: accuracy vs delay, final-accuracy intervals, learning curves, collapse-rate heatmap,
estimator diagnostics, realized staleness (and survival curves when they say something).

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
Accuracy axes are fitted to the data they show (``plotting.fitted``), with the base model's accuracy
(step-0 evaluation) and the on-policy (delay 0) level drawn as labelled reference lines where the suite
has them (``levels``).
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
from matplotlib.lines import Line2D

from harness.registry import FIGURES
from harness.report import collapse as col
from harness.report import stats
from harness.report.load import ACC_KEY
from harness.report.plotting import (MARKERS, MIN_WIDTH_IN, PANEL_IN, WRAP, FigureOut, Output, PlotData,  # noqa: F401
                                     autoscaled, estimator_style, facet_grid, facet_titles, fitted, legend_above,
                                     level_handles, log2_delay_axis, low_note, mark_levels, save, seed_range,
                                     shared_legend, wrapped_grid)
from harness.report.render import show
from harness.report.tables import Analysis, _sort_key, axis_name


@FIGURES.register("accuracy")
def accuracy_vs_delay(a: Analysis, d: PlotData, out: Output) -> FigureOut | None:
    """Final accuracy (IQM, or mean below 5 seeds) vs delay per estimator, band = 95% interval; one
    panel per slice (wrapped); hollow markers = fewer than 5 seeds."""
    cells = _cells(a)
    if cells["delay"].nunique() < 2:
        return None
    levels = {s: _levels(g, a.baseline) for s, g in cells.groupby("slice")}

    def draw(data: pd.DataFrame, color: object = None, label: str = "") -> None:
        ax = plt.gca()
        mark_levels(ax, levels[data["slice"].iat[0]])
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

    data, on = cells[["final", "ci_low", "ci_high"]], [lv["on_policy"] for lv in levels.values()]
    ylim, wide = fitted(data, on), fitted(data, on, [lv["base"] for lv in levels.values()])
    ylim = wide if wide[1] - wide[0] <= 2 * (ylim[1] - ylim[0]) else ylim  # a far base level: marked at the edge
    g = facet_grid(cells, d, facet_delay=False, height=3.4, ylim=ylim, sharex=True)
    g.map_dataframe(draw)
    facet_titles(g, facet_delay=False)
    g.set_axis_labels("delay (log2 scale)", "final accuracy")
    extra = level_handles(list(levels.values()))
    png, svg = save(g, out, "accuracy_vs_delay", shared_legend(g, d, extra=extra), right=0.6)
    return FigureOut(png, "Accuracy vs delay",
                     f"Final held-out accuracy vs configured delay on a log2(1 + delay) axis, one panel per "
                     f"slice, one line per estimator: IQM over seeds with a 95% bootstrap band, or with "
                     f"fewer than {stats.MIN_CONFIDENT_SEEDS} seeds the mean with a Student-t band and a "
                     f"hollow marker ({seed_range(cells['seeds'])} per point). y axis fitted to the data; "
                     f"{_levels_note(a.baseline)}{low_note(cells['seeds'])}", svg)


def _cells(a: Analysis) -> pd.DataFrame:
    """The cells with finished seeds and a numeric delay (algorithm as text, delay as float)."""
    cells = a.cells[(a.cells["seeds"] > 0) & a.cells["delay"].notna()].copy()
    cells["algorithm"] = cells["algorithm"].astype(str)
    cells["delay"] = pd.to_numeric(cells["delay"], errors="coerce")
    return cells.dropna(subset=["delay"])


def _levels(cells: pd.DataFrame, baseline: str) -> dict[str, float | None]:
    """One slice's reference levels: ``base``, the mean step-0 accuracy of its cells (None without a
    step-0 evaluation); ``on_policy``, the baseline's delay-0 value (else the mean over the estimators'
    delay-0 values; None without delay 0)."""
    base = cells["start_acc"].mean()
    zero = cells[cells["delay"] == 0]
    own = zero[zero["algorithm"] == baseline]
    on = (own if len(own) else zero)["final"].mean()
    return {"base": None if pd.isna(base) else float(base), "on_policy": None if pd.isna(on) else float(on)}


def _levels_note(baseline: str) -> str:
    return (f"dotted line = the base model's accuracy (step-0 evaluation, mean over cells), dashed line = the "
            f"on-policy level ({baseline} at delay 0), where the suite has them, values at the right (an arrow "
            f"at the edge: a base level far below the data).")


_SHARED = "; delay 0, where every estimator has the same value (shared on-policy trials), is that line, not a panel"


@FIGURES.register("intervals")
def final_intervals(a: Analysis, d: PlotData, out: Output) -> FigureOut | None:
    """Final accuracy per estimator (rows) as interval estimates, one panel per delay (x slice), drawn
    as rliable's ``plot_utils.plot_interval_estimates`` draws them (google-research/rliable at 3ccd9f4):
    a bar over the 95% interval, a black tick at the point. The numbers are the cells' (``stats.estimate``:
    IQM + percentile bootstrap from 5 seeds, the mean + Student-t below, hatched; one seed: tick alone)."""
    cells = _cells(a)
    if cells.empty:
        return None
    levels = {s: _levels(g, a.baseline) for s, g in cells.groupby("slice")}
    delays = [x for x in d.delays if x in set(cells["delay"])]
    zero = cells[cells["delay"] == 0]
    shared = len(delays) > 1 and delays[0] == 0 and zero.groupby("slice")["final"].nunique().max() == 1
    if shared:  # shared on-policy trials (stands_for): the panel would repeat one bar
        delays = delays[1:]
    rows = [n for n in d.hue_order if n in set(cells["algorithm"])]
    h = 0.6  # rliable's interval_height

    def draw(data: pd.DataFrame, color: object = None, label: str = "") -> None:
        ax = plt.gca()
        ax.set_xlim(xlim[data["delay"].iat[0]])
        mark_levels(ax, {"on_policy": levels[data["slice"].iat[0]]["on_policy"]}, vertical=True)
        for r in data.itertuples():
            i, colour = rows.index(r.algorithm), d.styles[r.algorithm].colour
            if np.isfinite(r.ci_low):
                ax.barh(i, r.ci_high - r.ci_low, height=h, left=r.ci_low, color=colour, alpha=0.75,
                        **({"fill": False, "edgecolor": colour, "hatch": "////"} if r.low_confidence else {}))
            ax.vlines(r.final, i - 7.5 * h / 16, i + 6 * h / 16, color="k", alpha=0.5)
        ax.set_yticks(range(len(rows)), rows, fontsize=8)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(5))
        ax.grid(True, axis="x", alpha=0.25)
        ax.spines[["left", "top", "right"]].set_visible(False)
        ax.tick_params(axis="y", length=0)

    shown = cells[cells["delay"].isin(delays)]
    on = [lv["on_policy"] for lv in levels.values()]
    xlim = {x: fitted(g[["final", "ci_low", "ci_high"]], on) for x, g in shown.groupby("delay")}
    g = facet_grid(shown, d, facet_delay=True, delays=delays, height=0.3 * len(rows) + 0.5, sharey=True,
                   sharex="col" if len(d.slices) > 1 else False)  # wrapped panels share all or nothing
    g.map_dataframe(draw)
    facet_titles(g, facet_delay=True)
    g.set_axis_labels("final accuracy", "")
    left = 0.3 + 0.075 * max(len(r) for r in rows)
    handles = level_handles([{"on_policy": lv["on_policy"]} for lv in levels.values()])
    png, svg = save(g, out, "final_accuracy_intervals", legend_above(g.figure, handles), left=left)
    return FigureOut(png, "Final accuracy intervals",
                     f"Final held-out accuracy per estimator, one panel per delay"
                     f"{' and slice' if len(d.slices) > 1 else ''}, drawn as rliable's interval plots: "
                     f"the bar spans the 95% interval, the black tick is the point estimate: the IQM over seeds "
                     f"with a percentile bootstrap interval, or with fewer than {stats.MIN_CONFIDENT_SEEDS} "
                     f"seeds the mean with a Student-t interval (hatched bar; one seed: the tick alone) "
                     f"({seed_range(shown['seeds'])} per bar). Each delay's x axis is fitted to its "
                     f"intervals. Dashed line = the on-policy level "
                     f"({a.baseline} at delay 0){_SHARED if shared else ''}."
                     f"{low_note(shown['seeds'])}", svg)


@FIGURES.register("learning")
def learning_curves(a: Analysis, d: PlotData, out: Output) -> FigureOut | None:
    """Held-out accuracy vs step: one panel per estimator (x slice), one line per delay (mean over
    seeds, band min..max), the on-policy (delay 0) curve in grey in every panel as the reference."""
    if d.done.empty or d.evals.empty:
        return None
    ev = d.evals.merge(d.done[["trial_id", "algorithm", "delay", "slice"]], on="trial_id")
    agg = (ev.groupby(["slice", "delay", "algorithm", "step"])[ACC_KEY].agg(["mean", "min", "max"])
           .reset_index())
    several = len(d.slices) > 1
    agg["panel"] = agg["algorithm"] + (" · " + agg["slice"] if several else "")
    present = set(agg["panel"])
    panels = [p for s in d.slices for n in d.hue_order if (p := f"{n} · {s}" if several else n) in present]
    styles = _delay_styles(d.delays)

    def draw(data: pd.DataFrame, color: object = None, label: str = "") -> None:
        ax = plt.gca()
        for delay, g in data.groupby("delay"):
            st = styles[delay]
            ax.plot(g["step"], g["mean"], **st, ms=3.5, markevery=0.2, zorder=2 if delay else 1)
            ax.fill_between(g["step"], g["min"], g["max"], color=st["color"], alpha=0.12, lw=0)

    g = wrapped_grid(agg, "panel", panels, WRAP, ylim=fitted(agg[["min", "max"]]), xlim=autoscaled(agg["step"]))
    g.map_dataframe(draw)
    g.set_titles(col_template="{col_name}")
    g.set_axis_labels("step", "held-out accuracy")
    handles = [Line2D([], [], **st, ms=5, label=f"delay={show(x)}" + (" (on-policy)" if x == 0 else ""))
               for x, st in styles.items()]
    png, svg = save(g, out, "learning_curves", legend_above(g.figure, handles))
    seeds = d.done.groupby(["slice", "delay", "algorithm"]).size()
    return FigureOut(png, "Learning curves",
                     f"Held-out accuracy (eval/acc) vs step, one panel per estimator"
                     f"{' and slice' if several else ''}, one line per delay (darker = larger delay), the "
                     f"on-policy (delay 0) curve in grey where the suite has it: mean over seeds, shaded band "
                     f"= min..max over seeds ({seed_range(seeds)} per line; diverged seeds count as accuracy "
                     f"0 from their divergence on). y axis fitted to the data; step 0 is the base model."
                     f"{low_note(seeds)}", svg)


def _delay_styles(delays: list[float]) -> dict[float, dict[str, Any]]:
    """A line style per delay: delay 0 (on-policy) grey and thick, the others from light to dark red
    with their own marker."""
    stale = [x for x in delays if x != 0]
    colours = sns.color_palette("rocket_r", len(stale) + 2)[1:-1]           # without the palest and darkest
    out = {0.0: {"color": "0.6", "lw": 2.4, "marker": ""}} if 0 in delays else {}
    return {**out, **{x: {"color": c, "lw": 1.4, "marker": MARKERS[i % len(MARKERS)]}
                      for i, (x, c) in enumerate(zip(stale, colours))}}


@FIGURES.register("collapse")
def collapse_heatmap(a: Analysis, d: PlotData, out: Output) -> FigureOut | None:
    """Collapse rate per estimator (rows) x delay (columns), annotated K/N; one panel per slice."""
    cells = _cells(a)
    if cells.empty:
        return None
    rows = [n for n in d.hue_order if n in set(cells["algorithm"])]

    def draw(data: pd.DataFrame, color: object = None, label: str = "") -> None:
        wide = data.pivot_table(index="algorithm", columns="delay", values=["collapse_rate", "n_collapsed",
                                                                            "seeds"])
        rate, k, n = (wide[v].reindex(index=rows, columns=d.delays).to_numpy(float)
                      for v in ("collapse_rate", "n_collapsed", "seeds"))
        text = [[f"{a:.0f}/{b:.0f}" if b == b else "" for a, b in zip(ra, rb)] for ra, rb in zip(k, n)]
        _heat(plt.gca(), rate, text, [show(x) for x in d.delays], rows, "rocket_r")

    height = max(PANEL_IN[1], 0.3 * len(rows) + 0.8)
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
          cmap: str, vlim: tuple[float, float] = (0, 1)) -> None:
    """An annotated heatmap of ``values`` (rows, cols) on the colour scale ``vlim``; NaN cells blank;
    row labels on the grid's first column only. Drawn with ``imshow`` rather than ``sns.heatmap``, which
    redraws the whole figure per panel to check tick-label overlap (quadratic in the number of panels)."""
    cm = matplotlib.colormaps[cmap] if cmap in matplotlib.colormaps else sns.color_palette(cmap, as_cmap=True)
    ax.imshow(np.ma.masked_invalid(values), cmap=cm, vmin=vlim[0], vmax=vlim[1], aspect="auto",
              interpolation="none")
    scaled = (values - vlim[0]) / ((vlim[1] - vlim[0]) or 1)
    for i, row in enumerate(text):
        for j, t in enumerate(row):
            if t:
                light = scaled[i, j] > 0.55 if cmap.endswith("_r") else scaled[i, j] < 0.55
                ax.text(j, i, t, ha="center", va="center", fontsize=8, color="white" if light else "black")
    ax.set_xticks(range(len(xlabels)), xlabels, fontsize=8)
    ax.set_yticks(range(len(ylabels)), ylabels if ax.get_subplotspec().is_first_col() else [], fontsize=8)
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
    """Final accuracy (the cell value of ``stats.estimate``: IQM over seeds, the mean below 5) over delay x
    ``axis``, one panel per estimator, pooled over other keys; axis values in numeric order; the on-policy
    row set apart."""
    if axis not in d.other or len(d.delays) < 2:
        return None
    pooled = [k for k in d.other if k != axis]
    values = sorted(d.done[axis].dropna().unique(), key=_sort_key)
    grouped = d.done.groupby(["algorithm", "delay", axis])["final_acc"]
    table = grouped.agg(lambda x: stats.estimate(x.to_numpy()).point).rename("value").reset_index()

    vlim = fitted(table["value"], margin=0)
    rows = [f"{show(x)} (on-policy)" if x == 0 else show(x) for x in d.delays]

    def draw(data: pd.DataFrame, color: object = None, label: str = "") -> None:
        grid = data.pivot_table(index="delay", columns=axis, values="value").reindex(index=d.delays,
                                                                                  columns=values)
        v = grid.to_numpy(float)
        ax = plt.gca()
        _heat(ax, v, [[f"{x:.2f}" if x == x else "" for x in row] for row in v], [show(x) for x in values],
              rows, "viridis", vlim)
        if d.delays[0] == 0:
            ax.axhline(0.5, color="white", lw=3)  # the on-policy row apart from the stale ones

    names = [n for n in d.hue_order if n in set(table["algorithm"])]
    g = wrapped_grid(table, "algorithm", names, WRAP, height=max(PANEL_IN[1], 0.45 * len(d.delays) + 0.6),
                     sharex=False, sharey=False)
    g.map_dataframe(draw)
    g.set_titles(col_template="{col_name}")
    g.set_axis_labels(axis_name(axis), "delay")
    png, svg = save(g, out, f"heatmap_delay_{axis}", left=0.3 + 0.07 * max(len(r) for r in rows))
    counts = grouped.size()
    note = f", pooled over {', '.join(axis_name(k) for k in pooled)}" if pooled else ""
    return FigureOut(png, f"Heatmap: delay x {axis_name(axis)}",
                     f"Final held-out accuracy across seeds (IQM; the mean below {stats.MIN_CONFIDENT_SEEDS} "
                     f"seeds) for each delay (rows; the on-policy delay-0 "
                     f"row first, set apart, where the suite has it) and {axis_name(axis)} (columns), one panel "
                     f"per estimator{note} ({seed_range(counts)} per cell). Colour scale fitted to the values "
                     f"({vlim[0]:.2f}..{vlim[1]:.2f}), the same in every panel; each cell's value is written in it.",
                     svg)


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
