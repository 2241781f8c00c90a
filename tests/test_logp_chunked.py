"""The chunked log-probs (harness/rollout/logp.py) against the full-vocabulary path, and when each is used."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from harness.bases.models import char_tokenizer
from harness.config.dicts import to_dict
from harness.config.expand import load_suite_trials
from harness.config.run import ConfigError, build_run_config
from harness.rollout import TokenLogp, token_logp, token_logp_of
from harness.rollout.hf import HFEngine
from harness.rollout.logp import AUTO_CHUNK_TOKENS, Head, chunk_tokens, chunked_token_logp
from harness.store import trialdir
from harness.store.archive import committed_results
from harness.tasks.synthetic import ADDREV_VOCAB

PROMPTS = ["1+2=", "123+456=", "9=", "45+6="]
REPO = Path(__file__).resolve().parents[1]
RTOL = 1e-6      # float32, relative to the largest magnitude of each compared tensor (see close())


def close(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a − b| / max |b|: the float32 rounding of a sum split into other blocks stays near 1e-7 of it."""
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def test_the_chunk_rule_keeps_the_full_path_for_small_vocabularies():
    assert chunk_tokens(0, 14) == 0                          # the tiny bases: today's arithmetic, bit for bit
    assert chunk_tokens(0, 32_767) == 0
    assert chunk_tokens(0, 32_768) == AUTO_CHUNK_TOKENS == 1024
    assert chunk_tokens(0, 151_936) == 1024                  # Qwen3
    assert chunk_tokens(-1, 151_936) == 0                    # full logits asked for
    assert chunk_tokens(7, 14) == 7                          # a chunk asked for, any vocabulary


@pytest.mark.parametrize("chunk", [1, 5, 64, 1000])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_equals_full_values_and_gradients(chunk, temperature):
    """On random hidden states and head (N = 37 tokens, C = 16, V = 50) with a random upstream gradient: the
    full path's log_softmax(h·Wᵀ/τ) gathered, its entropy, and autograd's gradients of Σ w·log π to h and W."""
    torch.manual_seed(1)
    h = torch.randn(1, 37, 16, requires_grad=True)
    W = torch.randn(50, 16, requires_grad=True)
    y = torch.randint(0, 50, (1, 37))
    w = torch.randn(1, 37)
    logprobs = torch.log_softmax((h @ W.T).float() / temperature, -1)
    full = logprobs.gather(2, y[..., None]).squeeze(2)
    full_ent = -(logprobs.exp() * logprobs).sum(-1)
    gh, gW = torch.autograd.grad((w * full).sum(), (h, W))
    logp, ent = chunked_token_logp(Head(h, W), y, temperature, chunk)
    ch, cW = torch.autograd.grad((w * logp).sum(), (h, W))
    assert not ent.requires_grad
    for a, b in ((logp, full), (ent, full_ent), (ch, gh), (cW, gW)):
        assert close(a.detach(), b.detach()) < RTOL


def test_chunked_gradient_by_hand():
    """One token, C = 1, V = 2, τ = 1: z = (h·w0, h·w1) = (2, 0) with h = 1, W = [[2], [0]], target 0.
    log π = 2 − log(e² + 1) = −0.126928; d log π/dz = (1 − p0, −p1) with p1 = 1/(e² + 1) = 0.119203, so
    d/dh = (1 − p0)·2 + (−p1)·0 = 2·0.119203 = 0.238406 and d/dW = ((1 − p0)·h, −p1·h) = (0.119203, −0.119203)."""
    h = torch.tensor([[[1.0]]], requires_grad=True)
    W = torch.tensor([[2.0], [0.0]], requires_grad=True)
    logp, ent = chunked_token_logp(Head(h, W), torch.tensor([[0]]), 1.0, 1)
    logp.sum().backward()
    assert abs(float(logp.detach()) - (-0.126928)) < 1e-6
    assert abs(float(ent) - 0.365334) < 1e-6      # −(p0 log p0 + p1 log p1) = 0.880797·0.126928 + 0.119203·2.126928
    assert abs(float(h.grad) - 0.238406) < 1e-6
    assert torch.allclose(W.grad, torch.tensor([[0.119203], [-0.119203]]), atol=1e-6)


def qwen3(vocab: int = 64, tied: bool = False) -> tuple[Qwen3ForCausalLM, object]:
    """A random Qwen3 built here (no hub): grouped kv heads, the char tokenizer's ids inside a larger vocabulary."""
    tok = char_tokenizer(ADDREV_VOCAB + [f"<x{i}>" for i in range(vocab - len(ADDREV_VOCAB) - 2)])
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=8, intermediate_size=64, max_position_embeddings=64,
                         tie_word_embeddings=tied, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    return Qwen3ForCausalLM(config).eval(), tok


