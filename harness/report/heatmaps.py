"""Report figures, heatmaps (after figures.py's, in page order): collapse rate per estimator x delay, and
final accuracy over delay x ε and delay x G with the on-policy row set apart. Registered in FIGURES as
figures.py describes; the annotated-heatmap primitive ``_heat`` is shared by the three.
"""
from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from harness.registry import FIGURES
from harness.report import stats
from harness.report.figures import _cells
from harness.report.plotting import (PANEL_IN, WRAP, FigureOut, Output, PlotData, fitted, low_note, save, seed_range,
                                     wrapped_grid)
from harness.report.render import show
from harness.report.tables import Analysis, _sort_key, axis_name


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


def heatmap(axis: str, a: Analysis, d: PlotData, out: Output) -> FigureOut | None:
    """Final accuracy (the cell value of ``stats.estimate`` of the suite's statistic) over delay x
    ``axis``, one panel per estimator, pooled over other keys; axis values in numeric order; the on-policy
    row set apart."""
    if axis not in d.other or len(d.delays) < 2:
        return None
    pooled = [k for k in d.other if k != axis]
    values = sorted(d.done[axis].dropna().unique(), key=_sort_key)
    grouped = d.done.groupby(["algorithm", "delay", axis])["final_acc"]
    value = lambda x: stats.estimate(x.to_numpy(), statistic=a.statistic).point   # noqa: E731
    table = grouped.agg(value).rename("value").reset_index()

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
                     f"Final held-out accuracy across seeds ({stats.cell_rule(a.statistic, None)}) for each "
                     f"delay (rows; the on-policy delay-0 row first, set apart, where the suite has it) and "
                     f"{axis_name(axis)} (columns), one panel per estimator{note} ({seed_range(counts)} per cell). Colour scale fitted to the values "
                     f"({vlim[0]:.2f}..{vlim[1]:.2f}), the same in every panel; each cell's value is written in it.",
                     svg)


@FIGURES.register("eps")
def eps_heatmap(a: Analysis, d: PlotData, out: Output) -> FigureOut | None:
    """Final accuracy over delay x ε (heatmap)."""
    return heatmap("eps", a, d, out)


@FIGURES.register("group_size")
def group_size_heatmap(a: Analysis, d: PlotData, out: Output) -> FigureOut | None:
    """Final accuracy over delay x G (heatmap)."""
    return heatmap("group_size", a, d, out)


