"""RunLog: the result files of one trial (through harness/store/trialdir.py), mirrored to a sink.

Resume without duplicates: rows are keyed by step. On resume the local files are cut back to the
checkpoint's step, and the kept rows are offered to the mirror again; a sink skips the steps it already
holds (a deterministic rerun reproduces them).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

from harness.store import trialdir
from harness.store.provenance import mlflow_tags as provenance_tags
from harness.store.tracking.sinks import NullSink, Sink


def _clean(row: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class RunLog:
    """The result files of one trial (and their mirror)."""

    def __init__(self, trial_dir: Path, sink: Sink | None = None, flush_every: int = 50):
        self.dir = Path(trial_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sink = sink or NullSink()
        self.flush_every = flush_every
        self._pending: list[tuple[int, Mapping[str, float]]] = []

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, config: Mapping[str, Any], params: Mapping[str, Any], provenance: Mapping[str, Any],
              resume_step: int = 0) -> None:
        """Write config/params/provenance and mark running; keep rows up to `resume_step` (0 = fresh).

        A damaged row before `resume_step` stops the resume (trialdir.TrialDirError) instead of
        silently dropping the rows after it; a torn last line is a killed writer's and is dropped."""
        trialdir.write_start(self.dir, config, params, provenance)
        self.sink.set_tags(provenance_tags(provenance))
        self.config_sha256 = provenance["config_sha256"]
        self.started_at = time.time()                  # this process's start on the trial (status.json)
        for name in trialdir.ROW_FILES:
            kept = trialdir.truncate_jsonl(self.dir / name, resume_step)
            # Kept rows may never have reached the mirror (it is fed in batches, and the process may
            # have been killed between a row and its flush): offer them again; the sink skips the
            # steps it already holds.
            self._pending.extend((r["step"], _clean({k: v for k, v in r.items() if k != "step"})) for r in kept)
        self.flush()
        self.status("running", step=resume_step)

    def status(self, status: str, step: int, error: str | None = None, diverged_step: int | None = None,
               extra: Mapping[str, Any] | None = None) -> None:
        assert status in trialdir.STATUSES, status
        record = {"trial_id": self.dir.name, "status": status, "step": step, "error": error,
                  "diverged_step": diverged_step, "config_sha256": getattr(self, "config_sha256", None),
                  "started_at": getattr(self, "started_at", None), "updated_at": time.time(), **(extra or {})}
        try:
            if status != "running":
                # The mirror first: a rerun skips a trial whose status.json says it finished, so a kill
                # between the two must leave the trial unfinished, not its last rows unmirrored.
                self.flush()
                if status in trialdir.FINAL:
                    self.sink.log_summary(step, self.summary(diverged_step))
                self.sink.set_status(status, error)
        finally:
            trialdir.write_status(self.dir, record)

    def read_status(self) -> dict[str, Any]:
        return trialdir.read_status(self.dir)

    def summary(self, diverged_step: int | None) -> dict[str, float]:
        """One-number results of a finished trial, as run metrics to sort and filter by in a tracker's UI.
        (Collapse needs the report's rules over the whole suite and is not among them.)"""
        accs = [float(r["eval/acc"]) for r in trialdir.read_evals(self.dir) if "eval/acc" in r]
        out = {"summary/final_acc": accs[-1], "summary/best_acc": max(accs), "summary/start_acc": accs[0]} if accs else {}
        return {**out, "summary/diverged": float(diverged_step is not None),
                **({"summary/diverged_step": float(diverged_step)} if diverged_step is not None else {})}

    def close(self) -> None:
        """Flush and let the mirror archive the record files and let go of the trial (every exit path)."""
        self.flush()
        self.sink.finish(self.dir)

    # -- rows --------------------------------------------------------------------------------
    def metrics(self, step: int, row: Mapping[str, Any]) -> None:
        self._append(trialdir.METRICS, step, row)

    def eval(self, step: int, row: Mapping[str, Any]) -> None:
        self._append(trialdir.EVALS, step, row)

    def side(self, name: str, step: int, row: Mapping[str, Any]) -> None:
        """One row of a per-step side file (trialdir.SIDE_ROWS: the version trace, the log-ratio histograms),
        written beside metrics.jsonl and not mirrored."""
        trialdir.append_side_row(self.dir, name, {"step": step, **row})

    def _append(self, name: str, step: int, row: Mapping[str, Any]) -> None:
        trialdir.append_jsonl(self.dir / name, {"step": step, **row})
        self._pending.append((step, _clean(row)))
        if len(self._pending) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            self.sink.log_rows(self._pending)
        self._pending = []
