"""The verdicts of claims (c) and (d) of docs/claims.md from the LLM grids, as pre-registered there.

    python -m studies.claims_verdicts --eps results/claims-eps \
        --g results/claims-g4 results/claims-g8 results/claims-g16 results/claims-g32

Reads result files only (harness.report.load). Estimators are sorted into kinds by the family each trial
recorded in its provenance (`correction: group-cap` = group rescaling, `sequence-is` = trajectory
clipping; harness/lab/families.py), never by name. Committed before any trial of these grids finished.

(c) direction: S = mean final eval/acc at the largest ε − at the smallest ε (delay 32); for each clipper c,
    D_c = S_c − S_rescaler with a seeded percentile bootstrap over seeds (cells resampled independently),
    Bonferroni over the clippers. Supported if every D_c's interval lies above 0, not supported if one lies
    below 0, inconclusive otherwise.
(d) gap(G) = mean final eval/acc of the shared on-policy run − that of the estimator at delay 32, SE from the
    seeds; gap = c·G^p by weighted nonlinear least squares (harness.lab.results.fit_power on the gaps),
    Wald 95% CI. Rescaler: supported if the CI lies below 0 and reaches −0.4; not supported if it lies above
    −0.4; inconclusive otherwise, and whenever a gap's mean is ≤ 0 (the power law is then undefined).
(f) the v2 analogue, read from committed reports' results.json (`--tables`): at each table's largest delay, the
    group rescaler against every other stable estimator (collapsed on no seed), by the report's own pair tests
    (exact permutation, Holm within the table). Supported if it is resolved above every one in every table that
    holds both; not supported if one is resolved above it in some table; inconclusive otherwise. (Added after
    the grids' rules, before any of their trials finished; the tables were published before the rule: docs/claims.md.)
(f) on v3 (`--v3`, rule of 2026-12-06): only the tables whose rescaler's cap binds in >= 15% of groups at the
    largest delay (results.json cell_regime) are read by (f)'s rule; none: not testable on this benchmark.
Inconclusive verdicts carry the seeds per cell that would resolve them (seeds_to_resolve, docs/claims.md).
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from algorithms.registry import get_estimator, loss_names
from harness.lab.families import CLIPPING, RESCALING, kind_of
from harness.lab.results import fit_power
from harness.report.load import SuiteResults, load_results
from harness.store.trialdir import read_object

RATE = -0.4                      # claim (d): G^(−2/5)
N_BOOT = 10_000


def final_accuracies(res: SuiteResults) -> dict[tuple[str, int, float | None], np.ndarray]:
    """(algorithm, delay, eps) -> final eval/acc per seed (the last evaluated step of each finished trial)."""
    last = res.evals.sort_values("step").groupby("trial_id").tail(1).set_index("trial_id")["eval/acc"]
    out: dict[tuple[str, int, float | None], list[float]] = {}
    for r in res.trials.to_dict("records"):
        if r["status"] == "completed" and r["trial_id"] in last.index:
            e = r.get("eps")                          # None (or NaN from pandas) where the trial ignores ε:
            eps = None if e is None or e != e else float(e)       # one key for them all, as NaN keys never are
            out.setdefault((str(r["algorithm"]), int(r["delay"]), eps), []).append(float(last[r["trial_id"]]))
    return {k: np.asarray(v) for k, v in out.items()}


def kinds(res: SuiteResults) -> dict[str, str | None]:
    """algorithm -> its kind (RESCALING, CLIPPING or None) from the family its trials recorded."""
    algorithm = dict(zip(res.trials["trial_id"], res.trials["algorithm"]))
    out: dict[str, str | None] = {}
    for tid, prov in res.provenance.items():
        name = algorithm.get(tid)
        if isinstance(name, str) and isinstance((prov or {}).get("estimator"), dict):
            out.setdefault(name, kind_of(prov["estimator"]))
    return out


def sensitivity_verdict(acc: Mapping[str, Mapping[float, np.ndarray]], rescaler: str, clippers: list[str],
                        seed: int = 0, n_boot: int = N_BOOT) -> dict[str, Any]:
    """Claim (c)'s direction test. acc: estimator -> ε -> final accuracies at delay 32 (seeds)."""
    if any(len(acc[n]) < 2 for n in [rescaler, *clippers]):
        return {"verdict": "not testable on this benchmark", "why": "fewer than two ε values per estimator"}
    rng = np.random.default_rng(seed)
    level = 0.05 / max(1, len(clippers))                                  # Bonferroni over the clippers

    def sens(name: str, boot: bool) -> np.ndarray | float:
        by = acc[name]
        lo, hi = by[min(by)], by[max(by)]
        if not boot:
            return float(hi.mean() - lo.mean())
        return (rng.choice(hi, (n_boot, hi.size)).mean(1) - rng.choice(lo, (n_boot, lo.size)).mean(1))

    s_r, b_r = sens(rescaler, False), sens(rescaler, True)
    rows = {}
    for c in clippers:
        d_boot = sens(c, True) - b_r
        lo, hi = np.quantile(d_boot, [level / 2, 1 - level / 2])
        rows[c] = {"S": sens(c, False), "D": sens(c, False) - s_r, "lo": float(lo), "hi": float(hi)}
    if rows and all(r["lo"] > 0 for r in rows.values()):
        verdict = "supported (direction)"
    elif any(r["hi"] < 0 for r in rows.values()):
        verdict = "not supported"
    else:
        verdict = "inconclusive at this power"
    return {"verdict": verdict, "S_rescaler": s_r, "clippers": rows, "confidence": 1 - level}


