"""The header of a slice report: a suite with ``slice_of:`` (config/suite.py) runs some of another suite's
trials (same ids, perhaps cut to their first steps), so its report says at its top what it is, which
reference to quote instead, and the command that checks its rows against the reference's
(`stalebench reproduce`, harness/reproduce.py); the leaderboard then ranks nothing (tables.ranked)."""
from __future__ import annotations

from typing import Any

import pandas as pd

from harness.config.suite import Suite
from harness.report.render import show
from harness.store.untrusted import display


def slice_header(suite: Suite, trials: pd.DataFrame, keys: list[str]) -> dict[str, Any] | None:
    """What the report's header says about a slice (None for a suite that is not one): the reference it is
    a slice of, its report's link from reports/<slice>/, and the reproduce command with one ``--only`` per
    trial (``keys``: the grid's keys, the trial's cell; then its seed) and ``--steps`` the slice's steps."""
    if not suite.slice_of:
        return None
    specs = []
    for r in trials.to_dict("records"):
        point = [(k, r.get(k)) for k in [*keys, "seed"] if k in r and not isinstance(r.get(k), (list, tuple))]
        specs.append(",".join(f"{k}={display(show(v))}" for k, v in point if v is not None and v == v))
    steps = suite.base.get("train", {}).get("steps")
    only = " ".join(f"--only '{s}'" for s in dict.fromkeys(specs))
    seeds = sorted(set(trials["seed"].dropna().astype(int))) if "seed" in trials else []
    return {"of": suite.slice_of, "href": f"../{suite.slice_of}/index.html", "trials": len(trials),
            "seeds": len(seeds),
            "command": f"stalebench reproduce reports/{suite.slice_of} {only}" + (f" --steps {steps}" if steps else "")}
