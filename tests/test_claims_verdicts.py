"""studies/claims_verdicts.py: the pre-registered tests of claims (c) and (d) (docs/claims.md) on hand-made
accuracies whose answer is known."""
from __future__ import annotations

import numpy as np
import pytest

from studies import claims_verdicts as cv

SEEDS = 6
JITTER = np.array([-0.005, -0.003, -0.001, 0.001, 0.003, 0.005])   # mean 0, spread ±0.005 over 6 seeds


def _acc(by_eps: dict[float, float]) -> dict[float, np.ndarray]:
    return {e: m + JITTER for e, m in by_eps.items()}


def test_sensitivity_supported_when_every_clipper_loses_more_as_eps_shrinks():
    # rescaler: 0.85 at ε 0.05, 0.86 at ε 0.4 -> S = 0.01; clipper a: 0.70 -> 0.86, S = 0.16, D = +0.15;
    # clipper b: 0.80 -> 0.86, S = 0.06, D = +0.05; seed spread ±0.005 resolves both.
    acc = {"r": _acc({0.05: 0.85, 0.4: 0.86}), "a": _acc({0.05: 0.70, 0.4: 0.86}), "b": _acc({0.05: 0.80, 0.4: 0.86})}
    out = cv.sensitivity_verdict(acc, "r", ["a", "b"])
    assert out["verdict"] == "supported (direction)" and out["confidence"] == pytest.approx(0.975)
    assert out["clippers"]["a"]["D"] == pytest.approx(0.15) and out["clippers"]["b"]["D"] == pytest.approx(0.05)


def test_sensitivity_not_supported_or_inconclusive():
    worse = {"r": _acc({0.05: 0.70, 0.4: 0.86}), "a": _acc({0.05: 0.85, 0.4: 0.86})}     # D = 0.01 − 0.16 < 0
    assert cv.sensitivity_verdict(worse, "r", ["a"])["verdict"] == "not supported"
    same = {"r": _acc({0.05: 0.85, 0.4: 0.86}), "a": _acc({0.05: 0.85, 0.4: 0.86})}      # D = 0 ± noise
    assert cv.sensitivity_verdict(same, "r", ["a"])["verdict"] == "inconclusive at this power"
    one_eps = {"r": _acc({0.2: 0.85}), "a": _acc({0.2: 0.80})}                           # nothing to compare
    assert cv.sensitivity_verdict(one_eps, "r", ["a"])["verdict"] == "not testable on this benchmark"


def test_gap_fit_reads_the_rate():
    G = [4, 8, 16, 32]
    on = [0.93 + JITTER for _ in G]
    exact = [0.93 - 0.2 * g ** -0.4 + JITTER for g in G]          # gap = 0.2·G^−0.4 exactly in the means
    out = cv.gap_verdict(G, on, exact)
    assert out["p"] == pytest.approx(-0.4, abs=1e-3) and out["verdict"] == "supported"
    flat = [0.93 - 0.1 + JITTER for _ in G]                          # gap constant in G: p = 0, CI above −0.4
    assert cv.gap_verdict(G, on, flat)["verdict"] == "not supported"
    negative = [0.93 - d + JITTER for d in (0.1, 0.05, 0.0, -0.01)]  # a gap ≤ 0: no power law
    assert cv.gap_verdict(G, on, negative)["verdict"] == "inconclusive at this power"


def _table(pairs, collapsed=()):
    """A report's results.json with the pair tests `pairs` (a, b, mean_diff a − b, resolved) at delay 32."""
    names = {n for a, b, *_ in pairs for n in (a, b)}
    return {"largest_delay": 32.0,
            "leaderboard": [{"algorithm": n, "delay": 32, "slice": "", "n_collapsed": int(n in collapsed)} for n in names],
            "pair_tests": [{"slice": "", "delay": 32.0, "a": a, "b": b, "mean_diff": d, "p_holm": 0.01 if r else 0.2,
                            "resolved": r} for a, b, d, r in pairs]}


