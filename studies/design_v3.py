"""Benchmark v3's design decisions, read off its design run by the rules of docs/benchmark-v3.md §3–§4.

    python -m studies.design_v3 results/design-v3            # after `stalebench run suites/design-v3.yaml`
    python -m studies.design_v3 results/design-v3 --json out.json

The design run (suites/design-v3.yaml) is grpo alone at delay 0 and at the largest delay considered, on seeds
never reported, evaluated on the validation split. From its trial files this prints, each with the numbers it
rests on:

1. the regime at each stale delay: per trial the mean over the second half of its steps of the median |Λ|
   (`is/traj_abs_log_ratio_q50`) and of the share of groups over G(1+ε) (`is/group_over_cap_frac`), then the
   mean over seeds; a delay passes if both reach MIN_Q50 and MIN_OVER; the largest delay D is the smallest
   delay that passes, else the one closest by min(q50 / MIN_Q50, over / MIN_OVER);
2. the step budget B: the smallest of BUDGETS at which the delay-0 curve (mean over seeds) gains less over
   the last quarter of B than one binomial SE of a validation evaluation, else the largest, truncated;
3. the costs: c, the mean `perf/step_s` of the delay-D trials, and e, the seconds of one validation
   evaluation (the delay-0 trials' wall time less their steps, over their evaluations);
4. the cut: E estimators for tuning and the main table, whether the table keeps delay D/4, and E' for the
   k = 1 bridge and the second base's τ, by the formula of §4 on the 43,200 trial-seconds of the budget
   (with the correction of 2026-12-05: delay 0 runs for every estimator, as k = 4 requires).

Nothing here reads an estimator other than grpo or the test split: it runs before them, and decides from
staleness and cost alone.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from harness.store import trialdir

MIN_Q50, MIN_OVER = 1.5, 0.40                 # §3: median |Λ| in nats, share of groups over G(1+ε)
BUDGETS = (128, 192, 256)                     # §4: the step budgets considered
BUDGET_S = 43_200                             # 6 h of the 2-core machine, two trials at a time
EVAL_EVERY = 32                               # the tables' evaluation period
VALIDATION, TEST = 1000, 2500                 # problems per evaluation: a test evaluation costs 2.5 e
TUNE_POINTS, TUNE_SEEDS, TUNE_EXTENSIONS, SEEDS = 6, 2, 4, 8
ORDER = ("gmc_grpo", "grpo", "topr", "tic_grpo", "m2po", "decoupled", "tic_is", "bapo", "tis_seq", "vespo", "naive")
MIN_SIDE = 3                                  # a bridge or τ with fewer estimators is not run


def load(results: Path) -> dict[int, list[Path]]:
    """delay -> the finished grpo trial directories of the design run."""
    by: dict[int, list[Path]] = {}
    for d in sorted(Path(results).iterdir()):
        if not trialdir.is_trial_dir(d) or trialdir.read_status(d).get("status") != "completed":
            continue
        config = trialdir.read_config(d) or {}
        if config.get("algorithm") != "grpo":
            raise SystemExit(f"design_v3: {d.name} is {config.get('algorithm')!r}; the design run is grpo alone")
        by.setdefault(int(config["delay"]), []).append(d)
    if 0 not in by or len(by) < 2:
        raise SystemExit(f"design_v3: {results} needs finished grpo trials at delay 0 and at a stale delay; "
                         f"run `stalebench run suites/design-v3.yaml` first")
    return by


def regime(trials: list[Path]) -> dict[str, float]:
    """Mean over seeds of each trial's mean, over the second half of its steps, of the two regime metrics."""
    per_trial = []
    for d in trials:
        rows = [r for r in trialdir.read_metrics(d) if "is/traj_abs_log_ratio_q50" in r]
        last = max(r["step"] for r in rows)
        late = [r for r in rows if r["step"] > last / 2]
        per_trial.append({k: statistics.mean(r[k] for r in late)
                          for k in ("is/traj_abs_log_ratio_q50", "is/group_over_cap_frac")})
    q50 = statistics.mean(t["is/traj_abs_log_ratio_q50"] for t in per_trial)
    over = statistics.mean(t["is/group_over_cap_frac"] for t in per_trial)
    return {"q50": q50, "over": over, "passes": q50 >= MIN_Q50 and over >= MIN_OVER,
            "closeness": min(q50 / MIN_Q50, over / MIN_OVER), "trials": len(per_trial)}


def largest_delay(regimes: dict[int, dict[str, float]]) -> int:
    passing = [d for d in sorted(regimes) if regimes[d]["passes"]]
    return passing[0] if passing else max(regimes, key=lambda d: regimes[d]["closeness"])


def curve(trials: list[Path]) -> dict[int, float]:
    """step -> mean over seeds of the evaluation accuracy (steps every seed evaluated)."""
    per = [{int(r["step"]): float(r["eval/acc"]) for r in trialdir.read_evals(d)} for d in trials]
    steps = set.intersection(*(set(p) for p in per))
    return {s: statistics.mean(p[s] for p in per) for s in sorted(steps)}


