"""The table papers use: rows = estimators, columns = delays, cells = final accuracy [95% CI] with marks,
plus two robustness columns; rendered as HTML rows, Markdown, LaTeX (booktabs) and plain text.

One table per slice (combination of varying grid keys other than algorithm and delay). Cell marks:

* ``*``   fewer than 5 seeds: the interval is low-confidence (mean with a Student-t interval).
* ``(1 seed)`` one seed: no interval.
* ``cK/N``  K of the cell's N finished seeds collapsed (collapse rules in the report).
* ``†``   the value is a shared trial (an on-policy trial standing for several estimators, or a trial
  whose estimator ignores an axis of this slice); the footnote names it.

Robustness columns: *gain retained* = (acc_d - acc_base) / (acc_0 - acc_base) at the largest delay d, with
acc_base the mean step-0 (first) evaluation of the two cells' trials (the base's accuracy): the share of the
on-policy gain that survives the delay (``gain_retained``; a plain acc_d / acc_0 has a floor near
acc_base / acc_0 for an estimator that learns nothing);
*delay AUC* = area under final accuracy vs x = log2(1 + delay), divided by the x span
(``stats.delay_auc``: the accuracy averaged over the delays as the figure draws them; a dash for a row
missing one of the table's delays, whose average would not be over the same delays as the others').
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.config.run import TrainConfig
from harness.report import resolve, stats
from harness.report.render import DASH, show
from harness.report.tables import Analysis, _sort_key
from harness.config.suite import Suite
from harness.store.safewrite import write_file

FILES = {"markdown": "paper_table.md", "latex": "paper_table.tex", "text": "paper_table.txt"}


@dataclass(frozen=True)
class PaperCell:
    """One estimator x delay entry."""

    point: float
    lo: float
    hi: float
    seeds: int
    start: float  # mean step-0 accuracy of the cell's finished trials
    n_collapsed: int
    shared: bool
    best: bool  # highest point estimate in its column

    def marks(self) -> str:
        """Plain-text marks after the number (see module docstring)."""
        out = ""
        if self.seeds == 1:
            out += " (1 seed)"
        elif 1 < self.seeds < stats.MIN_CONFIDENT_SEEDS:
            out += "*"
        if self.shared:
            out += "\u2020"
        if self.n_collapsed:
            out += f" c{self.n_collapsed}/{self.seeds}"
        return out

    def number(self) -> str:
        """``0.412 [0.380, 0.440]``, or the point alone without an interval."""
        if not math.isfinite(self.point):
            return DASH
        if math.isfinite(self.lo) and math.isfinite(self.hi):
            return f"{self.point:.3f} [{self.lo:.3f}, {self.hi:.3f}]"
        return f"{self.point:.3f}"


@dataclass(frozen=True)
class PaperRow:
    algorithm: str
    cells: list[PaperCell | None]  # one per delay, None where the cell was not run
    gain_retained: float
    delay_auc: float


@dataclass(frozen=True)
class PaperTable:
    """One slice's table and the facts its caption states."""

    slice: str  # "" when no other key varies
    delays: list[float]
    rows: list[PaperRow]
    seeds: tuple[int, int]  # (min, max) finished seeds over its cells
    low_confidence: bool  # some cell has an interval from fewer than 5 seeds (or none)
    notes: list[str]  # shared-trial footnotes
    resolved: list[tuple[int, int]]  # per delay: (resolved, tested) estimator pairs (resolve.pair_tests)
    step_sizes: str = ""  # per-estimator train.lr sentence when the suite's overrides set it (step_sizes)
    resolution_floor: str = ""  # set when the seeds cannot resolve any pair (resolve.resolution_floor)
    iqm: bool = False  # some cell prints the suite's statistic, and it is not the mean the pair tests compare
    unranked: str = ""  # why no cell is marked highest (tables.unranked_reason), "" when the highest is bold
    statistic: stats.Statistic = stats.MEAN  # the suite's (report.statistic); not in results.json (record)

    def record(self) -> dict[str, Any]:
        """The table as results.json holds it (every field but the statistic object)."""
        return {k: v for k, v in asdict(self).items() if k != "statistic"}

    def caption(self, suite: str) -> str:
        """Plain-text caption: what is shown, seeds, marks present."""
        lo, hi = self.seeds
        seeds = (f"{hi} seed" + ("s" if hi != 1 else "")) if lo == hi else f"{lo}-{hi} seeds"
        where = f" ({self.slice})" if self.slice else ""
        top = show(self.delays[-1]) if self.delays else DASH
        printed = self.statistic if self.iqm else self.statistic.fallback or self.statistic
        point = stats.table_rule(printed)
        retained = (f"Gain retained = (acc at delay {top} - base) / (acc at delay 0 - base), base = the trials' "
                    "step-0 accuracy; " if self.delays and self.delays[0] == 0 else
                    "Gain retained needs a delay-0 run, which this table does not have (\u2014); ")
        auc = " (one delay: its accuracy)" if len(self.delays) == 1 else ""
        bold = (f"Nothing is marked highest: not ranked, {self.unranked}. " if self.unranked else
                "Bold: highest in its column (not a significance claim). ")
        text = (f"{suite}{where}: final held-out accuracy, {point}, by delay, {seeds} per cell. {retained}"
                f"delay AUC = mean accuracy over log2(1 + delay){auc}. {bold}cK/N: K of N seeds collapsed.")
        tested = sum(n for _, n in self.resolved)
        if tested:
            text += (f" Resolved pairs: K/M of the M estimator pairs at that delay differ (two-sided exact "
                     f"permutation test on the seeds' mean final accuracy, Holm-adjusted over the table's "
                     f"{tested} pairs, family-wise {resolve.ALPHA:.0%})"
                     + (f"; the test compares means, not the {printed.label}s printed." if self.iqm else "."))
            if self.resolution_floor:
                text += " " + self.resolution_floor
        if self.low_confidence:
            text += (f" LOW CONFIDENCE: * marks cells with fewer than {stats.MIN_CONFIDENT_SEEDS} seeds "
                     "(mean with Student-t interval); a single seed has no interval.")
        if self.step_sizes:
            text += " " + self.step_sizes
        if self.notes:
            text += " \u2020 " + " \u2020 ".join(self.notes) + "."
        return text


