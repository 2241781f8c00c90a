"""Shared pieces of every estimator: inputs, validation, log-ratios, group reductions, aggregation.

Shapes: B responses, T tokens per (padded) response. Everything here is a pure tensor function:
no config objects, no logging, no I/O, no host syncs except in `validate` (which must raise).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
ADVANTAGE_MODES = ("std", "mean")

# [ours] Token log-ratios are clamped to ±MAX_TOKEN_LOG_RATIO before exp() so that a wildly stale token
# cannot produce inf (and inf * 0 = NaN gradients). exp(20) ≈ 4.9e8 is far outside any clip range.
MAX_TOKEN_LOG_RATIO = 20.0


@dataclass(frozen=True)
class LossInputs:
    """One batch of responses, as the trainer hands it to an estimator.

    logp:           (B, T) log π_θ of the sampled tokens; carries the gradient.
    logp_behavior:  (B, T) log π_b recorded at generation time (no grad).
    advantages:     (B,) one advantage per response, broadcast over its tokens.
    mask:           (B, T) valid response tokens (bool or 0/1).
    group_ids:      (B,) responses to the same prompt share an id.
    logp_proximal:  optional (B, T) log π_prox, the parameters at the start of the optimizer step
                    (None: π_θ itself, detached; one update per batch).
    logp_rollout:   optional (B, T) log π_rollout, what the rollout engine returned for the same tokens
                    (None: the same as logp_behavior, i.e. no engine mismatch).
    The four policies are described once in docs/estimators.md; each estimator's docstring and registry
    entry (`reads`) say which of them it uses.
    """

    logp: Tensor
    logp_behavior: Tensor
    advantages: Tensor
    mask: Tensor
    group_ids: Tensor
    logp_proximal: Tensor | None = None
    logp_rollout: Tensor | None = None

    def rows(self, index: Tensor | slice) -> "LossInputs":
        """The sub-batch of responses `index` (a micro-batch)."""
        prox = None if self.logp_proximal is None else self.logp_proximal[index]
        rollout = None if self.logp_rollout is None else self.logp_rollout[index]
        return LossInputs(self.logp[index], self.logp_behavior[index], self.advantages[index],
                          self.mask[index], self.group_ids[index], prox, rollout)


@dataclass(frozen=True)
class BatchContext:
    """Detached statistics an estimator computes once over the whole optimizer-step batch.

    tensors: name -> tensor; a 0-d tensor is batch-wide, any other is indexed by response (dim 0).
    metrics: name -> 0-d tensor, batch-wide diagnostics.
    Computing these once and slicing them per micro-batch is what makes micro-batching exact for
    estimators with batch statistics (M2PO's mask, BAPO's bounds, GMC's group scales).
    """

    tensors: dict[str, Tensor] = field(default_factory=dict)
    metrics: dict[str, Tensor] = field(default_factory=dict)

    def rows(self, index: Tensor | slice) -> "BatchContext":
        sliced = {k: (v if v.dim() == 0 else v[index]) for k, v in self.tensors.items()}
        return replace(self, tensors=sliced)


@dataclass(frozen=True)
class LossOutput:
    loss: Tensor                  # 0-d, differentiable w.r.t. inputs.logp
    metrics: dict[str, float]     # plain floats, names like "gmc/capped_frac"


def validate(inp: LossInputs) -> LossInputs:
    """Check shapes and values; return the inputs with a bool mask and padding zeroed.

    Raises ValueError naming the offending input. Padding positions (mask false) may hold anything,
    including NaN: they are replaced by 0 so they cannot leak into the loss or its gradient.
    """
    if inp.logp.dim() != 2:
        raise ValueError(f"logp must be (B, T); got shape {tuple(inp.logp.shape)}")
    shape = inp.logp.shape
    for name in ("logp_behavior", "mask", "logp_proximal", "logp_rollout"):
        t = getattr(inp, name)
        if t is not None and t.shape != shape:
            raise ValueError(f"{name} must have the shape of logp {tuple(shape)}; got {tuple(t.shape)}")
    for name in ("advantages", "group_ids"):
        t = getattr(inp, name)
        if t.shape != shape[:1]:
            raise ValueError(f"{name} must be (B,) = ({shape[0]},); got {tuple(t.shape)}")
    mask = inp.mask.bool()
    if not bool(mask.any()):
        raise ValueError("mask selects no token: the batch is all padding")
    def clean(t: Tensor | None) -> Tensor | None:
        return None if t is None else torch.where(mask, t, torch.zeros((), dtype=t.dtype, device=t.device))

    def detached(t: Tensor | None) -> Tensor | None:
        return None if t is None else t.detach()

    cleaned = {"logp": clean(inp.logp), "logp_behavior": clean(inp.logp_behavior.detach()),
               "logp_proximal": clean(detached(inp.logp_proximal)), "logp_rollout": clean(detached(inp.logp_rollout))}
    for name, t in cleaned.items():
        # Padding is 0 now, so this checks the valid tokens (without a masked copy of the tensor).
        if t is not None and not bool(torch.isfinite(t.detach()).all()):
            raise ValueError(f"{name} has NaN or inf on valid (masked-in) tokens")
    if not bool(torch.isfinite(inp.advantages).all()):
        raise ValueError("advantages has NaN or inf")
    return LossInputs(cleaned["logp"], cleaned["logp_behavior"], inp.advantages.detach(), mask, inp.group_ids,
                      cleaned["logp_proximal"], cleaned["logp_rollout"])


# ----------------------------------------------------------------------------------------------
# Ratios
# ----------------------------------------------------------------------------------------------

def token_log_ratio(inp: LossInputs) -> Tensor:
    """λ = logp − logp_behavior, (B, T), zero on padding, with grad through logp."""
    return (inp.logp - inp.logp_behavior) * inp.mask


def token_ratio(inp: LossInputs) -> Tensor:
    """ρ = exp(λ), (B, T), λ clamped to ±MAX_TOKEN_LOG_RATIO; 1 on padding."""
    return torch.exp(token_log_ratio(inp).clamp(-MAX_TOKEN_LOG_RATIO, MAX_TOKEN_LOG_RATIO))


def traj_log_ratio(inp: LossInputs) -> Tensor:
    """Λ_i = Σ_t m λ, (B,), detached: trajectory ratios are only ever used as weights."""
    return token_log_ratio(inp).detach().sum(dim=1)


def length_normalized_ratio(inp: LossInputs) -> Tensor:
    """s_i = exp(Λ_i / |o_i|), (B,), with grad: the sequence ratio of gspo and luspo (the mean log-ratio over
    the response's valid tokens, clamped to ±MAX_TOKEN_LOG_RATIO)."""
    log_s = token_log_ratio(inp).sum(dim=1) / inp.mask.sum(dim=1).clamp_min(1)
    return torch.exp(log_s.clamp(-MAX_TOKEN_LOG_RATIO, MAX_TOKEN_LOG_RATIO))


def sequence_clip_metrics(name: str, s: Tensor, inp: LossInputs, low: float, high: float) -> dict[str, Tensor]:
    """`<name>/clip_frac` (responses whose sequence-level clip is active: A < 0 ∧ s < low, A > 0 ∧ s > high)
    and `<name>/seq_ratio_mean`, over the responses with a valid token."""
    s, adv, present = s.detach(), inp.advantages, inp.mask.any(dim=1)
    clipped = ((adv < 0) & (s < low)) | ((adv > 0) & (s > high))
    return {f"{name}/clip_frac": masked_mean(clipped.float(), present), f"{name}/seq_ratio_mean": masked_mean(s, present)}


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp_min(1)


# ----------------------------------------------------------------------------------------------
# Groups
# ----------------------------------------------------------------------------------------------

def group_index(group_ids: Tensor) -> tuple[Tensor, int]:
    """Map arbitrary group ids to 0..n_groups-1. Returns (index (B,), n_groups)."""
    uniq, index = torch.unique(group_ids, return_inverse=True)
    return index, int(uniq.numel())


def group_sum(x: Tensor, index: Tensor, n_groups: int) -> Tensor:
    return torch.zeros(n_groups, dtype=x.dtype, device=x.device).index_add_(0, index, x)


def group_logsumexp(x: Tensor, index: Tensor, n_groups: int) -> Tensor:
    """log Σ_{i∈g} exp(x_i) per group, (n_groups,), stable for |x| up to the dtype's range."""
    gmax = torch.full((n_groups,), -torch.inf, dtype=x.dtype, device=x.device)
    gmax = gmax.scatter_reduce(0, index, x, reduce="amax")
    return gmax + torch.log(group_sum(torch.exp(x - gmax[index]), index, n_groups))


def group_advantages(rewards: Tensor, group_ids: Tensor, mode: str = "std", eps: float = 1e-6) -> Tensor:
    """Group-relative advantages, (B,).

    mode "std" (GRPO, 2402.03300): A_i = (R_i − mean_g R) / (std_g R + eps), std with Bessel's correction.
    mode "mean" (Dr. GRPO, 2503.20783): A_i = R_i − mean_g R.
    A group whose rewards are all equal gets A = 0 exactly (the mean of equal floats can be off by an
    ulp, so this is enforced, not left to the arithmetic); so does a group of one response (no baseline).
    Returns float32 whatever the rewards' dtype; the arithmetic is float64.
    """
    if mode not in ADVANTAGE_MODES:
        raise ValueError(f"unknown advantage mode {mode!r}; valid: {', '.join(ADVANTAGE_MODES)}")
    if rewards.shape != group_ids.shape or rewards.dim() != 1:
        raise ValueError(f"rewards and group_ids must both be (B,); got {tuple(rewards.shape)} and {tuple(group_ids.shape)}")
    rewards = rewards.to(torch.float64)
    index, n = group_index(group_ids)
    count = group_sum(torch.ones_like(rewards), index, n)
    mean = group_sum(rewards, index, n) / count
    centered = rewards - mean[index]
    if mode == "mean":
        adv = centered
    else:
        var = group_sum(centered**2, index, n) / (count - 1).clamp_min(1)
        adv = centered / (var.sqrt()[index] + eps)
    gmax = torch.full((n,), -torch.inf, dtype=rewards.dtype, device=rewards.device)
    gmin = torch.full((n,), torch.inf, dtype=rewards.dtype, device=rewards.device)
    gmax = gmax.scatter_reduce(0, index, rewards, reduce="amax")
    gmin = gmin.scatter_reduce(0, index, rewards, reduce="amin")
    varied = (count > 1) & (gmax > gmin)                               # (n_groups,) groups with a signal
    adv = torch.where(varied[index], adv, torch.zeros_like(adv))
    return adv.to(torch.float32)


# ----------------------------------------------------------------------------------------------
# Aggregation
# ----------------------------------------------------------------------------------------------

def aggregate(token_loss: Tensor, mask: Tensor, mode: str, *, total_tokens: float | None = None,
              total_seqs: float | None = None, max_tokens: int | None = None) -> Tensor:
    """Reduce a per-token loss (B, T) to a scalar.

    token-mean:               Σ m ℓ / N_tokens                          (DAPO; default)
    seq-mean-token-mean:      Σ_i (Σ_t m ℓ / Σ_t m) / N_seqs            (original GRPO)
    seq-mean-token-sum-norm:  Σ_i Σ_t m ℓ / K / N_seqs, K = max_tokens  (Dr. GRPO)

    N_tokens and N_seqs are the optimizer step's global counts (`total_tokens`, `total_seqs`); they
    default to this batch's. Passing the global counts makes the sum of micro-batch losses equal the
    whole-batch loss, value and gradient.
    """
    mask_f = mask.to(token_loss.dtype)
    summed = token_loss * mask_f
    n_seqs = float(mask.shape[0]) if total_seqs is None else float(total_seqs)
    if mode == "token-mean":
        n_tokens = mask_f.sum() if total_tokens is None else float(total_tokens)
        return summed.sum() / n_tokens
    if mode == "seq-mean-token-mean":
        return (summed.sum(dim=1) / mask_f.sum(dim=1).clamp_min(1)).sum() / n_seqs
    if mode == "seq-mean-token-sum-norm":
        if max_tokens is None or max_tokens <= 0:
            raise ValueError("aggregation 'seq-mean-token-sum-norm' needs max_tokens > 0 (the constant K)")
        return summed.sum() / float(max_tokens) / n_seqs
    raise ValueError(f"unknown aggregation {mode!r}; valid: {', '.join(AGGREGATIONS)}")


def reinforce_token_loss(weight: Tensor, inp: LossInputs) -> Tensor:
    """ℓ_{i,t} = −w_i · A_i · logp_{i,t} with w detached: gradient (1/…) Σ_i w_i A_i ∇log π_θ(o_i)."""
    return -(weight.detach() * inp.advantages).unsqueeze(1) * inp.logp


def ppo_clip_token_loss(ratio: Tensor, adv: Tensor, low: Tensor | float, high: Tensor | float,
                        dual_clip: float | None = None) -> Tensor:
    """ℓ = max(−A ρ, −A clip(ρ, low, high)), A broadcast over tokens: (B, T); with a dual clip c > 1,
    ℓ = min(ℓ, −c A) where A < 0."""
    adv = adv.unsqueeze(1)
    loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(low, high))
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1; got {dual_clip}")
        loss = torch.where(adv < 0, torch.minimum(loss, -dual_clip * adv), loss)
    return loss


def clipped_tokens(ratio: Tensor, adv: Tensor, low: Tensor | float, high: Tensor | float) -> tuple[Tensor, Tensor]:
    """(B, T) masks of the tokens whose PPO clip is active: (A < 0 ∧ ρ < low, A > 0 ∧ ρ > high)."""
    r, adv = ratio.detach(), adv.unsqueeze(1)
    return (adv < 0) & (r < low), (adv > 0) & (r > high)


def proximal_log_prob(inp: LossInputs) -> Tensor:
    """log π_prox, (B, T), no grad: `logp_proximal` when given (several updates per batch), else
    π_θ itself at this moment (one update per batch: π_prox = π_θ at the start of the step)."""
    return (inp.logp if inp.logp_proximal is None else inp.logp_proximal).detach()


def rollout_log_prob(inp: LossInputs) -> Tensor:
    """log π_rollout, (B, T), no grad: `logp_rollout` when the trainer recorded the engine's log-probs
    apart from the behavior policy's, else `logp_behavior` (no engine mismatch)."""
    return (inp.logp_behavior if inp.logp_rollout is None else inp.logp_rollout).detach()


def prox_rollout_log_ratio(inp: LossInputs) -> Tensor:
    """log(π_prox / π_rollout) per token, (B, T), no grad, zero on padding, clamped to ±MAX_TOKEN_LOG_RATIO:
    the log of the rollout-correction weight of verl / TRL / OpenRLHF (their π_old = our π_prox). With one
    update per batch and no engine mismatch it is log(π_θ / π_b), detached."""
    lam = (proximal_log_prob(inp) - rollout_log_prob(inp)) * inp.mask
    return lam.clamp(-MAX_TOKEN_LOG_RATIO, MAX_TOKEN_LOG_RATIO)


def proximal_ratio(inp: LossInputs) -> Tensor:
    """π_θ / π_prox per token, (B, T), with grad through logp; log-ratio clamped like token_ratio."""
    lam = (inp.logp - proximal_log_prob(inp)) * inp.mask
    return torch.exp(lam.clamp(-MAX_TOKEN_LOG_RATIO, MAX_TOKEN_LOG_RATIO))
