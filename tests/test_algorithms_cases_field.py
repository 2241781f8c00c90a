"""Hand-computed cases for the estimators read from their authors' code: m2po (official), tic_grpo (published
form) and the field's corrections (cispo, tis/tis_seq, mis/mis_seq, icepop, opsm, dppo, sapo, geo_mean, vespo,
luspo).

As in test_algorithms_cases.py: every expected number is derived in the comments from the formula in the
estimator's docstring, on tiny float64 inputs; gradients are w.r.t. logp; token-mean over N valid tokens.
The rollout-correction family reads π_prox (None: π_θ detached, one update per batch) and π_rollout
(None: π_b); `inputs` sets the three log-ratios directly.
"""
from __future__ import annotations

import math

import pytest
import torch

from algorithms import LossInputs, compute_loss

F64 = torch.float64
TOL = dict(rtol=1e-6, atol=1e-6)
e, ln = math.exp, math.log


def inputs(adv, lam=None, rollout=None, prox=None, logp=None, mask=None) -> LossInputs:
    """logp (default −1); λ = logp − logp_behavior; λ_r = logp_prox − logp_rollout (rollout); μ = logp − logp_prox."""
    shape = torch.tensor(lam if lam is not None else rollout).shape
    logp = torch.full(shape, -1.0, dtype=F64) if logp is None else torch.tensor(logp, dtype=F64)
    behavior = logp - (torch.zeros(shape, dtype=F64) if lam is None else torch.tensor(lam, dtype=F64))
    logp_prox = None if prox is None else logp - torch.tensor(prox, dtype=F64)
    base = logp if logp_prox is None else logp_prox
    logp_rollout = None if rollout is None else base - torch.tensor(rollout, dtype=F64)
    mask = torch.ones(shape, dtype=torch.bool) if mask is None else torch.tensor(mask, dtype=torch.bool)
    return LossInputs(logp.clone().requires_grad_(True), behavior, torch.tensor(adv, dtype=F64), mask,
                      torch.zeros(shape[0], dtype=torch.long), logp_prox, logp_rollout)


def run(name, inp, **kwargs):
    out = compute_loss(name, inp, **kwargs)
    out.loss.backward()
    return out, inp.logp.grad


def close(actual, expected):
    torch.testing.assert_close(torch.as_tensor(actual, dtype=F64), torch.as_tensor(expected, dtype=F64), **TOL)


# ----------------------------------------------------------------------------------------------
# m2po (official): harmful-token M2 budget → PPO bounds [e^−κ, e^κ], widened to minimum widths
# ----------------------------------------------------------------------------------------------
# T = 1. λ = [0.5, 0.1, −0.3, 0.2, −0.4], A = [+1, +1, −1, −1, +1]. Harmful (A>0 ∧ ρ>1 or A<0 ∧ ρ<1): rows 0, 1, 2
# with Δ² = [0.25, 0.01, 0.09]; M2 = 0.35/3 = 0.116667 > τ = 0.04, so S = 0.04·3 = 0.12 and v = [0.01, 0.09, 0.25]:
# f_0 = 0.01 + 0.01·2 = 0.03 < S; f_1 = 0.10 + 0.09·1 = 0.19 ≥ S → k = 1, κ = sqrt(v_0 − 1e-12) ≈ 0.1.
M2PO_LAM, M2PO_ADV = [[0.5], [0.1], [-0.3], [0.2], [-0.4]], [1.0, 1.0, -1.0, -1.0, 1.0]


def test_m2po_bounds_from_the_harmful_second_moment():
    # Without widening: [e^−0.1, e^0.1] = [0.904837, 1.105171]. N = 5.
    # row 0: ρ = e^.5 > high → ℓ = −high, grad 0.  row 1: ρ = e^.1 sits on high (κ is 1e-12 short of 0.1 in Δ²) →
    # clipped, ℓ = −high, grad 0.  row 2: A<0, ρ = e^−.3 < low → ℓ = low, grad 0.
    # row 3: A<0, ρ = e^.2 → ℓ = max(e^.2, high) = e^.2, grad −Aρ/5 = e^.2/5. row 4: A>0, ρ = e^−.4 < low: PPO keeps
    # the unclipped −ρ (pessimism), grad −e^−.4/5.
    out, grad = run("m2po", inputs(M2PO_ADV, M2PO_LAM), min_eps_low=None, min_eps_high=None)
    high, low = e(0.1), e(-0.1)
    close(out.loss, (-high - high + low + e(0.2) - e(-0.4)) / 5)
    close(grad, [[0.0], [0.0], [0.0], [e(0.2) / 5], [-e(-0.4) / 5]])
    close([out.metrics["m2po/m2_harmful"], out.metrics["m2po/clip_low"], out.metrics["m2po/clip_high"]],
          [0.35 / 3, low, high])
    close(out.metrics["m2po/harmful_frac"], 3 / 5)


