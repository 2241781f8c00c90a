"""Table columns for the HTML pages: how each value is shown and how it sorts.

A column is a title and a function from a row (dict) to ``(text, sort_key)``. ``sort_key`` is a number
or a string; ``""`` means missing and always sorts last. The template writes the text (escaped) and the
sort key as ``data-sort``; the inline sort script compares numbers numerically.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

Cell = tuple[str, "float | str"]
DASH = "\u2014"


@dataclass(frozen=True)
class Column:
    """A table column: header, value function, and whether it holds numbers (right-aligned)."""

    title: str
    value: Callable[[dict[str, Any]], Cell]
    numeric: bool = True


def _num(v: Any) -> float | None:
    """A finite float, or None for None/NaN/inf/non-numbers."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _formatted(key: str, fmt: Callable[[float], str]) -> Callable[[dict[str, Any]], Cell]:
    """A numeric cell: `fmt(value)` for display, the raw value for sorting, a dash when missing."""
    def value(r: dict[str, Any]) -> Cell:
        f = _num(r.get(key))
        return (DASH, "") if f is None else (fmt(f), f)
    return value


def _fixed(key: str, digits: int = 3) -> Callable[[dict[str, Any]], Cell]:
    return _formatted(key, lambda f: f"{f:.{digits}f}")


def _percent(key: str) -> Callable[[dict[str, Any]], Cell]:
    return _formatted(key, lambda f: f"{100 * f:.0f}%")


def _integer(key: str) -> Callable[[dict[str, Any]], Cell]:
    return _formatted(key, lambda f: f"{f:.0f}")


def _text(key: str) -> Callable[[dict[str, Any]], Cell]:
    def value(r: dict[str, Any]) -> Cell:
        v = r.get(key)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return DASH, ""
        f = None if isinstance(v, bool) else _num(v)
        return (str(v), str(v)) if f is None else (show(v), f)
    return value


LOW_CONFIDENCE_SEEDS = 5  # = stats.MIN_CONFIDENT_SEEDS (kept here so render stays numpy-free)


def _final_ci(r: dict[str, Any]) -> Cell:
    """``0.412 [0.380, 0.440]`` with ``*`` when fewer than 5 seeds, ``(1 seed)`` without an interval."""
    f, lo, hi = _num(r.get("final")), _num(r.get("ci_low")), _num(r.get("ci_high"))
    if f is None:
        return DASH, ""
    seeds = _num(r.get("seeds")) or 0
    if lo is None or hi is None:
        return f"{f:.3f} ({seeds:.0f} seed{'s' if seeds != 1 else ''})", f
    mark = "*" if seeds < LOW_CONFIDENCE_SEEDS else ""
    return f"{f:.3f} [{lo:.3f}, {hi:.3f}]{mark}", f


def _poi(baseline: str) -> Callable[[dict[str, Any]], Cell]:
    """PoI vs the baseline with its bootstrap interval; below 5 seeds on either side the point alone,
    marked ``*`` (``stats.poi_estimate`` says why)."""
    def value(r: dict[str, Any]) -> Cell:
        if r.get("algorithm") == baseline:
            return "baseline", ""
        p, lo, hi = _num(r.get("poi_vs_baseline")), _num(r.get("poi_low")), _num(r.get("poi_high"))
        if p is None:
            return DASH, ""
        if lo is None or hi is None:
            return f"{p:.2f}* (no CI below {LOW_CONFIDENCE_SEEDS} seeds)", p
        return f"{p:.2f} [{lo:.2f}, {hi:.2f}]", p
    return value


def _collapse(r: dict[str, Any]) -> Cell:
    if not r.get("collapsed"):
        return "no", ""
    step = _num(r.get("collapse_step"))
    return f"step {step:.0f} ({r.get('collapse_reason')})", (step if step is not None else "")


def _trial_notes(r: dict[str, Any]) -> Cell:
    shared = []
    if r.get("stands_for"):
        shared.append("stands for " + ", ".join(r["stands_for"]))
    if r.get("ignored"):
        shared.append("ignores " + ", ".join(r["ignored"]))
    text = "; ".join(str(x) for x in (r.get("error"), r.get("notes"), *shared) if x)
    return text, text


def leaderboard_columns(other: list[str], baseline: str, compact: bool = False) -> list[Column]:
    """Leaderboard columns; ``other`` are the varying grid keys shown after the algorithm. The compact
    form (site index) shows the config label instead and drops the secondary statistics."""
    head = [Column("rank", _integer("rank"))]
    if compact:
        head.append(Column("config", _text("config"), numeric=False))
    else:
        head.append(Column("algorithm", _text("algorithm"), numeric=False))
        head += [Column(k, _text(k)) for k in other]
    main = [Column("final acc [95% CI]", _final_ci), Column("statistic", _text("statistic"), numeric=False),
            Column("vs leader", _text("vs_leader"), numeric=False)]
    extra = [Column("best acc (IQM)", _fixed("iqm_best")), Column("AUC acc (IQM)", _fixed("iqm_auc"))]
    tail = [Column("collapse rate", _percent("collapse_rate")),
            Column("median steps to collapse", _integer("median_steps_to_collapse")),
            Column(f"PoI vs {baseline} [95% CI]", _poi(baseline)),
            Column("seeds", _integer("seeds")),
            Column("status", _text("status_counts"), numeric=False)]
    notes = [] if compact else [Column("family", _text("family"), numeric=False),
                                Column("same gradient as", _text("coincides_with"), numeric=False),
                                Column("notes", _text("shared_note"), numeric=False)]
    return head + main + ([] if compact else extra) + tail + notes


def trial_columns(other: list[str]) -> list[Column]:
    """Columns of the per-trial table."""
    return ([Column("trial", _text("trial_id"), numeric=False),
             Column("algorithm", _text("algorithm"), numeric=False), Column("delay", _text("delay"))]
            + [Column(k, _text(k)) for k in other]
            + [Column("seed", _text("seed")), Column("status", _text("status"), numeric=False),
               Column("last step", _integer("last_step")), Column("final acc", _fixed("final_acc")),
               Column("AUC acc", _fixed("auc_acc")),
               Column("best acc", _fixed("best_acc")), Column("collapse", _collapse, numeric=False),
               Column("stale/mean", _fixed("stale_mean", 2)),
               Column("error / notes", _trial_notes, numeric=False)])


def unfinished_columns() -> list[Column]:
    """Columns of the table of trials that did not complete."""
    return [Column("trial", _text("trial_id"), numeric=False),
            Column("status", _text("status"), numeric=False),
            Column("last step", _integer("last_step")), Column("error / notes", _trial_notes, numeric=False)]


def show(value: Any) -> str:
    """A grid value as text: integral floats without '.0', NaN/None as 'n/a'."""
    f = None if isinstance(value, bool) else _num(value)
    if f is None:
        return "n/a" if value is None or isinstance(value, float) else str(value)
    return str(int(f)) if f.is_integer() else str(value)


def cell_rows(df: pd.DataFrame, columns: list[Column]) -> list[dict[str, Any]]:
    """Rows for the table macro: ``{"status": ..., "cells": [{"text", "sort", "num"}, ...]}``."""
    rows = []
    for r in df.to_dict(orient="records"):
        cells = []
        for c in columns:
            text, key = c.value(r)
            cells.append({"text": text, "sort": key, "num": c.numeric})
        rows.append({"status": str(r.get("status", "")), "cells": cells})
    return rows
