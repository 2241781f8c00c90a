"""The arithmetic of `stalebench tune` (no Ray): a tuned value's objective over its seeds, the best value, a
grid's edge extensions, and the tuned-overrides.yaml they make.

The data is one row per tuning trial (results/<suite>/tune/trials.jsonl): {"algorithm", <tune.param>: the
value, "seed", "status", "objective": tune.metric in the trial's last eval row, the worst value for a
diverged trial or a non-finite metric, None for a trial that failed}. A value's objective is the mean of its
trials' objectives over the tuning seeds; one trial that did not complete with a finite metric makes it the
worst value, so that value is never chosen.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from harness.config.suite import Suite, TuneSpec
from harness.store.safewrite import write_file
from harness.store.trialdir import FINAL


def worst(spec: TuneSpec) -> float:
    """The objective of a trial or value that did not complete with a finite metric."""
    return -math.inf if spec.mode == "max" else math.inf


def trial_objective(spec: TuneSpec, status: str, metric: float | None) -> float | None:
    """One trial's objective: `metric` (its last eval row's tune.metric) when it completed with a finite
    one, None when it failed (no result), else the worst value (diverged, or a non-finite metric)."""
    if status == "completed" and metric is not None and math.isfinite(metric):
        return float(metric)
    return None if status == "failed" else worst(spec)


def trial_row(spec: TuneSpec, trial: Any, status: str | None, metric: float | None) -> dict[str, Any]:
    """trials.jsonl's row of the tuning trial ``trial`` (an expand.Trial) from its status.json's status and
    tune.metric in its last eval row (a status other than completed or diverged counts as failed)."""
    status = status if status in FINAL else "failed"
    return {"algorithm": trial.params["algorithm"], spec.param: trial.params[spec.param], "seed": trial.params["seed"],
            "status": status, "objective": trial_objective(spec, status, metric), "trial_id": trial.trial_id}


def mean_objective(spec: TuneSpec, objectives: list[float | None]) -> float:
    """A value's objective: the mean over its seeds, or the worst value when any trial has no finite one."""
    if not objectives or any(o is None or not math.isfinite(o) for o in objectives):
        return worst(spec)
    return sum(objectives) / len(objectives)


