"""Report figures: learning curves, accuracy vs delay, collapse-rate heatmap, estimator diagnostics,
realized staleness (and survival curves when they say something).

Each function draws from the frames of ``tables`` (never one figure per trial), writes a PNG and an SVG
into ``out_dir`` and returns a ``FigureOut`` whose caption says what is shown and over how many seeds, or
None when the suite has nothing to show. Facets are seaborn ``FacetGrid``s: wrapped when there is one
facet variable, facet values in numeric order (G=4 before G=16), one shared legend naming every
estimator in the suite (drawn outside the panels; the file is cropped to include it). Each estimator has
its own colour *and* marker (``estimator_style``), so up to ~15 stay distinct. Only finished trials are
drawn; diverged trials as scored (accuracy 0 from the divergence on; ``tables.scored_curve``).

Delay axes are log2 of (1 + delay), labelled with the delays, so delay 0 shows and 0 / 4 do not overlap.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import matplotlib.ticker  # FacetGrid draws through pyplot; every figure is closed after saving
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D

from harness.report import collapse as col
from harness.report import stats
from harness.report.load import ACC_KEY
from harness.report.render import show
from harness.report.tables import FINISHED, Analysis, _sort_key, axis_name

PANEL_IN = (3.2, 2.4)  # inches per panel (width, height)
DPI = 90
WRAP = 4  # panels per row when one facet variable is wrapped
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p", "d", "H", "8")
EXTRA_COLOURS = ("#000000", "#6a3d9a", "#1b5e20", "#800000", "#00838f")  # after seaborn's 10 colorblind


@dataclass(frozen=True)
class FigureOut:
    """One saved figure: PNG file name inside the report dir, its SVG twin, title, caption (plain text)."""

    file: str
    title: str
    caption: str
    svg: str = ""


@dataclass(frozen=True)
class Style:
    colour: tuple[float, float, float]
    marker: str


def estimator_style(names: list[str], baseline: str) -> dict[str, Style]:
    """A distinct (colour, marker) per estimator: the baseline first, then the others by name; colours
    from seaborn's colorblind palette, then EXTRA_COLOURS, then evenly spaced hues; markers cycle."""
    order = sorted(set(names), key=lambda n: (n != baseline, n))
    colours = sns.color_palette("colorblind", 10) + [matplotlib.colors.to_rgb(c) for c in EXTRA_COLOURS]
    if len(order) > len(colours):
        colours += sns.color_palette("husl", len(order) - len(colours))
    return {n: Style(tuple(colours[i]), MARKERS[i % len(MARKERS)]) for i, n in enumerate(order)}


@dataclass(frozen=True)
class PlotData:
    """What every figure needs: finished (trial, cell) rows with slice labels, curves, styles."""

    done: pd.DataFrame  # finished expand_shared rows with a delay, plus "slice"
    evals: pd.DataFrame  # scored eval curves (trial_id, step, eval/acc)
    metrics: pd.DataFrame  # long per-step metrics
    diagnostics: list[str]  # diagnostic metric keys present
    other: list[str]  # varying grid keys other than algorithm and delay
    styles: dict[str, Style]
    slices: list[str]  # slice labels in numeric order
    delays: list[float]

    @classmethod
    def build(cls, a: Analysis, metrics: pd.DataFrame, diagnostics: list[str]) -> PlotData:
        ct = a.cell_trials
        done = ct[ct["status"].isin(FINISHED) & ct["delay"].notna()].copy()
        done["algorithm"] = done["algorithm"].astype(str)
        done["delay"] = done["delay"].astype(float)
        styles = estimator_style(list(done["algorithm"].unique()), a.baseline)
        first = done.drop_duplicates("slice")
        slices = [s for _, s in sorted(((tuple(_sort_key(r[k]) for k in a.other), r["slice"])
                                        for r in first.to_dict("records")))]
        return cls(done, a.scored_evals, metrics, diagnostics, a.other, styles, slices,
                   sorted(done["delay"].unique()))

    @property
    def hue_order(self) -> list[str]:
        return list(self.styles)

    @property
    def palette(self) -> dict[str, tuple[float, float, float]]:
        return {n: s.colour for n, s in self.styles.items()}


def _seed_range(counts: pd.Series) -> str:
    """'3 seeds' or '2-3 seeds' from per-line seed counts."""
    if counts.empty:
        return "0 seeds"
    lo, hi = int(counts.min()), int(counts.max())
    return f"{hi} seed{'s' if hi != 1 else ''}" if lo == hi else f"{lo}-{hi} seeds"


