"""Benchmark v4's answer, per estimator and for claim (f), as docs/benchmark-v4.md §6 fixed it before the table ran.

    python -m studies.answer_v4 reports/reference-v4 reports/reference-v4-retuned
    python -m studies.answer_v4 results/reference-v4 [results/reference-v4-retuned]    # a campaign under way

TABLE is the table (each estimator at its lr tuned at delay 0, delays 0, D/4, D), RETUNED the re-tuned column
(each at its lr tuned at D); each a committed report directory (raw.tar.gz) or a results directory. Printed,
from the same functions the report uses (harness/report: penalty, horizon, resolve, stats):

- per estimator, the one-line answer: its staleness penalty at each stale delay [95% interval], whether its
  curve at delay 0 is flat at the last evaluation (the horizon rule of §2), its standing in the re-tuned column
  at D with leave-one-seed-out counts, and "re-tuned minus fixed" at D (Welch interval, statistic mean);
- the cap rule of §3 read again, in gmc_grpo's cells at D (fixed and re-tuned): `gmc/capped_frac`, per trial the
  mean over the second half of its steps, then the mean over seeds, against MIN_CAPPED;
- claim (f): gmc_grpo is *best under large delays* on v4 when it is resolved above every other estimator in the
  re-tuned column at D (its standing is "best") **and** its cap binds there by §3's rule; read only once every
  trial of the re-tuned column's plan (plan.json) has finished;
- the trust-region question: gmc_grpo_prox − gmc_grpo at D, fixed and re-tuned, Welch intervals.

Nothing is printed for what is not there yet (a cell with fewer than 2 finished seeds; RETUNED not given).
"""
from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

import pandas as pd

from harness.report import horizon, penalty, regime, resolve, stats, tables
from harness.report.load import SuiteResults, load_results
from harness.store import trialdir
from harness.store.archive import committed_results
from studies.design_v4 import MIN_CAPPED

CAPPED = "gmc/capped_frac"
CLAIMED, TRUST_REGION = "gmc_grpo", "gmc_grpo_prox"


def _finals(a: tables.Analysis, delay: float) -> dict[str, pd.Series]:
    """Estimator -> its finished trials' final accuracies (the report's scoring) at ``delay``, by trial id."""
    t = a.cell_trials
    done = t[t["status"].isin(trialdir.FINAL) & (t["delay"].astype(float) == delay) & t["final_acc"].notna()]
    return {str(k): g.set_index("trial_id")["final_acc"].astype(float) for k, g in done.groupby("algorithm", sort=True)}


def capped(res: SuiteResults, a: tables.Analysis, estimator: str, delay: float) -> tuple[float, int] | None:
    """§3's quantity in one cell: the mean over its finished trials of each trial's mean `gmc/capped_frac`
    over the second half of its steps, and the number of trials; None when no trial logged it."""
    m = res.metrics
    if CAPPED not in m.columns:
        return None
    t = a.cell_trials
    ids = set(t[(t["algorithm"] == estimator) & (t["delay"].astype(float) == delay)
                & t["status"].isin(trialdir.FINAL)]["trial_id"])
    per_trial = regime.late_means(m[m["trial_id"].isin(ids)], [CAPPED])[CAPPED].dropna()
    return (float(per_trial.mean()), int(per_trial.size)) if per_trial.size else None


def unfinished(res: SuiteResults) -> int | None:
    """How many trials of the suite's plan (plan.json) have not finished; None without a plan."""
    if not res.expected:
        return None
    done = set(res.trials.loc[res.trials["status"].isin(trialdir.FINAL), "trial_id"])
    return sum(trial_id not in done for trial_id, _ in res.expected)


def _difference(b: pd.Series | None, a: pd.Series | None) -> str:
    """B − A with its Welch interval; the same trials on both sides (reused: the lr re-tuned at D is the
    delay-0 lr) are said to be so."""
    if a is None or b is None or min(a.size, b.size) < 2:
        return "not yet (fewer than 2 seeds a side)"
    if a.sort_index().equals(b.sort_index()):
        return "0 (the same trials: its lr re-tuned there is its delay-0 lr)"
    e = stats.difference_estimate(b.to_numpy(), a.to_numpy(), statistic=stats.MEAN)
    return f"{e.point:+.3f} [{e.lo:+.3f}, {e.hi:+.3f}] (95% Welch, {b.size} and {a.size} seeds)"


def _cap_words(found: tuple[float, int] | None) -> str:
    if found is None:
        return "not measured (no finished trial logged gmc/capped_frac)"
    share, n = found
    return (f"capped in {100 * share:.1f}% of groups ({n} seeds; the rule asks >= {100 * MIN_CAPPED:.0f}%): the cap "
            + ("binds" if share >= MIN_CAPPED else "does not bind"))


