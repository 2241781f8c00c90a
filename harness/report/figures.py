"""Report figures: learning curves, accuracy vs delay, heatmaps, survival curves, realized staleness.

Each function draws from the frames of ``tables`` (never one figure per trial), writes one PNG into
``out_dir`` and returns a ``FigureOut`` whose caption says what is shown and over how many seeds, or
None when the suite has nothing to show (e.g. a heatmap over an axis the grid does not vary).
Matplotlib is used through ``matplotlib.figure.Figure`` (Agg rendering, no pyplot global state).

Panels: columns are delays; rows are *slices*, the combinations of grid keys other than algorithm and
delay that vary in the suite; one line (colour) per algorithm. Only finished trials are drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from harness.report import collapse as col
from harness.report import stats
from harness.report.load import ACC_KEY
from harness.report.render import show
from harness.report.tables import FINISHED

PANEL_IN = (3.4, 2.5)  # inches per panel (width, height)
DPI = 90


@dataclass(frozen=True)
class FigureOut:
    """One saved figure: file name inside the report dir, title, and caption (plain text)."""

    file: str
    title: str
    caption: str


@dataclass(frozen=True)
class PlotData:
    """What every figure needs: finished trials with ``slice`` labels, evals, metrics, grid keys."""

    done: pd.DataFrame  # finished trials with params, plus a "slice" column ("" when nothing else varies)
    evals: pd.DataFrame  # long (trial_id, step, eval/acc)
    metrics: pd.DataFrame  # long (trial_id, step, ..., stale/mean)
    other: list[str]  # varying grid keys other than algorithm and delay
    colors: dict[str, tuple[float, float, float]]  # algorithm -> colour

    @classmethod
    def build(cls, trials: pd.DataFrame, evals: pd.DataFrame, metrics: pd.DataFrame,
              other: list[str]) -> PlotData:
        """Select finished trials with params and label their slice."""
        done = trials[trials["has_params"] & trials["status"].isin(FINISHED) & trials["delay"].notna()].copy()
        done["slice"] = _slice_labels(done, other)
        algos = sorted(done["algorithm"].astype(str).unique())
        colors = dict(zip(algos, sns.color_palette("colorblind", max(len(algos), 1))))
        return cls(done, evals, metrics, other, colors)


def _slice_labels(df: pd.DataFrame, other: list[str]) -> list[str]:
    """Per row, ``key=value`` for each of ``other`` ("" when nothing else varies)."""
    return [" ".join(f"{k}={show(r[k])}" for k in other) for r in df.to_dict("records")]


def _seed_range(counts: pd.Series) -> str:
    """'3 seeds' or '2-3 seeds' from per-line seed counts."""
    if counts.empty:
        return "0 seeds"
    lo, hi = int(counts.min()), int(counts.max())
    return f"{hi} seed{'s' if hi != 1 else ''}" if lo == hi else f"{lo}-{hi} seeds"


def _grid(n_rows: int, n_cols: int) -> tuple[Figure, np.ndarray]:
    """A figure with an (n_rows, n_cols) array of axes of PANEL_IN each and fixed margins (inches) for
    tick labels, axis labels, panel titles and a legend on top (tight_layout is slow on big grids)."""
    left, right, bottom, top, gap_w, gap_h = 0.65, 0.15, 0.5, 0.75, 0.2, 0.4
    width = left + right + n_cols * PANEL_IN[0]
    height = bottom + top + n_rows * PANEL_IN[1]
    fig = Figure(figsize=(width, height), dpi=DPI)
    axes = fig.subplots(n_rows, n_cols, squeeze=False, sharex=True, sharey=True)
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height,
                        top=1 - top / height, wspace=gap_w / (PANEL_IN[0] - gap_w),
                        hspace=gap_h / (PANEL_IN[1] - gap_h))
    return fig, axes


def _save(fig: Figure, colors: dict[str, tuple[float, float, float]], out_dir: Path, file: str) -> None:
    """Legend (one entry per algorithm in ``colors``) above the panels, then PNG."""
    handles = [Line2D([], [], color=c, lw=1.4, label=a) for a, c in colors.items()]
    fig.legend(handles=handles, loc="upper center", ncol=min(len(handles), 6), frameon=False)
    fig.savefig(out_dir / file)


def _panel_title(ax: Axes, delay: object, slice_label: str) -> None:
    ax.set_title(f"delay={show(delay)}" + (f"  {slice_label}" if slice_label else ""), fontsize=9)


def _facets(d: PlotData) -> tuple[list[str], list[object]]:
    """Sorted slice labels (rows) and delays (columns) of the finished trials."""
    return sorted(d.done["slice"].unique()), sorted(d.done["delay"].unique())


def learning_curves(d: PlotData, out_dir: Path) -> FigureOut | None:
    """Held-out accuracy vs step: mean over seeds, band min..max over seeds."""
    if d.done.empty or d.evals.empty:
        return None
    ev = d.evals.merge(d.done[["trial_id", "algorithm", "delay", "slice"]], on="trial_id")
    agg = ev.groupby(["slice", "delay", "algorithm", "step"])[ACC_KEY].agg(["mean", "min", "max"])
    slices, delays = _facets(d)
    fig, axes = _grid(len(slices), len(delays))
    for (s, delay, algo), g in agg.groupby(level=[0, 1, 2]):
        ax = axes[slices.index(s), delays.index(delay)]
        steps = g.index.get_level_values("step")
        color = d.colors[str(algo)]
        ax.plot(steps, g["mean"], color=color, label=str(algo), lw=1.4)
        ax.fill_between(steps, g["min"], g["max"], color=color, alpha=0.18, lw=0)
    for (r, s), (c, delay) in _cells(slices, delays):
        _panel_title(axes[r, c], delay, s)
        axes[r, c].set_ylim(0, 1)
    _label(axes, "step", "held-out accuracy")
    _save(fig, d.colors, out_dir, "learning_curves.png")
    seeds = d.done.groupby(["slice", "delay", "algorithm"]).size()
    return FigureOut("learning_curves.png", "Learning curves",
                     f"Held-out accuracy (eval/acc) vs optimizer step, one panel per delay, one line per "
                     f"algorithm: mean over seeds, shaded band = min..max over seeds "
                     f"({_seed_range(seeds)} per line; finished trials only, a diverged seed stops "
                     f"contributing after its last evaluation).")


def _cells(slices: list[str], delays: list[object]) -> list[tuple[tuple[int, str], tuple[int, object]]]:
    """Every (row, slice), (column, delay) pair of a facet grid."""
    return [((r, s), (c, dl)) for r, s in enumerate(slices) for c, dl in enumerate(delays)]


def _label(axes: np.ndarray, xlabel: str, ylabel: str) -> None:
    for ax in axes[-1, :]:
        ax.set_xlabel(xlabel)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)


def accuracy_vs_delay(cells: pd.DataFrame, d: PlotData, out_dir: Path) -> FigureOut | None:
    """IQM final accuracy vs delay per algorithm, band = 95% bootstrap CI; one panel per slice."""
    cells = cells[cells["seeds"] > 0]
    if cells["delay"].nunique() < 2:
        return None
    cells = cells.assign(slice=_slice_labels(cells, d.other))
    slices = sorted(cells["slice"].unique())
    fig, axes = _grid(1, len(slices))
    for (s, algo), g in cells.sort_values("delay").groupby(["slice", "algorithm"]):
        ax = axes[0, slices.index(s)]
        color = d.colors[str(algo)]
        ax.plot(g["delay"], g["iqm_final"], marker="o", ms=3, color=color, label=str(algo), lw=1.4)
        ax.fill_between(g["delay"], g["ci_low"], g["ci_high"], color=color, alpha=0.18, lw=0)
    for c, s in enumerate(slices):
        axes[0, c].set_title(s, fontsize=9)
        axes[0, c].set_ylim(0, 1)
    _label(axes, "delay (optimizer steps)", "IQM final accuracy")
    _save(fig, d.colors, out_dir, "accuracy_vs_delay.png")
    return FigureOut("accuracy_vs_delay.png", "Accuracy vs delay",
                     f"IQM of final held-out accuracy across seeds vs configured delay, one line per "
                     f"algorithm, band = 95% bootstrap CI over seeds ({_seed_range(cells['seeds'])} per "
                     f"point; with one seed the band is the point).")


def heatmap(axis: str, d: PlotData, out_dir: Path) -> FigureOut | None:
    """IQM final accuracy over delay x ``axis``, one panel per algorithm, pooled over other keys."""
    if axis not in d.other or d.done["delay"].nunique() < 2:
        return None
    pooled = [k for k in d.other if k != axis]
    algos = sorted(d.done["algorithm"].astype(str).unique())
    grouped = d.done.groupby(["algorithm", "delay", axis])["final_acc"]
    table = grouped.agg(lambda x: stats.iqm(x.dropna().to_numpy())).rename("iqm")
    counts = grouped.size()
    fig = Figure(figsize=(PANEL_IN[0] * len(algos), PANEL_IN[1] + 0.4), dpi=DPI)
    axes = fig.subplots(1, len(algos), squeeze=False)[0]
    for ax, algo in zip(axes, algos):
        grid = table.xs(algo, level="algorithm").unstack(axis)  # (delays, axis values)
        sns.heatmap(grid, ax=ax, vmin=0, vmax=1, cmap="viridis", annot=True, fmt=".2f", cbar=False,
                    annot_kws={"fontsize": 7})
        ax.set_title(algo, fontsize=9)
    file = f"heatmap_delay_{axis}.png"
    fig.tight_layout()
    fig.savefig(out_dir / file)
    note = f", pooled over {', '.join(pooled)}" if pooled else ""
    return FigureOut(file, f"Heatmap: delay x {axis}",
                     f"IQM final held-out accuracy across seeds (colour 0..1) for each delay (rows) and "
                     f"{axis} (columns), one panel per algorithm{note} ({_seed_range(counts)} per cell).")


def survival_curves(d: PlotData, out_dir: Path) -> FigureOut | None:
    """Fraction of seeds not yet collapsed vs step."""
    if d.done.empty:
        return None
    last = pd.to_numeric(d.done["last_step"], errors="coerce").max()
    top = float(np.nanmax([last, d.done["collapse_step"].max(), 1.0]))
    grid = np.unique(np.linspace(0, top, 200).round())
    slices, delays = _facets(d)
    fig, axes = _grid(len(slices), len(delays))
    for (s, delay, algo), g in d.done.groupby(["slice", "delay", "algorithm"]):
        alive = col.survival_curve(g["collapse_step"].to_numpy(dtype=float), grid)
        axes[slices.index(s), delays.index(delay)].plot(
            grid, alive, drawstyle="steps-post", color=d.colors[str(algo)], label=str(algo), lw=1.4)
    for (r, s), (c, delay) in _cells(slices, delays):
        _panel_title(axes[r, c], delay, s)
        axes[r, c].set_ylim(-0.03, 1.03)
    _label(axes, "step", "fraction not collapsed")
    _save(fig, d.colors, out_dir, "survival.png")
    seeds = d.done.groupby(["slice", "delay", "algorithm"]).size()
    return FigureOut("survival.png", "Survival curves",
                     f"Fraction of seeds not yet collapsed (collapse rules below) vs optimizer step, one "
                     f"panel per delay, one line per algorithm ({_seed_range(seeds)} per line).")


def staleness(trials: pd.DataFrame, metrics: pd.DataFrame, out_dir: Path) -> FigureOut | None:
    """Realized staleness (stale/mean) vs step, averaged over trials per configured delay."""
    delay_of = trials.loc[trials["has_params"]].set_index("trial_id")["delay"]
    m = metrics[["trial_id", "step", "stale/mean"]].dropna()
    m = m.assign(delay=m["trial_id"].map(delay_of).astype(float)).dropna(subset=["delay"])
    if m.empty:
        return None
    curves = m.groupby(["delay", "step"])["stale/mean"].mean()
    n = m.groupby("delay")["trial_id"].nunique()
    fig = Figure(figsize=(PANEL_IN[0] * 2, PANEL_IN[1] + 0.5), dpi=DPI)
    ax = fig.subplots()
    palette = sns.color_palette("rocket", len(n))
    for color, (delay, g) in zip(palette, curves.groupby(level=0)):
        ax.plot(g.index.get_level_values("step"), g.to_numpy(), color=color, lw=1.3,
                label=f"delay={show(delay)} ({n[delay]} trials)")
        ax.axhline(float(delay), color=color, ls="--", lw=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("stale/mean (optimizer steps)")
    ax.legend(fontsize=7, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(out_dir / "staleness.png")
    return FigureOut("staleness.png", "Realized staleness",
                     "Realized staleness stale/mean vs optimizer step, averaged over all trials (any "
                     "status) of each configured delay; dashed lines mark the configured delay.")
