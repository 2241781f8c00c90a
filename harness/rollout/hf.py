"""Rollouts with a transformers model: batched, KV-cached sampling on whatever device the model is on.

The engine shares the trainer's model object (`shares_weights = True`), so `sync_weights` only advances the
version tag, and `pinned` hands out a fresh engine over the given model (nothing shared across threads).
Behavior log-probs are log_softmax(logits / temperature) of the sampled token, recorded as sampled;
they match a fresh forward pass of the same weights (tests check 1e-5).
"""
from __future__ import annotations

import contextlib
import time

import torch
from transformers.modeling_outputs import CausalLMOutputWithPast

from harness.registry import FORWARDS
from harness.rollout.base import Forward, Rollout, sample_token
from harness.rollout.logp import Head

# transformers renamed the KV cache of a forward from `past_key_values` to `cache` during 5.x (5.24 warns
# about the old name, 5.17 knows only it): use whichever this version's outputs carry.
CACHE = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def position_ids_from(mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding: 0 at each row's first real token."""
    return (mask.long().cumsum(-1) - 1).clamp_min(0)


def shares_prompt(model: torch.nn.Module, rows: slice, b: int, group_size: int) -> bool:
    """Whether rows `rows` (b of them) hold whole groups whose prompt can run once, its KV cache repeated over
    the group. Not under gradient checkpointing while training: transformers drops a checkpointed layer's
    cache (modeling_layers.py), so each row then runs its prompt and response in one forward."""
    if not (group_size > 1 and b % group_size == 0 and (rows.start or 0) % group_size == 0):
        return False
    return not (model.training and torch.is_grad_enabled()
                and any(getattr(m, "gradient_checkpointing", False) for m in model.modules()))


def enable_checkpointing(model: torch.nn.Module) -> None:
    """Recompute each transformers layer in the backward instead of keeping its activations
    (model.gradient_checkpointing): `activation_checkpointing_enable` where this transformers has it (its
    older name warns that it will go), non-reentrant."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def _response_states(model: torch.nn.Module, r: Rollout, rows: slice, group_size: int, call, keep_last):
    """The positions that predict each response token of rows `rows`, through `call(**inputs)` (the model or
    its decoder) and `keep_last(out, n)` (the last n positions' logits or hidden states): (b, T, ·)."""
    prompt_ids, response_ids = r.prompt_ids[rows], r.response_ids[rows]
    prompt_mask, response_mask = r.prompt_mask[rows], r.response_mask[rows].long()
    b, T = response_ids.shape
    attn = torch.cat([prompt_mask, response_mask], dim=1)
    if shares_prompt(model, rows, b, group_size):
        unique_mask = prompt_mask[::group_size]
        out = call(input_ids=prompt_ids[::group_size], attention_mask=unique_mask,
                   position_ids=position_ids_from(unique_mask), use_cache=True, n=1)
        cache = out[CACHE]
        cache.batch_repeat_interleave(group_size)
        states = keep_last(out, 1).repeat_interleave(group_size, 0)                         # (b, 1, ·)
        if T > 1:
            positions = prompt_mask.sum(-1, keepdim=True) + torch.arange(T - 1, device=attn.device)
            rest = call(input_ids=response_ids[:, :-1], attention_mask=attn[:, :-1], position_ids=positions,
                        **{CACHE: cache}, use_cache=True, n=None)
            states = torch.cat([states, keep_last(rest, None)], dim=1)                          # (b, T, ·)
        return states
    out = call(input_ids=torch.cat([prompt_ids, response_ids], 1), attention_mask=attn,
               position_ids=position_ids_from(attn), n=T + 1)
    return keep_last(out, T + 1)[:, :-1]


def response_logits(model: torch.nn.Module, r: Rollout, rows: slice, group_size: int = 1) -> torch.Tensor:
    """Logits (b, T, V) predicting each response token of rows `rows` (the trainer's `token_logp` under
    `model.forward: hf`). When the rows hold whole groups (responses of one prompt are `group_size`
    consecutive rows), each prompt is run once and its KV cache repeated over the group (shares_prompt)."""
    def call(n, **inputs):
        return model(**inputs, **({} if n is None else {"logits_to_keep": n}))
    return _response_states(model, r, rows, group_size, call, lambda out, n: out.logits)


def response_hidden(model: torch.nn.Module, r: Rollout, rows: slice, group_size: int = 1) -> Head:
    """The last hidden states (b, T, C) behind `response_logits`, and the head (the chunked log-probs;
    rollout/logp.py): the decoder's output, which transformers' causal LMs put through the head as is."""
    head = plain_head(model)
    decoder = model.get_decoder()
    hidden = _response_states(model, r, rows, group_size, lambda n, **inputs: decoder(**inputs),
                              lambda out, n: out.last_hidden_state if n is None else out.last_hidden_state[:, -n:])
    return Head(hidden, head)


def plain_head(model: torch.nn.Module) -> torch.Tensor:
    """The head's weight (V, C) when logits are exactly hidden · weightᵀ; else a one-line error."""
    c, head = model.config, model.get_output_embeddings()
    extra = [name for name, bad in (("a bias on the LM head", getattr(head, "bias", None) is not None),
                                    ("final_logit_softcapping", getattr(c, "final_logit_softcapping", None)),
                                    ("logit_scale", getattr(c, "logit_scale", None) not in (None, 1, 1.0)),
                                    ("logits_scaling", getattr(c, "logits_scaling", None) not in (None, 1, 1.0)))
             if bad]
    if hasattr(head.weight, "ds_id"):
        extra.append("its head partitioned by DeepSpeed ZeRO-3")
    if extra:
        raise ValueError(f"model.logp_chunk_tokens: the chunked log-probs need logits = hidden · headᵀ, and "
                         f"{c.model_type} has {', '.join(extra)}; set model.logp_chunk_tokens: -1 (full logits)")
    return head.weight


def encode(tokenizer, prompts: list[str], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids and mask (u, P), one row per distinct prompt."""
    enc = tokenizer(prompts, add_special_tokens=False, padding=True, return_tensors="pt")
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


def prefill(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, n: int) -> tuple[object, torch.Tensor]:
    """Each distinct prompt's KV cache and last-position logits, computed once and repeated n times (bit-identical
    to prefilling all u·n rows): the cache and the (u·n, V) float32 logits."""
    out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from(mask), use_cache=True)
    cache = out[CACHE]
    if n > 1:
        cache.batch_repeat_interleave(n)
    return cache, out.logits[:, -1].float().repeat_interleave(n, 0)


class HFEngine:
    shares_weights = True
    switches_midway = False            # one policy per generate call

    def __init__(self, model: torch.nn.Module, tokenizer, version: int = 0):
        self.model = model
        self.tokenizer = tokenizer
        self.version = version

    def sync_weights(self, model: torch.nn.Module, version: int) -> None:
        self.model = model
        self.version = version

    def pinned(self, model: torch.nn.Module, version: int) -> contextlib.AbstractContextManager["HFEngine"]:
        return contextlib.nullcontext(type(self)(model, self.tokenizer, version))

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, *, temperature: float, max_new_tokens: int, seed: int) -> Rollout:
        start = time.perf_counter()
        tok = self.tokenizer
        device = next(self.model.parameters()).device
        ids, mask = encode(tok, prompts, device)
        prompt_ids, prompt_mask = ids.repeat_interleave(n, 0), mask.repeat_interleave(n, 0)   # (B, P)
        B = prompt_ids.shape[0]
        gen = torch.Generator(device=device).manual_seed(seed)
        was_training = self.model.training
        self.model.eval()
        cache, logits = prefill(self.model, ids, mask, n)                          # (B, V)
        attn = prompt_mask
        next_pos = attn.sum(-1, keepdim=True)                                       # (B, 1)
        tokens, logps = [], []
        done = torch.zeros(B, dtype=torch.bool, device=device)
        alive_mask = []
        for t in range(max_new_tokens):
            token, logp = sample_token(logits, temperature, gen, done, tok.pad_token_id)
            alive_mask.append(~done)
            tokens.append(token)
            logps.append(logp)
            done = done | (token == tok.eos_token_id)
            if bool(done.all()) or t == max_new_tokens - 1:
                break
            attn = torch.cat([attn, torch.ones(B, 1, dtype=attn.dtype, device=device)], dim=1)
            out = self.model(input_ids=token[:, None], attention_mask=attn, position_ids=next_pos,
                             **{CACHE: cache}, use_cache=True)
            cache = out[CACHE]
            logits = out.logits[:, -1].float()
            next_pos = next_pos + 1
        self.model.train(was_training)
        response_ids = torch.stack(tokens, 1)                                       # (B, T)
        response_mask = torch.stack(alive_mask, 1)
        texts = tok.batch_decode(response_ids.masked_fill(~response_mask, tok.pad_token_id), skip_special_tokens=True)
        return Rollout(prompt_ids, prompt_mask, response_ids, response_mask, torch.stack(logps, 1),
                       torch.full((B,), self.version, dtype=torch.long), texts, time.perf_counter() - start)


FORWARDS.register("hf")(Forward(response_logits, HFEngine, response_hidden, checkpointing=True))
