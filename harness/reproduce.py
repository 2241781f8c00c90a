"""`stalebench reproduce REPORT_DIR [--only ...]`: rerun a committed leaderboard's cells (or a slice) from
its raw trial files and say, per cell, whether the new run agrees.

The raw trial files are REPORT_DIR/raw.tar.gz (harness/store/archive.py) or a suite results directory
(results/<suite>/ as `stalebench run` writes it). The trials are rerun from the archive's own suite.yaml
into <results>/reproduce/<suite>/ (a rerun of the command resumes there); a trial whose resolved config
now differs from its committed config.yaml is not rerun and is reported as such.

The test, per trial and then per cell (a cell: the trial's grid point without its seed):

- **identical**: same status and step, every eval row equal, every metrics row equal except the `perf/*`
  timings (floats compared exactly, as JSON keeps them).
- When a trial's committed and new runs share the float path, CPU vendor, torch, MKL and thread count
  (provenance.json `numerics`, harness/trial/numerics.py) they are guaranteed identical: anything else is
  **DIFFERS**, a bug or an unrecorded change.
- Otherwise (another CPU path or vendor, torch, MKL, a GPU, or a committed trial from before float paths
  were recorded) the cell is tested statistically, with the report's own numbers and `stalebench compare`'s
  test: the per-seed final held-out accuracies (diverged trials score 0 from the divergence on), the
  difference new - committed and its 95% interval (`report.stats.difference_estimate` of the statistic the
  report prints: for the IQM a bootstrap with >= 5 seeds a side and Welch t below, for the mean Welch t);
  **agrees** when the interval contains 0, **differs** when it excludes
  0, **undecided** with one seed a side (no interval).

**A slice** (`--steps N`): the trials rerun for their first N steps only (train.steps = N, nothing else
changed; every trial's batches, evaluations and seeds up to step N are those of the full trial, as a shorter
run's train problems are a prefix of a longer one's), compared with the committed rows of steps <= N, and
on another float path with the committed accuracy at step N. The reruns go to
<results>/reproduce/first-N-steps/<suite>/. N must be a step the committed trials evaluated at. A slice
does not check results.json (its numbers are the final ones).

A committed trial whose files cannot be read as numbers is **unreadable** (its cell says why); the other
cells still get their verdicts. When REPORT_DIR holds the report's results.json, its published final
accuracies are checked against the raw trials' (a row ``results.json``: matches, or DIFFERS naming the
first trial).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.trial import numerics

from harness.store import trialdir
from harness.config.run import ConfigError, RunConfig
from harness.config.dicts import to_dict
from harness.store.archive import committed_results
from harness.config.expand import Suite, Trial, load_suite_trials, select_trials
from harness.store.trialdir import SUITE_FILE
from harness.suite.session import write_suite_file
from harness.store.untrusted import short
from harness.store.untrusted_json import read_json_file

if TYPE_CHECKING:                                  # the report is imported where it is used (numpy, scipy)
    from harness.report.stats import Statistic
OUT_DIR = "reproduce"            # <results>/reproduce/<suite>/
BUNDLE = "results.json"          # the report's published numbers (report/html.py), beside raw.tar.gz
MAX_BUNDLE_BYTES = 256 * 2**20


@dataclass(frozen=True)
class TrialCheck:
    trial: Trial
    verdict: str                 # identical | differs | config changed | missing
    detail: str = ""             # where it first differs, or the changed keys
    changed: tuple[str, ...] = ("float_path",)   # the numerics fields (numerics.IDENTITY) that differ; none:
                                                  # the guarantee of identical numbers holds

    @property
    def same_path(self) -> bool:
        return not self.changed


def planned(every: list[Trial], committed: Path, only: list[str]) -> tuple[list[Trial], list[TrialCheck]]:
    """(the finished committed trials to rerun, the ones that cannot be: config changed since)."""
    trials = [t for t in select_trials(every, only)
              if trialdir.read_status(committed / t.trial_id).get("status") in trialdir.FINAL]
    if not trials:
        raise ConfigError(f"{committed}: no finished trial" + (f" matches --only {' '.join(only)}" if only else ""))
    defaults, rerun, refused = to_dict(RunConfig(), every_key=True), [], []
    for t in trials:
        diff = trialdir.config_changes(trialdir.read_config(committed / t.trial_id) or {}, to_dict(t.config), defaults)
        if diff:
            refused.append(TrialCheck(t, "config changed", "; ".join(diff[:3])))
        else:
            rerun.append(t)
    return rerun, refused


def _numerics(trial_dir: Path) -> dict[str, Any]:
    numbers = trialdir.read_provenance(trial_dir).get("numerics")
    return numbers if isinstance(numbers, dict) else {}


MISSING = "<missing in the rerun>"


def _first_difference(old: list[dict[str, Any]], new: list[dict[str, Any]], what: str) -> str | None:
    """The first committed value the rerun does not give again (a metric added to stalebench after the trial
    was committed is not compared: it has no committed value), or None."""
    for a, b in zip(old, new):
        a = {k: v for k, v in a.items() if not k.startswith("perf/")}
        b = {k: b.get(k, MISSING) for k in a}
        if a != b:
            key = next((k for k in sorted(a) if a[k] != b[k]), "?")
            return f"{what} step {a.get('step', b.get('step'))}: {key} {a.get(key)!r} -> {b.get(key)!r}"
    if len(old) != len(new):
        return f"{what}: {len(old)} rows committed, {len(new)} now"
    return None


def _sliced_status(status: dict[str, Any], steps: int | None) -> dict[str, Any]:
    """What a rerun of the committed trial's first ``steps`` steps ends with: the committed status when the
    trial ended by then (or no slice), else completed at ``steps``."""
    ended = status.get("step")
    if steps is None or (isinstance(ended, int) and not isinstance(ended, bool) and ended <= steps):
        return status
    return {"status": "completed", "step": steps, "diverged_step": None}


def _upto(rows: list[dict[str, Any]], steps: int | None) -> list[dict[str, Any]]:
    """The rows of steps <= ``steps`` (all rows without a slice)."""
    if steps is None:
        return rows
    return [r for r in rows if not (isinstance(r.get("step"), (int, float)) and r["step"] > steps)]


def check_trial(trial: Trial, committed: Path, rerun: Path, steps: int | None = None) -> TrialCheck:
    """Compare one trial's committed record (its first ``steps`` steps for a slice) with its rerun's (see the
    module docstring)."""
    old_dir, new_dir = committed / trial.trial_id, rerun / trial.trial_id
    new_status = trialdir.read_status(new_dir)
    if new_status.get("status") not in trialdir.FINAL:
        return TrialCheck(trial, "missing", f"the rerun ended {new_status.get('status', 'without a status')}")
    old_n, new_n = _numerics(old_dir), _numerics(new_dir)
    changed = tuple(k for k in numerics.IDENTITY if old_n.get(k) != new_n.get(k)) if old_n else ("float_path",)
    old_status = _sliced_status(trialdir.read_status(old_dir), steps)
    keys = ("status", "step", "diverged_step")
    if any(old_status.get(k) != new_status.get(k) for k in keys):
        return TrialCheck(trial, "differs", "status: " + ", ".join(
            f"{k} {old_status.get(k)} -> {new_status.get(k)}" for k in keys if old_status.get(k) != new_status.get(k)), changed)
    found = (_first_difference(_upto(trialdir.read_evals(old_dir), steps), trialdir.read_evals(new_dir), "eval")
             or _first_difference(_upto(trialdir.read_metrics(old_dir), steps), trialdir.read_metrics(new_dir),
                                  "metrics"))
    return TrialCheck(trial, "differs" if found else "identical", found or "", changed)


def _other(group: list[TrialCheck]) -> str:
    """What differs between the committed runs' numerics and the reruns', e.g. "other CPU vendor"."""
    names = {"float_path": "float path", "cpu_vendor": "CPU vendor", "mkl": "MKL", "threads": "thread count"}
    changed = dict.fromkeys(names.get(k, k) for c in group for k in c.changed)
    return "other " + ", ".join(changed or ["float path"])


def _finals(results_dir: Path) -> dict[str, float]:
    """trial id -> final held-out accuracy, scored as the report scores it."""
    from harness.report.load import load_results
    from harness.report.tables import analyse
    rows = analyse(load_results(results_dir)).cell_trials.drop_duplicates("trial_id")
    return dict(zip(rows["trial_id"], rows["final_acc"].astype(float)))


def cell_name(trial: Trial) -> str:
    """The trial's grid point without its seed (and without the list of cells a shared trial stands for)."""
    return " ".join(f"{k}={v}" for k, v in trial.params.items()
                    if k != "seed" and not isinstance(v, (list, tuple))) or "(one cell)"