def test_m2po_minimum_widths_and_the_unconstrained_case():
    # Widened (defaults 0.3 / 0.5): ε_low = max(1 − e^−.1, 0.3) = 0.3, ε_high = max(e^.1 − 1, 0.5) = 0.5 → [0.7, 1.5].
    # row 0: ρ = e^.5 = 1.6487 > 1.5 → −1.5, grad 0; row 1 inside: −e^.1, grad −e^.1/5; row 2: ρ = e^−.3 = 0.7408 inside:
    # ℓ = e^−.3, grad +e^−.3/5; row 3: e^.2, grad e^.2/5; row 4: −e^−.4, grad −e^−.4/5.
    out, grad = run("m2po", inputs(M2PO_ADV, M2PO_LAM))
    close(out.loss, (-1.5 - e(0.1) + e(-0.3) + e(0.2) - e(-0.4)) / 5)
    close(grad, [[0.0], [-e(0.1) / 5], [e(-0.3) / 5], [e(0.2) / 5], [-e(-0.4) / 5]])
    close([out.metrics["m2po/clip_low"], out.metrics["m2po/clip_high"]], [0.7, 1.5])
    # τ = 0.2 ≥ M2: no constraint (the code's bounds [0, 1e5]); every token has grad −Aρ/5.
    out, grad = run("m2po", inputs(M2PO_ADV, M2PO_LAM), tau=0.2)
    close(grad, [[-e(0.5) / 5], [-e(0.1) / 5], [e(-0.3) / 5], [e(0.2) / 5], [-e(-0.4) / 5]])
    close([out.metrics["m2po/clip_low"], out.metrics["m2po/clip_high"]], [0.0, 1e5])
    with pytest.raises(ValueError, match="tau"):
        compute_loss("m2po", inputs(M2PO_ADV, M2PO_LAM), tau=0.0)


# ----------------------------------------------------------------------------------------------
# tic_grpo (published): PPO clip of the trajectory ratio r_i; gradient sg(r_i · 1[unclipped]) A ∇log π(o_i)
# ----------------------------------------------------------------------------------------------

def test_tic_grpo_clips_whole_trajectories():
    # ε = 0.2. row 0: A=+1, Λ = 0.15, r = e^.15 = 1.161834 ≤ 1.2 → w = r.  row 1: A=+1, Λ = 0.3, r = 1.3499 > 1.2 → w = 0.
    # row 2: A=−1, Λ = −0.3, r = 0.7408 < 0.8 → w = 0.  row 3: A=−1, Λ = 0.2 (one token), r = e^.2 → w = e^.2 (A<0 ∧ r>1
    # is not clipped). logp = −1, N = 7: loss = −Σ w A logp / 7 = −(2·e^.15·(−1) + e^.2·(−1)(−1))/7;
    # grad −w A / 7: row 0 −e^.15/7 per token, row 3 +e^.2/7.
    inp = inputs([1.0, 1.0, -1.0, -1.0], [[0.1, 0.05], [0.3, 0.0], [-0.4, 0.1], [0.2, 0.0]],
                 mask=[[1, 1], [1, 1], [1, 1], [1, 0]])
    out, grad = run("tic_grpo", inp, eps=0.2)
    close(out.loss, -(-2 * e(0.15) + e(0.2)) / 7)
    close(grad, [[-e(0.15) / 7, -e(0.15) / 7], [0.0, 0.0], [0.0, 0.0], [e(0.2) / 7, 0.0]])
    close([out.metrics["tic/clip_frac"], out.metrics["tic/weight_mean"]], [0.5, (e(0.15) + e(0.2)) / 4])
    # ε_high = 0.4: row 1 (r = 1.35 ≤ 1.4) is kept too: its grad is −e^.3/7 per token.
    _, grad = run("tic_grpo", inputs([1.0, 1.0, -1.0, -1.0], [[0.1, 0.05], [0.3, 0.0], [-0.4, 0.1], [0.2, 0.0]],
                                     mask=[[1, 1], [1, 1], [1, 1], [1, 0]]), eps=0.2, eps_high=0.4)
    close(grad[1], [-e(0.3) / 7, -e(0.3) / 7])


# ----------------------------------------------------------------------------------------------
# cispo: ℓ = −sg(clip(ρ, 1 − ε_low, 1 + ε_high)) A logp
# ----------------------------------------------------------------------------------------------