def test_best_reads_the_rescaler_against_every_stable_estimator_in_every_table():
    # supported: resolved above both others (the sign is read from which side of the pair the rescaler is on)
    t1 = _table([("r", "x", 0.05, True), ("y", "r", -0.03, True), ("x", "y", 0.01, False)])
    assert cv.best_verdict({"t1": t1}, {"r"})["verdict"] == "supported"
    # one unresolved pair: inconclusive; an estimator that collapsed on some seed does not count
    t2 = _table([("r", "x", 0.05, True), ("r", "y", 0.01, False)])
    assert cv.best_verdict({"t1": t1, "t2": t2}, {"r"})["verdict"] == "inconclusive at this power"
    assert cv.best_verdict({"t2": _table([("r", "x", 0.05, True), ("r", "y", -0.2, True)], collapsed=("y",))},
                           {"r"})["verdict"] == "supported"
    # a stable estimator resolved above it in some table: not supported
    t3 = _table([("z", "r", 0.04, True)])
    out = cv.best_verdict({"t1": t1, "t3": t3}, {"r"})
    assert out["verdict"] == "not supported" and {"table": "t3", "delay": 32.0, "rescaler": "r", "other": "z",
                                                  "diff": -0.04, "p_holm": 0.01, "resolved": True} in out["pairs"]


def test_seeds_to_resolve_shrinks_the_interval_as_one_over_root_n():
    # half-width 0.3 at 6 seeds around an effect 0.1: it excludes 0 once 0.3 * sqrt(6 / n) <= 0.1, n = 6 * 9 = 54
    assert cv.seeds_to_resolve(6, 0.3, 0.1) == 54
    # (d)'s slope +0.46 [-0.65, ...]: the lower end must pass -0.4, so n = 6 * (1.11 / 0.86)^2 = 9.995 -> 10
    assert cv.seeds_to_resolve(6, 1.11, 0.46, -0.4) == 10
    assert cv.seeds_to_resolve(8, 0.01, 0.5) == 8                  # already resolved: never fewer than now
    assert cv.seeds_to_resolve(6, 0.3, 0.0) is None                # an effect on the threshold: no number
    # Fisher's z: atanh(0.5) = 0.549306; 3 + (1.959964 / 0.549306)^2 = 3 + 12.731 = 15.73 -> 16 configurations
    assert cv.configurations_for_rho(0.5) == 16 and cv.configurations_for_rho(-0.2) is None


def test_pair_seeds_uses_welch_se_and_holms_first_and_last_threshold():
    # x - y = 0.1 over 4 seeds a side; Holm over 2 pairs: first threshold 0.025, last 0.05
    x, y = np.array([0.5, 0.6, 0.7, 0.6]) + 0.1, np.array([0.5, 0.6, 0.7, 0.6])
    assert x.std(ddof=1) == pytest.approx(0.0816497, abs=1e-6)   # SD of 0.6, 0.7, 0.8, 0.7
    # with that SD: SE = sqrt(2 * 0.0066667 / 4) = 0.057735; α 0.05: 4 * (1.959964 * 0.057735 / 0.1)^2 = 5.12 -> 6;
    # α 0.025: 4 * (2.241403 * 0.057735 / 0.1)^2 = 6.70 -> 7
    assert cv.pair_seeds(x, y, 2) == (7, 6)


def _v3_table(share: float, diff: float, resolved: bool) -> dict:
    return {"largest_delay": 64, "cell_regime": [{"algorithm": "gmc_grpo", "delay": 64, "over_cap": share},
                                                 {"algorithm": "grpo", "delay": 64, "over_cap": 0.5}],
            "leaderboard": [{"algorithm": a, "delay": 64, "n_collapsed": 0, "slice": ""} for a in ("gmc_grpo", "grpo")],
            "pair_tests": [{"a": "gmc_grpo", "b": "grpo", "delay": 64, "slice": "", "mean_diff": diff, "p_holm": 0.01,
                            "resolved": resolved}]}


def test_f_on_v3_reads_only_the_tables_where_the_cap_binds():
    mild, bound = _v3_table(0.061, -0.05, True), _v3_table(0.20, +0.04, True)
    out = cv.v3_reading({"mild": mild}, {"gmc_grpo"})
    assert out["verdict"] == "not testable on this benchmark" and out["testable"] == []
    assert out["over_cap"] == {"mild": {"gmc_grpo": 0.061}} and out["pairs"][0]["diff"] == pytest.approx(-0.05)
    # only the table where the cap binds in >= 15% of groups is read: there gmc_grpo is resolved above grpo
    out = cv.v3_reading({"mild": mild, "bound": bound}, {"gmc_grpo"})
    assert out["testable"] == ["bound"] and out["verdict"] == "supported"
    assert cv.v3_reading({"x": _v3_table(0.15, -0.05, True)}, {"gmc_grpo"})["verdict"] == "not supported"