def _accuracies_at(results_dir: Path, trial_ids: list[str], steps: int) -> dict[str, float]:
    """trial id -> held-out accuracy at step ``steps``, scored as the report scores a trial that ended there
    (0 from a divergence on; NaN without an evaluation at that step)."""
    out = {}
    for tid in trial_ids:
        status = trialdir.read_status(results_dir / tid)
        diverged = status.get("diverged_step") if status.get("status") == "diverged" else None
        if isinstance(diverged, int) and diverged <= steps:
            out[tid] = 0.0
            continue
        acc = [r.get("eval/acc") for r in trialdir.read_evals(results_dir / tid) if r.get("step") == steps]
        out[tid] = float(acc[-1]) if acc and isinstance(acc[-1], (int, float)) else float("nan")
    return out


def verdicts(checks: list[TrialCheck], committed: Path, rerun: Path,
             steps: int | None, statistic: Statistic) -> list[tuple[str, str, str]]:
    """(cell, verdict, detail) per cell, in the suite's order (see the module docstring); ``steps``: a slice,
    its committed side scored at that step; ``statistic``: the report's (the one ``report.statistic``
    names)."""
    import numpy as np

    from harness.report import stats

    cells: dict[str, list[TrialCheck]] = {}
    for c in checks:
        cells.setdefault(cell_name(c.trial), []).append(c)
    ran = any(c.verdict in ("identical", "differs") for c in checks)
    old_finals = _finals(committed) if steps is None else _accuracies_at(
        committed, [c.trial.trial_id for c in checks], steps)
    new_finals = _finals(rerun) if ran else {}
    out = []
    for name, group in cells.items():
        n = len(group)
        blocked = [c for c in group if c.verdict in ("config changed", "missing", "unreadable")]
        if blocked:
            out.append((name, {"config changed": "not rerun", "missing": "incomplete"}.get(blocked[0].verdict,
                                                                                          "unreadable"),
                        f"{blocked[0].trial.trial_id}: {blocked[0].verdict} ({blocked[0].detail})"))
            continue
        if all(c.verdict == "identical" for c in group):
            out.append((name, "identical", f"{n} trial(s), bit for bit" + (f" to step {steps}" if steps else "")))
            continue
        broken = [c for c in group if c.verdict == "differs" and c.same_path]
        if broken:
            out.append((name, "DIFFERS", f"{broken[0].trial.trial_id} has the committed float path, CPU vendor, "
                                         f"torch and MKL but {broken[0].detail}"))
            continue
        old = np.array([old_finals.get(c.trial.trial_id, np.nan) for c in group])   # NaN: a trial the report
        new = np.array([new_finals.get(c.trial.trial_id, np.nan) for c in group])   # could not score
        d = stats.difference_estimate(new, old, statistic=statistic)
        what = "final acc" if steps is None else f"acc at step {steps}"
        means = f"{what} {old.mean():.3f} -> {new.mean():.3f} (n={n}; {_other(group)})"
        if d.method == "none":
            out.append((name, "undecided", f"{means}: {d.point:+.3f}, no interval from one seed"))
            continue
        within = d.lo <= 0 <= d.hi
        out.append((name, "agrees" if within else "differs",
                    f"{means}: {d.point:+.3f} [{d.lo:+.3f}, {d.hi:+.3f}]{'*' if d.low_confidence else ''}"))
    return out


