"""Your trials beside a committed report's raw trials: rank a new estimator against the reference without
rerunning the reference.

``merge_trials(user_dir, archive)`` opens the archive (``harness.store.archive.open_archive``: a committed
report's raw.tar.gz) into a temporary suite results directory and adds the user's trials to it under the
identity rules of ``stalebench run`` (a trial's resolved config.yaml decides what it is):

* configs are compared, not ids: a trial of yours whose resolved config is a reference trial's (under its
  id or another) is that trial: the reference's files are kept;
* a trial id in both with different configs is refused (one id, one config);
* on both sides params.json must agree with config.yaml (a trial whose params say grpo runs grpo);
* a new trial (your estimator's cells) must agree with the reference on every setting the reference
  suite does not vary (base model, task, steps, eval size, ...): only its grid keys, the seed, the
  settings of its per-estimator ``overrides:`` (a tuned lr), your estimator's own ``params`` and settings
  the reference never names may differ; otherwise it would be ranked on another benchmark, and the merge
  is refused. Every reference trial must hold those settings too: one edited reference trial is refused
  rather than switching the check off for the setting it changed.

The merged directory takes the user's suite.yaml (its grid names the new estimator; its ``report:``
settings apply). Refusals are one-line ``MergeError``s naming the trial, the setting and the way out.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.report import checks
from harness.config.suite import read_suite_yaml
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
    """The trial's resolved config, read as untrusted (a billion-laughs config.yaml is one line), whose
    params.json agrees with it (a trial whose params say grpo but whose config runs another estimator is
    neither)."""
    try:
        config = trialdir.checked_config(trial_dir)
    except ConfigError as exc:
        raise MergeError(f"{whose} trial {trial_dir.name}: {exc}") from None
    if config is None:
        raise MergeError(f"{whose} trial {trial_dir.name} has no resolved config; a trial without one "
                         "cannot be checked against the other side: rerun it")
    params, problem = trialdir.load(trial_dir, trialdir.PARAMS)
    if params is None:
        raise MergeError(f"{whose} trial {trial_dir.name}: {problem} params.json; rerun it")
    wrong = checks.params_problems(params, config)
    if wrong:
        raise MergeError(f"{whose} trial {trial_dir.name}: {wrong[0]}; its files disagree: rerun it")
    return config


def _varied(suite_dir: Path) -> set[str]:
    """Dotted settings the reference suite sets per trial (its grid keys, the seed, its per-estimator
    overrides); under them, every reference trial must have the same settings."""
    try:
        suite = read_suite_yaml(suite_dir / SUITE_FILE)
    except ConfigError as exc:
        raise MergeError(f"the reference's {exc}") from None
    return {"seed", *suite.grid, *(k for values in suite.overrides.values() for k in values)}


def _base(flat: dict[str, str], varied: set[str]) -> dict[str, str]:
    """The settings of a flattened config that are the benchmark's, not the trial's: all but the varied
    ones and the estimator's own parameters (``params.*``)."""
    return {k: v for k, v in flat.items() if k not in varied and not any(k.startswith(p + ".") for p in varied)
            and k != "params" and not k.startswith("params.")}


def _common(bases: dict[str, dict[str, str]]) -> dict[str, str]:
    """The reference's benchmark settings, which every reference trial must hold (MergeError naming the
    first trial and setting that does not: one tampered trial must not switch off the check)."""
    tid0, first = next(iter(bases.items()))
    for tid, base in bases.items():
        differ = sorted(k for k in set(first) | set(base) if first.get(k) != base.get(k))
        if differ:
            k = differ[0]
            raise MergeError(f"reference trial {tid}: {k} is {base.get(k, '<absent>')} but {first.get(k, '<absent>')} "
                             f"in reference trial {tid0}, and the reference suite does not vary it; the archive is "
                             "not one benchmark (damaged or edited): re-download it")
    return first


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
        by_config = {trialdir.config_sha256(c): tid for tid, c in ref_configs.items()}
        varied = _varied(merged)
        common = _common({tid: _base(_flat(c), varied) for tid, c in ref_configs.items()})
        added = same = 0
        for tid, d in mine.items():
            config = _config(d, "your")
            sha = trialdir.config_sha256(config)
            if tid in reference and sha != trialdir.config_sha256(ref_configs[tid]):
                changes = trialdir.config_changes(ref_configs[tid], config)
                raise MergeError(f"trial {tid}: your config differs from the reference's "
                                 f"({'; '.join(changes[:3]) or 'key order aside, values differ'}); one trial "
                                 "id is one config: rerun it with the reference's settings or in a suite of "
                                 "another name")
            if sha in by_config:              # the reference's own trial, under its id or another: keep theirs
                same += 1
                continue
            flat = _base(_flat(config), varied)
            differ = sorted(k for k, v in common.items() if flat.get(k) != v)
            if differ:
                k = differ[0]
                more = f" (and {len(differ) - 1} more settings differ)" if len(differ) > 1 else ""
                raise MergeError(f"trial {tid}: {k} is {flat.get(k, '<absent>')} but {common[k]} in every "
                                 f"reference trial{more}; it would be ranked on another benchmark: run it with the "
                                 "reference suite's base settings (add your estimator to its grid, run it with --only)")
            shutil.copytree(d, merged / tid, ignore=lambda _, names: [n for n in names if n not in trialdir.RAW])
            added += 1
        shutil.copyfile(merged / SUITE_FILE, merged / trialdir.REFERENCE_SUITE)   # its grid and seeds count too
        shutil.copyfile(user_dir / SUITE_FILE, merged / SUITE_FILE)
    except BaseException:
        shutil.rmtree(merged, ignore_errors=True)
        raise
    return Merged(merged, len(reference), added, same)
