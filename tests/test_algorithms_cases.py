"""Hand-computed cases for each estimator, aggregation and group advantages.

Every expected number is derived in the comments from the formula in docs/estimators.md, on tiny float64
inputs, independently of the code under test. Ratios are written as ρ = exp(λ) with λ = logp − logp_behavior;
the inputs are built by choosing λ (or ρ) and logp directly. Gradients are w.r.t. logp.
"""
from __future__ import annotations

import math
import random

import pytest
import torch

from algorithms import LossInputs, aggregate, compute_loss, group_advantages
from algorithms.gmc_grpo import group_mass_cap

F64 = torch.float64
TOL = dict(rtol=1e-6, atol=1e-6)
e = math.exp


def batch(log_ratio, adv, mask=None, logp=None, group_ids=None) -> LossInputs:
    """Inputs with the given token log-ratios λ (B, T) and advantages A (B,).

    logp defaults to −1 everywhere; logp_behavior = logp − λ, so logp − logp_behavior = λ.
    """
    lam = torch.tensor(log_ratio, dtype=F64)
    logp = torch.full_like(lam, -1.0) if logp is None else torch.tensor(logp, dtype=F64)
    mask = torch.ones_like(lam, dtype=torch.bool) if mask is None else torch.tensor(mask, dtype=torch.bool)
    group_ids = torch.zeros(lam.shape[0], dtype=torch.long) if group_ids is None else torch.tensor(group_ids)
    return LossInputs(logp.clone().requires_grad_(True), logp - lam, torch.tensor(adv, dtype=F64), mask, group_ids)


def run(name, inp, **kwargs):
    out = compute_loss(name, inp, **kwargs)
    out.loss.backward()
    return out, inp.logp.grad


def close(actual, expected):
    torch.testing.assert_close(torch.as_tensor(actual, dtype=F64), torch.as_tensor(expected, dtype=F64), **TOL)


# ----------------------------------------------------------------------------------------------
# Aggregation
# ----------------------------------------------------------------------------------------------

def test_aggregate_by_hand():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    # token-mean: (1 + 2 + 4) / 3 tokens = 7/3; with 10 global tokens: 7/10
    close(aggregate(loss, mask, "token-mean"), 7 / 3)
    close(aggregate(loss, mask, "token-mean", total_tokens=10), 0.7)
    # seq-mean-token-mean: ((1 + 2)/2 + 4/1) / 2 = 2.75; with 4 global sequences: 5.5 / 4 = 1.375
    close(aggregate(loss, mask, "seq-mean-token-mean"), 2.75)
    close(aggregate(loss, mask, "seq-mean-token-mean", total_seqs=4), 1.375)
    # seq-mean-token-sum-norm, K = 3: ((1 + 2) + 4) / 3 / 2 = 7/6; K = 7, 4 sequences: 7 / 7 / 4 = 0.25
    close(aggregate(loss, mask, "seq-mean-token-sum-norm", max_tokens=3), 7 / 6)
    close(aggregate(loss, mask, "seq-mean-token-sum-norm", max_tokens=7, total_seqs=4), 0.25)


# ----------------------------------------------------------------------------------------------
# grpo: ℓ = max(−A ρ, −A clip(ρ, 1 − ε_low, 1 + ε_high)), dual clip for A < 0: min(ℓ, −c A)
# ----------------------------------------------------------------------------------------------

# Row 0: A = +1, ρ = [1.5, 0.5]; row 1: A = −1, ρ = [1.5, 0.5]. Token-mean over N = 4 tokens.
GRPO_LAM = [[math.log(1.5), math.log(0.5)], [math.log(1.5), math.log(0.5)]]
GRPO_ADV = [1.0, -1.0]


def test_grpo_symmetric_clip():
    # ε = 0.2, clip range [0.8, 1.2].
    # (0,0) A=+1, ρ=1.5: max(−1.5, −1.2) = −1.2, clipped → grad 0
    # (0,1) A=+1, ρ=0.5: max(−0.5, −0.8) = −0.5, grad −A ρ = −0.5 → /4 = −0.125
    # (1,0) A=−1, ρ=1.5: max(1.5, 1.2) = 1.5,    grad −A ρ = +1.5 → /4 = +0.375
    # (1,1) A=−1, ρ=0.5: max(0.5, 0.8) = 0.8, clipped → grad 0
    # loss = (−1.2 − 0.5 + 1.5 + 0.8) / 4 = 0.15
    out, grad = run("grpo", batch(GRPO_LAM, GRPO_ADV), eps=0.2)
    close(out.loss, 0.15)
    close(grad, [[0.0, -0.125], [0.375, 0.0]])
    # clip fractions: low (A<0 ∧ ρ<0.8) = 1/4, high (A>0 ∧ ρ>1.2) = 1/4 (ratio statistics are the trainer's)
    close([out.metrics[k] for k in ("is/clip_frac_low", "is/clip_frac_high", "is/clip_frac")], [0.25, 0.25, 0.5])


def test_grpo_clip_higher():
    # ε = 0.2, ε_high = 0.6: range [0.8, 1.6]. (0,0) ρ=1.5 is now inside: ℓ = −1.5, grad −1.5/4 = −0.375.
    # loss = (−1.5 − 0.5 + 1.5 + 0.8) / 4 = 0.075
    out, grad = run("grpo", batch(GRPO_LAM, GRPO_ADV), eps=0.2, eps_high=0.6)
    close(out.loss, 0.075)
    close(grad, [[-0.375, -0.125], [0.375, 0.0]])
    close([out.metrics["is/clip_frac_high"], out.metrics["is/clip_frac_low"]], [0.0, 0.25])


