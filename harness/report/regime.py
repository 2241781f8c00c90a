"""Each cell's own trajectory regime: how far the responses it trained on were from the policy that
generated them, at the step size the cell actually ran.

Per trial, the mean over the second half of its logged steps (step > its last step / 2, the same cut as
the importance diagnostics) of each logged regime metric (docs/metrics.md):

| field | metric | what |
|---|---|---|
| median_abs_log_ratio | is/traj_abs_log_ratio_q50 | median over the responses of \\|Λ_i\\|, Λ_i = Σ_t log ρ_{i,t} |
| q90_abs_log_ratio | is/traj_abs_log_ratio_q90 | its 90% quantile |
| traj_ess | is/traj_ess_frac | trajectory ESS (Σr)²/(B·Σr²), r_i = exp(Λ_i) |
| over_cap | is/group_over_cap_frac | share of prompt groups whose ratio mass Σ_g r exceeds C = G(1+ε) |
| cap_scale | gmc/scale_mean | mean scale min(1, C/Σ_g r) of a group mass cap (only estimators that apply one log it) |
| kl_behavior | policy/kl_behavior | per-token KL(π_b ‖ π_θ), k3 estimator |

then per cell the mean over its finished trials (``trials`` counts those that logged the median). The
realized staleness of the cell (``stale_mean``: the mean of ``stale/mean`` after the warm-up; ``stale_max``:
the largest ``stale/max``) says what its delay means: with k minibatch updates per batch, "delay 0" trains on
responses 0..k−1 updates old (``staleness_label``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness.report.load import CAP_SCALE_KEY
from harness.report.render import show
from harness.report.sections import Section
from harness.store import trialdir

FIELDS = {"is/traj_abs_log_ratio_q50": "median_abs_log_ratio", "is/traj_abs_log_ratio_q90": "q90_abs_log_ratio",
          "is/traj_ess_frac": "traj_ess", "is/group_over_cap_frac": "over_cap", CAP_SCALE_KEY: "cap_scale",
          "policy/kl_behavior": "kl_behavior"}
HEADERS = {"median_abs_log_ratio": "median |Λ|", "q90_abs_log_ratio": "q90 |Λ|", "traj_ess": "trajectory ESS / B",
           "over_cap": "groups over G(1+ε)", "cap_scale": "group cap's mean scale",
           "kl_behavior": "KL to π_b per token"}


def late_means(metrics: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per trial (index trial_id), the mean of each of ``keys`` over the second half of its logged steps
    (step > its last step / 2): the cut of every regime figure."""
    late = metrics[metrics["step"] > metrics.groupby("trial_id", observed=True)["step"].transform("max") / 2]
    return late.groupby("trial_id", observed=True)[keys].mean()


def cell_regime(metrics: pd.DataFrame, cell_trials: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per cell of ``cell_trials`` (``tables.expand_shared`` rows with ``stale_mean``) whose finished
    trials logged the regime: the cell ``keys``, ``trials``, ``stale_mean``, ``stale_max`` and every FIELDS
    value (NaN where no trial of the cell logged it). Empty when no trial logged the median |Λ|."""
    logged = [k for k in FIELDS if k in metrics.columns]
    columns = [*keys, "trials", "stale_mean", "stale_max", *FIELDS.values()]
    if "is/traj_abs_log_ratio_q50" not in logged:
        return pd.DataFrame(columns=columns)
    m = metrics[["trial_id", "step", *logged, *(["stale/max"] if "stale/max" in metrics.columns else [])]]
    per_trial = late_means(m, logged)
    per_trial["stale_max"] = (m.groupby("trial_id", observed=True)["stale/max"].max()
                              if "stale/max" in m.columns else np.nan)
    done = cell_trials[cell_trials["status"].isin(trialdir.FINAL) & cell_trials["delay"].notna()]
    done = done.join(per_trial.rename(columns=FIELDS), on="trial_id")
    done = done[done["median_abs_log_ratio"].notna()]
    rows = []
    for values, g in done.groupby(keys, dropna=False, sort=True):
        values = values if isinstance(values, tuple) else (values,)
        rows.append({**dict(zip(keys, values)), "trials": len(g), "stale_mean": g["stale_mean"].mean(),
                     "stale_max": g["stale_max"].max(),
                     **{f: g[f].mean() if f in g and g[f].notna().any() else np.nan for f in FIELDS.values()}})
    return pd.DataFrame(rows, columns=columns)


def staleness_label(delay: object, stale_mean: float, stale_max: float) -> str:
    """The delay with the staleness it really had when that differs: ``0 (staleness 0–3, mean 1.5)`` for
    delay 0 at k = 4 minibatch updates; the delay alone when every response was exactly that old."""
    d = show(delay)
    if not (np.isfinite(stale_max) and np.isfinite(stale_mean)) or stale_max <= float(delay) + 0.5:
        return d
    return f"{d} (staleness {d}–{show(stale_max)}, mean {stale_mean:.3g})"


def staleness_note(labels: dict[float, str]) -> str:
    """A sentence for the paper table when some delay's responses were not all that old (``staleness_label`` per
    delay), e.g. with k = 4 minibatch updates per batch; "" when every delay is its staleness."""
    shown = [text for delay, text in sorted(labels.items()) if text != show(delay)]
    if not shown:
        return ""
    on_policy = " Delay 0 here is not on-policy." if any(d == 0 and t != show(d) for d, t in labels.items()) else ""
    return ("With k minibatch updates per batch an update trains on responses delay..delay + k − 1 updates old, so "
            "the columns mean: delay " + "; delay ".join(shown) + "." + on_policy)


def regime_section(regime: pd.DataFrame) -> list[Section]:
    """The first-screen section "Each cell's regime": one row per cell (``cell_regime`` by slice, algorithm
    and delay), [] when none."""
    if regime.empty:
        return []
    fields = [f for f in FIELDS.values() if regime[f].notna().any()]
    tables = regime["slice"].astype(str).str.len().gt(0).any()
    rows = []
    for r in regime.to_dict("records"):
        rows.append({**({"table": str(r["slice"])} if tables else {}), "estimator": str(r["algorithm"]),
                     "delay": staleness_label(r["delay"], r["stale_mean"], r["stale_max"]), "trials": str(r["trials"]),
                     **{HEADERS[f]: _fmt(f, r[f]) for f in fields}})
    text = ("The regime each cell trained in, at its own step size: per trial the mean over the second half of "
            "its updates, then the mean over the cell's trials. Λ_i is a response's summed log-ratio to the "
            "behaviour policy π_b, r_i = exp(Λ_i); 'groups over G(1+ε)' is the share of prompt groups whose ratio "
            "mass exceeds G(1+ε) (the groups a group mass cap at that level rescales; for ratios of mean one it "
            "cannot grow without bound, docs/benchmark-v3.md's amendment of 2026-12-06); the cap's mean scale is "
            "shown for estimators that apply one. A delay with k minibatch updates per batch is shown with the "
            "staleness it had (delay..delay + k − 1).")
    return [Section("Each cell's regime", [{"text": text}, {"table": {"columns": list(rows[0]), "rows": rows}}])]


def _fmt(field: str, value: float) -> str:
    if not np.isfinite(value):
        return "—"
    if field == "over_cap":
        return f"{100 * value:.1f}%"
    return f"{value:.3f}" if field in ("traj_ess", "cap_scale") else f"{value:.3g}"
