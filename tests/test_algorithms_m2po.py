"""The vectorized M2PO mask against a plain-Python loop of Algorithm 1 (arXiv 2510.01161).

Algorithm 1: keep every valid token; while the mean of M over the kept tokens exceeds τ, drop the kept
token with the largest M (the first in row-major order on ties). The masks must be equal exactly.
"""
from __future__ import annotations

import random

import pytest
import torch

from algorithms.m2po_mask import second_moment_mask


def loop_mask(m2: list[list[float]], mask: list[list[bool]], tau: float) -> list[list[bool]]:
    """Algorithm 1, one token at a time."""
    kept = [(i, t) for i in range(len(m2)) for t in range(len(m2[0])) if mask[i][t]]    # row-major order
    while kept and sum(m2[i][t] for i, t in kept) / len(kept) > tau:
        largest = max(kept, key=lambda it: m2[it[0]][it[1]])       # max() returns the first of equal maxima
        kept.remove(largest)
    keep = [[False] * len(m2[0]) for _ in m2]
    for i, t in kept:
        keep[i][t] = True
    return keep


def random_case(rng: random.Random, dyadic: bool):
    """M values and a mask. Dyadic values (k/64, many ties) keep every sum exact, so the loop and the
    vectorized code cannot differ by rounding; continuous values exercise the general path."""
    b, t = rng.randint(1, 7), rng.randint(1, 9)
    p_valid = rng.choice([1.0, 0.8, 0.5, 0.2])
    mask = [[rng.random() < p_valid for _ in range(t)] for _ in range(b)]
    if rng.random() < 0.3:
        mask[rng.randrange(b)] = [False] * t                          # a fully padded row
    if dyadic:
        m2 = [[rng.choice([0, 1, 1, 2, 4, 4, 9, 16, 25, 64]) / 64 for _ in range(t)] for _ in range(b)]
    else:
        scale = rng.choice([0.01, 0.1, 1.0])
        m2 = [[rng.gauss(0, scale) ** 2 for _ in range(t)] for _ in range(b)]
    valid = [m2[i][j] for i in range(b) for j in range(t) if mask[i][j]]
    mean = sum(valid) / len(valid) if valid else 0.0
    tau = rng.choice([
        0.04,
        rng.uniform(0, 2 * mean + 1e-3),
        # Exactly the mean: nothing dropped (the loop tests "> τ"). Only with dyadic values, whose sums
        # are exact: for others the mean's last bit depends on the summation order, a rounding tie.
        mean if dyadic else mean * (1 + 1e-9),
        0.0,                                    # only zeros may stay
        -1.0,                                   # everything dropped
        1e9,                                    # nothing dropped
        rng.choice([1, 2, 4, 8]) / 64,          # dyadic: ties with the dyadic M values
    ])
    return m2, mask, tau


@pytest.mark.parametrize("dyadic", [True, False])
def test_vectorized_mask_equals_the_loop(dyadic):
    rng = random.Random(1234 + dyadic)
    seen = {"none dropped": 0, "all dropped": 0, "some dropped": 0}
    for _ in range(400):
        m2, mask, tau = random_case(rng, dyadic)
        expected = loop_mask(m2, mask, tau)
        for dtype in (torch.float64, torch.float32) if dyadic else (torch.float64,):
            got = second_moment_mask(torch.tensor(m2, dtype=dtype), torch.tensor(mask), tau)
            assert got.dtype == torch.bool
            assert got.tolist() == expected, (m2, mask, tau)
        n_valid, n_kept = sum(map(sum, mask)), sum(map(sum, expected))
        if n_valid:
            key = "none dropped" if n_kept == n_valid else "all dropped" if n_kept == 0 else "some dropped"
            seen[key] += 1
    assert min(seen.values()) >= 20, seen                            # every regime is exercised


def test_ties_drop_the_first_in_row_major_order():
    # M = [[0.25, 0], [0.25, 0.25]], τ = 0.1: mean 0.75/4 = 0.1875 > τ → drop (0,0), the first 0.25;
    # mean 0.5/3 = 0.1667 > τ → drop (1,0); mean 0.25/2 = 0.125 > τ → drop (1,1); mean 0 ≤ τ → stop.
    m2 = torch.tensor([[0.25, 0.0], [0.25, 0.25]])
    keep = second_moment_mask(m2, torch.ones(2, 2, dtype=torch.bool), 0.1)
    assert keep.tolist() == [[False, True], [False, False]]
    # τ = 0.15: stops after two drops, so of the three tied 0.25 only the last, (1,1), is kept.
    keep = second_moment_mask(m2, torch.ones(2, 2, dtype=torch.bool), 0.15)
    assert keep.tolist() == [[False, True], [False, True]]


def test_padding_values_are_ignored():
    # Padding may hold anything (even NaN): only valid tokens enter the statistic.
    m2 = torch.tensor([[0.01, float("nan"), 9.0], [0.02, 0.03, float("inf")]])
    mask = torch.tensor([[True, False, False], [True, True, False]])
    keep = second_moment_mask(m2, mask, 0.04)
    assert keep.tolist() == [[True, False, False], [True, True, False]]


def test_large_batch_matches_the_loop_on_a_sample_of_thresholds():
    # A realistic size (the loop is O(n²), so few τ): 2000 tokens, continuous values.
    gen = torch.Generator().manual_seed(5)
    m2 = (0.3 * torch.randn(40, 50, generator=gen, dtype=torch.float64)) ** 2
    mask = torch.rand(40, 50, generator=gen) < 0.7
    for tau in (0.04, 0.08):
        expected = loop_mask(m2.tolist(), mask.tolist(), tau)
        got = second_moment_mask(m2, mask, tau)
        assert got.tolist() == expected
        assert 0 < int(got.sum()) < int(mask.sum())