def test_grpo_eps_low():
    # ε = 0.2, ε_low = 0.7: range [0.3, 1.2]. (1,1) A=−1, ρ=0.5 is now inside: ℓ = 0.5, grad −A ρ /4 = 0.125.
    # loss = (−1.2 − 0.5 + 1.5 + 0.5) / 4 = 0.075
    out, grad = run("grpo", batch(GRPO_LAM, GRPO_ADV), eps=0.2, eps_low=0.7)
    close(out.loss, 0.075)
    close(grad, [[0.0, -0.125], [0.375, 0.125]])


def test_grpo_dual_clip():
    # ε = 0.2, c = 1.3: for A<0, ℓ = min(ℓ, −c A) = min(ℓ, 1.3).
    # (1,0) A=−1: min(1.5, 1.3) = 1.3, constant → grad 0.  (1,1): min(0.8, 1.3) = 0.8 (unchanged).
    # A>0 rows are untouched. loss = (−1.2 − 0.5 + 1.3 + 0.8) / 4 = 0.1
    out, grad = run("grpo", batch(GRPO_LAM, GRPO_ADV), eps=0.2, dual_clip=1.3)
    close(out.loss, 0.1)
    close(grad, [[0.0, -0.125], [0.0, 0.0]])
    with pytest.raises(ValueError, match="dual_clip"):
        compute_loss("grpo", batch(GRPO_LAM, GRPO_ADV), dual_clip=0.9)


def test_grpo_seq_mean_token_mean_with_padding():
    # Row 0 has one valid token (ρ=1.5, A=+1): ℓ = −1.2 clipped. Row 1 two tokens, A=−1, ρ=[1.5, 0.5]:
    # ℓ = [1.5, 0.8]. seq-mean-token-mean = (−1.2/1 + (1.5 + 0.8)/2) / 2 = (−1.2 + 1.15)/2 = −0.025.
    # grad (1,0) = −A ρ / 2 tokens / 2 seqs = 1.5/4 = 0.375; everything else 0.
    out, grad = run("grpo", batch(GRPO_LAM, GRPO_ADV, mask=[[1, 0], [1, 1]]), eps=0.2,
                    aggregation="seq-mean-token-mean")
    close(out.loss, -0.025)
    close(grad, [[0.0, 0.0], [0.375, 0.0]])


# ----------------------------------------------------------------------------------------------
# REINFORCE-surrogate family: ℓ = −w · A · logp with w detached ⇒ ∂ℓ/∂logp = −w A (per token, /N)
# ----------------------------------------------------------------------------------------------

def test_tic_is():
    # ε = 0.2, w_i = min(r_i, 1.2), r_i = exp(Λ_i), Λ_i = Σ_t m λ.
    # row 0: λ = [0.5, 0.3] → Λ = 0.8, r = 2.2255 > 1.2 → w = 1.2 (clipped), A = 1
    # row 1: λ = [−0.2, 0.1] → Λ = −0.1 → w = e^−0.1 = 0.904837, A = −0.5
    # row 2: λ = [0.1, pad] → Λ = 0.1 → w = e^0.1 = 1.105171, A = 2
    # logp = [[−1, −2], [−0.5, −1], [−3, pad]], N = 5 tokens
    # loss = −(1.2·1·(−1−2) + 0.904837·(−0.5)·(−0.5−1) + 1.105171·2·(−3)) / 5
    #      = −(−3.6 + 0.678628 − 6.631026) / 5 = 1.910479
    # grad = −w A / 5: row 0: −0.24; row 1: +0.0904837; row 2: −0.4420684
    inp = batch([[0.5, 0.3], [-0.2, 0.1], [0.1, 0.0]], [1.0, -0.5, 2.0], mask=[[1, 1], [1, 1], [1, 0]],
                logp=[[-1.0, -2.0], [-0.5, -1.0], [-3.0, 0.0]])
    out, grad = run("tic_is", inp, eps=0.2)
    close(out.loss, 1.9104794889853831)
    close(grad, [[-0.24, -0.24], [0.0904837418, 0.0904837418], [-0.4420683672, 0.0]])
    # 1 of 3 clipped; mean w = (1.2 + 0.904837 + 1.105171)/3 = 1.070003; max Λ = 0.8
    close([out.metrics["tic/clipped_frac"], out.metrics["tic/weight_mean"], out.metrics["tic/log_ratio_max"]],
          [1 / 3, 1.070002778703869, 0.8])


def test_topr():
    # w = 1 if A ≥ 0 else clip(r, 0, 1).
    # row 0: A = 1,    Λ = 0.5            → w = 1
    # row 1: A = −1,   Λ = 0.4, r = 1.49  → w = 1 (clip to 1)
    # row 2: A = −0.5, λ = [−0.1, −0.2], Λ = −0.3 → w = e^−0.3 = 0.740818
    # logp = [[−1, pad], [−2, pad], [−0.5, −1.5]], N = 4
    # loss = −(1·1·(−1) + 1·(−1)·(−2) + 0.740818·(−0.5)·(−2)) / 4 = −(−1 + 2 + 0.740818)/4 = −0.435205
    # grad = −w A / 4: row 0: −0.25; row 1: +0.25; row 2: 0.740818·0.5/4 = 0.0926023
    inp = batch([[0.5, 0.0], [0.4, 0.0], [-0.1, -0.2]], [1.0, -1.0, -0.5], mask=[[1, 0], [1, 0], [1, 1]],
                logp=[[-1.0, 0.0], [-2.0, 0.0], [-0.5, -1.5]])
    out, grad = run("topr", inp, eps=0.2)
    close(out.loss, -0.43520455517042944)
    close(grad, [[-0.25, 0.0], [0.25, 0.0], [0.0926022776, 0.0926022776]])
    close(out.metrics["topr/tapered_frac"], 1 / 3)                       # only row 2 is tapered


