"""A campaign: a suite that runs across sessions and machines, its finished trials committed as they land.

    campaigns/<suite>/<trial_id>.tar.gz          one finished table trial (suite.yaml + its record files)
    campaigns/<suite>/tune/<trial_id>.tar.gz     one finished tuning trial

A suite with `campaign: true` lands each trial when it ends completed or diverged (the runner's trial
callback calls `land`): the trial is packed with the raw-archive format (archive.pack_suite, read back
through the same checks as any untrusted archive) and, inside a git work tree, committed on its own, so a
machine replaced mid-suite loses at most the trials in flight. On the next machine `run`/`tune` of the same
suite first `restore`s every landed trial into results/<suite>/ (a partial directory of the same trial is
moved aside, never deleted), then the usual preflight (SuiteSession) takes restored trials as finished: a
trial whose resolved config changed is still refused, and nothing runs twice. A suite that names other
campaigns in `reuse:` takes from them each landed trial whose id and resolved config equal one of its own
(`take`; session.py decides "equal") and lands it as its own: it is that trial, and does not run again. A
`reuse:` entry `reports/<name>` takes them from a committed report's raw.tar.gz instead (`take_committed`).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Collection

from harness.errors import ConfigError
from harness.store import trialdir
from harness.store.archive import ARCHIVE_NAME, ArchiveError, open_archive, pack_suite, unpacked_archive

CAMPAIGNS = Path("campaigns")
SUFFIX = ".tar.gz"
REPORTS = "reports/"          # a `reuse:` entry naming a committed report (reports/<name>), not a campaign


def campaign_dir(suite_name: str, tuning: bool = False, root: Path = CAMPAIGNS) -> Path:
    return Path(root) / suite_name / (trialdir.TUNE_DIR if tuning else "")


def land(suite_dir: Path, trial_dir: Path, dest: Path, commit: bool = True, why: str = "landed") -> Path | None:
    """Pack the finished trial ``trial_dir`` (of results/<suite> or its tune/) into ``dest``/<id>.tar.gz and
    commit that file alone when ``dest`` is in a git work tree. Returns the archive's path; None for a trial
    that has not finished (failed or in flight: it runs again) and for one already landed as it is now (a
    restored trial the runner reports finished again: packing is deterministic, so nothing changed)."""
    trial_dir = Path(trial_dir)
    if trialdir.read_status(trial_dir).get("status") not in trialdir.FINAL:
        return None
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / f"{trial_dir.name}{SUFFIX}"
    before = out.read_bytes() if out.is_file() else None
    pack_suite(Path(suite_dir), out, trial_dir.parent, only=frozenset({trial_dir.name}))
    if out.read_bytes() == before:
        return None
    if commit:
        _commit(out, f"campaign {Path(suite_dir).name}: {trial_dir.name} {why}")
    return out


def landed(dest: Path) -> list[str]:
    """The ids of the trials landed in ``dest``, sorted."""
    return sorted(p.name[:-len(SUFFIX)] for p in Path(dest).glob(f"*{SUFFIX}") if p.is_file())


def restore(dest: Path, into: Path) -> list[str]:
    """Unpack every landed trial of ``dest`` that ``into`` lacks as a finished trial; returns their ids.
    A landed archive must hold exactly the trial it is named for (ArchiveError otherwise, nothing moved)."""
    return take(dest, into, lambda trial_dir: True)


def take(dest: Path, into: Path, accept: Callable[[Path], bool], only: Collection[str] | None = None,
         move: bool = True, strict: bool = True) -> list[str]:
    """The landed trials of ``dest`` (of the ids ``only``, if given) that ``into`` lacks as finished trials and
    whose unpacked directory ``accept`` takes, unpacked into ``into`` (``move`` False: only named); returns
    their ids. A suite's `reuse:` takes from another campaign the trials whose resolved config is its own
    trial's (session.py): a trial that equals one already run *is* that trial. ``strict`` False (another
    campaign's archive): a damaged archive is passed over with a warning and its trial runs here."""
    taken = []
    for trial_id in landed(dest):
        if (only is not None and trial_id not in only) or _finished(Path(into) / trial_id):
            continue
        try:
            unpacked = open_archive(Path(dest) / f"{trial_id}{SUFFIX}")
        except ArchiveError as exc:
            if strict:
                raise
            _not_reused(str(exc))
            continue
        try:
            found = [d.name for d in unpacked.iterdir() if trialdir.is_trial_dir(d)]
            if found != [trial_id]:
                wrong = f"{dest / (trial_id + SUFFIX)}: holds {found or 'no trial'}, not {trial_id}"
                if not strict:
                    _not_reused(wrong)
                    continue
                raise ArchiveError(f"{wrong}; remove it from the campaign or land it again")
            if _place(unpacked / trial_id, Path(into) / trial_id, accept, move):
                taken.append(trial_id)
        finally:
            shutil.rmtree(unpacked, ignore_errors=True)
    return taken


