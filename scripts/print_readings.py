"""Print a committed report's first-screen readings from its results.json: each cell's regime, the staleness
penalty with its pair tests and whether each curve is flat at the reference delay, and every standing with the
leave-one-seed-out count of its pairs.

    python scripts/print_readings.py reports/reference-v3 [reports/reference-v3-bridge ...]

Reads results.json only (written by `stalebench report`; docs/report.md names every field).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def _num(v: Any, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


def readings(bundle: dict[str, Any]) -> list[str]:
    """The lines printed for one results.json."""
    out = ["regime (per cell: second half of each trial, mean over its trials):",
           "  table | estimator | delay | staleness mean (max) | trials | median |Λ| | q90 |Λ| | ESS/B | "
           "over G(1+ε) | cap scale | KL to π_b"]
    for c in bundle.get("cell_regime", []):
        out.append(f"  {c['slice'] or '-'} | {c['algorithm']} | {c['delay']:g} | {_num(c['stale_mean'], '.3g')} "
                   f"({_num(c['stale_max'], 'g')}) | {c['trials']} | {_num(c['median_abs_log_ratio'], '.3f')} | "
                   f"{_num(c['q90_abs_log_ratio'], '.3f')} | {_num(c['traj_ess'], '.3f')} | "
                   f"{_num(None if c['over_cap'] is None else 100 * c['over_cap'], '.1f')}% | "
                   f"{_num(c['cap_scale'], '.4f')} | {_num(c['kl_behavior'], '.4f')}")
    out.append("staleness penalty (accuracy at the smallest delay minus at the delay, 95% interval):")
    for p in bundle.get("staleness_penalty", []):
        how = "matched seeds, t" if p["paired"] else "Welch"
        out.append(f"  {p['slice'] or '-'} | {p['estimator']} | {p['reference_delay']:g} -> {p['delay']:g} | "
                   f"{p['penalty']:+.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}] | {p['seeds']} seeds, {how}")
    for t in bundle.get("penalty_tests", []):
        out.append(f"  penalty {t['a']} - {t['b']} at delay {t['delay']:g}: {t['difference']:+.3f}, {t['method']} "
                   f"p {t['p']:.2g}, Holm {t['p_holm']:.2g}{' (resolved)' if t['resolved'] else ''}")
    for h in bundle.get("horizon", []):
        out.append(f"  curve of {h['estimator']} at delay {h['delay']:g}{' (' + h['slice'] + ')' if h['slice'] else ''}: "
                   f"{h['words']} (acc({h['last_step']}) - acc({h['mid_step']}) {h['rise']:+.3f}, SE {h['se']:.3f}, "
                   f"{h['seeds']} seeds)")
    out.append("standings (leave-one-seed-out: tables in which the pair stays resolved):")
    for s in bundle.get("standings", []):
        out.append(f"  {s['slice'] or '-'} | {s['estimator']} | {s.get('answer_loso', s['answer'])}")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reports", type=Path, nargs="+")
    for report in ap.parse_args(argv).reports:
        path = report / "results.json"
        if not path.is_file():
            raise SystemExit(f"{path}: no results.json; give a report directory written by `stalebench report`")
        print(f"== {report}")
        print("\n".join(readings(json.loads(path.read_text(encoding="utf-8")))))


if __name__ == "__main__":
    main()