def _low_note(counts: pd.Series) -> str:
    """A caption sentence when some line or point rests on fewer than MIN_CONFIDENT_SEEDS seeds."""
    if counts.empty or counts.min() >= stats.MIN_CONFIDENT_SEEDS:
        return ""
    return (f" LOW CONFIDENCE: fewer than {stats.MIN_CONFIDENT_SEEDS} seeds per point; intervals are "
            "Student-t intervals of the mean and a single seed has none.")


class Grid(sns.FacetGrid):
    """seaborn's FacetGrid without its automatic ``tight_layout`` calls (each one measures every tick
    label of every panel: seconds on a 20-panel grid); ``_save`` lays the figure out with fixed margins
    in inches instead, reserving room for the legend above the panels."""

    def tight_layout(self, *args, **kwargs):  # noqa: D102 (see class docstring)
        return self


def _grid(data: pd.DataFrame, d: PlotData, facet_delay: bool, **kw) -> Grid:
    """A Grid: delay columns x slice rows (``facet_delay``), else slices wrapped; numeric order."""
    size = {"height": PANEL_IN[1], "aspect": PANEL_IN[0] / PANEL_IN[1]}
    if facet_delay and len(d.slices) > 1:
        return Grid(data, col="delay", row="slice", col_order=d.delays, row_order=d.slices,
                    margin_titles=True, **size, **kw)
    if facet_delay:
        return Grid(data, col="delay", col_order=d.delays, col_wrap=min(WRAP, len(d.delays)), **size, **kw)
    return Grid(data, col="slice", col_order=d.slices, col_wrap=min(WRAP, len(d.slices)), **size, **kw)


def _wrapped(data: pd.DataFrame, col: str, order: list, wrap: int, height: float = PANEL_IN[1],
             width: float = PANEL_IN[0], **kw) -> Grid:
    """A Grid with one facet variable ``col`` wrapped after ``wrap`` panels, in ``order``."""
    return Grid(data, col=col, col_order=order, col_wrap=min(wrap, len(order)), height=height,
                aspect=width / height, **kw)


def _titles(g: sns.FacetGrid, facet_delay: bool) -> None:
    if facet_delay:
        g.set_titles(col_template="delay={col_name}", row_template="{row_name}")
        for ax, name in zip(g.axes.flat, np.tile(g.col_names, max(len(g.row_names), 1))):
            ax.set_title(f"delay={show(name)}" if ax.get_title() else "", fontsize=9)
    else:
        g.set_titles(col_template="{col_name}")