def gaps(on_policy: list[np.ndarray], stale: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """gap(G) = mean on-policy − mean stale accuracy at each G, and its SE (Welch: the two cells' seeds apart)."""
    gap = np.array([a.mean() - b.mean() for a, b in zip(on_policy, stale)])
    se = np.array([math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size) for a, b in zip(on_policy, stale)])
    return gap, se


def gap_verdict(G: list[int], on_policy: list[np.ndarray], stale: list[np.ndarray]) -> dict[str, Any]:
    """Claim (d) for one estimator: on_policy[k], stale[k] are final accuracies (seeds) at group size G[k]."""
    gap, se = gaps(on_policy, stale)
    fit = fit_power(np.asarray(G, float), gap, se)         # fits gap = e^a·G^q and reports p = q/2
    p, lo, hi = 2 * fit["slope"], 2 * fit["lo"], 2 * fit["hi"]
    if (gap <= 0).any() or not math.isfinite(p):
        verdict = "inconclusive at this power"
    elif hi < 0 and lo <= RATE:
        verdict = "supported"
    elif lo > RATE:
        verdict = "not supported"
    else:
        verdict = "inconclusive at this power"
    return {"verdict": verdict, "gap": gap.tolist(), "gap_se": se.tolist(), "p": p, "lo": lo, "hi": hi,
            "c": math.exp(2 * fit["intercept"])}                 # the fitted gap = c·G^p


def best_verdict(tables: Mapping[str, Mapping[str, Any]], rescalers: set[str], slice_: str = "") -> dict[str, Any]:
    """Claim (f)'s analogue. tables: name -> a report's results.json; rescalers: the group rescalers' names;
    slice_: the report slice read ("" for a table without slices, "ε=0.2" for the ε grid's cells at 0.2)."""
    rows = []
    for table, data in tables.items():
        delay = data["largest_delay"]
        stable = {r["algorithm"] for r in data["leaderboard"] if r["delay"] == delay and not r["n_collapsed"]
                  and r["slice"] == slice_}
        for t in data["pair_tests"]:
            pair = {t["a"], t["b"]}
            if t["delay"] != delay or t["slice"] != slice_ or len(pair & rescalers) != 1 or not pair <= stable:
                continue
            (rescaler,), (other,) = pair & rescalers, pair - rescalers
            diff = t["mean_diff"] if t["a"] == rescaler else -t["mean_diff"]        # rescaler − other
            rows.append({"table": table, "delay": delay, "rescaler": rescaler, "other": other, "diff": diff,
                         "p_holm": t["p_holm"], "resolved": bool(t["resolved"])})
    if any(r["resolved"] and r["diff"] < 0 for r in rows):
        verdict = "not supported"
    elif rows and all(r["resolved"] and r["diff"] > 0 for r in rows):
        verdict = "supported"
    else:
        verdict = "inconclusive at this power"
    return {"verdict": verdict, "pairs": rows}


