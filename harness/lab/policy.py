"""Synthetic policies with exact objectives: a tabular autoregressive softmax over V^L sequences.

The policy generates a response o = (o_1..o_L) over a vocabulary of V tokens, one token at a time:

    π_θ(o_t | o_<t) = softmax(θ[prefix(o_<t)])[o_t],     θ: (P, V) logits, one row per prefix

with P = 1 + V + … + V^{L−1} prefixes (a trie). Every distribution over the N = V^L sequences is
representable, the per-token log-probs are those of an autoregressive model (as in training), and
everything is exact because the N sequences can be enumerated:

    J(θ) = Σ_o π_θ(o) R(o),   ∇J by autograd through that sum,   KL, entropy, χ² as exact sums.

Sequences are indexed lexicographically: n = Σ_t o_t V^{L−1−t}. The prefix of length t of sequence n is
n // V^{L−t}, stored in row offset_t + n // V^{L−t} of θ with offset_t = (V^t − 1)/(V − 1).

Rewards (one per sequence, fixed): `binary` — exactly max(1, round(frac·N)) sequences chosen at random
pay 1, the rest 0 (J is a success probability); `uniform` — R(o) ~ U[0, 1] i.i.d.
All tensors are float64: the lab measures small biases, and float32 round-off would hide them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from harness.config.lab import REWARD_KINDS

DTYPE = torch.float64


@dataclass(frozen=True)
class Problem:
    """One enumerable synthetic problem: sequences, their generating prefixes, and their rewards."""

    vocab: int               # V
    length: int              # L
    tokens: Tensor           # (N, L) long: every sequence, lexicographic order
    prefix: Tensor           # (N, L) long: row of θ that generates token t of sequence n
    rewards: Tensor          # (N,) float64
    reward_kind: str

    @property
    def n_seqs(self) -> int:
        return self.tokens.shape[0]

    @property
    def n_prefixes(self) -> int:
        return (self.vocab ** self.length - 1) // (self.vocab - 1)

    @property
    def shape(self) -> tuple[int, int]:
        """The shape (P, V) of a logits table θ."""
        return (self.n_prefixes, self.vocab)

    @property
    def reward_range(self) -> tuple[float, float]:
        """(min R, max R) over sequences: J normalized by it is `eval/acc`."""
        return float(self.rewards.min()), float(self.rewards.max())


def make_problem(vocab: int, length: int, reward_kind: str = "binary", reward_frac: float = 0.1,
                 seed: int = 0) -> Problem:
    if reward_kind not in REWARD_KINDS:
        raise ValueError(f"unknown reward kind {reward_kind!r}; valid: {', '.join(REWARD_KINDS)}")
    V, L = vocab, length
    n = torch.arange(V ** L)
    powers = V ** torch.arange(L - 1, -1, -1)                          # (L,) V^{L-1-t}
    tokens = (n[:, None] // powers) % V                                 # (N, L)
    offsets = torch.tensor([(V ** t - 1) // (V - 1) for t in range(L)])
    prefix = offsets + n[:, None] // (V * powers)                       # (N, L): n // V^{L-t}
    gen = torch.Generator().manual_seed(int(seed))
    N = V ** L
    if reward_kind == "binary":
        k = max(1, round(reward_frac * N))
        rewards = torch.zeros(N, dtype=DTYPE)
        rewards[torch.randperm(N, generator=gen)[:k]] = 1.0
    else:
        rewards = torch.rand(N, generator=gen, dtype=DTYPE)
    return Problem(V, L, tokens, prefix, rewards, reward_kind)


def init_logits(problem: Problem, scale: float, seed: int) -> Tensor:
    """θ_0 = scale · N(0, 1) per logit (scale 0: the uniform policy)."""
    gen = torch.Generator().manual_seed(int(seed) + 7919)
    return scale * torch.randn(problem.shape, generator=gen, dtype=DTYPE)


# ----------------------------------------------------------------------------------------------
# Exact quantities
# ----------------------------------------------------------------------------------------------

def token_logp_table(problem: Problem, theta: Tensor) -> Tensor:
    """log π_θ(o_t | o_<t) for every sequence and position: (N, L), differentiable in θ."""
    logp_rows = torch.log_softmax(theta, dim=-1)                        # (P, V)
    return logp_rows[problem.prefix, problem.tokens]


def seq_logp(problem: Problem, theta: Tensor) -> Tensor:
    """log π_θ(o) for every sequence: (N,)."""
    return token_logp_table(problem, theta).sum(dim=1)


def objective(problem: Problem, theta: Tensor) -> Tensor:
    """J(θ) = E_{π_θ}[R], exact (0-d, differentiable)."""
    return (seq_logp(problem, theta).exp() * problem.rewards).sum()


def exact_gradient(problem: Problem, theta: Tensor) -> Tensor:
    """∇J(θ), exact, (P, V)."""
    th = theta.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(objective(problem, th), th)
    return grad


def kl(problem: Problem, theta_p: Tensor, theta_q: Tensor) -> float:
    """KL(π_p ‖ π_q) over whole sequences, exact (nats)."""
    return kl_of(seq_logp(problem, theta_p), seq_logp(problem, theta_q))


def kl_of(lp: Tensor, lq: Tensor) -> float:
    """KL(p ‖ q) from sequence log-probs (N,)."""
    return float((lp.exp() * (lp - lq)).sum())


def chi2(problem: Problem, theta_b: Tensor, theta: Tensor) -> float:
    """χ²(π_θ ‖ π_b) = E_b[r²] − 1 with r = π_θ/π_b over whole sequences: the variance of the IS weight."""
    lb, lt = seq_logp(problem, theta_b), seq_logp(problem, theta)
    return float(torch.exp(2 * lt - lb).sum() - 1.0)


def entropy(problem: Problem, theta: Tensor) -> float:
    """Sequence-level entropy of π_θ (nats)."""
    return entropy_of(seq_logp(problem, theta))


def entropy_of(lp: Tensor) -> float:
    return float(-(lp.exp() * lp).sum())


# ----------------------------------------------------------------------------------------------
# Sampling and behavior policies
# ----------------------------------------------------------------------------------------------

def sample(problem: Problem, theta: Tensor, n: int, gen: torch.Generator) -> Tensor:
    """n i.i.d. sequence indices from π_θ, (n,) long."""
    return sample_of(seq_logp(problem, theta.detach()), n, gen)


def sample_of(lp: Tensor, n: int, gen: torch.Generator) -> Tensor:
    """n i.i.d. indices from the distribution with log-probs lp (N,), by inverse CDF."""
    cdf = torch.cumsum(lp.detach().exp(), 0)
    u = torch.rand(n, generator=gen, dtype=DTYPE) * cdf[-1]
    return torch.searchsorted(cdf, u, right=True).clamp_max(lp.numel() - 1)


def perturb_to_kl(problem: Problem, theta: Tensor, target_kl: float, seed: int, tol: float = 1e-4) -> Tensor:
    """A behavior policy θ_b = θ + s·Z with KL(π_b ‖ π_θ) = target_kl (relative tolerance `tol`).

    Z ~ N(0, 1) per logit from `seed`; s ≥ 0 by bisection (KL grows with s along the ray in practice;
    the achieved KL is returned implicitly and should be re-measured with `kl`). target_kl = 0 gives θ.
    """
    theta = theta.detach()
    if target_kl <= 0:
        return theta.clone()
    z = torch.randn(problem.shape, generator=torch.Generator().manual_seed(int(seed) + 104729), dtype=DTYPE)
    lo, hi = 0.0, 1.0
    while kl(problem, theta + hi * z, theta) < target_kl:
        lo, hi = hi, 2 * hi
        if hi > 1e4:
            reached = kl(problem, theta + hi * z, theta)
            raise ValueError(f"cannot reach KL {target_kl} along the perturbation ray (max {reached:.3g})")
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        value = kl(problem, theta + mid * z, theta)
        if abs(value - target_kl) <= tol * target_kl:
            return theta + mid * z
        lo, hi = (mid, hi) if value < target_kl else (lo, mid)
    return theta + 0.5 * (lo + hi) * z


def ascend(problem: Problem, theta: Tensor, steps: int, lr: float, scale: float = 1.0) -> Tensor:
    """θ after `steps` exact gradient-ascent steps θ ← θ + lr·scale·∇J(θ) (the expected on-policy update)."""
    theta = theta.detach().clone()
    for _ in range(steps):
        theta = theta + lr * scale * exact_gradient(problem, theta)
    return theta


def normalized(problem: Problem, value: float) -> float:
    """J mapped to [0, 1] by the reward range (for binary rewards: J itself, a success probability)."""
    lo, hi = problem.reward_range
    return (value - lo) / (hi - lo) if hi > lo else math.nan
