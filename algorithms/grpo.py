"""grpo — token-level PPO clip against the behavior policy.

References: DeepSeekMath (arXiv 2402.03300) for GRPO; DAPO (arXiv 2503.14476) for clip-higher.
With dual_clip 3 it is verl's `compute_policy_loss_vanilla` (verl/trainer/ppo/core_algos.py, clip_ratio_c 3.0) on the
sampler's log-probs, golden-tested at volcengine/verl b178a3cd56f58b2d502255daba591e92833930a7 and verl-project/verl
1dda039b9c6311889a9c9a26040677e1254814f9: tests/data/golden/verl_policy_losses.json, loss_mode vanilla.
Policies read: π_θ (`logp`) and π_b (`logp_behavior`).

Objective (per valid token, A broadcast over the response):
    ℓ_{i,t} = max(−A_i ρ_{i,t}, −A_i clip(ρ_{i,t}, 1 − ε_low, 1 + ε_high))
    optional dual clip (c > 1): for A_i < 0, ℓ_{i,t} = min(ℓ_{i,t}, −c A_i)

Symbols → code: ρ = exp(logp − logp_behavior) (`token_ratio`), A = `inp.advantages`,
ε_low = `eps_low` (default ε = `eps`), ε_high = `eps_high` (default ε; DAPO uses 0.28), c = `dual_clip`.

Deviations from the papers:
1. The ratio is taken against π_b (the stale behavior policy), not π_old of the current batch: under
   delay this is the "stale GRPO" baseline of the GMC paper, and ρ ≠ 1 from the first update.
2. [ours] log-ratios are clamped to ±20 before exp for numerical safety (see common.py).
3. The KL penalty of the original GRPO is not part of the estimator; the trainer adds it when β > 0.
"""
from __future__ import annotations

from .common import BatchContext, LossInputs, clipped_tokens, masked_mean, ppo_clip_token_loss, token_ratio
from .registry import register


@register("grpo", trust_region="token-clip", correction="token-is", reads=("theta", "behavior"),
          source="paper 2402.03300 (DeepSeekMath); clip-higher 2503.14476 (DAPO)")
def grpo(inp: LossInputs, ctx: BatchContext, *, eps: float, eps_low: float | None = None,
         eps_high: float | None = None, dual_clip: float | None = None):
    low = 1.0 - (eps if eps_low is None else eps_low)
    high = 1.0 + (eps if eps_high is None else eps_high)
    ratio = token_ratio(inp)                                     # (B, T)
    loss = ppo_clip_token_loss(ratio, inp.advantages, low, high, dual_clip)
    clip_low, clip_high = clipped_tokens(ratio, inp.advantages, low, high)
    metrics = {
        "is/clip_frac_low": masked_mean(clip_low.float(), inp.mask),
        "is/clip_frac_high": masked_mean(clip_high.float(), inp.mask),
        "is/clip_frac": masked_mean((clip_low | clip_high).float(), inp.mask),
    }
    return loss, metrics