def step_sizes(suite: Suite, algorithms: list[str]) -> str:
    """A caption sentence naming each of ``algorithms``' train.lr, and where the base's lr still applies, when
    the suite's `overrides:` set train.lr for any of them (a tuned table); else ""."""
    key, base = "train.lr", suite.base.get("train", {}).get("lr", TrainConfig.lr)
    if not any(key in suite.overrides.get(a, {}) for a in algorithms):
        return ""
    scope = f", except in on-policy trials, which keep {base:.4g}" if suite.overrides_scope == "stale" else ""
    each = ", ".join(f"{a} {suite.overrides.get(a, {}).get(key, base):.4g}" for a in algorithms)
    return f"Step sizes (train.lr, the suite's overrides{scope}): {each}."


def paper_tables(a: Analysis, suite: Suite | None = None) -> list[PaperTable]:
    """One PaperTable per slice of ``a.cells``, slices in numeric order, the baseline's row first; with
    ``suite``, each caption states the step sizes its overrides set (step_sizes)."""
    cells = a.cells[a.cells["delay"].notna()]
    out = []
    slice_keys = sorted(cells["slice"].unique(),
                        key=lambda s: [_sort_key(v) for v in cells.loc[cells["slice"] == s, a.other].iloc[0]])
    for s in slice_keys:
        part = cells[cells["slice"] == s]
        delays = sorted(part["delay"].unique(), key=_sort_key)
        best = {d: np.nan if a.unranked else part.loc[part["delay"] == d, "final"].max() for d in delays}
        algos = sorted(part["algorithm"].astype(str).unique(), key=lambda x: (x != a.baseline, x))
        rows = []
        for algo in algos:
            mine = part[part["algorithm"].astype(str) == algo].set_index("delay")
            entries = [_cell(mine.loc[d], best[d]) if d in mine.index else None for d in delays]
            points = [np.nan if c is None else c.point for c in entries]
            kept = gain_retained(entries[0], entries[-1]) if len(entries) > 1 and delays[0] == 0 else np.nan
            auc = stats.delay_auc(np.asarray(delays, float), np.asarray(points)) if all(map(np.isfinite, points)) \
                else np.nan                      # over the table's delays only: a row missing one is not comparable
            rows.append(PaperRow(algo, entries, kept, auc))
        seeds = part["seeds"].to_numpy(dtype=int)
        out.append(PaperTable(str(s), [float(d) for d in delays], rows, (int(seeds.min()), int(seeds.max())),
                              bool((seeds < stats.MIN_CONFIDENT_SEEDS).any()),
                              sorted(set(filter(None, part["shared_note"]))),
                              resolve.resolved_counts(a.pairs, str(s), [float(d) for d in delays]),
                              step_sizes(suite, algos) if suite is not None else "",
                              resolve.resolution_floor(a.pairs, str(s)),
                              a.statistic != stats.MEAN and bool((part["statistic"] == a.statistic.label).any()),
                              a.unranked, a.statistic))
    return out


