"""Extra report sections: a registry of sources, each adding sections to a suite's report.

Built in: the kept policies' benchmark table (below); the estimator lab registers its sections from
harness/lab/report.py. A section source is a function `(SuiteResults, out_dir) -> [Section]`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness.registry import SECTIONS
from harness.report.load import SuiteResults
from harness.report.render import show
from harness.store import trialdir


@dataclass(frozen=True)
class Section:
    """An extra report section: a title and blocks, each {"text": str}, {"figure": file in out_dir,
    "caption": str} or {"table": {"columns": [str], "rows": [{column: str}]}}. The report's templates
    render them like the rest of the page (every string escaped; tables sortable)."""

    title: str
    blocks: list[dict[str, Any]] = field(default_factory=list)


class SectionSource(Protocol):
    """Sections of one kind for a suite's report: read from the stored files (never computed), figures
    written straight into `out_dir`; [] when the suite has none."""

    def __call__(self, res: SuiteResults, out_dir: Path) -> list[Section]: ...


def report_sections(res: SuiteResults, out_dir: Path) -> list[Section]:
    """Every registered source's sections, in registration order (after the report's own)."""
    return [section for _, source in SECTIONS for section in source(res, out_dir)]


@SECTIONS.register("benchmarks")
def benchmark_sections(res: SuiteResults, out_dir: Path) -> list[Section]:
    """The per-benchmark table of the trials whose kept policy was evaluated (`stalebench eval --trial`
    wrote <trial>/benchmarks/results.json): one row per trial, one column per benchmark, accuracy ±
    standard error (problems)."""
    rows = []
    for r in res.trials.to_dict("records"):
        scores = trialdir.read_benchmarks(res.path / str(r["trial_id"]))
        if scores and isinstance(scores.get("benchmarks"), dict):
            rows.append((r, scores["benchmarks"]))
    if not rows:
        return []
    names = sorted({b for _, scores in rows for b in scores})

    def cell(score: Any) -> str:
        if not isinstance(score, dict) or not isinstance(score.get("acc"), (int, float)):
            return "—"
        err = score.get("acc_stderr")
        return f"{score['acc']:.3f}" + (f" ± {err:.3f}" if isinstance(err, (int, float)) else "") + f" ({score.get('n')})"

    columns = ["trial", "algorithm", "delay", "seed", *names]
    table = [dict(zip(columns, [str(r["trial_id"]), str(r.get("algorithm", "")), show(r.get("delay")),
                                show(r.get("seed")), *(cell(scores.get(b)) for b in names)])) for r, scores in rows]
    text = ("Kept policies (train.save) evaluated with `stalebench eval --trial`: lm-eval on the local benchmark "
            "files, greedy, zero-shot; accuracy ± its standard error (problems).")
    return [Section("Benchmark evaluation", [{"text": text}, {"table": {"columns": columns, "rows": table}}])]
