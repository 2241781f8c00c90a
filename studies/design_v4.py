"""Benchmark v4's largest delay, read off its design run by the rule of docs/benchmark-v4.md §3.

    python -m studies.design_v4 results/design-v4                      # the regime map alone
    python -m studies.design_v4 results/design-v4 --tuned-lr 3.981e-05 # + the decision, at gmc_grpo's
                                                                       #   lr tuned at delay 0
    python -m studies.design_v4 campaigns/design-v4                    # the same from the landed trials

The design run (suites/design-v4.yaml) is gmc_grpo alone at lrs L × candidate delays, one design seed, on the
validation split. Per (lr, delay) this prints the mean over the second half of the run's steps of:
`gmc/capped_frac` (the share of groups whose cap binds in gmc_grpo: the rule's quantity),
`is/group_over_cap_frac` (the same share as the trainer measures it on the batch), the median and q90 |Λ|
(`is/traj_abs_log_ratio_q50`, `_q90`), the trajectory ESS fraction, gmc_grpo's mean scale and the per-token
KL to π_b. With --tuned-lr η*: ℓ = the lr of L nearest η* in log (the lower on a tie); D = the smallest
candidate delay at which the cap binds in at least MIN_CAPPED of groups at ℓ, else the delay where it binds
most, with the shortfall stated; the delay grid is 0, D/4, D. Nothing here reads accuracy or the test split.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import tempfile
import statistics
from pathlib import Path

from harness.store import campaign, trialdir

MIN_CAPPED = 0.15            # §3: the cap binds in >= 15% of groups over the second half (peak ~24% at σ ≈ 1.5)
QUANTITIES = {"capped": "gmc/capped_frac", "over_cap": "is/group_over_cap_frac",
              "q50": "is/traj_abs_log_ratio_q50", "q90": "is/traj_abs_log_ratio_q90", "ess": "is/traj_ess_frac",
              "scale": "gmc/scale_mean", "kl": "policy/kl_behavior"}


def load(results: Path) -> dict[tuple[float, int], list[Path]]:
    """(lr, delay) -> finished gmc_grpo trial directories (a results directory, or a campaign folder unpacked)."""
    by: dict[tuple[float, int], list[Path]] = {}
    for d in sorted(Path(results).iterdir()):
        if not trialdir.is_trial_dir(d) or trialdir.read_status(d).get("status") not in trialdir.FINAL:
            continue
        config = trialdir.read_config(d) or {}
        if config.get("algorithm") != "gmc_grpo":
            raise SystemExit(f"design_v4: {d.name} is {config.get('algorithm')!r}; the design run is gmc_grpo alone")
        by.setdefault((float(config["train"]["lr"]), int(config["delay"])), []).append(d)
    if not by:
        raise SystemExit(f"design_v4: {results} holds no finished design trial; run "
                         "`stalebench run suites/design-v4.yaml` first")
    return by


def regime(trials: list[Path]) -> dict[str, float]:
    """Mean over trials of each trial's mean over the second half of its steps (rows that carry the metric)."""
    per_trial = []
    for d in trials:
        rows = trialdir.read_metrics(d)
        last = max(r["step"] for r in rows)
        late = [r for r in rows if r["step"] > last / 2]
        per_trial.append({k: statistics.mean(r[m] for r in late if m in r) for k, m in QUANTITIES.items()
                          if any(m in r for r in late)})
    return {k: statistics.mean(t[k] for t in per_trial) for k in QUANTITIES if all(k in t for t in per_trial)} | {
        "trials": len(per_trial)}


def nearest(lrs: list[float], target: float) -> float:
    return min(sorted(lrs), key=lambda lr: abs(math.log(lr / target)))


def decide(by: dict[tuple[float, int], list[Path]], tuned_lr: float | None) -> dict[str, object]:
    cells = {key: regime(trials) for key, trials in sorted(by.items())}
    out: dict[str, object] = {"cells": [{"lr": lr, "delay": delay, **r} for (lr, delay), r in cells.items()]}
    if tuned_lr is None:
        return out
    lr = nearest(sorted({lr for lr, _ in cells}), tuned_lr)
    at = {delay: r for (l, delay), r in cells.items() if l == lr}
    binding = [delay for delay in sorted(at) if at[delay].get("capped", 0.0) >= MIN_CAPPED]
    largest = binding[0] if binding else max(at, key=lambda delay: at[delay].get("capped", 0.0))
    return {**out, "tuned_lr": tuned_lr, "read_at_lr": lr, "largest_delay": largest,
            "delays": [0, largest // 4, largest], "cap_binds": bool(binding),
            "capped_at_largest": at[largest].get("capped")}


def describe(d: dict) -> str:
    lines = ["lr         delay  capped  over-cap  median|Λ|  q90|Λ|  ESS    scale  KL(π_b)"]
    for c in d["cells"]:
        def f(key: str, fmt: str) -> str:
            return format(c[key], fmt) if key in c else "—"
        lines.append(f"{c['lr']:<10.4g} {c['delay']:>5}  {f('capped', '6.1%')}  {f('over_cap', '7.1%')}  "
                     f"{f('q50', '9.2f')}  {f('q90', '6.2f')}  {f('ess', '5.3f')}  {f('scale', '5.3f')}  "
                     f"{f('kl', '.4f')}")
    if "largest_delay" in d:
        lines.append(f"gmc_grpo's lr tuned at delay 0: {d['tuned_lr']:.4g}; read at the design lr {d['read_at_lr']:.4g}")
        lines.append(f"largest delay D = {d['largest_delay']} (cap binds in {d['capped_at_largest']:.1%} of groups; "
                     f"rule >= {MIN_CAPPED:.0%}): " + ("meets the rule" if d["cap_binds"] else
                                                       "no candidate meets the rule: the shortfall is stated") +
                     f"; delay grid {', '.join(map(str, d['delays']))}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path, help="results/design-v4, or campaigns/design-v4")
    p.add_argument("--tuned-lr", type=float, default=None, help="gmc_grpo's lr tuned at delay 0 (docs/benchmark-v4.md §4)")
    p.add_argument("--json", type=Path, default=None, help="also write the map and the decision as JSON here")
    args = p.parse_args()
    source, unpacked = args.results, None
    if campaign.landed(source):                         # a campaign folder: restore its trials to a scratch dir
        unpacked = Path(tempfile.mkdtemp(prefix="design-v4-"))
        campaign.restore(source, unpacked)
        source = unpacked
    try:
        d = decide(load(source), args.tuned_lr)
    finally:
        if unpacked is not None:
            shutil.rmtree(unpacked, ignore_errors=True)
    print(describe(d))
    if args.json:
        args.json.write_text(json.dumps(d, indent=1) + "\n")


if __name__ == "__main__":
    main()
