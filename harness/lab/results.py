"""Read an estimator-lab suite's results, fit power laws, rank-correlate: numpy and scipy, no torch.

    trials = read_trials(results_dir)          # one LabTrial per trial directory with params.json
    fit = fit_power(G, bias_sq, bias_sq_se, x_min=8)   # bias = c·G^p, weighted, every point

Trial layout (the suite runner's, read through harness/store/trialdir.py): params.json, config.yaml,
eval.jsonl and status.json of each trial directory. The grid point comes from params.json (dotted or
plain keys), falling back to config.yaml for a key it lacks, except a key params.json lists as `ignored`
(an estimator that does not read ε runs once, without an `eps` key): its value is NaN, not the base
config's.

Independence. Trials are not independent units: seeds of one configuration share its measurement pair,
and results written before grids skipped ignored axes hold the same run once per ε. `distinct` drops
exact repeats (same estimator, delay and seed, identical curves and measurement); `configurations`
groups the rest by `LabTrial.config_key`, the configuration without the seed.
"""
from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

from harness.store import trialdir
KNOWN_KEYS = ("algorithm", "delay", "eps", "group_size", "seed", "ignored", "stands_for")


@dataclass
class LabTrial:
    trial_id: str
    algorithm: str
    delay: int
    eps: float
    group_size: int
    seed: int
    status: str
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0))      # eval steps
    acc: np.ndarray = field(default_factory=lambda: np.zeros(0))        # eval/acc at those steps
    measured: dict[str, float] = field(default_factory=dict)            # lab/* of the final eval row
    ignored: tuple[str, ...] = ()                                        # grid axes the estimator ignores
    other: tuple[tuple[str, str], ...] = ()                             # other grid keys (params.json), sorted

    @property
    def config_key(self) -> tuple[Any, ...]:
        """The trial's configuration without its seed: estimator, delay, ε (None when ignored), G, other keys."""
        eps = None if "eps" in self.ignored or math.isnan(self.eps) else self.eps
        return (self.algorithm, self.delay, eps, self.group_size, self.other)

    @property
    def final_acc(self) -> float:
        return float(self.acc[-1]) if self.acc.size else math.nan

    def relative(self) -> tuple[float, float]:
        """(‖E ĝ − g*‖/‖g*‖, E‖ĝ‖²/‖g*‖²) of the trial's measurement: comparable across measurement pairs
        whose ‖∇J‖ differ (a pair near the optimum has a small gradient and so small absolute errors)."""
        m = self.measured
        norm = m.get("lab/target_norm")
        if norm is None and m.get("lab/rel_bias"):                 # rows written before target_norm was logged
            norm = m["lab/bias_true"] / m["lab/rel_bias"]
        if not norm or not math.isfinite(norm) or "lab/second_moment" not in m:
            return math.nan, math.nan
        return m["lab/bias_true"] / norm, m["lab/second_moment"] / norm ** 2

    @property
    def auc_acc(self) -> float:
        """Mean eval/acc over the run (trapezoid over steps, divided by the step span)."""
        if self.acc.size < 2:
            return self.final_acc
        return float(np.trapezoid(self.acc, self.steps) / (self.steps[-1] - self.steps[0]))


def _lookup(params: dict[str, Any], config: dict[str, Any], key: str, default: Any) -> Any:
    if key in params:
        return params[key]
    value: Any = config
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return default if value is None else value