def test_cispo_clips_the_weight_not_the_gradient():
    # ρ = [[1.5, 0.5], [1.5, 0.5]], A = [1, −1], ε = 0.2 → w = [[1.2, 0.8], [1.2, 0.8]]; logp = [[−1, −2], [−0.5, −3]].
    # loss = −(1.2·1·(−1) + 0.8·1·(−2) + 1.2·(−1)(−0.5) + 0.8·(−1)(−3))/4 = −(−1.2 − 1.6 + 0.6 + 2.4)/4 = −0.05
    # grad = −w A / 4 = [[−0.3, −0.2], [0.3, 0.2]]: every token keeps a gradient (trust region "none").
    lam = [[ln(1.5), ln(0.5)], [ln(1.5), ln(0.5)]]
    out, grad = run("cispo", inputs([1.0, -1.0], lam, logp=[[-1.0, -2.0], [-0.5, -3.0]]), eps=0.2)
    close(out.loss, -0.05)
    close(grad, [[-0.3, -0.2], [0.3, 0.2]])
    close(out.metrics["cispo/clip_frac"], 1.0)
    # ε_low = 1 (the paper's "no lower clip"): (0,1), (1,1) keep w = 0.5 → grad (0,1) −0.125, (1,1) +0.125.
    _, grad = run("cispo", inputs([1.0, -1.0], lam, logp=[[-1.0, -2.0], [-0.5, -3.0]]), eps=0.2, eps_low=1.0)
    close(grad, [[-0.3, -0.125], [0.3, 0.125]])


# ----------------------------------------------------------------------------------------------
# Rollout corrections: ℓ = sg(w) · PPO-clip(π_θ/π_prox), w from λ_r = log(π_prox/π_rollout)
# One update per batch (no logp_proximal): π_θ/π_prox = 1, so ℓ = −w A and ∂ℓ/∂logp = −w A.
# ----------------------------------------------------------------------------------------------

def test_tis_reads_the_rollout_policy_not_the_behavior_policy():
    # λ_r = [[ln 3, ln .5], [ln 1.5, 0]], A = [1, −2], C = 2 → w = [[2, .5], [1.5, 1]].
    # loss = (−2 − .5 + 3 + 2)/4 = 0.625; grad −w A / 4 = [[−.5, −.125], [.75, .5]]. The behavior log-probs (λ = 9
    # everywhere, wildly stale) are not read once π_rollout is given.
    rollout = [[ln(3.0), ln(0.5)], [ln(1.5), 0.0]]
    out, grad = run("tis", inputs([1.0, -2.0], lam=[[9.0, 9.0], [9.0, 9.0]], rollout=rollout))
    close(out.loss, 0.625)
    close(grad, [[-0.5, -0.125], [0.75, 0.5]])
    close(out.metrics["tis/truncated_frac"], 0.25)


def test_tis_with_several_updates_clips_against_the_proximal_policy():
    # Row of two tokens, A = +1, ε = 0.2. (0,0): μ = ln 1.5 (π_θ/π_prox = 1.5 > 1.2, clipped), λ_r = ln 3 → w = 2:
    # ℓ = 2·(−1.2) = −2.4, grad 0. (0,1): μ = 0, λ_r = ln .5 → w = .5: ℓ = −.5, grad −.5/2 = −.25.
    # loss = (−2.4 − .5)/2 = −1.45
    out, grad = run("tis", inputs([1.0], rollout=[[ln(3.0), ln(0.5)]], prox=[[ln(1.5), 0.0]]), eps=0.2)
    close(out.loss, -1.45)
    close(grad, [[0.0, -0.25]])


def test_tis_seq_truncates_the_sequence_weight():
    # row 0: A = 1, λ_r = [.5, .4], Σ = .9, e^.9 = 2.4596 > C = 2 → w = 2; row 1: A = −1, Σ = −.3 → w = e^−.3.
    # loss = (−2·2 + e^−.3·2)/4; grad row 0 −2/4 each, row 1 +e^−.3/4 each; truncated 1 of 2 responses.
    out, grad = run("tis_seq", inputs([1.0, -1.0], rollout=[[0.5, 0.4], [0.2, -0.5]]))
    close(out.loss, (-4 + 2 * e(-0.3)) / 4)
    close(grad, [[-0.5, -0.5], [e(-0.3) / 4, e(-0.3) / 4]])
    close(out.metrics["tis/truncated_frac"], 0.5)


