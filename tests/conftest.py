"""Shared fixtures: a tiny random-init Qwen3 model on disk (seconds to build, no warm start) and env."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Callable, ContextManager

import pytest

from harness.trial import numerics
numerics.warn_once(numerics.pin())     # the trials' float path, before any test imports torch
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parents[1]


def build_random_tiny_model(out: Path, seed: int = 0, context: int = 64, vocab: list[str] | None = None) -> Path:
    """A randomly initialized Qwen3-architecture model with the addrev tokenizer (or `vocab`'s), saved to `out`."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from harness.bases.models import char_tokenizer
    from harness.tasks.synthetic import ADDREV_VOCAB

    tok = char_tokenizer(vocab or ADDREV_VOCAB)
    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, head_dim=16, intermediate_size=64, max_position_embeddings=context,
                         tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    Qwen3ForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return build_random_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def long_context_model_dir(tmp_path_factory) -> Path:
    """The tiny random model with a 2048-token context: room for the benchmarks' prompts in lm-eval."""
    return build_random_tiny_model(tmp_path_factory.mktemp("long-context-model"), context=2048)


@pytest.fixture(scope="session")
def cumsum_model_dir(tmp_path_factory) -> Path:
    """The tiny random model with cumsum's characters and room for cumsum-long (97-token prompts)."""
    from harness.tasks.cumsum import CUMSUM_VOCAB
    return build_random_tiny_model(tmp_path_factory.mktemp("cumsum-model"), context=256, vocab=CUMSUM_VOCAB)


@pytest.fixture
def tiny_base(tiny_model_dir) -> dict:
    """A `base` run config for fast mechanical tests: random tiny model, few steps, small batches."""
    return {
        "model": {"kind": "path", "path": str(tiny_model_dir)},
        "task": {"name": "addrev", "eval_size": 32},
        "train": {"steps": 6, "prompts_per_step": 4, "lr": 1e-3, "max_new_tokens": 6, "checkpoint_every": 2},
        "eval": {"every_steps": 3},
        "group_size": 4,
    }


@pytest.fixture
def learning_base(tiny_base) -> dict:
    """tiny_base on the committed frozen base (`kind: tiny`) instead of the random model, whose rewards, hence
    updates, are all zero: for tests that need the policy to move."""
    return {**tiny_base, "model": {"kind": "tiny"}}


@pytest.fixture
def killed_at_update(monkeypatch) -> Callable[[int], ContextManager[None]]:
    """`with killed_at_update(n): run(...)`: the trial is killed on its n-th optimizer update (Trainer.update
    raises KeyboardInterrupt, which the context expects: it fails if the kill never came); the real update
    is back after the context, so the next run resumes the trial."""
    from harness.trial.trainer import Trainer

    original = Trainer.update

    @contextlib.contextmanager
    def killed(n: int):
        calls = {"n": 0}

        def update(self, batch):
            calls["n"] += 1
            if calls["n"] == n:
                raise KeyboardInterrupt("simulated kill")
            return original(self, batch)

        monkeypatch.setattr(Trainer, "update", update)
        try:
            with pytest.raises(KeyboardInterrupt, match="simulated kill"):
                yield
        finally:
            monkeypatch.setattr(Trainer, "update", original)
    return killed
