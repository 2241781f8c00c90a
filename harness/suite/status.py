"""`stalebench status SUITE`: the trials of a suite's results directory as a table, grouped by status.

Reads only the result files (results/<suite>/suite.yaml and each trial's status.json, metrics.jsonl,
eval.jsonl, config.yaml) through trialdir and the suite schema; imports no Ray. A trial without a
status.json yet (or without a directory) is `pending` (trialdir.read_record).
A `running` trial whose files have not changed for a while may belong to a driver that was killed:
`stalebench run` on the same suite resumes it.

Result files are data, not trusted text: every string from them (trial ids, statuses, error messages)
goes through :func:`printable` before it reaches the terminal, so escape sequences in a file cannot
clear the screen or retitle the terminal, and a malformed file shows as unreadable instead of crashing.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harness.config.run import ConfigError
from harness.store import campaign, trialdir
from harness.store.trialdir import ENDED, PENDING, TrialRecord, is_trial_dir, last_step, read_record
from harness.config.suite import read_suite_yaml

ORDER = ("running", "failed", "diverged", "completed", PENDING)


# ----------------------------------------------------------------------------------------------
# One trial's files
# ----------------------------------------------------------------------------------------------

def printable(text: object) -> str:
    """``str(text)`` with control and other non-printable characters escaped (ESC -> ``\\x1b``,
    newline -> ``\\n``), so a string from a result file cannot drive the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def status_name(record: TrialRecord) -> str:
    """A trial record's status, printable (trialdir.read_record: PENDING when there is no status.json)."""
    return printable(record.status)[:20]


def last_eval(trial_dir: Path, metric: str = "eval/acc", first: bool = False) -> float | None:
    """`metric` in the last (or `first`) row of eval.jsonl that has it."""
    rows = [r for r in trialdir.read_evals(trial_dir) if isinstance(r, dict) and metric in r]
    try:
        return float(rows[0 if first else -1][metric]) if rows else None
    except (TypeError, ValueError):
        return None


def count_statuses(suite_dir: Path, trial_ids: list[str]) -> dict[str, int]:
    """{status: number of trials} from their status.json files (no file yet: "pending")."""
    counts: dict[str, int] = {}
    for t in trial_ids:
        status = status_name(read_record(Path(suite_dir) / t))
        counts[status] = counts.get(status, 0) + 1
    return dict(sorted(counts.items()))


class ProgressLine:
    """The one-line summary a running suite shows: trials done/running/failed, the trial-steps done of all
    (each running trial's own steps beside them), and an ETA; while no step has moved, the phase the trials
    are in (starting their workers, loading the base, evaluating step 0), read from their files. The ETA
    counts down from the plan's projection (`projected_s`, plan.projected_seconds) until steps move, then
    follows this run's pace. Counted from the files, so it is right across resumes and retries."""

    def __init__(self, suite_dir: Path, steps_by_trial: dict[str, int], projected_s: float | None = None):
        self.suite_dir, self.steps_by_trial, self.projected_s = Path(suite_dir), steps_by_trial, projected_s
        self.total = sum(steps_by_trial.values())
        self._t0, self._steps0 = time.time(), self.count()[1]
        self._first: tuple[float, int] | None = None     # (time, steps) when steps first moved: the pace
                                                          # excludes Ray's start-up

    def count(self) -> tuple[dict[str, int], int]:
        counts, steps, _ = self._read()
        return counts, steps

    def _read(self) -> tuple[dict[str, int], int, dict[str, TrialRecord]]:
        counts: dict[str, int] = {}
        steps, running = 0, {}
        for t, n in self.steps_by_trial.items():
            record = read_record(self.suite_dir / t)
            status = status_name(record)
            counts[status] = counts.get(status, 0) + 1
            steps += n if status in ENDED else min(n, last_step(self.suite_dir / t))
            if status == "running":
                running[t] = record
        return counts, steps, running

    def phase(self, running: dict[str, TrialRecord]) -> str:
        """What the trials do before their first step: a trial writes status.json once its base is loaded
        (RunLog.start; `started_at` after this line began: started by this run) and its first eval row
        after evaluating step 0; its directory appears when its worker takes it up."""
        started = [t for t, r in running.items() if (r.data or {}).get("started_at", 0) >= self._t0]
        if any(trialdir.read_evals(self.suite_dir / t) for t in started):
            return "taking the first steps"
        if started:
            return "evaluating step 0 on the held-out set"
        if any(self._taken_up(t) for t in self.steps_by_trial):
            return "loading the base model"
        return "starting the trials' workers"

    def _taken_up(self, trial_id: str) -> bool:
        path = self.suite_dir / trial_id
        return path.is_dir() and path.stat().st_mtime >= self._t0

    def __str__(self) -> str:
        counts, steps, running = self._read()
        now = time.time()
        if self._first is None and steps > self._steps0:
            self._first = (now, steps)
        rate = (steps - self._first[1]) / (now - self._first[0]) if self._first and now > self._first[0] else 0.0
        elapsed = now - self._t0
        if rate > 0:
            eta = _duration((self.total - steps) / rate)
        elif self.projected_s is not None:          # the plan's projection, counted down until steps move
            left = self.projected_s - elapsed
            eta = f"~{_duration(left)} (projected)" if left > 0 else f"? (past the projected {_duration(self.projected_s)})"
        else:
            eta = "?"
        per_trial = ", ".join(f"{min(self.steps_by_trial[t], last_step(self.suite_dir / t))}/{self.steps_by_trial[t]}"
                              for t in list(running)[:8]) + (", ..." if len(running) > 8 else "")
        parts = [f"{sum(counts.get(s, 0) for s in ENDED)}/{len(self.steps_by_trial)} trials done",
                 f"{counts.get('running', 0)} running", f"{counts.get('failed', 0)} failed"]
        if counts.get("diverged"):
            parts.append(f"{counts['diverged']} diverged")
        parts += [f"trial-steps {steps}/{self.total}" + (f" (running: {per_trial})" if per_trial else ""),
                  f"elapsed {_duration(elapsed)}", f"ETA {eta}"]
        return " | ".join(([self.phase(running)] if self._first is None else []) + parts)


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