def _checked(trial: Trial, committed: Path, rerun: Path, steps: int | None) -> TrialCheck:
    """check_trial, or an "unreadable" verdict naming the problem: a damaged committed file (a string where
    numbers belong, a list for an object) must not cost the verdicts of the other cells."""
    try:
        return check_trial(trial, committed, rerun, steps)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError) as exc:
        return TrialCheck(trial, "unreadable", f"{type(exc).__name__}: {short(str(exc), 120)[1:-1]}")


def published(report_dir: Path, committed: Path) -> list[tuple[str, str, str]]:
    """A verdict row for REPORT_DIR's results.json (when it has one): every published trial's final accuracy
    and every number of its cells and leaderboard must be the one its raw trials give (report/published.py),
    each trial listed once; "matches", "DIFFERS" (naming the first value) or "unreadable". The published
    numbers are what readers cite: a results.json edited after rendering is caught here."""
    from harness.report.published import differences

    path = report_dir / BUNDLE
    if not path.is_file():
        return []
    try:
        wrong, n = differences(read_json_file(path, BUNDLE, MAX_BUNDLE_BYTES), committed)
    except (ValueError, KeyError) as exc:
        return [(BUNDLE, "unreadable", short(str(exc).replace(str(path), BUNDLE), 160)[1:-1])]
    if wrong:
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        return [(BUNDLE, "DIFFERS", wrong[0] + more)]
    return [(BUNDLE, "matches", f"{n} trials' final accuracy and every number of the cells and leaderboard equal "
                                f"the raw trials'")]


