"""Your trials beside a committed report's raw trials: rank a new estimator against the reference without
rerunning the reference.

``merge_trials(user_dir, archive)`` opens the archive (``harness.store.archive.open_archive``: a committed
report's raw.tar.gz) into a temporary suite results directory and adds the user's trials to it under the
identity rules of ``stalebench run`` (a trial's resolved config.yaml decides what it is):

* a trial id in both with the same resolved config is the same trial: the reference's files are kept;
* a trial id in both with different configs is refused (one id, one config);
* a new trial (your estimator's cells) must agree with the reference on every setting that is the same
  across all the reference's trials (base model, task, steps, lr, ...): only what the reference itself
  varies (estimator, delay, seed, ...) or settings the reference never names (your estimator's own) may
  differ; otherwise it would be ranked on another benchmark, and the merge is refused.

The merged directory takes the user's suite.yaml (its grid names the new estimator; its ``report:``
settings apply). Refusals are one-line ``MergeError``s naming the trial, the setting and the way out.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.store import trialdir
from harness.store.archive import SUITE_FILE, open_archive


class MergeError(ValueError):
    """Trials that cannot be ranked together (one line)."""


@dataclass(frozen=True)
class Merged:
    path: Path  # the temporary merged suite results directory (the caller removes it)
    reference: int  # trials from the archive
    added: int  # the user's trials new to the reference
    same: int  # the user's trials that are reference trials (same id, same config): the reference's kept

    def summary(self, archive: Path) -> str:
        return (f"merged {self.reference} reference trials from {archive} with {self.added + self.same} of "
                f"yours ({self.added} new, {self.same} the reference's own)")


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Dotted key -> the value as JSON text, for every leaf of a resolved config."""
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flat(value, name + "."))
        else:
            out[name] = json.dumps(value, sort_keys=True, default=str)
    return out


def _trials(suite_dir: Path) -> dict[str, Path]:
    return {d.name: d for d in sorted(suite_dir.iterdir()) if trialdir.is_trial_dir(d)
            and any((d / name).is_file() for name in trialdir.RECORD)}


def _config(trial_dir: Path, whose: str) -> dict[str, Any]:
    config = trialdir.read_config(trial_dir)
    if config is None:
        raise MergeError(f"{whose} trial {trial_dir.name} has no readable resolved config; a trial without one "
                         "cannot be checked against the other side: rerun it")
    return config


def _constant_settings(configs: list[dict[str, str]]) -> dict[str, str]:
    """The settings every reference trial has, with one value across all of them."""
    first, *rest = configs
    return {k: v for k, v in first.items() if all(c.get(k) == v for c in rest)}


def merge_trials(user_dir: Path, archive: Path) -> Merged:
    """A temporary suite results dir holding the archive's trials plus the user's (rules above)."""
    user_dir, archive = Path(user_dir), Path(archive)
    if not (user_dir / SUITE_FILE).is_file():
        raise MergeError(f"{user_dir} is not a suite results dir (no {SUITE_FILE}); pass results/<suite>")
    merged = open_archive(archive)
    try:
        reference, mine = _trials(merged), _trials(user_dir)
        if not reference:
            raise MergeError(f"{archive} holds no trials; pack a report's results with --raw")
        ref_configs = {tid: _config(d, "the reference's") for tid, d in reference.items()}
        constant = _constant_settings([_flat(c) for c in ref_configs.values()])
        added = same = 0
        for tid, d in mine.items():
            config = _config(d, "your")
            if tid in reference:
                if trialdir.config_sha256(config) != trialdir.config_sha256(ref_configs[tid]):
                    changes = trialdir.config_changes(ref_configs[tid], config)
                    raise MergeError(f"trial {tid}: your config differs from the reference's "
                                     f"({'; '.join(changes[:3]) or 'key order aside, values differ'}); one trial "
                                     "id is one config: rerun it with the reference's settings or in a suite of "
                                     "another name")
                same += 1
                continue
            flat = _flat(config)
            differ = sorted(k for k, v in constant.items() if flat.get(k) != v)
            if differ:
                k = differ[0]
                more = f" (and {len(differ) - 1} more settings differ)" if len(differ) > 1 else ""
                raise MergeError(f"trial {tid}: {k} is {flat.get(k, '<absent>')} but {constant[k]} in every "
                                 f"reference trial{more}; it would be ranked on another benchmark: run it with the "
                                 "reference suite's base settings (add your estimator to its grid, run it with --only)")
            shutil.copytree(d, merged / tid, ignore=lambda _, names: [n for n in names if n not in trialdir.RAW])
            added += 1
        shutil.copyfile(user_dir / SUITE_FILE, merged / SUITE_FILE)
    except BaseException:
        shutil.rmtree(merged, ignore_errors=True)
        raise
    return Merged(merged, len(reference), added, same)
