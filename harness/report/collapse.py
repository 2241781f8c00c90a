"""Collapse detection: explicit, documented rules applied to one trial's curves.

A trial is *collapsed* at the earliest step at which any enabled rule fires. The accuracy rules compare
each evaluation with the run's own start (its first evaluation) and its running best:

1. ``below_start``: accuracy below the start by more than ``start_margin``.
2. ``gain_lost``: accuracy has lost more than ``gain_lost_frac`` of the gain made so far (running best
   minus start), once that gain is at least ``min_gain`` (smaller gains are noise).
3. ``accuracy_drop``: accuracy more than ``drop_points`` below the running best (absolute).

An accuracy rule fires when its condition holds for ``patience`` consecutive evaluations, or for the
last ``end_patience`` (or more) evaluations of the run: a collapse at the end of the run counts even
when too few evaluations remain for a full streak. The collapse step is the first evaluation of the
streak (reason suffixed ``@end`` when only the end-of-run streak fired).

4. ``nonfinite_loss``: ``loss/value`` is NaN or +-inf at some step.
5. ``status_diverged``: the runner marked the trial ``diverged`` (at ``diverged_step``, else at its last
   step).
6. ``entropy``: ``policy/entropy`` lies outside [``entropy_min``, ``entropy_max``] for ``patience``
   consecutive steps (off by default: 0 .. inf); the collapse step is the first step of the streak.
7. ``ratio_max``: ``is/ratio_max`` exceeds ``ratio_max_bound`` at some step (off by default: None).

Rules are set per suite in suite.yaml under ``report: {collapse: {...}}`` (see ``CollapseRules``);
docs/report.md explains the defaults.
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

    start_margin: float = 0.05  # below_start: accuracy this far below the first evaluation (0..1 units)
    gain_lost_frac: float = 0.5  # gain_lost: fraction of (running best - start) lost
    min_gain: float = 0.1  # gain_lost applies once running best - start reaches this
    drop_points: float = 0.2  # accuracy_drop: drop below the running best, in accuracy units (0..1)
    patience: int = 3  # consecutive evaluations (accuracy) or steps (entropy) a rule must hold
    end_patience: int = 2  # ... or this many evaluations at the end of the run (accuracy rules)
    entropy_min: float = 0.0  # policy/entropy below this counts as collapse (0 = off)
    entropy_max: float = math.inf  # policy/entropy above this counts as collapse (inf = off)
    ratio_max_bound: float | None = None  # is/ratio_max above this is collapse (None = off)

    def __post_init__(self) -> None:
        for name in ("drop_points", "min_gain"):
            if not getattr(self, name) > 0:
                raise ValueError(f"collapse.{name} must be > 0, got {getattr(self, name)!r}")
        if not self.start_margin >= 0:
            raise ValueError(f"collapse.start_margin must be >= 0, got {self.start_margin!r}")
        if not 0 < self.gain_lost_frac <= 1:
            raise ValueError(f"collapse.gain_lost_frac must be in (0, 1], got {self.gain_lost_frac!r}")
        for name in ("patience", "end_patience"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"collapse.{name} must be an integer >= 1, got {value!r}")
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
        streak = (f"for {self.patience} consecutive evaluations, or for the last {self.end_patience} or "
                  f"more evaluations of the run (collapse step = first evaluation of the streak)")
        lines = [
            f"below_start: held-out accuracy more than {self.start_margin:g} below the run's first "
            f"evaluation, {streak}.",
            f"gain_lost: held-out accuracy has lost more than {self.gain_lost_frac:.0%} of its gain (running "
            f"best minus first evaluation, once that gain is at least {self.min_gain:g}), {streak}.",
            f"accuracy_drop: held-out accuracy more than {self.drop_points:g} below its running best, "
            f"{streak}.",
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


def tail_streak_start(mask: np.ndarray, min_length: int) -> int | None:
    """Start of the run of True values that reaches the end of ``mask``, if at least ``min_length`` long."""
    mask = np.asarray(mask, dtype=bool)
    false = np.flatnonzero(~mask)
    start = int(false[-1]) + 1 if false.size else 0
    return start if mask.size - start >= min_length and start < mask.size else None


def accuracy_conditions(rules: CollapseRules, acc: np.ndarray) -> dict[str, np.ndarray]:
    """Per evaluation (E,), whether each accuracy rule's condition holds (NaN evaluations: False)."""
    acc = np.asarray(acc, dtype=float)
    start = acc[0]
    best = np.fmax.accumulate(acc)  # running best, ignoring NaN evaluations
    gain = best - start
    with np.errstate(invalid="ignore"):
        return {
            "below_start": acc < start - rules.start_margin,
            "gain_lost": (gain >= rules.min_gain) & (acc < best - rules.gain_lost_frac * gain),
            "accuracy_drop": acc < best - rules.drop_points,
        }


def _accuracy_candidates(rules: CollapseRules, eval_steps: np.ndarray, acc: np.ndarray
                         ) -> list[tuple[int, str]]:
    """(collapse step, reason) of each accuracy rule that fires: a ``patience`` streak anywhere or an
    ``end_patience`` streak that lasts to the last evaluation (reason suffixed ``@end``)."""
    out = []
    if acc.size == 0 or np.isnan(acc[0]):
        return out
    for name, mask in accuracy_conditions(rules, acc).items():
        i = first_streak_start(mask, rules.patience)
        if i is not None:
            out.append((int(eval_steps[i]), name))
            continue
        i = tail_streak_start(mask, rules.end_patience)
        if i is not None:
            out.append((int(eval_steps[i]), f"{name}@end"))
    return out


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
    candidates = _accuracy_candidates(rules, np.asarray(eval_steps), np.asarray(acc, dtype=float))
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
    step, reason = min(candidates, key=lambda c: c[0])  # earliest; ties keep the rule order above
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
