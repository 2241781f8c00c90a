"""A trial's Weights & Biases mirror (optional, extra `wandb`; `wandb` is imported only here, lazily):
its config (`tracking.wandb`), target and sink.

One W&B run per trial, in the suite's group, named by its trial id, with the same content as its MLflow
run: the flat resolved config as the run config, provenance tags (stalebench.git_commit, ...) merged
into the config, every metrics and evaluation row at its step, the summary metrics of a finished trial
in the run summary, the final status in the summary (stalebench.status, stalebench.error) and as a run
tag, and the record files saved with the run.

The run id is a function of the suite, the trial id and its config, so a resumed trial continues its
run (online: W&B appends; rows before the run's next step are skipped, as MLflow skips steps it holds)
and a trial rerun after a config change gets a new one. Offline, each process writes its own run
directory under <results>/wandb/; `wandb sync <dir>` uploads it later.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from harness.errors import ConfigError
from harness.registry import MIRRORS
from harness.store import trialdir

INSTALL = "pip install 'stalebench[wandb]'"
WANDB_MODES = ("offline", "online")
_WANDB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@MIRRORS.register("wandb")
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

    def check(self, key: str) -> None:
        require_wandb(self, key)

    def describe(self) -> str:
        return f"W&B (project {self.project}, mode {self.mode})"

    def target(self, suite_name: str, results_root: Path) -> WandbTarget:
        return WandbTarget.of(self, suite_name, results_root)


def require_wandb(cfg: WandbConfig, key: str = "tracking.wandb") -> None:
    """One line (ConfigError) when the suite asks for W&B and it cannot work: the package is missing, or
    online mode has no API key (a worker cannot answer a login prompt)."""
    if importlib.util.find_spec("wandb") is None:
        raise ConfigError(f"{key}: the `wandb` package is not installed; {INSTALL}, or remove {key} from the suite")
    if cfg.mode == "online" and not (os.environ.get("WANDB_API_KEY") or _netrc_has_wandb()):
        raise ConfigError(f"{key}.mode online: no W&B API key (set WANDB_API_KEY or run `wandb login`), or "
                          f"use mode: offline and `wandb sync` later")


def _netrc_has_wandb() -> bool:
    import netrc

    try:
        hosts = netrc.netrc(os.environ.get("NETRC")).hosts
    except (OSError, netrc.NetrcParseError):
        return False
    return any("wandb" in host for host in hosts)


def run_id(group: str, trial_id: str, params: Mapping[str, Any]) -> str:
    """A W&B run id (letters, digits, '-', '_'; at most 64 characters) for this trial and config."""
    digest = hashlib.sha256(json.dumps([group, trial_id, dict(params)], sort_keys=True, default=str).encode())
    return f"{re.sub(r'[^A-Za-z0-9_-]+', '_', trial_id)[:48]}-{digest.hexdigest()[:12]}"


@dataclass(frozen=True)
class WandbTarget:
    """Where a suite's trials mirror themselves in W&B (picklable, sent to Ray workers)."""
    project: str
    entity: str | None
    mode: str
    group: str                             # the suite name
    dir: str                               # the results root: runs go to <dir>/wandb/

    @classmethod
    def of(cls, cfg: WandbConfig, suite_name: str, results_root: Path) -> "WandbTarget":
        return cls(cfg.project, cfg.entity, cfg.mode, suite_name, str(Path(results_root).resolve()))

    def open(self, trial_id: str, params: Mapping[str, Any]) -> "WandbSink":
        return WandbSink(self, trial_id, params)


class WandbSink:
    """Mirror of one trial as a W&B run (see the module docstring)."""

    def __init__(self, target: WandbTarget, trial_id: str, params: Mapping[str, Any]):
        try:
            import wandb
        except ImportError:
            raise ConfigError(f"tracking.wandb: the `wandb` package is not installed; {INSTALL}") from None
        Path(target.dir).mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(silent=True, console="off", x_disable_stats=True, save_code=False)
        self.run = wandb.init(project=target.project, entity=target.entity, mode=target.mode, dir=target.dir,
                              group=target.group, job_type="trial", name=trial_id,
                              id=run_id(target.group, trial_id, params), resume="allow",
                              config=dict(params), reinit="finish_previous", settings=settings)
        self.next_step = int(getattr(self.run, "starting_step", 0) or 0)   # > 0 only when resuming online
        self.held: set[str] = set()            # keys already logged at next_step
        self.exit_code = 0

    def log_rows(self, rows: list[tuple[int, Mapping[str, float]]]) -> None:
        """Rows in step order (W&B's history needs increasing steps; a step's metrics and evaluation rows
        become one history row), skipping steps the run already holds. A key logged twice at one step
        keeps its first value, as in MLflow (which skips a step it holds)."""
        merged: dict[int, dict[str, float]] = {}
        for step, row in sorted(rows, key=lambda r: r[0]):
            if step >= self.next_step:
                held = self.held if step == self.next_step else set()
                for key, value in row.items():
                    if key not in held:
                        merged.setdefault(step, {}).setdefault(key, value)
        for step, row in merged.items():
            self.run.log(row, step=step)
            self.held = (self.held if step == self.next_step else set()) | set(row)
            self.next_step = step                # the same step may still get an evaluation row

    def log_summary(self, step: int, metrics: Mapping[str, float]) -> None:
        self.run.summary.update(dict(metrics))

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self.run.config.update(dict(tags), allow_val_change=True)

    def set_status(self, status: str, error: str | None) -> None:
        self.run.summary.update({"stalebench.status": status, **({"stalebench.error": error[:5000]} if error else {})})
        self.run.tags = tuple(dict.fromkeys((*(self.run.tags or ()), status)))
        self.exit_code = 0 if status in trialdir.FINAL else 1

    def finish(self, trial_dir: Path) -> None:
        """Save the record files with the run and end it (exit code 1 for a failed trial)."""
        for name in trialdir.RECORD:                 # files in the run's directory go up with the run
            if (Path(trial_dir) / name).exists():
                shutil.copyfile(Path(trial_dir) / name, Path(self.run.dir) / name)
        self.run.finish(exit_code=self.exit_code)
