"""Monte Carlo bias and second moment of the registered estimators on a fixed (behavior, current) pair.

What is exact and what is not. The pair's J, ∇J, KL, χ² and the target g* (below) are exact sums over
the enumerated sequences. The estimators' bias, second moment, MSE and cosine are *Monte Carlo* means
over `n_groups` sampled groups (1,000–4,000 in the suites), each with a standard error (`_se`).

One Monte Carlo *draw* is one *batch* of K = `batch_groups` groups, the unit an optimizer step consumes
(`train.prompts_per_step`): K·G sequences sampled i.i.d. from π_b, rewards → advantages with
`algorithms.group_advantages` (per group), per-token log-probs under π_θ and π_b, mask all ones, and
the estimator's gradient ĝ = −∇_θ loss from `algorithms.compute_loss` on that batch with the batch's
own denominators, exactly as the trainer calls it. Sign: ĝ is an *ascent* direction (the negative loss
gradient). For a group-local estimator the batch gradient is the mean of its K per-group gradients,
so its bias does not depend on K; M2PO's mask and BAPO's bounds are statistics of the whole batch, so
their draws depend on K, and are measured at the K they are trained with (K = 1 reproduces the
one-group-per-call measurement of earlier versions).

Per-group gradients, fast. Many groups go through one `compute_loss` call with distinct group ids and
the global denominators of a single group (total_tokens = G·L, total_seqs = G), so the batched loss is
Σ_g loss_g. Its gradient with respect to the (B, T) log-prob tensor itself, a leaf, gives per-token
coefficients c_{i,t}; then ĝ_g = −Σ_{i∈g,t} c_{i,t} ∇_θ logp_{i,t}, and for the tabular softmax
∇_θ log π(o_t | p) = e_{p,o_t} − π(·|p) in row p: a scatter. This is exact only for *group-local*
estimators (whose batch statistics do not mix groups). Locality is tested, not assumed from the name:
once per (estimator, ε, params, aggregation) on a fixed probe batch whose groups have very different
log-ratio scales, and again on the first groups of every draw; an estimator that fails either (M2PO's
batch mask and BAPO's batch bounds do) is computed one batch per call instead, on at most
`max_loop_groups` groups (`max_loop_groups // K` draws, at least 2).

"The true gradient" g*. Group-normalized advantages make every estimator a surrogate whose on-policy
expectation is not ∇J itself. We define g* as the on-policy expectation of the estimator family at the
same G, advantage mode and aggregation (every registered estimator reduces to the same REINFORCE
estimator (1/(G·L)) Σ_i A_i ∇log π_θ(o_i) when π_b = π_θ), which is exactly
    g* = κ ∇J,   κ = (h(1) − h(0)) / L,   h(a) = E[A_1 | R_1 = a]
for binary rewards (any advantage mode; the expectation over the other G−1 rewards, Binomial(G−1, J),
is a finite sum), and κ = (G−1)/(G·L) for advantage "mean" with any rewards (derivation: E[A_i ∇log π_i]
= ∇J − ∇J/G). Advantage "std" with non-binary rewards has no exact κ here and raises ValueError.
g* is the gradient an on-policy run follows; it is parallel to ∇J, so cosines are taken with ∇J.

Bias vs plain IS. Two references, each paired with the estimator on the same groups (the difference has
far lower variance than either): `bias_tis` against trajectory-level IS w_i = r_i (`tic_is` with
ε = 1e12, so its clip never binds: the unbiased estimator TIC and GMC both modify; in mean mode its
expectation is exactly g*, so `bias_tis` and `bias_true` estimate the same vector), and `bias_is`
against the registered `is_none` (token-level ratios, itself biased off-policy). With advantage "std"
trajectory IS is *not* unbiased for g* off-policy (the group std is taken over π_b's samples), so there
`bias_true` also contains that normalization bias, which does not shrink with G; the paper's claims
are about `bias_tis`.

Norms of mean vectors are de-noised: ‖E x‖² is estimated by ‖x̄‖² − tr Cov(x̄) (unbiased), reported as
its square root (0 when negative: unresolved), with a delta-method standard error. The signed squared
estimate itself is kept too (`<name>_sq`, `<name>_sq_se`): it is unbiased and its noise is centred even
where the bias is near zero, so fits of bias against G use it rather than the clamped norm (results.py).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Mapping

import torch
from torch import Tensor

from algorithms import LossInputs, compute_loss, group_advantages

from harness.lab import policy
from harness.lab.policy import DTYPE, Problem

TRAJ_IS = ("tic_is", 1e12)      # plain trajectory IS through the registry: w_i = min(r_i, 1 + 1e12) = r_i
REF_TRAJ_IS = "tis"             # the reference label of plain trajectory IS (rows' `bias_tis`), not the estimator `tis`
TOKEN_IS = "is_none"              # the registered unclipped token-level estimator


# ----------------------------------------------------------------------------------------------
# The target
# ----------------------------------------------------------------------------------------------

def target_scale(problem: Problem, J: float, G: int, mode: str) -> float:
    """κ(G) with E_{π_θ}[ĝ on-policy] = κ ∇J (token-level aggregation over fixed length L included)."""
    L = problem.length
    if mode == "mean":
        return (G - 1) / (G * L)
    if problem.reward_kind != "binary":
        raise ValueError("advantage 'std' has an exact target only for binary rewards; use "
                         "train.advantage: mean or lab.reward: binary")
    k = torch.arange(G, dtype=DTYPE)                                  # successes among the other G-1
    J = min(max(J, 0.0), 1.0)
    log_pmf = (torch.lgamma(torch.tensor(G, dtype=DTYPE)) - torch.lgamma(k + 1) - torch.lgamma(G - k)
               + k * math.log(max(J, 1e-300)) + (G - 1 - k) * math.log(max(1 - J, 1e-300)))
    pmf = torch.exp(log_pmf)
    h = []
    for a in (0.0, 1.0):
        n = a + k                                                       # successes in the group
        mu = n / G
        std = torch.sqrt(n * (G - n) / (G * (G - 1)))                  # Bessel-corrected std of 0/1 values
        adv = torch.where((n == 0) | (n == G), torch.zeros_like(mu), (a - mu) / (std + 1e-6))
        h.append(float((pmf * adv).sum()))
    return (h[1] - h[0]) / L


# ----------------------------------------------------------------------------------------------
# Per-group gradients
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pair:
    """A fixed (behavior, current) pair with its per-token log-prob tables."""

    problem: Problem
    theta: Tensor            # (P, V) current logits θ
    theta_b: Tensor          # (P, V) behavior logits
    logp: Tensor             # (N, L) log π_θ per token
    logp_b: Tensor           # (N, L) log π_b per token

    @classmethod
    def build(cls, problem: Problem, theta: Tensor, theta_b: Tensor) -> "Pair":
        with torch.no_grad():
            return cls(problem, theta.detach(), theta_b.detach(), policy.token_logp_table(problem, theta),
                       policy.token_logp_table(problem, theta_b))


def loss_inputs(pair: Pair, seqs: Tensor, adv_mode: str) -> LossInputs:
    """The trainer's inputs for M groups of G sampled sequences `seqs` (M, G); B = M·G, T = L."""
    M, G = seqs.shape
    flat = seqs.reshape(-1)
    group_ids = torch.arange(M).repeat_interleave(G)
    adv = group_advantages(pair.problem.rewards[flat], group_ids, adv_mode)
    mask = torch.ones(flat.numel(), pair.problem.length, dtype=torch.bool)
    return LossInputs(pair.logp[flat], pair.logp_b[flat], adv, mask, group_ids)


