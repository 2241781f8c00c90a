"""Time ``build_report`` on a synthetic suite of 1,000 trials x 500 steps (eval every 25 steps).

Grid: 5 algorithms x 5 delays x 2 eps x 2 group sizes x 10 seeds = 1,000 trials; each metrics row has
15 metrics. Writing the results is not timed. Target: build_report under 60 s on 2 cores. Wall time
depends on what else runs; the process CPU time printed next to it does not (much).

    python benchmarks/report_speed.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from harness.report import build_report, build_site
from harness.report.synthetic import write_suite


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", type=Path, help="write results and report here instead of a temp dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        t0 = time.perf_counter()
        suite_dir = write_suite(root / "results", "speed", ("grpo", "tic_grpo", "gmc_grpo", "m2po", "bapo"),
                                (0, 4, 8, 16, 32), tuple(range(10)), steps=500, eval_every=25,
                                eps=(0.2, 0.28), group_sizes=(4, 8), collapse_delay=16)
        t1, cpu1 = time.perf_counter(), time.process_time()
        index = build_report(suite_dir, root / "reports" / "speed")
        t2, cpu2 = time.perf_counter(), time.process_time()
        build_site(root / "reports")
        t3 = time.perf_counter()
    print(f"write results (not timed): {t1 - t0:.1f} s")
    print(f"build_report, 1000 trials x 500 steps: {t2 - t1:.1f} s wall, {cpu2 - cpu1:.1f} s CPU "
          f"(target < 60 s wall on 2 cores) -> {index.name}")
    print(f"build_site: {t3 - t2:.2f} s")


if __name__ == "__main__":
    main()
