"""GPU memory per process of a trial on a local model, projected from arithmetic (`check`, `run --dry-run`).

Per GPU (one training process per GPU, `train.workers` N_d of them), in bytes, Ψ the model's parameters,
b the bytes of model.dtype (2 for bfloat16, 4 for float32):

    weights      b·Ψ                      (÷ N_d under ZeRO-3)
    gradients    b·Ψ                      (÷ N_d under ZeRO-2 and -3)
    optimizer    torch AdamW: 2·b·Ψ (two moments in the parameters' dtype)
                 DeepSpeed: bf16 12·Ψ (float32 master copy and two moments), float32 8·Ψ  (÷ N_d under ZeRO ≥ 1;
                 0 with zero_offload: they live on the CPU) — the ZeRO paper's accounting (arXiv 1910.02054, §3)
    reference    b·Ψ when train.kl_beta > 0 (the frozen reference policy)
    activations  per token of the micro-batch (train.micro_batch_size × (PROMPT_TOKENS + max_new_tokens)), the
                 tensors a decoder layer keeps for its backward, ACT_PER_LAYER (below), × b × layers; with
                 model.gradient_checkpointing only each layer's input (C per token) plus one layer's full set
                 while it is recomputed
    log-probs    full logits: micro × max_new_tokens × V × (b + 12 or 16): the logits in model.dtype, their
                 float32 copy (bf16 only), ÷ τ, log_softmax and exp (four float32 copies measured; issue 50);
                 chunked (model.logp_chunk_tokens, rollout/logp.py): chunk × V × (b + 12)
    vLLM         gpu_memory_utilization × the card (model.engine: vllm; vLLM's weights and KV cache live in it)
    CUDA context CONTEXT_GIB (assumed)

Not counted: allocator fragmentation, NCCL buffers, the optimizer step's temporaries, the rollout's KV cache
with model.engine hf. A sanity check against the one GPU measurement (benchmarks/README.md, "GPU check", H200):
the Qwen3-0.6B-shaped model, bf16, torch AdamW, micro-batches of 64 × 128 new tokens, full logits, peak 40.4 GiB
measured; this arithmetic gives 38.4 GiB for it (tests/test_memory.py).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from harness.registry import MODELS

GIB = 2**30
PROMPT_TOKENS = 256          # prompt tokens assumed per response (plan.PROMPT_TOKENS_ASSUMED)
CONTEXT_GIB = 1.0            # the CUDA context and cuBLAS workspaces, assumed


@dataclass(frozen=True)
class Architecture:
    """The sizes of a decoder-only transformer (a Qwen3-like config.json)."""
    vocab: int
    hidden: int              # C
    layers: int
    heads: int               # H query heads
    kv_heads: int            # Hkv
    head_dim: int            # D
    intermediate: int        # I, the MLP's width
    tied: bool               # head = embedding

    @property
    def params(self) -> int:
        C, q, kv, I = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        layer = C * q + 2 * C * kv + q * C + 3 * C * I + 2 * C + 2 * self.head_dim       # projections, MLP, norms
        return self.layers * layer + self.vocab * C * (1 if self.tied else 2) + C

    @property
    def act_per_layer(self) -> int:
        """Elements one decoder layer keeps per token for its backward (flash/SDPA attention: no T×T scores):
        the input and the normed input (2C), q, k, v before and after norm and RoPE (2(H + 2Hkv)D), the
        attention's output (HD), the residual and its norm (2C), gate, up, silu(gate) and their product (4I)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return 4 * self.hidden + 2 * (q + 2 * kv) + q + 4 * self.intermediate


# Public config.json values of Qwen3 models (huggingface.co/Qwen/<name>/blob/main/config.json), for suites whose
# model.path is not on this machine.
KNOWN = {
    "Qwen3-0.6B": Architecture(151_936, 1024, 28, 16, 8, 128, 3072, True),
    "Qwen3-1.7B": Architecture(151_936, 2048, 28, 16, 8, 128, 6144, True),
    "Qwen3-4B": Architecture(151_936, 2560, 36, 32, 8, 128, 9728, True),
    "Qwen3-8B": Architecture(151_936, 4096, 36, 32, 8, 128, 12_288, False),
}


