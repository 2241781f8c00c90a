"""Engine version 3 (`model.forward: lean3`, harness/rollout/lean3.py and gemm3.py): its matmuls, its forward
against transformers, its long-response decoding, its config identity and its optimizer."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from transformers import Qwen3ForCausalLM

from harness.bases import base_identity
from harness.bases.models import load_model
from harness.rollout import gemm3, lean3, response_logits
from harness.rollout.hf import HFEngine
from harness.store.archive import committed_results
from harness.config.expand import load_suite_trials
from harness.rollout.lean import LeanEngine
from harness.config.run import build_run_config
from harness.config.dicts import to_dict
from harness.store import trialdir
from harness.tasks import make_task
from harness.registry import FORWARDS
from harness.trial import numerics
from harness.trial.backends import make_backend
from harness.rollout import token_logp
from tests.test_lean import PROMPTS, gqa_model

REPO = Path(__file__).resolve().parents[1]

LEAN3 = response_logits("lean3")


class _NoEos:
    """A tokenizer whose <eos> is never sampled, so that every response runs max_new_tokens."""
    eos_token_id = -1

    def __init__(self, tok):
        self._tok = tok

    def __getattr__(self, name):
        return getattr(self._tok, name)

    def __call__(self, *args, **kwargs):
        return self._tok(*args, **kwargs)


def test_gemm3_computes_the_product_in_every_layout_and_its_gradients():
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(37, 70, generator=gen, dtype=torch.float64), torch.randn(70, 23, generator=gen, dtype=torch.float64)
    exact = a @ b                                               # float64: the reference the float32 results round
    for x in (a.float(), a.float().t().contiguous().t()):       # contiguous, and a transpose's view
        for y in (b.float(), b.float().t().contiguous().t()):
            assert (gemm3.mm(x, y).double() - exact).abs().max() < 1e-4
    x = torch.randn(3, 5, 70, generator=gen, requires_grad=True)
    w = torch.randn(23, 70, generator=gen, requires_grad=True)
    gx, gw = torch.autograd.grad((gemm3.linear(x, w) ** 2).sum(), (x, w))
    rx, rw = torch.autograd.grad((torch.nn.functional.linear(x.double(), w.double()) ** 2).sum(), (x, w))
    assert (gx - rx).abs().max() < 1e-3 and (gw - rw).abs().max() < 1e-3     # sums of ~1e3-sized terms
    assert gemm3.path().startswith("openblas=haswell ")


def test_gemm3_repeats_its_bits():
    a, b = torch.randn(256, 512), torch.randn(512, 384)
    assert torch.equal(gemm3.mm(a, b), gemm3.mm(a.clone(), b.clone()))


def test_lean3_logp_and_gradients_match_transformers_on_a_frozen_v2_base():
    model, tok = load_model(base_identity(build_run_config({"model": {"kind": "tiny", "base": "tiny-cumsum-v2a"}}).model)[0])
    problems = [p.prompt for p in make_task("cumsum").problems("train", 8, 0)]
    r = HFEngine(model, tok).generate(problems, n=16, temperature=1.0, max_new_tokens=21, seed=3)
    valid, params = r.response_mask, list(model.parameters())
    for group_size in (16, 1):
        hf_logp, hf_ent = token_logp(model, r, slice(None), 1.0, group_size)
        logp, ent = token_logp(model, r, slice(None), 1.0, group_size, LEAN3)
        assert (logp - hf_logp).detach()[valid].abs().max() < 1e-5
        assert (ent - hf_ent)[valid].abs().max() < 1e-5
    # The gradients are sums over ~2,000 tokens that OpenBLAS adds in another order than MKL (3e-6 of a tensor's
    # largest entry apart, seen): each is checked against the float64 gradient, no farther from it than twice
    # transformers' own float32 gradient is (relative to the tensor's largest entry; floor 1e-6).
    m64 = copy.deepcopy(model).double()
    g64 = torch.autograd.grad(token_logp(m64, r, slice(None), 0.7, 16)[0][valid].sum(), list(m64.parameters()))
    g_hf = torch.autograd.grad(token_logp(model, r, slice(None), 0.7, 16)[0][valid].sum(), params)
    g_3 = torch.autograd.grad(token_logp(model, r, slice(None), 0.7, 16, LEAN3)[0][valid].sum(), params)
    for (name, _), exact, a, b in zip(model.named_parameters(), g64, g_hf, g_3):
        scale = exact.abs().max()
        assert (b.double() - exact).abs().max() / scale <= max(2 * (a.double() - exact).abs().max() / scale, 1e-6), name


def test_lean3_rollouts_match_transformers_with_grouped_kv_heads_and_long_responses():
    model, tok = gqa_model()
    r = lean3.engine(model, tok).generate(PROMPTS, n=3, temperature=1.0, max_new_tokens=6, seed=1)
    valid = r.response_mask
    assert valid.sum(1).min() < valid.shape[1] == valid.sum(1).max()        # ended rows, kept in the cache a while
    assert torch.equal(valid, valid.cumprod(1).bool())
    hf_logp = token_logp(model, r, slice(None), 1.0)[0].detach()
    assert (r.logp_behavior - hf_logp)[valid].abs().max() < 1e-5
    for group_size in (3, 1):
        assert (token_logp(model, r, slice(None), 1.0, group_size, LEAN3)[0].detach() - hf_logp)[valid].abs().max() < 1e-5
    long = lean3.engine(model, _NoEos(tok)).generate(PROMPTS, n=2, temperature=1.0, max_new_tokens=96, seed=0)
    assert long.response_mask.all() and long.response_ids.shape == (8, 96)  # positions past the config's 64
    hf_long = token_logp(model, long, slice(None), 1.0)[0].detach()
    assert (long.logp_behavior - hf_long).abs().max() < 1e-5
    same = HFEngine(model, _NoEos(tok)).generate(PROMPTS, n=2, temperature=1.0, max_new_tokens=96, seed=0)
    assert (same.logp_behavior - long.logp_behavior).abs().max() < 1e-5


def test_the_update_buckets_rows_by_length_when_padding_would_waste_a_quarter():
    model, tok = gqa_model()
    r = LeanEngine(model, tok).generate(PROMPTS * 2, n=2, temperature=1.0, max_new_tokens=8, seed=1)
    assert lean3.padding_waste(r.response_mask) > lean3.PADDING_WASTE_MAX          # this batch: lengths 1-8
    parts = lean3.buckets(r.response_mask, 2)
    assert len(parts) > 1 and sorted(torch.cat(parts).tolist()) == list(range(16))
    assert all(int(p[0]) % 2 == 0 and torch.equal(p.view(-1, 2)[:, 1], p.view(-1, 2)[:, 0] + 1) for p in parts)
    hf_logp = token_logp(model, r, slice(None), 1.0)[0].detach()
    assert (token_logp(model, r, slice(None), 1.0, 2, LEAN3)[0].detach() - hf_logp)[r.response_mask].abs().max() < 1e-5
    full = torch.ones(4, 6, dtype=torch.bool)
    assert lean3.padding_waste(full) == 0.0 and len(lean3.buckets(full, 2)) == 1


def test_a_lean3_policy_saves_and_loads_as_a_transformers_checkpoint(tmp_path):
    model, tok = gqa_model()
    r = lean3.engine(model, tok).generate(PROMPTS, n=2, temperature=1.0, max_new_tokens=6, seed=2)
    before = token_logp(model, r, slice(None), 1.0, 2, LEAN3)[0].detach()
    model.save_pretrained(tmp_path)
    again = Qwen3ForCausalLM.from_pretrained(tmp_path).eval()
    assert torch.equal(token_logp(again, r, slice(None), 1.0, 2, LEAN3)[0].detach(), before)
    hf = token_logp(again, r, slice(None), 1.0)[0].detach()
    assert (hf - before)[r.response_mask].abs().max() < 1e-5


@pytest.mark.parametrize("report", ["reference", "reference-v2"])
def test_configs_that_do_not_ask_for_engine_3_resolve_and_hash_as_before(report):
    """Every committed reference trial's config.yaml hashes as its suite resolves it now, under the same trial
    id: engine 3 is a value of model.forward, not a new field, and the settings added since (train.minibatches,
    eval.split, task.validation_size) are left out of a config while at their defaults, so no other config's
    hash moved (train.updates_per_batch is read as its new name, train.passes)."""
    with committed_results(REPO / "reports" / report) as committed:
        _, trials = load_suite_trials(committed / trialdir.SUITE_FILE, stored=True)
        finished = [t for t in trials if (committed / t.trial_id / trialdir.CONFIG).is_file()]
        assert len(finished) >= 100
        for t in finished:
            assert trialdir.config_sha256(trialdir.read_config(committed / t.trial_id)) == \
                trialdir.config_sha256(to_dict(t.config)), t.trial_id
            assert t.config.engine_version < 3
    assert "engine_version" not in to_dict(build_run_config({}))["model"]
    three = build_run_config({"model": {"forward": "lean3"}})
    assert three.engine_version == 3
    assert trialdir.config_sha256(to_dict(three)) != trialdir.config_sha256(to_dict(build_run_config({})))


def test_engine_3_uses_fused_adamw_and_names_its_float_path():
    model, _ = gqa_model()
    for forward, fused in (("hf", None), ("lean", None), ("lean3", True)):
        backend = make_backend(model, build_run_config({"model": {"forward": forward}}), micro_batches=1)
        assert backend.opt.defaults["fused"] is fused, forward
    three = numerics.record("cpu", FORWARDS.get("lean3", "forward").gemm)
    assert three["float_path"].startswith(f"{numerics.PINNED_PATH} openblas=haswell ") and three["pinned"]
    assert numerics.record("cpu")["float_path"] == numerics.PINNED_PATH and numerics.record("cpu")["gemm"] is None