def token_coefficients(name: str, inp: LossInputs, n_seqs: int, *, eps: float, params: Mapping[str, object],
                       aggregation: str) -> tuple[Tensor, dict[str, float]]:
    """c = ∂loss/∂logp, (B, T), with the denominators of `n_seqs` sequences (total_tokens = n_seqs·T,
    total_seqs = n_seqs); and the call's metrics. n_seqs = G on many groups gives Σ_g loss_g."""
    logp = inp.logp.detach().clone().requires_grad_(True)
    T = logp.shape[1]
    out = compute_loss(name, replace(inp, logp=logp), eps=eps, aggregation=aggregation, max_tokens=T,
                       total_tokens=float(n_seqs * T), total_seqs=float(n_seqs), **dict(params))
    (c,) = torch.autograd.grad(out.loss, logp)
    return c, out.metrics


def scatter_gradients(pair: Pair, seqs: Tensor, coeff: Tensor) -> Tensor:
    """ĝ_g = −Σ_{i∈g,t} c_{i,t} ∇_θ logp_{i,t} for every group: (M, P·V).

    ∇_θ log π(o_t | p) = e_{p,o_t} − π(·|p) in row p, so ĝ_g[p, v] = −Σ c·1[o_t = v] + (Σ c)·π(v|p),
    sums over the tokens of group g generated from prefix p: two weighted bincounts.
    """
    problem = pair.problem
    M, G = seqs.shape
    P, V = problem.shape
    flat = seqs.reshape(-1)
    rows, toks = problem.prefix[flat], problem.tokens[flat]                    # (B, L)
    cell = torch.arange(M).repeat_interleave(G)[:, None] * P + rows            # (B, L) index of (g, p)
    neg = -coeff.to(DTYPE).reshape(-1)
    onehot = torch.bincount((cell * V + toks).reshape(-1), weights=neg, minlength=M * P * V)
    rowsum = torch.bincount(cell.reshape(-1), weights=neg, minlength=M * P)
    probs = torch.softmax(pair.theta, dim=-1)                                  # (P, V)
    return (onehot.view(M, P, V) - rowsum.view(M, P, 1) * probs).view(M, P * V)


