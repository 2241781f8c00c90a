"""dro — verl's DRO loss: REINFORCE with a quadratic penalty on the log-ratio to π_prox.

Reference: verl verl/trainer/ppo/core_algos.py `compute_policy_loss_dro`, commit
1dda039b9c6311889a9c9a26040677e1254814f9 (verl-project/verl). Policies read: π_θ and π_prox (verl's
old_log_prob), and π_rollout when `is_level` applies verl's rollout IS weight (algorithms/rejection.py).

    ℓ_{i,t} = −w · (A_i log π_θ − β/2 (log π_θ − log π_prox)²),   w = verl's rollout IS weight (1 when is_level is None)

Symbols → code: β = `beta` (verl's policy_loss.dro_beta, which has no default there: it must be set; 0.1 here is
[ours]), `is_level` / `is_threshold`; `eps` is accepted and unused. With one update per batch π_prox = π_θ and the
gradient is naive's. Golden test: tests/test_algorithms_golden.py (tests/data/golden/verl_policy_losses.json).
Deviations: [ours] the default β; the log-ratio is not clamped, as in verl.
"""
from __future__ import annotations

from .common import BatchContext, LossInputs, masked_mean, proximal_log_prob, rollout_log_prob
from .registry import register
from .rejection import check_is, is_weight


@register("dro", uses_eps=False, trust_region="none", correction="none", reads=("theta", "prox", "rollout"),
          source="verl verl/trainer/ppo/core_algos.py@1dda039b9c6311889a9c9a26040677e1254814f9 (dro)")
def dro(inp: LossInputs, ctx: BatchContext, *, eps: float, beta: float = 0.1, is_level: str | None = None,
        is_threshold: float = 2.0):
    if not beta > 0:
        raise ValueError(f"dro: beta must be > 0 (verl's policy_loss.dro_beta); got {beta}")
    check_is("dro", is_level, is_threshold)
    logp_old = proximal_log_prob(inp)
    weight = is_weight((logp_old - rollout_log_prob(inp)) * inp.mask, inp.mask, is_level, is_threshold)
    log_ratio = (inp.logp - logp_old) * inp.mask
    loss = -weight * (inp.advantages.unsqueeze(1) * inp.logp - 0.5 * beta * log_ratio ** 2)
    return loss, {"dro/log_ratio_sq_mean": masked_mean(log_ratio.detach() ** 2, inp.mask)}
