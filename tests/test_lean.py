"""The lean forward (harness/rollout/lean.py) against transformers' on the same parameters."""
from __future__ import annotations

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from harness.bases import BASES_DIR, base_identity
from harness.config.run import ConfigError, build_run_config
from harness.bases.models import char_tokenizer, load_model
from harness.rollout import make_engine, response_logits
from harness.rollout.hf import HFEngine
from harness.rollout.lean import LeanEngine, LeanError, LeanQwen3
from harness.tasks import make_task
from harness.tasks.synthetic import ADDREV_VOCAB
from harness.rollout import token_logp
from harness.trial.trainer import Trainer

LEAN = response_logits("lean")
PROMPTS = ["1+2=", "123+456=", "9=", "45+6="]          # different lengths: left padding and positions


V2_BASES = sorted(p.name for p in BASES_DIR.glob("tiny-cumsum-v2*"))
FROZEN = [("tiny-addrev-v1", "addrev", 16, 8, 8), *((name, "cumsum", 8, 16, 21) for name in V2_BASES)]


@pytest.fixture(scope="module", params=FROZEN, ids=lambda p: p[0])
def frozen(request):
    """Each frozen base (v1's and every v2 base) and a sampled batch at its benchmark's shape: 16 addrev prompts
    x 8, 8 new tokens (v1); 8 cumsum prompts x 16, 21 new tokens (v2; tiny-cumsum-v2a's batch samples the pad
    token mid-response 4 times, which the gradient check needs: transformers' embedding gives the pad row no
    gradient from such an input). Returns (model, tok, rollout, G, tokens)."""
    name, task, prompts, group, tokens = request.param
    model, tok = load_model(base_identity(build_run_config({"model": {"kind": "tiny", "base": name}}).model)[0])
    problems = [p.prompt for p in make_task(task).problems("train", prompts, 0)]
    return model, tok, HFEngine(model, tok).generate(problems, n=group, temperature=1.0, max_new_tokens=tokens,
                                                     seed=3), group, tokens


@pytest.fixture(scope="module")
def v1_base():
    return load_model(base_identity(build_run_config({}).model)[0])


def gqa_model() -> tuple[Qwen3ForCausalLM, object]:
    """A random Qwen3 with grouped kv heads (4 query heads per 2 kv heads), untied head, other rope theta."""
    tok = char_tokenizer(ADDREV_VOCAB)
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(tok), hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, intermediate_size=96, max_position_embeddings=64,
                         tie_word_embeddings=False, rope_theta=500.0, rms_norm_eps=1e-5, pad_token_id=0,
                         eos_token_id=1, bos_token_id=1)
    return Qwen3ForCausalLM(config).eval(), tok


def test_frozen_base_logp_matches_transformers(frozen):
    model, _, r, group, _ = frozen
    valid = r.response_mask
    for group_size in (group, 1):
        hf_logp, hf_ent = token_logp(model, r, slice(None), 1.0, group_size)
        lean_logp, lean_ent = token_logp(model, r, slice(None), 1.0, group_size, LEAN)
        assert (lean_logp - hf_logp).detach()[valid].abs().max() < 1e-5
        assert (lean_ent - hf_ent)[valid].abs().max() < 1e-5
        assert (lean_logp.detach() - r.logp_behavior)[valid].abs().max() < 1e-5
    part = slice(2 * group, 5 * group)                      # whole groups: the prompt runs once per group
    assert (token_logp(model, r, part, 1.0, group, LEAN)[0] - hf_logp[part]).detach()[valid[part]].abs().max() < 1e-5


def test_frozen_base_gradients_match_transformers(frozen):
    model, _, r, group, _ = frozen
    valid, params = r.response_mask, list(model.parameters())
    g_hf = torch.autograd.grad(token_logp(model, r, slice(None), 0.7, group)[0][valid].sum(), params)
    g_lean = torch.autograd.grad(token_logp(model, r, slice(None), 0.7, group, LEAN)[0][valid].sum(), params)
    # Each gradient is a sum over every token of the batch (about 2,000 on v2's shape): the two forwards add in
    # other orders, so an element near 0 of a tensor whose entries reach ~100 differs by rounding (3e-5 seen);
    # the bound is relative to the tensor's largest entry, 1e-6 of it (float32's epsilon is 1.2e-7).
    for (name, _), a, b in zip(model.named_parameters(), g_hf, g_lean):
        assert (a - b).abs().max() <= 1e-5 + 1e-6 * a.abs().max(), name


def test_frozen_base_rollouts_match_transformers(frozen):
    model, tok, r, group, tokens = frozen
    prompts = [tok.decode(ids[mask.bool()]) for ids, mask in zip(r.prompt_ids[::group], r.prompt_mask[::group])]
    lean = LeanEngine(model, tok).generate(prompts, n=group, temperature=1.0, max_new_tokens=tokens, seed=3)
    assert torch.equal(lean.response_ids, r.response_ids) and lean.texts == r.texts
    assert (lean.logp_behavior - r.logp_behavior).abs().max() < 1e-5
    greedy = [e.generate(prompts, n=1, temperature=0.0, max_new_tokens=tokens, seed=0) for e in
              (HFEngine(model, tok), LeanEngine(model, tok))]
    assert greedy[0].texts == greedy[1].texts