def test_tis():
    # One update per batch, no mismatch: w = min(π_prox/π_rollout, C) = min(ρ, C) per token, detached, times the
    # PPO clip of ρ' = π_θ/π_prox = 1, whose value is −A and whose gradient is −A ρ' = −A per token.
    # row 0: A = 1,  ρ = [3, 0.5] → w = [2 (truncated at C=2), 0.5]
    # row 1: A = −2, ρ = [1.5, 1] → w = [1.5, 1]
    # logp = [[−1, −2], [−0.5, −3]], N = 4
    # loss = Σ w·(−A) / 4 = (−2 − 0.5 + 3 + 2)/4 = 0.625 (the PPO surrogate's value, not −w A logp: intended change
    # from the REINFORCE surrogate of the earlier `tis`; the gradient is the same)
    # grad = −w A / 4 = [[−0.5, −0.125], [0.75, 0.5]]
    lam = [[math.log(3.0), math.log(0.5)], [math.log(1.5), 0.0]]
    logp = [[-1.0, -2.0], [-0.5, -3.0]]
    out, grad = run("tis", batch(lam, [1.0, -2.0], logp=logp), eps=0.2)
    close(out.loss, 0.625)
    close(grad, [[-0.5, -0.125], [0.75, 0.5]])
    close(out.metrics["tis/truncated_frac"], 0.25)
    # C = 4: (0,0) keeps w = 3: loss = (−3 − 0.5 + 3 + 2)/4 = 0.375, grad (0,0) = −3/4
    out, grad = run("tis", batch(lam, [1.0, -2.0], logp=logp), eps=0.2, cap=4.0)
    close(out.loss, 0.375)
    close(grad, [[-0.75, -0.125], [0.75, 0.5]])


def test_is_none():
    # ℓ = −ρ A, no clip. row 0: A = 2, λ = [0.1, −0.2]; row 1: A = −1, λ = [0.3, pad]. N = 3.
    # loss = −(2e^0.1 + 2e^−0.2 − e^0.3)/3 = −(2.210342 + 1.637462 − 1.349859)/3 = −0.832648
    # grad = −A ρ / 3: [[−2·1.105171/3, −2·0.818731/3], [1.349859/3, 0]]
    out, grad = run("is_none", batch([[0.1, -0.2], [0.3, 0.0]], [2.0, -1.0], mask=[[1, 1], [1, 0]]), eps=0.2)
    close(out.loss, -0.8326481782437519)
    close(grad, [[-0.7367806121, -0.5458205021], [0.4499529359, 0.0]])
    assert out.metrics == {}


# ----------------------------------------------------------------------------------------------
# gspo: s_i = exp(Λ_i / |o_i|) with grad, ℓ_i = max(−A s, −A clip(s, 1 − ε_low, 1 + ε_high)) per token
# ----------------------------------------------------------------------------------------------

def test_gspo_custom_range():
    # ε_low = ε_high = 0.1: range [0.9, 1.1].
    # row 0: A = +1, λ = [0.3, 0.1], |o| = 2, s = e^0.2 = 1.2214 > 1.1 → ℓ = −1.1 (clipped, grad 0)
    # row 1: A = −1, λ = [−0.05, pad], |o| = 1, s = e^−0.05 = 0.951229 inside → ℓ = 0.951229;
    #        ∂s/∂logp_t = s/|o| → grad −A s / |o| = 0.951229 (before aggregation)
    # token-mean (ℓ_i on each of its tokens, N = 3): (−1.1·2 + 0.951229)/3 = −0.416257; grad (1,0) = 0.951229/3
    inp = batch([[0.3, 0.1], [-0.05, 0.0]], [1.0, -1.0], mask=[[1, 1], [1, 0]])
    out, grad = run("gspo", inp, eps=0.2, eps_low=0.1, eps_high=0.1)
    close(out.loss, -0.4162568584997621)
    close(grad, [[0.0, 0.0], [0.3170764748, 0.0]])
    close(out.metrics["gspo/clip_frac"], 0.5)
    # seq-mean-token-mean (the paper's form): (−1.1 + 0.951229)/2 = −0.0743853; grad (1,0) = 0.951229/2
    inp = batch([[0.3, 0.1], [-0.05, 0.0]], [1.0, -1.0], mask=[[1, 1], [1, 0]])
    out, grad = run("gspo", inp, eps=0.2, eps_low=0.1, eps_high=0.1, aggregation="seq-mean-token-mean")
    close(out.loss, -0.07438528774964304)
    close(grad, [[0.0, 0.0], [0.4756147123, 0.0]])