def test_mis_masks_tokens_outside_the_bounds():
    # λ_r = [[ln 3, ln .5], [ln 1.5, 0]], A = [1, −2], C = 2: (0,0) w = 3 > 2 → 0; others kept: w = [[0, .5], [1.5, 1]].
    # loss = (0 − .5 + 3 + 2)/4 = 1.125; grad −w A / 4 = [[0, −.125], [.75, .5]]; masked 1/4.
    rollout = [[ln(3.0), ln(0.5)], [ln(1.5), 0.0]]
    out, grad = run("mis", inputs([1.0, -2.0], rollout=rollout))
    close(out.loss, 1.125)
    close(grad, [[0.0, -0.125], [0.75, 0.5]])
    close(out.metrics["mis/masked_frac"], 0.25)
    # cap_low = 0.6 masks (0,1) too: loss (3 + 2)/4 = 1.25.
    out, grad = run("mis", inputs([1.0, -2.0], rollout=rollout), cap_low=0.6)
    close(out.loss, 1.25)
    close(grad, [[0.0, 0.0], [0.75, 0.5]])
    with pytest.raises(ValueError, match="cap_low"):
        compute_loss("mis", inputs([1.0, -2.0], rollout=rollout), cap_low=3.0)


def test_mis_seq_masks_whole_responses():
    # As tis_seq: row 0 weight e^.9 > 2 → 0 (masked), row 1 e^−.3 kept. loss = 2 e^−.3 / 4, grad row 1 e^−.3/4.
    out, grad = run("mis_seq", inputs([1.0, -1.0], rollout=[[0.5, 0.4], [0.2, -0.5]]))
    close(out.loss, 2 * e(-0.3) / 4)
    close(grad, [[0.0, 0.0], [e(-0.3) / 4, e(-0.3) / 4]])
    close(out.metrics["mis/masked_frac"], 0.5)


def test_icepop_filters_outside_half_to_five():
    # λ_r = [[ln 6, ln .4], [ln 1.5, 0]], A = [1, −2]: 6 > 5 and .4 < .5 are zeroed; w = [[0, 0], [1.5, 1]].
    # loss = (3 + 2)/4 = 1.25; grad [[0, 0], [.75, .5]]; masked 2/4.
    out, grad = run("icepop", inputs([1.0, -2.0], rollout=[[ln(6.0), ln(0.4)], [ln(1.5), 0.0]]))
    close(out.loss, 1.25)
    close(grad, [[0.0, 0.0], [0.75, 0.5]])
    close(out.metrics["icepop/masked_frac"], 0.5)


# ----------------------------------------------------------------------------------------------
# opsm: keep a response if A ≥ 0 or mean_t(log π_rollout − log π_θ) ≤ δ; PPO clip against π_prox
# ----------------------------------------------------------------------------------------------

def test_opsm_drops_drifted_negative_responses():
    # λ_r = logp − logp_rollout, so the drift is D = mean(−λ_r). δ = 0.5.
    # row 0: A = −1, D = mean(.8, .6) = .7 > δ → dropped. row 1: A = −1, D = .3 → kept. row 2: A = +2, D = 1 → kept (A ≥ 0).
    # One update: ℓ = −A·M per token, N = 6: loss = (0 + 1·2 − 2·2)/6 = −1/3; grad row 1 +1/6, row 2 −2/6.
    out, grad = run("opsm", inputs([-1.0, -1.0, 2.0], rollout=[[-0.8, -0.6], [-0.2, -0.4], [-1.0, -1.0]]))
    close(out.loss, -1 / 3)
    close(grad, [[0.0, 0.0], [1 / 6, 1 / 6], [-1 / 3, -1 / 3]])
    close([out.metrics["opsm/masked_frac"], out.metrics["opsm/drift_mean"]], [1 / 3, 2 / 3])
    # δ = 0.8: row 0 is kept as well: loss = (2 + 2 − 4)/6 = 0.
    out, _ = run("opsm", inputs([-1.0, -1.0, 2.0], rollout=[[-0.8, -0.6], [-0.2, -0.4], [-1.0, -1.0]]), threshold=0.8)
    close(out.loss, 0.0)


# ----------------------------------------------------------------------------------------------
# dppo (prime-rl default): mask on Δp = π_θ − π_rollout by the sign of A; ℓ = −keep A ρ + κ (log ρ)²
# ----------------------------------------------------------------------------------------------

