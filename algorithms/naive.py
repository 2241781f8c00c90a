"""naive — the stale batch treated as on-policy: PPO clip against the proximal policy, no behavior correction.

What a synchronous trainer does when asynchronous rollouts reach it and its "old" log-probs are
recomputed by the current actor before the update: the behavior policy π_b is forgotten.

Objective (per valid token, A broadcast over the response):
    ℓ_{i,t} = max(−A_i ρ'_{i,t}, −A_i clip(ρ'_{i,t}, 1 − ε, 1 + ε_high)),   ρ' = π_θ / π_prox

Symbols → code: ρ' = `proximal_ratio`, π_prox = `logp_proximal` (with one update per batch π_prox is
π_θ at the start of the step, so ρ' = 1 and the gradient is −A ∇log π_θ: REINFORCE with the group
baseline on data from a `delay`-old policy), ε = `eps`, ε_high = `eps_high` (default ε).

Policies read: π_θ (`logp`) and π_prox (`logp_proximal`); never π_b or π_rollout.
Deviations: none beyond the stalebench-wide ones ([ours] log-ratios clamped to ±20, common.py). This is a
baseline of ours: it measures what ignoring staleness costs. It is AReaL's `ppo_actor_loss_fn` with
`rejection_sampling: null` (inclusionAI/AReaL 4aef98d8d818af55b43621aaadba047ae10f4e77), golden-tested:
tests/data/golden/areal_rejection.json.
"""
from __future__ import annotations

from .common import BatchContext, LossInputs, clipped_tokens, masked_mean, ppo_clip_token_loss, proximal_ratio
from .registry import register


@register("naive", trust_region="token-clip", correction="none", reads=("theta", "prox"),
          source="ours: baseline (staleness ignored)")
def naive(inp: LossInputs, ctx: BatchContext, *, eps: float, eps_high: float | None = None):
    low, high = 1.0 - eps, 1.0 + (eps if eps_high is None else eps_high)
    ratio = proximal_ratio(inp)                                  # (B, T)
    loss = ppo_clip_token_loss(ratio, inp.advantages, low, high)
    clip_low, clip_high = clipped_tokens(ratio, inp.advantages, low, high)
    return loss, {"naive/clip_frac": masked_mean((clip_low | clip_high).float(), inp.mask)}
