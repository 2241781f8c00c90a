"""The stored fixed-policy sweeps of an estimator-lab suite: <results>/<suite>/lab/sweeps.json.

`stalebench run` computes them after the suite's trials (harness/lab/sweeps.py, torch) and writes them
here; the report only reads them (no torch). The file is keyed by the sweeps' inputs, taken from the
suite file of the results directory (suite.yaml), so a report never shows sweeps of another config:

    {"key": <sha256 of the inputs, 16 hex digits>, "inputs": {...}, "data": <run_sweeps' result>}

`read_sweeps` returns the data, or None with the reason in one phrase ("missing", "computed for other
inputs", "unreadable"). The inputs come from the suite schema's typed base config (every default filled
in by the run config's own dataclasses, never re-typed here). Torch-free.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from harness.config.dicts import to_dict
from harness.errors import ConfigError
from harness.config.suite import Suite, read_suite_yaml
from harness.store.trialdir import LAB_DIR, suite_file
from harness.store.safewrite import write_file

SWEEP_FILE = Path(LAB_DIR) / "sweeps.json"
SWEEP_VERSION = 5             # 5: estimators chosen and judged by family (the data holds `families`)


def sweep_inputs(suite: Suite) -> dict[str, Any] | None:
    """The sweeps' inputs from the suite's base config (None when it has no lab section)."""
    base = suite.base_config()
    if base.lab is None:
        return None
    return {"version": SWEEP_VERSION, "lab": to_dict(base.lab), "eps": base.eps, "algorithms": sorted(suite.algorithms),
            "adv_mode": base.train.advantage, "aggregation": base.train.aggregation,
            "batch_groups": base.train.prompts_per_step, "params": {base.algorithm: dict(base.params)}}


def suite_sweep_inputs(results_dir: Path) -> dict[str, Any] | None:
    """sweep_inputs of <results_dir>/suite.yaml; None for a non-lab suite or a missing/invalid file."""
    try:
        return sweep_inputs(read_suite_yaml(suite_file(results_dir)))
    except (ConfigError, OSError):
        return None


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
    write_file(path, json.dumps({"key": sweep_key(inputs), "inputs": inputs, "data": data}))
    return path
