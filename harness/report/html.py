"""Build a suite's HTML report (``build_report``) and the leaderboard site over all suites (``build_site``).

Output of ``build_report`` in ``reports/<suite>/``: index.html, a PNG per figure (and an SVG with
``formats=("png", "svg")``), results.json
(a versioned bundle, ``schema_version`` 2), leaderboard.csv / cells.csv / trials.csv, and the paper table
as paper_table.md / .tex / .txt (``paper.closing_table`` returns the .txt for the CLI). Templates are
Jinja2 with autoescaping on: every string from results files (suite name, notes, algorithm names,
errors) is rendered as text. The page is static and works offline from file:// (inline CSS and JS).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
import numpy as np
import pandas as pd

from harness.registry import FIGURES
from harness.store.archive import ARCHIVE_NAME, TUNE_ARCHIVE_NAME
from harness.store.safewrite import write_file
from harness.store.untrusted import display, one_line
from harness.store.untrusted_json import read_json_file
from harness.report import figures as fig
from harness.report import checks, horizon, importance, paper, penalty, regime, resolve, stats, tables
from harness.report.load import SuiteResults, load_results
from harness.report.parallel import Failed, fork_map
from harness.report.provenance import ProvenanceSummary, rendering_info, summarize
from harness.config.suite import DEFAULT_BASELINE
from harness.report.sections import Section, report_sections
from harness.report.site_order import site_order
from harness.report.slice import slice_header
from harness.report.render import Column, cell_rows, leaderboard_columns, show, trial_columns, unfinished_columns

SCHEMA_VERSION = 2
MAX_BUNDLE_BYTES = 256 * 2**20   # a committed results.json read by build_site
DOCS_URL = "../../docs/report.md"  # reports/<suite>/index.html -> the repository's docs/report.md
TEMPLATES = Path(__file__).with_name("templates")


def suite_slug(name: str) -> str:
    """A safe directory name for a suite: runs of other characters than [A-Za-z0-9._-] become '-'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "suite"


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def _jsonable(value: Any) -> Any:
    """Recursively convert numpy scalars and containers to JSON types; NaN and +-inf become null."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame's rows as results.json holds them (JSON types; NaN as null)."""
    return _jsonable(df.to_dict(orient="records"))


_records = records