CAP_BINDS = 0.15                 # (f) on v3: testable where the rescaler's cap binds in at least this share of groups
Z95 = 1.959964                   # two-sided 95% normal quantile


def seeds_to_resolve(n: int, half: float, effect: float, threshold: float = 0.0) -> int | None:
    """docs/claims.md: the seeds per cell at which an interval of half-width ``half`` at ``n`` seeds, centred on
    the observed ``effect``, would just exclude ``threshold`` (half-width ∝ 1/√n):
    ⌈n (half / |effect − θ|)²⌉.
    About 50% power at the observed effect; None when the effect sits on the threshold."""
    gap = abs(effect - threshold)
    return None if gap == 0 or not math.isfinite(half) else max(n, math.ceil(n * (half / gap) ** 2))


def pair_seeds(x: np.ndarray, y: np.ndarray, pairs: int) -> tuple[int | None, ...]:
    """Seeds per cell for an unresolved pair (x − y) to reach Holm's first (α/pairs) and last (α) threshold:
    Welch's SE from the two cells' SDs, z from the normal quantile (seeds_to_resolve)."""
    from scipy.stats import norm

    se = math.sqrt(x.var(ddof=1) / x.size + y.var(ddof=1) / y.size)
    n, diff = min(x.size, y.size), float(x.mean() - y.mean())
    return tuple(seeds_to_resolve(n, float(norm.isf(a / 2)) * se, diff) for a in (0.05 / pairs, 0.05))


def configurations_for_rho(rho: float) -> int | None:
    """(b)'s units are configurations: how many would bring ρ to p 0.05 by Fisher's z, 3 + (1.96 / atanh ρ)²."""
    return None if rho <= 0 or rho >= 1 else math.ceil(3 + (Z95 / math.atanh(rho)) ** 2)


def v3_reading(tables: Mapping[str, Mapping[str, Any]], rescalers: set[str]) -> dict[str, Any]:
    """(f) on v3 (docs/claims.md, rule of 2026-12-06): each table's rescaler share of groups over the cap at its
    largest delay (results.json ``cell_regime``); (f)'s rule over the tables where it is >= CAP_BINDS, else
    not testable. tables: name -> results.json."""
    shares, testable = {}, {}
    for name, data in tables.items():
        delay = data["largest_delay"]
        cells = [c for c in data.get("cell_regime", []) if c["algorithm"] in rescalers and c["delay"] == delay]
        if not cells:
            raise SystemExit(f"{name}/results.json has no cell_regime for a group rescaler; re-render it "
                             f"(stalebench report {name}/raw.tar.gz --out {name})")
        shares[name] = {c["algorithm"]: c["over_cap"] for c in cells}
        if all(c["over_cap"] >= CAP_BINDS for c in cells):
            testable[name] = data
    out = {"threshold": CAP_BINDS, "over_cap": shares, "testable": sorted(testable)}
    if not testable:
        return {**out, "verdict": "not testable on this benchmark", "pairs": best_verdict(tables, rescalers)["pairs"]}
    return {**out, **best_verdict(testable, rescalers)}


def eps_readings(res: SuiteResults) -> dict[str, dict[str, Any]]:
    """Claim (c)'s direction test for each group rescaler of the ε grid (delay > 0 cells)."""
    acc, kind = final_accuracies(res), kinds(res)
    by: dict[str, dict[float, np.ndarray]] = {}
    for (name, delay, eps), v in acc.items():
        if delay > 0:
            by.setdefault(name, {})[eps] = v
    clippers = sorted(n for n in by if kind.get(n) == CLIPPING)
    return {r: sensitivity_verdict(by, r, clippers) for r in by if kind.get(r) == RESCALING}