def test_dppo_masks_on_the_probability_difference():
    # T = 1; p_θ, p_r: row 0 (A=+1) .6, .3: Δp = .3 > .2 masked, ρ = 2; row 1 (A=+1) .5, .4: kept, ρ = 1.25;
    # row 2 (A=−1) .2, .5: Δp = −.3 < −.2 masked, ρ = .4; row 3 (A=−1) .45, .5: kept, ρ = .9. κ = 0.1, N = 4.
    # ℓ: row 0 κ ln²2; row 1 −1.25 + κ ln²1.25; row 2 κ ln².4; row 3 +.9 + κ ln².9.
    # ∂ℓ/∂logp = −keep A ρ + 2κ ln ρ, /4.
    p, q = [0.6, 0.5, 0.2, 0.45], [0.3, 0.4, 0.5, 0.5]
    logp = [[ln(x)] for x in p]
    rollout = [[ln(x) - ln(y)] for x, y in zip(p, q)]
    out, grad = run("dppo", inputs([1.0, 1.0, -1.0, -1.0], rollout=rollout, logp=logp), kl_tau=0.1)
    rho = [x / y for x, y in zip(p, q)]
    keep, adv = [0, 1, 0, 1], [1, 1, -1, -1]
    close(out.loss, sum(-k * a * r + 0.1 * ln(r) ** 2 for k, a, r in zip(keep, adv, rho)) / 4)
    close(grad, [[(-k * a * r + 0.2 * ln(r)) / 4] for k, a, r in zip(keep, adv, rho)])
    close([out.metrics["dppo/masked_frac"], out.metrics["dppo/masked_high_frac"]], [0.5, 0.25])


# ----------------------------------------------------------------------------------------------
# sapo: f(ρ) = σ(τ(ρ − 1)) · 4/τ, τ = τ_pos (A > 0) or τ_neg; ℓ = −f(ρ) A
# ----------------------------------------------------------------------------------------------

def test_sapo_soft_gate():
    # row 0: A = +1, ρ = 1.5, τ = 1: f = 4σ(.5); ∂ℓ/∂logp = −A f′(ρ) ρ = −4σ(.5)(1 − σ(.5))·1.5.
    # row 1: A = −1, ρ = .5, τ = 1.05: f = σ(−.525)·4/1.05; ∂ℓ/∂logp = +4σ(−.525)(1 − σ(−.525))·.5. N = 2.
    sig = lambda x: 1 / (1 + e(-x))                                    # noqa: E731
    out, grad = run("sapo", inputs([1.0, -1.0], [[ln(1.5)], [ln(0.5)]]))
    close(out.loss, (-4 * sig(0.5) + sig(-0.525) * 4 / 1.05) / 2)
    close(grad, [[-4 * sig(0.5) * (1 - sig(0.5)) * 1.5 / 2], [4 * sig(-0.525) * (1 - sig(-0.525)) * 0.5 / 2]])


# ----------------------------------------------------------------------------------------------
# geo_mean (GMPO, verl): λ̃ = s·min(sλ, s·clamp(λ, −ε, ε)), g_i = exp(mean_t λ̃), ℓ_i = −A_i g_i broadcast
# ----------------------------------------------------------------------------------------------

def test_geo_mean_clips_tokens_in_log_space():
    # ε = 0.2. row 0: A = +1, λ = [.3, −.1] → λ̃ = [.2 (clipped, constant), −.1], g = e^.05.
    # row 1: A = −1, λ = [−.5, .1] → s = −1: min(.5, .2) = .2, min(−.1, −.1) → λ̃ = [−.2 (clipped), .1], g = e^−.05.
    # token-mean of the broadcast loss, N = 4: loss = (2·(−e^.05) + 2·e^−.05)/4.
    # Only the unclipped tokens carry gradient: ∂/∂logp = |o|·(−A)·g·(1/|o|)/N = −A g / 4.
    out, grad = run("geo_mean", inputs([1.0, -1.0], [[0.3, -0.1], [-0.5, 0.1]]), eps=0.2)
    close(out.loss, (-2 * e(0.05) + 2 * e(-0.05)) / 4)
    close(grad, [[0.0, -e(0.05) / 4], [0.0, e(-0.05) / 4]])
    close(out.metrics["geo_mean/clip_frac"], 0.5)
    # seq-mean-token-mean is verl's exact loss, the mean over responses: (−e^.05 + e^−.05)/2.
    out, _ = run("geo_mean", inputs([1.0, -1.0], [[0.3, -0.1], [-0.5, 0.1]]), eps=0.2, aggregation="seq-mean-token-mean")
    close(out.loss, (-e(0.05) + e(-0.05)) / 2)


# ----------------------------------------------------------------------------------------------
# vespo (TRL get_gamma_weights): L_i = Σ_t m clamp(λ, ±20) [+ Σ_t m log c], w = exp(clamp(L, log 1e-8, 20)),
# φ = exp(λ_A + k_A log w − λ_A w) detached, (k, λ) = (2, 3) if A ≥ 0 else (3, 2); ℓ = −φ A logp
# ----------------------------------------------------------------------------------------------

