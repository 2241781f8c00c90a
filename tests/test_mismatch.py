"""Engine mismatch: truncation (hand-computed), the perturbed copy, the two recorded log-probs, and the
plain run recovered bit for bit at σ = 0 without truncation."""
from __future__ import annotations

import math

import pytest
import torch

from harness.config.run import ConfigError, build_run_config
from harness.bases.models import load_model
from harness.rollout.mismatch import MismatchEngine, perturbed_copy, truncate_logits
from harness.rollout import token_logp

from test_trainer import run, strip_perf

PROMPTS = ["1+2=", "123+456=", "9="]


def test_truncation_keeps_the_top_k_then_the_nucleus_and_renormalizes():
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    def probs(top_k, top_p):
        return torch.softmax(truncate_logits(logits, top_k, top_p), -1)[0].tolist()
    # top-p 0.75: ascending 0.05, 0.15, 0.3, 0.5 has cumulative 0.05, 0.2, 0.5, 1; those <= 1 − 0.75 go;
    # 0.5 and 0.3 stay, renormalized by S = 0.8: 0.625, 0.375
    assert probs(0, 0.75) == pytest.approx([0.625, 0.375, 0, 0], abs=1e-6)
    # top-k 3 drops 0.05: 0.5/0.95, 0.3/0.95, 0.15/0.95
    assert probs(3, 1.0) == pytest.approx([0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0], abs=1e-6)
    # top-k 2 first (0.625, 0.375), then top-p 0.5: 0.375 <= 0.5 goes, the top token keeps all the mass
    assert probs(2, 0.5) == pytest.approx([1, 0, 0, 0], abs=1e-6)
    # a tiny p still keeps the most likely token
    assert probs(0, 1e-6) == pytest.approx([1, 0, 0, 0], abs=1e-6)
    assert torch.equal(truncate_logits(logits, 0, 1.0), logits)


def test_perturbed_copy_adds_scaled_noise_and_rounds_to_bf16(tiny_model_dir):
    model, _ = load_model(tiny_model_dir)
    same = perturbed_copy(model, None, 0.0, False, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), same.parameters()))
    noisy = perturbed_copy(model, None, 0.1, False, seed=0)
    for a, b in zip(model.parameters(), noisy.parameters()):      # w' − w = σ·rms(w)·ε: its rms is ≈ σ·rms(w)
        rel = float(((b - a).pow(2).mean().sqrt() / a.pow(2).mean().sqrt()).detach())
        assert 0.05 < rel < 0.2 or a.numel() < 50, rel
    assert all(torch.equal(a, b) for a, b in zip(noisy.parameters(), perturbed_copy(model, None, 0.1, False, 0).parameters()))
    rounded = perturbed_copy(model, None, 0.0, True, seed=0)
    for a, b in zip(model.parameters(), rounded.parameters()):
        assert torch.equal(b, a.to(torch.bfloat16).float())


def engine(**kw):
    return MismatchEngine(kw.pop("tok"), **{"sigma": 0.0, "bf16": False, "top_p": 1.0, "top_k": 0, "seed": 0, **kw})