def gain_retained(on_policy: PaperCell | None, delayed: PaperCell | None) -> float:
    """(acc_d - base) / (acc_0 - base) with base the seed-weighted mean step-0 accuracy of both cells'
    trials; NaN when a cell is missing or there is no gain at delay 0 to retain (acc_0 <= base)."""
    if on_policy is None or delayed is None:
        return float("nan")
    starts = [(c.start, c.seeds) for c in (on_policy, delayed) if np.isfinite(c.start) and c.seeds]
    if not starts:
        return float("nan")
    base = sum(s * n for s, n in starts) / sum(n for _, n in starts)
    gain = on_policy.point - base
    return float((delayed.point - base) / gain) if gain > 0 else float("nan")


def _cell(r: pd.Series, best: float) -> PaperCell:
    point = float(r["final"])
    return PaperCell(point, float(r["ci_low"]), float(r["ci_high"]), int(r["seeds"]), float(r["start_acc"]),
                     int(r["n_collapsed"]), bool(r["shared_note"]), bool(np.isfinite(point) and point == best))


def _robust(row: PaperRow) -> tuple[str, str]:
    retained = DASH if not np.isfinite(row.gain_retained) else f"{100 * row.gain_retained:.0f}%"
    auc = DASH if not np.isfinite(row.delay_auc) else f"{row.delay_auc:.3f}"
    return retained, auc


def header(t: PaperTable) -> list[str]:
    """Column titles: estimator, one per delay, the two robustness columns."""
    return ["estimator", *[f"delay {show(d)}" for d in t.delays],
            f"gain retained @{show(t.delays[-1]) if t.delays else DASH}", "delay AUC"]


def footer(t: PaperTable) -> list[str] | None:
    """The "resolved pairs" row (K/M per delay; a dash where no pair was testable), None when none was."""
    if not any(n for _, n in t.resolved):
        return None
    return ["resolved pairs", *[f"{k}/{n}" if n else DASH for k, n in t.resolved], "", ""]


def text_rows(t: PaperTable) -> list[list[str]]:
    """Body cells as plain text (numbers plus marks)."""
    return [[r.algorithm, *[DASH if c is None else c.number() + c.marks() for c in r.cells], *_robust(r)]
            for r in t.rows]


def to_text(tables: list[PaperTable], suite: str) -> str:
    """Fixed-width plain text for a terminal (what ``stalebench report`` prints at its end)."""
    blocks = []
    for t in tables:
        grid = [header(t), *text_rows(t), *filter(None, [footer(t)])]
        widths = [max(len(row[i]) for row in grid) for i in range(len(grid[0]))]
        line = lambda row: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                                     for i, (c, w) in enumerate(zip(row, widths)))
        rule = "-" * len(line(grid[0]))
        blocks.append("\n".join([t.caption(suite), rule, line(grid[0]), rule,
                                 *[line(r) for r in grid[1:]], rule]))
    return "\n\n".join(blocks) + "\n"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("*", "\\*")