def test_gspo_default_range_ignores_eps():
    # Defaults ε_low = 3e-4, ε_high = 4e-4 (range [0.9997, 1.0004]) whatever eps is.
    # row 0: A = +1, λ = [0.0003, 0.0001], s = e^0.0002 = 1.00020002 inside → ℓ = −s, grad −A s/|o| = −s/2
    # row 1: A = −1, λ = [−0.001], s = e^−0.001 = 0.9990005 < 0.9997 → ℓ = max(s, 0.9997) = 0.9997, grad 0
    # seq-mean-token-mean: (−1.00020002 + 0.9997)/2 = −0.00025001; grad row 0 = −1.00020002/2/2 = −0.25005
    inp = batch([[0.0003, 0.0001], [-0.001, 0.0]], [1.0, -1.0], mask=[[1, 1], [1, 0]])
    out, grad = run("gspo", inp, eps=0.2, aggregation="seq-mean-token-mean")
    s0 = e(0.0002)
    close(out.loss, (-s0 + 0.9997) / 2)
    close(grad, [[-s0 / 4, -s0 / 4], [0.0, 0.0]])


# ----------------------------------------------------------------------------------------------
# m2po_mask (Algorithm 1): M = λ², drop the largest M while the kept mean exceeds τ; ℓ = −keep · ρ · A
# ----------------------------------------------------------------------------------------------

def test_m2po_mask():
    # λ = [[0.5, 0.1], [−0.1, 0]] → M = [[0.25, 0.01], [0.01, 0]], τ = 0.04.
    # mean of all = 0.27/4 = 0.0675 > τ → drop 0.25 at (0,0); mean of the rest = 0.02/3 = 0.00667 ≤ τ → stop.
    # keep = [[0, 1], [1, 1]]. A = [1, −2]. ρ: (0,1) e^0.1 = 1.105171, (1,0) e^−0.1 = 0.904837, (1,1) 1.
    # token-mean over all N = 4 tokens (dropped tokens still count):
    # loss = (−1.105171 + 2·0.904837 + 2·1)/4 = 0.676126
    # grad = −keep A ρ / 4 = [[0, −0.276293], [0.452419, 0.5]]
    out, grad = run("m2po_mask", batch([[0.5, 0.1], [-0.1, 0.0]], [1.0, -2.0]), eps=0.2)
    close(out.loss, 0.6761259794990678)
    close(grad, [[0.0, -e(0.1) / 4], [0.45241870901797976, 0.5]])
    close([out.metrics["m2po/m2_before"], out.metrics["m2po/m2_after"], out.metrics["m2po/masked_frac"]],
          [0.0675, 0.02 / 3, 0.25])
    # τ = 0.1 ≥ 0.0675: nothing is dropped; (0,0) now has grad −1·e^0.5/4.
    out, grad = run("m2po_mask", batch([[0.5, 0.1], [-0.1, 0.0]], [1.0, -2.0]), eps=0.2, tau=0.1)
    close(grad, [[-e(0.5) / 4, -e(0.1) / 4], [0.45241870901797976, 0.5]])
    close(out.metrics["m2po/masked_frac"], 0.0)


# ----------------------------------------------------------------------------------------------
# bapo (the authors' code, README values): P/(N + 1e-8) ≥ ρ0/(1 − ρ0) = 1; c_low rises first (by 0.05 to 0.9),
# then c_high (by 0.05 to 3.0); PPO clip on [c_low, c_high] with dual clip 3 for A < 0
# ----------------------------------------------------------------------------------------------

def test_bapo_c_low_saturates_then_c_high_rises():
    # Tokens (T = 1): row 0 A = +1, ρ = 3; rows 1, 2 A = −1, ρ = 1. N(c_low) = 2·max(1, c_low) = 2 for every
    # c_low ≤ 0.9, so raising c_low (0.6 → 0.9 in 6 steps) never meets P/N ≥ 1; then P(c_high) = min(3, c_high):
    # 2.00/(2 + 1e-8) < 1 (the code's 1e-8 matters), 2.05/(2 + 1e-8) ≥ 1 → c_high = 1.2 + 17·0.05 = 2.05.
    # Loss on [0.9, 2.05]: row 0: max(−3, −2.05) = −2.05 (clipped, grad 0); rows 1, 2: ρ = 1 inside, ℓ = 1
    # (dual clip min(1, 3) = 1), grad −A ρ / 3 = 1/3. loss = (−2.05 + 2)/3 = −0.0166667
    inp = batch([[math.log(3.0)], [0.0], [0.0]], [1.0, -1.0, -1.0])
    out, grad = run("bapo", inp, eps=0.2)
    close([out.metrics["bapo/c_low"], out.metrics["bapo/c_high"]], [0.9, 2.05])
    close(out.metrics["bapo/pos_neg_ratio"], 2.05 / (2 + 1e-8))
    close(out.loss, -0.05 / 3)
    close(grad, [[0.0], [1 / 3], [1 / 3]])


