"""The synthetic policy: enumeration, exact objective and gradient, divergences, sampling."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from harness.lab import policy


@pytest.fixture
def small():
    problem = policy.make_problem(vocab=3, length=3, reward_kind="uniform", seed=1)
    return problem, policy.init_logits(problem, 1.0, seed=1)


def test_tables_match_a_loop_over_prefixes(small):
    problem, theta = small
    V, L = problem.vocab, problem.length
    assert problem.shape == (1 + V + V * V, V)
    rows = {}                                   # prefix tuple -> row, assigned in trie order (slow reference)
    for t in range(L):
        for prefix in itertools.product(range(V), repeat=t):
            rows[prefix] = len(rows)
    logsm = torch.log_softmax(theta, dim=-1)
    table = policy.token_logp_table(problem, theta)
    for n, seq in enumerate(itertools.product(range(V), repeat=L)):          # lexicographic order
        assert problem.tokens[n].tolist() == list(seq)
        for t in range(L):
            assert problem.prefix[n, t] == rows[seq[:t]]
            assert table[n, t] == logsm[rows[seq[:t]], seq[t]]
    assert math.isclose(float(policy.seq_logp(problem, theta).exp().sum()), 1.0, abs_tol=1e-12)


def test_exact_gradient_matches_finite_differences(small):
    problem, theta = small
    grad = policy.exact_gradient(problem, theta)
    h = 1e-6
    for idx in itertools.product(range(problem.shape[0]), range(problem.shape[1])):
        e = torch.zeros_like(theta)
        e[idx] = h
        fd = (float(policy.objective(problem, theta + e)) - float(policy.objective(problem, theta - e))) / (2 * h)
        assert abs(fd - float(grad[idx])) < 1e-8, idx


def test_binary_rewards_and_normalized_objective():
    problem = policy.make_problem(vocab=4, length=3, reward_kind="binary", reward_frac=0.1, seed=0)
    assert int(problem.rewards.sum()) == round(0.1 * 64)
    theta = torch.zeros(problem.shape, dtype=torch.float64)             # uniform policy
    J = float(policy.objective(problem, theta))
    assert math.isclose(J, 6 / 64, rel_tol=1e-12)
    assert policy.normalized(problem, J) == J                          # rewards in {0, 1}


def test_divergences(small):
    problem, theta = small
    theta_b = policy.perturb_to_kl(problem, theta, 0.3, seed=0)
    assert math.isclose(policy.kl(problem, theta_b, theta), 0.3, rel_tol=1e-3)
    assert policy.kl(problem, theta, theta) == pytest.approx(0.0, abs=1e-15)
    # χ² = E_b[r²] − 1 by explicit sum
    pb, pt = policy.seq_logp(problem, theta_b).exp(), policy.seq_logp(problem, theta).exp()
    assert policy.chi2(problem, theta_b, theta) == pytest.approx(float((pt ** 2 / pb).sum() - 1), rel=1e-12)
    # per-token entropy summed along the chain rule equals the sequence entropy
    assert policy.entropy(problem, theta) > 0


def test_sampling_is_seeded_and_follows_the_policy(small):
    problem, theta = small
    a = policy.sample(problem, theta, 20000, torch.Generator().manual_seed(3))
    b = policy.sample(problem, theta, 20000, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    freq = torch.bincount(a, minlength=problem.n_seqs).double() / a.numel()
    p = policy.seq_logp(problem, theta).exp()
    se = torch.sqrt(p * (1 - p) / a.numel())
    assert bool(((freq - p).abs() <= 5 * se + 1e-12).all())


def test_ascend_increases_the_objective(small):
    problem, theta = small
    after = policy.ascend(problem, theta, steps=5, lr=0.5)
    assert float(policy.objective(problem, after)) > float(policy.objective(problem, theta))