def to_markdown(tables: list[PaperTable], suite: str) -> str:
    """GitHub-flavoured Markdown, one table per slice with its caption below it."""
    blocks = []
    for t in tables:
        head = header(t)
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join([":--"] + ["--:"] * (len(head) - 1)) + "|"]
        for r in t.rows:
            cells = []
            for c in r.cells:
                if c is None:
                    cells.append(DASH)
                    continue
                number = f"**{c.number()}**" if c.best else c.number()
                cells.append(number + _md_escape(c.marks()))
            lines.append("| " + " | ".join([_md_escape(r.algorithm), *cells, *_robust(r)]) + " |")
        if footer(t):
            lines.append("| " + " | ".join(footer(t)) + " |")
        title = f"### {_md_escape(suite)}" + (f" ({_md_escape(t.slice)})" if t.slice else "")
        blocks.append("\n".join([title, "", *lines, "", _md_escape(t.caption(suite))]))
    return "\n\n".join(blocks) + "\n"


LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                 "\u2020": r"\textsuperscript{\dag}", "\u03b5": r"$\varepsilon$", "\u2014": "---"}


def latex_escape(text: str) -> str:
    """Text safe inside a LaTeX tabular (special characters escaped, † and ε as LaTeX)."""
    return "".join(LATEX_SPECIAL.get(ch, ch) for ch in text)


def _latex_cell(c: PaperCell | None) -> str:
    if c is None:
        return "---"
    number = latex_escape(c.number())
    number = rf"\textbf{{{number}}}" if c.best else number
    marks = c.marks()
    collapse = f" c{c.n_collapsed}/{c.seeds}" if c.n_collapsed else ""
    sup = marks.replace(collapse, "").replace(" (1 seed)", "").strip()
    tail = (r"\textsuperscript{" + latex_escape(sup).replace(r"\textsuperscript{\dag}", r"\dag") + "}"
            if sup else "")
    if c.seeds == 1:
        tail += r" {\scriptsize (1 seed)}"
    if collapse:
        tail += rf" {{\scriptsize$\times${c.n_collapsed}/{c.seeds}}}"
    return number + tail


def to_latex(tables: list[PaperTable], suite: str) -> str:
    """One booktabs ``table`` per slice (needs ``\\usepackage{booktabs}``)."""
    blocks = []
    for t in tables:
        head = header(t)
        lines = [r"\begin{table}[t]", r"\centering", r"\small",
                 r"\begin{tabular}{l" + "r" * (len(head) - 1) + "}", r"\toprule",
                 " & ".join(latex_escape(h) for h in head) + r" \\", r"\midrule"]
        for r in t.rows:
            lines.append(" & ".join([latex_escape(r.algorithm), *[_latex_cell(c) for c in r.cells],
                                     *[latex_escape(x) for x in _robust(r)]]) + r" \\")
        if footer(t):
            lines += [r"\midrule", " & ".join(latex_escape(c) for c in footer(t)) + r" \\"]
        caption = t.caption(suite).replace("cK/N: K of N", "xK/N: K of N")
        lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{latex_escape(caption)}}}", r"\end{table}"]
        blocks.append("\n".join(lines))
    return "% generated by stalebench report; needs \\usepackage{booktabs}\n" + "\n\n".join(blocks) + "\n"


def write_exports(tables: list[PaperTable], suite: str, out_dir: Path) -> dict[str, str]:
    """Write paper_table.{md,tex,txt} into ``out_dir``; returns format -> file name."""
    render = {"markdown": to_markdown, "latex": to_latex, "text": to_text}
    for kind, file in FILES.items():
        write_file(out_dir / file, render[kind](tables, suite))
    return dict(FILES)


def closing_table(report: Path) -> str:
    """The plain-text paper table of a built report, for ``stalebench report`` to print at its end.

    ``report``: the report's index.html (what ``build_report`` returns) or its directory.
    """
    report = Path(report)
    folder = report.parent if report.suffix == ".html" else report
    return (folder / FILES["text"]).read_text(encoding="utf-8")
