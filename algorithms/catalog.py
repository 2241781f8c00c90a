"""The text of `stalebench estimators`: every registered estimator with its family, source and parameters, or
(`--from FRAMEWORK`) a framework's options mapped to estimators (algorithms/framework_map.py)."""
from __future__ import annotations

import json

from . import framework_map
from .registry import describe, loss_names


def listing(as_json: bool = False, framework: str | None = None) -> str:
    if framework:
        return framework_map.describe(framework)
    blocks = []
    for name in loss_names():
        d = describe(name)
        if as_json:
            blocks.append(json.dumps(d, default=str))
            continue
        params = ", ".join(f"{k}={v}" for k, v in d["params"].items()) or "-"
        blocks.append(f"{name}\n  family: {d['trust_region']} / {d['correction']} / reads {d['reads']}"
                      f"{'' if d['uses_eps'] else ' (eps unused)'}\n  source: {d['source']}\n  params: {params}")
    return "\n".join(blocks)