def take_committed(archive: Path, into: Path, accept: Callable[[Path], bool], only: Collection[str],
                   move: bool = True) -> list[str]:
    """As `take` from another campaign, from the finished trials of a committed report's raw archive (e.g.
    reports/reference-v3/raw.tar.gz): a trial an earlier benchmark ran with the same id and resolved config is
    that trial. A damaged archive is passed over with a warning (its trials run here)."""
    if all(_finished(Path(into) / trial_id) for trial_id in only):
        return []
    try:
        with unpacked_archive(archive) as unpacked:
            return [d.name for d in sorted(unpacked.iterdir())
                    if trialdir.is_trial_dir(d) and d.name in only and _place(d, Path(into) / d.name, accept, move)]
    except ArchiveError as exc:
        _not_reused(str(exc))
        return []


def reuse_where(entry: str) -> Path:
    """Where a `reuse:` entry's trials are: a committed report's raw archive, or another campaign."""
    return Path(entry) / ARCHIVE_NAME if entry.startswith(REPORTS) else campaign_dir(entry)


def _finished(trial_dir: Path) -> bool:
    return trialdir.read_status(trial_dir).get("status") in trialdir.FINAL


def _place(found: Path, target: Path, accept: Callable[[Path], bool], move: bool) -> bool:
    """Whether the unpacked trial ``found`` is taken for ``target`` (finished, not finished there, and
    ``accept``ed); moved there when ``move`` (a partial directory there is moved aside first)."""
    if not _finished(found) or _finished(target) or not accept(found):
        return False
    if move:
        if target.exists():
            trialdir.supersede(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(found), str(target))
    return True


def _not_reused(why: str) -> None:
    print(f"stalebench: warning: not reused, runs here instead: {why}", file=sys.stderr)


def summary(name: str) -> str | None:
    """What campaigns/<name>/ holds, in one line; None when nothing has landed there."""
    table, tune = (landed(campaign_dir(name, tuning)) for tuning in (False, True))
    if not table and not tune:
        return None
    return (f"campaign {name}: {len(table)} table and {len(tune)} tuning trials landed in campaigns/{name}/ "
            f"(`stalebench run {name} --restore-only` brings them into results/{name}/, running nothing)")


def check_committable(dest: Path) -> None:
    """Refuse, before any trial runs, a campaign whose landings git could not commit: inside a work tree
    without a user identity every landing would fail, and the finished trials would live on this machine alone."""
    where = _in_git(Path(dest))
    if where is not None and subprocess.run(["git", "var", "GIT_COMMITTER_IDENT"], cwd=where,
                                            capture_output=True).returncode != 0:
        raise ConfigError(f"{dest}: a campaign commits each finished trial, and git here has no user identity; "
                          f"set one (git config user.name NAME && git config user.email EMAIL) and run it again")


def _in_git(path: Path) -> Path | None:
    """The nearest existing folder at or above ``path`` when it lies in a git work tree (None: not in git)."""
    path = path.resolve()
    where = next(p for p in (path, *path.parents) if p.is_dir())
    try:
        inside = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=where, capture_output=True,
                                text=True)
    except FileNotFoundError:                  # no git on this machine
        return None
    return where if inside.returncode == 0 and inside.stdout.strip() == "true" else None


def _commit(path: Path, message: str) -> None:
    """Commit ``path`` alone (other staged changes stay staged, not committed); quiet when not in git."""
    path = path.resolve()
    cwd = _in_git(path.parent)
    if cwd is None:
        return
    for args in (["add", "--", str(path)], ["commit", "-q", "-m", message, "--", str(path)]):
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise ConfigError(f"{path}: git {args[0]} failed ({said}); the trial is landed there but not "
                              f"committed: commit that file by hand (git add, git commit)")
