"""rollout_rs_bypass — verl's rollout correction in bypass mode: π_old := π_rollout, rejection sampling, PPO clip or REINFORCE.

Reference: verl verl/trainer/ppo/core_algos.py `compute_policy_loss_bypass_mode` (with
`compute_policy_loss_vanilla` for loss_type "ppo_clip" and `compute_policy_loss_reinforce` for "reinforce"),
verl/trainer/ppo/rollout_corr_helper.py (the rejection mask and IS weight, algorithms/rejection.py) and the
presets of verl/trainer/config/algorithm.py (bypass_ppo_clip_geo_rs, bypass_ppo_clip_k3_rs, bypass_pg_geo_rs,
bypass_pg_is, ...), commit b178a3cd56f58b2d502255daba591e92833930a7. Policies read: π_θ and π_rollout.

    λ = log(π_θ / π_rollout) per token, detached;  keep = the tokens every `rs` option keeps
    "ppo_clip":  ℓ = keep · PPO(ρ),  ρ = π_θ / π_rollout  (PPO with verl's dual clip c for A < 0; no IS weight)
    "pg":        ℓ = −keep · w · A · log π_θ,  w = verl's rollout IS weight of λ at `is_level` (1 when None)
    times N_all / N_kept over the step batch for normalize "kept", 1 for "all"

verl normalizes bypass mode two ways: its loss function alone divides by the tokens left after rejection
(agg_loss without global batch info: `normalize="kept"`), while its engine workers pass the step's token count
of the unrejected mask (verl/workers/utils/losses.py `ppo_loss`: `normalize="all"`, the default here, which
the suite's token-mean already is).
Symbols → code: `loss` ("ppo_clip" | "pg", verl's loss_type ppo_clip | reinforce), `rs` (None: no rejection), `rs_threshold`,
`is_level`, `is_threshold` ("lo_hi": IcePop, newer verl's bypass_pg_token_icepop), c = `clip_ratio_c` (3.0), ε = `eps`, ε_high = `eps_high`. Defaults: the preset
bypass_ppo_clip_geo_rs (seq_mean_k1, 0.999_1.001).
Golden test: tests/test_algorithms_golden.py (tests/data/golden/verl_rollout_corr.json).
Deviations: `is_batch_normalize` (verl's rollout_is_batch_normalize) divides by the weight's mean over the whole
step batch; verl's bypass loss takes it over the micro-batch it is handed. [ours] with "kept" and every token rejected verl's bare loss is 0/0 (NaN); ours is 0. With the
suite's other aggregations the factor multiplies them as it is (verl recounts per sequence).
"""
from __future__ import annotations

import torch

from .common import (MAX_TOKEN_LOG_RATIO, BatchContext, LossInputs, clipped_tokens, masked_mean, ppo_clip_token_loss,
                     rollout_log_prob)
from .registry import register
from .rejection import check_is, is_weight, rs_context

NAME = "rollout_rs_bypass"
LOSSES = ("ppo_clip", "pg")


def _log_ratio(inp: LossInputs):
    return (inp.logp.detach() - rollout_log_prob(inp)) * inp.mask


def prepare(inp: LossInputs, *, eps: float, rs: str | None = "seq_mean_k1", rs_threshold: str | float | None = "0.999_1.001",
            normalize: str = "all", is_level: str | None = None, is_threshold: float | str = 2.0,
            is_batch_normalize: bool = False) -> BatchContext:
    return rs_context(NAME, _log_ratio(inp), inp.mask, rs=rs, rs_threshold=rs_threshold, normalize=normalize,
                      is_level=is_level, is_threshold=is_threshold, is_batch_normalize=is_batch_normalize)


@register(NAME, prepare=prepare, trust_region="sequence-mask", correction="none", reads=("theta", "rollout"),
          source="verl verl/trainer/ppo/core_algos.py@b178a3cd56f58b2d502255daba591e92833930a7 (bypass_mode)")
def rollout_rs_bypass(inp: LossInputs, ctx: BatchContext, *, eps: float, loss: str = "ppo_clip",
                      is_level: str | None = None, is_threshold: float | str = 2.0, clip_ratio_c: float = 3.0,
                      eps_high: float | None = None):
    if loss not in LOSSES:
        raise ValueError(f"{NAME}: loss must be one of {', '.join(LOSSES)} (verl's loss_type ppo_clip | reinforce); got {loss!r}")
    check_is(NAME, is_level, is_threshold)
    keep = ctx.tensors["keep"].to(inp.logp.dtype) * ctx.tensors["scale"].to(inp.logp.dtype)
    lam = ((inp.logp - rollout_log_prob(inp)) * inp.mask).clamp(-MAX_TOKEN_LOG_RATIO, MAX_TOKEN_LOG_RATIO)
    ratio = torch.exp(lam)                                                               # (B, T)
    if loss == "pg":
        weight = is_weight(_log_ratio(inp), inp.mask, is_level, is_threshold) * ctx.tensors["is_scale"].to(lam.dtype)
        token_loss = -inp.advantages.unsqueeze(1) * inp.logp * weight * keep
        return token_loss, {"rs/is_weight_mean": masked_mean(weight.expand_as(ratio), inp.mask)}
    low, high = 1.0 - eps, 1.0 + (eps if eps_high is None else eps_high)
    clip_low, clip_high = clipped_tokens(ratio, inp.advantages, low, high)
    token_loss = ppo_clip_token_loss(ratio, inp.advantages, low, high, dual_clip=clip_ratio_c) * keep
    return token_loss, {"rs/clip_frac": masked_mean((clip_low | clip_high).float(), inp.mask)}
