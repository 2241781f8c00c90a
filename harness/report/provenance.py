"""Provenance: where the numbers came from, read from the trials' provenance.json files.

The runner writes ``<trial>/provenance.json`` (stalebench version, git commit and dirty flag, package
versions, python, torch threads, cpu, gpu, host, base model name and sha256, eval-set sha256, config
sha256, start time, and the float path the trial computed on: harness/trial/numerics.py). ``summarize``
lists the distinct values of each field across a suite's trials and warns when the suite mixes what
should be one thing: git commits, dirty trees, package versions, stalebench versions, base models, eval
sets or float paths. A trial without the file counts as "unknown".

``rendering_info`` describes the process that rendered the report (a footnote only: it says nothing
about how the trials were run). Versions come from distribution metadata; nothing heavy is imported.
"""

from __future__ import annotations

import datetime as dt
import platform
from collections import Counter
from dataclasses import dataclass
from typing import Any

from harness.store.provenance import package_versions

UNKNOWN = "unknown"
# Fields shown, in order: (dotted key, label). Dotted keys address nested objects (packages.torch).
FIELDS = (("stalebench", "stalebench"), ("git_commit", "git commit"), ("git_dirty", "dirty tree"),
          ("python", "python"), ("torch_threads", "torch threads"), ("cpu", "cpu"), ("gpu", "gpu"),
          ("host", "host"), ("base_model.name", "base model"), ("base_model.sha256", "base model sha256"),
          ("eval_set_sha256", "eval set sha256"), ("config_sha256", "config sha256"),
          ("numerics.float_path", "float path"), ("numerics.cpu_vendor", "cpu vendor"), ("numerics.mkl", "mkl"))
# Fields that must be one value across a suite (beyond packages.*): mixing them is a warning.
MUST_AGREE = {"stalebench": "stalebench versions", "git_commit": "git commits",
              "base_model.name": "base models", "base_model.sha256": "base models (sha256)",
              "eval_set_sha256": "eval sets (sha256)",
              "numerics.float_path": "float paths", "numerics.cpu_vendor": "CPU vendors"}
PER_TRIAL = ("config_sha256",)  # differs between cells by design: shown as a count
MIXED_SHOWN = 5  # values a "mixes" warning names (most common first); the provenance section lists them all


@dataclass(frozen=True)
class ProvenanceSummary:
    """Distinct values per field (value -> number of trials) and the warnings to show on top."""

    fields: list[tuple[str, list[tuple[str, int]]]]  # (label, [(value, trials), ...] most common first)
    warnings: list[str]
    n_trials: int
    n_missing: int  # trials without a readable provenance.json
    started: tuple[str, str] | None  # earliest and latest started_utc


def _flatten(prov: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in prov.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _text(value: Any) -> str:
    if value is None:
        return UNKNOWN
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def summarize(provenance: dict[str, dict[str, Any] | None]) -> ProvenanceSummary:
    """Summarize ``SuiteResults.provenance`` (trial_id -> provenance.json or None)."""
    flat = [_flatten(p) if p else None for p in provenance.values()]
    known = [f for f in flat if f is not None]
    packages = sorted({k for f in known for k in f if k.startswith("packages.")})
    keys = [(k, label) for k, label in FIELDS] + [(k, k.split(".", 1)[1]) for k in packages]
    fields, warnings = [], []
    for key, label in keys:
        counts = Counter(_text(f.get(key)) if f is not None else UNKNOWN for f in flat)
        values = counts.most_common()
        if key in PER_TRIAL:
            distinct = len([v for v in counts if v != UNKNOWN])
            values = [(f"{distinct} distinct value(s)", len(known))] + (
                [(UNKNOWN, counts[UNKNOWN])] if counts[UNKNOWN] else [])
        fields.append((label, values))
        real = [v for v, _ in counts.most_common() if v != UNKNOWN]
        if len(real) > 1 and (key in MUST_AGREE or key.startswith("packages.")):
            what = MUST_AGREE.get(key, f"{label} versions")
            more = len(real) - MIXED_SHOWN
            warnings.append(f"This suite mixes {len(real)} {what}: "
                            + ", ".join(f"{v} ({counts[v]} trials)" for v in real[:MIXED_SHOWN])
                            + (f", and {more} more (the provenance section lists every one)" if more > 0 else ""))
    dirty = sum(1 for f in known if f.get("git_dirty") is True)
    if dirty:
        warnings.append(f"{dirty} of {len(flat)} trials ran from a dirty git tree (uncommitted changes): "
                        "their code cannot be recovered from the commit alone.")
    paths = [f for f in known if f.get("numerics.float_path") is not None]
    if paths and len(paths) < len(known):
        warnings.append(f"{len(known) - len(paths)} of {len(flat)} trials do not record their float path (run "
                        "before it was recorded): whether their numbers share the others' path is unknown.")
    missing = len(flat) - len(known)
    if known and missing:
        warnings.append(f"{missing} of {len(flat)} trials have no provenance.json (older results): their "
                        "commit, packages, base model and eval set are unknown.")
    starts = sorted(str(f["started_utc"]) for f in known if f.get("started_utc"))
    return ProvenanceSummary(fields, warnings, len(flat), missing, (starts[0], starts[-1]) if starts else None)


def rendering_info(suite_sha256: str) -> dict[str, object]:
    """How this report was rendered (footnote; JSON-serialisable)."""
    return {
        "suite_sha256": suite_sha256,
        "packages": package_versions(("stalebench", "numpy", "pandas", "matplotlib", "seaborn", "scipy")),
        "python": platform.python_version(),
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
    }
