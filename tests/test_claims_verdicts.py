"""scripts/claims_verdicts.py: the pre-registered tests of claims (c) and (d) (docs/claims.md) on hand-made
accuracies whose answer is known."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

_spec = importlib.util.spec_from_file_location(
    "claims_verdicts", Path(__file__).resolve().parents[1] / "scripts" / "claims_verdicts.py")
cv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cv)

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
