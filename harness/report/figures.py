"""Report figures, accuracy (first in page order): accuracy vs delay, final-accuracy intervals, learning
curves. The heatmaps (collapse rate, delay x ε, delay x G) are in heatmaps.py and the training dynamics
(diagnostics, survival, realized staleness) in dynamics.py, registered after these.

Each figure is registered in FIGURES (harness/registry.py) in page order, as a function
``(a: tables.Analysis, d: PlotData, out: Output) -> FigureOut | None``: it draws from the frames of
``tables`` (never one figure per trial), writes its files into ``out`` (``plotting.Output``: PNG by
default, SVG on request) and returns a ``FigureOut`` whose caption says what is shown and over how many
seeds, or None when the suite has nothing to show. A plugin's figure registers the same way and is drawn
after these; one registered with a settings class (``FIGURES.register(name, settings=cls)``) is called with
``settings=`` its object, which a suite sets under ``report: {figures: {name: {...}}}`` (``figure_settings``). How they look
(facets, styles, legend, margins, files) is ``plotting.py``'s; ``FigureOut``, ``PlotData`` and
``estimator_style`` are re-exported from it. Only finished trials are drawn; diverged trials as scored
(accuracy 0 from the divergence on; ``tables.scored_curve``).

Delay axes are log2 of (1 + delay), labelled with the delays, so delay 0 shows and 0 / 4 do not overlap.
Accuracy axes are fitted to the data they show (``plotting.fitted``), with the base model's accuracy
(step-0 evaluation) and the delay-0 level drawn as labelled reference lines where the suite
has them (``levels``).
"""

from __future__ import annotations

from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D

from harness.config.dicts import from_dict
from harness.errors import ConfigError
from harness.registry import FIGURES
from harness.report import stats
from harness.report.load import ACC_KEY
from harness.report.plotting import (MARKERS, WRAP, FigureOut, Output, PlotData,  # noqa: F401  (the page's types)
                                     autoscaled, estimator_style, facet_grid, facet_titles, fitted, legend_above,
                                     level_handles, log2_delay_axis, low_note, mark_levels, save, seed_range,
                                     shared_legend, wrapped_grid)
from harness.report.render import show
from harness.report.tables import Analysis


def figure_settings(given: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each registered figure's settings object (``report: {figures: {name: {setting: value}}}`` over its settings
    class's defaults), for the figures that declare a class; a ConfigError (one line) for a figure that is not
    registered, one that takes no settings, or a bad setting, before the report writes anything."""
    for name in given:
        if name not in FIGURES:
            raise ConfigError(f"report.figures.{name}: no such figure; registered: {', '.join(FIGURES.names())}")
        if FIGURES.settings(name) is None:
            raise ConfigError(f"report.figures.{name}: takes no settings; remove it")
    out = {}
    for name in FIGURES.names():
        cls = FIGURES.settings(name)
        if cls is not None:
            out[name] = from_dict(cls, given.get(name, {}), f"report.figures.{name}")
            if hasattr(out[name], "validate"):
                out[name].validate(f"report.figures.{name}")
    return out


@FIGURES.register("accuracy")
def accuracy_vs_delay(a: Analysis, d: PlotData, out: Output) -> FigureOut | None:
    """Final accuracy (the cells' statistic, stats.estimate) vs delay per estimator, band = 95% interval; one
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
                     f"slice, one line per estimator: {stats.cell_rule(a.statistic, 'band')}; a hollow "
                     f"marker: fewer than {stats.MIN_CONFIDENT_SEEDS} seeds ({seed_range(cells['seeds'])} per "
                     f"point). y axis fitted to the data; "
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
    a bar over the 95% interval, a black tick at the point. The numbers are the cells' (``stats.estimate`` of
    the suite's statistic; fewer than 5 seeds hatched; one seed: tick alone)."""
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
                     f"the bar spans the 95% interval, the black tick is the point estimate: "
                     f"{stats.cell_rule(a.statistic)} (hatched bar: fewer than {stats.MIN_CONFIDENT_SEEDS} "
                     f"seeds; one seed: the tick alone) "
                     f"({seed_range(shown['seeds'])} per bar). Each delay's x axis is fitted to its "
                     f"intervals." + (f" Dashed line = the on-policy level ({a.baseline} at delay 0)"
                                      f"{_SHARED if shared else ''}." if any(_finite_level(v) for v in on) else "")
                     + f"{low_note(shown['seeds'])}", svg)


def _finite_level(value) -> bool:
    """A drawn reference level (None or NaN: the suite has no such run, so no line and no caption for it)."""
    return value is not None and bool(np.isfinite(value))


@FIGURES.register("learning")
def learning_curves(a: Analysis, d: PlotData, out: Output) -> FigureOut | None:
    """Held-out accuracy vs step: one panel per estimator (x slice), one line per delay (mean over
    seeds, band min..max), the delay-0 curve in grey in every panel as the reference."""
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
                     f"delay-0 curve in grey where the suite has it: mean over seeds, shaded band "
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
