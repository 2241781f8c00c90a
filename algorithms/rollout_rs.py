"""rollout_rs — verl's rollout correction in decoupled mode: rejection sampling (Geo-RS, K3-RS, ...) with optional IS.

Reference: verl verl/trainer/ppo/rollout_corr_helper.py `compute_rollout_correction_and_rejection_mask`
(bypass_mode=False), the PPO loss verl/trainer/ppo/core_algos.py `compute_policy_loss_vanilla`, and the presets
of verl/trainer/config/algorithm.py `RolloutCorrectionConfig` (decoupled_geo_rs, decoupled_k3_rs,
decoupled_k3_rs_token_tis, decoupled_geo_rs_seq_tis, ...), commit b178a3cd56f58b2d502255daba591e92833930a7;
docs/algo/rollout_corr.md. Policies read: π_θ, π_prox (verl's old_log_prob) and π_rollout.

    λ = log(π_prox / π_rollout) per token;   keep = the tokens every `rs` option keeps (algorithms/rejection.py)
    w = verl's rollout IS weight of λ at `is_level` (1 when None), detached
    ℓ_{i,t} = keep · w · PPO(ρ'),  ρ' = π_θ / π_prox,  PPO = max(−A ρ', −A clip(ρ', 1 − ε, 1 + ε_high)),
              and for A < 0 min(PPO, −c A)  (verl's dual clip, always on)
    times N_all / N_kept over the step batch (normalize "kept"): verl drops rejected tokens from the mask

Symbols → code: rs = `rs` (verl's rollout_rs, comma-separated options allowed; None: no rejection), its threshold = `rs_threshold`
(verl's rollout_rs_threshold), IS level and cap C = `is_level`, `is_threshold` (a string "lo_hi": IcePop, as newer
verl's preset decoupled_token_icepop), c = `clip_ratio_c` (verl's
actor default 3.0), ε = `eps`, ε_high = `eps_high` (default ε). Defaults: the preset decoupled_geo_rs
(seq_mean_k1, 0.999_1.001, no IS); rs None with is_level "token" / "sequence" is decoupled_token_is / decoupled_seq_is
(`tis` / `tis_seq` with verl's dual clip).
Golden test: tests/test_algorithms_golden.py runs the presets and every rs option against numbers computed
with verl's own functions (tests/data/golden/verl_rollout_corr.json).
Deviations: [ours] when every token of the step is rejected verl's loss is 0/0 (NaN); ours is 0 with zero
gradient. `normalize` "kept" reproduces verl's token-mean exactly; with the suite's other aggregations the
same factor N_all / N_kept multiplies them, where verl would recount per sequence. verl's
rollout_is_batch_normalize (`is_batch_normalize`) divides by the weight's mean over the step batch.
"""
from __future__ import annotations

from .common import (BatchContext, LossInputs, clipped_tokens, masked_mean, ppo_clip_token_loss, proximal_log_prob,
                     proximal_ratio, rollout_log_prob)
from .registry import register
from .rejection import check_is, is_weight, rs_context

NAME = "rollout_rs"


def _log_ratio(inp: LossInputs):
    return (proximal_log_prob(inp) - rollout_log_prob(inp)) * inp.mask


def prepare(inp: LossInputs, *, eps: float, rs: str | None = "seq_mean_k1", rs_threshold: str | float | None = "0.999_1.001",
            normalize: str = "kept", is_level: str | None = None, is_threshold: float | str = 2.0,
            is_batch_normalize: bool = False) -> BatchContext:
    return rs_context(NAME, _log_ratio(inp), inp.mask, rs=rs, rs_threshold=rs_threshold, normalize=normalize,
                      is_level=is_level, is_threshold=is_threshold, is_batch_normalize=is_batch_normalize)


@register(NAME, prepare=prepare, trust_region="sequence-mask", correction="none", reads=("theta", "prox", "rollout"),
          source="verl verl/trainer/ppo/rollout_corr_helper.py@b178a3cd56f58b2d502255daba591e92833930a7 (decoupled rollout_rs)")
def rollout_rs(inp: LossInputs, ctx: BatchContext, *, eps: float, is_level: str | None = None,
               is_threshold: float | str = 2.0, clip_ratio_c: float = 3.0, eps_high: float | None = None):
    check_is(NAME, is_level, is_threshold)
    low, high = 1.0 - eps, 1.0 + (eps if eps_high is None else eps_high)
    ratio = proximal_ratio(inp)                                                          # (B, T)
    weight = is_weight(_log_ratio(inp), inp.mask, is_level, is_threshold) * ctx.tensors["is_scale"].to(ratio.dtype)
    keep = ctx.tensors["keep"].to(ratio.dtype)
    ppo = ppo_clip_token_loss(ratio, inp.advantages, low, high, dual_clip=clip_ratio_c)
    loss = ppo * weight * keep * ctx.tensors["scale"].to(ratio.dtype)
    clip_low, clip_high = clipped_tokens(ratio, inp.advantages, low, high)
    return loss, {"rs/clip_frac": masked_mean((clip_low | clip_high).float(), inp.mask),
                  "rs/is_weight_mean": masked_mean(weight.expand_as(ratio), inp.mask)}
