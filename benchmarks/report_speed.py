"""Time ``build_report`` on synthetic suites of 1,000 (and optionally 10,000) trials x 500 steps.

Grid: 5 algorithms x 5 delays x 2 eps x 2 group sizes x S seeds (S = 10 -> 1,000 trials, S = 100 ->
10,000 trials); eval every 25 steps; each metrics row has 15 metrics. Writing the results is not timed.
Each size is built in a fresh child process (after the written files are synced to disk), which reports
its wall time, its CPU time and that of its forked workers, and the peak resident memory (``ru_maxrss``)
of itself and of its largest worker, so sizes do not share caches or memory. Target: 1,000 trials under ~5 s on an
idle machine. Wall time depends on what else runs; CPU time less so, so each line also prints the load average.

``--formats png png,svg --rounds 3`` builds each size's report with each figure-format list in turn (A B A B ...,
one written suite), so a before/after pair sees the same machine load; ``--baseline DIR`` pairs each build with
one by the code of another checkout DIR (e.g. ``git worktree add /tmp/before <commit>``), in turns.

    python benchmarks/report_speed.py [--sizes 1000 10000] [--formats png [png,svg ...]] [--rounds N] [--keep DIR]
                                      [--baseline CHECKOUT]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

ALGORITHMS = ("grpo", "tic_grpo", "gmc_grpo", "m2po", "bapo")
DELAYS = (0, 4, 8, 16, 32)


def child(suite_dir: Path, out_dir: Path, formats: str) -> None:
    """Build one report in this process and print its timings as JSON (the --child mode)."""
    from harness.report import build_report, build_site
    from harness.report.plotting import parse_formats

    t0, c0 = time.perf_counter(), time.process_time()
    build_report(suite_dir, out_dir, parse_formats(formats))
    t1, c1 = time.perf_counter(), time.process_time()
    build_site(out_dir.parent)
    t2 = time.perf_counter()
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)   # the forked readers and figure workers
    print(json.dumps({"wall_s": t1 - t0, "cpu_s": c1 - c0, "workers_cpu_s": workers.ru_utime + workers.ru_stime,
                      "site_s": t2 - t1, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "worker_peak_rss_mib": workers.ru_maxrss / 1024}))


def write_size(root: Path, trials: int) -> tuple[Path, float]:
    """The synthetic suite of ``trials`` trials, synced to disk, and the seconds writing it took."""
    from tests.fixtures.synthetic_results import write_suite

    seeds = trials // (len(ALGORITHMS) * len(DELAYS) * 4)
    t0 = time.perf_counter()
    suite_dir = write_suite(root / "results", f"speed{trials}", ALGORITHMS, DELAYS, tuple(range(seeds)),
                            steps=500, eval_every=25, eps=(0.2, 0.28), group_sizes=(4, 8), collapse_delay=16)
    write_s = time.perf_counter() - t0
    os.sync()  # the written files reach the disk before the clock starts: the report is timed, not the writeback
    return suite_dir, write_s


def run_size(root: Path, suite_dir: Path, trials: int, formats: str, code: Path = REPO) -> dict[str, float]:
    """One report of the written suite in a fresh child process running the checkout ``code``'s report: its
    timings, and the load average before it."""
    load = os.getloadavg()[0]
    out = root / "reports" / f"speed{trials}-{formats.replace(',', '-')}-{code.name}"
    proc = subprocess.run([sys.executable, code / "benchmarks" / "report_speed.py", "--child", str(suite_dir),
                           str(out), formats], capture_output=True, text=True, check=True, cwd=code)
    return {"trials": trials, "formats": formats, "load": load, **json.loads(proc.stdout.strip().splitlines()[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000],
                        help="trial counts (multiples of 100), e.g. 1000 10000")
    parser.add_argument("--formats", nargs="+", default=["png"],
                        help="figure-format lists to build in turn, e.g. png png,svg (default: png)")
    parser.add_argument("--rounds", type=int, default=1, help="builds of each format list per size (default 1)")
    parser.add_argument("--keep", type=Path, help="write results and reports here instead of a temp dir")
    parser.add_argument("--baseline", type=Path, help="another checkout (e.g. a git worktree of the code before a "
                        "change): each build is paired with one of its code, in turns, on the same suite")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), Path(args.child[1]), args.child[2])
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        for trials in args.sizes:
            suite_dir, write_s = write_size(root, trials)
            print(f"{trials} trials x 500 steps written in {write_s:.0f} s (not timed)", flush=True)
            codes = [REPO, args.baseline.resolve()] if args.baseline else [REPO]
            for _, formats, code in itertools.product(range(args.rounds), args.formats, codes):
                r = run_size(root, suite_dir, trials, formats, code)
                print(f"{r['trials']} trials, --formats {r['formats']}{'' if code == REPO else f' [{code}]'}: "
                      f"build_report {r['wall_s']:.1f} s wall, "
                      f"{r['cpu_s']:.1f} s CPU (+ {r['workers_cpu_s']:.1f} s in worker processes), peak RSS "
                      f"{r['peak_rss_mib']:.0f} MiB (largest worker {r['worker_peak_rss_mib']:.0f} MiB); "
                      f"build_site {r['site_s']:.2f} s; load average {r['load']:.2f}", flush=True)


if __name__ == "__main__":
    main()
