"""Rollouts with vLLM (extra `gpu`), colocated with the trainer on the same GPU.

The engine runs in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so that `sync_weights` can copy the
trainer's parameters into vLLM's model in place after each optimizer update; every response carries the
version of the weights that generated it. Behavior log-probs come from the engine after temperature
scaling (`logprobs_mode="processed_logprobs"`), which is the policy that sampled the tokens. The trainer
logs the gap to its own recomputation (`is/engine_gap_max`) and can use the recomputed values instead
(`model.behavior_logp: recompute`).

Tested only on a GPU machine (tests marked `gpu`); nothing here is imported on CPU-only installs.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from .base import Rollout


class VLLMEngine:
    def __init__(self, path: str | Path, tokenizer, dtype: str = "bfloat16", gpu_memory_utilization: float = 0.3,
                 max_model_len: int = 4096, seed: int = 0):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")     # in-process: weights can be synced
        from vllm import LLM

        self.tokenizer = tokenizer
        self.llm = LLM(model=str(path), dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                       max_model_len=max_model_len, seed=seed, enable_prefix_caching=True,
                       logprobs_mode="processed_logprobs")
        self.version = 0

    def _runner_model(self) -> torch.nn.Module:
        executor = self.llm.llm_engine.model_executor
        worker = executor.driver_worker
        worker = getattr(worker, "worker", worker)
        return worker.model_runner.model

    def sync_weights(self, model: torch.nn.Module, version: int) -> None:
        if version == self.version:
            return
        with torch.no_grad():
            self._runner_model().load_weights(((k, v) for k, v in model.state_dict().items()))
        self.llm.reset_prefix_cache()
        self.version = version

    def generate(self, prompts: list[str], n: int, *, temperature: float, max_new_tokens: int, seed: int) -> Rollout:
        from vllm import SamplingParams

        start = time.perf_counter()
        params = SamplingParams(n=n, temperature=temperature, max_tokens=max_new_tokens, logprobs=0, seed=seed,
                                stop_token_ids=[self.tokenizer.eos_token_id], include_stop_str_in_output=True)
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        responses, logps = [], []
        for out in outputs:
            for c in out.outputs:
                ids = list(c.token_ids)
                responses.append(ids)
                logps.append([lp[t].logprob for lp, t in zip(c.logprobs, ids)])
        T = max(1, max(len(r) for r in responses))
        pad = self.tokenizer.pad_token_id
        response_ids = torch.full((len(responses), T), pad, dtype=torch.long)
        logp = torch.zeros(len(responses), T)
        for i, (ids, lp) in enumerate(zip(responses, logps)):
            response_ids[i, :len(ids)] = torch.tensor(ids, dtype=torch.long)
            logp[i, :len(lp)] = torch.tensor(lp)
        response_mask = torch.arange(T)[None, :] < torch.tensor([len(r) for r in responses])[:, None]
        enc = self.tokenizer([p for p in prompts for _ in range(n)], add_special_tokens=False, padding=True,
                             return_tensors="pt")
        texts = self.tokenizer.batch_decode(response_ids, skip_special_tokens=True)
        return Rollout(enc["input_ids"], enc["attention_mask"], response_ids, response_mask, logp,
                       torch.full((len(responses),), self.version, dtype=torch.long), texts,
                       time.perf_counter() - start)