# ----------------------------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------------------------


def suite_status(results_dir: Path) -> str:
    """A table of the suite's trials (status, step/steps, final eval/acc, last update, error) and counts."""
    results_dir = Path(results_dir)
    expected = _expected_trials(results_dir)          # trial id -> steps, from suite.yaml (may be empty)
    found = sorted(p.name for p in results_dir.iterdir()
                   if is_trial_dir(p) and trialdir.has_status(p)) if results_dir.is_dir() else []
    if not expected and not found:
        landed = printable(campaign.summary(results_dir.name) or "")
        if landed:
            raise ConfigError(f"{results_dir}: not run on this machine; {landed}; `stalebench run` (or `tune`) "
                              f"SUITE_FILE --dry-run counts what is left")
        raise ConfigError(f"{results_dir}: no suite results here (expected results/<suite>/suite.yaml or trial directories)")
    ids = list(expected) + [t for t in found if t not in expected]
    rows = [_row(results_dir / t, expected.get(t)) for t in ids]
    rows.sort(key=lambda r: ORDER.index(r["status"]) if r["status"] in ORDER else len(ORDER))
    width = max(len("trial"), *(len(r["trial"]) for r in rows))
    lines = [f"suite {printable(results_dir.name)}: {printable(results_dir)}",
             f"{'trial':<{width}}  {'status':<9}  {'step':>11}  {'eval/acc':>8}  {'updated':>9}  error"]
    for r in rows:
        acc = f"{r['acc']:.3f}" if r["acc"] is not None else "-"
        lines.append(f"{r['trial']:<{width}}  {r['status']:<9}  {r['step']:>11}  {acc:>8}  {r['updated']:>9}  {r['error']}".rstrip())
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    summary = ", ".join(f"{counts[s]} {s}" for s in sorted(counts, key=lambda s: ORDER.index(s) if s in ORDER else 99))
    lines.append(f"{len(rows)} trials: {summary}")
    landed = printable(campaign.summary(results_dir.name) or "")
    return "\n".join([*lines, *([landed] if landed else [])])


def _expected_trials(results_dir: Path) -> dict[str, int]:
    """Trial id -> train.steps of every trial of results/<suite>/suite.yaml ({} if absent or invalid now)."""
    path = trialdir.suite_file(results_dir)
    if not path.exists():
        return {}
    from harness.config.expand import expand
    try:
        return {t.trial_id: t.config.train.steps for t in expand(read_suite_yaml(path))}
    except ConfigError:
        return {}


def _row(trial_dir: Path, steps: int | None) -> dict[str, Any]:
    record = read_record(trial_dir)
    if steps is None:
        steps = _config_steps(trialdir.read_config(trial_dir))
    step = max(record.step or 0, last_step(trial_dir))
    error = printable(" ".join(record.error[:1000].split()))
    return {"trial": printable(trial_dir.name), "status": status_name(record),
            "step": f"{step}/{steps if steps is not None else '?'}", "acc": last_eval(trial_dir),
            "updated": _age(trial_dir) if record.problem != "missing" else "-",
            "error": error if len(error) <= 90 else error[:87] + "..."}


def _config_steps(config: dict[str, Any] | None) -> int | None:
    """train.steps of a trial's config.yaml (None: no file, an unreadable one, or no train.steps)."""
    train = config.get("train") if isinstance(config, dict) else None
    steps = train.get("steps") if isinstance(train, dict) else None
    return steps if isinstance(steps, int) and not isinstance(steps, bool) else None


def _age(trial_dir: Path) -> str:
    changed = trialdir.modified(trial_dir)
    seconds = max(0, time.time() - changed) if changed is not None else 0
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"


def run_summary(out: Path, counts: dict[str, int], reported: bool) -> str:
    """The end of `stalebench run` (results in ``out``, results/<suite>): the trials by status, then what to
    type next: the status, the report (or, once written, the site of every report) and the MLflow UI."""
    from harness.store.tracking import default_tracking_uri
    store = default_tracking_uri(out.parent).replace(f"sqlite:///{Path.cwd()}/", "sqlite:///")   # relative if under .
    steps = [(f"stalebench status {out}", "trials by status"),
             ("stalebench site", "reports/index.html, every suite's report") if reported else
             (f"stalebench report {out}", "the suite's report, reports/<suite>/index.html"),
             (f"mlflow ui --backend-store-uri {store}", "browse the trials' metrics")]
    width = max(len(command) for command, _ in steps)
    return "\n".join([f"results: {out}   " + ", ".join(f"{k}: {v}" for k, v in counts.items()), "next:",
                      *(f"  {command:<{width}}   # {what}" for command, what in steps)])
