"""Figures of the estimator-lab report section (matplotlib Figure objects, Agg, no pyplot state).

Each function writes one PNG into out_dir and returns its file name. Inputs are the plain data of
sweeps.run_sweeps (rows of dicts) and results.LabTrial lists; no torch.
"""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

from harness.report.plotting import DPI, MIN_WIDTH_IN, Style, estimator_style
from harness.config.suite import DEFAULT_BASELINE
from harness.lab.results import LabTrial, bias_ci
from harness.store.safewrite import open_atomic

Styles = dict[str, Style]         # estimator -> colour and marker: the report's table (plotting.estimator_style)


def suite_styles(names: Any, baseline: str = DEFAULT_BASELINE) -> Styles:
    """The estimators' styles for the lab section: the report's own table over the suite's estimators."""
    return estimator_style(sorted({str(n) for n in names}), baseline)


def _color(styles: Styles, name: str) -> Any:
    return styles[name].colour if name in styles else (0.4, 0.4, 0.4)


def _save(fig: Figure, out_dir: Path, name: str) -> str:
    """At least MIN_WIDTH_IN wide (>= 900 px, as every report figure), each panel's legend moved below
    it, outside the data (the figure grows by the legend's rows); fixed margins in inches: tight_layout
    measures every tick label (mathtext) and costs seconds per figure."""
    fig.set_figwidth(max(fig.get_figwidth(), MIN_WIDTH_IN))
    width, height = fig.get_figwidth(), fig.get_figheight()
    panel_in = (width * 0.89 - 0.35 * width * 0.89 / len(fig.axes)) / len(fig.axes)  # subplots_adjust below
    legends = [(ax, ax.get_legend()) for ax in fig.axes if ax.get_legend() is not None]
    moved = []
    for ax, legend in legends:
        labels = [t.get_text() for t in legend.texts]
        ncol = max(1, min(len(labels), int(panel_in // (0.065 * max(map(len, labels)) + 0.4))))
        moved.append((ax, legend.legend_handles, labels, ncol))
        legend.remove()
    extra = max((-(-len(labels) // ncol) for *_, labels, ncol in moved), default=0) * 0.15
    fig.set_figheight(height + extra)
    total = height + extra
    fig.subplots_adjust(left=0.09, right=0.98, bottom=(0.5 + extra) / total, top=1 - 0.36 / total, wspace=0.35)
    for ax, handles, labels, ncol in moved:
        below = -0.46 / (ax.get_position().height * total)       # 0.46 in under the axes: past the x label
        ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, below), ncol=ncol, frameon=False, fontsize=7)
    with open_atomic(out_dir / name) as f:
        fig.savefig(f, format=Path(name).suffix[1:], dpi=DPI)
    return name


def _log_x(ax: Any, values: Any, labels: Any = None) -> None:
    """Log x axis with major ticks exactly at `values` (plain labels), no minor tick labels."""
    values = sorted(set(float(v) for v in values))
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(values))
    ax.set_xticklabels([f"{v:g}" for v in (labels if labels is not None else values)], fontsize=7)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def _bias_points(ax: Any, rows: list[dict[str, Any]], key: str, label: str, color: Any) -> None:
    """Every Monte Carlo bias estimate with its 95% CI (from the squared estimate, results.bias_ci): filled
    where the CI excludes 0, open where it does not; a point estimated as 0 is drawn as an open triangle
    at its upper bound (y = upper bound = 0, the estimator equal to the reference on every group: not drawn)."""
    x = np.array([r[key] for r in rows], float)
    y = np.array([r["bias_tis"] for r in rows], float)
    ci = np.array([bias_ci(r["bias_tis_sq"], r["bias_tis_sq_se"]) for r in rows], float).reshape(-1, 2)
    ax.plot(x[y > 0], y[y > 0], "-", color=color, lw=1, label=label)
    for mask, face in ((ci[:, 0] > 0, color), ((ci[:, 0] <= 0) & (y > 0), "none")):
        if mask.any():
            ax.errorbar(x[mask], y[mask], yerr=[y[mask] - ci[mask, 0], ci[mask, 1] - y[mask]], fmt="o", ms=4,
                        capsize=2, color=color, mfc=face)
    bound = (y <= 0) & (ci[:, 1] > 0)
    if bound.any():
        ax.scatter(x[bound], ci[bound, 1], marker="v", facecolors="none", edgecolors=color)


def bias_vs_g(by_g: list[dict[str, Any]], fits: dict[tuple[float, str], dict[str, Any]], out_dir: Path,
              styles: Styles | None = None) -> str:
    styles = styles or suite_styles(r["estimator"] for r in by_g)
    kls = sorted({r["kl"] for r in by_g})
    fig = Figure(figsize=(3.6 * len(kls), 3.0))
    for i, kl in enumerate(kls):
        ax = fig.add_subplot(1, len(kls), i + 1)
        for name in sorted({r["estimator"] for r in by_g}):
            rows = sorted((r for r in by_g if r["kl"] == kl and r["estimator"] == name), key=lambda r: r["G"])
            _bias_points(ax, rows, "G", name, _color(styles, name))
            fit = fits.get((kl, name))
            if fit and math.isfinite(fit["slope"]):
                xs = np.array(fit["x_used"])
                ax.plot(xs, np.exp(fit["intercept"]) * xs ** fit["slope"], "--", color=_color(styles, name), lw=1,
                        label=f"p = {fit['slope']:.2f} [{fit['lo']:.2f}, {fit['hi']:.2f}] ({fit['kind']})")
        ax.set(yscale="log", xlabel="group size G", ylabel="‖E[ĝ − ĝ_trajIS]‖", title=f"KL(π_b‖π_θ) = {kl:g}")
        _log_x(ax, [r["G"] for r in by_g])
        ax.legend(fontsize=6)
    return _save(fig, out_dir, "lab_bias_vs_g.png")


def bias_vs_eps(by_eps: list[dict[str, Any]], delta: list[dict[str, Any]], out_dir: Path,
                styles: Styles | None = None) -> str:
    styles = styles or suite_styles(r["estimator"] for r in by_eps)
    fig = Figure(figsize=(7.4, 3.0))
    ax = fig.add_subplot(1, 2, 1)
    for name in sorted({r["estimator"] for r in by_eps}):
        rows = sorted((r for r in by_eps if r["estimator"] == name), key=lambda r: r["eps"])
        _bias_points(ax, rows, "eps", name, _color(styles, name))
    ax.set(yscale="log", xlabel="ε", ylabel="‖E[ĝ − ĝ_trajIS]‖", title="bias vs ε")
    _log_x(ax, [r["eps"] for r in by_eps])
    ax.legend(fontsize=7)
    ax = fig.add_subplot(1, 2, 2)
    shown: set[str] = set()
    for cap, clip in sorted({(r["rescaler"], r["clipper"]) for r in delta}):
        rows = sorted((r for r in delta if (r["rescaler"], r["clipper"]) == (cap, clip)), key=lambda r: r["eps"])
        eps = [r["eps"] for r in rows]
        if cap not in shown:                                     # a rescaler's δ is the same against every clipper
            ax.plot(eps, [r["delta_rescale_mean"] for r in rows], "o-", color=_color(styles, cap), label=f"δ {cap} (mean)")
            shown.add(cap)
        if clip not in shown:
            ax.plot(eps, [r["delta_clip_mean"] for r in rows], "s--", color=_color(styles, clip), label=f"δ {clip} (mean)")
            shown.add(clip)
    ax.set(xlabel="ε", ylabel="max_i |1 − w_i/r_i|", title="weight distortion per group")
    _log_x(ax, [r["eps"] for r in delta] or [r["eps"] for r in by_eps])
    ax.legend(fontsize=7)
    return _save(fig, out_dir, "lab_bias_vs_eps.png")


def bias_vs_kl(by_kl: list[dict[str, Any]], out_dir: Path, styles: Styles | None = None) -> str:
    styles = styles or suite_styles(r["estimator"] for r in by_kl)
    fig = Figure(figsize=(11.0, 3.0))
    panels = (("bias_true", "‖E ĝ − g*‖"), ("second_moment", "E‖ĝ‖²"), ("cosine_mean", "cos(E ĝ, ∇J)"))
    for i, (key, label) in enumerate(panels):
        ax = fig.add_subplot(1, 3, i + 1)
        for name in sorted({r["estimator"] for r in by_kl}):
            rows = sorted((r for r in by_kl if r["estimator"] == name), key=lambda r: r["kl"])
            x = np.array([r["pair_kl"] for r in rows])
            y = np.array([r[key] for r in rows])
            se = np.array([r.get(f"{key}_se", 0.0) for r in rows])
            ax.errorbar(x, y, yerr=se, fmt="o-", ms=3, capsize=2, color=_color(styles, name), label=name)
        ax.set(xlabel="KL(π_b‖π_θ) (nats)", ylabel=label)
        _log_x(ax, sorted({round(r["pair_kl"], 3) for r in by_kl}))
        if key != "cosine_mean":
            ax.set_yscale("log")
    fig.axes[0].legend(fontsize=6)
    return _save(fig, out_dir, "lab_bias_vs_kl.png")


def _by_algo_delay(trials: list[LabTrial], value: Any) -> dict[str, dict[int, list[float]]]:
    out: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for t in trials:
        out[t.algorithm][t.delay].append(value(t))
    return out


def convergence(trials: list[LabTrial], out_dir: Path, styles: Styles | None = None) -> str:
    styles = styles or suite_styles(t.algorithm for t in trials)
    fig = Figure(figsize=(11.0, 3.0))
    for i, (label, value) in enumerate((("1 − final eval/acc", lambda t: 1 - t.final_acc),
                                        ("1 − mean eval/acc over the run", lambda t: 1 - t.auc_acc))):
        ax = fig.add_subplot(1, 3, i + 1)
        for name, by_d in sorted(_by_algo_delay(trials, value).items()):
            d = np.array(sorted(by_d))
            m = np.array([np.mean(by_d[k]) for k in d])
            se = np.array([np.std(by_d[k], ddof=1) / math.sqrt(len(by_d[k])) if len(by_d[k]) > 1 else 0 for k in d])
            ax.errorbar(d + 1, m, yerr=se, fmt="o-", ms=3, capsize=2, color=_color(styles, name), label=name)
        ax.set(xlabel="delay d (log scale of d + 1)", ylabel=label)
        delays = sorted({t.delay for t in trials})
        _log_x(ax, [d + 1 for d in delays], delays)
    fig.axes[0].legend(fontsize=6)
    ax = fig.add_subplot(1, 3, 3)
    d_max = max(t.delay for t in trials)
    for name in sorted({t.algorithm for t in trials}):
        runs = [t for t in trials if t.algorithm == name and t.delay == d_max and t.acc.size]
        n = min(r.acc.size for r in runs) if runs else 0
        if n:
            ax.plot(runs[0].steps[:n], np.mean([r.acc[:n] for r in runs], axis=0), color=_color(styles, name), label=name)
    ax.set(xlabel="step", ylabel="eval/acc (exact J)", title=f"mean curve at delay {d_max}")
    return _save(fig, out_dir, "lab_convergence.png")


def bias_vs_outcome(trials: list[LabTrial], out_dir: Path, styles: Styles | None = None) -> str:
    styles = styles or suite_styles(t.algorithm for t in trials)
    fig = Figure(figsize=(7.4, 3.0))
    labels = ("relative bias ‖E ĝ − g*‖ / ‖g*‖", "relative 2nd moment E‖ĝ‖² / ‖g*‖²")
    for i, label in enumerate(labels):
        ax = fig.add_subplot(1, 2, i + 1)
        for name in sorted({t.algorithm for t in trials}):
            pts = [(t.relative()[i], 1 - t.auc_acc) for t in trials if t.algorithm == name and t.delay > 0]
            pts = [p for p in pts if math.isfinite(p[0]) and p[0] > 0]
            if pts:
                ax.scatter(*zip(*pts), s=12, color=_color(styles, name), label=name)
        ax.set(xscale="log", xlabel=label, ylabel="1 − mean eval/acc")
    fig.axes[0].legend(fontsize=6)
    return _save(fig, out_dir, "lab_bias_vs_outcome.png")
