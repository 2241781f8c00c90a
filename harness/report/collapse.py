"""Collapse detection: explicit, documented rules applied to one trial's curves.

A trial is *collapsed* at the earliest step at which any enabled rule fires:

1. ``accuracy_drop``: held-out accuracy is more than ``drop_points`` below its running best for
   ``patience`` consecutive evaluations; the collapse step is the first evaluation of that streak.
2. ``nonfinite_loss``: ``loss/value`` is NaN or +-inf at some step.
3. ``status_diverged``: the runner marked the trial ``diverged`` (at ``diverged_step``, else at its last
   step).
4. ``entropy``: ``policy/entropy`` lies outside [``entropy_min``, ``entropy_max``] for ``patience``
   consecutive steps (off by default: 0 .. inf); the collapse step is the first step of the streak.
5. ``ratio_max``: ``is/ratio_max`` exceeds ``ratio_max_bound`` at some step (off by default: None).

Rules are set per suite in suite.yaml under ``report: {collapse: {...}}`` (see ``CollapseRules``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CollapseRules:
    """Thresholds of the collapse rules (module docstring). Defaults are the report's standard rules."""

    drop_points: float = 0.2  # accuracy drop below the running best, in accuracy units (0..1)
    patience: int = 3  # consecutive evaluations (accuracy) or steps (entropy) a rule must hold
    entropy_min: float = 0.0  # policy/entropy below this counts as collapse (0 = off)
    entropy_max: float = math.inf  # policy/entropy above this counts as collapse (inf = off)
    ratio_max_bound: float | None = None  # is/ratio_max above this is collapse (None = off)

    def __post_init__(self) -> None:
        if not self.drop_points > 0:
            raise ValueError(f"collapse.drop_points must be > 0, got {self.drop_points!r}")
        if not (isinstance(self.patience, int) and self.patience >= 1):
            raise ValueError(f"collapse.patience must be an integer >= 1, got {self.patience!r}")
        if not self.entropy_min <= self.entropy_max:
            raise ValueError(
                f"collapse.entropy_min ({self.entropy_min}) must be <= entropy_max ({self.entropy_max})"
            )
        if self.ratio_max_bound is not None and not self.ratio_max_bound > 0:
            raise ValueError(f"collapse.ratio_max_bound must be > 0 or null, got {self.ratio_max_bound!r}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> CollapseRules:
        """Build from a suite's ``report.collapse`` mapping; an unknown key raises ValueError."""
        data = dict(data or {})
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(valid))
        if unknown:
            raise ValueError(f"unknown collapse rule key(s) {unknown}; valid keys: {valid}")
        if "entropy_max" in data and data["entropy_max"] is None:
            data["entropy_max"] = math.inf
        for key, value in data.items():
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number and not (key == "ratio_max_bound" and value is None):
                raise ValueError(f"collapse.{key} must be a number, got {value!r}")
        return cls(**data)

    def describe(self) -> list[str]:
        """One plain-text sentence per rule, saying whether it is on and with which threshold."""
        lines = [
            f"accuracy_drop: held-out accuracy more than {self.drop_points:g} below its running best for "
            f"{self.patience} consecutive evaluations (collapse step = first evaluation of the streak).",
            "nonfinite_loss: loss/value is NaN or infinite at some step.",
            "status_diverged: the runner marked the trial diverged (at diverged_step, else its last step).",
        ]
        if self.entropy_min > 0 or math.isfinite(self.entropy_max):
            lines.append(
                f"entropy: policy/entropy outside [{self.entropy_min:g}, {self.entropy_max:g}] for "
                f"{self.patience} consecutive steps (collapse step = first step of the streak)."
            )
        else:
            lines.append("entropy: off (set entropy_min / entropy_max to enable).")
        if self.ratio_max_bound is not None:
            lines.append(f"ratio_max: is/ratio_max above {self.ratio_max_bound:g} at some step.")
        else:
            lines.append("ratio_max: off (set ratio_max_bound to enable).")
        return lines