def step_budget(acc: dict[int, float]) -> dict[str, object]:
    """The smallest budget whose last quarter gains less than one SE of a validation evaluation."""
    readings = []
    for b in BUDGETS:
        start = b - b // 4
        if b not in acc or start not in acc:
            raise SystemExit(f"design_v3: the delay-0 curve has no evaluation at step {start} or {b}; "
                             f"the design run evaluates every 16 steps")
        gain, se = acc[b] - acc[start], math.sqrt(acc[b] * (1 - acc[b]) / VALIDATION)
        readings.append({"budget": b, "gain": gain, "se": se, "flat": gain < se})
        if gain < se:
            return {"budget": b, "truncated": False, "readings": readings}
    return {"budget": BUDGETS[-1], "truncated": True, "readings": readings}


def costs(by: dict[int, list[Path]], delay: int) -> dict[str, float]:
    steps = [r["perf/step_s"] for d in by[delay] for r in trialdir.read_metrics(d) if "perf/step_s" in r]
    evals = []
    for d in by[0]:
        status = trialdir.read_status(d)
        stepping = sum(r.get("perf/step_s", 0.0) for r in trialdir.read_metrics(d))
        evals.append((status["updated_at"] - status["started_at"] - stepping) / len(trialdir.read_evals(d)))
    return {"c": statistics.mean(steps), "e": statistics.mean(evals)}


def cut(budget: int, c: float, e: float) -> dict[str, object]:
    """§4's formula: E for tuning + the main table (dropping delay D/4 below five), then E' for the bridge
    and τ from what is left, each half of it."""
    evals = budget // EVAL_EVERY + 1
    tune_s, table_s = budget * c + evals * e, budget * c + evals * e * TEST / VALIDATION

    def spent(n: int, delays: int) -> float:
        # delay 0 runs per estimator: at k = 4 a batch's later minibatches are 1-3 updates stale even there,
        # so no run stands for every estimator (the harness shares one only at one update per batch)
        return (TUNE_POINTS * TUNE_SEEDS * n + TUNE_EXTENSIONS) * tune_s + ((delays + 1) * SEEDS * n) * table_s

    for delays in (2, 1):
        fits = [n for n in range(1, len(ORDER) + 1) if spent(n, delays) <= BUDGET_S]
        n = max(fits, default=0)
        if n >= 5 or delays == 1:
            break
    left = BUDGET_S - spent(n, delays) if n else 0.0
    side = min(n, int(left / 2 // (SEEDS * table_s)))
    return {"trial_s": {"tuning": tune_s, "table": table_s}, "estimators": list(ORDER[:n]),
            "stale_delays": delays, "spent_s": spent(n, delays) if n else 0.0, "left_s": left,
            "side": list(ORDER[:side]) if side >= MIN_SIDE else [], "side_fits": side}


def decide(results: Path) -> dict[str, object]:
    by = load(results)
    regimes = {d: regime(t) for d, t in by.items() if d > 0}
    delay = largest_delay(regimes)
    budget = step_budget(curve(by[0]))
    cost = costs(by, delay)
    return {"regimes": regimes, "largest_delay": delay, "delays": [0, delay // 4, delay], "budget": budget,
            "costs": cost, "cut": cut(budget["budget"], cost["c"], cost["e"])}


def describe(d: dict) -> str:
    lines = []
    for delay, r in sorted(d["regimes"].items()):
        lines.append(f"regime at delay {delay} ({r['trials']} seeds): median |Λ| {r['q50']:.2f} nats (rule >= {MIN_Q50}), "
                     f"groups over G(1+ε) {r['over']:.1%} (rule >= {MIN_OVER:.0%}): "
                     + ("passes" if r["passes"] else f"misses (closeness {r['closeness']:.2f})"))
    lines.append(f"largest delay D = {d['largest_delay']}; delay grid {', '.join(map(str, d['delays']))}")
    for r in d["budget"]["readings"]:
        lines.append(f"budget {r['budget']}: last-quarter gain {r['gain']:+.3f} against one SE {r['se']:.3f}: "
                     + ("flat" if r["flat"] else "still rising"))
    lines.append(f"step budget B = {d['budget']['budget']}" + (" (truncated: the curve is still rising)"
                                                                   if d["budget"]["truncated"] else ""))
    c = d["costs"]
    lines.append(f"costs: c = {c['c']:.3f} s per step at delay D, e = {c['e']:.2f} s per validation evaluation")
    return "\n".join(lines + [describe_cut(d["cut"])])


def describe_cut(k: dict) -> str:
    lines = [f"trial costs: tuning {k['trial_s']['tuning']:.0f} s, table {k['trial_s']['table']:.0f} s; "
             f"tuning + table spend {k['spent_s']:.0f} of {BUDGET_S} trial-seconds",
             f"estimators (E = {len(k['estimators'])}): {', '.join(k['estimators'])}; the table's stale delays: "
             + ("D/4 and D" if k["stale_delays"] == 2 else "D only"),
             f"bridge and τ: {', '.join(k['side'])}" if k["side"] else
             f"bridge and τ: not run ({k['side_fits']} estimators fit each, fewer than {MIN_SIDE})"]
    if len(k["estimators"]) < MIN_SIDE:
        lines.append(f"the design does not fit the budget with {MIN_SIDE} estimators: a table of fewer ranks nothing; "
                     f"the choice (a longer budget or a smaller design) is recorded in docs/benchmark-v3.md before "
                     f"any table trial runs")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path, help="results/design-v3")
    p.add_argument("--json", type=Path, default=None, help="also write the decisions as JSON here")
    args = p.parse_args()
    d = decide(args.results)
    print(describe(d))
    if args.json:
        args.json.write_text(json.dumps(d, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