def g_readings(loaded: list[SuiteResults]) -> dict[str, Any]:
    """Claim (d): per estimator of either kind, the gap fit over the G suites (one suite per G)."""
    loaded = sorted(loaded, key=lambda res: int(res.suite.base["group_size"]))
    sizes = [int(res.suite.base["group_size"]) for res in loaded]
    accs = [final_accuracies(res) for res in loaded]
    kind = kinds(loaded[0])
    out: dict[str, Any] = {"G": sizes, "on_policy": [next(v for (_, d, _), v in a.items() if d == 0).tolist()
                                                      for a in accs], "estimators": {}}
    for name in sorted(kind):
        stale = [next(v for (n, d, _), v in a.items() if n == name and d > 0) for a in accs]
        on = [np.asarray(v) for v in out["on_policy"]]
        gap, se = gaps(on, stale)
        fit = gap_verdict(sizes, on, stale) if kind[name] else {}
        out["estimators"][name] = {"kind": kind[name], "stale": [v.tolist() for v in stale], "gap": gap.tolist(),
                                   "gap_se": se.tolist(), **fit}
    return out


def table_reading(paths: list[Path], slice_: str = "") -> dict[str, Any]:
    """Claim (f)'s analogue over committed reports (their results.json), in the slice `slice_` ("" = none)."""
    tables = {p.name: read_object(p / "results.json")[0] or {} for p in paths}
    names = {r["algorithm"] for data in tables.values() for r in data.get("leaderboard", [])}
    rescalers = {n for n in names if n in loss_names() and kind_of(get_estimator(n).family) == RESCALING}
    return best_verdict(tables, rescalers, slice_)


def v3_table_reading(paths: list[Path]) -> dict[str, Any]:
    """(f) on v3 over committed reports (their results.json)."""
    tables = {p.name: read_object(p / "results.json")[0] or {} for p in paths}
    names = {r["algorithm"] for data in tables.values() for r in data.get("leaderboard", [])}
    return v3_reading(tables, {n for n in names if n in loss_names() and kind_of(get_estimator(n).family) == RESCALING})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eps", type=Path, help="results/claims-eps")
    ap.add_argument("--g", type=Path, nargs="*", default=[], help="results/claims-gG, one per G")
    ap.add_argument("--tables", type=Path, nargs="*", default=[], help="committed reports (reports/reference-v2 ...)")
    ap.add_argument("--v3", type=Path, nargs="*", default=[], help="(f) on v3: reports/reference-v3 ...")
    args = ap.parse_args(argv)
    if args.v3:
        out = v3_table_reading(args.v3)
        print(f"(f) on v3: {out['verdict']} (testable where the cap binds in >= {out['threshold']:.0%} of groups: "
              f"{', '.join(out['testable']) or 'none'})")
        for table, shares in out["over_cap"].items():
            over = ", ".join(f"{a} {100 * v:.1f}% of groups over the cap" for a, v in shares.items())
            print(f"    {table}: {over}")
        for r in out["pairs"]:
            print(f"    {r['table']} delay {r['delay']:g}: {r['rescaler']} - {r['other']} = {r['diff']:+.4f}, "
                  f"p_Holm {r['p_holm']:.3g}{' (resolved)' if r['resolved'] else ''}")
    if args.tables:
        out = table_reading(args.tables)
        print("(f)", out["verdict"])
        for r in out["pairs"]:
            print(f"    {r['table']} delay {r['delay']:g}: {r['rescaler']} - {r['other']} = {r['diff']:+.4f}, "
                  f"p_Holm {r['p_holm']:.3g}{' (resolved)' if r['resolved'] else ''}")
    if args.eps:
        for r, reading in eps_readings(load_results(args.eps)).items():
            print("(c)", r, reading)
    if args.g:
        reading = g_readings([load_results(p) for p in args.g])
        for name, fit in reading["estimators"].items():
            if fit["kind"]:
                print("(d)", name, fit["kind"], {k: fit[k] for k in ("verdict", "gap", "gap_se", "p", "lo", "hi")})


if __name__ == "__main__":
    main()
