"""Rollouts with vLLM (`model.engine: vllm`), in the trainer's process, on a CUDA GPU or on the CPU.

The engine holds its own copy of the weights (`shares_weights = False`). After each optimizer update
`sync_weights` pushes the trainer's full `state_dict()` through vLLM's weight-transfer API
(harness/rollout/vllm_transfer.py: a backend that hands the tensors over in process), then drops the
prefix cache, whose KV blocks were computed with the old weights, and checks the output layer: probe hidden
states through the engine's and the trainer's output layers must agree under the gap rule of the trainer's
dtype (gap.head_gap; with tied embeddings an engine can keep an old lm_head). Every response carries the
version of the weights that generated it.

Behavior log-probs are vLLM's `processed_logprobs`: log_softmax(logits / temperature) of the sampled
token, the policy that actually sampled it (the default `raw_logprobs` ignores the temperature). They
are token-aligned with the trainer's response tensors, the sampled <eos> included. The trainer logs
the gap to its own recomputation (`is/engine_gap_max`) and can train on the recomputed values instead
(`model.behavior_logp: recompute`).

Why each engine argument is what it is (measured; docs/vllm.md):
- in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`): tensors can be handed to the worker directly;
- the full `state_dict()`, not `named_parameters()`: with tied embeddings the latter omits
  `lm_head.weight` and vLLM keeps its old output layer; pushing part of a fused qkv / gate_up group
  corrupts the model, so every push is whole;
- on the CPU, `kv_cache_memory_bytes` caps the KV cache (uncapped it takes about half of RAM),
  `enforce_eager` skips graph capture, and `max_num_seqs` lets a whole batch decode in one wave; on a GPU,
  `gpu_memory_utilization` is vLLM's share of memory and the rest are vLLM's defaults;
- on a GPU with the trainer's model on a GPU too (colocated), `enable_sleep_mode`: between two uses the
  engine sleeps at level 1 (weights offloaded to CPU memory, KV cache freed) so that the training step has
  the memory, and wakes before the next weight push or generation. vLLM's CPU worker has no sleep mode.

Prompts are tokenized once by the trainer's tokenizer and handed to vLLM as token ids, so both sides see
the same prompt tokens. Each prompt gets its own sampling seed drawn from `seed` (vLLM seeds the n
samples of a prompt seed, seed+1, ...), so prompts of one batch never share a random stream.

Threads: one `threading.RLock` serializes weight pushes and generation. `pinned(model, version)` holds
it across a push and the generations made under it, so the asynchronous producer's batches and the
trainer's evaluations never run on each other's weights.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Iterator

import torch

from harness.rollout.base import Rollout
from harness.rollout.gap import head_gap
from harness.rollout.vllm_transfer import push, transfer_config

CPU_KV_CACHE_BYTES = 64 * 2**20          # ample for the tiny model's 64-token context; uncapped ≈ RAM / 2
CPU_MAX_NUM_SEQS = 1024                  # vLLM's CPU default, 256, splits a 64 × 8 batch into two waves
HEAD_PROBE_ROWS = 8                      # probe hidden states of the output-layer check after each weight push


class VLLMEngine:
    shares_weights = False                # the engine runs its own copy: sync_weights copies, the trainer checks the gap
    switches_midway = False               # one policy per generate call (no pause_generation here yet)

    def __init__(self, path: str | Path, tokenizer, *, dtype: str = "float32", seed: int = 0,
                 gpu_memory_utilization: float = 0.3, max_model_len: int | None = None,
                 cpu_kv_cache_bytes: int = CPU_KV_CACHE_BYTES, colocated: bool = False):
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"      # in-process: weights are pushed as tensors
        from vllm import LLM

        on_gpu = torch.cuda.is_available()
        self.sleeps = on_gpu and colocated                      # sleep between uses, for the training step's memory
        device_args = ({"gpu_memory_utilization": gpu_memory_utilization, "enable_sleep_mode": self.sleeps}
                       if on_gpu else
                       {"kv_cache_memory_bytes": cpu_kv_cache_bytes, "enforce_eager": True, "max_num_seqs": CPU_MAX_NUM_SEQS})
        self.tokenizer = tokenizer
        self.llm = LLM(model=str(path), dtype=dtype, max_model_len=max_model_len, seed=seed,
                       enable_prefix_caching=True, logprobs_mode="processed_logprobs",
                       weight_transfer_config=transfer_config(), **device_args)
        self.version = 0
        self.head_gap: float | None = None     # the output layer's gap at the last weight push (gap.head_gap)
        self.asleep = False
        self.lock = threading.RLock()

    def sync_weights(self, model: torch.nn.Module, version: int) -> None:
        """Push `model`'s full state dict (tied output layer included) unless `version` is already loaded, and
        check the engine's output layer against `model`'s (raises gap.EngineGapError in float32)."""
        with self.lock:
            if version == self.version:
                return
            self._wake()
            push(self.llm, model)
            self.llm.reset_prefix_cache()          # cached KV blocks were computed with the old weights
            self.head_gap = head_gap(*self.head_logits(model), next(model.parameters()).dtype)
            self.version = version

    def head_logits(self, model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        """Probe hidden states (k, C) through the engine's output layer and `model`'s: (k, V) logits each."""
        weight = model.get_output_embeddings().weight.detach()                      # (V, C): embed_tokens' if tied
        hidden = torch.randn(HEAD_PROBE_ROWS, weight.shape[1], generator=torch.Generator().manual_seed(0))
        hidden = hidden.to(weight.dtype)
        with torch.no_grad():
            engine = self.llm.apply_model(
                lambda m: m.compute_logits(hidden.to(next(m.parameters()).device)).float().cpu())[0]
        return engine, (hidden.to(weight.device) @ weight.T).float().cpu()

    def _wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    @contextlib.contextmanager
    def pinned(self, model: torch.nn.Module, version: int) -> Iterator["VLLMEngine"]:
        """This engine with `model`'s weights as `version`, held against other threads for the block; a
        colocated engine sleeps when the block ends, until its next push or generation."""
        with self.lock:
            self.sync_weights(model, version)
            try:
                yield self
            finally:
                if self.sleeps and not self.asleep:
                    self.llm.sleep(level=1)
                    self.asleep = True

    def generate(self, prompts: list[str], n: int, *, temperature: float, max_new_tokens: int, seed: int) -> Rollout:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        tok = self.tokenizer
        start = time.perf_counter()
        enc = tok(prompts, add_special_tokens=False, padding=True, return_tensors="pt")
        prompt_ids = enc["input_ids"].repeat_interleave(n, 0)                          # (B, P) left-padded
        prompt_mask = enc["attention_mask"].repeat_interleave(n, 0)
        unpadded = [ids[mask.bool()].tolist() for ids, mask in zip(enc["input_ids"], enc["attention_mask"])]
        seeds = torch.randint(0, 2**62, (len(prompts),), generator=torch.Generator().manual_seed(seed)).tolist()
        params = [SamplingParams(n=n, temperature=temperature, max_tokens=max_new_tokens, logprobs=0, seed=s,
                                 stop_token_ids=[tok.eos_token_id], detokenize=False) for s in seeds]
        with self.lock:
            self._wake()
            outputs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in unpadded], params, use_tqdm=False)
            version = self.version
        # vLLM returns each request's n samples in completion order: sort them back by sample index.
        samples = [c for out in outputs for c in sorted(out.outputs, key=lambda c: c.index)]
        B, T = len(samples), max(1, max(len(c.token_ids) for c in samples))
        response_ids = torch.full((B, T), tok.pad_token_id, dtype=torch.long)          # (B, T) right-padded
        logp = torch.zeros(B, T)
        lengths = torch.zeros(B, dtype=torch.long)
        for i, c in enumerate(samples):
            ids = list(c.token_ids)                # includes the stopping <eos>
            lengths[i] = len(ids)
            response_ids[i, :len(ids)] = torch.tensor(ids, dtype=torch.long)
            logp[i, :len(ids)] = torch.tensor([step[t].logprob for step, t in zip(c.logprobs, ids)])
        response_mask = torch.arange(T)[None, :] < lengths[:, None]
        texts = tok.batch_decode(response_ids, skip_special_tokens=True)
        return Rollout(prompt_ids, prompt_mask, response_ids, response_mask, logp,
                       torch.full((B,), version, dtype=torch.long), texts, time.perf_counter() - start)