def value_scores(spec: TuneSpec, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per value run, ascending: {"value", "objective" (mean_objective), "ok" (every trial completed
    with a finite metric), "status" (completed, else the first other status), "rows" (its trials by seed)}."""
    by_value: dict[float, list[dict[str, Any]]] = {}
    for row in rows:
        by_value.setdefault(row[spec.param], []).append(row)
    out = []
    for value in sorted(by_value):
        trials = sorted(by_value[value], key=lambda r: (r.get("seed") is None, r.get("seed")))
        ok = all(r["status"] == "completed" and r["objective"] is not None and math.isfinite(r["objective"])
                 for r in trials)
        out.append({"value": value, "objective": mean_objective(spec, [r["objective"] for r in trials]), "ok": ok,
                    "status": next((r["status"] for r in trials if r["status"] != "completed"), "completed"),
                    "rows": trials})
    return out


def best(spec: TuneSpec, scores: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The best value's entry of value_scores (ties: the smaller value), None when no value is ok."""
    sign = 1 if spec.mode == "max" else -1
    ok = [s for s in scores if s["ok"]]
    return max(ok, key=lambda s: (sign * s["objective"], -s["value"])) if ok else None


def edge(spec: TuneSpec, scores: list[dict[str, Any]]) -> str | None:
    """"low" or "high" when the best value is the lowest or highest value run and no other value scores as
    well (a tie with another value means the range already holds a best value), else None."""
    top = best(spec, scores)
    if top is None or len(scores) < 2 or any(s["ok"] and s["objective"] == top["objective"] and s is not top
                                             for s in scores):
        return None
    return "low" if top is scores[0] else "high" if top is scores[-1] else None


def cliff_midpoint(spec: TuneSpec, scores: list[dict[str, Any]]) -> float | None:
    """Where the objective falls off a cliff beside the best value: of the best value's two neighbours, the one
    whose objective is worse by more than `cliff` (the larger fall; on a tie the higher value; a neighbour that
    did not complete falls by infinity), and the geometric midpoint between the two, rounded like the grid's
    values; None when there is no cliff or that midpoint was run."""
    top = best(spec, scores)
    if top is None:
        return None
    i, sign = scores.index(top), 1 if spec.mode == "max" else -1
    falls = [(sign * (top["objective"] - n["objective"]), n["value"]) for n in scores[max(i - 1, 0):i + 2]
             if n is not top]
    fall, value = max(falls, default=(0.0, None))
    if value is None or not fall > spec.cliff:
        return None
    mid = float(f"{math.sqrt(top['value'] * value):.4g}")
    return None if any(s["value"] == mid for s in scores) else mid


def grid_rounds(spec: TuneSpec, run: Callable[[list[float]], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A grid search of one estimator: `run(values)` runs every value on every tuning seed and returns their
    trials' rows. First the grid's `points` values; then, while the best is at an edge (`edge`) and fewer
    than `max_extend` points were added, the next point beyond that edge at the same log step; then, while
    fewer than `max_refine` were added, the midpoint at a cliff beside the best value (`cliff_midpoint`)."""
    below = above = 0
    rows = run(spec.grid_values())
    while below + above < spec.max_extend:
        side = edge(spec, value_scores(spec, rows))
        if side is None:
            break
        below, above = below + (side == "low"), above + (side == "high")
        values = spec.grid_values(below, above)
        rows += run([values[0] if side == "low" else values[-1]])
    for _ in range(spec.max_refine):
        mid = cliff_midpoint(spec, value_scores(spec, rows))
        if mid is None:
            break
        rows += run([mid])
    return rows


def bracket(spec: TuneSpec, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What a grid search of one estimator ran: its values, their bracket, the points added beyond [low,
    high], the best value and whether it is still at an edge (the summary row of trials.jsonl)."""
    scores = value_scores(spec, rows)
    values = [s["value"] for s in scores]
    top, grid = best(spec, scores), spec.grid_values()
    return {"values": values, "bracket": [values[0], values[-1]],
            "extensions": sum(v < grid[0] or v > grid[-1] for v in values),
            "best": None if top is None else top["value"], "at_edge": edge(spec, scores) is not None}


def bracket_line(spec: TuneSpec, summary: dict[str, Any]) -> str:
    """The printed verdict of a grid search: its bracket, best value and, where it holds, "best at the edge
    of the range after N extensions"."""
    lo, hi = summary["bracket"]
    text = (f"{len(summary['values'])} values in [{lo:g}, {hi:g}] ({summary['extensions']} added beyond "
            f"[{spec.low:g}, {spec.high:g}]); best {spec.param}="
            + ("none (no value completed)" if summary["best"] is None else f"{summary['best']:g}"))
    if summary["at_edge"]:
        text += f"; best at the edge of the range after {summary['extensions']} extensions"
    return text


def write_overrides(suite: Suite, spec: TuneSpec, results: dict[str, list[dict[str, Any]]], suite_dir: Path,
                    header: list[str]) -> Path:
    """results/<suite>/tuned-overrides.yaml: the best value per estimator as a suite `overrides:` mapping,
    after comments saying how it was tuned (`header`: the method, seeds, split) and every value tried."""
    chosen, lines = {}, []
    for algorithm, rows in results.items():
        scores = value_scores(spec, rows)
        if spec.method == "grid":
            lines.append(f"#   {algorithm}: {bracket_line(spec, bracket(spec, rows))}")
        lines += [f"#   {algorithm:<10} {spec.param}={s['value']:.3e}  {spec.metric}={_objective_text(s)}  "
                  f"({s['status']})" for s in scores]
        top = best(spec, scores)
        if top is not None:
            chosen[algorithm] = {spec.param: float(f"{top['value']:.4g}")}
    missing = sorted(set(results) - set(chosen))
    text = [
        f"# Tuned {spec.param} per estimator for suite {suite.name} by `stalebench tune` on {time.strftime('%Y-%m-%d %H:%M')}:",
        *header,
        "# To use: copy the `overrides:` mapping into a suite file as its top-level `overrides:` key (keep only",
        "# the estimators that suite runs; the loader rejects overrides for estimators it does not use).",
        *([f"# No completed trial for: {', '.join(missing)} (no override written)."] if missing else []),
        "# Trials:", *lines, ""]
    path = suite_dir / "tuned-overrides.yaml"
    write_file(path, "\n".join(text) + yaml.safe_dump({"overrides": chosen}, sort_keys=False))
    return path


def _objective_text(score: dict[str, Any]) -> str:
    """A value's objective as the file lists it: a single trial's as it is; a mean with each seed's."""
    trials = score["rows"]
    if len(trials) == 1:
        return _number(trials[0]["objective"], "")
    each = ", ".join(f"{r.get('seed')}: {_number(r['objective'], '.4g')}" for r in trials)
    return f"{score['objective']:.4g} (mean over seeds {each})"


def _number(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)