def _legend(g: Grid, d: PlotData, names: list[str] | None = None) -> int:
    """One legend above the panels naming every estimator (colour and marker); returns its rows."""
    names = names or d.hue_order
    handles = [Line2D([], [], color=d.styles[n].colour, marker=d.styles[n].marker, lw=1.4, ms=5, label=n)
               for n in names]
    ncol = max(1, min(len(handles), int(g.figure.get_figwidth() // 1.3), 8))
    g.figure.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1.0), ncol=ncol,
                    frameon=False, fontsize=8)
    return -(-len(handles) // ncol)


def _save(g: Grid | plt.Figure, out_dir: Path, stem: str, legend_rows: int = 0, left: float = 0.7,
          right: float = 0.35) -> tuple[str, str]:
    """Fixed margins in inches (room for tick labels, titles and ``legend_rows`` legend rows on top),
    then PNG and SVG; closes the figure."""
    fig = g.figure if isinstance(g, Grid) else g
    if isinstance(g, Grid):
        width, height = fig.get_figwidth(), fig.get_figheight()
        top = 0.35 + 0.22 * legend_rows
        height += top  # grow the figure so panels keep their size
        fig.set_figheight(height)
        n_rows, n_cols = g.axes.shape if g.axes.ndim == 2 else (1, 1)
        if g._col_wrap is not None:
            n_cols = min(g._col_wrap, len(g.col_names))
            n_rows = -(-len(g.col_names) // n_cols)
        fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=0.55 / height,
                            top=1 - top / height, wspace=0.5 / PANEL_IN[0] * (n_cols > 1) + 0.001,
                            hspace=0.5 / PANEL_IN[1] * (n_rows > 1) + 0.001)
    fig.savefig(out_dir / f"{stem}.png", dpi=DPI)
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as text: smaller, faster, searchable
        fig.savefig(out_dir / f"{stem}.svg")
    plt.close(fig)
    return f"{stem}.png", f"{stem}.svg"


def _log2_delay_axis(ax: plt.Axes, delays: list[float]) -> None:
    """x = 1 + delay on a log2 scale, ticks labelled with the delays themselves."""
    ax.set_xscale("log", base=2)
    ax.set_xticks([1 + x for x in delays])
    ax.set_xticklabels([show(x) for x in delays], fontsize=7)
    ax.minorticks_off()


def learning_curves(d: PlotData, out_dir: Path) -> FigureOut | None:
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

    g = _grid(agg, d, facet_delay=True, ylim=(0, 1))
    g.map_dataframe(draw)
    _titles(g, facet_delay=True)
    g.set_axis_labels("step", "held-out accuracy")
    png, svg = _save(g, out_dir, "learning_curves", _legend(g, d), right=1.0 if len(d.slices) > 1 else 0.35)
    seeds = d.done.groupby(["slice", "delay", "algorithm"]).size()
    return FigureOut(png, "Learning curves",
                     f"Held-out accuracy (eval/acc) vs step, one panel per delay (columns) and slice "
                     f"(rows), one line per estimator: mean over seeds, shaded band = min..max over seeds "
                     f"({_seed_range(seeds)} per line; diverged seeds count as accuracy 0 from their "
                     f"divergence on).{_low_note(seeds)}", svg)


def accuracy_vs_delay(cells: pd.DataFrame, d: PlotData, out_dir: Path) -> FigureOut | None:
    """Final accuracy (IQM, or mean below 5 seeds) vs delay per estimator, band = 95% interval; one
    panel per slice (wrapped); hollow markers = fewer than 5 seeds."""
    cells = cells[(cells["seeds"] > 0) & cells["delay"].notna()].copy()
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
        _log2_delay_axis(ax, d.delays)

    g = _grid(cells, d, facet_delay=False, ylim=(0, 1), sharex=True)
    g.map_dataframe(draw)
    _titles(g, facet_delay=False)
    g.set_axis_labels("delay (log2 scale)", "final accuracy")
    png, svg = _save(g, out_dir, "accuracy_vs_delay", _legend(g, d))
    return FigureOut(png, "Accuracy vs delay",
                     f"Final held-out accuracy vs configured delay on a log2(1 + delay) axis, one panel per "
                     f"slice, one line per estimator: IQM over seeds with a 95% bootstrap band, or with "
                     f"fewer than {stats.MIN_CONFIDENT_SEEDS} seeds the mean with a Student-t band and a "
                     f"hollow marker ({_seed_range(cells['seeds'])} per point)."
                     f"{_low_note(cells['seeds'])}", svg)


def collapse_heatmap(cells: pd.DataFrame, d: PlotData, out_dir: Path) -> FigureOut | None:
    """Collapse rate per estimator (rows) x delay (columns), annotated K/N; one panel per slice."""
    cells = cells[(cells["seeds"] > 0) & cells["delay"].notna()].copy()
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
    g = _wrapped(cells, "slice", d.slices, WRAP, height=height, sharex=False, sharey=False)
    g.map_dataframe(draw)
    g.set_titles(col_template="{col_name}")
    g.set_axis_labels("delay", "")
    left = 0.3 + 0.075 * max(len(r) for r in rows)
    png, svg = _save(g, out_dir, "collapse_heatmap", left=left)
    return FigureOut(png, "Collapse rate",
                     f"Fraction of finished seeds that collapsed (colour 0..1, text K/N) per estimator and "
                     f"delay, one panel per slice ({_seed_range(cells['seeds'])} per cell). The collapse "
                     f"rules are listed below.{_low_note(cells['seeds'])}", svg)


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


def survival_curves(d: PlotData, out_dir: Path) -> FigureOut | None:
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

    g = _grid(data, d, facet_delay=True, ylim=(-0.03, 1.03))
    g.map_dataframe(draw)
    _titles(g, facet_delay=True)
    g.set_axis_labels("step", "fraction not collapsed")
    png, svg = _save(g, out_dir, "survival", _legend(g, d), right=1.0 if len(d.slices) > 1 else 0.35)
    return FigureOut(png, "Survival curves (secondary)",
                     f"Fraction of seeds not yet collapsed vs step, one panel per delay and slice "
                     f"({_seed_range(seeds)} per line). Secondary to the collapse-rate heatmap.", svg)


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


def diagnostics_vs_step(d: PlotData, out_dir: Path) -> FigureOut | None:
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

    def draw(data: pd.DataFrame, color: object = None, label: str = "") -> None:
        ax = plt.gca()
        for algo, g in data.groupby("algorithm"):
            st = d.styles[algo]
            ax.plot(g["step"], g["value"], color=st.colour, lw=1.2, marker=st.marker, ms=3, markevery=0.25)
        if data["metric"].iloc[0].endswith("ratio_max") and (data["value"] > 0).all():
            _log_y(ax)

    g = _wrapped(long, "metric", metrics, 3, sharey=False)
    g.map_dataframe(draw)
    g.set_titles(col_template="{col_name}")
    g.set_axis_labels("step", "")
    rows = _legend(g, d, [n for n in d.hue_order if n in set(long["algorithm"])])
    png, svg = _save(g, out_dir, "diagnostics_vs_step", rows)
    return FigureOut(png, "Estimator diagnostics vs step",
                     f"Estimator diagnostics logged in metrics.jsonl ({', '.join(metrics)}) vs step at the "
                     f"largest delay ({show(top)}), mean over seeds and slices in bins of steps; an "
                     f"estimator that does not log a metric has no line in its panel; is/ratio_max on a "
                     f"log scale.", svg)


def diagnostics_vs_delay(d: PlotData, out_dir: Path) -> FigureOut | None:
    """Each diagnostic's after-warm-up mean per trial, averaged over seeds and slices, vs delay."""
    metrics = [k for k in d.diagnostics if k in d.done and d.done[k].notna().any()]
    if not metrics or len(d.delays) < 2:
        return None
    agg = d.done.groupby(["algorithm", "delay"])[metrics].mean().reset_index()
    long = agg.melt(["algorithm", "delay"], var_name="metric", value_name="value").dropna(subset=["value"])

    def draw(data: pd.DataFrame, color: object = None, label: str = "") -> None:
        ax = plt.gca()
        for algo, g in data.sort_values("delay").groupby("algorithm"):
            st = d.styles[algo]
            ax.plot(1 + g["delay"], g["value"], color=st.colour, lw=1.2, marker=st.marker, ms=4)
        if data["metric"].iloc[0].endswith("ratio_max") and (data["value"] > 0).all():
            _log_y(ax)
        _log2_delay_axis(ax, d.delays)

    g = _wrapped(long, "metric", metrics, 3, sharey=False)
    g.map_dataframe(draw)
    g.set_titles(col_template="{col_name}")
    g.set_axis_labels("delay (log2 scale)", "")
    rows = _legend(g, d, [n for n in d.hue_order if n in set(long["algorithm"])])
    png, svg = _save(g, out_dir, "diagnostics_vs_delay", rows)
    return FigureOut(png, "Estimator diagnostics vs delay",
                     "Per trial, the mean of each diagnostic over the steps after the warm-up (step > delay); "
                     "then the mean over seeds and slices, vs configured delay on a log2(1 + delay) axis.", svg)


def heatmap(axis: str, d: PlotData, out_dir: Path) -> FigureOut | None:
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
    g = _wrapped(table, "algorithm", names, WRAP, sharex=False, sharey=False)
    g.map_dataframe(draw)
    g.set_titles(col_template="{col_name}")
    g.set_axis_labels(axis_name(axis), "delay")
    png, svg = _save(g, out_dir, f"heatmap_delay_{axis}")
    counts = grouped.size()
    note = f", pooled over {', '.join(axis_name(k) for k in pooled)}" if pooled else ""
    return FigureOut(png, f"Heatmap: delay x {axis_name(axis)}",
                     f"IQM final held-out accuracy across seeds (colour 0..1) for each delay (rows) and "
                     f"{axis_name(axis)} (columns), one panel per estimator{note} "
                     f"({_seed_range(counts)} per cell).", svg)


def staleness(trials: pd.DataFrame, metrics: pd.DataFrame, out_dir: Path) -> FigureOut | None:
    """Realized staleness (stale/mean) vs step, averaged over trials per configured delay."""
    delay_of = trials.loc[trials["has_params"]].set_index("trial_id")["delay"]
    m = metrics[["trial_id", "step", "stale/mean"]].dropna()
    m = m.assign(delay=pd.to_numeric(m["trial_id"].astype(str).map(delay_of), errors="coerce"))
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
    png, svg = _save(fig, out_dir, "staleness")
    return FigureOut(png, "Realized staleness",
                     "Realized staleness stale/mean vs step, averaged over all trials (any status) of each "
                     "configured delay; dashed lines mark the configured delay. The first `delay` steps are "
                     "the warm-up (staleness < delay by construction); the staleness check uses the steps "
                     "after it.", svg)
