"""The per-step metrics of a batch and an update (names and meanings in docs/metrics.md): the rollout's,
the policy's against the behavior policy, and several micro-batches' or updates' rows combined as one.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from harness.store.trialdir import HIST_BINS, HIST_HIGH, HIST_LOW      # is_hist.jsonl's log ρ bins


def policy_metrics(logp: torch.Tensor, logp_behavior: torch.Tensor, mask: torch.Tensor, entropy: torch.Tensor) -> dict[str, float]:
    """Estimator-independent diagnostics of π_θ against π_b on the batch."""
    lam = (logp - logp_behavior) * mask                                   # (B, T)
    traj = lam.sum(1)                                                     # Λ_i
    ess = torch.exp(2 * torch.logsumexp(traj, 0) - torch.logsumexp(2 * traj, 0)) / traj.numel()
    m = mask.float()
    return {"policy/entropy": float((entropy * m).sum() / m.sum()),
            "policy/kl_behavior": float(((torch.exp(lam) - 1 - lam) * m).sum() / m.sum()),
            "is/ratio_mean": float((torch.exp(lam.clamp(max=80)) * m).sum() / m.sum()),
            "is/ratio_max": float(torch.exp(lam.masked_fill(~mask, -torch.inf).max().clamp(max=80))),
            "is/ess_frac": float(ess)}


QUANTILES = (0.01, 0.1, 0.5, 0.9, 0.99)            # of log ρ: is/log_ratio_q01 ... is/log_ratio_q99


def importance_diagnostics(logp: torch.Tensor, logp_behavior: torch.Tensor, mask: torch.Tensor, entropy: torch.Tensor,
                           adv: torch.Tensor, group_ids: torch.Tensor, eps: float
                           ) -> tuple[dict[str, float], dict[str, list[int]]]:
    """Per-token importance diagnostics of an update, estimator-independent (docs/metrics.md): the scalar
    metrics, and the histogram row of is_hist.jsonl (counts of log ρ; clipped and all tokens by position).

    "Clipped" is where the PPO clip at ε stops a token's gradient: A > 0 and ρ > 1 + ε, or A < 0 and
    ρ < 1 − ε (what grpo's loss does; other estimators clip, mask or weight those tokens their own way)."""
    lam = (logp - logp_behavior).detach()                                  # (B, T) log ρ
    m = mask.bool()
    a = adv[:, None].expand_as(lam)
    clipped = m & (((a > 0) & (lam > math.log1p(eps))) | ((a < 0) & (lam < math.log1p(-min(eps, 1 - 1e-6)))))
    values = lam[m].float()
    q = torch.quantile(values, torch.tensor(QUANTILES, dtype=values.dtype, device=values.device)).tolist()
    out = {f"is/log_ratio_q{round(p * 100):02d}": v for p, v in zip(QUANTILES, q)}
    for sign, side in (("pos", a > 0), ("neg", a < 0)):
        n = (m & side).sum()
        out[f"is/adv_{sign}_clipped_frac"] = float((clipped & side).sum() / n) if n else 0.0
    if clipped.any():                                   # absent when no token is clipped (combine_metrics)
        out["is/clipped_entropy"] = float(entropy[clipped].mean())
    traj = (lam * m).sum(1).view(-1, len(group_ids) // len(torch.unique(group_ids)))    # (P, G) Λ by group
    ess = torch.exp(2 * torch.logsumexp(traj, 1) - torch.logsumexp(2 * traj, 1)) / traj.shape[1]
    out["is/group_ess_mean"], out["is/group_ess_min"] = float(ess.mean()), float(ess.min())
    out.update(trajectory_regime(traj.double(), eps))
    edges = torch.linspace(HIST_LOW, HIST_HIGH, HIST_BINS + 1, dtype=values.dtype, device=values.device)
    bins = torch.bucketize(values, edges, right=True)          # 0: below −4; j: [edges[j−1], edges[j]); BINS+1: >= 4
    hist = {"log_ratio_counts": torch.bincount(bins, minlength=HIST_BINS + 2).tolist(),
            "clipped_by_position": clipped.sum(0).tolist(), "tokens_by_position": m.sum(0).tolist()}
    return out, hist


def trajectory_regime(traj: torch.Tensor, eps: float) -> dict[str, float]:
    """How heavy-tailed the trajectory weights r_i = exp(Λ_i) are, from Λ by group (P, G): quantiles of |Λ|,
    the batch's trajectory ESS (Σr)²/Σr² as a fraction of its responses, and the share of groups whose ratio
    mass Σ_{i∈g} r_i exceeds G(1 + ε) (the groups a group mass cap at C = G(1 + ε) rescales: gmc_grpo's rule,
    measured whatever the estimator). Benchmark v3 accepts a design on these (docs/benchmark-v3.md)."""
    flat = traj.flatten()
    q50, q90 = torch.quantile(flat.abs(), torch.tensor([0.5, 0.9], dtype=flat.dtype)).tolist()
    ess = torch.exp(2 * torch.logsumexp(flat, 0) - torch.logsumexp(2 * flat, 0)) / flat.numel()
    over = torch.logsumexp(traj, 1) > math.log(traj.shape[1] * (1 + eps))
    return {"is/traj_abs_log_ratio_q50": q50, "is/traj_abs_log_ratio_q90": q90,
            "is/traj_abs_log_ratio_max": float(flat.abs().max()), "is/traj_ess_frac": float(ess),
            "is/group_over_cap_frac": float(over.double().mean())}


def add_histograms(a: dict[str, list[int]] | None, b: dict[str, list[int]]) -> dict[str, list[int]]:
    """Two histogram rows as one (several updates of a batch): counts added, position lists padded, a key
    of one row alone kept."""
    if a is None:
        return b
    def add(x: list[int], y: list[int]) -> list[int]:
        n = max(len(x), len(y))
        return [(x[i] if i < len(x) else 0) + (y[i] if i < len(y) else 0) for i in range(n)]
    return {k: add(a.get(k, []), b.get(k, [])) for k in {**a, **b}}


def token_ages(r: Any, version: int) -> torch.Tensor | None:
    """(B, T) each token's age at policy `version` (version − the version that generated it), or None when
    every response has one version (no `token_version`; `stale/mean` says it all)."""
    return None if r.token_version is None else version - r.token_version


def token_staleness(r: Any, version: int) -> dict[str, float]:
    """Token-weighted staleness of in-flight updates (docs/metrics.md): the mean and max token age, the mean
    over responses of each response's mean token age, and how many versions a response spans."""
    age, m = token_ages(r, version), r.response_mask
    if age is None:
        return {}
    ages = age.masked_fill(~m, 0).float()
    n = m.sum(1).clamp_min(1)
    oldest = age.masked_fill(~m, -2**62).max(1).values
    newest = age.masked_fill(~m, 2**62).min(1).values
    return {"stale/token_mean": float(ages.sum() / m.sum()), "stale/token_max": float(age[m].max()),
            "stale/response_mean": float((ages.sum(1) / n).mean()),
            "stale/response_span_mean": float((oldest - newest).float().mean())}


def token_age_histogram(r: Any, version: int) -> dict[str, list[int]]:
    """is_hist.jsonl's `token_age_counts`: valid tokens by age 0, 1, 2, ... at `version` (none without in-flight
    updates)."""
    age = token_ages(r, version)
    return {} if age is None else {"token_age_counts": torch.bincount(age[r.response_mask].flatten()).tolist()}


def rollout_metrics(batch: Any, version: int, part: Any = None) -> dict[str, float]:
    """The consumed batch's rewards, lengths and generation speed, and the staleness at policy `version` of
    the rows an update consumes (`part`, a minibatch of it; default the whole batch; trainer.Batch)."""
    r = batch.rollout
    staleness = (version - (batch if part is None else part).rollout.version).float()
    rewards = batch.rewards.view(-1, len(batch.rewards) // len(batch.problems))
    return {"train/reward_mean": float(batch.rewards.mean()),
            "rollout/len_mean": float(r.response_mask.sum(1).float().mean()),
            "rollout/zero_adv_frac": float((rewards.max(1).values == rewards.min(1).values).float().mean()),
            "stale/mean": float(staleness.mean()), "stale/max": float(staleness.max()),
            "perf/rollout_s": r.seconds, "perf/tokens_per_s": r.num_tokens / max(r.seconds, 1e-9),
            **token_staleness((batch if part is None else part).rollout, version),
            **({} if batch.engine_gap is None else batch.engine_gap.metrics()),
            **({} if r.logp_rollout is None else mismatch_metrics(r.logp_behavior, r.logp_rollout, r.response_mask))}


def mismatch_metrics(logp_behavior: torch.Tensor, logp_rollout: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """The engine's log-probs against the trainer's on the same tokens (sampled by the engine):
    δ = log π_b − log π_rollout per token."""
    delta = (logp_behavior - logp_rollout)[mask]
    return {"mismatch/log_ratio_mean": float(delta.mean()),
            "mismatch/log_ratio_absmax": float(delta.abs().max()),
            "mismatch/kl": float((torch.exp(delta) - 1 - delta).mean())}     # k3 estimate of KL(π_rollout ‖ π_b)


_MAX, _MIN = ("_max", "/max"), ("_min", "/min")
_EXTREMES = _MAX + _MIN


def combine_metrics(parts: list[tuple[float, dict[str, float]]]) -> dict[str, float]:
    """Metrics of several micro-batches or updates as one row: `…_max`/`…/max` keys take the max,
    `…_min`/`…/min` the min, every other key the mean weighted by each part's share (over the parts that
    have the key, when some lack it: e.g. is/clipped_entropy of updates without a clipped token)."""
    out: dict[str, float] = {}
    shares: dict[str, tuple[int, float]] = {}
    for share, metrics in parts:
        for key, value in metrics.items():
            seen, total = shares.get(key, (0, 0.0))
            shares[key] = (seen + 1, total + share)
            if key not in out:
                out[key] = value if key.endswith(_EXTREMES) else share * value
            elif key.endswith(_MAX):
                out[key] = max(out[key], value)
            elif key.endswith(_MIN):
                out[key] = min(out[key], value)
            else:
                out[key] += share * value
    for key, (seen, total) in shares.items():
        if seen < len(parts) and not key.endswith(_EXTREMES) and total > 0:
            out[key] /= total
    return out