def architecture(path: str) -> tuple[Architecture | None, str]:
    """The model at `path`: from its config.json when present, else a known Qwen3 by its directory name."""
    config = Path(path) / "config.json"
    if config.is_file():
        c = json.loads(config.read_text())
        heads = c["num_attention_heads"]
        return Architecture(c["vocab_size"], c["hidden_size"], c["num_hidden_layers"], heads,
                            c.get("num_key_value_heads", heads), c.get("head_dim", c["hidden_size"] // heads),
                            c["intermediate_size"], bool(c.get("tie_word_embeddings", False))), "config.json"
    name = Path(path).name
    for known, arch in KNOWN.items():
        if re.fullmatch(re.escape(known), name, flags=re.IGNORECASE):
            return arch, f"{known}'s published config"
    return None, ""


@dataclass(frozen=True)
class Projection:
    """GiB per GPU, item by item, against the card."""
    items: tuple[tuple[str, float], ...]
    card_gib: float

    @property
    def total(self) -> float:
        return sum(g for _, g in self.items)

    @property
    def fits(self) -> bool:
        return self.total <= self.card_gib

    def line(self) -> str:
        parts = ", ".join(f"{name} {gib:.1f}" for name, gib in self.items if gib)
        return f"{self.total:.1f} of {self.card_gib:g} GiB per GPU ({parts})"


def project(cfg, arch: Architecture, card_gib: float, prompt_tokens: int = PROMPT_TOKENS) -> Projection:
    """The projection of run config `cfg` (harness.config.run.RunConfig) on `arch`, one card of `card_gib`, with
    `prompt_tokens` per prompt."""
    from harness.rollout.logp import chunk_tokens

    m, tc = cfg.model, cfg.train
    b = 2 if m.dtype == "bfloat16" else 4
    psi, nd = arch.params, tc.workers
    zero_backend = cfg.backend.settings                     # a ZeRO backend's settings (deepspeed), else None
    zero = getattr(zero_backend, "zero_stage", 0)
    if hasattr(zero_backend, "zero_stage"):
        optimizer = 0 if zero_backend.zero_offload else (12 if b == 2 else 8) * psi / (nd if zero >= 1 else 1)
    else:
        optimizer = 2 * b * psi
    micro = tc.micro_batch_size or tc.prompts_per_step * cfg.group_size // nd
    tokens = micro * (prompt_tokens + tc.max_new_tokens)
    if m.gradient_checkpointing:
        activations = tokens * b * (arch.layers * arch.hidden + arch.act_per_layer)
    else:
        activations = tokens * b * arch.layers * arch.act_per_layer
    chunk = chunk_tokens(m.logp_chunk_tokens, arch.vocab)
    logp = (chunk * arch.vocab * (b + 12) if chunk else
            micro * tc.max_new_tokens * arch.vocab * (b + (12 if b == 4 else 16)))
    items = [("weights", b * psi / (nd if zero == 3 else 1)), ("gradients", b * psi / (nd if zero >= 2 else 1)),
             ("optimizer", optimizer), ("reference", b * psi if tc.kl_beta > 0 else 0),
             ("activations" + (" (checkpointed)" if m.gradient_checkpointing else ""), activations),
             (f"log-probs ({f'chunks of {chunk}' if chunk else 'full logits'})", logp),
             ("vLLM", getattr(cfg.engine.settings, "gpu_memory_utilization", 0) * card_gib * GIB),
             ("CUDA context", CONTEXT_GIB * GIB)]
    return Projection(tuple((name, value / GIB) for name, value in items), card_gib)


def suite_lines(suite, trials) -> tuple[list[str], str | None]:
    """For a suite of local models on GPUs: the projection of its largest trial, and the one-line refusal
    when that exceeds resources.gpu_memory_gib (None when it fits or cannot be projected)."""
    if not trials or not MODELS.get(trials[0].config.model.kind).gpu_projection or not suite.resources.gpu:
        return [], None
    arch, where = architecture(trials[0].config.model.path)
    if arch is None:
        return ["memory: not projected (no config.json at model.path and not a known Qwen3 by name)"], None
    card = suite.resources.gpu_memory_gib
    worst, trial = max(((project(t.config, arch, card), t) for t in trials), key=lambda pt: pt[0].total)
    lines = [f"memory: {worst.line()}; {arch.params / 1e9:.2f}B parameters from {where}, trial {trial.trial_id}"]
    if worst.fits:
        return lines, None
    return lines, (f"resources.gpu_memory_gib: trial {trial.trial_id} projects to {worst.line()}, over the card "
                   f"(harness/suite/memory.py); set model.gradient_checkpointing: true, a smaller "
                   f"train.micro_batch_size or engine.vllm.gpu_memory_utilization, or a larger card")
