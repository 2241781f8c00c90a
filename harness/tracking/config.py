"""The `tracking:` section of a suite file: which mirrors a suite's trials write to besides their files.

MLflow is always on (the store is MLFLOW_TRACKING_URI or results/mlflow.db); Weights & Biases is
optional and off unless `tracking.wandb` is given:

    tracking:
      wandb: {project: stalebench, mode: offline}     # offline: results/wandb/, upload with `wandb sync`

Tracking is not part of what a trial *is*: it lives beside `base`, so turning a mirror on or off changes
no trial's config, id or hash.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigError

WANDB_MODES = ("offline", "online")
_WANDB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class WandbConfig:
    project: str = "stalebench"            # the W&B project (letters, digits, '_', '-', '.')
    entity: str | None = None              # team or user; None: the API key's default entity
    mode: str = "offline"                  # offline: run files under <results>/wandb/, no network |
                                           # online: stream to the W&B server (needs WANDB_API_KEY or `wandb login`)

    def validate(self, key: str) -> None:
        if self.mode not in WANDB_MODES:
            raise ConfigError(f"{key}.mode: {self.mode!r} is not valid; choose one of {', '.join(WANDB_MODES)}")
        for name in ("project", "entity"):
            value = getattr(self, name)
            if value is not None and (len(value) > 128 or not _WANDB_NAME.match(value)):
                raise ConfigError(f"{key}.{name}: {value[:60]!r} is not a valid W&B name (letters, digits, "
                                  f"'_', '-', '.'; at most 128 characters)")


@dataclass(frozen=True)
class TrackingConfig:
    wandb: WandbConfig | None = None       # also mirror each trial to a W&B run (extra `wandb`)

    def validate(self, key: str) -> None:
        if self.wandb is not None:
            self.wandb.validate(f"{key}.wandb")
