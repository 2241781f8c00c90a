"""gmc_grpo_prox [ours]: gmc_grpo's group mass cap on π_prox/π_b times decoupled PPO's token clip of π_θ/π_prox.
Hand-computed; the coincidence with gmc_grpo at one update per batch is tested in test_algorithms_coincidence."""
from __future__ import annotations

import math

import torch

from algorithms import LossInputs, compute_loss

F64 = torch.float64


def inputs(theta_over_prox, prox_over_b, adv) -> LossInputs:
    """One token per response, one group; logp_proximal = 0, so logp = log ρ' and logp_behavior = −log r."""
    logp = torch.tensor([[math.log(x)] for x in theta_over_prox], dtype=F64, requires_grad=True)
    behavior = torch.tensor([[-math.log(x)] for x in prox_over_b], dtype=F64)
    n = len(adv)
    return LossInputs(logp, behavior, torch.tensor(adv, dtype=F64), torch.ones(n, 1, dtype=torch.bool),
                      torch.zeros(n, dtype=torch.long), logp_proximal=torch.zeros(n, 1, dtype=F64))


def test_the_cap_acts_on_the_proximal_weight_and_the_clip_on_the_move_from_it():
    # Group of G = 2, ε = 0.2: C = 2 × 1.2 = 2.4. Weights from π_prox/π_b: r = [3, 1], S = 4 > C,
    # scale 2.4/4 = 0.6, w = [1.8, 0.6].
    # Response 0: A = +1, ρ' = 1.5 > 1.2: clipped, ℓ = −1.2 × 1.8 = −2.16, gradient 0.
    # Response 1: A = −1, ρ' = 0.9 in [0.8, 1.2]: ℓ = max(0.9, 0.8) × 0.6 = 0.54, dℓ/dlogp = 0.6 × 0.9 = 0.54.
    # Token-mean over 2 tokens: loss (−2.16 + 0.54)/2 = −0.81, gradient [0, 0.27].
    inp = inputs([1.5, 0.9], [3.0, 1.0], [1.0, -1.0])
    out = compute_loss("gmc_grpo_prox", inp, eps=0.2)
    out.loss.backward()
    torch.testing.assert_close(out.loss, torch.tensor(-0.81, dtype=F64), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(inp.logp.grad, torch.tensor([[0.0], [0.27]], dtype=F64), rtol=1e-9, atol=1e-12)
    assert out.metrics["gmc/capped_frac"] == 1.0 and abs(out.metrics["gmc/scale_mean"] - 0.6) < 1e-12
    assert out.metrics["gmc_prox/clip_frac"] == 0.5


def test_gmc_grpo_lets_the_same_move_grow_its_weight():
    # gmc_grpo on the same batch weighs by π_θ/π_b = [4.5, 0.9]: S = 5.4, scale 2.4/5.4, w = [2.0, 0.4];
    # gradient −w A / 2 = [−1.0, +0.2]: the move away from π_prox raised response 0's weight, unclipped.
    inp = inputs([1.5, 0.9], [3.0, 1.0], [1.0, -1.0])
    compute_loss("gmc_grpo", inp, eps=0.2).loss.backward()
    torch.testing.assert_close(inp.logp.grad, torch.tensor([[-1.0], [0.2]], dtype=F64), rtol=1e-9, atol=1e-12)
