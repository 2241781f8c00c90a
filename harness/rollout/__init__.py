"""Rollout engines and model forwards, in the house's registries (harness/registry.py ENGINES, FORWARDS).

    engine.generate(prompts, n=G, temperature=1.0, max_new_tokens=8, seed=s) -> Rollout

A forward (`forward:`) is the trainer's logits of response tokens and the sampler over the same
arithmetic: `hf` (transformers, KV-cached; hf.py) and `lean` (the tiny Qwen3 bases' lean forward; lean.py).
An engine (`engine:`) samples the batches: `hf` runs the configured forward's sampler in the trainer's
process on the trainer's weights; `vllm` (extra `gpu` on a CUDA machine, or the CPU side environment of
scripts/setup_vllm_cpu.sh; docs/vllm.md) holds its own copy and is imported only when a config asks for it.
A new forward or engine is one module that registers itself, imported below.

The trainer's log-probs (`TokenLogp`) go through full-vocabulary logits (`token_logp`) or, for a large
vocabulary or when `model.logp_chunk_tokens` asks, a chunk of tokens at a time through the LM head from the
forward's hidden states (logp.py), never a full (b, T, V) float32 copy.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.errors import ConfigError
from harness.registry import ENGINES, FORWARDS
from harness.rollout import hf, lean, lean3  # noqa: F401  (each registers its forward)
from harness.rollout.base import Engine, EngineSettings, Forward, ResponseLogits, Rollout, RolloutEngine
from harness.rollout.hf import HFEngine
from harness.rollout.logp import chunk_tokens, chunked_token_logp

__all__ = ["EngineSettings", "Forward", "HFEngine", "Rollout", "RolloutEngine", "ResponseLogits", "TokenLogp",
           "make_engine", "response_logits", "token_logp"]


def response_logits(forward: str) -> ResponseLogits:
    """The trainer's forward for `model.forward`."""
    return FORWARDS.get(forward, "model.forward").response_logits


def make_engine(kind: str, model: torch.nn.Module, tokenizer, path: Path | None,
                settings: EngineSettings = EngineSettings(), seed: int = 0) -> RolloutEngine:
    """The rollout engine `kind` (model.engine) for `model`, started from its current weights."""
    return ENGINES.get(kind, "model.engine")(model, tokenizer, path, settings, seed)


def token_logp(model: torch.nn.Module, r: Rollout, rows: slice, temperature: float, group_size: int = 1,
               forward: ResponseLogits = hf.response_logits) -> tuple[torch.Tensor, torch.Tensor]:
    """log π(response token) and the policy entropy per response token, both (b, T), for rows `rows`,
    from the logits of `forward` (the config's model.forward: rollout.response_logits;
    transformers' by default).

    When the rows hold whole groups (responses of one prompt are `group_size` consecutive rows), each
    prompt is run once and its KV cache repeated over the group, which roughly halves the cost of the
    update on short responses; values agree with a full forward to float rounding (tests check 1e-5).
    """
    logits = forward(model, r, rows, group_size)                                          # (b, T, V)
    logprobs = torch.log_softmax(logits.float() / temperature, dim=-1)                    # (b, T, V)
    logp = logprobs.gather(2, r.response_ids[rows].unsqueeze(2)).squeeze(2)
    with torch.no_grad():
        entropy = -(logprobs.exp() * logprobs).sum(-1)
    return logp, entropy


@dataclass(frozen=True)
class TokenLogp:
    """The trainer's log π(response token) and entropy, both (b, T): `model.forward` (`forward`), through
    full-vocabulary logits (token_logp) or `chunk_tokens` tokens at a time through the head (logp.py), as
    `model.logp_chunk_tokens` (`setting`) and the model's vocabulary decide (logp.chunk_tokens). The chunk is
    a property of the model, not of the call: log-probs, π_prox, the reference and the engine gap all agree."""
    forward: Forward
    setting: int = 0

    def __call__(self, model: torch.nn.Module, r: Rollout, rows: slice, temperature: float, group_size: int = 1
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        net = getattr(model, "module", model)        # the transformers model (a DeepSpeed engine holds it as .module)
        head = net.get_output_embeddings().weight
        chunk = chunk_tokens(self.setting, getattr(head, "ds_shape", head.shape)[0])     # ZeRO-3 keeps the shape aside
        if not chunk:
            return token_logp(model, r, rows, temperature, group_size, self.forward.response_logits)
        return chunked_token_logp(self.forward.response_hidden(net, r, rows, group_size), r.response_ids[rows],
                                  temperature, chunk)


def token_logp_of(forward: str, logp_chunk_tokens: int = 0) -> TokenLogp:
    """The trainer's log-probs for `model.forward` and `model.logp_chunk_tokens`."""
    return TokenLogp(FORWARDS.get(forward, "model.forward"), logp_chunk_tokens)


def _in_process(model: torch.nn.Module, tokenizer, path: Path | None, settings: EngineSettings, seed: int
                ) -> RolloutEngine:
    """The configured forward's sampler, on the trainer's own weights."""
    return FORWARDS.get(settings.forward, "forward").engine(model, tokenizer)


ENGINES.register("hf")(Engine(_in_process, in_process=True, supports_mismatch=True, multi_worker=True))


@dataclass(frozen=True)
class VLLMSettings:
    """`engine: {vllm: {...}}` (stored as model.gpu_memory_utilization, its key before engines had settings)."""
    gpu_memory_utilization: float = 0.3    # vLLM's share of GPU memory (on a GPU; unused on the CPU)

    def validate(self, key: str) -> None:
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(f"{key}.gpu_memory_utilization: a share of the GPU's memory, in (0, 1]; got "
                              f"{self.gpu_memory_utilization}")


def _vllm(model: torch.nn.Module, tokenizer, path: Path | None, settings: EngineSettings, seed: int) -> RolloutEngine:
    if importlib.util.find_spec("vllm") is None:
        raise ValueError("engine 'vllm' needs vLLM: pip install 'stalebench[gpu]' on a CUDA machine, "
                         "or run in the CPU side environment of scripts/setup_vllm_cpu.sh (docs/vllm.md)")
    from harness.rollout.vllm_engine import VLLMEngine
    engine = VLLMEngine(path, tokenizer, dtype=settings.dtype, gpu_memory_utilization=settings.own.gpu_memory_utilization,
                        seed=seed, colocated=next(model.parameters()).is_cuda)    # the trainer trains on a GPU too
    engine.sync_weights(model, -1)          # start from the trainer's exact weights
    engine.version = 0
    return engine


ENGINES.register("vllm", settings=VLLMSettings)(Engine(_vllm))     # its own copy of the weights, in this process