def build_report(results_dir: Path, out_dir: Path | None = None,
                 formats: tuple[str, ...] = ("png",)) -> Path:
    """Write the report of ``results_dir`` (results/<suite>) and return the path of its index.html.

    ``out_dir`` defaults to ``reports/<suite>`` (the suite name made filesystem-safe); every figure is
    written in each of ``formats`` (``plotting.FORMATS``; PNG alone by default). Raises ValueError for a
    missing results dir, one without suite.yaml, or one without trials.
    """
    res = load_results(Path(results_dir))
    out_dir = Path(out_dir) if out_dir is not None else Path("reports") / suite_slug(res.name)
    _check_out_dir(out_dir)
    own = fig.figure_settings(res.settings.figures)          # refused in one line before anything is written
    figures_out = fig.Output(out_dir, tuple(formats))
    out_dir.mkdir(parents=True, exist_ok=True)
    a = tables.analyse(res)
    plot = fig.PlotData.build(a, res.metrics, res.diagnostic_keys)
    jobs = {name: partial(figure, a, plot, figures_out, **({"settings": own[name]} if name in own else {}))
            for name, figure in FIGURES}                                                 # page order
    figures, not_drawn = _draw_figures(jobs)
    figures += importance.importance_figures(a.cell_trials, res.importance, figures_out, res.settings.baseline)
    standings = resolve.standings(a.cell_trials, a.pairs)
    own = regime.cell_regime(res.metrics, a.cell_trials, ["slice", "algorithm", "delay"])
    costs, cost_tests = penalty.penalties(a.cell_trials)
    curves = horizon.horizons(a.cell_trials, a.scored_evals)
    labels = {float(r["delay"]): regime.staleness_label(r["delay"], r["stale_mean"], r["stale_max"])
              for r in own.to_dict("records")}
    first = [_section_record(s) for s in [*regime.regime_section(own),
                                           *penalty.penalty_section(costs, cost_tests, labels, curves)]]
    extras = [_section_record(s) for s in [*_standings(standings), *_resolved_pairs(a.pairs),
                                            *report_sections(res, out_dir)]]
    prov = summarize(res.provenance)
    rendered = rendering_info(res.suite_sha256)
    papers = paper.paper_tables(a, res.suite)
    exports = paper.write_exports(papers, res.name, out_dir)

    context = _page_context(res, a, figures, extras, prov, rendered, papers, exports)
    missing, started = checks.not_finished(res.expected, a.trials.to_dict("records"))
    unfinished = checks.partial_suite(missing, started, len(res.expected))
    context["warnings"] = (unfinished + list(res.plan_notes)
                           + context["warnings"]
                           + not_drawn + _invalid_trials(a.trials))
    context["docs_url"] = docs_url(out_dir)
    context["first"] = first
    context["staleness_note"] = regime.staleness_note(labels)
    context["slice"] = slice_header(res.suite, a.trials, [k for k in res.param_keys if k != "seed"])
    page = _env().get_template("report.html.j2").render(**context)
    write_file(out_dir / "index.html", page)
    for name, frame in (("leaderboard.csv", a.board), ("cells.csv", a.cells), ("trials.csv", a.trials)):
        write_file(out_dir / name, frame.to_csv(index=False))
    bundle = {
        "schema_version": SCHEMA_VERSION,
        "suite": res.name,
        "baseline": res.settings.baseline,
        "largest_delay": a.top_delay,
        "collapse_rules": asdict(res.settings.collapse),
        "min_confident_seeds": stats.MIN_CONFIDENT_SEEDS,
        "leaderboard": _records(a.board),
        "cells": _records(a.cells),
        "trials": _records(a.trials),
        "staleness": _records(a.staleness),
        "paper_tables": [t.record() for t in papers],
        "pair_tests": [{**asdict(t), "fragile": resolve.is_fragile(t.loso_resolved, t.loso_tables)} for t in a.pairs],
        "standings": [{**asdict(t), "answer": t.answer, "answer_loso": t.answer_loso, "fragile": t.fragile}
                      for t in standings],
        "cell_regime": _records(own),
        "staleness_penalty": [asdict(p) for p in costs],
        "penalty_tests": [asdict(t) for t in cost_tests],
        "horizon": [h.record() for h in curves],
        "ranking_agreement": _records(a.agreement),
        "figures": [asdict(f) for f in figures],
        "provenance": {"fields": prov.fields, "warnings": prov.warnings, "trials": prov.n_trials,
                       "missing": prov.n_missing, "started_utc": prov.started},
        "rendered": rendered,
        **({"missing_trials": missing, "partial_suite": unfinished[0]} if missing else {}),   # a partial suite
    }
    write_file(out_dir / "results.json", json.dumps(_jsonable(bundle), indent=1, allow_nan=False))
    return out_dir / "index.html"


OUTPUT_FILES = ("index.html", "results.json", "leaderboard.csv", "cells.csv", "trials.csv")


def partial_line(index: Path) -> str:
    """A built report's (its index.html) partial-suite warning, the first of its page, for the terminal; "" when
    every planned trial has a result."""
    return json.loads((Path(index).parent / "results.json").read_text(encoding="utf-8")).get("partial_suite", "")


def docs_url(out_dir: Path) -> str:
    """The link from a page in ``out_dir`` to docs/report.md of the repository it is written into (the
    nearest parent holding docs/report.md: ``../../docs/report.md`` from reports/<suite>/, one more ``../``
    from reports/claims/lab/); DOCS_URL when it is written outside a repository."""
    here = Path(out_dir).resolve()
    for depth, parent in enumerate(here.parents, start=1):
        if (parent / "docs" / "report.md").is_file():
            return "../" * depth + "docs/report.md"
    return DOCS_URL


