"""The suite file's `tune:` section (TuneSpec), read by `stalebench tune` (harness/suite/runner/search.py) and
its grid rules (harness/suite/tuning.py); parsed by harness/config/suite.py, whose Suite its methods take (typed Any: suite.py imports this module).
Torch-free."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from harness.config.run import RunConfig
from harness.errors import ConfigError
from harness.store.untrusted import short

TUNE_METHODS = ("tpe", "grid")               # tune.method
TUNE_SPLITS = ("auto", "validation", "test")  # tune.split
MAX_TUNE_POINTS = 100                         # tune.points: more is a typo, not a grid anyone runs


@dataclass(frozen=True)
class TuneSpec:
    """The `tune:` section (read by `stalebench tune`, runner/search.py)."""
    param: str = "train.lr"                # a float run-config setting, searched log-uniformly
    low: float = 0.0                       # the range [low, high], 0 < low < high (required)
    high: float = 0.0
    trials_per_algorithm: int = 8          # the same budget for every estimator
    metric: str = "eval/acc"               # objective: this metric in the last row of the trial's eval.jsonl
    mode: str = "max"                      # max | min
    sampler_seed: int = 0                  # Optuna TPE sampler seed (every estimator gets the same one)
    delay: int | None = None               # the delay tuned at (default: the grid's largest). Not 0 with one
                                           # update per batch: there every estimator's gradient equals grpo's
    seed: int | None = None                # the tuning seed (default: 1000 + the suite's largest seed); never one
                                           # of the suite's seeds, so a tuned value is never scored on a reported run
    seeds: tuple[int, ...] | None = None   # several tuning seeds (default: [seed]); a value's objective is the mean
                                           # over them; none may be a reported seed
    method: str = "tpe"                    # tpe: Optuna proposes trials_per_algorithm values | grid: `points` values
    points: int = 6                        # grid: log-spaced from low to high inclusive, 4 significant digits
    max_extend: int = 2                    # grid: points added beyond an edge where the best value lies, at most
    max_refine: int = 0                    # grid: midpoints added where the objective falls off a cliff beside the
    cliff: float = 0.1                     #   best value (by more than `cliff`), at most (benchmark v4)
    split: str = "auto"                    # the split tuning trials evaluate on: auto (validation where the task has
                                           # one, else test) | validation | test

    def validate(self, base: RunConfig, seeds: list[int]) -> None:
        if not 0 < self.low < self.high:
            raise ConfigError(f"tune.low, tune.high: need 0 < low < high (a log-uniform range); got {self.low}, {self.high}")
        if self.trials_per_algorithm < 1:
            raise ConfigError(f"tune.trials_per_algorithm: must be >= 1; got {self.trials_per_algorithm}")
        if self.mode not in ("max", "min"):
            raise ConfigError(f"tune.mode: {self.mode!r} is not valid; choose one of max, min")
        if not self.metric:
            raise ConfigError("tune.metric: must name an eval metric, e.g. eval/acc")
        value: Any = base
        for part in self.param.split("."):
            if not hasattr(value, part.replace("async", "async_")):
                raise ConfigError(f"tune.param: {self.param!r} is not a run-config key (e.g. train.lr)")
            value = getattr(value, part.replace("async", "async_"))
        if not isinstance(value, float):
            raise ConfigError(f"tune.param: {self.param!r} must be a float setting (e.g. train.lr); got {value!r}")
        if self.delay is not None and self.delay < 0:
            raise ConfigError(f"tune.delay: must be >= 0; got {self.delay}")
        for name, value in (("sampler_seed", self.sampler_seed), ("seed", self.seed), *(
                ("seeds", s) for s in self.seeds or ())):
            if value is not None and value < 0:               # numpy's and Optuna's generators take no negative seed
                raise ConfigError(f"tune.{name}: must be >= 0; got {value}")
        if self.seed is not None and self.seed in seeds:
            raise ConfigError(f"tune.seed: {self.seed} is one of the suite's reported seeds {seeds}; tune on a "
                              f"seed the suite does not report (default: {1000 + max(seeds)})")
        self._validate_protocol(seeds)

    def _validate_protocol(self, seeds: list[int]) -> None:
        """The grid, the tuning seeds and the split (the protocol of benchmark v3)."""
        for key, value, valid in (("method", self.method, TUNE_METHODS), ("split", self.split, TUNE_SPLITS)):
            if value not in valid:
                raise ConfigError(f"tune.{key}: {short(value)} is not valid; choose one of {', '.join(valid)}")
        if self.seeds is not None:
            if self.seed is not None:
                raise ConfigError("tune.seed, tune.seeds: set one (tune.seeds lists every tuning seed)")
            if not self.seeds or len(set(self.seeds)) != len(self.seeds):
                raise ConfigError(f"tune.seeds: expected a non-empty list of distinct integers; got {list(self.seeds)}")
            reported = sorted(set(self.seeds) & set(seeds))
            if reported:
                raise ConfigError(f"tune.seeds: {reported[0]} is one of the suite's reported seeds {seeds}; tune on "
                                  f"seeds the suite does not report")
        if not 2 <= self.points <= MAX_TUNE_POINTS:
            raise ConfigError(f"tune.points: a grid needs 2 to {MAX_TUNE_POINTS} points (low and high included); "
                              f"got {self.points}")
        if self.max_refine < 0 or not self.cliff > 0:
            raise ConfigError(f"tune.max_refine, tune.cliff: need max_refine >= 0 and cliff > 0; got "
                              f"{self.max_refine}, {self.cliff}")
        if self.max_extend < 0:
            raise ConfigError(f"tune.max_extend: must be >= 0 (points added beyond an edge); got {self.max_extend}")
        values = self.grid_values() if self.method == "grid" else []
        if len(set(values)) != len(values):
            raise ConfigError(f"tune.points: {self.points} points in [{self.low:g}, {self.high:g}] repeat at 4 "
                              f"significant digits; use fewer points or a wider range")

    def untuned(self, suite: Any) -> list[str]:
        """The suite's estimators whose `overrides:` set no value of tune.param (none where the grid varies it):
        their trials would run at the base's value, not a tuned one."""
        if self.param in suite.grid:
            return []
        return [a for a in suite.algorithms if self.param not in suite.overrides.get(a, {})]

    def tune_seeds(self, suite: Any) -> list[int]:
        """The tuning seeds: `tune.seeds`, else the one `tune_seed`."""
        return list(self.seeds) if self.seeds is not None else [self.tune_seed(suite)]

    def grid_values(self, below: int = 0, above: int = 0) -> list[float]:
        """The grid: `points` values log-spaced from low to high inclusive, with `below` and `above` more at
        the same log step beyond each edge, each rounded to 4 significant digits (readable trial ids and YAML).
        Point k is low * r**k with r = (high / low) ** (1 / (points - 1)), k = -below .. points - 1 + above."""
        step = math.log(self.high / self.low) / (self.points - 1)
        return [float(f"{self.low * math.exp(k * step):.4g}") for k in range(-below, self.points + above)]

    def tune_seed(self, suite: Any) -> int:
        return self.seed if self.seed is not None else 1000 + max(suite.seeds)

    def tune_delay(self, suite: Any) -> int:
        """The delay the tuning trials run at: `tune.delay`, else the suite's largest integer delay."""
        if self.delay is not None:
            return self.delay
        delays = suite.grid.get("delay", [suite.base.get("delay", 0)])
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in delays):
            raise ConfigError("tune.delay: the suite's delays include a delay law or trace; set tune.delay to the "
                              "integer delay to tune at")
        return max([0, *delays])