Runner = Callable[[Suite, list[Trial], Path], None]


def _sliced(committed: Path, trials: list[Trial], steps: int) -> tuple[Suite, list[Trial]]:
    """The committed suite with train.steps = ``steps`` and its ``trials`` as that suite runs them; a
    ConfigError when a trial ran fewer steps or did not evaluate at step ``steps``."""
    for t in trials:
        every, planned_steps = t.config.eval.every_steps, t.config.train.steps
        if not 0 < steps <= planned_steps:
            raise ConfigError(f"--steps {steps}: trial {t.trial_id} ran {planned_steps} steps; pass a step in "
                              f"[1, {planned_steps}]")
        if steps % every and steps != planned_steps:
            raise ConfigError(f"--steps {steps}: trial {t.trial_id} evaluated every {every} steps, not at step "
                              f"{steps}; pass a multiple of {every}")
    suite, every_sliced = load_suite_trials(committed / SUITE_FILE, [f"train.steps={steps}"], stored=True)
    sliced = {t.trial_id: t for t in every_sliced}
    streams = {}                   # one check per train stream: the trials of a seed share it across estimators
    for t in trials:
        if sliced[t.trial_id].config.train.steps != steps:
            raise ConfigError(f"--steps {steps}: trial {t.trial_id} sets train.steps in its estimator's overrides, "
                              f"so it cannot be shortened; leave it out with --only")
        c = t.config
        streams.setdefault((repr(c.task), c.seed, c.train.steps, c.train.prompts_per_step), t)
    for t in streams.values():
        check_prefix(t, sliced[t.trial_id])
    return suite, [sliced[t.trial_id] for t in trials]


def check_prefix(full: Trial, sliced: Trial) -> None:
    """A ConfigError unless the sliced trial's train problems are the first ones of the full trial's (a task
    that draws another stream for a shorter run, e.g. addrev, would rerun other batches)."""
    from harness.trial.batches import train_problems

    task = full.config.task.build()
    shorter = [p.uid for p in train_problems(sliced.config, task)]
    if [p.uid for p in train_problems(full.config, task)[:len(shorter)]] != shorter:
        raise ConfigError(f"--steps {sliced.config.train.steps}: task {full.config.task.name} draws other train "
                          f"problems for a shorter run, so trial {full.trial_id}'s first steps cannot be rerun alone; "
                          f"rerun whole trials (leave out --steps)")


