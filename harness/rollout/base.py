"""The rollout engine interface."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Mapping, Protocol

import torch

from harness.rollout.logp import Head


@dataclass
class Rollout:
    """Responses to len(prompts) × n samples, prompt-major (responses of prompt j are rows j*n .. j*n+n-1).

    prompt_ids:     (B, P) left-padded prompt tokens;  prompt_mask (B, P)
    response_ids:   (B, T) response tokens, right-padded; response_mask (B, T) valid tokens (incl. EOS)
    logp_behavior:  (B, T) log-prob of each response token under the generating policy (0 on padding)
    version:        (B,) policy version (optimizer updates applied) that generated each response
    texts:          decoded responses (special tokens stripped)
    logp_rollout:   optional (B, T) the engine's own log-probs when they differ from the behavior policy's
                    (harness/rollout/mismatch.py: perturbed weights, top-p/top-k renormalized); 0 on padding
    token_version:  optional (B, T) the policy version that generated each token, when a response's tokens
                    come from several (in-flight weight updates; `version` is then its first token's); None: `version`
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    logp_behavior: torch.Tensor
    version: torch.Tensor
    texts: list[str]
    seconds: float = 0.0
    logp_rollout: torch.Tensor | None = None
    token_version: torch.Tensor | None = None

    def to(self, device: torch.device) -> "Rollout":
        moved = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in vars(self).items()}
        return Rollout(**moved)

    @staticmethod
    def concat(parts: list["Rollout"], pad_token_id: int) -> "Rollout":
        """The rows of `parts` in order, prompts left-padded and responses right-padded to the widest part
        (padding is masked out, so every row's log-probs are unchanged); `seconds` is the longest part's."""
        P = max(r.prompt_ids.shape[1] for r in parts)
        T = max(r.response_ids.shape[1] for r in parts)

        def pad(t: torch.Tensor, width: int, value: float | bool, left: bool) -> torch.Tensor:
            fill = torch.full((t.shape[0], width - t.shape[1]), value, dtype=t.dtype, device=t.device)
            return torch.cat([fill, t] if left else [t, fill], dim=1)

        return Rollout(torch.cat([pad(r.prompt_ids, P, pad_token_id, True) for r in parts]),
                       torch.cat([pad(r.prompt_mask, P, 0, True) for r in parts]),
                       torch.cat([pad(r.response_ids, T, pad_token_id, False) for r in parts]),
                       torch.cat([pad(r.response_mask, T, False, False) for r in parts]),
                       torch.cat([pad(r.logp_behavior, T, 0.0, False) for r in parts]),
                       torch.cat([r.version for r in parts]), [t for r in parts for t in r.texts],
                       max(r.seconds for r in parts),
                       None if any(r.logp_rollout is None for r in parts) else
                       torch.cat([pad(r.logp_rollout, T, 0.0, False) for r in parts]),
                       None if any(r.token_version is None for r in parts) else
                       torch.cat([pad(r.token_version, T, 0, False) for r in parts]))

    def take(self, rows: list[int]) -> "Rollout":
        """The rows `rows`, in that order."""
        index = torch.tensor(rows, dtype=torch.long)
        picked = {k: (v[index.to(v.device)] if isinstance(v, torch.Tensor) else v) for k, v in vars(self).items()}
        return Rollout(**{**picked, "texts": [self.texts[i] for i in rows]})

    @property
    def num_tokens(self) -> int:
        return int(self.response_mask.sum())


class RolloutEngine(Protocol):
    version: int
    shares_weights: bool     # True: generates with the model object it is given; False: holds its own copy
                             # (and may say its output layer's gap at its last weight push as `head_gap`, gap.py)
    switches_midway: bool    # generate(..., policies=...) loads new weights between two decoding steps


    def generate(self, prompts: list[str], n: int, *, temperature: float, max_new_tokens: int, seed: int) -> Rollout:
        """Sample n responses per prompt; temperature 0 = greedy. An engine that `switches_midway` also takes
        `policies=[(first token, model, version), ...]`: token t sampled by the last policy starting at or
        before t (in-flight weight updates; the rollout then records `token_version`)."""

    def sync_weights(self, model: torch.nn.Module, version: int) -> None:
        """Make the engine generate with `model`'s current weights, tagged as `version`."""

    def pinned(self, model: torch.nn.Module, version: int) -> ContextManager["RolloutEngine"]:
        """An engine that generates with `model`'s weights as `version` for the duration of the block, safe
        to use while another thread (the asynchronous producer, or the trainer evaluating) does the same."""


