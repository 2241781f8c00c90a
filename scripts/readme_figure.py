"""The README's first-screen figure: final accuracy against delay per estimator, with 95% intervals, from a
committed report's raw trials.

    python scripts/readme_figure.py [reports/reference-v3]     # writes REPORT/accuracy_by_delay.png

Reads the report's raw.tar.gz through the report code (harness.report: the cells' statistic and interval as
the report prints them, stats.estimate; the delays labelled with the staleness each really had,
regime.staleness_label) and draws one point range per estimator and delay, each estimator's step size (the
suite's `overrides:`) in the legend, since a tuned table's order follows it.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from harness.report import regime, stats, tables
from harness.report.load import load_results
from harness.report.plotting import DPI, MIN_WIDTH_IN, estimator_style
from harness.store.archive import unpacked_archive

FILE = "accuracy_by_delay.png"


def draw(report: Path) -> Path:
    with unpacked_archive(report / "raw.tar.gz") as path:
        res = load_results(path)
        a = tables.analyse(res)
        own = regime.cell_regime(res.metrics, a.cell_trials, ["slice", "algorithm", "delay"])
    cells = a.cells[a.cells["delay"].notna() & (a.cells["seeds"] > 0)]
    delays = sorted(cells["delay"].astype(float).unique())
    labels = {float(r["delay"]): regime.staleness_label(r["delay"], r["stale_mean"], r["stale_max"])
              for r in own.to_dict("records")}
    names = sorted(cells["algorithm"].astype(str).unique(), key=lambda n: (n != a.baseline, n))
    style = estimator_style(names, a.baseline)
    lrs = {n: o.get("train.lr") for n, o in res.suite.overrides.items()}
    fig = Figure(figsize=(MIN_WIDTH_IN, 3.8), dpi=DPI)
    ax = fig.add_subplot(1, 1, 1)
    for i, name in enumerate(names):
        g = cells[cells["algorithm"].astype(str) == name].sort_values("delay")
        x = np.array([delays.index(float(d)) for d in g["delay"]]) + (i - (len(names) - 1) / 2) * 0.09
        y = g["final"].to_numpy(float)
        err = np.vstack([y - g["ci_low"].to_numpy(float), g["ci_high"].to_numpy(float) - y])
        st = style[name]
        label = name + (f" (lr {lrs[name]:.3g})" if lrs.get(name) is not None else "")
        ax.errorbar(x, y, err, color=st.colour, marker=st.marker, ms=5, lw=1.2, capsize=3, label=label)
    ax.set_xticks(range(len(delays)), [f"delay {labels.get(d, f'{d:g}')}" for d in delays], fontsize=8)
    ax.set_xlim(-0.4, len(delays) - 0.6)
    ax.set_ylabel("final test accuracy")
    seeds = int(cells["seeds"].min())
    ax.set_title(f"{res.name}, final test accuracy: {stats.cell_rule(a.statistic)} ({seeds} seeds a cell)", fontsize=8)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.09, right=0.74, bottom=0.12, top=0.91)
    out = report / FILE
    fig.savefig(out)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path, nargs="?", default=Path("reports/reference-v3"))
    print(draw(ap.parse_args(argv).report))


if __name__ == "__main__":
    main()