@pytest.mark.parametrize("forward", ["hf", "lean", "lean3"])
@pytest.mark.parametrize("tied", [False, True])
def test_every_forward_chunked_equals_full(forward, tied):
    """Each forward's hidden states through the chunked head give its own full path's log-probs, entropy and
    parameter gradients, with the prompt shared over a group (group 2) and without (rows 1..3)."""
    model, tok = qwen3(tied=tied)
    r = HFEngine(model, tok).generate(PROMPTS, n=2, temperature=1.0, max_new_tokens=7, seed=3)
    mask = r.response_mask
    full, chunked = token_logp_of(forward, -1), token_logp_of(forward, 3)
    params = [p for p in model.parameters()]
    for rows, group in ((slice(None), 2), (slice(1, 4), 1)):
        m = mask[rows]
        a, a_ent = full(model, r, rows, 0.7, group)
        b, b_ent = chunked(model, r, rows, 0.7, group)
        assert close(b.detach()[m], a.detach()[m]) < RTOL and close(b_ent[m], a_ent[m]) < RTOL
        ga = torch.autograd.grad(a[m].sum(), params, allow_unused=True)
        gb = torch.autograd.grad(b[m].sum(), params, allow_unused=True)
        for x, y in zip(gb, ga):
            assert (x is None) == (y is None) and (x is None or close(x, y) < RTOL)


def test_the_default_keeps_todays_arithmetic_on_a_small_vocabulary():
    model, tok = qwen3()
    r = HFEngine(model, tok).generate(PROMPTS, n=2, temperature=1.0, max_new_tokens=7, seed=3)
    for forward in ("hf", "lean"):
        auto = token_logp_of(forward)(model, r, slice(None), 1.0, 2)
        today = token_logp(model, r, slice(None), 1.0, 2, token_logp_of(forward).forward.response_logits)
        assert torch.equal(auto[0], today[0]) and torch.equal(auto[1], today[1])


def test_a_head_that_is_not_a_plain_matmul_is_refused_in_one_line():
    model, tok = qwen3()
    r = HFEngine(model, tok).generate(PROMPTS, n=2, temperature=1.0, max_new_tokens=3, seed=3)
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="final_logit_softcapping; set model.logp_chunk_tokens: -1"):
        token_logp_of("hf", 4)(model, r, slice(None), 1.0, 2)


def test_the_settings_are_left_out_of_a_config_at_their_defaults():
    assert {"logp_chunk_tokens", "gradient_checkpointing"}.isdisjoint(to_dict(build_run_config({}))["model"])
    on = build_run_config({"model": {"logp_chunk_tokens": 512, "gradient_checkpointing": True}}).model
    assert (on.logp_chunk_tokens, on.gradient_checkpointing) == (512, True)
    with pytest.raises(ConfigError, match="model.logp_chunk_tokens: tokens per chunk"):
        build_run_config({"model": {"logp_chunk_tokens": -2}})
    with pytest.raises(ConfigError, match="model.gradient_checkpointing: .* set forward: hf"):
        build_run_config({"model": {"forward": "lean", "gradient_checkpointing": True}})


@pytest.mark.parametrize("report", ["reference", "reference-v2", "reference-v3"])
def test_committed_trials_resolve_and_hash_as_before(report):
    """Every committed reference trial's config.yaml hashes as its suite resolves it now, under the same trial id:
    model.logp_chunk_tokens and model.gradient_checkpointing are left out while at their defaults, and at the
    default (auto) the tiny bases' 14-token vocabulary keeps the full-logits arithmetic (chunk_tokens(0, 14) = 0)."""
    with committed_results(REPO / "reports" / report) as committed:
        _, trials = load_suite_trials(committed / trialdir.SUITE_FILE, stored=True)
        finished = [t for t in trials if (committed / t.trial_id / trialdir.CONFIG).is_file()]
        assert len(finished) >= 80               # reference-v3 holds 80, the others more
        for t in finished:
            stored = trialdir.read_config(committed / t.trial_id)
            assert trialdir.config_sha256(stored) == trialdir.config_sha256(to_dict(t.config)), t.trial_id
            assert {"logp_chunk_tokens", "gradient_checkpointing"}.isdisjoint(stored["model"])
            assert t.config.model.kind == "tiny" and t.config.model.logp_chunk_tokens == 0
