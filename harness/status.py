"""`stalebench status SUITE`: the trials of a suite's results directory as a table, grouped by status.

Reads only the result files (results/<suite>/suite.yaml and each trial's status.json, metrics.jsonl,
eval.jsonl, config.yaml); imports no Ray. A trial of the suite file without a directory yet is `pending`.
A `running` trial whose files have not changed for a while may belong to a driver that was killed:
`stalebench run` on the same suite resumes it.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import yaml

from .config import ConfigError
from .tracking import read_jsonl

ORDER = ("running", "failed", "diverged", "completed", "pending")
NOT_TRIALS = {"ray", "tune"}          # Tune's storage and `stalebench tune` trials live beside the trials


def suite_status(results_dir: Path) -> str:
    """A table of the suite's trials (status, step/steps, final eval/acc, last update, error) and counts."""
    results_dir = Path(results_dir)
    expected = _expected_trials(results_dir)          # trial id -> steps, from suite.yaml (may be empty)
    found = sorted(p.name for p in results_dir.iterdir()
                   if p.is_dir() and p.name not in NOT_TRIALS and (p / "status.json").exists()) if results_dir.is_dir() else []
    if not expected and not found:
        raise ConfigError(f"{results_dir}: no suite results here (expected results/<suite>/suite.yaml or trial directories)")
    ids = list(expected) + [t for t in found if t not in expected]
    rows = [_row(results_dir / t, expected.get(t)) for t in ids]
    rows.sort(key=lambda r: ORDER.index(r["status"]) if r["status"] in ORDER else len(ORDER))
    width = max(len("trial"), *(len(r["trial"]) for r in rows))
    lines = [f"suite {results_dir.name}: {results_dir}",
             f"{'trial':<{width}}  {'status':<9}  {'step':>11}  {'eval/acc':>8}  {'updated':>9}  error"]
    for r in rows:
        acc = f"{r['acc']:.3f}" if r["acc"] is not None else "-"
        lines.append(f"{r['trial']:<{width}}  {r['status']:<9}  {r['step']:>11}  {acc:>8}  {r['updated']:>9}  {r['error']}".rstrip())
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    summary = ", ".join(f"{counts[s]} {s}" for s in sorted(counts, key=lambda s: ORDER.index(s) if s in ORDER else 99))
    lines.append(f"{len(rows)} trials: {summary}")
    return "\n".join(lines)


def _expected_trials(results_dir: Path) -> dict[str, int]:
    """Trial id -> train.steps of every trial of results/<suite>/suite.yaml ({} if absent or invalid now)."""
    path = results_dir / "suite.yaml"
    if not path.exists():
        return {}
    from .suite import expand, parse_suite
    try:
        suite = parse_suite(yaml.safe_load(path.read_text()), str(path))
        return {t.trial_id: t.config.train.steps for t in expand(suite)}
    except (ConfigError, yaml.YAMLError):
        return {}


def _row(trial_dir: Path, steps: int | None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if (trial_dir / "status.json").exists():
        try:
            status = json.loads((trial_dir / "status.json").read_text())
        except ValueError:
            status = {}
    if steps is None and (trial_dir / "config.yaml").exists():
        steps = ((yaml.safe_load((trial_dir / "config.yaml").read_text()) or {}).get("train") or {}).get("steps")
    metrics = read_jsonl(trial_dir / "metrics.jsonl")
    step = max(int(status.get("step") or 0), int(metrics[-1]["step"]) if metrics else 0)
    evals = [r for r in read_jsonl(trial_dir / "eval.jsonl") if "eval/acc" in r]
    error = (status.get("error") or "").replace("\n", " ")
    return {"trial": trial_dir.name, "status": status.get("status", "pending"),
            "step": f"{step}/{steps if steps is not None else '?'}",
            "acc": float(evals[-1]["eval/acc"]) if evals else None,
            "updated": _age(trial_dir) if status else "-",
            "error": error if len(error) <= 90 else error[:87] + "..."}


def _age(trial_dir: Path) -> str:
    times = [os.path.getmtime(p) for p in (trial_dir / n for n in ("status.json", "metrics.jsonl")) if p.exists()]
    seconds = max(0, time.time() - max(times)) if times else 0
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"