def _penalty_words(p: penalty.Penalty) -> str:
    how = "matched seeds, t" if p.paired else "Welch"
    return f"{p.penalty:+.3f} [{p.lo:+.3f}, {p.hi:+.3f}] at {p.delay:g} (95% CI, {p.seeds} seeds, {how})"


def _delays(a: tables.Analysis | None) -> list[float]:
    return [] if a is None else sorted(float(d) for d in a.cell_trials["delay"].dropna().unique())


def answer(table_dir: Path, retuned_dir: Path | None = None, labels: tuple[str, str] | None = None) -> list[str]:
    """The lines printed for TABLE (and RETUNED), results directories; LABELS name them (default: their paths)."""
    labels = labels or (str(table_dir), str(retuned_dir))
    res = load_results(table_dir)
    a = tables.analyse(res)
    r_res = load_results(retuned_dir) if retuned_dir is not None else None
    r = tables.analyse(r_res) if r_res is not None else None
    delays = _delays(a)
    top = max(delays + _delays(r))                  # D: the table's largest delay, the re-tuned column's only one
    costs, _ = penalty.penalties(a.cell_trials)
    curves = {h.estimator: h for h in horizon.horizons(a.cell_trials, a.scored_evals)}
    fixed = _finals(a, top)
    standing = {s.estimator: s for s in resolve.standings(r.cell_trials, r.pairs)} if r is not None else {}
    again = _finals(r, top) if r is not None else {}
    out = [f"benchmark v4's answer: table {labels[0]} (delays {', '.join(f'{d:g}' for d in delays)}), re-tuned column "
           + (labels[1] if retuned_dir is not None else "not given")]
    names = {*a.cell_trials["algorithm"].astype(str), *(r.cell_trials["algorithm"].astype(str) if r is not None else ())}
    for est in sorted(names):
        costs_of = [_penalty_words(p) for p in costs if p.estimator == est]
        h = curves.get(est)
        s = standing.get(est)
        out.append(f"  {est}: penalty {'; '.join(costs_of) or 'not yet'}; curve at delay {delays[0]:g}: "
                   f"{h.words if h else 'not yet'}; re-tuned at {top:g}: {s.answer_loso if s else 'not yet'}; "
                   f"re-tuned minus fixed at {top:g}: {_difference(again.get(est), fixed.get(est))}")
    cap_again = capped(r_res, r, CLAIMED, top) if r is not None else None
    out += [f"  {CLAIMED} at {top:g}, fixed lr: {_cap_words(capped(res, a, CLAIMED, top))}",
            f"  {CLAIMED} at {top:g}, re-tuned lr: {_cap_words(cap_again) if r is not None else 'not yet'}"]
    left = unfinished(r_res) if r_res is not None else None
    best = standing.get(CLAIMED)
    if best is None or cap_again is None or left != 0:
        why = ("the re-tuned column is not given" if r is None else "the re-tuned column has no plan.json"
               if left is None else f"{left} planned trial(s) of the re-tuned column not finished" if left else
               f"{CLAIMED} has no standing or cap there")
        out.append(f"claim (f), {CLAIMED} best under large delays: not yet read ({why})")
    else:
        binds = cap_again[0] >= MIN_CAPPED
        verdict = "yes" if best.verdict == "best" and binds else "no"
        out.append(f"claim (f), {CLAIMED} best under large delays on v4: {verdict} (re-tuned at {top:g}: "
                   f"{best.answer_loso}; its cap {'binds' if binds else 'does not bind'} there)")
    out.append(f"trust region, {TRUST_REGION} - {CLAIMED} at {top:g}: fixed "
               f"{_difference(fixed.get(TRUST_REGION), fixed.get(CLAIMED))}; re-tuned "
               f"{_difference(again.get(TRUST_REGION), again.get(CLAIMED)) if r is not None else 'not yet'}")
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("table", type=Path, help="reports/reference-v4 (raw.tar.gz) or results/reference-v4")
    p.add_argument("retuned", type=Path, nargs="?", default=None,
                   help="reports/reference-v4-retuned or results/reference-v4-retuned")
    args = p.parse_args(argv)
    with contextlib.ExitStack() as stack:
        dirs = [stack.enter_context(committed_results(d)) if d is not None else None for d in (args.table, args.retuned)]
        print("\n".join(answer(*dirs, labels=(str(args.table), str(args.retuned)))))


if __name__ == "__main__":
    main()