# (model, rollout, rows, group_size) -> logits (b, T, V) predicting each response token of those rows
ResponseLogits = Callable[[torch.nn.Module, Rollout, slice, int], torch.Tensor]
# (model, rollout, rows, group_size) -> the hidden states (b, T, C) behind those logits and the head (logp.Head)
ResponseHidden = Callable[[torch.nn.Module, Rollout, slice, int], Head]


def no_hidden(model: torch.nn.Module, r: Rollout, rows: slice, group_size: int) -> Head:
    raise ValueError("model.logp_chunk_tokens: this model.forward does not expose its hidden states for the chunked "
                     "log-probs; set model.logp_chunk_tokens: -1 (full logits)")


@dataclass(frozen=True)
class Forward:
    """A model forward (`forward:`, registry FORWARDS): the trainer's logits of response tokens, the
    engine that samples with the same forward (engine: hf), and the hidden states and head behind the
    logits, which the chunked log-probs take through the head a chunk of tokens at a time (rollout/logp.py)."""
    response_logits: ResponseLogits
    engine: Callable[[torch.nn.Module, Any], RolloutEngine]          # (model, tokenizer) -> engine
    response_hidden: ResponseHidden = no_hidden
    engine_version: int = 1                 # the trial's engine version (the benchmark versions; the dry run's line):
                                            # 1 transformers, 2 the lean forward, 3 lean3 (own float path, fused AdamW)
    tiny_qwen3_only: bool = False           # written for Qwen3 models like the tiny bases: float32, an in-process
                                            # engine, a backend that runs it (the run config refuses the rest)
    fused_adamw: bool = False               # its optimizer is torch's fused AdamW (trial/backends.py; lean3)
    switches_weights: bool = False          # its sampler switches weights between two decoding steps (in-flight
                                            # updates, traces of several segments: the lean engines)
    checkpointing: bool = False             # runs transformers' layers, which model.gradient_checkpointing wraps
    gemm: Callable[[], str] | None = None   # reads back the library that computes its matrix products when not
                                            # torch's (lean3: OpenBLAS, rollout/gemm3.py): part of its float path
    # The dry run's estimate on the tiny bases (suite/plan.py; where each figure was measured: benchmarks/README.md,
    # "Projection constants (plan.py)"), per task: its speed-up over the transformers forward's step, or its own
    # measured s per 128-response step of one update and per evaluation (of plan.EVAL_FIGURE_PROBLEMS problems),
    # which take precedence.
    speedup: Mapping[str, float] = field(default_factory=dict)
    step_s: Mapping[str, float] = field(default_factory=dict)
    eval_s: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Engine:
    """A rollout engine's registry entry (ENGINES): its factory and what it can do, which the run config's rules
    ask (config/components.py `can`). A plain factory registered as an engine declares nothing (all False)."""
    build: Callable[..., RolloutEngine]     # (model, tokenizer, path, settings: EngineSettings, seed) -> engine
    in_process: bool = False                # samples with the configured forward on the trainer's own weights
    supports_mismatch: bool = False         # the mismatched engine (rollout/mismatch.py) can stand in for it
    multi_worker: bool = False              # each data-parallel worker can run its own (docs/workers.md)

    def __call__(self, model: torch.nn.Module, tokenizer: Any, path: Any, settings: EngineSettings,
                 seed: int) -> RolloutEngine:
        return self.build(model, tokenizer, path, settings, seed)


@dataclass(frozen=True)
class EngineSettings:
    """What a rollout engine may be built from, besides the model: the run config's forward, dtype and the
    engine's own settings (the class registered with it: `engine: {name: {...}}`; None: it takes none)."""
    forward: str = "hf"
    dtype: str = "float32"
    own: Any = None


def sample_token(logits: torch.Tensor, temperature: float, gen: torch.Generator, done: torch.Tensor,
                 pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One decoding step of the engines that sample themselves: the next token of each row, (B,), sampled
    at `temperature` with `gen` (greedy at 0), and its log-prob; rows already `done` get padding and 0."""
    if temperature > 0:
        logprobs = torch.log_softmax(logits / temperature, dim=-1)
        token = torch.multinomial(logprobs.exp(), 1, generator=gen).squeeze(1)
    else:
        logprobs = torch.log_softmax(logits, dim=-1)
        token = logits.argmax(-1)
    token = torch.where(done, torch.full_like(token, pad_token_id), token)
    return token, torch.where(done, torch.zeros(()), logprobs.gather(1, token[:, None]).squeeze(1))
