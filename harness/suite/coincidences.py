"""results/<suite>/coincidences.json: which of a suite's estimators compute the same gradient in its regime.

The one owner of that file. `compute` (torch, at check and run time) asks `algorithms.coincidence` about the
suite's distinct estimator configurations at delay > 0, grouped by regime (updates per batch); `write`
stores the answer beside suite.yaml; `read` (no torch, for the report) returns label -> the other labels it
coincides with. A label is the estimator's name, or "name key=value ..." when the suite runs it in several
configurations (ε, own parameters).

    {"regimes": [{"regime": {"updates_per_batch": 1, "engine_mismatch": false}, "aggregation": "token-mean",
                  "groups": [["decoupled", "is_none"]], "without_gradient": []}]}

`without_gradient` lists the configurations whose gradient is zero on every stale probe (a rejection that drops
every token): they are in no group.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.config.expand import on_policy
from harness.store.trialdir import read_object, write_atomic

FILE = "coincidences.json"


def _label(name: str, eps: float, params: dict[str, Any], varying: dict[str, bool]) -> str:
    parts = [name] + ([f"eps={eps:g}"] if varying.get("eps") else [])
    parts += [f"{k}={v}" for k, v in sorted(params.items()) if varying.get(k)]
    return " ".join(parts)


def compute(trials: list) -> dict[str, Any]:
    """The coincidence record of a suite's expanded trials (harness.config.expand.Trial) at delay > 0."""
    from algorithms.coincidence import Regime, coinciding, without_gradient

    configs: dict[tuple, dict[tuple, tuple]] = {}      # (updates, aggregation) -> key -> (name, eps, params)
    for t in trials:
        c = t.config
        if on_policy(c):                                      # every estimator's gradient is grpo's
            continue
        key = (c.algorithm, float(c.eps), json.dumps(dict(c.params), sort_keys=True, default=str))
        configs.setdefault((c.train.updates_per_batch, c.train.aggregation), {})[key] = (c.algorithm, float(c.eps),
                                                                                         dict(c.params))
    regimes = []
    for (updates, aggregation), specs in sorted(configs.items()):
        per_name: dict[str, list[tuple]] = {}
        for spec in specs.values():
            per_name.setdefault(spec[0], []).append(spec)
        labelled = {}
        for name, variants in per_name.items():
            varying = {"eps": len({v[1] for v in variants}) > 1}
            for k in {k for v in variants for k in v[2]}:
                varying[k] = len({json.dumps(v[2].get(k), default=str) for v in variants}) > 1
            for v in variants:
                labelled[_label(name, v[1], v[2], varying)] = v
        regime = Regime(updates_per_batch=updates)
        groups = coinciding(labelled, regime, aggregation) if len(labelled) > 1 else []
        regimes.append({"regime": regime.describe(), "aggregation": aggregation, "groups": groups,
                        "without_gradient": without_gradient(labelled, regime, aggregation)})
    return {"regimes": regimes}


def write(suite_dir: Path, record: dict[str, Any]) -> None:
    Path(suite_dir).mkdir(parents=True, exist_ok=True)
    write_atomic(Path(suite_dir) / FILE, json.dumps(record, indent=1))


def describe(record: dict[str, Any]) -> list[str]:
    """One line per group of coinciding estimators (what `stalebench check` prints)."""
    lines = []
    for r in record.get("regimes", []):
        where = f"{r['regime']['updates_per_batch']} update(s) per batch, {r['aggregation']}"
        lines += [f"coincide ({where}): " + " = ".join(g) for g in r.get("groups", [])]
        if r.get("without_gradient"):
            lines.append(f"no gradient on the stale probes ({where}; every token rejected): "
                         + ", ".join(r["without_gradient"]))
    return lines


def read(suite_dir: Path) -> dict[str, list[str]]:
    """label -> the other labels it coincides with (in any regime of the suite); {} when the file is absent,
    unreadable or of an unknown shape (older results)."""
    record, _ = read_object(Path(suite_dir) / FILE)
    out: dict[str, list[str]] = {}
    regimes = record.get("regimes") if isinstance(record, dict) else None
    for r in regimes if isinstance(regimes, list) else []:
        for group in (r.get("groups") if isinstance(r, dict) else None) or []:
            if isinstance(group, list) and all(isinstance(x, str) for x in group):
                for label in group:
                    out.setdefault(label, []).extend(x for x in group if x != label and x not in out[label])
    return out