@dataclass(frozen=True)
class Collapse:
    """Outcome for one trial: whether and when it collapsed, and the rule that fired first."""

    collapsed: bool
    step: int | None
    reason: str  # rule name, "" when not collapsed


def first_streak_start(mask: np.ndarray, patience: int) -> int | None:
    """Index where the first run of at least ``patience`` consecutive True values starts, else None."""
    mask = np.asarray(mask, dtype=bool)
    if mask.size < patience:
        return None
    # Running count of Trues in each window of length `patience`; a full window is a streak.
    windows = np.convolve(mask.astype(np.int64), np.ones(patience, dtype=np.int64), mode="valid")
    hits = np.flatnonzero(windows == patience)
    return int(hits[0]) if hits.size else None


def detect_collapse(
    rules: CollapseRules,
    eval_steps: np.ndarray,
    acc: np.ndarray,
    metric_steps: np.ndarray,
    nonfinite_loss: np.ndarray,
    entropy: np.ndarray,
    ratio_max: np.ndarray,
    status: str,
    diverged_step: int | None = None,
    last_step: int | None = None,
) -> Collapse:
    """Apply ``rules`` to one trial.

    ``eval_steps``/``acc``: the eval curve (E,). ``metric_steps``/``nonfinite_loss``/``entropy``/
    ``ratio_max``: per-step metrics (S,), NaN where a metric was not logged; ``nonfinite_loss`` is True
    where ``loss/value`` was logged as NaN or +-inf. ``status``/``diverged_step``/``last_step`` come
    from status.json.
    """
    candidates: list[tuple[int, str]] = []
    acc = np.asarray(acc, dtype=float)
    if acc.size:
        best = np.fmax.accumulate(acc)  # running best, ignoring NaN evaluations
        i = first_streak_start(acc < best - rules.drop_points, rules.patience)
        if i is not None:
            candidates.append((int(eval_steps[i]), "accuracy_drop"))
    bad = np.flatnonzero(np.asarray(nonfinite_loss, dtype=bool))
    if bad.size:
        candidates.append((int(metric_steps[bad[0]]), "nonfinite_loss"))
    if status == "diverged":
        step = diverged_step if diverged_step is not None else last_step
        candidates.append((int(step) if step is not None else 0, "status_diverged"))
    entropy = np.asarray(entropy, dtype=float)
    outside = (entropy < rules.entropy_min) | (entropy > rules.entropy_max)
    i = first_streak_start(outside, rules.patience)
    if i is not None:
        candidates.append((int(metric_steps[i]), "entropy"))
    if rules.ratio_max_bound is not None:
        over = np.flatnonzero(np.asarray(ratio_max, dtype=float) > rules.ratio_max_bound)
        if over.size:
            candidates.append((int(metric_steps[over[0]]), "ratio_max"))
    if not candidates:
        return Collapse(False, None, "")
    step, reason = min(candidates)
    return Collapse(True, step, reason)


def collapse_rate(collapsed: np.ndarray) -> float:
    """Fraction of trials that collapsed; NaN for no trials."""
    collapsed = np.asarray(collapsed, dtype=bool)
    return float(collapsed.mean()) if collapsed.size else float("nan")


def median_steps_to_collapse(collapse_steps: np.ndarray) -> float:
    """Median collapse step over the trials that collapsed (NaN entries = never); NaN if none did."""
    steps = np.asarray(collapse_steps, dtype=float)
    steps = steps[~np.isnan(steps)]
    return float(np.median(steps)) if steps.size else float("nan")


def survival_curve(collapse_steps: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Fraction of trials not yet collapsed at each step of ``grid`` (G,).

    ``collapse_steps`` (N,) holds each trial's collapse step, NaN for never. A trial that collapses at
    step s counts as collapsed from s on.
    """
    steps = np.asarray(collapse_steps, dtype=float)[:, None]  # (N, 1)
    grid = np.asarray(grid, dtype=float)[None, :]  # (1, G)
    alive = np.isnan(steps) | (steps > grid)  # (N, G)
    return alive.mean(axis=0) if steps.size else np.full(grid.shape[1], np.nan)
