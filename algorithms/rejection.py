"""verl's rollout-correction rejection sampling, the building block of rollout_rs and rollout_rs_bypass (not an estimator).

Reference: verl verl/trainer/ppo/rollout_corr_helper.py `compute_rollout_rejection_mask`,
`_parse_rollout_rs_thresholds` and `compute_rollout_correction_weights`, commit
b178a3cd56f58b2d502255daba591e92833930a7. With λ the per-token log-ratio of the policy being corrected to
π_rollout (clamped to ±20), verl's divergence statistics are

    k1 = −λ,   k2 = λ² / 2,   k3 = e^λ − 1 − λ
    token_k*:     per token;                       seq_sum_k*:  Σ_t m k;
    seq_mean_k*:  Σ_t m k / (Σ_t m + 1e-8) (verl's masked_mean; seq_mean_k1 is Geo-RS);
    seq_max_k*:   max_t over valid tokens (k2, k3 only)

A k1 option keeps log(lower) ≤ stat ≤ log(upper) (threshold "lower_upper", or one number u meaning
[1/u, u]); the others keep stat ≤ upper (one number). Options separated by commas must all pass. A sequence
option keeps or rejects all of a response's tokens. The IS weight of verl's `rollout_is` is
min(e^λ, C) per token ("token") or min(exp(clamp(Σ_t m λ, ±20)), C) per response ("sequence"), detached; with a
threshold "lo_hi" (newer verl, verl-project/verl 1dda039b9c6311889a9c9a26040677e1254814f9, presets
decoupled_token_icepop and bypass_pg_token_icepop) the raw weight is zeroed outside [lo, hi] instead (IcePop).
`is_batch_scale` is verl's rollout_is_batch_normalize (the weight divided by its batch mean), computed over the
whole step batch (verl: over what its loss function is handed, the step batch in decoupled mode).

verl drops the rejected tokens from the loss mask, so its token-mean divides by the tokens left; stalebench
aggregates over the trainer's mask, so `kept_scale` returns N_all / N_kept over the whole step batch, the
factor that turns the suite's token-mean into verl's. [ours] When every token is rejected verl's loss is
0/0 (NaN); the factor is then 0, so the loss and gradient are 0.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from .common import MAX_TOKEN_LOG_RATIO, BatchContext

RS_OPTIONS = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
              "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3")
IS_LEVELS = ("token", "sequence")
NORMALIZATIONS = ("kept", "all")      # divide by the tokens left after rejection (verl's) or by all tokens


def parse_rs(name: str, rs: str | None, threshold: str | float | None) -> list[tuple[str, float | None, float]]:
    """verl's `rollout_rs` and `rollout_rs_threshold` -> [(option, lower bound or None, upper bound)], the k1
    bounds as logs; [] for rs None (no rejection). Raises ValueError naming the problem."""
    if rs is None:
        return []
    if threshold is None:
        raise ValueError(f"{name}: rs {rs!r} needs an rs_threshold (verl's rollout_rs_threshold)")
    options = list(dict.fromkeys(o.strip() for o in str(rs).split(",") if o.strip()))
    bad = [o for o in options if o not in RS_OPTIONS]
    if not options or bad:
        raise ValueError(f"{name}: rs {rs!r} is not a comma-separated list of {', '.join(RS_OPTIONS)}")
    specs = [s.strip() for s in str(threshold).split(",") if s.strip()]
    if len(specs) not in (1, len(options)):
        raise ValueError(f"{name}: rs_threshold {threshold!r} needs one value or one per rs option ({len(options)})")
    specs = specs * len(options) if len(specs) == 1 else specs
    parsed = []
    for option, spec in zip(options, specs):
        try:
            if option.endswith("k1"):
                low, high = (float(x) for x in spec.split("_", 1)) if "_" in spec else (1.0 / float(spec), float(spec))
            elif "_" in spec:
                raise ValueError
            else:
                low, high = None, float(spec)
        except ValueError:
            raise ValueError(f"{name}: rs_threshold {spec!r} for {option} must be a number"
                             f"{' or lower_upper (e.g. 0.999_1.001)' if option.endswith('k1') else ''}") from None
        if not (high > 0 and (low is None or low > 0)):
            raise ValueError(f"{name}: rs_threshold {spec!r} for {option} must be positive")
        parsed.append((option, None if low is None else math.log(low), math.log(high) if low is not None else high))
    return parsed


def keep_mask(log_ratio: Tensor, mask: Tensor, options: list[tuple[str, float | None, float]]) -> Tensor:
    """(B, T) bool: the valid tokens that every option keeps. `log_ratio` (B, T) is detached, any padding value."""
    lam = log_ratio.clamp(-MAX_TOKEN_LOG_RATIO, MAX_TOKEN_LOG_RATIO)
    stats = {"k1": -lam, "k2": 0.5 * lam**2, "k3": torch.exp(lam) - 1.0 - lam}
    m = mask.to(lam.dtype)
    keep = mask.clone()
    for option, low, high in options:
        k = stats[option[-2:]]
        if option.startswith("token"):
            stat = k                                                                    # (B, T)
        elif option.startswith("seq_sum"):
            stat = (k * m).sum(dim=1, keepdim=True)                                     # (B, 1)
        elif option.startswith("seq_mean"):
            stat = (k * m).sum(dim=1, keepdim=True) / (m.sum(dim=1, keepdim=True) + 1e-8)
        else:
            top = k.masked_fill(~mask, -torch.inf).amax(dim=1, keepdim=True)
            stat = torch.where(torch.isinf(top), torch.zeros_like(top), top)
        ok = stat <= high if low is None else (stat >= low) & (stat <= high)
        keep = keep & ok
    return keep


def is_weight(log_ratio: Tensor, mask: Tensor, level: str | None, cap: float | str) -> Tensor:
    """verl's rollout IS weight, detached: (B, T) for "token", (B, 1) for "sequence", a 0-d one for None.
    `cap` a number C: truncated at C (TIS); a string "lo_hi": zeroed outside [lo, hi] (IcePop, newer verl)."""
    if level is None:
        return torch.ones((), dtype=log_ratio.dtype, device=log_ratio.device)
    lam = log_ratio.detach() * mask
    log_w = lam if level == "token" else lam.sum(dim=1, keepdim=True)
    raw = torch.exp(log_w.clamp(-MAX_TOKEN_LOG_RATIO, MAX_TOKEN_LOG_RATIO))
    low, high = parse_is_threshold(cap)
    if low is None:
        return raw.clamp(max=high)
    return torch.where((raw >= low) & (raw <= high), raw, torch.zeros_like(raw))


def is_batch_scale(weight: Tensor, mask: Tensor, level: str | None, on: bool) -> Tensor:
    """0-d: verl's rollout_is_batch_normalize, 1 / (the batch mean of the IS weight) — over valid tokens for "token",
    over responses (each its tokens' mean) for "sequence", verl's masked means with their 1e-8 — or 1 when off,
    without IS, or when the mean is not above 1e-8 (as verl)."""
    one = torch.ones((), dtype=torch.float64, device=mask.device)
    if not on or level is None:
        return one
    m = mask.to(weight.dtype)
    w = weight.expand_as(m) * m
    if level == "token":
        mean = w.sum() / (m.sum() + 1e-8)
    else:
        present = (m.sum(dim=1) > 0).to(w.dtype)
        mean = (w.sum(dim=1) / (m.sum(dim=1) + 1e-8) * present).sum() / present.sum().clamp_min(1e-8)
    return torch.where(mean > 1e-8, 1.0 / mean.to(torch.float64), one)


def parse_is_threshold(cap: float | str) -> tuple[float | None, float]:
    """verl's rollout_is_threshold: a number C -> (None, C); "lo_hi" -> (lo, hi). ValueError when malformed."""
    try:
        low, high = (float(x) for x in cap.split("_", 1)) if isinstance(cap, str) and "_" in cap else (None, float(cap))
    except (TypeError, ValueError):
        raise ValueError(f"is_threshold {cap!r} must be a number C (truncation) or 'lo_hi' (IcePop bounds)") from None
    if not (high > 0 and (low is None or 0 < low <= high)):
        raise ValueError(f"is_threshold {cap!r}: bounds must be positive with lo <= hi")
    return low, high


def check_is(name: str, level: str | None, cap: float | str) -> None:
    if level is not None and level not in IS_LEVELS:
        raise ValueError(f"{name}: is_level must be one of {', '.join(IS_LEVELS)} or None; got {level!r}")
    try:
        parse_is_threshold(cap)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc} (verl's rollout_is_threshold)") from None


def kept_scale(name: str, keep: Tensor, mask: Tensor, normalize: str) -> Tensor:
    """0-d: N_all / N_kept over the step batch for "kept" (0 when nothing is kept), 1 for "all"."""
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"{name}: normalize must be one of {', '.join(NORMALIZATIONS)}; got {normalize!r}")
    if normalize == "all":
        return torch.ones((), dtype=torch.float64, device=mask.device)
    n_all, n_kept = mask.sum().to(torch.float64), keep.sum().to(torch.float64)
    return torch.where(n_kept > 0, n_all / n_kept.clamp_min(1), torch.zeros_like(n_all))


