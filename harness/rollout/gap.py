"""The engine–trainer gap: an engine with its own copy of the weights (vLLM) against the trainer's recomputation.

After every batch from such an engine, the trainer recomputes the sampled tokens' log-probs with the weights
the engine was given, and the per-token gap |log π_engine − log π_trainer| (nats) over valid tokens is
measured and logged (`is/engine_gap_max`, `is/engine_gap_outliers`; docs/metrics.md). What the gap may be
depends on the dtype both sides compute in (the trainer's, model.dtype), so the rule is per dtype:

- float32: two implementations of the same forward differ by float rounding only (docs/vllm.md measured
  2.1e-5 to 2.9e-5 on vLLM's CPU build): a gap over 1e-4 is a bug (weights not synced, a different forward,
  a different temperature), and the run stops with a one-line error.
- bfloat16: the two sides round differently at every layer, and single tokens differ by tenths of a nat
  with nothing wrong: TRL issue 6789 (huggingface/trl, comment of 2026-09-17) measured on Qwen2.5-0.5B, 3,916
  tokens at temperature 1, a per-token |gap| of p95 0.113 and max 0.477 nats between vLLM and a bf16 trainer,
  and max 0.656 between two bf16 trainer passes that only batched the rows differently. So bf16 never fails
  the run: tokens over 1 nat (a ratio beyond e^±1, above every gap of that measurement) are counted as
  outliers, a metric to watch, and the run goes on (the estimators' truncation/masking is the remedy;
  docs/staleness.md).

The output layer is checked on its own after every weight update (`head_gap`): with tied embeddings
(lm_head = embed_tokens, as in Qwen3-0.6B/1.7B) an engine can keep an old output layer while everything
else is updated (docs/vllm.md measured 0.6 nats on vLLM's CPU build when `lm_head.weight` is not pushed).
The same probe hidden states go through the engine's output layer and the trainer's; the largest gap of
their log-softmaxes follows the same rule per dtype and is logged as `is/engine_head_gap`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


class EngineGapError(RuntimeError):
    """The engine's log-probs and the trainer's disagree beyond float rounding in a dtype where that is a bug."""


@dataclass(frozen=True)
class GapRule:
    flag_nats: float        # a token's |gap| above this is an outlier
    fails: bool             # an outlier stops the run (a bug) instead of being counted


RULES = {torch.float32: GapRule(1e-4, fails=True), torch.bfloat16: GapRule(1.0, fails=False)}


def rule_of(dtype: torch.dtype) -> GapRule:
    return RULES.get(dtype, RULES[torch.bfloat16])           # float16 and other low-precision dtypes: bf16's rule


@dataclass(frozen=True)
class EngineGap:
    """One batch's gap: its largest per-token |gap| (nats) and how many tokens were over the dtype's flag; and
    the output layer's gap at the engine's last weight update (`head_gap`), where the engine measures it."""
    max: float
    outliers: int
    head: float | None = None

    @staticmethod
    def merge(gaps: "list[EngineGap | None]") -> "EngineGap | None":
        """The gap of a batch put together from parts (shards, versions): max of maxima, sum of outliers."""
        known = [g for g in gaps if g is not None]
        heads = [g.head for g in known if g.head is not None]
        return EngineGap(max(g.max for g in known), sum(g.outliers for g in known),
                         max(heads) if heads else None) if known else None

    def metrics(self) -> dict[str, float]:
        head = {} if self.head is None else {"is/engine_head_gap": self.head}
        return {"is/engine_gap_max": self.max, "is/engine_gap_outliers": float(self.outliers), **head}


def measure(engine_logp: torch.Tensor, trainer_logp: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype,
            head: float | None = None) -> EngineGap:
    """The gap of one batch, (B, T) log-probs and mask, under the rule of `dtype` (the trainer's): a float32
    gap over its flag raises EngineGapError; in bfloat16 tokens over the flag are counted. `head`: the
    engine's `head_gap` at its last weight update, carried along."""
    rule = rule_of(dtype)
    gap = (trainer_logp - engine_logp.to(trainer_logp.device)).abs()[mask]
    worst, outliers = float(gap.max()) if gap.numel() else 0.0, int((gap > rule.flag_nats).sum())
    if outliers and rule.fails:
        raise EngineGapError(f"engine and trainer log-probs differ by up to {worst:.3g} nats on {outliers} tokens, over "
                             f"{rule.flag_nats:g} in {str(dtype).removeprefix('torch.')}: the engine is not sampling "
                             f"with the trainer's weights or forward (check the weight sync; docs/vllm.md)")
    return EngineGap(worst, outliers, head)


def head_gap(engine_logits: torch.Tensor, trainer_logits: torch.Tensor, dtype: torch.dtype) -> float:
    """The output layer's gap after a weight update: the largest |log_softmax| difference (nats) between the
    engine's and the trainer's logits of the same probe hidden states, (k, V) each, under the rule of `dtype`:
    over the flag in float32 raises EngineGapError; in bfloat16 the value is returned, a metric to watch."""
    rule = rule_of(dtype)
    gap = float((engine_logits.float().log_softmax(-1) - trainer_logits.float().log_softmax(-1)).abs().max())
    if gap > rule.flag_nats and rule.fails:
        raise EngineGapError(f"after the weight update the engine's output layer differs from the trainer's by "
                             f"{gap:.3g} nats, over {rule.flag_nats:g} in {str(dtype).removeprefix('torch.')}: "
                             f"the engine kept an old lm_head (with tied embeddings, push the full state dict, "
                             f"lm_head.weight included; docs/vllm.md)")
    return gap