def _check_out_dir(out_dir: Path) -> None:
    """Refuse, before anything is written, an output directory that is a file or holds a directory where
    the report writes a file (a half-written report otherwise)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out {display(out_dir)}: exists and is not a directory; give a directory")
    for parent in out_dir.parents:
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"--out {display(out_dir)}: {display(parent)} is not a directory")
    for name in (*OUTPUT_FILES, *paper.FILES.values(), ARCHIVE_NAME, TUNE_ARCHIVE_NAME):
        if (out_dir / name).is_symlink():
            raise ValueError(f"--out {display(out_dir)}: {name} there is a symbolic link; stalebench does not write "
                             f"through links (remove it or give another --out)")
        if (out_dir / name).exists() and not (out_dir / name).is_file():
            raise ValueError(f"--out {display(out_dir)}: {name} there is not a regular file (a directory?); "
                             f"remove it or give another --out")


def _invalid_trials(trials: pd.DataFrame) -> list[str]:
    """One page warning per trial that breaks a rule of report/checks.py, and one stderr line for all."""
    bad = trials[trials["status"] == checks.INVALID]
    lines = checks.not_counted(bad["trial_id"], bad["notes"])
    if lines:
        first = "; ".join(lines[:2])
        more = f" (and {len(lines) - 2} more; see the report's warnings)" if len(lines) > 2 else ""
        print(f"stalebench: warning: {len(lines)} trial(s) break a rule of their files and are not counted: "
              f"{one_line(first, 300)}{more}", file=sys.stderr)
    return lines


# The facet grids (one panel per delay and slice) take longest: drawn first, so the workers finish together.
SLOW_FIGURES = ("learning", "survival", "diagnostics")


def _draw_figures(jobs: dict[str, Callable[[], fig.FigureOut | None]]) -> tuple[list[fig.FigureOut], list[str]]:
    """Draw the figures (independent and CPU-bound in matplotlib) with ``fork_map``, the slow ones first;
    return those drawn, in page order, and one warning per figure that failed (also on stderr): the
    rest of the report is still written."""
    names = sorted(jobs, key=lambda n: n not in SLOW_FIGURES)
    made = dict(zip(names, fork_map([jobs[n] for n in names], isolate=True)))
    failed = [f"figure '{n}' was not drawn: {made[n].reason}" for n in jobs if isinstance(made[n], Failed)]
    for line in failed:
        print(f"stalebench: warning: {one_line(line, 400)}", file=sys.stderr)
    return [made[n] for n in jobs if made[n] is not None and not isinstance(made[n], Failed)], failed


def _page_context(res: SuiteResults, a: tables.Analysis, figures: list[fig.FigureOut],
                  extras: list[dict[str, Any]], prov: ProvenanceSummary, rendered: dict[str, Any],
                  papers: list[paper.PaperTable], exports: dict[str, str]) -> dict[str, Any]:
    """Everything report.html.j2 renders; table cells are pre-formatted by ``render`` / ``paper``."""
    columns = leaderboard_columns(a.other, res.settings.baseline)
    per_delay = [(show(d), cell_rows(tables.ranked(a.cells[a.cells["delay"] == d], a.unranked), columns))
                 for d in sorted(a.cells["delay"].dropna().unique(), key=tables._sort_key)]
    unfinished = a.trials[a.trials["status"] != "completed"]
    alarms = [f"Realized staleness after the warm-up differs from the configured delay {show(s['delay'])}: "
              f"mean stale/mean {s['stale_mean']:.2f} over {s['trials']} trials, where the delay gives "
              f"{s['expected']:.2f}"
              for s in a.staleness.to_dict("records") if s["differs"]]
    low = bool((a.board["seeds"] < stats.MIN_CONFIDENT_SEEDS).any()) if len(a.board) else False
    return {
        "suite": res.name,
        "notes": res.suite.notes,
        "baseline": res.settings.baseline,
        "top_delay": show(a.top_delay),
        "leaderboard": {"columns": columns, "rows": cell_rows(a.board, columns)},
        "per_delay": per_delay,
        "status_total": tables.status_counts(a.trials["status"]),
        "unfinished": {"columns": unfinished_columns(), "rows": cell_rows(unfinished, unfinished_columns())},
        "trials": {"columns": trial_columns(a.other), "rows": cell_rows(a.trials, trial_columns(a.other))},
        "figures": figures,
        "rules": res.settings.collapse.describe(),
        "staleness": [{**s, "delay": show(s["delay"])} for s in a.staleness.to_dict("records")],
        "extras": extras,
        "provenance": prov,
        "rendered": rendered,
        "warnings": prov.warnings + alarms,
        "low_confidence": low,
        "min_seeds": stats.MIN_CONFIDENT_SEEDS,
        "unranked": a.unranked,
        "statistic": a.statistic,                    # the template asks it (its fallback, its name)
        "cell_rule": stats.cell_rule(a.statistic, "CI"),
        "agreement": [{"a": r["slice_a"], "b": r["slice_b"], "n": r["estimators"],
                       "tau": "—" if not np.isfinite(r["tau"]) else f"{r['tau']:.2f}"}
                      for r in a.agreement.to_dict("records")],
        "papers": [{"caption": t.caption(res.name), "header": paper.header(t), "rows": paper.text_rows(t),
                    "footer": paper.footer(t),
                    "best": [[bool(c and c.best) for c in r.cells] for r in t.rows]} for t in papers],
        "exports": exports,
    }


def _standings(standings: list[resolve.Standing]) -> list[Section]:
    """The "Standing at the largest delay" section: each estimator's one-line answer and its pair with the
    rival of highest mean (resolve.standings); [] when no pair was tested."""
    if not standings:
        return []
    rows = [{"table": t.slice or "\u2014", "estimator": t.estimator, "mean": f"{t.mean:.3f}" if np.isfinite(t.mean) else "\u2014",
             "answer (one seed left out: k of n tables)": t.answer_loso,
             "against the rival (highest other mean)": _rival(t)} for t in standings]
    text = ("Each estimator at the largest delay, by one rule over the resolved pairs (exact permutation test on "
            "the means, Holm over the table): best when resolved above every other estimator, below X when X is "
            "resolved above it, else not resolved from the best. The last column is its pair with the other "
            "estimator of highest mean: its difference of means, adjusted p and, when resolved, in how many "
            "tables with one seed left out it stays resolved. Beside each estimator named in an answer: in how "
            f"many tables with one seed left out that pair stays resolved; fragile when fewer than "
            f"{resolve.FRAGILE_SHARE:.0%} of them (fewer than 6 of 8).")
    return [Section("Standing at the largest delay", [{"text": text},
                                                      {"table": {"columns": list(rows[0]), "rows": rows}}])]


def _rival(t: resolve.Standing) -> str:
    """E.g. "m2po: +0.041, p (Holm) 0.038; one seed left out: 2 of 8" (the difference is t's minus the rival's)."""
    r = t.rival
    if r is None:
        return "\u2014"
    other, diff = (r.b, r.mean_diff) if r.a == t.estimator else (r.a, -r.mean_diff)
    held = f"; one seed left out: {_loso(r)}" if r.resolved else ""
    return f"{other}: {diff:+.3f}, p (Holm) {r.p_holm:.2g}{held}"


def _loso(t: resolve.PairTest) -> str:
    fragile = ", fragile" if resolve.is_fragile(t.loso_resolved, t.loso_tables) else ""
    return f"{t.loso_resolved} of {t.loso_tables}{fragile}"


def _resolved_pairs(pairs: list[resolve.PairTest]) -> list[Section]:
    """The "Resolved pairs" section: each resolved pair, the higher estimator first, with its difference of
    means, Holm-adjusted p and leave-one-seed-out count (resolve.py); [] when no pair is resolved."""
    rows = [{"table": t.slice or "\u2014", "delay": show(t.delay),
             "higher > lower": f"{resolve.higher(t)} > {t.b if resolve.higher(t) == t.a else t.a}",
             "difference of means": f"{abs(t.mean_diff):.3f}", "seeds": f"{t.seeds_a} / {t.seeds_b}",
             "p (Holm)": f"{t.p_holm:.2g}",
             "stays resolved, one seed left out": _loso(t)}
            for t in pairs if t.resolved]
    if not rows:
        return []
    text = ("Every pair the paper tables resolve (exact permutation test on the seeds' mean final accuracy, "
            f"Holm-adjusted over each table's pairs, family-wise {resolve.ALPHA:.0%}). The last column tests each "
            "table again once per seed with that seed left out of every cell: in how many of those tables the pair "
            "is still resolved. A pair that survives every one rests on no single seed.")
    return [Section("Resolved pairs", [{"text": text}, {"table": {"columns": list(rows[0]), "rows": rows}}])]


def _section_record(section: Section) -> dict[str, Any]:
    """A Section for report.html.j2: text, figures, and tables in the table macro's format."""
    blocks = []
    for b in section.blocks:
        if "table" in b:
            columns = [Column(str(c), _text_cell(str(c)), numeric=False) for c in b["table"]["columns"]]
            blocks.append({"kind": "table", "columns": columns, "rows": cell_rows(pd.DataFrame(b["table"]["rows"],
                                                                                            columns=list(b["table"]["columns"])), columns)})
        elif "figure" in b:
            blocks.append({"kind": "figure", "file": quote(str(b["figure"])), "caption": str(b.get("caption", ""))})
        else:
            blocks.append({"kind": "text", "text": str(b.get("text", ""))})
    return {"title": section.title, "blocks": blocks}