def test_bapo_never_balanced_ends_at_both_limits():
    # Rows: A = [+1, −1, −1], ρ = [0.5, 1, 0.7]. P = min(0.5, c_high) = 0.5 always; N = 1 + max(0.7, c_low) ≥ 1.7
    # → never met: c_low climbs to 0.9, then c_high to 3.0; final N = 1.9, P/N = 0.5/(1.9 + 1e-8).
    # Loss on [0.9, 3.0]: row 0 A=+1 ρ=0.5: max(−0.5, −0.9) = −0.5, grad −0.5/3
    #                      row 1 A=−1 ρ=1 inside: ℓ = 1, grad +1/3
    #                      row 2 A=−1 ρ=0.7 < 0.9: max(0.7, 0.9) = 0.9 clipped, grad 0
    # loss = (−0.5 + 1 + 0.9)/3 = 0.466667
    inp = batch([[math.log(0.5)], [0.0], [math.log(0.7)]], [1.0, -1.0, -1.0])
    out, grad = run("bapo", inp, eps=0.2)
    close([out.metrics["bapo/c_low"], out.metrics["bapo/c_high"]], [0.9, 3.0])
    close(out.metrics["bapo/pos_neg_ratio"], 0.5 / (1.9 + 1e-8))
    close(out.loss, 1.4 / 3)
    close(grad, [[-0.5 / 3], [1 / 3], [0.0]])
    close(out.metrics["is/clip_frac"], 1 / 3)


def test_bapo_dual_clip_three():
    # Row 0 A = −1, ρ = 4; row 1 A = +1, ρ = 1. P = 1, N = max(4, c_low) = 4: never met → [0.9, 3.0].
    # Row 0: PPO max(−Aρ, −A clip(ρ)) = max(4, 3) = 4; dual clip min(4, −3A) = 3, constant → grad 0.
    # Row 1: ℓ = −1, grad −1/2. loss = (3 − 1)/2 = 1. Without the dual clip: row 0 ℓ = 4, grad −Aρ/2 = 2, loss 1.5.
    inp = batch([[math.log(4.0)], [0.0]], [-1.0, 1.0])
    out, grad = run("bapo", inp, eps=0.2)
    close(out.loss, 1.0)
    close(grad, [[0.0], [-0.5]])
    inp = batch([[math.log(4.0)], [0.0]], [-1.0, 1.0])
    out, grad = run("bapo", inp, eps=0.2, dual_clip=None)
    close(out.loss, 1.5)
    close(grad, [[2.0], [-0.5]])


def test_bapo_stops_at_once_when_balanced_and_a_step_never_passes_a_limit():
    # A = [+1.5, −1], ρ = [1, 1]: P/(N + 1e-8) = 1.5/1.00000001 ≥ 1 → the start bounds (0.6, 1.2) are kept.
    out = compute_loss("bapo", batch([[0.0], [0.0]], [1.5, -1.0]))
    close([out.metrics["bapo/c_low"], out.metrics["bapo/c_high"]], [0.6, 1.2])
    # No negative token: N = 0 → P/N = inf, met at once.
    out = compute_loss("bapo", batch([[0.0], [0.0]], [1.0, 0.0]))
    assert out.metrics["bapo/c_high"] == pytest.approx(1.2) and out.metrics["bapo/pos_neg_ratio"] == math.inf
    # Limits that are not a whole number of steps away: the code's min(cur + step, max) stops at the limit:
    # c_low 0.6 → 0.85 → 1.0 (not 1.1); c_high 1.2 → 1.7 → 2.0 (not 2.2). Unbalanced as in the test above.
    inp = batch([[math.log(0.5)], [0.0], [math.log(0.7)]], [1.0, -1.0, -1.0])
    out = compute_loss("bapo", inp, c_high_step=0.5, c_high_max=2.0, c_low_step=0.25, c_low_max=1.0)
    close([out.metrics["bapo/c_low"], out.metrics["bapo/c_high"]], [1.0, 2.0])


def bapo_bounds_loop(tokens, rho0=0.5, c_low=0.6, c_low_step=0.05, c_low_max=0.9, c_high=1.2,
                     c_high_step=0.05, c_high_max=3.0):
    """The authors' two while-loops (recipe/bapo/policy_loss.py), one token at a time. tokens: [(ρ, A)]."""
    target = rho0 / (1 - rho0)

    def ratio(low, high):
        eff = [(min(r, high) if a >= 0 else max(r, low)) * a for r, a in tokens]
        pos, neg = sum(x for x in eff if x > 0), -sum(x for x in eff if x < 0)
        return math.inf if neg <= 0 else pos / (neg + 1e-8)

    low, high = c_low, c_high
    value = ratio(low, high)
    while value < target and low < c_low_max:
        low = min(low + c_low_step, c_low_max)
        value = ratio(low, high)
    while value < target and high < c_high_max:
        high = min(high + c_high_step, c_high_max)
        value = ratio(low, high)
    return low, high


@pytest.mark.parametrize("params", [{}, {"rho0": 0.4, "c_high_step": 0.1, "c_high_max": 2.0, "c_low_step": 0.02,
                                         "c_low_max": 0.8}])
def test_bapo_matches_the_loop_on_random_batches(params):
    rng = random.Random(7)
    outcomes = set()
    for _ in range(150):
        n_rows, n_tok = rng.randint(2, 10), rng.randint(1, 5)
        sigma, shift = rng.uniform(0.05, 1.0), rng.uniform(-1.5, 0.6)
        lam = [[rng.gauss(0, sigma) for _ in range(n_tok)] for _ in range(n_rows)]
        adv = [rng.gauss(shift, 1.0) for _ in range(n_rows)]
        mask = [[rng.random() < 0.8 for _ in range(n_tok)] for _ in range(n_rows)]
        mask[0][0] = True
        tokens = [(math.exp(lam[i][t]), adv[i]) for i in range(n_rows) for t in range(n_tok) if mask[i][t]]
        low, high = bapo_bounds_loop(tokens, **params)
        out = compute_loss("bapo", batch(lam, adv, mask=mask), **params)
        assert out.metrics["bapo/c_low"] == pytest.approx(low, abs=1e-9)
        assert out.metrics["bapo/c_high"] == pytest.approx(high, abs=1e-9)
        # Raising c_low only raises N, so the c_low loop never ends the search early: once c_low moved it
        # reaches its limit and c_high takes over (met on the way, or at its limit too).
        if low != pytest.approx(params.get("c_low", 0.6)):
            assert low == pytest.approx(params.get("c_low_max", 0.9))
        outcomes.add("start" if low == pytest.approx(params.get("c_low", 0.6)) else
                     "limits" if high == pytest.approx(params.get("c_high_max", 3.0)) else "c_high")
    assert outcomes == {"start", "c_high", "limits"}          # the draws exercise every phase of the loops