def trl_phi(log_w_tokens, adv, k_pos=2.0, lambda_pos=3.0, k_neg=3.0, lambda_neg=2.0):
    """TRL's get_gamma_weights for one response, line by line in plain Python (no rollout term):
    the per-token clamp to ±20, the sum, the clamp to [log 1e-8, 20], then the kernel in log space."""
    seq = sum(min(max(x, -20.0), 20.0) for x in log_w_tokens)
    log_w = min(max(seq, ln(1e-8)), 20.0)
    k, lam = (k_pos, lambda_pos) if adv >= 0 else (k_neg, lambda_neg)
    lam = max(lam, 1e-4)
    log_phi = lam + k * log_w - lam * e(log_w)
    return e(log_phi) if log_phi > -745 else 0.0                  # exp underflows to 0 like torch's


def test_vespo_gamma_kernel_by_hand():
    # row 0: A = +1, λ = [.2, .1] → w = e^.3, φ0 = exp(3 + 2·.3 − 3e^.3)            (= 0.6379: w > 2/3, past the peak)
    # row 1: A = −.5, λ = [.3, −.6] → w = e^−.3, φ1 = exp(2 + 3·(−.3) − 2e^−.3)     (= 0.6827: below the peak at 3/2)
    # row 2: A = +2, one valid token λ = .4 (the padded λ = 9 must not count) → φ2 = exp(3 + .8 − 3e^.4)
    # logp = −1, N = 5 tokens: loss = Σ −φ A logp / 5 = (2φ0 − .5·2φ1 + 2φ2)/5; grad −φ A / 5 per valid token.
    p0, p1, p2 = e(3 + 0.6 - 3 * e(0.3)), e(2 - 0.9 - 2 * e(-0.3)), e(3 + 0.8 - 3 * e(0.4))
    inp = inputs([1.0, -0.5, 2.0], [[0.2, 0.1], [0.3, -0.6], [0.4, 9.0]], mask=[[1, 1], [1, 1], [1, 0]])
    out, grad = run("vespo", inp)
    close([p0, p1, p2], [trl_phi([0.2, 0.1], 1.0), trl_phi([0.3, -0.6], -0.5), trl_phi([0.4], 2.0)])
    close(out.loss, (2 * p0 - 0.5 * 2 * p1 + 2 * p2) / 5)
    close(grad, [[-p0 / 5, -p0 / 5], [0.5 * p1 / 5, 0.5 * p1 / 5], [-2 * p2 / 5, 0.0]])
    # φ is detached: the gradient is φ-weighted REINFORCE, descent raises logp where A > 0 and lowers it where A < 0.
    assert (grad[0] < 0).all() and (grad[1] > 0).all() and grad[2, 0] < 0
    close(out.metrics["vespo/phi_seq_mean"], (p0 + p1 + p2) / 3)
    # Own hyper-parameters: k_pos = 1, λ_pos = 1 → φ0 = exp(1 + .3 − e^.3); the suite's ε changes nothing.
    _, grad = run("vespo", inputs([1.0], [[0.2, 0.1]]), k_pos=1.0, lambda_pos=1.0, eps=0.05)
    close(grad, [[-e(1.3 - e(0.3)) / 2] * 2])


def test_vespo_clamps_as_trl_does():
    # TRL clamps each token's log-ratio to ±20, then the sum to [log 1e-8, 20]. A = −1 → (k, λ) = (3, 2).
    # row 0: λ = [25, −15] → 20 − 15 = 5 (unclamped it would be 10, φ = 0): φ = exp(2 + 15 − 2e^5) ≈ 3.0e−122.
    # row 1: λ = [−25, −25] → −40 → log 1e-8: φ = exp(2 + 3 log 1e-8 − 2e-8) = e^2 · 1e−24 · e^(−2e-8).
    # row 2: λ = [15, 10] → 25 → 20: φ = exp(2 + 60 − 2e^20) = 0 (no NaN). logp = −1, N = 6: grad +φ/6 per token.
    lam = [[25.0, -15.0], [-25.0, -25.0], [15.0, 10.0]]
    out, grad = run("vespo", inputs([-1.0, -1.0, -1.0], lam))
    p0, p1 = e(2 + 15 - 2 * e(5)), e(2 + 3 * ln(1e-8) - 2e-8)
    torch.testing.assert_close(grad[:2, 0], torch.tensor([p0 / 6, p1 / 6], dtype=F64), rtol=1e-9, atol=0.0)
    assert p0 > 1e-130 and grad[2].abs().max() == 0.0 and torch.isfinite(grad).all()
    close([p0, p1, 0.0], [trl_phi(r, -1.0) for r in lam])
    close(out.metrics["vespo/log_w_mean"], (5 + ln(1e-8) + 20) / 3)


