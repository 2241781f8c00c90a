"""Gradient checkpointing (model.gradient_checkpointing): the same gradients as keeping the activations."""
from __future__ import annotations

import copy

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from harness.bases.models import char_tokenizer
from harness.config.run import build_run_config
from harness.rollout import token_logp_of
from harness.rollout.hf import HFEngine, enable_checkpointing, shares_prompt
from harness.tasks.synthetic import ADDREV_VOCAB
from harness.trial.trainer import Trainer

PROMPTS = ["1+2=", "123+456=", "9=", "45+6="]


def qwen3() -> tuple[Qwen3ForCausalLM, object]:
    """A random Qwen3 config built here (no hub): 3 layers, grouped kv heads, tied embeddings."""
    tok = char_tokenizer(ADDREV_VOCAB)
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=8, intermediate_size=64, max_position_embeddings=64,
                         tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    return Qwen3ForCausalLM(config), tok


@pytest.mark.parametrize("chunk", [-1, 3])
def test_checkpointed_gradients_equal_kept_activations(chunk):
    """The checkpointed model recomputes each layer in the backward from the same inputs with the same ops,
    so its log-probs and parameter gradients are the plain model's bit for bit (both one forward per row: a
    checkpointed layer keeps no KV cache, so the prompt is not shared over the group; shares_prompt)."""
    plain, tok = qwen3()
    r = HFEngine(plain, tok).generate(PROMPTS, n=2, temperature=1.0, max_new_tokens=7, seed=3)
    checkpointed = copy.deepcopy(plain)
    enable_checkpointing(checkpointed)
    plain.train(), checkpointed.train()
    assert shares_prompt(plain, slice(None), 8, 2) and not shares_prompt(checkpointed, slice(None), 8, 2)
    logp = token_logp_of("hf", chunk)
    mask = r.response_mask
    a = logp(plain, r, slice(None), 0.7, 1)[0]
    b = logp(checkpointed, r, slice(None), 0.7, 2)[0]
    assert torch.equal(a[mask], b[mask])
    (a[mask].sum()).backward()
    (b[mask].sum()).backward()
    for (name, p), q in zip(plain.named_parameters(), checkpointed.parameters()):
        assert torch.equal(p.grad, q.grad), name


def test_the_trainer_checkpoints_and_its_update_matches(tiny_base):
    """One update of the tiny random model with and without model.gradient_checkpointing: the same parameters
    to float rounding (without it the prompt is shared over the group, so rows round differently)."""
    def after_one_update(on: bool):
        t = Trainer(build_run_config(tiny_base, {"delay": 0, "model.gradient_checkpointing": on}))
        layers = [m for m in t.model.modules() if hasattr(m, "gradient_checkpointing")]
        assert layers and all(m.gradient_checkpointing == on for m in layers)
        metrics = t.update(t.make_batch(0))
        return [p.detach().clone() for p in t.model.parameters()], metrics

    (plain, m_plain), (ckpt, m_ckpt) = after_one_update(False), after_one_update(True)
    for a, b in zip(plain, ckpt):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)
    assert m_ckpt["loss/value"] == pytest.approx(m_plain["loss/value"], abs=1e-6)
