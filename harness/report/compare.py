"""`stalebench compare A B`: two suites' results side by side, cell by cell, with the difference and its
95% interval (before/after a code change, two learning rates, two machines).

Cells are matched on the cell keys both suites share (estimator, delay, and any other grid key); the
per-seed final accuracies are the report's (diverged trials score 0 from the divergence on), and the
cells and their difference use the statistic both suites' reports print (``report.statistic``; suites that
print different ones are refused): ``stats.difference_estimate``, for the IQM a bootstrap with >= 5 seeds a
side and Welch t below, marked `*`; for the mean the mean difference with Welch's t interval. "differs" means
the interval excludes 0. Below the cells, per delay (and other shared key), Kendall's tau-b between the two suites' rankings of the estimators by that point estimate
(``significance.kendall_tau``): how far a ranking carries from one suite to the other (another base, another
machine), whether or not any single difference is resolved. B may vary grid keys A does not (the other bases
of suites/reference-v2-bases.yaml against the main table): each of its slices is set against A's cells.
A and B may be committed report directories: ``compare_committed`` reads their raw.tar.gz. A trial that breaks
a rule of report/checks.py (the report's) is left out of its cell and named below the notes, as the report
warns of it.
"""
from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np

from harness.report import checks, significance, stats
from harness.report.load import load_results
from harness.report.tables import FINISHED, analyse
from harness.store.archive import committed_results
from harness.store.untrusted import one_line


def _finals(results_dir: Path) -> tuple[str, dict[tuple, np.ndarray], list[str], stats.Statistic, list[str]]:
    """The suite's name, its cells' per-seed final accuracies, its cell keys, its statistic, and one line per
    invalid trial left out (report/checks.py: the report's rules, and its words)."""
    res = load_results(Path(results_dir))
    a = analyse(res)
    keys = ["algorithm", "delay", *a.other]
    done = a.cell_trials[a.cell_trials["status"].isin(FINISHED)]
    cells = {}
    for values, group in done.groupby(keys, dropna=False, sort=True):
        values = values if isinstance(values, tuple) else (values,)
        cells[tuple(values)] = group["final_acc"].to_numpy(dtype=float)
    bad = a.trials[a.trials["status"] == checks.INVALID]
    return res.name, cells, keys, a.statistic, checks.not_counted(bad["trial_id"], bad["notes"])


def compare(a_dir: Path, b_dir: Path, labels: tuple[str, str] | None = None) -> str:
    """The side-by-side text; LABELS name A and B in it (default: the directories), e.g. the committed
    report directories whose raw.tar.gz were unpacked into A and B."""
    label_a, label_b = labels or (str(a_dir), str(b_dir))
    name_a, cells_a, keys_a, statistic, dropped_a = _finals(a_dir)
    name_b, cells_b, keys_b, statistic_b, dropped_b = _finals(b_dir)
    if statistic_b != statistic:
        raise ValueError(f"{label_a} prints the {statistic.name} and {label_b} the {statistic_b.name} of each cell "
                         f"(report.statistic); compare suites whose reports print the same statistic")
    extra = [k for k in keys_b if k not in keys_a]          # B's own slices (e.g. its bases), each set against A
    if [k for k in keys_b if k not in extra] != keys_a:
        raise ValueError(f"{label_a} and {label_b} vary different grid keys ({', '.join(keys_a)} vs "
                         f"{', '.join(keys_b)}); compare suites with the same axes, or B with more (pass the suite "
                         f"with fewer as A)")
    on_a = lambda key: tuple(v for k, v in zip(keys_b, key) if k not in extra)   # noqa: E731  B's cell -> A's
    common = sorted((key for key in cells_b if on_a(key) in cells_a), key=lambda k: tuple(str(v) for v in k))
    if not common:
        raise ValueError(f"{label_a} and {label_b} have no cell (estimator, delay, ...) in common")
    head = [*keys_b, f"A {name_a}", f"B {name_b}", "B - A [95% CI]", ""]
    rows = []
    for key in common:
        ea, eb = (stats.estimate(c, statistic=statistic) for c in (cells_a[on_a(key)], cells_b[key]))
        d = stats.difference_estimate(cells_b[key], cells_a[on_a(key)], statistic=statistic)
        interval = f" [{d.lo:+.3f}, {d.hi:+.3f}]" if d.method != "none" else " (no interval)"
        differs = d.method != "none" and (d.lo > 0 or d.hi < 0)
        rows.append([*map(str, key), f"{ea.point:.3f} (n={ea.n})", f"{eb.point:.3f} (n={eb.n})",
                     f"{d.point:+.3f}{interval}{'*' if d.low_confidence and d.method != 'none' else ''}",
                     "differs" if differs else ""])
    taus = []
    for rest in sorted({key[1:] for key in common}, key=lambda k: tuple(str(v) for v in k)):
        at = {key[0]: stats.estimate(cells_a[on_a(key)], statistic=statistic).point for key in common if key[1:] == rest}
        bt = {key[0]: stats.estimate(cells_b[key], statistic=statistic).point for key in common if key[1:] == rest}
        tau, n = significance.kendall_tau(at, bt)
        if n >= 3:
            where = ", ".join(f"{k}={v}" for k, v in zip(keys_b[1:], rest))
            taus.append(f"Kendall's tau-b of the rankings at {where}: "
                        + (f"{tau:+.2f}" if tau == tau else "undefined (one side is all ties)") + f" over {n} estimators")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
    only = len(set(cells_a) ^ {on_a(key) for key in cells_b})
    notes = [f"A = {label_a}, B = {label_b}: final held-out accuracy per cell ({len(common)} cells in common"
             + (f", {only} in only one" if only else "") + ").",
             f"Difference: {stats.difference_rule(statistic)}; 'differs' = the interval excludes 0."]
    for side, dropped in (("A", dropped_a), ("B", dropped_b)):
        if dropped:
            more = f" (and {len(dropped) - 3} more)" if len(dropped) > 3 else ""
            notes.append(f"{side}: {len(dropped)} invalid trial(s) left out: " + one_line("; ".join(dropped[:3]), 600) + more)
    return "\n".join([*notes, line(head), *map(line, rows), *taus])


def compare_committed(a: Path, b: Path) -> str:
    """``compare`` of two results directories or committed report directories (reports/reference-v3): a
    report's raw.tar.gz is unpacked for the comparison and removed afterwards."""
    with contextlib.ExitStack() as stack:
        return compare(*(stack.enter_context(committed_results(d)) for d in (a, b)), labels=(str(a), str(b)))