def _text_cell(key: str):
    """A table cell shown as the producer formatted it, sorted as text."""
    return lambda r: (str(r.get(key, "")), str(r.get(key, "")))


def build_site(reports_root: Path = Path("reports")) -> Path:
    """Write ``reports_root/index.html`` listing every suite report's leaderboard (from each
    ``<suite>/results.json``) with links to the suite pages. Raises ValueError if the root is missing."""
    reports_root = Path(reports_root)
    if not reports_root.is_dir():
        raise ValueError(f"reports dir {reports_root} does not exist; run `stalebench report "
                         "results/<suite>` first")
    suites = []
    bundles = sorted([*reports_root.glob("*/results.json"), *reports_root.glob("*/*/results.json")])
    for bundle_path in bundles:       # reports/<suite>/ and a study's reports, as reports/claims/lab/
        where = bundle_path.parent.relative_to(reports_root).as_posix()
        entry: dict[str, Any] = {"dir": where, "href": quote(where) + "/index.html"}
        try:
            bundle = read_json_file(bundle_path, "results.json", MAX_BUNDLE_BYTES)    # untrusted: bounded, strict
            if bundle.get("schema_version") != SCHEMA_VERSION:
                raise ValueError(f"schema_version {bundle.get('schema_version')!r}, "
                                 f"expected {SCHEMA_VERSION}")
            board = pd.DataFrame(bundle["leaderboard"])
        except (OSError, ValueError, AttributeError, KeyError, TypeError) as exc:
            suites.append({**entry, "error": f"unreadable results.json: {type(exc).__name__}: {one_line(str(exc), 200)}"})
            continue
        columns = leaderboard_columns([], bundle.get("baseline", DEFAULT_BASELINE), compact=True)
        prov = bundle.get("provenance")
        started = prov.get("started_utc") if isinstance(prov, dict) else None     # [first start, last start]
        suites.append({**entry, "error": "", "suite": bundle.get("suite", entry["dir"]),
                       "started": str((started[0] if isinstance(started, list) and started else started) or ""),
                       "largest_delay": show(bundle.get("largest_delay")),
                       "date": rendered.get("date_utc", "") if isinstance(rendered := bundle.get("rendered"), dict) else "",
                       "columns": columns, "rows": cell_rows(board, columns)})
    studies = [{"href": quote(p.parent.relative_to(reports_root).as_posix()) + "/index.html",
                "title": display(p.parent.name)} for p in sorted(reports_root.glob("*/index.html"))
               if not (p.parent / "results.json").is_file()]     # pages over several suites (reports/claims/)
    html = _env().get_template("site.html.j2").render(suites=site_order(suites), studies=studies)
    out = reports_root / "index.html"
    write_file(out, html)
    return out