def test_vespo_folds_the_rollout_correction_into_the_sequence_weight():
    # π_θ = π_b (λ = 0) and c = π_b/π_rollout = [e^.5, 5] on one response, A = +1, logp = −1, N = 2.
    # token_truncate (default, cap 3): log w = .5 + ln 3 → φ = exp(3 + 2 log w − 3w), w = 3e^.5.
    # token_mask: the 5 > 3 token's c becomes 0 → log clamped to log 1e-8: log w = .5 + log 1e-8 → tiny φ.
    # None: no rollout term, w = 1, φ = 1. The TRL lines also multiply nothing else (VESPO is excluded from the
    # separate vLLM IS multiplication): grad = −φ/2 per token.
    def grad_of(**kw):
        return run("vespo", inputs([1.0], lam=[[0.0, 0.0]], rollout=[[0.5, ln(5.0)]]), **kw)[1]
    w_t = 3 * e(0.5)
    close(grad_of(), [[-e(3 + 2 * ln(w_t) - 3 * w_t) / 2] * 2])
    log_w_m = 0.5 + ln(1e-8)
    torch.testing.assert_close(grad_of(rollout_is="token_mask")[0, 0],
                               torch.tensor(-e(3 + 2 * log_w_m - 3 * e(log_w_m)) / 2, dtype=F64), rtol=1e-9, atol=0.0)
    close(grad_of(rollout_is=None), [[-0.5, -0.5]])
    # cap 10: nothing truncated, w = 5e^.5 = π_θ/π_rollout over the response.
    w_10 = 5 * e(0.5)
    close(grad_of(cap=10.0), [[-e(3 + 2 * ln(w_10) - 3 * w_10) / 2] * 2])
    # [ours] only valid tokens count: with bounds that exclude 1 (cap 0.9) TRL's padding (c = 1 → 0.9) would add
    # log .9 per padded slot; here the one valid token gives log w = ln .9 whatever the padding.
    _, grad = run("vespo", inputs([1.0], lam=[[0.0, 0.0]], rollout=[[0.5, 0.0]], mask=[[1, 0]]), cap=0.9)
    close(grad, [[-e(3 + 2 * ln(0.9) - 3 * 0.9), 0.0]])
    for bad, match in (({"rollout_is": "sequence_mask"}, "rollout_is"), ({"cap": None}, "cap"),
                       ({"cap": 1.0, "cap_low": 2.0}, "cap_low")):
        with pytest.raises(ValueError, match=match):
            compute_loss("vespo", inputs([1.0], [[0.1]]), **bad)


def test_vespo_on_policy_is_grpo_and_off_policy_is_not():
    # On-policy (logp = logp_behavior, no mismatch) w = 1 and φ(1) = exp(λ + 0 − λ) = 1 exactly: the gradient is
    # −A ∇logp, grpo's (ρ = 1, no clip active). Stale, φ ≠ 1 and the two part.
    for lam, same in (([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], True), ([[0.3, -0.2, 0.5], [0.1, 0.4, -0.3]], False)):
        for aggregation in ("token-mean", "seq-mean-token-mean"):
            _, g_vespo = run("vespo", inputs([0.7, -1.3], lam, logp=[[-1.0, -2.0, -0.5], [-0.3, -1.5, -2.5]]),
                             aggregation=aggregation)
            _, g_grpo = run("grpo", inputs([0.7, -1.3], lam, logp=[[-1.0, -2.0, -0.5], [-0.3, -1.5, -2.5]]),
                            eps=0.2, aggregation=aggregation)
            assert torch.allclose(g_vespo, g_grpo, rtol=1e-12, atol=1e-12) is same, (lam, aggregation)


# ----------------------------------------------------------------------------------------------
# luspo (TRL, sequence level): s = exp(mean_t λ), ℓ_i = −min(min(s, δ) A, clip(s, 1 − ε, 1 + ε_high) A),
# TRL's loss (1/B) Σ_i |o_i| ℓ_i = the broadcast ℓ_i under seq-mean-token-sum-norm with K = 1
# ----------------------------------------------------------------------------------------------

