"""Read an estimator-lab suite's results and fit log-log slopes: numpy and the standard library only.

    trials = read_trials(results_dir)          # one LabTrial per trial directory with params.json
    fit = fit_loglog(G, bias, bias_se, x_min=8)

Trial layout (the suite runner's): <trial_id>/{params.json, config.yaml, eval.jsonl, status.json}. The
grid point comes from params.json (dotted or plain keys), falling back to config.yaml for a key it lacks.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy import stats as sps

NOT_TRIALS = ("lab",)


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


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


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
    for d in sorted(p for p in Path(results_dir).iterdir() if p.is_dir()):
        if d.name.startswith(".") or d.name in NOT_TRIALS:
            continue
        params = _json(d / "params.json")
        if not isinstance(params, dict):
            continue
        try:
            config = yaml.safe_load((d / "config.yaml").read_text()) or {}
        except (OSError, yaml.YAMLError):
            config = {}
        status = _json(d / "status.json")
        rows = [r for r in _jsonl(d / "eval.jsonl") if isinstance(r.get("eval/acc"), (int, float))]
        rows.sort(key=lambda r: r.get("step", 0))
        measured = next((r for r in reversed(rows) if "lab/bias_true" in r), {})
        get = lambda key, default: _lookup(params, config, key, default)    # noqa: E731
        out.append(LabTrial(
            trial_id=d.name, algorithm=str(get("algorithm", "?")), delay=int(get("delay", 0)),
            eps=float(get("eps", math.nan)), group_size=int(get("group_size", 0)), seed=int(get("seed", 0)),
            status=str(status.get("status", "running")) if isinstance(status, dict) else "running",
            steps=np.array([float(r.get("step", 0)) for r in rows]),
            acc=np.array([float(r["eval/acc"]) for r in rows]),
            measured={k: float(v) for k, v in measured.items()
                      if k.startswith("lab/") and isinstance(v, (int, float))}))
    return out


def fit_loglog(x: np.ndarray, y: np.ndarray, se: np.ndarray, x_min: float = 0.0, n_boot: int = 2000,
               seed: int = 0) -> dict[str, Any]:
    """Least-squares slope of log y on log x over the resolved points, with a 95% CI.

    Uses the points with x ≥ x_min and y > 2·se (a bias estimate indistinguishable from 0 has no log).
    Standard error of the slope: the larger of (a) the regression's residual standard error and (b) the
    spread of slopes refitted to log y + (se/y)·N(0, 1) (parametric bootstrap of the measurement errors,
    delta method on the log). CI = slope ± t_{0.975, n−2} · se. Fewer than 3 points: NaN.
    """
    x, y, se = (np.asarray(a, dtype=float) for a in (x, y, se))
    use = (x >= x_min) & (y > 2 * se) & (y > 0)
    out: dict[str, Any] = {"n": int(use.sum()), "x_used": x[use].tolist(), "slope": math.nan, "se": math.nan,
                           "lo": math.nan, "hi": math.nan, "intercept": math.nan}
    if use.sum() < 3:
        return out
    lx, ly, rel = np.log(x[use]), np.log(y[use]), se[use] / y[use]
    design = np.stack([np.ones_like(lx), lx], axis=1)
    coef, *_ = np.linalg.lstsq(design, ly, rcond=None)
    n = lx.size
    resid = ly - design @ coef
    cov = np.linalg.inv(design.T @ design)
    se_ols = math.sqrt(float(resid @ resid) / (n - 2) * cov[1, 1]) if n > 2 else math.inf
    rng = np.random.default_rng(seed)
    boot = ly[None, :] + rel[None, :] * rng.standard_normal((n_boot, n))
    slopes = np.linalg.lstsq(design, boot.T, rcond=None)[0][1]
    se_slope = max(se_ols, float(slopes.std()))
    t = float(sps.t.ppf(0.975, n - 2))
    out.update(slope=float(coef[1]), intercept=float(coef[0]), se=se_slope,
               lo=float(coef[1] - t * se_slope), hi=float(coef[1] + t * se_slope))
    return out


def spearman(x: list[float], y: list[float]) -> tuple[float, float, int]:
    """Spearman's ρ, its two-sided p-value, and n (NaN when fewer than 4 finite pairs)."""
    a, b = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 4 or np.ptp(a[ok]) == 0 or np.ptp(b[ok]) == 0:
        return math.nan, math.nan, int(ok.sum())
    res = sps.spearmanr(a[ok], b[ok])
    return float(res.statistic), float(res.pvalue), int(ok.sum())
