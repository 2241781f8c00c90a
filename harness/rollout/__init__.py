"""Rollout engines: batched sampling that records behavior log-probs and the generating policy version.

    engine.generate(prompts, n=G, temperature=1.0, max_new_tokens=8, seed=s) -> Rollout

`HFEngine` (transformers, KV-cached; any device) is the default; `VLLMEngine` (extra `gpu`) is imported
lazily by `make_engine`.
"""
from .base import Rollout, RolloutEngine

__all__ = ["Rollout", "RolloutEngine"]