def test_the_two_log_probs_are_the_engine_copy_and_the_unperturbed_weights(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    e = engine(tok=tok, sigma=0.3)
    with e.pinned(model, 0) as pinned:
        r = pinned.generate(PROMPTS, n=4, temperature=1.0, max_new_tokens=6, seed=1)
    m = r.response_mask
    trainer = token_logp(model, r, slice(None), 1.0)[0].detach()
    engine_full = token_logp(e.engine_model, r, slice(None), 1.0)[0].detach()
    assert (trainer - r.logp_behavior)[m].abs().max() < 1e-5       # π_b: the unperturbed weights
    assert (engine_full - r.logp_rollout)[m].abs().max() < 1e-5    # π_rollout: the perturbed copy
    assert (r.logp_rollout - r.logp_behavior)[m].abs().max() > 1e-3
    assert float(r.logp_rollout[~m].abs().sum()) == 0


def test_recorded_rollout_log_probs_are_the_truncated_renormalized_ones(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    e = engine(tok=tok, top_p=0.8, top_k=5)
    with e.pinned(model, 0) as pinned:
        r = pinned.generate(PROMPTS, n=4, temperature=0.9, max_new_tokens=6, seed=2)
    m = r.response_mask
    # the same renormalization applied to a fresh full forward's logits, at the sampled tokens
    attn = torch.cat([r.prompt_mask, m.long()], 1)
    from harness.rollout.hf import position_ids_from
    T = r.response_ids.shape[1]
    logits = model(input_ids=torch.cat([r.prompt_ids, r.response_ids], 1), attention_mask=attn,
                   position_ids=position_ids_from(attn)).logits[:, -T - 1:-1].float().detach() / 0.9
    B, _, V = logits.shape
    kept = torch.log_softmax(truncate_logits(logits.reshape(-1, V), 5, 0.8), -1).reshape(B, T, V)
    expected = kept.gather(2, r.response_ids[:, :, None]).squeeze(2)
    assert torch.isfinite(expected[m]).all()                       # every sampled token was in the kept set
    assert (expected - r.logp_rollout)[m].abs().max() < 1e-5
    # log π_rollout − log π_b = −log S_t >= 0 (renormalizing raises every kept token's probability)
    assert (r.logp_rollout - r.logp_behavior)[m].min() > -1e-6
    assert (r.logp_rollout - r.logp_behavior)[m].max() > 1e-3


def test_top_k_one_is_greedy_with_log_prob_zero(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    e = engine(tok=tok, top_k=1)
    with e.pinned(model, 0) as pinned:
        r = pinned.generate(PROMPTS, n=2, temperature=1.0, max_new_tokens=5, seed=0)
    assert float(r.logp_rollout.abs().max()) == 0.0                 # log 1 on every kept token
    assert torch.equal(r.response_ids[0::2], r.response_ids[1::2])  # both samples of a prompt are the argmax
    assert math.isfinite(float(r.logp_behavior[r.response_mask].sum()))


def without_mismatch(rows):
    return [{k: v for k, v in r.items() if not k.startswith("mismatch/")} for r in strip_perf(rows)]


def test_sigma_zero_without_truncation_is_the_plain_run_bit_for_bit(learning_base, tmp_path):
    _, plain, plain_eval = run(learning_base, tmp_path, "plain", delay=1)
    _, zero, zero_eval = run(learning_base, tmp_path, "zero", delay=1, mismatch={"sigma": 0.0})
    assert sum(r["loss/value"] != 0 for r in plain) >= 2
    assert without_mismatch(zero) == without_mismatch(plain) and zero_eval == plain_eval
    assert all(r["mismatch/log_ratio_absmax"] == 0.0 and r["mismatch/kl"] == 0.0 for r in zero)
    _, noisy, _ = run(learning_base, tmp_path, "noisy", delay=1, mismatch={"sigma": 0.05, "top_p": 0.9})
    assert all(r["mismatch/log_ratio_absmax"] > 0 for r in noisy)
    assert all(r["mismatch/log_ratio_mean"] < 0 for r in noisy)     # truncation: π_rollout > π_b on its tokens


@pytest.mark.parametrize("mismatch,message", [
    ({"sigma": -1}, "mismatch.sigma: must be in [0, 10]"),
    ({"top_p": 0}, "mismatch.top_p: must be in (0, 1]"),
    ({"top_k": -1}, "mismatch.top_k: must be >= 0"),
    ({"sigma": 0.1, "noise": 1}, "mismatch.noise: unknown key; valid keys: bf16, sigma, top_k, top_p"),
])
def test_bad_mismatch_settings_are_one_line_errors(tiny_base, mismatch, message):
    with pytest.raises(ConfigError) as exc:
        build_run_config(tiny_base, {"mismatch": mismatch})
    assert message in str(exc.value)
    with pytest.raises(ConfigError, match=r"^mismatch: the mismatched engine stands in for an in-process engine \(hf\), not .vllm.; use engine hf"):
        build_run_config(tiny_base, {"mismatch": {}, "model.engine": "vllm"})