def rs_metrics(keep: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """`rs/masked_frac` (valid tokens rejected) and `rs/seq_masked_frac` (responses with a rejected token)."""
    rejected = mask & ~keep
    present = mask.any(dim=1)
    return {"rs/masked_frac": rejected.sum().to(torch.float64) / mask.sum().clamp_min(1),
            "rs/seq_masked_frac": (rejected.any(dim=1) & present).sum().to(torch.float64) / present.sum().clamp_min(1)}


def rs_context(name: str, log_ratio: Tensor, mask: Tensor, *, rs: str | None, rs_threshold: str | float | None,
               normalize: str, is_level: str | None, is_threshold: float | str,
               is_batch_normalize: bool) -> BatchContext:
    """The batch context of verl's rollout correction (decoupled and bypass modes alike) on the per-token
    log-ratio of the policy it corrects to π_rollout: the rejection mask ("keep"), the normalization of the kept
    tokens ("scale") and the batch-normalized IS factor ("is_scale")."""
    keep = keep_mask(log_ratio, mask, parse_rs(name, rs, rs_threshold))
    check_is(name, is_level, is_threshold)
    weight = is_weight(log_ratio, mask, is_level, is_threshold)
    return BatchContext(tensors={"keep": keep, "scale": kept_scale(name, keep, mask, normalize),
                                 "is_scale": is_batch_scale(weight, mask, is_level, is_batch_normalize)},
                        metrics=rs_metrics(keep, mask))