# ----------------------------------------------------------------------------------------------
# gmc_grpo: w_i = r_i · min(1, C/S_g), C = G(1 + ε)
# ----------------------------------------------------------------------------------------------

WORKED_LAMBDA = [1.4, 2.5, 1.5, 3.5]
# r = e^Λ = [4.055200, 12.182494, 4.481689, 33.115452], S = 53.834835, C = 4 · 1.2 = 4.8
# scale = 4.8 / 53.834835 = 0.0891616; w = r · scale
WORKED_W = [0.361568, 1.086211, 0.399595, 2.952627]


def test_gmc_worked_case_group_mass_cap():
    w, log_scale, index = group_mass_cap(torch.tensor(WORKED_LAMBDA, dtype=F64), torch.zeros(4, dtype=torch.long), 0.2)
    close(torch.exp(log_scale), [0.0891616])
    close(w, WORKED_W)
    close(w.sum(), 4.8)                                       # Σ w = C
    assert torch.equal(index, torch.zeros(4, dtype=torch.long))


def test_gmc_worked_case_compute_loss():
    # One group, T = 1, λ = Λ. Token-mean over N = 4: grad_i = −w_i A_i / 4; loss = −Σ w A logp / 4.
    adv = [1.0, -1.0, 0.5, 2.0]
    logp = [[-0.1], [-0.2], [-0.05], [-0.3]]
    r = [e(x) for x in WORKED_LAMBDA]
    w = [ri * 4.8 / sum(r) for ri in r]                      # exact version of WORKED_W
    close(w, WORKED_W)
    out, grad = run("gmc_grpo", batch([[x] for x in WORKED_LAMBDA], adv, logp=logp), eps=0.2)
    close(grad, [[-wi * ai / 4] for wi, ai in zip(w, adv)])
    close(out.loss, -sum(wi * ai * lp[0] for wi, ai, lp in zip(w, adv, logp)) / 4)
    close([out.metrics["gmc/capped_frac"], out.metrics["gmc/scale_min"], out.metrics["gmc/log_ratio_max"]],
          [1.0, 0.0891616, 3.5])
    close(out.metrics["gmc/ess_frac"], sum(r) ** 2 / sum(ri * ri for ri in r) / 4)


def test_gmc_two_groups_one_capped():
    # Group 0 (ids 5): Λ = [0.1, −0.2, 0.05]: S = 1.105 + 0.819 + 1.051 = 2.975 < C = 3.6 → untouched, w = r.
    # Group 1 (ids 2): Λ = [1.0, 0.5]: S = 2.718 + 1.649 = 4.367 > C = 2.4 → scale = 2.4/4.367.
    lam = torch.tensor([0.1, 1.0, -0.2, 0.5, 0.05], dtype=F64)
    ids = torch.tensor([5, 2, 5, 2, 5])
    w, log_scale, index = group_mass_cap(lam, ids, 0.2)
    r = torch.exp(lam)
    untouched = ids == 5
    assert torch.equal(w[untouched], r[untouched])           # exactly r: log scale is exactly 0
    capped = ~untouched
    close(w[capped].sum(), 2.4)
    close(w[capped], r[capped] * 2.4 / (e(1.0) + e(0.5)))
    close(torch.exp(log_scale[index]), torch.where(untouched, 1.0, 2.4 / (e(1.0) + e(0.5))))


@pytest.mark.parametrize("eps", [0.05, 0.2, 0.5])
def test_gmc_properties_on_random_groups(eps):
    gen = torch.Generator().manual_seed(11)
    n_groups = 300
    sizes = torch.randint(2, 17, (n_groups,), generator=gen)
    ids = torch.repeat_interleave(torch.arange(n_groups), sizes)
    perm = torch.randperm(len(ids), generator=gen)
    ids = ids[perm]                                              # groups interleaved in the batch
    mu = (torch.rand(n_groups, generator=gen, dtype=F64) * 2 - 1)[ids]
    sigma = (torch.rand(n_groups, generator=gen, dtype=F64) * 2.9 + 0.05)[ids]
    lam = mu + sigma * torch.randn(len(ids), generator=gen, dtype=F64)
    w, log_scale, index = group_mass_cap(lam, ids, eps)
    r = torch.exp(lam)
    n_capped = n_strict = 0
    for g in range(n_groups):
        sel = ids == g
        rg, wg = r[sel], w[sel]
        G = int(sel.sum())
        C, S = G * (1 + eps), float(rg.sum())
        assert torch.all(wg <= C * (1 + 1e-12))
        if S <= C:
            assert torch.equal(wg, rg)                           # untouched under the cap
        else:
            n_capped += 1
            assert float(wg.sum()) == pytest.approx(C, rel=1e-12)   # Σ w = C exactly when capped
        ratio = wg / rg                                          # w_i / w_j = r_i / r_j ⇔ w/r constant
        torch.testing.assert_close(ratio, ratio[:1].expand_as(ratio), rtol=1e-12, atol=0)
        delta_gmc = max(0.0, 1 - C / S)
        delta_clip = max(0.0, float((1 - (1 + eps) / rg).max()))
        assert float((1 - wg / rg).abs().max()) == pytest.approx(delta_gmc, abs=1e-12)
        assert delta_gmc <= delta_clip + 1e-12
        n_strict += delta_gmc < delta_clip - 1e-6
    assert 30 < n_capped < n_groups and n_strict > 30            # the draws cover both regimes


