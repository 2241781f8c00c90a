"""Engine version 3 (`model.forward: lean3`): the lean forward on its own float path, for long responses.

The model, its parameters and what is computed are the lean forward's (lean.py; docs/lean.md): a function of
the transformers module's own parameters, so gradients, the optimizer, checkpoints and kept policies are the
transformers ones and a kept policy loads in transformers as before. What engine 3 changes:

- every matmul but attention's (q|k|v, o, gate|up, down, the head; forward and backward) runs in OpenBLAS's
  Haswell SGEMM (gemm3.py): about twice the rate of the pinned MKL branch, and one fixed float path on every
  CPU with AVX2 and FMA (benchmarks/README.md, "Float path of engine 3");
- the optimizer is torch's fused AdamW (harness/trial/backends.py), whose square root is correctly rounded;
- decoding's cost per token grows with a response's length only by attention's reading of the keys: the KV
  cache is allocated once (prompt + max_new_tokens slots) and written in place, attention reads the filled
  slots as a view (no copy of the cache per token), and the rows of ended responses leave the cache only
  once a quarter of its rows have ended (COMPACT_AT), so that the copies of the cache they cost add up to a
  bounded multiple of it instead of one copy per ending;
- the update's attention runs rows in buckets of similar length (BUCKETS) when padding the responses to one
  length would waste more than a quarter of the attention grid (PADDING_WASTE_MAX; the projections and
  the MLP skip padding anyway, lean.py's Packing).

The prompt is computed once per group (G responses) in the rollout and in the update, as in lean.py.
"""
from __future__ import annotations

import torch

from harness.rollout import gemm3
from harness.registry import FORWARDS
from harness.rollout.base import Forward, Rollout
from harness.rollout.logp import Head
from harness.rollout.lean import LeanEngine, LeanQwen3

COMPACT_AT = 0.75          # drop ended rows from the decode cache once the live ones are ≤ this share of it
PADDING_WASTE_MAX = 0.25   # above this share of padded cells in the update's attention grid, bucket the rows
BUCKETS = 4                # at most this many length buckets (each a multiple of the group size)


class Lean3(LeanQwen3):
    """The lean forward of a module with every projection on engine 3's float path (gemm3.linear), and a
    decode step's attention (one query per row) as two batched matmuls over the cache's filled slots."""

    def __init__(self, model: torch.nn.Module):
        super().__init__(model, linear=gemm3.linear)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """As LeanQwen3._attend; for one query per row (decoding), softmax(q·kᵀ·scale + bias)·v with the
        query heads that share a kv head batched together (no repeated k, v), reading k and v in place. On
        a cache of 150 keys this took 0.46x the time of torch's fused kernel, whose blocks are built for
        many queries (benchmarks/README.md, "Engine 3")."""
        b, t, H, D = q.shape
        if t != 1:
            return super()._attend(q, k, v, bias)
        Hkv = k.shape[1]
        qg = q.view(b, Hkv, H // Hkv, D)                                        # (b, Hkv, H/Hkv, D)
        w = torch.softmax(torch.matmul(qg, k.transpose(-1, -2)) * self.scale + bias, -1)   # (b, Hkv, H/Hkv, s)
        return torch.matmul(w, v).reshape(b, 1, H * D)                        # (b, 1, H·D)


def lean3(model: torch.nn.Module) -> LeanQwen3:
    """Engine 3's forward of `model`."""
    return Lean3(model)


def padding_waste(response_mask: torch.Tensor) -> float:
    """Share of the (b, t) grid of the update's response positions that is padding: 1 − N / (b·t)."""
    valid = response_mask[:, 1:]
    return 1.0 - float(valid.sum()) / max(1, valid.numel())


def buckets(response_mask: torch.Tensor, group_size: int) -> list[torch.Tensor]:
    """Row indices of the update split into at most BUCKETS runs of whole groups, sorted by their longest
    response, when padding every response to the longest wastes more than PADDING_WASTE_MAX; else one run.
    Each run is padded to its own longest response only."""
    b, g = response_mask.shape[0], group_size
    if padding_waste(response_mask) <= PADDING_WASTE_MAX or b // g < 2:
        return [torch.arange(b)]
    longest = response_mask.sum(1).view(b // g, g).amax(1)                      # per group
    order = torch.argsort(longest, stable=True)
    chunks = torch.tensor_split(order, min(BUCKETS, b // g))
    return [(c[:, None] * g + torch.arange(g)).reshape(-1) for c in chunks if len(c)]


def response_logits(model: torch.nn.Module, r: Rollout, rows: slice, group_size: int) -> torch.Tensor:
    """The trainer's forward for `model.forward: lean3`: logits (b, T, V) of rows `rows` of rollout r, as
    lean.response_logits computes them, bucketed by length when padding would waste (buckets())."""
    return _bucketed(lean3(model).response_logits, r, rows, group_size)


def response_hidden(model: torch.nn.Module, r: Rollout, rows: slice, group_size: int) -> Head:
    """The hidden states (b, T, C) behind `response_logits` and the head (the chunked log-probs, whose head
    matmul is torch's, not gemm3's: equal to float rounding)."""
    forward = lean3(model)
    return Head(_bucketed(forward.response_hidden, r, rows, group_size), forward.lm_head)


def _bucketed(states, r: Rollout, rows: slice, group_size: int) -> torch.Tensor:
    """`states(ids, mask, response_ids, response_mask, g)` (the forward's logits or hidden states, (b, T, ·))
    of rows `rows`, bucketed by length when padding would waste (buckets())."""
    ids, mask, resp, rmask = (x[rows] for x in (r.prompt_ids, r.prompt_mask, r.response_ids, r.response_mask))
    b, T = resp.shape
    g = group_size if group_size > 1 and b % group_size == 0 and (rows.start or 0) % group_size == 0 else 1
    parts = buckets(rmask, g)
    if len(parts) == 1:
        return states(ids, mask, resp, rmask, g)
    out = None
    for idx in parts:
        t = max(1, int(rmask[idx].sum(1).max()))                                  # this bucket's longest response
        part = states(ids[idx], mask[idx], resp[idx, :t], rmask[idx, :t], g)                       # (b_k, t, ·)
        if out is None:
            out = part.new_zeros(b, T, part.shape[-1])
        out = out.index_put((idx[:, None], torch.arange(t)[None, :]), part)
    return out


def engine(model: torch.nn.Module, tokenizer) -> LeanEngine:
    """Engine 3's rollouts: LeanEngine's sampling (same interface, same seeded draws) over engine 3's forward,
    with ended rows leaving the cache only in batches (COMPACT_AT)."""
    return LeanEngine(model, tokenizer, forward=lean3, compact_at=COMPACT_AT)


# Its step and evaluation on cumsum-long: reports/reference-v3's own trials (raw.tar.gz: 80 trials of 128 steps at
# m = 4 minibatches, two side by side on the 2-core AMD EPYC) took a median perf/step_s of 1.609 s (÷ 1 + 0.33, the
# dry run's cost of m > 1 minibatches, for one update) and a median of 21.2 s per 2,500-problem evaluation (a
# trial's wall time less its steps, over its 5 evaluations).
FORWARDS.register("lean3")(Forward(response_logits, engine, response_hidden, engine_version=3,
                                   tiny_qwen3_only=True, fused_adamw=True, switches_weights=True, gemm=gemm3.path,
                                   step_s={"cumsum-long": round(1.609 / 1.33, 3)}, eval_s={"cumsum-long": 21.2}))