def test_luspo_weights_each_response_by_its_length():
    # ε = 0.2, ε_high = 0.28. row 0: A = +1, λ = [.4, .2] → s = e^.3 = 1.3499 > 1.28: ℓ0 = −1.28, no gradient.
    # row 1: A = −1, one token λ = .1 → s = e^.1 inside: ℓ1 = −min(−s, −s) = e^.1.
    # row 2: A = +.5, λ = [.1, −.1, .3] → s = e^.1 inside: ℓ2 = −.5e^.1.
    # TRL: (2ℓ0 + 1ℓ1 + 3ℓ2)/3; ∂/∂logp_{i,t} = (1/3)·|o_i|·(−A s/|o_i|) = −A s/3 on each valid unclipped token.
    lam = [[0.4, 0.2, 0.0], [0.1, 0.0, 0.0], [0.1, -0.1, 0.3]]
    mask = [[1, 1, 0], [1, 0, 0], [1, 1, 1]]
    l0, l1, l2, s = -1.28, e(0.1), -0.5 * e(0.1), e(0.1)
    out, grad = run("luspo", inputs([1.0, -1.0, 0.5], lam, mask=mask), eps=0.2, eps_high=0.28,
                    aggregation="seq-mean-token-sum-norm", max_tokens=1)
    close(out.loss, (2 * l0 + l1 + 3 * l2) / 3)
    close(grad, [[0.0, 0.0, 0.0], [s / 3, 0.0, 0.0], [-0.5 * s / 3] * 3])
    close([out.metrics["luspo/clip_frac"], out.metrics["luspo/seq_ratio_mean"]], [1 / 3, (e(0.3) + 2 * e(0.1)) / 3])
    # token-mean: the same up to the batch factor B/Σ|o| = 3/6; seq-mean-token-mean: GSPO's mean (ℓ0 + ℓ1 + ℓ2)/3.
    out, grad = run("luspo", inputs([1.0, -1.0, 0.5], lam, mask=mask), eps=0.2, eps_high=0.28)
    close(out.loss, (2 * l0 + l1 + 3 * l2) / 6)
    close(grad, [[0.0, 0.0, 0.0], [s / 6, 0.0, 0.0], [-0.5 * s / 6] * 3])
    out, _ = run("luspo", inputs([1.0, -1.0, 0.5], lam, mask=mask), eps=0.2, eps_high=0.28,
                 aggregation="seq-mean-token-mean")
    close(out.loss, (l0 + l1 + l2) / 3)
    # eps_high None → ε (TRL): row 0 clipped at 1.2.
    out, _ = run("luspo", inputs([1.0, -1.0, 0.5], lam, mask=mask), eps=0.2,
                 aggregation="seq-mean-token-sum-norm", max_tokens=1)
    close(out.loss, (2 * -1.2 + l1 + 3 * l2) / 3)


def test_luspo_delta_caps_negative_advantage_ratios():
    # A = −1, λ = [.5, .5] → s = e^.5 = 1.6487 > 1 + ε = 1.2. Without δ: ℓ = max(s, 1.2) = s, grad ∂s/∂logp_t = s/2
    # per token, token-mean N = 2 → per token (2 copies)·(s/2)/2 = s/2. With δ = 1.5 (TRL's INTELLECT-2 cap):
    # ℓ = max(min(s, 1.5), 1.2) = 1.5, a constant: no gradient. A = +1 is unaffected (min(·, 1.2) binds first).
    s = e(0.5)
    out, grad = run("luspo", inputs([-1.0], [[0.5, 0.5]]), eps=0.2)
    close(out.loss, s)
    close(grad, [[s / 2, s / 2]])
    out, grad = run("luspo", inputs([-1.0], [[0.5, 0.5]]), eps=0.2, delta=1.5)
    close(out.loss, 1.5)
    close(grad, [[0.0, 0.0]])
    out, _ = run("luspo", inputs([1.0], [[0.5, 0.5]]), eps=0.2, delta=1.5)
    close(out.loss, -1.2)
    # δ below 1 + ε: TRL clips the uncapped s (coef_2 is computed before the cap): ℓ = max(1.1, clip(s)) = 1.2.
    out, _ = run("luspo", inputs([-1.0], [[0.5, 0.5]]), eps=0.2, delta=1.1)
    close(out.loss, 1.2)


def test_luspo_is_gspo_at_the_same_range():
    # LUSPO's per-response loss is GSPO's; at eps_low = eps_high = ε they coincide under every aggregation, and
    # differ at GSPO's own default range (3e-4, 4e-4), which this stale batch exceeds.
    lam, mask = [[0.4, 0.2, -0.1], [0.1, 0.0, 0.0], [0.05, -0.1, 0.3]], [[1, 1, 1], [1, 0, 0], [1, 1, 1]]
    for aggregation in ("token-mean", "seq-mean-token-mean"):
        _, g_luspo = run("luspo", inputs([1.0, -1.0, 0.5], lam, mask=mask), eps=0.2, aggregation=aggregation)
        _, g_gspo = run("gspo", inputs([1.0, -1.0, 0.5], lam, mask=mask), eps_low=0.2, eps_high=0.2,
                        aggregation=aggregation)
        _, g_gspo_default = run("gspo", inputs([1.0, -1.0, 0.5], lam, mask=mask), aggregation=aggregation)
        torch.testing.assert_close(g_luspo, g_gspo, rtol=1e-12, atol=1e-12)
        assert (g_luspo - g_gspo_default).abs().max() > 1e-3
