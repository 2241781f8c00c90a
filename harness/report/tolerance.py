"""Step-size tolerance: the tuning trials' validation accuracy against the learning rate, per estimator.

A table tuned by `stalebench tune` ranks its estimators at their tuned step sizes, so its order mixes what
staleness costs each one with how large a step each survives. This section shows the second from the
tuning trials (`results/<suite>/tune/`, or the report directory's `tune.raw.tar.gz` when a committed report
is re-rendered): per estimator, each tuning trial's final accuracy (the report's scoring: a diverged trial
scores 0) against its ``train.lr``, the mean over its seeds joined by a line, and the lr the table used (the
suite's ``overrides:``) marked. The tuning trials read the validation split, never the table's test split.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from harness.registry import SECTIONS
from harness.report.load import SuiteResults, load_results
from harness.report.sections import Section
from harness.store.archive import TUNE_ARCHIVE_NAME, pack_tuning, unpacked_archive
from harness.store.trialdir import SUITE_FILE

LR_KEY = "train.lr"
FIGURE = "step_size_tolerance.png"


def tuning_points(tune: SuiteResults) -> pd.DataFrame:
    """One row per finished tuning trial: algorithm, lr, seed, delay, final_acc (tables.summarize_trials)."""
    from harness.report.tables import FINISHED, summarize_trials

    trials, _ = summarize_trials(tune)
    if LR_KEY not in trials:
        return pd.DataFrame(columns=["algorithm", "lr", "seed", "delay", "final_acc"])
    done = trials[trials["status"].isin(FINISHED) & trials[LR_KEY].notna()]
    return pd.DataFrame({"algorithm": done["algorithm"].astype(str), "lr": done[LR_KEY].astype(float),
                         "seed": done["seed"], "delay": done["delay"], "final_acc": done["final_acc"].astype(float)})


def _tuning(res: SuiteResults, out_dir: Path) -> pd.DataFrame | None:
    """The tuning points of ``res``: its results dir's tune/ (packed as `report --raw` packs it) if it holds
    trials, else out_dir's tune.raw.tar.gz."""
    with tempfile.TemporaryDirectory(prefix="stalebench-tune-") as tmp:
        archive = pack_tuning(res.path, Path(tmp) / TUNE_ARCHIVE_NAME) if (res.path / SUITE_FILE).is_file() else None
        if archive is not None:
            return _points(archive)
    archive = Path(out_dir) / TUNE_ARCHIVE_NAME
    return _points(archive) if archive.is_file() else None


def _points(archive: Path) -> pd.DataFrame | None:
    with unpacked_archive(archive) as path:
        return tuning_points(load_results(path))


@SECTIONS.register("tolerance")
def tolerance_sections(res: SuiteResults, out_dir: Path) -> list[Section]:
    """The "Step-size tolerance" section: the figure and a table of mean accuracy by lr; [] without tuning."""
    points = _tuning(res, out_dir)
    if points is None or points.empty:
        return []
    tuned = {a: float(o[LR_KEY]) for a, o in res.suite.overrides.items() if LR_KEY in o}
    means = points.groupby(["algorithm", "lr"], sort=True)["final_acc"].agg(["mean", "size"]).reset_index()
    _draw(points, means, tuned, res.settings.baseline, Path(out_dir) / FIGURE)
    rows = [{"estimator": a,
             "accuracy by lr (mean over seeds)": ", ".join(
                 f"{r.lr:.3g}: {r.mean:.3f}" + (" (tuned)" if np.isclose(r.lr, tuned.get(a, np.nan), rtol=1e-3) else "")
                 for r in g.itertuples()),
             "tuned lr": f"{tuned[a]:.4g}" if a in tuned else "—"}
            for a, g in means.groupby("algorithm", sort=True)]
    delays = ", ".join(sorted({f"{float(d):g}" for d in points["delay"].dropna()}))
    text = (f"How large a step each estimator tolerates, from the {len(points)} tuning trials (delay {delays}, "
            "validation split): final accuracy against the learning rate, the mean over seeds joined, each "
            "seed a dot, the lr the table used ringed. An estimator whose accuracy falls off at a smaller lr is "
            "ranked lower by a tuned table whatever staleness costs it (the staleness penalty above).")
    caption = ("Tuning trials: final validation accuracy against train.lr (log scale); line = mean over seeds, "
               "dots = single seeds, ring = the lr the table used.")
    return [Section("Step-size tolerance", [{"text": text}, {"figure": FIGURE, "caption": caption},
                                            {"table": {"columns": list(rows[0]), "rows": rows}}])]


def _draw(points: pd.DataFrame, means: pd.DataFrame, tuned: dict[str, float], baseline: str, path: Path) -> None:
    from matplotlib.figure import Figure

    from harness.report.plotting import DPI, MIN_WIDTH_IN, estimator_style

    names = sorted(points["algorithm"].unique())
    style = estimator_style(names, baseline)
    fig = Figure(figsize=(MIN_WIDTH_IN, 3.6), dpi=DPI)
    ax = fig.add_subplot(1, 1, 1)
    for a in names:
        st, m, p = style[a], means[means["algorithm"] == a], points[points["algorithm"] == a]
        ax.plot(m["lr"], m["mean"], color=st.colour, marker=st.marker, lw=1.3, ms=5, label=a)
        ax.scatter(p["lr"], p["final_acc"], color=st.colour, s=8, alpha=0.5, lw=0)
        if a in tuned:
            at = m.iloc[int(np.argmin(np.abs(np.log(m["lr"].to_numpy()) - np.log(tuned[a]))))]
            ax.scatter([at["lr"]], [at["mean"]], s=160, facecolors="none", edgecolors=[st.colour], lw=1.6, zorder=4)
    ax.set_xscale("log")
    ax.set_xlabel("learning rate (train.lr, log scale)")
    ax.set_ylabel("final validation accuracy")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.09, right=0.8, bottom=0.15, top=0.95)
    fig.savefig(path)
