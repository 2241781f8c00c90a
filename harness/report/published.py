"""A report's published numbers (its results.json) against what its raw trials give, value by value: what
`stalebench reproduce` checks before any rerun, so that a results.json edited after rendering is caught.

Three tables are checked: ``trials`` (each trial's ``final_acc``; a trial listed twice is refused), and
``cells`` and ``leaderboard`` row by row, every number the report computes (a key the published row has
and the current report computes; a number published where the raw trials give none, or the other way,
differs). Numbers agree within 1e-12 (JSON's round trip of a float is exact; this allows nothing else).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.store.untrusted import short

TOLERANCE = 1e-12


def _same(published: Any, raw: Any) -> bool:
    """A published value equals the raw trials' (None stands for NaN, as results.json writes it)."""
    if isinstance(published, bool) or isinstance(raw, bool):
        return type(published) is type(raw) and published == raw
    if raw is None or (isinstance(raw, float) and math.isnan(raw)):
        return published is None
    if isinstance(raw, (int, float)):
        return isinstance(published, (int, float)) and abs(published - raw) <= TOLERANCE
    return True                                   # text: the rendering's, not a number to check


def _table(name: str, published: Any, raw: list[Mapping[str, Any]]) -> list[str]:
    if not isinstance(published, list) or not all(isinstance(r, Mapping) for r in published):
        return [f"{name}: not a list of records"]
    if len(published) != len(raw):
        return [f"{name}: {len(published)} rows published, {len(raw)} from the raw trials"]
    out = []
    for i, (p, r) in enumerate(zip(published, raw), start=1):
        label = f"{name} row {i} ({r.get('algorithm')}, delay {r.get('delay')})"
        for key in sorted(set(p) & set(r), key=str):
            if isinstance(r[key], (int, float)) and not _same(p[key], r[key]):
                out.append(f"{label}: {key} {short(p[key], 30)} published, {short(r[key], 30)} from the raw trials")
    return out


def differences(bundle: Any, results_dir: Path) -> tuple[list[str], int]:
    """(the published values that are not the raw trials', one line each; the number of trials) for the
    results.json ``bundle`` (as parsed) and the raw trials in ``results_dir``. ValueError (one line) for a
    bundle that is not a report's: no list of trial records, or a trial listed twice."""
    from harness.report.html import records
    from harness.report.load import load_results
    from harness.report.tables import analyse

    trials = bundle.get("trials") if isinstance(bundle, Mapping) else None
    if not isinstance(trials, list) or not all(isinstance(t, Mapping) for t in trials):
        raise ValueError("no list of trial records under 'trials'")
    ids = [str(t.get("trial_id")) for t in trials]
    twice = sorted({i for i in ids if ids.count(i) > 1}) if len(set(ids)) != len(ids) else []
    if twice:
        raise ValueError(f"trial {short(twice[0], 60)[1:-1]} is listed twice under 'trials'; a report lists each "
                         f"trial once")
    a = analyse(load_results(results_dir))
    raw = dict(zip(a.cell_trials.drop_duplicates("trial_id")["trial_id"],
                   a.cell_trials.drop_duplicates("trial_id")["final_acc"].astype(float)))
    shown = {str(t.get("trial_id")): t.get("final_acc") for t in trials}
    out = []
    for tid in sorted(set(raw) | set(shown)):
        p, r = shown.get(tid, "absent"), raw.get(tid, "absent")
        if p == "absent" or r == "absent" or not _same(p, r):
            out.append(f"trial {short(tid, 60)[1:-1]}: final_acc {short(p, 30)} published, {short(r, 30)} from "
                       f"the raw trials")
    for name, frame in (("cells", a.cells), ("leaderboard", a.board)):
        if name in bundle:
            out += _table(name, bundle[name], records(frame))
    return out, len(raw)
