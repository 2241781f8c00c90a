"""One suite session: the preflight every driver of a suite shares (`run`, `tune`, `train`), in one order.

    1. the results directory is named (a file there is refused)                  nothing written
       (a campaign suite's landed trials are restored into it first, and those of the campaigns it
       names in `reuse:` whose id and resolved config equal its own trials': store/campaign.py; a
       campaign in a git work tree whose git has no user identity, so could not commit, is refused first)
    2. each distinct base checkpoint the trials start from is verified, once       nothing written
       (the trial kinds say which need one: kinds.py)
    3. every mirror the suite's `tracking:` asks for can work here                 nothing written
    4. results whose config changed are refused, or moved aside (on_change)        the first write
    5. results/<suite>/suite.yaml: the effective suite file (status, reports), and plan.json: every trial
       of the suite, which a partial suite's report compares with what it finds; reused trials are
       landed in the suite's own campaign

The trials are those the caller expanded once (suite.load_suite_file validated them); the driver then
starts Ray, MLflow and the trials. Ray-free and torch-free.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.config.kinds import kind_of
from harness.errors import ConfigError
from harness.config.suite import Suite
from harness.config.dicts import to_dict
from harness.config.expand import Trial, expand, load_suite_file
from harness.store.tracking.mirrors import check_mirrors
from harness.trial.lifecycle import check_identity, same_as
from harness.store.campaign import (REPORTS, campaign_dir, check_committable, land, landed, restore, reuse_where, take,
                                    take_committed)
from harness.store.safewrite import write_file
from harness.store.trialdir import FINAL, PLAN, SUITE_FILE, read_status, suite_results_dir, tune_dir

NOT_POINT = ("ignored", "stands_for")      # params.json keys that are not the trial's grid point


@dataclass(frozen=True)
class SuiteSession:
    suite: Suite
    trials: list[Trial]
    suite_dir: Path
    superseded: list[str]                  # trials whose old results were moved aside and will run again

    @classmethod
    def open(cls, suite: Suite, trials: list[Trial], results_root: Path, on_change: str | None = "error",
             mirrored: bool = True) -> SuiteSession:
        """Steps 1-5 above; `on_change` None skips step 4 (tuning trials are new trials every time);
        `mirrored` False skips step 3 (`train` runs one trial in-process, into its files only)."""
        suite_dir = suite_results_dir(results_root, suite.name)
        verify_bases(trials)
        if mirrored:
            check_mirrors(suite.tracking)
        reused = {}
        if suite.campaign:                     # trials landed by earlier machines come first (store/campaign.py)
            check_committable(campaign_dir(suite.name))
            restore(campaign_dir(suite.name), suite_dir)
            restore(campaign_dir(suite.name, tuning=True), tune_dir(suite_dir))
            reused = reuse(suite, trials, suite_dir)
        superseded = check_identity(trials, suite_dir, on_change) if on_change is not None else []
        write_suite_file(suite, suite_dir)
        write_plan(expand(suite), suite_dir)
        for other, taken in reused.items():
            for trial_id in taken:
                land(suite_dir, suite_dir / trial_id, campaign_dir(suite.name), why=f"reused from {reuse_where(other)}")
        return cls(suite, trials, suite_dir, superseded)

    def pending(self) -> list[Trial]:
        """The trials not yet completed or diverged (their status.json; a changed one was moved aside)."""
        return [t for t in self.trials if read_status(self.suite_dir / t.trial_id).get("status") not in FINAL]


def restore_only(suite: Suite, trials: list[Trial], results_root: Path, on_change: str = "error") -> str:
    """`stalebench run --restore-only`: steps 1-5 above and no trial run, so that a clone which only merged a
    campaign's landings has them in results/<suite>/ for `stalebench report` (docs/campaigns.md)."""
    if not suite.campaign:
        raise ConfigError(f"{suite.name}: --restore-only brings a campaign's landed trials into results/, and this "
                          f"suite has no campaign: true; run it instead")
    check_tuned(suite)
    session = SuiteSession.open(suite, trials, results_root, on_change, mirrored=False)
    left, out = len(session.pending()), results_root / suite.name
    return (f"restored: {len(trials) - left} of {len(trials)} trials of {suite.name} finished in {out}"
            + (f" ({left} not landed yet)" if left else "") + f"; next: stalebench report {out}")