def _call_per_unit(name: str, inp: LossInputs, unit: int, n_units: int, **kw) -> Tensor:
    """Coefficients from one compute_loss call per consecutive block of `unit` sequences (a group or a batch)."""
    return torch.cat([token_coefficients(name, inp.rows(slice(u * unit, (u + 1) * unit)), unit, **kw)[0]
                      for u in range(n_units)])


def _probe_inputs() -> tuple[LossInputs, int]:
    """Three groups of 4 responses × 3 tokens with log-ratio scales 0, 0.3 and 2 (fixed, seeded)."""
    gen = torch.Generator().manual_seed(12345)
    G, T, scales = 4, 3, (0.0, 0.3, 2.0)
    logp_b = torch.log(torch.rand(3 * G, T, generator=gen, dtype=DTYPE) * 0.8 + 0.1)
    lam = torch.cat([s * torch.randn(G, T, generator=gen, dtype=DTYPE) for s in scales])
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0] * 3, dtype=DTYPE)
    group_ids = torch.arange(3).repeat_interleave(G)
    adv = group_advantages(rewards, group_ids, "std")
    return LossInputs(logp_b + lam, logp_b, adv, torch.ones(3 * G, T, dtype=torch.bool), group_ids), G


def _same(a: Tensor, b: Tensor) -> bool:
    return bool(torch.allclose(a, b, rtol=1e-9, atol=1e-12))


@functools.lru_cache(maxsize=256)
def _probe_local(name: str, eps: float, params: tuple[tuple[str, object], ...], aggregation: str) -> bool:
    inp, G = _probe_inputs()
    kw = dict(eps=eps, params=dict(params), aggregation=aggregation)
    batched = token_coefficients(name, inp, G, **kw)[0]
    return _same(batched, _call_per_unit(name, inp, G, 3, **kw))


def is_group_local(name: str, eps: float, params: Mapping[str, object], aggregation: str) -> bool:
    """Whether batching groups into one compute_loss call leaves every group's loss unchanged (probe)."""
    return _probe_local(name, float(eps), tuple(sorted(dict(params).items())), aggregation)


@dataclass(frozen=True)
class Spec:
    """One estimator configuration: registry name, ε and its own parameters."""

    name: str
    eps: float
    params: tuple[tuple[str, object], ...] = ()

    @property
    def kwargs(self) -> dict[str, object]:
        return dict(eps=self.eps, params=dict(self.params))