def reproduce(report_dir: Path, only: list[str], results_root: Path, run: Runner,
              steps: int | None = None) -> tuple[str, list[tuple[str, str, str]]]:
    """Rerun REPORT_DIR's finished trials (the --only slice; with ``steps``, their first ``steps`` steps)
    with `run(suite, trials, out_root)`, which writes them to out_root/<suite>/; returns the verdict table
    and its rows (cell, verdict, detail)."""
    from harness.report import stats
    with committed_results(report_dir) as committed:
        suite, every = load_suite_trials(committed / SUITE_FILE, stored=True)
        rerun, refused = planned(every, committed, only)
        out_root = Path(results_root) / OUT_DIR
        if steps is not None:
            suite, rerun = _sliced(committed, rerun, steps)
            out_root = out_root / f"first-{steps}-steps"
        new_dir = trialdir.suite_results_dir(out_root, suite.name)
        new_dir.mkdir(parents=True, exist_ok=True)
        write_suite_file(suite, new_dir)                                     # the same effective suite
        if rerun:            # a rerun is checked against the committed trials: never restored from a campaign
            run(replace(suite, campaign=False), rerun, out_root)
        checks = refused + [_checked(t, committed, new_dir, steps) for t in rerun]
        order = {t.trial_id: i for i, t in enumerate(every)}
        checks.sort(key=lambda c: order[c.trial.trial_id])
        statistic = stats.named(suite.report.statistic)
        cells = verdicts(checks, committed, new_dir, steps, statistic)
        bundle = published(Path(report_dir), committed) if steps is None else []    # a check, not a cell
    rows = cells + bundle
    width = max(len(r[0]) for r in rows)
    counts = {v: sum(1 for r in cells if r[1] == v) for v in dict.fromkeys(r[1] for r in cells)}
    head = [f"reproduce {report_dir}: {len(checks)} trial(s) in {len(cells)} cell(s)"
            + (f" and {len(bundle)} check of the published {BUNDLE}" if bundle else "") + f", rerun in {new_dir}"
            + (f" (their first {steps} steps)" if steps else ""),
            f"identical: bit for bit; on another float path or CPU vendor: the difference of "
            f"{'final accuracy' if steps is None else f'accuracy at step {steps}'} and its "
            f"95% interval ({_interval_words(statistic)} fewer than {stats.MIN_CONFIDENT_SEEDS} seeds), 'agrees' when "
            f"it contains 0 (docs/reproducibility.md)"]
    lines = [f"  {cell.ljust(width)}  {verdict:<10} {detail}" for cell, verdict, detail in rows]
    tally = f"cells: {', '.join(f'{v}: {n}' for v, n in counts.items())}" + "".join(
        f"; {name}: {verdict}" for name, verdict, _ in bundle)
    return "\n".join([*head, *lines, tally]), rows


def _interval_words(statistic: Statistic) -> str:
    """The difference's interval, as the verdict table's head names it: "mean, Welch t; *"."""
    below = statistic.fallback
    if below is None:
        return f"{statistic.label}, {statistic.interval.between}; *"
    return f"{statistic.label} {statistic.interval.between}; * {below.interval.between},"


def run_in_ray(address: str | None) -> Runner:
    """Run the trials as `stalebench run` does (Ray Tune, MLflow), keeping their float path."""
    def run(suite: Suite, trials: list[Trial], out_root: Path) -> None:
        from harness.suite.runner import run_suite
        run_suite(suite, results_root=out_root, address=address, only=[f"id={t.trial_id}" for t in trials])
    return run


def run_in_process(suite: Suite, trials: list[Trial], out_root: Path) -> None:
    """Run the trials one after another in this process (as `stalebench train` does), without Ray."""
    from harness.suite.session import SuiteSession
    from harness.trial.lifecycle import TrialFailed, run_trial

    from harness.suite.console import ProgressThread, printer
    from harness.suite.plan import projected_seconds
    from harness.suite.status import ProgressLine

    suite_dir = SuiteSession.open(suite, trials, out_root, mirrored=False).suite_dir    # bases verified, once
    say, projected = printer(True), projected_seconds(suite, trials, trials, suite_dir, one_at_a_time=True)
    with ProgressThread(ProgressLine(suite_dir, {t.trial_id: t.config.train.steps for t in trials}, projected), True):
        for i, t in enumerate(trials, 1):
            say(f"trial {i}/{len(trials)}: {t.trial_id}")
            with contextlib.suppress(TrialFailed):       # recorded as failed; its cell says so
                run_trial(t, suite_dir)