def check_tuned(suite: Suite) -> None:
    """A campaign commits every trial it runs: one whose `tune:` has not given each estimator its tuned value
    in `overrides:` yet is refused (its trials would land at the base's value; docs/campaigns.md)."""
    if suite.campaign and suite.tune is not None and (left := suite.tune.untuned(suite)):
        raise ConfigError(f"{suite.name}: a campaign commits each trial it runs, and overrides: sets no "
                          f"{suite.tune.param} for {', '.join(left)}; run `stalebench tune` on it first and copy "
                          f"results/{suite.name}/tuned-overrides.yaml into its overrides:")


def reuse(suite: Suite, trials: list[Trial], suite_dir: Path, move: bool = True) -> dict[str, list[str]]:
    """Per entry of `reuse:` (another campaign, or a committed report reports/<name>), the trials of ``trials``
    without a result in ``suite_dir`` (nor landed in the suite's own campaign) that it holds with the same id
    and resolved config: unpacked into ``suite_dir`` (``move`` False: only named, for the dry run); the first
    entry that holds a trial gives it. A damaged archive there is passed over with a warning (its trial runs
    here); a named report without its raw.tar.gz is refused."""
    if not (suite.campaign and suite.reuse):
        return {}
    wanted = {t.trial_id for t in trials} - set(landed(campaign_dir(suite.name)))
    out = {}
    for other in suite.reuse:
        where = reuse_where(other)
        if other.startswith(REPORTS):
            if not where.is_file():
                raise ConfigError(f"reuse: {where} not found; name a committed report packed with --raw "
                                  f"(reports/<name>), or remove {other} from reuse")
            out[other] = take_committed(where, suite_dir, same_as(trials), only=wanted, move=move)
        else:
            out[other] = take(where, suite_dir, same_as(trials), only=wanted, move=move, strict=False)
            _warn_unlanded(other, [t for t in trials if t.trial_id in wanted - set(out[other])
                                   and read_status(suite_dir / t.trial_id).get("status") not in FINAL])
        wanted -= set(out[other])
    return out


def _warn_unlanded(other: str, trials: list[Trial]) -> None:
    """Warn about the ``trials`` (about to run here) that suites/<other>.yaml defines with the same resolved
    config but that have not landed in campaigns/<other>/ yet: run now, they would run twice."""
    path = Path("suites") / f"{other}.yaml"
    if not trials or not path.is_file():
        return
    try:
        theirs = {t.trial_id: t for t in expand(load_suite_file(path))}
    except ConfigError:                    # a suite that does not load here defines nothing to wait for
        return
    twins = [t.trial_id for t in trials
             if t.trial_id in theirs and to_dict(theirs[t.trial_id].config) == to_dict(t.config)]
    if twins:
        named = ", ".join(twins[:3]) + (", ..." if len(twins) > 3 else "")
        print(f"stalebench: warning: reuse: {len(twins)} of these trials are trials of {path} (same id and config) "
              f"that have not landed in {campaign_dir(other)}/ yet ({named}): they run here, a second time; land "
              f"them there first to reuse them", file=sys.stderr)


def verify_bases(trials: list[Trial]) -> None:
    """Check each distinct starting checkpoint once, in the driver (a frozen base's files against its
    manifest): a damaged or replaced base stops the run with one line before any trial starts."""
    from harness.bases import base_identity

    seen = set()
    for t in trials:
        model = t.config.model
        key = (model.kind, model.base, model.path)
        if key not in seen and kind_of(t.config).needs_base(t.config):
            seen.add(key)
            base_identity(model)


def write_plan(trials: list[Trial], suite_dir: Path) -> None:
    """results/<suite>/plan.json: every trial of the suite (its id and grid point; a `--only` run plans them
    all), which the report compares with the trials it finds."""
    plan = [{"trial_id": t.trial_id, "point": {k: v for k, v in t.params.items() if k not in NOT_POINT}}
            for t in trials]
    write_file(suite_dir / PLAN, json.dumps({"trials": plan}, sort_keys=True))


def write_suite_file(suite: Suite, suite_dir: Path) -> None:
    """results/<suite>/suite.yaml: the suite file of the latest run (reports and `status` read it)."""
    suite_dir.mkdir(parents=True, exist_ok=True)
    write_file(suite_dir / SUITE_FILE, suite.text())   # a private temporary name: two runs at once cannot collide
