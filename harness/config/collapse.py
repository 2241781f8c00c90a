"""The collapse rules a suite sets under `report: {collapse: {...}}`: their thresholds, checked when the
suite file is read. The rules themselves (what each threshold means, and the detection applied to a
trial's curves) are harness/report/collapse.py's; docs/report.md explains the defaults."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


REPLACED_KEYS = ("start_margin", "min_gain", "drop_points", "end_patience")  # the fixed-margin rules before


@dataclass(frozen=True)
class CollapseRules:
    """Thresholds of the collapse rules (module docstring). Defaults are the report's standard rules."""

    k_se: float = 3.0  # below_start / gain_lost: how many standard errors of the evaluation count
    gain_lost_frac: float = 0.5  # gain_lost: fraction of the gain (best - start) given back
    patience: int = 3  # entropy: consecutive steps the rule must hold
    entropy_min: float = 0.0  # policy/entropy below this counts as collapse (0 = off)
    entropy_max: float = math.inf  # policy/entropy above this counts as collapse (inf = off)
    ratio_max_bound: float | None = None  # is/ratio_max above this is collapse (None = off)

    def __post_init__(self) -> None:
        if not self.k_se > 0:
            raise ValueError(f"collapse.k_se must be > 0, got {self.k_se!r}")
        if not 0 < self.gain_lost_frac <= 1:
            raise ValueError(f"collapse.gain_lost_frac must be in (0, 1], got {self.gain_lost_frac!r}")
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
            old = sorted(set(unknown) & set(REPLACED_KEYS))
            why = (f" ({', '.join(old)}: the fixed-margin accuracy rules were replaced by rules in standard "
                   "errors of the evaluation, set by k_se; docs/report.md)") if old else ""
            raise ValueError(f"unknown collapse rule key(s) {unknown}; valid keys: {valid}{why}")
        if "entropy_max" in data and data["entropy_max"] is None:
            data["entropy_max"] = math.inf
        for key, value in data.items():
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number and not (key == "ratio_max_bound" and value is None):
                raise ValueError(f"collapse.{key} must be a number, got {value!r}")
        return cls(**data)

    def describe(self) -> list[str]:
        """One plain-text sentence per rule, saying whether it is on and with which threshold."""
        se = "SE = the binomial standard error of the difference of two evaluations of n problems"
        lines = [
            f"below_start: the run's last held-out evaluation is more than {self.k_se:g} SE below its first "
            f"({se}: sqrt(a(1-a)/n + b(1-b)/n)); collapse step = first evaluation of the final stretch below.",
            f"gain_lost: the run's best evaluation exceeded its first by more than {self.k_se:g} SE and its last "
            f"evaluation gave back more than {self.gain_lost_frac:.0%} of that gain, and more than {self.k_se:g} SE; "
            "collapse step = first evaluation of the final stretch that had.",
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