def read_trials(results_dir: Path) -> list[LabTrial]:
    """Every trial directory of `results_dir` that has a params.json (unfinished ones included)."""
    out = []
    for d in sorted(p for p in Path(results_dir).iterdir() if trialdir.is_trial_dir(p)):
        params, _ = trialdir.load(d, trialdir.PARAMS)
        if params is None:
            continue
        config = trialdir.read_config(d) or {}
        rows = [r for r in trialdir.scan_rows(d, trialdir.EVALS)[0] if isinstance(r.get("eval/acc"), (int, float))]
        rows.sort(key=lambda r: r.get("step", 0))
        measured = next((r for r in reversed(rows) if "lab/bias_true" in r), {})
        get = lambda key, default: _lookup(params, config, key, default)    # noqa: E731
        ignored = tuple(str(k) for k in params.get("ignored") or ())
        out.append(LabTrial(
            trial_id=d.name, algorithm=str(get("algorithm", "?")), delay=int(get("delay", 0)),
            eps=math.nan if "eps" in ignored else float(get("eps", math.nan)),
            group_size=int(get("group_size", 0)), seed=int(get("seed", 0)), ignored=ignored,
            other=tuple(sorted((str(k), json.dumps(v, sort_keys=True)) for k, v in params.items()
                               if k not in KNOWN_KEYS)),
            status=trialdir.read_record(d).status,
            steps=np.array([float(r.get("step", 0)) for r in rows]),
            acc=np.array([float(r["eval/acc"]) for r in rows]),
            measured={k: float(v) for k, v in measured.items()
                      if k.startswith("lab/") and isinstance(v, (int, float))}))
    return out


def distinct(trials: list[LabTrial]) -> list[LabTrial]:
    """The trials without exact repeats: same estimator, delay and seed with identical eval curves and
    measurement (a run repeated over an axis its estimator ignores, in results written before grids
    skipped such axes). The first of each is kept, in the given order."""
    seen, out = set(), []
    for t in trials:
        key = (t.algorithm, t.delay, t.seed, t.group_size, t.other, tuple(t.steps.tolist()), tuple(t.acc.tolist()),
               tuple(sorted(t.measured.items())))
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def configurations(trials: list[LabTrial]) -> dict[tuple[Any, ...], list[LabTrial]]:
    """distinct(trials) grouped by configuration (config_key: everything but the seed), in first-seen order."""
    out: dict[tuple[Any, ...], list[LabTrial]] = {}
    for t in distinct(trials):
        out.setdefault(t.config_key, []).append(t)
    return out


EXPONENT_CI_WIDTH = 0.5        # a slope whose 95% CI is at most this wide is reported as an exponent
SLOPE_BOUND = 8.0              # |p| beyond this is not fitted (the optimizer's box)


