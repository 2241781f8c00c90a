"""Token ages of in-flight trials: how many response tokens were how many policy versions old when consumed.

    python benchmarks/token_ages.py results/inflight          # every trial of a suite's results directory
    python benchmarks/token_ages.py results/inflight/grpo-tokens_per_update2-s0

Reads each trial's `is_hist.jsonl` (`token_age_counts`, summed over its steps; written by trials with an
`inflight` section, docs/metrics.md) and prints, per trial, the count and share of tokens at each age with
a bar, and the token-weighted mean and max age. Trials without the counts (no in-flight updates) are listed
as such. Reads result files only (no torch).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.store import trialdir

BAR = 40                       # characters of the longest bar


def token_age_counts(trial: Path) -> list[int]:
    """Tokens by age 0, 1, 2, ... over all of a trial's steps (empty without in-flight updates)."""
    total: list[int] = []
    for row in trialdir.read_side_rows(trial, trialdir.IS_HIST):
        counts = row.get("token_age_counts", [])
        total = [(total[i] if i < len(total) else 0) + (counts[i] if i < len(counts) else 0)
                 for i in range(max(len(total), len(counts)))]
    return total


def render(name: str, counts: list[int]) -> str:
    n = sum(counts)
    if not n:
        return f"{name}: no token ages (not an inflight trial, or no step finished)"
    mean = sum(age * c for age, c in enumerate(counts)) / n
    top = max(counts)
    lines = [f"{name}: {n} tokens, mean age {mean:.3f}, max age {max(a for a, c in enumerate(counts) if c)}",
             "  age   tokens   share"]
    lines += [f"  {age:>3} {c:>8} {c / n:>7.1%}  {'#' * round(BAR * c / top)}" for age, c in enumerate(counts)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", type=Path, help="a suite's results directory, or one trial's directory")
    args = parser.parse_args(argv)
    if not args.path.is_dir():
        print(f"token_ages: {args.path}: not a directory (give a suite's results directory or a trial's)")
        return 2
    trials = [args.path] if (args.path / trialdir.IS_HIST).is_file() else \
        sorted(p for p in args.path.iterdir() if (p / trialdir.IS_HIST).is_file())
    if not trials:
        print(f"token_ages: {args.path}: no trial directory with {trialdir.IS_HIST} (has the suite run?)")
        return 2
    print("\n\n".join(render(t.name, token_age_counts(t)) for t in trials))
    return 0


if __name__ == "__main__":
    sys.exit(main())
