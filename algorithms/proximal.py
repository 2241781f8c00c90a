"""π_prox without a forward: AReaL's A-3PO interpolation from the version tags (`train.prox_logp`).

Decoupled PPO's proximal policy π_prox is the trainer's policy when it starts consuming a batch; stalebench
recomputes it with a forward of the batch (`train.prox_logp: recompute`). A-3PO (AReaL's
`actor.prox_logp_method: loglinear`) skips that forward: it interpolates between the behaviour log-probs and
the current ones, by how far each token's version lies from the proximal version.

Symbols -> arguments (AReaL's names in brackets):
    log π_b    logp_behavior     [old_logp]         the rollout's log-probs (stalebench's π_rollout where it has one)
    log π_θ    logp              [logprobs]         the current policy's, detached
    v_b        versions          [versions]         the policy version that generated each token
    v_θ        current_version   [current_version]  the trainer's version when the batch's first update began
    v_prox = v_θ − 1                                AReaL's "last broadcast" version

    α = clamp((v_prox − v_b) / (v_θ − v_b), 0, 1)   where v_θ > v_b and v_b ≥ 0, else 0 (float32, as AReaL)
    loglinear:  log π_prox = log π_b + α (log π_θ − log π_b)
    linear:     log π_prox = log((1 − α) π_b + α π_θ + 1e-10)

Source: inclusionAI/AReaL@4aef98d8d818af55b43621aaadba047ae10f4e77, areal/trainer/ppo/actor.py
`compute_prox_logp_approximations` (called by `_resolve_proximal_logp` in `grpo_loss_fn`; `current_version`
is `engine.get_version()` read once before the minibatch loop of `ppo_update`), areal/api/cli_args.py
`prox_logp_method`. Golden numbers from that function: tests/data/areal_prox_logp.json.
Deviations:
  1. `linear` is not a value of AReaL's `prox_logp_method` (its choices are recompute, loglinear and metrics):
     AReaL computes it only as a metric (`metrics` mode). Here it can also train, with the same formula.
"""
from __future__ import annotations

import torch
from torch import Tensor

PROX_LOGP_METHODS = ("recompute", "loglinear", "linear")     # train.prox_logp; recompute: a forward (the trainer)


def interpolation_weight(versions: Tensor, current_version: int) -> Tensor:
    """α per token, float32: 0 for tokens of the current or the proximal version, → 1 as they age."""
    v_behave = versions.float()
    v_theta = float(current_version)
    version_diff = v_theta - v_behave
    alpha = torch.where((version_diff > 0) & (versions >= 0), (v_theta - 1 - v_behave) / version_diff,
                        torch.zeros_like(v_behave))           # version < 0: AReaL's prompt tokens
    return alpha.clamp(0.0, 1.0)


def interpolate_proximal(logp_behavior: Tensor, logp: Tensor, versions: Tensor, current_version: int,
                         method: str) -> Tensor:
    """log π_prox (B, T) from log π_b, log π_θ (detached) and each token's version (B, T); `method` loglinear
    or linear (module docstring)."""
    alpha = interpolation_weight(versions, current_version)
    if method == "loglinear":
        return logp_behavior + alpha * (logp - logp_behavior)
    if method == "linear":
        return torch.log((1 - alpha) * torch.exp(logp_behavior) + alpha * torch.exp(logp) + 1e-10)
    raise ValueError(f"unknown proximal interpolation {method!r}; valid: loglinear, linear")
