"""The report's figure machinery: what every figure draws from (``PlotData``), estimator styles, facet
grids with fixed margins, the shared legend, captions' seed counts, and saving (``Output``: PNG by default,
SVG on request).

The figures themselves are in ``figures.py``; this module decides how they look, not what they show.
Facets are seaborn ``FacetGrid``s (``Grid``): wrapped when there is one facet variable, facet values in
numeric order (G=4 before G=16), one shared legend naming every estimator in the suite (drawn above the
panels, outside the data; the figure grows to include it). Every figure is at least ``MIN_WIDTH_IN`` wide
at ``DPI`` (>= 900 px at its natural size): a grid of few panels widens its panels. Each estimator has
its own colour *and* marker (``estimator_style``), so up to ~15 stay distinct: the one estimator-style
table of every figure, the estimator lab's included (harness/lab/plots.py). Accuracy axes are fitted to
their data (``fitted``), with the base-model and on-policy levels as reference lines (``mark_levels``).
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

from harness.report import stats
from harness.report.render import show
from harness.report.tables import FINISHED, Analysis, _sort_key
from harness.store.safewrite import open_atomic

PANEL_IN = (3.2, 2.4)  # inches per panel (width, height)
DPI = 100
MIN_WIDTH_IN = 9.2  # every figure at least this wide: >= 900 px at its natural size (panels widen to fit)
WRAP = 4  # panels per row when one facet variable is wrapped
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p", "d", "H", "8")
EXTRA_COLOURS = ("#000000", "#6a3d9a", "#1b5e20", "#800000", "#00838f")  # after seaborn's 10 colorblind
FORMATS = ("png", "svg")  # the figure formats a report can write, in the order the page prefers them


def parse_formats(text: str) -> tuple[str, ...]:
    """``"png,svg"`` -> ``("png", "svg")`` (page order, duplicates dropped); ValueError (one line) for an
    empty list or an unknown format."""
    names = [n.strip().lower() for n in str(text).split(",") if n.strip()]
    unknown = sorted(set(names) - set(FORMATS))
    if unknown or not names:
        raise ValueError(f"--formats {text!r}: give a comma-separated list of {', '.join(FORMATS)} "
                         f"(e.g. png,svg){'; unknown: ' + ', '.join(unknown) if unknown else ''}")
    return tuple(f for f in FORMATS if f in names)


@dataclass(frozen=True)
class Output:
    """Where figures go and in which formats (``FORMATS``; PNG alone by default: an SVG of a 20-panel
    grid costs as much to write as its PNG, and most readers never open it)."""

    dir: Path
    formats: tuple[str, ...] = ("png",)

    def __post_init__(self) -> None:
        if not self.formats or set(self.formats) - set(FORMATS):
            raise ValueError(f"figure formats {self.formats!r}: choose from {', '.join(FORMATS)}")


@dataclass(frozen=True)
class FigureOut:
    """One saved figure: the file the page shows (the PNG, or the SVG when only SVG was asked for) inside
    the report dir, title, caption (plain text), and the SVG twin linked from the caption ("" for none)."""

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
        numeric = pd.to_numeric(ct["delay"], errors="coerce")  # a delay law (JSON text) is not on a delay axis
        done = ct[ct["status"].isin(FINISHED) & numeric.notna()].copy()
        done["algorithm"] = done["algorithm"].astype(str)
        done["delay"] = numeric[done.index].astype(float)
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


def seed_range(counts: pd.Series) -> str:
    """'3 seeds' or '2-3 seeds' from per-line seed counts."""
    if counts.empty:
        return "0 seeds"
    lo, hi = int(counts.min()), int(counts.max())
    return f"{hi} seed{'s' if hi != 1 else ''}" if lo == hi else f"{lo}-{hi} seeds"


def low_note(counts: pd.Series) -> str:
    """A caption sentence when some line or point rests on fewer than MIN_CONFIDENT_SEEDS seeds."""
    if counts.empty or counts.min() >= stats.MIN_CONFIDENT_SEEDS:
        return ""
    return (f" LOW CONFIDENCE: fewer than {stats.MIN_CONFIDENT_SEEDS} seeds per point; intervals are "
            "Student-t intervals of the mean and a single seed has none.")


class Grid(sns.FacetGrid):
    """seaborn's FacetGrid without its automatic ``tight_layout`` calls (each one measures every tick
    label of every panel: seconds on a 20-panel grid); ``save`` lays the figure out with fixed margins
    in inches instead, reserving room for the legend above the panels."""

    def tight_layout(self, *args, **kwargs):  # noqa: D102 (see class docstring)
        return self


def _size(n_cols: int, height: float, width: float = PANEL_IN[0]) -> dict[str, float]:
    """FacetGrid's height and aspect for panels ``width`` x ``height`` inches, widened so that ``n_cols``
    of them make a figure at least MIN_WIDTH_IN wide."""
    return {"height": height, "aspect": max(width, MIN_WIDTH_IN / max(n_cols, 1)) / height}


def facet_grid(data: pd.DataFrame, d: PlotData, facet_delay: bool, height: float = PANEL_IN[1],
               delays: list[float] | None = None, **kw) -> Grid:
    """A Grid: delay columns x slice rows (``facet_delay``; ``delays``, default all), else slices
    wrapped; numeric order."""
    delays = d.delays if delays is None else delays
    if facet_delay and len(d.slices) > 1:
        return Grid(data, col="delay", row="slice", col_order=delays, row_order=d.slices,
                    margin_titles=True, **_size(len(delays), height), **kw)
    if facet_delay:
        return wrapped_grid(data, "delay", delays, WRAP, height, **kw)
    return wrapped_grid(data, "slice", d.slices, WRAP, height, **kw)


def wrapped_grid(data: pd.DataFrame, col: str, order: list, wrap: int, height: float = PANEL_IN[1],
             width: float = PANEL_IN[0], **kw) -> Grid:
    """A Grid with one facet variable ``col`` wrapped after ``wrap`` panels, in ``order``."""
    n_cols = min(wrap, len(order))
    return Grid(data, col=col, col_order=order, col_wrap=n_cols, **_size(n_cols, height, width), **kw)


def fitted(*values: object, margin: float = 0.06) -> tuple[float, float]:
    """Axis limits fitted to the finite ``values`` (arrays, series or numbers) with ``margin`` of their
    span on each side (at least 0.01); (0, 1) when there is none."""
    x = np.concatenate([np.ravel(np.asarray(v, dtype=float)) for v in values]) if values else np.array([])
    x = x[np.isfinite(x)]
    if not x.size:
        return 0.0, 1.0
    pad = max(margin * float(x.max() - x.min()), 0.01)
    return float(x.min()) - pad, float(x.max()) + pad


def autoscaled(values: pd.Series) -> tuple[float, float] | None:
    """The x-limits matplotlib's autoscale would give these values (their range plus ``axes.xmargin``),
    None for an empty or single value. Set up front on a grid of shared axes, they spare each added
    band a rescale of every panel (~0.7 s on a 20-panel grid of learning curves); the figure is the same."""
    lo, hi = float(values.min()), float(values.max())
    if not hi > lo:
        return None
    margin = matplotlib.rcParams["axes.xmargin"] * (hi - lo)
    return lo - margin, hi + margin


def facet_titles(g: sns.FacetGrid, facet_delay: bool) -> None:
    if facet_delay:
        g.set_titles(col_template="delay={col_name}", row_template="{row_name}")
        for ax, name in zip(g.axes.flat, np.tile(g.col_names, max(len(g.row_names), 1))):
            ax.set_title(f"delay={show(name)}" if ax.get_title() else "", fontsize=9)
    else:
        g.set_titles(col_template="{col_name}")


def shared_legend(g: Grid, d: PlotData, names: list[str] | None = None, extra: list[Line2D] = ()) -> int:
    """One legend above the panels naming every estimator (colour and marker), then ``extra`` handles
    (reference lines); returns its rows."""
    names = names or d.hue_order
    handles = [Line2D([], [], color=d.styles[n].colour, marker=d.styles[n].marker, lw=1.4, ms=5, label=n)
               for n in names]
    return legend_above(g.figure, [*handles, *extra])


def legend_above(fig: plt.Figure, handles: list) -> int:
    """``handles`` as one legend above the panels (``save`` leaves room for its rows); returns its rows."""
    ncol = max(1, min(len(handles), int(fig.get_figwidth() // 1.3), 8))
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1.0), ncol=ncol, frameon=False,
               fontsize=8)
    return -(-len(handles) // ncol)


LEVEL_STYLE = {"base": {"color": "0.45", "ls": ":", "lw": 1.2},
               "on_policy": {"color": "0.45", "ls": "--", "lw": 1.0}}
LEVEL_LABEL = {"base": "base model (step-0 eval)", "on_policy": "delay 0"}   # on-policy only at one update per batch


def level_handles(levels: list[dict[str, float | None]]) -> list[Line2D]:
    """Legend handles for the reference levels ``mark_levels`` draws (one dict per panel; those present),
    each with its value when every panel has the same."""
    handles = []
    for key in LEVEL_STYLE:
        values = {round(v, 2) for lv in levels if (v := lv.get(key)) is not None}
        if values:
            value = f": {values.pop():.2f}" if len(values) == 1 else ""
            handles.append(Line2D([], [], **LEVEL_STYLE[key], label=LEVEL_LABEL[key] + value))
    return handles


def mark_levels(ax: plt.Axes, levels: dict[str, float | None], vertical: bool = False) -> None:
    """The base model's and the on-policy accuracy as reference lines (styles LEVEL_STYLE) on axes whose
    limits are set. A horizontal level's value is written just right of the axes, with an arrow at the
    edge when it lies beyond the limits; a vertical one is drawn within the limits only (its value is in
    the legend, ``level_handles``)."""
    lo, hi = ax.get_xlim() if vertical else ax.get_ylim()
    for key, style in LEVEL_STYLE.items():
        v = levels.get(key)
        if v is None:
            continue
        if lo <= v <= hi:
            (ax.axvline if vertical else ax.axhline)(v, zorder=1, **style)
        if not vertical:
            text = f"{v:.2f}" if lo <= v <= hi else f"↓ {v:.2f}" if v < lo else f"{v:.2f} ↑"
            ax.annotate(text, xy=(1, min(max(v, lo), hi)), xycoords=("axes fraction", "data"), xytext=(3, 0),
                        textcoords="offset points", ha="left", va="center", fontsize=7, color="0.35")


def save(g: Grid | plt.Figure, out: Output, stem: str, legend_rows: int = 0, left: float = 0.7,
         right: float = 0.35) -> tuple[str, str]:
    """Fixed margins in inches (room for tick labels, titles and ``legend_rows`` legend rows on top),
    then one file per format of ``out``; closes the figure. Returns (the file the page shows, the SVG
    file to link from its caption or "")."""
    fig = g.figure if isinstance(g, Grid) else g
    fig.set_figwidth(max(fig.get_figwidth(), MIN_WIDTH_IN))
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
    if "png" in out.formats:
        with open_atomic(out.dir / f"{stem}.png") as f:
            fig.savefig(f, format="png", dpi=DPI)
    if "svg" in out.formats:
        with matplotlib.rc_context({"svg.fonttype": "none"}), open_atomic(out.dir / f"{stem}.svg") as f:
            fig.savefig(f, format="svg")  # text as text: smaller, faster, searchable
    plt.close(fig)
    shown = f"{stem}.{out.formats[0]}"
    return shown, (f"{stem}.svg" if "svg" in out.formats and shown != f"{stem}.svg" else "")


def log2_delay_axis(ax: plt.Axes, delays: list[float]) -> None:
    """x = 1 + delay on a log2 scale, ticks labelled with the delays themselves."""
    ax.set_xscale("log", base=2)
    ax.set_xticks([1 + x for x in delays])
    ax.set_xticklabels([show(x) for x in delays], fontsize=7)
    ax.minorticks_off()
