"""Engine mismatch, separate from lag: a rollout engine whose log-probs differ from the trainer's in a
controlled way (config `mismatch`, docs/staleness.md).

Production engines sample with weights that are not quite the trainer's (bf16 or quantized copies,
other kernels: verl #6780, open-instruct #1473) and with top-p/top-k truncation, whose recorded
log-probs are those of the truncated, renormalized distribution (verl #6240, TRL #6789: the ratio
is biased by log S, S the kept mass). This engine reproduces both on the transformers model:

    engine weights   w' = bf16(w + σ · rms(w) · ε)      per parameter tensor, ε ~ N(0, 1) seeded by (seed,
                                                         version); bf16(·) only with `bf16: true`
    engine policy    π_rollout = renormalized top-k-then-top-p of softmax(logits(w') / T)   (vLLM's order)

The sampled tokens come from π_rollout. Two log-probs are recorded per token: `logp_rollout`, the
engine's (π_rollout, what vLLM returns with `logprobs_mode: processed_logprobs`), and `logp_behavior`,
the trainer's full-softmax log-prob under the unperturbed weights w that the engine was given (with a
delay, the stale policy's), computed in the same decoding loop by a second, lockstep forward of w.
At σ = 0, no bf16 and no truncation both equal the plain engine's log-probs, and the samples are the
plain engine's, bit for bit (tests/test_mismatch.py). Evaluation never uses this engine.
"""
from __future__ import annotations

import contextlib
import copy
import time

import torch

from harness.rollout.base import Rollout
from harness.rollout.hf import CACHE, encode, prefill


def truncate_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Top-k, then top-p (nucleus) on (B, V) logits: removed entries become −inf. Top-p keeps the smallest
    set of highest-probability tokens whose mass reaches p (at least one), as transformers'
    TopPLogitsWarper and vLLM's apply_top_k_top_p do; ties at the k-th value are kept."""
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, -torch.inf)
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1)                       # ascending
        remove = torch.softmax(sorted_logits, dim=-1).cumsum(-1) <= 1 - top_p
        remove[:, -1] = False                                                   # keep the most likely token
        logits = logits.masked_fill(remove.scatter(1, order, remove), -torch.inf)
    return logits


def perturbed_copy(model: torch.nn.Module, into: torch.nn.Module | None, sigma: float, bf16: bool, seed: int
                   ) -> torch.nn.Module:
    """`into` (a deep copy of `model` when None) holding w' = bf16(w + σ·rms(w)·ε) of `model`'s weights."""
    into = copy.deepcopy(model).eval() if into is None else into
    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for (_, src), (_, dst) in zip(model.named_parameters(), into.named_parameters()):
            w = src.detach()
            if sigma > 0:
                rms = w.float().pow(2).mean().sqrt().to(w.dtype)
                w = w + sigma * rms * torch.randn(w.shape, generator=gen, device=device, dtype=w.dtype)
            if bf16:
                w = w.to(torch.bfloat16).to(src.dtype)
            dst.copy_(w)
    return into


class MismatchEngine:
    """Samples with a perturbed copy of the weights it is pinned to and a truncated sampler; records the
    engine's log-probs (`logp_rollout`) and the unperturbed weights' (`logp_behavior`)."""
    shares_weights = True          # the behavior log-probs are the trainer's own forward: no gap to check
    switches_midway = False        # one policy per generate call

    def __init__(self, tokenizer, *, sigma: float, bf16: bool, top_p: float, top_k: int, seed: int):
        self.tokenizer = tokenizer
        self.sigma, self.bf16, self.top_p, self.top_k, self.seed = sigma, bf16, top_p, top_k, seed
        self.model: torch.nn.Module | None = None       # the unperturbed weights (the behavior policy)
        self.engine_model: torch.nn.Module | None = None
        self.version = 0
        self._copy_of: int | None = None                # the version the perturbed copy holds

    def sync_weights(self, model: torch.nn.Module, version: int) -> None:
        """Generate with `model`'s weights as `version`: the engine copy is rebuilt unless it holds that
        version already (a version's weights never change; its noise is seeded by the version)."""
        self.model = model
        if version != self._copy_of or self.engine_model is None:
            self.engine_model = perturbed_copy(model, self.engine_model, self.sigma, self.bf16,
                                               (self.seed * 1_000_003 + version) % (2**63 - 1))
        self.version = self._copy_of = version

    def pinned(self, model: torch.nn.Module, version: int) -> contextlib.AbstractContextManager["MismatchEngine"]:
        """This engine with `model`'s weights as `version` (one caller at a time: the training rollouts)."""
        self.sync_weights(model, version)
        return contextlib.nullcontext(self)

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, *, temperature: float, max_new_tokens: int, seed: int) -> Rollout:
        assert temperature > 0, "the mismatch engine samples (train.temperature > 0)"
        start, tok = time.perf_counter(), self.tokenizer
        device = next(self.model.parameters()).device
        ids, mask = encode(tok, prompts, device)
        prompt_ids, prompt_mask = ids.repeat_interleave(n, 0), mask.repeat_interleave(n, 0)   # (B, P)
        B = prompt_ids.shape[0]
        gen = torch.Generator(device=device).manual_seed(seed)
        was_training = self.model.training
        self.model.eval()
        models = (self.engine_model, self.model)                                    # (engine w', trainer w)
        caches, logits = map(list, zip(*(prefill(m, ids, mask, n) for m in models)))   # 2 × cache, 2 × (B, V)
        attn, next_pos = prompt_mask, prompt_mask.sum(-1, keepdim=True)
        tokens, logp_rollout, logp_behavior, alive_mask = [], [], [], []
        done = torch.zeros(B, dtype=torch.bool, device=device)
        for t in range(max_new_tokens):
            engine_logprobs = torch.log_softmax(truncate_logits(logits[0] / temperature, self.top_k, self.top_p), dim=-1)
            token = torch.multinomial(engine_logprobs.exp(), 1, generator=gen).squeeze(1)
            token = torch.where(done, torch.full_like(token, tok.pad_token_id), token)
            trainer_logprobs = torch.log_softmax(logits[1] / temperature, dim=-1)
            alive_mask.append(~done)
            tokens.append(token)
            for out, lp in ((logp_rollout, engine_logprobs), (logp_behavior, trainer_logprobs)):
                out.append(torch.where(done, torch.zeros(()), lp.gather(1, token[:, None]).squeeze(1)))
            done = done | (token == tok.eos_token_id)
            if bool(done.all()) or t == max_new_tokens - 1:
                break
            attn = torch.cat([attn, torch.ones(B, 1, dtype=attn.dtype, device=device)], dim=1)
            outs = [m(input_ids=token[:, None], attention_mask=attn, position_ids=next_pos, **{CACHE: c}, use_cache=True)
                    for m, c in zip(models, caches)]
            caches = [o[CACHE] for o in outs]
            logits = [o.logits[:, -1].float() for o in outs]
            next_pos = next_pos + 1
        self.model.train(was_training)
        response_ids, response_mask = torch.stack(tokens, 1), torch.stack(alive_mask, 1)   # (B, T)
        texts = tok.batch_decode(response_ids.masked_fill(~response_mask, tok.pad_token_id), skip_special_tokens=True)
        return Rollout(prompt_ids, prompt_mask, response_ids, response_mask, torch.stack(logp_behavior, 1),
                       torch.full((B,), self.version, dtype=torch.long), texts, time.perf_counter() - start,
                       logp_rollout=torch.stack(logp_rollout, 1))
