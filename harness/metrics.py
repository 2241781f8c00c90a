"""The per-step metrics of a batch and an update (names and meanings in docs/metrics.md): the rollout's,
the policy's against the behavior policy, and several micro-batches' or updates' rows combined as one.
"""
from __future__ import annotations

from typing import Any

import torch


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


def rollout_metrics(batch: Any, version: int) -> dict[str, float]:
    """The consumed batch's rewards, lengths, staleness at policy `version` and generation speed
    (`batch`: a trainer.Batch)."""
    r = batch.rollout
    staleness = (version - r.version).float()
    rewards = batch.rewards.view(-1, len(batch.rewards) // len(batch.problems))
    return {"train/reward_mean": float(batch.rewards.mean()),
            "rollout/len_mean": float(r.response_mask.sum(1).float().mean()),
            "rollout/zero_adv_frac": float((rewards.max(1).values == rewards.min(1).values).float().mean()),
            "stale/mean": float(staleness.mean()), "stale/max": float(staleness.max()),
            "perf/rollout_s": r.seconds, "perf/tokens_per_s": r.num_tokens / max(r.seconds, 1e-9),
            **({} if batch.engine_gap is None else {"is/engine_gap_max": batch.engine_gap}),
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
    `…_min`/`…/min` the min, every other key the mean weighted by each part's share."""
    out: dict[str, float] = {}
    for share, metrics in parts:
        for key, value in metrics.items():
            if key not in out:
                out[key] = value if key.endswith(_EXTREMES) else share * value
            elif key.endswith(_MAX):
                out[key] = max(out[key], value)
            elif key.endswith(_MIN):
                out[key] = min(out[key], value)
            else:
                out[key] += share * value
    return out