def fit_power(x: Any, sq: Any, sq_se: Any, x_min: float = 0.0) -> dict[str, Any]:
    """Fit bias = c·x^p from the signed squared estimates sq ≈ bias² ± sq_se, by weighted nonlinear least
    squares on every point with x ≥ x_min: sq_k = e^a·x_k^q, weights 1/sq_se_k², p = q/2.

    Why the square: the bias is a norm, and its de-noised estimate is clamped at 0; log|bias| (and keeping
    only the points above 2 SE) selects on noise where the bias is small. The squared estimate
    ‖x̄‖² − tr Cov(x̄) is unbiased and can be negative, so every point enters with its own SE (estimate.py).
    Points with sq = sq_se = 0 (the estimator equals the reference on every sampled group) carry no
    weight and are left out (`n_exact_zero`). CI: Wald, p ± t_{0.975, n−2} · se_p with the covariance
    scaled by max(1, χ²/(n − 2)). `kind`: "exponent" when the CI is at most EXPONENT_CI_WIDTH wide;
    "directional" (the sign only: "decreasing" / "increasing") when the CI excludes 0 but is wider;
    "undetermined" otherwise, or with fewer than 3 points (slope NaN).
    """
    from scipy.optimize import least_squares

    x, sq, se = (np.asarray(a, dtype=float) for a in (x, sq, sq_se))
    in_range = (x >= x_min) & np.isfinite(sq) & np.isfinite(se)
    zero = in_range & (se <= 0) & (sq == 0)
    use = in_range & (se > 0)
    out: dict[str, Any] = {"n": int(use.sum()), "x_used": x[use].tolist(), "n_exact_zero": int(zero.sum()),
                           "slope": math.nan, "se": math.nan, "lo": math.nan, "hi": math.nan,
                           "intercept": math.nan, "chi2_red": math.nan, "kind": "undetermined",
                           "direction": ""}
    if use.sum() < 3:
        return out
    lx, y, w = np.log(x[use]), sq[use], 1.0 / se[use]
    pos = y > 0
    if pos.sum() >= 2:
        q0, a0 = np.polyfit(lx[pos], np.log(y[pos]), 1)
    else:
        q0, a0 = 0.0, math.log(max(np.abs(y).max(), 1e-300))
    q0 = float(np.clip(q0, -2 * SLOPE_BOUND + 1e-6, 2 * SLOPE_BOUND - 1e-6))

    def resid(theta: np.ndarray) -> np.ndarray:
        return (np.exp(theta[0] + theta[1] * lx) - y) * w

    fit = least_squares(resid, [a0, q0], bounds=([-np.inf, -2 * SLOPE_BOUND], [np.inf, 2 * SLOPE_BOUND]),
                        x_scale="jac", xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=2000)
    n = int(use.sum())
    chi2_red = float(fit.fun @ fit.fun) / (n - 2) if n > 2 else math.inf
    try:
        cov = np.linalg.inv(fit.jac.T @ fit.jac) * max(1.0, chi2_red)
        se_q = math.sqrt(cov[1, 1]) if cov[1, 1] >= 0 else math.inf
    except np.linalg.LinAlgError:
        se_q = math.inf
    if not math.isfinite(se_q) or abs(fit.x[1]) >= 2 * SLOPE_BOUND - 1e-3:
        se_q = math.inf                                       # at the box: the data do not pin the slope
    p, se_p = float(fit.x[1]) / 2, se_q / 2
    t = float(sps.t.ppf(0.975, n - 2))
    lo, hi = p - t * se_p, p + t * se_p
    if hi - lo <= EXPONENT_CI_WIDTH:
        kind = "exponent"
    elif lo > 0 or hi < 0:
        kind = "directional"
    else:
        kind = "undetermined"
    out.update(slope=p, se=se_p, lo=lo, hi=hi, intercept=float(fit.x[0]) / 2, chi2_red=chi2_red, kind=kind,
               direction="decreasing" if hi < 0 else "increasing" if lo > 0 else "")
    return out


def bias_ci(sq: float, sq_se: float, z: float = 1.96) -> tuple[float, float]:
    """95% CI of a bias norm from its squared estimate: sqrt of the clamped interval sq ± z·sq_se."""
    return math.sqrt(max(sq - z * sq_se, 0.0)), math.sqrt(max(sq + z * sq_se, 0.0))


def spearman_permutation(x: list[float], y: list[float], n_perm: int = 50000,
                         seed: int = 0) -> tuple[float, float, int]:
    """Spearman's ρ over n independent units, with a two-sided permutation p-value: exact (all n!
    orderings) when n! ≤ n_perm, else n_perm seeded random permutations (p = (1 + #{|ρ*| ≥ |ρ|}) / (1 + n_perm)).
    NaN when fewer than 3 finite pairs or a constant variable. The smallest exact p is 2/n! (0.083 at n = 4)."""
    a, b = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(a) & np.isfinite(b)
    n = int(ok.sum())
    if n < 3 or np.ptp(a[ok]) == 0 or np.ptp(b[ok]) == 0:
        return math.nan, math.nan, n
    ra, rb = sps.rankdata(a[ok]), sps.rankdata(b[ok])
    ra, rb = (ra - ra.mean()) / np.linalg.norm(ra - ra.mean()), (rb - rb.mean()) / np.linalg.norm(rb - rb.mean())
    rho = float(ra @ rb)
    if math.factorial(n) <= n_perm:
        perms = np.array(list(itertools.permutations(range(n))))
        extreme = np.abs(rb[perms] @ ra) >= abs(rho) - 1e-12
        p = float(extreme.mean())
    else:
        rng = np.random.default_rng(seed)
        perms = np.argsort(rng.random((n_perm, n)), axis=1)
        p = float((1 + (np.abs(rb[perms] @ ra) >= abs(rho) - 1e-12).sum()) / (1 + n_perm))
    return rho, p, n
