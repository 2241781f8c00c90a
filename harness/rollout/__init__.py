"""Rollout engines: batched sampling that records behavior log-probs and the generating policy version.

    engine.generate(prompts, n=G, temperature=1.0, max_new_tokens=8, seed=s) -> Rollout

`HFEngine` (transformers, KV-cached; any device) is the default; `VLLMEngine` (extra `gpu` on a CUDA machine,
or the CPU side environment of scripts/setup_vllm_cpu.sh; docs/vllm.md) is imported only when a run config
asks for it (`model.engine: vllm`).
"""
from __future__ import annotations

from pathlib import Path

import torch

from .base import Rollout, RolloutEngine
from .hf import HFEngine

__all__ = ["HFEngine", "Rollout", "RolloutEngine", "make_engine"]


def make_engine(kind: str, model: torch.nn.Module, tokenizer, path: Path, *, dtype: str = "float32",
                gpu_memory_utilization: float = 0.3, seed: int = 0) -> RolloutEngine:
    if kind == "hf":
        return HFEngine(model, tokenizer)
    if kind == "vllm":
        import importlib.util
        if importlib.util.find_spec("vllm") is None:
            raise ValueError("model.engine 'vllm' needs vLLM: pip install 'stalebench[gpu]' on a CUDA machine, "
                             "or run in the CPU side environment of scripts/setup_vllm_cpu.sh (docs/vllm.md)")
        from .vllm_engine import VLLMEngine
        engine = VLLMEngine(path, tokenizer, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization, seed=seed)
        engine.sync_weights(model, -1)          # start from the trainer's exact weights
        engine.version = 0
        return engine
    raise ValueError(f"unknown rollout engine {kind!r}; valid: hf, vllm")
