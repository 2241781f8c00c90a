"""The stored fixed-policy sweeps of an estimator-lab suite: <results>/<suite>/lab/sweeps.json.

`stalebench run` computes them after the suite's trials (harness/lab/sweeps.py, torch) and writes them
here; the report only reads them (no torch). The file is keyed by the sweeps' inputs, taken from the
suite file of the results directory (suite.yaml), so a report never shows sweeps of another config:

    {"key": <sha256 of the inputs, 16 hex digits>, "inputs": {...}, "data": <run_sweeps' result>}

`read_sweeps` returns the data, or None with the reason in one phrase ("missing", "computed for other
inputs", "unreadable"). Stdlib and yaml only.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

SWEEP_FILE = Path("lab") / "sweeps.json"
SWEEP_VERSION = 3


def sweep_inputs(suite: dict[str, Any]) -> dict[str, Any] | None:
    """The sweeps' inputs from suite.yaml (None when the base config has no lab section)."""
    base = suite.get("base") or {}
    if not isinstance(base, dict) or base.get("lab") is None:
        return None
    train = base.get("train") or {}
    grid = suite.get("grid") or {}
    algorithms = grid.get("algorithm") or [base.get("algorithm", "grpo")]
    return {"version": SWEEP_VERSION, "lab": base.get("lab") or {}, "eps": float(base.get("eps", 0.2)),
            "algorithms": sorted(map(str, algorithms)), "adv_mode": str(train.get("advantage", "std")),
            "aggregation": str(train.get("aggregation", "token-mean")),
            "batch_groups": train.get("prompts_per_step"),          # None: the run config's default
            "params": {str(base.get("algorithm", "grpo")): dict(base.get("params") or {})}}


def suite_sweep_inputs(results_dir: Path) -> dict[str, Any] | None:
    """sweep_inputs of <results_dir>/suite.yaml; None for a non-lab suite or a missing/unreadable file."""
    try:
        suite = yaml.safe_load((Path(results_dir) / "suite.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    return sweep_inputs(suite) if isinstance(suite, dict) else None


def sweep_key(inputs: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read_sweeps(results_dir: Path, inputs: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """(data, None) when the stored sweeps match `inputs`; (None, why) otherwise."""
    try:
        stored = json.loads((Path(results_dir) / SWEEP_FILE).read_text())
    except FileNotFoundError:
        return None, "missing"
    except (OSError, ValueError):
        return None, "unreadable"
    if not isinstance(stored, dict) or not isinstance(stored.get("data"), dict):
        return None, "unreadable"
    if stored.get("key") != sweep_key(inputs):
        return None, "computed for other inputs"
    return stored["data"], None


def write_sweeps(results_dir: Path, inputs: dict[str, Any], data: dict[str, Any]) -> Path:
    path = Path(results_dir) / SWEEP_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"key": sweep_key(inputs), "inputs": inputs, "data": data}))
    tmp.replace(path)
    return path