def test_gmc_no_overflow_at_plus_minus_1e4():
    # float32 inputs, one group of G = 4, one token each: λ = [1e4, 0, −1e4, 0] (token log-ratios are not
    # clamped for trajectory weights). logsumexp Λ = 1e4 (the others are negligible), log scale =
    # log 4.8 − 1e4, so w = [4.8, ~0, 0, ~0]; grad_0 = −4.8 · A_0 / 4.
    logp = torch.tensor([[0.0], [0.0], [-1e4], [-0.5]], dtype=torch.float32, requires_grad=True)
    logp_behavior = torch.tensor([[-1e4], [0.0], [0.0], [-0.5]], dtype=torch.float32)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    inp = LossInputs(logp, logp_behavior, adv, torch.ones(4, 1, dtype=torch.bool), torch.zeros(4, dtype=torch.long))
    out = compute_loss("gmc_grpo", inp, eps=0.2)
    out.loss.backward()
    assert torch.isfinite(out.loss) and torch.isfinite(logp.grad).all()
    assert all(math.isfinite(v) for v in out.metrics.values())
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.2], [0.0], [0.0], [0.0]]), rtol=1e-6, atol=1e-6)
    # The cap function itself on float32 ±1e4, also a group where every Λ is −1e4 or +1e4.
    lam = torch.tensor([1e4, 0.0, -1e4, 0.0, -1e4, -1e4, 1e4, 1e4], dtype=torch.float32)
    ids = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2])
    w, log_scale, _ = group_mass_cap(lam, ids, 0.2)
    assert torch.isfinite(w).all() and torch.isfinite(log_scale).all()
    close(w, [4.8, 0.0, 0.0, 0.0, 0.0, 0.0, 1.2, 1.2])       # group 2: two equal huge r share C = 2.4


# ----------------------------------------------------------------------------------------------
# group_advantages
# ----------------------------------------------------------------------------------------------

def test_group_advantages_std_and_mean_by_hand():
    # ids [7, 3, 7, 7, 3, 4, 4], rewards [1, 1, 0, 0, 1, 0, 1]
    # group 7: R = [1, 0, 0], mean 1/3, centered [2/3, −1/3, −1/3],
    #          var (Bessel) = (4/9 + 1/9 + 1/9)/2 = 1/3, std = 0.57735 → A = centered/(0.57735 + 1e-6)
    # group 3: R = [1, 1] constant → A = 0
    # group 4: R = [0, 1], mean 0.5, var = (0.25 + 0.25)/1 = 0.5, std = 0.707107 → A = ∓0.5/(0.707107 + 1e-6)
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0])
    ids = torch.tensor([7, 3, 7, 7, 3, 4, 4])
    s7, s4 = math.sqrt(1 / 3) + 1e-6, math.sqrt(0.5) + 1e-6
    close(group_advantages(rewards, ids, mode="std"),
          [(2 / 3) / s7, 0.0, (-1 / 3) / s7, (-1 / 3) / s7, 0.0, -0.5 / s4, 0.5 / s4])
    close(group_advantages(rewards, ids), group_advantages(rewards, ids, mode="std"))   # std is the default
    # mean mode (Dr. GRPO): R − mean_g R
    close(group_advantages(rewards, ids, mode="mean"), [2 / 3, 0.0, -1 / 3, -1 / 3, 0.0, -0.5, 0.5])


@pytest.mark.parametrize("mode", ["std", "mean"])
def test_group_advantages_constant_and_singleton_groups_are_exactly_zero(mode):
    # 0.7 and 0.1 are not exact in binary: their group means differ from the rewards by an ulp, which
    # must not leak out as a tiny nonzero advantage (the trainer counts A = 0 groups).
    rewards = torch.tensor([0.7, 0.7, 0.7, 0.1, 0.1, 0.1, 0.3, 5.0, 2.0], dtype=F64)
    ids = torch.tensor([0, 0, 0, 1, 1, 1, 2, 3, 3])             # group 2 is a singleton
    adv = group_advantages(rewards, ids, mode=mode)
    assert torch.equal(adv[:7], torch.zeros(7, dtype=adv.dtype))
    assert torch.all(adv[7:] != 0)


def test_group_advantages_rejects_bad_mode_and_shapes():
    with pytest.raises(ValueError, match="std") as err:
        group_advantages(torch.zeros(2), torch.zeros(2), mode="rank")
    assert "mean" in str(err.value) and "rank" in str(err.value)
    with pytest.raises(ValueError, match="group_ids"):
        group_advantages(torch.zeros(3), torch.zeros(2))


# ----------------------------------------------------------------------------------------------
# naive and decoupled: the trust region around π_prox; decoupled also weights by sg(π_prox / π_b)
# ----------------------------------------------------------------------------------------------

