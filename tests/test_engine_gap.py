"""The engine–trainer gap rule per dtype (harness/rollout/gap.py)."""
from __future__ import annotations

import contextlib
import math

import pytest
import torch

from harness.rollout import token_logp_of
from harness.rollout.gap import EngineGap, EngineGapError, head_gap, measure
from harness.rollout.hf import HFEngine
from harness.tasks import make_task
from harness.trial.batches import Batches
from harness.trial.world import Solo

TRAINER = torch.tensor([[-1.0, -2.0, -0.5, -3.0]])
MASK = torch.tensor([[True, True, True, False]])


def test_float32_passes_rounding_and_fails_a_real_gap():
    ok = measure(TRAINER + torch.tensor([[5e-5, -2e-5, 0.0, 9.0]]), TRAINER, MASK, torch.float32)
    assert ok == EngineGap(pytest.approx(5e-5, rel=1e-3), 0)      # the padding's 9 nats are not a token
    with pytest.raises(EngineGapError, match=r"up to 0.0002 nats on 1 tokens, over 0.0001 in float32"):
        measure(TRAINER + torch.tensor([[0.0, 2e-4, 0.0, 0.0]]), TRAINER, MASK, torch.float32)


def test_bfloat16_counts_outliers_and_never_fails():
    # |gaps| 0.3, 1.5, 1.0 on the valid tokens: one over 1 nat (1.0 is not over); the padding's 7 is not counted
    gap = measure(TRAINER + torch.tensor([[0.3, -1.5, 1.0, 7.0]]), TRAINER, MASK, torch.bfloat16)
    assert gap == EngineGap(1.5, 1)
    assert gap.metrics() == {"is/engine_gap_max": 1.5, "is/engine_gap_outliers": 1.0}


def test_parts_merge_as_max_and_sum():
    assert EngineGap.merge([EngineGap(0.2, 1), None, EngineGap(0.7, 3)]) == EngineGap(0.7, 4)
    assert EngineGap.merge([None, None]) is None
    # the output layer's gap: the largest known one; absent from the metrics when no part measured it
    assert EngineGap.merge([EngineGap(0.2, 1, 3e-6), EngineGap(0.7, 3), EngineGap(0.1, 0, 8e-6)]) == EngineGap(0.7, 4, 8e-6)
    assert EngineGap(0.5, 2, 0.25).metrics() == {"is/engine_gap_max": 0.5, "is/engine_gap_outliers": 2.0,
                                                 "is/engine_head_gap": 0.25}
    assert "is/engine_head_gap" not in EngineGap(0.5, 2).metrics()


# Two-token vocabulary, trainer logits (0, 0): log_softmax (-ln 2, -ln 2).
HEAD = torch.tensor([[0.0, 0.0]])


def test_head_gap_is_on_log_softmax_and_follows_the_float32_rule():
    # a constant added to a row's logits changes no probability: gap 0
    assert head_gap(HEAD + 5.0, HEAD, torch.float32) == 0.0
    # +d on the first logit: log_softmax (d − ln(e^d + 1), −ln(e^d + 1)) ≈ (−ln 2 + d/2, −ln 2 − d/2), gap d/2;
    # float32 resolves values near ln 2 to 6e-8, so the difference of two is good to about 1.2e-7
    assert head_gap(HEAD + torch.tensor([[4e-5, 0.0]]), HEAD, torch.float32) == pytest.approx(2e-5, abs=1.2e-7)
    # engine logits (ln 3, 0): log_softmax (ln 3/4, ln 1/4) against (ln 1/2, ln 1/2): gaps ln 1.5 and ln 2
    stale = HEAD + torch.tensor([[math.log(3.0), 0.0]])
    with pytest.raises(EngineGapError, match=r"output layer differs from the trainer's by 0.693 nats, over 0.0001 "
                                             r"in float32: the engine kept an old lm_head"):
        head_gap(stale, HEAD, torch.float32)
    with pytest.raises(EngineGapError, match="0.0002 nats"):          # d = 4e-4: gap 2e-4, over the flag
        head_gap(HEAD + torch.tensor([[4e-4, 0.0]]), HEAD, torch.float32)


def test_head_gap_in_bfloat16_is_a_number_to_watch():
    stale = HEAD + torch.tensor([[math.log(3.0), 0.0]])
    assert head_gap(stale, HEAD, torch.bfloat16) == pytest.approx(math.log(2.0), rel=1e-6)
    assert head_gap(stale, HEAD, torch.float16) == pytest.approx(math.log(2.0), rel=1e-6)   # bf16's rule


class _OwnCopy(HFEngine):
    """The transformers engine posing as one with its own weights whose log-probs are off by `shift` nats on
    the first token of every response."""
    shares_weights = False
    shift = 0.0
    head_gap = 3e-6                  # the output layer's gap this engine reports for its last weight push

    def pinned(self, model, version):
        return contextlib.nullcontext(self)

    def generate(self, *args, **kwargs):
        r = super().generate(*args, **kwargs)
        r.logp_behavior[:, 0] += self.shift
        return r


@pytest.mark.parametrize("shift, fails", [(0.0, False), (1e-3, True)])
def test_a_batch_from_an_engine_with_its_own_weights_is_measured(tiny_model_dir, shift, fails):
    from harness.bases.models import load_model

    model, tok = load_model(tiny_model_dir)
    engine = _OwnCopy(model, tok)
    engine.shift = shift
    task = make_task("addrev")
    batches = Batches(seed=0, prompts=2, group_size=2, shards=1, temperature=1.0, max_new_tokens=4,
                      problems=task.problems("train", 4, 0), task=task, sampler=engine,
                      token_logp=token_logp_of("hf"), recompute_behavior=False, pad_token_id=tok.pad_token_id,
                      device=torch.device("cpu"), world=Solo())
    if fails:
        with pytest.raises(EngineGapError):
            batches.sample(0, model, 0)
    else:
        gap = batches.sample(0, model, 0).engine_gap
        assert gap.outliers == 0 and gap.max <= 1e-4
        assert gap.head == 3e-6 and gap.metrics()["is/engine_head_gap"] == 3e-6