def test_gqa_model_matches_transformers_in_rollout_and_update():
    model, tok = gqa_model()
    r = LeanEngine(model, tok).generate(PROMPTS, n=3, temperature=1.0, max_new_tokens=6, seed=1)
    valid = r.response_mask           # lengths 2, 1, 6, …, 1, …: finished rows leave the cache, padding is skipped
    assert valid.sum(1).min() < valid.shape[1] == valid.sum(1).max()
    # A valid rollout: responses are right-padded (valid tokens first), stop at <eos>, one version.
    assert torch.equal(valid, valid.cumprod(1).bool()) and r.version.tolist() == [0] * 12
    ends = valid.sum(1) - 1
    eos_at_end = r.response_ids[torch.arange(12), ends] == tok.eos_token_id
    assert bool((eos_at_end | (ends == valid.shape[1] - 1)).all())
    assert not any(tok.eos_token in t for t in r.texts)
    hf_logp = token_logp(model, r, slice(None), 1.0)[0].detach()
    for group_size in (3, 1):
        lean_logp = token_logp(model, r, slice(None), 1.0, group_size, LEAN)[0].detach()
        assert (lean_logp - hf_logp)[valid].abs().max() < 1e-5
    assert (r.logp_behavior - hf_logp)[valid].abs().max() < 1e-5
    same = HFEngine(model, tok).generate(PROMPTS, n=3, temperature=1.0, max_new_tokens=6, seed=1)
    assert (same.logp_behavior - r.logp_behavior).abs().max() < 1e-5


def test_a_call_of_many_rows_is_decoded_in_chunks_that_join_into_one_rollout(v1_base, monkeypatch):
    """An evaluation-sized call runs CHUNK_ROWS rows at a time; the joined rollout equals one batch's: greedy
    tokens, texts and log-probs per row, each chunk's prompts re-padded to the widest."""
    from harness.rollout import lean
    model, tok = v1_base
    prompts = ["1+2=", "9=", "45+6=", "1234+5678="] + [p.prompt for p in make_task("addrev").problems("train", 7, 5)]
    engine = LeanEngine(model, tok)
    whole = engine.generate(prompts, n=1, temperature=0.0, max_new_tokens=8, seed=0)
    parts = [engine.generate(prompts[i:i + 3], n=1, temperature=0.0, max_new_tokens=8, seed=0) for i in (0, 3, 6, 9)]
    assert len({r.prompt_ids.shape[1] for r in parts}) > 1 and len({r.response_ids.shape[1] for r in parts}) > 1
    monkeypatch.setattr(lean, "CHUNK_ROWS", 3)                                  # chunks of 3, 3, 3 and 2 rows
    chunked = engine.generate(prompts, n=1, temperature=0.0, max_new_tokens=8, seed=0)
    assert chunked.texts == whole.texts and chunked.prompt_ids.shape == whole.prompt_ids.shape
    for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "version"):
        assert torch.equal(getattr(chunked, name), getattr(whole, name)), name
    assert (chunked.logp_behavior - whole.logp_behavior).abs().max() < 1e-5
    sampled = engine.generate(prompts[:4], n=2, temperature=1.0, max_new_tokens=8, seed=4)   # 1 prompt x 2 per chunk
    assert sampled.response_ids.shape[0] == 8 and torch.equal(sampled.response_mask, sampled.response_mask.cumprod(1).bool())


def test_seeded_sampling_is_reproducible_and_differs_across_seeds():
    model, tok = gqa_model()
    engine = LeanEngine(model, tok)
    a, b, c = (engine.generate(PROMPTS, n=4, temperature=1.0, max_new_tokens=6, seed=s) for s in (7, 7, 8))
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.logp_behavior, b.logp_behavior)
    assert not torch.equal(a.response_ids, c.response_ids)


def test_unsupported_models_are_refused_with_the_fix():
    model, _ = gqa_model()
    with pytest.raises(LeanError, match="model.forward: hf"):
        LeanQwen3(model.to(torch.bfloat16))


def test_forward_is_a_config_setting():
    assert build_run_config({}).forward.name == "hf"
    assert build_run_config({"model": {"forward": "lean"}}).forward.name == "lean"
    with pytest.raises(ConfigError, match="^forward: 'x' is not valid"):
        build_run_config({"model": {"forward": "x"}})
    assert build_run_config({"model": {"forward": "lean3", "kind": "path", "path": "/a/qwen3"}}).forward.name == "lean3"
    with pytest.raises(ConfigError, match="engine 'vllm'"):
        build_run_config({"model": {"forward": "lean", "engine": "vllm"}})
    with pytest.raises(ConfigError, match="dtype 'bfloat16'"):
        build_run_config({"model": {"forward": "lean", "dtype": "bfloat16"}})


def test_lean_trainer_trains_the_transformers_module():
    """Two lean steps move the transformers module's own parameters, and its rollouts come from LeanEngine."""
    cfg = build_run_config({"model": {"forward": "lean"}, "train": {"steps": 2, "prompts_per_step": 4},
                            "group_size": 4, "task": {"eval_size": 500}})
    trainer = Trainer(cfg)
    assert isinstance(trainer.engine, LeanEngine)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    for i in range(2):
        row = trainer.update(trainer.make_batch(i))
        trainer.version += 1
        assert torch.isfinite(torch.tensor(row["opt/grad_norm"]))
    assert all(not torch.equal(a, p) for a, p in zip(before, trainer.model.parameters()))
    assert isinstance(make_engine("hf", trainer.model, trainer.tokenizer, None), HFEngine)