def with_proximal(inp: LossInputs, prox_log_ratio) -> LossInputs:
    """`inp` with logp_proximal = logp − μ, so that π_θ/π_prox = exp(μ)."""
    mu = torch.tensor(prox_log_ratio, dtype=F64)
    return LossInputs(inp.logp, inp.logp_behavior, inp.advantages, inp.mask, inp.group_ids, inp.logp.detach() - mu)


def test_naive_ignores_the_behavior_policy():
    # One update per batch (no logp_proximal): ρ' = 1, so ℓ = −A whatever λ is; grad −A/N.
    # A = [1, −2], N = 4 tokens: loss = (−1 −1 +2 +2)/4 = 0.5; grad rows [−0.25, −0.25], [0.5, 0.5].
    out, grad = run("naive", batch([[3.0, -3.0], [2.0, 0.5]], [1.0, -2.0]), eps=0.2)
    close(out.loss, 0.5)
    close(grad, [[-0.25, -0.25], [0.5, 0.5]])
    # With π_prox given: μ = λ' = [[ln 1.5, ln .5], [ln 1.5, ln .5]], ε = 0.2 → the grpo case above, A = [1, −1]:
    # (0,0) A=+1 ρ'=1.5 clipped at 1.2 → −1.2, grad 0; (0,1) ρ'=.5 → −.5, grad −.5/4; (1,0) A=−1 ρ'=1.5 → 1.5,
    # grad 1.5/4; (1,1) ρ'=.5 → max(.5, .8) = .8, grad 0. loss = (−1.2 − .5 + 1.5 + .8)/4 = 0.15.
    inp = with_proximal(batch([[9.0, 9.0], [9.0, 9.0]], [1.0, -1.0]), GRPO_LAM)
    out, grad = run("naive", inp, eps=0.2)
    close(out.loss, 0.15)
    close(grad, [[0.0, -0.125], [0.375, 0.0]])
    close(out.metrics["naive/clip_frac"], 0.5)


def test_decoupled_weights_by_the_behavior_ratio():
    # logp = −1 everywhere; π_prox given with μ = logp − logp_prox; λ = logp − logp_behavior, so the behavior
    # weight is w = π_prox/π_b = exp(λ − μ). Row 0: A = 1, μ = [0, ln 1.5], λ = [ln 2, ln 3]:
    #   (0,0) ρ' = 1, w = 2: ℓ = −2, grad −2·1/4 = −0.5; (0,1) ρ' = 1.5 > 1.2 clipped: ℓ = −1.2·2 = −2.4, grad 0.
    # Row 1: A = −1, μ = [ln .5, 0], λ = [0, ln .25]:
    #   (1,0) ρ' = .5 < .8: max(.5, .8) = .8 clipped, w = 2: ℓ = 1.6, grad 0; (1,1) ρ' = 1, w = .25: ℓ = .25,
    #   grad +.25/4 = 0.0625.
    # loss = (−2 − 2.4 + 1.6 + .25)/4 = −0.6375
    lam = [[math.log(2.0), math.log(3.0)], [0.0, math.log(0.25)]]
    mu = [[0.0, math.log(1.5)], [math.log(0.5), 0.0]]
    out, grad = run("decoupled", with_proximal(batch(lam, [1.0, -1.0]), mu), eps=0.2)
    close(out.loss, -0.6375)
    close(grad, [[-0.5, 0.0], [0.0, 0.0625]])
    # weights: (2 + 2 + 2 + .25)/4 = 1.5625; clipped 2 of 4 tokens
    close([out.metrics["decoupled/behavior_weight_mean"], out.metrics["decoupled/clip_frac"]], [1.5625, 0.5])
    # behavior_weight_cap = 1.9 drops the three tokens with w = 2: loss = .25/4, grad only (1,1)
    out, grad = run("decoupled", with_proximal(batch(lam, [1.0, -1.0]), mu), eps=0.2, behavior_weight_cap=1.9)
    close(out.loss, 0.0625)
    close(grad, [[0.0, 0.0], [0.0, 0.0625]])
    close(out.metrics["decoupled/dropped_frac"], 0.75)


def test_decoupled_dual_clip_and_on_policy_limit():
    # dual clip c = 3, A = −1 on row 1: (1,0) ρ' = 5 (μ = ln 5), w = 1 (λ = μ): PPO ℓ = max(5, 1.2) = 5, dual
    # min(5, 3) = 3, grad 0. (1,1) ρ' = 1: ℓ = 1, grad 1/4. Row 0 A = 1, ρ' = 1, w = 1: ℓ = −1 each, grad −1/4.
    # loss = (−1 −1 + 3 + 1)/4 = 0.5
    lam = mu = [[0.0, 0.0], [math.log(5.0), 0.0]]
    out, grad = run("decoupled", with_proximal(batch(lam, [1.0, -1.0]), mu), eps=0.2, dual_clip=3.0)
    close(out.loss, 0.5)
    close(grad, [[-0.25, -0.25], [0.0, 0.25]])
    # No logp_proximal and λ = 0: decoupled, naive and grpo are all −A ∇log π.
    for name in ("naive", "decoupled", "grpo"):
        _, grad = run(name, batch([[0.0, 0.0], [0.0, 0.0]], [1.0, -2.0]), eps=0.2)
        close(grad, [[-0.25, -0.25], [0.5, 0.5]])
