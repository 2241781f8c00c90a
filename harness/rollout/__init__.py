"""Rollout engines: batched sampling that records behavior log-probs and the generating policy version.

    engine.generate(prompts, n=G, temperature=1.0, max_new_tokens=8, seed=s) -> Rollout

`HFEngine` (transformers, KV-cached; any device) is the default, `LeanEngine` its sampling over the lean
forward of the tiny Qwen3 bases (`model.forward: lean`, lean.py); `VLLMEngine` (extra `gpu` on a CUDA machine,
or the CPU side environment of scripts/setup_vllm_cpu.sh; docs/vllm.md) is imported only when a run config
asks for it (`model.engine: vllm`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from harness.rollout.base import Rollout, RolloutEngine
from harness.rollout.hf import HFEngine

__all__ = ["HFEngine", "Rollout", "RolloutEngine", "ResponseLogits", "make_engine", "response_logits"]

# (model, rollout, rows, group_size) -> logits (b, T, V) predicting each response token of those rows
ResponseLogits = Callable[[torch.nn.Module, Rollout, slice, int], torch.Tensor]


def response_logits(forward: str) -> ResponseLogits:
    """The trainer's forward for `model.forward`: hf (transformers) or lean (rollout/lean.py)."""
    if forward == "hf":
        from harness.rollout.hf import response_logits as hf
        return hf
    if forward == "lean":
        from harness.rollout.lean import response_logits as lean
        return lean
    if forward == "lean3":
        from harness.rollout.lean3 import response_logits as lean3
        return lean3
    raise ValueError(f"unknown model.forward {forward!r}; valid: hf, lean, lean3")


def make_engine(kind: str, model: torch.nn.Module, tokenizer, path: Path, *, dtype: str = "float32",
                gpu_memory_utilization: float = 0.3, seed: int = 0, forward: str = "hf") -> RolloutEngine:
    """The rollout engine `kind` (model.engine); the hf engine runs the forward `forward` (model.forward)."""
    if kind == "hf":
        if forward == "lean":
            from harness.rollout.lean import LeanEngine
            return LeanEngine(model, tokenizer)
        if forward == "lean3":
            from harness.rollout.lean3 import engine
            return engine(model, tokenizer)
        return HFEngine(model, tokenizer)
    if kind == "vllm":
        import importlib.util
        if importlib.util.find_spec("vllm") is None:
            raise ValueError("model.engine 'vllm' needs vLLM: pip install 'stalebench[gpu]' on a CUDA machine, "
                             "or run in the CPU side environment of scripts/setup_vllm_cpu.sh (docs/vllm.md)")
        from harness.rollout.vllm_engine import VLLMEngine
        engine = VLLMEngine(path, tokenizer, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization, seed=seed)
        engine.sync_weights(model, -1)          # start from the trainer's exact weights
        engine.version = 0
        return engine
    raise ValueError(f"unknown rollout engine {kind!r}; valid: hf, vllm")
