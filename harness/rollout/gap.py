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


@dataclass(frozen=True)
class EngineGap:
    """One batch's gap: its largest per-token |gap| (nats) and how many tokens were over the dtype's flag."""
    max: float
    outliers: int

    @staticmethod
    def merge(gaps: "list[EngineGap | None]") -> "EngineGap | None":
        """The gap of a batch put together from parts (shards, versions): max of maxima, sum of outliers."""
        known = [g for g in gaps if g is not None]
        return EngineGap(max(g.max for g in known), sum(g.outliers for g in known)) if known else None

    def metrics(self) -> dict[str, float]:
        return {"is/engine_gap_max": self.max, "is/engine_gap_outliers": float(self.outliers)}


def measure(engine_logp: torch.Tensor, trainer_logp: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype) -> EngineGap:
    """The gap of one batch, (B, T) log-probs and mask, under the rule of `dtype` (the trainer's): a float32
    gap over its flag raises EngineGapError; in bfloat16 tokens over the flag are counted."""
    rule = RULES.get(dtype, RULES[torch.bfloat16])           # float16 and other low-precision dtypes: bf16's rule
    gap = (trainer_logp - engine_logp.to(trainer_logp.device)).abs()[mask]
    worst, outliers = float(gap.max()) if gap.numel() else 0.0, int((gap > rule.flag_nats).sum())
    if outliers and rule.fails:
        raise EngineGapError(f"engine and trainer log-probs differ by up to {worst:.3g} nats on {outliers} tokens, over "
                             f"{rule.flag_nats:g} in {str(dtype).removeprefix('torch.')}: the engine is not sampling "
                             f"with the trainer's weights or forward (check the weight sync; docs/vllm.md)")
    return EngineGap(worst, outliers)
