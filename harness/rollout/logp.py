"""log π and entropy of response tokens in chunks through the LM head, never a full (b, T, V) float32 copy.

The full path (rollout.token_logp) computes logits (b, T, V), their float32 log_softmax and an exp for the
entropy, and autograd keeps them for the backward: several (b, T, V) float32 copies, ~20 GB each for a
micro-batch of 16 × 2,048 tokens over Qwen3's 151,936-token vocabulary. Here the forward's last hidden states
(after the final norm) and the head's weight go in, and `chunk` tokens at a time are taken through the head:

    z = h_c · Wᵀ / τ           (n, V), n = chunk rows of the N = b·T tokens
    log π(y) = z_y − logsumexp(z)
    H = −Σ_v π_v log π_v       (no gradient, as in the full path)

and only (N,) values, the hidden states and W are kept. The backward recomputes each chunk's z and sends
dz = g · (onehot(y) − softmax(z)) / τ through the head: dh_c = dz · W, dW += dzᵀ · h_c (float32 sum).
Peak memory beyond the model: a few (chunk, V) float32 buffers instead of several (b, T, V).

The same scheme as Liger-Kernel's fused linear cross-entropy (src/liger_kernel/ops/fused_linear_cross_entropy.py
at commit 00eba634c2e9b5f05badbfb67e9b0a4caba301a2: rows chunked through the head, the gradient of each chunk
formed in its forward) and verl's linear cross-entropy with token entropy (verl/utils/kernel/linear_cross_entropy.py
at commit e10499154f2cb6f8b8dbdfe91d59c432ba87ca57: log-probs and entropy from hidden states and the head weight,
an autograd Function). Deviations: plain torch (no Triton kernel), so it runs on CPU and CUDA alike; the backward
recomputes each chunk instead of storing its gradient in the forward (Liger's), so a forward without backward
(the recomputation of behaviour log-probs, π_prox, the reference policy) costs no (N, C) gradient buffer;
entropy carries no gradient.

Values equal the full path's to float rounding (the head's matmul is split into row blocks; lean3's head runs
on gemm3's float path in full and on torch's matmul here): tests/test_logp_chunked.py checks log-probs,
entropy and gradients at 1e-6 relative in float32.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

LARGE_VOCAB = 32_768        # model.logp_chunk_tokens 0 (auto): chunked at or above this vocabulary, full below
AUTO_CHUNK_TOKENS = 1_024   # the chunk under auto: 3 × 1,024 × 151,936 × 4 B = 1.9 GB of buffers for Qwen3's vocabulary


def chunk_tokens(setting: int, vocab: int) -> int:
    """The chunk (tokens through the head at once) that `model.logp_chunk_tokens` = `setting` gives a model of
    vocabulary `vocab`; 0 means the full path. setting > 0: chunks of that many tokens; −1: the full path;
    0 (auto): chunks of AUTO_CHUNK_TOKENS when vocab ≥ LARGE_VOCAB, else the full path (the tiny bases, 14
    tokens: their committed references keep today's arithmetic bit for bit)."""
    if setting > 0:
        return setting
    if setting < 0:
        return 0
    return AUTO_CHUNK_TOKENS if vocab >= LARGE_VOCAB else 0


@dataclass
class Head:
    """A forward's last hidden states of the positions that predict response tokens, and the LM head.

    hidden: (b, T, C) after the final norm, in the model's dtype; logits = hidden · weightᵀ
    weight: (V, C) the head's weight (the embedding's when tied)
    """
    hidden: torch.Tensor
    weight: torch.Tensor


class _ChunkedLogp(torch.autograd.Function):
    """(hidden (N, C), weight (V, C), targets (N,), τ, chunk) -> log π(target) (N,), entropy (N,), float32.
    A chunk holds at most two (n, V) float32 buffers (and the matmul's output when the model is not float32)."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, chunk):
        N = hidden.shape[0]
        logp = torch.empty(N, dtype=torch.float32, device=hidden.device)
        entropy = torch.empty_like(logp)
        for s in range(0, N, chunk):
            logprobs = torch.log_softmax(_scaled_logits(hidden[s:s + chunk], weight, temperature), dim=-1)   # (n, V)
            logp[s:s + chunk] = logprobs.gather(1, targets[s:s + chunk, None]).squeeze(1)
            entropy[s:s + chunk] = logprobs.exp().mul_(logprobs).sum(-1).neg_()
            del logprobs
        ctx.save_for_backward(hidden, weight, targets)
        ctx.temperature, ctx.chunk = temperature, chunk
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, _grad_entropy):
        hidden, weight, targets = ctx.saved_tensors
        tau, chunk = ctx.temperature, ctx.chunk
        want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_h = torch.empty_like(hidden) if want_h else None
        grad_w = torch.zeros_like(weight) if want_w else None       # summed in the head's dtype, as Liger does
        for s in range(0, hidden.shape[0], chunk):
            h, g = hidden[s:s + chunk], grad_logp[s:s + chunk, None]
            p = torch.softmax(_scaled_logits(h, weight, tau), dim=-1)                                     # (n, V)
            dz = p.mul_(-g).scatter_add_(1, targets[s:s + chunk, None], g).div_(tau).to(hidden.dtype)     # (n, V)
            if want_h:
                grad_h[s:s + chunk] = dz @ weight
            if want_w:
                grad_w.addmm_(dz.T, h)
            del p, dz
        return grad_h, grad_w, None, None, None


def _scaled_logits(h: torch.Tensor, weight: torch.Tensor, temperature: float) -> torch.Tensor:
    """h (n, C) through the head, in float32, ÷ τ: (n, V), one buffer when the model is float32 (the matmul's
    output is fresh, so the division is in place)."""
    return (h @ weight.T).float().div_(temperature)


def chunked_token_logp(head: Head, response_ids: torch.Tensor, temperature: float, chunk: int
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """log π(response token) and the entropy per token, both (b, T) float32, from `head` (hidden (b, T, C)),
    `chunk` tokens at a time through the head (forward and backward); entropy without gradient."""
    b, T, C = head.hidden.shape
    logp, entropy = _ChunkedLogp.apply(head.hidden.reshape(b * T, C), head.weight, response_ids.reshape(-1),
                                       temperature, max(1, chunk))
    return logp.view(b, T), entropy.view(b, T)