def draw_gradients(pair: Pair, seqs: Tensor, specs: Mapping[str, Spec], *, adv_mode: str, aggregation: str,
                   batch_groups: int = 1, max_loop_groups: int = 256,
                   chunk_responses: int = 1 << 16) -> dict[str, tuple[Tensor, bool]]:
    """label -> (per-draw gradients ĝ (M', P·V), whether the batched path was used), on groups `seqs` (M, G).

    A draw is K = `batch_groups` consecutive groups, one optimizer step's batch (module docstring). M' =
    M // K draws for group-local estimators (the mean of K per-group gradients, computed batched); for the
    others M' = max(2, max_loop_groups // K) draws at most (the first ones), one compute_loss call per
    batch of K·G sequences with that batch's denominators. The loss inputs of each chunk of groups are
    built once and shared by every estimator.
    """
    M, G = seqs.shape
    K = int(batch_groups)
    if K < 1 or M // K < 1:
        raise ValueError(f"batch_groups must be in [1, {M}] for {M} groups; got {batch_groups}")
    seqs = seqs[:(M // K) * K]
    M = seqs.shape[0]
    n_check = min(M, 3)
    head = loss_inputs(pair, seqs[:n_check], adv_mode)
    local = {}
    for label, spec in specs.items():
        kw = dict(spec.kwargs, aggregation=aggregation)
        local[label] = (is_group_local(spec.name, spec.eps, dict(spec.params), aggregation)
                        and _same(token_coefficients(spec.name, head, G, **kw)[0],     # re-check on this draw
                                  _call_per_unit(spec.name, head, G, n_check, **kw)))
    parts: dict[str, list[Tensor]] = {label: [] for label in specs if local[label]}
    per_chunk = max(1, chunk_responses // G)
    for start in range(0, M, per_chunk) if parts else ():
        chunk = seqs[start:start + per_chunk]
        inp = loss_inputs(pair, chunk, adv_mode)
        for label in parts:
            coeff, _ = token_coefficients(specs[label].name, inp, G, aggregation=aggregation, **specs[label].kwargs)
            parts[label].append(scatter_gradients(pair, chunk, coeff))
    out = {label: (torch.cat(p).view(M // K, K, -1).mean(1), True) for label, p in parts.items()}   # (M/K, D)
    if len(out) < len(specs):
        n_draws = min(M // K, max(2, max_loop_groups // K))
        few = seqs[:n_draws * K]
        inp = loss_inputs(pair, few, adv_mode)
        for label in (lb for lb in specs if not local[lb]):
            coeff = _call_per_unit(specs[label].name, inp, K * G, n_draws, aggregation=aggregation,
                                   **specs[label].kwargs)
            out[label] = (scatter_gradients(pair, few.reshape(n_draws, K * G), coeff), False)
    return {label: out[label] for label in specs}


# ----------------------------------------------------------------------------------------------
# Statistics
# ----------------------------------------------------------------------------------------------

def mean_norm(x: Tensor) -> tuple[float, float]:
    """‖E x‖ from samples x (M, D): de-noised estimate and delta-method standard error."""
    M = x.shape[0]
    m = x.mean(0)
    centered = x - m
    tr = float((centered ** 2).sum()) / (M - 1) / M                           # tr Cov(x̄)
    raw = float(m.norm())
    value = math.sqrt(max(raw ** 2 - tr, 0.0))
    if raw == 0.0:
        return 0.0, 0.0
    proj = centered @ (m / raw)
    return value, float(proj.std() / math.sqrt(M))


def mean_sq_norm(x: Tensor) -> tuple[float, float]:
    """‖E x‖² from samples x (M, D): the unbiased (signed) estimate ‖x̄‖² − tr Cov(x̄) and its standard error.

    Var ≈ 4 μᵀΣμ/M + 2 tr(Σ²)/M² (Gaussian x̄ ~ N(μ, Σ/M)); μᵀΣμ from the projections on x̄ (less their
    noise, tr(Σ²)/M), and
    tr(Σ²) = E[((x_i − μ)·(x_j − μ))²] (i ≠ j) from the M/2 disjoint pairs (i, i + M/2): O(M·D), no D×D matrix.
    The second term keeps the SE honest where the bias is near zero (the delta method's 2‖μ‖·se → 0).
    """
    M = x.shape[0]
    m = x.mean(0)
    centered = x - m
    tr = float((centered ** 2).sum()) / (M - 1) / M
    sq = float(m @ m) - tr
    proj_var = float((centered @ m).var()) if M > 1 else 0.0                  # m^T Σ̂ m
    half = M // 2
    tr_sigma2 = float(((centered[:half] * centered[half:2 * half]).sum(1) ** 2).mean()) if half else 0.0
    mu_sigma_mu = max(proj_var - tr_sigma2 / M, 0.0)                         # E[x̄ᵀΣx̄] = μᵀΣμ + tr(Σ²)/M
    return sq, math.sqrt(4 * mu_sigma_mu / M + 2 * tr_sigma2 / M ** 2)


def mean_se(x: Tensor) -> tuple[float, float]:
    """Sample mean of x (M,) and its standard error."""
    return float(x.mean()), float(x.std() / math.sqrt(x.numel()))


def summarize(grads: Tensor, target: Tensor, grad_j: Tensor, refs: Mapping[str, Tensor],
              batch_groups: int = 1) -> dict[str, float]:
    """Monte Carlo bias, second moment, MSE and cosine of per-draw gradients `grads` (M, D), each with its SE.

    target: g* (D,); grad_j: ∇J (D,); refs: name -> reference per-draw gradients on the same draws
    (at least the first M rows), for the paired `bias_<name>`; batch_groups: groups per draw (K).
    """
    M = grads.shape[0]
    out: dict[str, float] = {"n_draws": float(M), "n_groups": float(M * batch_groups),
                             "batch_groups": float(batch_groups)}
    diffs = {"true": grads - target, **{ref_name: grads - ref[:M] for ref_name, ref in refs.items()}}
    for key, diff in diffs.items():
        out[f"bias_{key}"], out[f"bias_{key}_se"] = mean_norm(diff)
        out[f"bias_{key}_sq"], out[f"bias_{key}_sq_se"] = mean_sq_norm(diff)
    out["second_moment"], out["second_moment_se"] = mean_se((grads ** 2).sum(1))
    out["mse"], out["mse_se"] = mean_se(((grads - target) ** 2).sum(1))
    unit = grad_j / grad_j.norm().clamp_min(1e-300)
    cos = (grads @ unit) / grads.norm(dim=1).clamp_min(1e-300)
    out["cosine"], out["cosine_se"] = mean_se(cos)
    mean = grads.mean(0)
    out["cosine_mean"] = float(mean @ unit / mean.norm().clamp_min(1e-300))
    out["rel_bias"] = out["bias_true"] / float(target.norm().clamp_min(1e-300))
    return out


def measure(pair: Pair, specs: Mapping[str, Spec], *, G: int, n_groups: int, adv_mode: str, aggregation: str,
            seed: int, batch_groups: int = 1, max_loop_groups: int = 256,
            refs: tuple[str, ...] = ("tis", "is")) -> dict[str, dict[str, float]]:
    """Monte Carlo measurements of every estimator in `specs` (label -> Spec) on one shared sample of
    `n_groups` groups, in draws of `batch_groups` groups (one optimizer step's batch).

    Returns {"pair": exact facts of the pair, <label>: summarize(...), ...}. The references `refs` (plain
    trajectory IS "tis", is_none "is" at the first spec's ε) share the sample, so biases are paired.
    """
    problem = pair.problem
    gen = torch.Generator().manual_seed(int(seed))
    seqs = policy.sample(problem, pair.theta_b, n_groups * G, gen).view(n_groups, G)
    J = float(policy.objective(problem, pair.theta))
    grad_j = policy.exact_gradient(problem, pair.theta).reshape(-1)
    target = target_scale(problem, J, G, adv_mode) * grad_j
    eps_is = next(iter(specs.values())).eps if specs else 0.2
    ref_specs = {k: v for k, v in {"tis": Spec(TRAJ_IS[0], TRAJ_IS[1]), "is": Spec(TOKEN_IS, eps_is)}.items()
                 if k in refs}
    grads = draw_gradients(pair, seqs, {**{f"ref:{k}": v for k, v in ref_specs.items()}, **specs},
                           adv_mode=adv_mode, aggregation=aggregation, batch_groups=batch_groups,
                           max_loop_groups=max_loop_groups)
    ref_grads = {k: grads[f"ref:{k}"][0] for k in ref_specs}
    result = {"pair": {
        "J": J, "kl_behavior": policy.kl(problem, pair.theta_b, pair.theta),
        "chi2": policy.chi2(problem, pair.theta_b, pair.theta), "target_norm": float(target.norm()),
        "grad_j_norm": float(grad_j.norm()), "G": float(G)}}
    for label in specs:
        g, batched = grads[label]
        result[label] = {**summarize(g, target, grad_j, ref_grads, batch_groups), "batched": float(batched)}
    return result
