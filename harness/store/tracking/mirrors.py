"""The `tracking:` section of a suite file: which mirrors a suite's trials write to besides their files.

MLflow is always on (the store is MLFLOW_TRACKING_URI or results/mlflow.db); Weights & Biases is
optional and off unless `tracking.wandb` is given:

    tracking:
      wandb: {project: stalebench, mode: offline}     # offline: results/wandb/, upload with `wandb sync`

Tracking is not part of what a trial *is*: it lives beside `base`, so turning a mirror on or off changes
no trial's config, id or hash.

This module also builds the mirrors from the section (`check_mirrors`, `suite_mirrors`): each mirror's
config says whether it can work here (`check`), what it is (`describe`) and which target its trials
write to (`target`), so a new mirror is its sink module and its config class with a field here.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from harness.registry import MIRRORS


@dataclass(frozen=True)
class TrackingConfig:
    """The section: the config of each mirror it turns on, by its name in the MIRRORS registry (a mirror's
    config class registers itself there: wandb_sink.WandbConfig; MLflow is always on and no entry)."""
    entries: tuple[tuple[str, Any], ...] = ()

    def __getattr__(self, name: str) -> Any:
        """`tracking.wandb`: the config of the mirror `name`, None when the section does not turn it on."""
        if name.startswith("_") or name not in MIRRORS:
            raise AttributeError(name)
        return dict(self.entries).get(name)

    @staticmethod
    def parse(data: Mapping[str, Any], key: str, section: Any) -> TrackingConfig:
        """From the section's mapping; `section(cls, value, key)` builds one mirror's config (the strict
        loader of harness/config)."""
        entries = []
        for name, value in data.items():
            if name not in MIRRORS:
                from harness.errors import ConfigError
                raise ConfigError(f"{key}.{name}: unknown key; valid keys: {', '.join(sorted(MIRRORS.names()))}")
            entries.append((name, section(MIRRORS.get(name), value, f"{key}.{name}")))
        return TrackingConfig(tuple(entries))

    def validate(self, key: str) -> None:
        for name, cfg in self.entries:
            cfg.validate(f"{key}.{name}")

    def mirrors(self) -> list[tuple[str, Any]]:
        """(key, config) of each mirror the section turns on, besides MLflow."""
        return [(f"tracking.{name}", cfg) for name, cfg in self.entries]


def check_mirrors(cfg: TrackingConfig) -> None:
    """Stop with one line when a mirror the suite asks for cannot work here (before Ray starts)."""
    for key, mirror in cfg.mirrors():
        mirror.check(key)


def describe_mirrors(cfg: TrackingConfig) -> str:
    return " and ".join(["MLflow", *(mirror.describe() for _, mirror in cfg.mirrors())])


def suite_mirrors(cfg: TrackingConfig, mlflow: Any, suite_name: str, results_root: Path) -> Any:
    """Where a suite's trials mirror themselves: their MLflow child runs (`mlflow`, an MlflowTarget) and
    every mirror the section turns on (W&B: offline runs under <results>/wandb/)."""
    from harness.store.tracking.sinks import Mirrors
    return Mirrors((mlflow, *(mirror.target(suite_name, results_root) for _, mirror in cfg.mirrors())))
