"""In-flight weight updates (harness/config/inflight.py): the seeded schedule of versions over a response's
tokens, the lean engine switching weights between two decoding steps, token-weighted staleness metrics on
constructed multi-version responses (ages by hand), replayable traces of multi-segment responses, and
one-line refusals."""
from __future__ import annotations

import pytest
import torch

from harness.bases.models import load_model
from harness.config.inflight import InflightConfig, segments, version_at
from harness.config.trace import trace_line
from harness.rollout import token_logp
from harness.rollout.base import Rollout
from harness.rollout.hf import CACHE
from harness.registry import FORWARDS
from harness.rollout.lean import response_logits as lean_logits
from harness.store import trialdir
from harness.config.run import ConfigError, build_run_config
from harness.trial.batches import Batch
from harness.trial.metrics import rollout_metrics, token_age_histogram
from harness.trial.staleness import schedules_of
from harness.trial.trainer import Trainer

from test_trainer import run, strip_perf

B = 16                      # tiny_base: 4 prompts × group_size 4


@pytest.fixture
def lean_base(tiny_base):
    return {**tiny_base, "model": {**tiny_base["model"], "forward": "lean"}}


@pytest.fixture
def lean_learning_base(learning_base):
    """The committed frozen base (it learns addrev, so versions differ) on the lean forward."""
    return {**learning_base, "model": {**learning_base["model"], "forward": "lean"}}


def test_the_schedule_is_the_formula_by_hand():
    zero = InflightConfig(tokens_per_update=2, phase="zero")
    # batch 5, k = 1, d = 0, T = 6, φ = 0: a = 5 − ⌊5/2⌋ = 3; v(t) = 3 + ⌊t/2⌋ = 3 3 4 4 5 5
    assert zero.schedules(0, 5, 1, updates_per_batch=1, delay=0, max_new_tokens=6) == [((0, 3), (2, 4), (4, 5))]
    # batch 1: a = 1 − 2 = −1; v = −1 −1 0 0 1 1, clamped at the initial policy: 0 0 0 0 1 1
    assert zero.schedules(0, 1, 1, updates_per_batch=1, delay=0, max_new_tokens=6) == [((0, 0), (4, 1))]
    # k = 2, d = 3, batch 4: newest 2·4 − 3 = 5, the same shape shifted: 3 3 4 4 5 5
    assert zero.schedules(0, 4, 1, updates_per_batch=2, delay=3, max_new_tokens=6) == [((0, 3), (2, 4), (4, 5))]
    uniform = InflightConfig(tokens_per_update=2)
    phases = uniform.phases(7, 5, 64)
    assert set(phases) == {0, 1} and phases == uniform.phases(7, 5, 64) and phases != uniform.phases(7, 6, 64)
    by_phase = {0: ((0, 3), (2, 4), (4, 5)),
                1: ((0, 2), (1, 3), (3, 4), (5, 5))}    # φ = 1: a = 5 − ⌊6/2⌋ = 2; v = 2 3 3 4 4 5
    assert uniform.schedules(7, 5, 64, updates_per_batch=1, delay=0, max_new_tokens=6) == [by_phase[p] for p in phases]
    assert uniform.max_lag(0, 6) == 3 and uniform.max_lag(2, 21) == 2 + 10   # d + ⌊(τ − 1 + T − 1)/τ⌋ = 2 + ⌊21/2⌋
    assert segments([0, 0, 2, 2, 3]) == ((0, 0), (2, 2), (4, 3))
    assert [version_at(((0, 0), (2, 2), (4, 3)), t) for t in range(6)] == [0, 0, 2, 2, 3, 3]


def constructed_batch() -> Batch:
    """Two responses of one prompt, consumed at version 5: row 0 all six tokens valid, versions 3 3 4 4 5 5
    (ages 2 2 1 1 0 0); row 1 four valid tokens of versions 2 3 3 4 (ages 3 2 2 1), then padding."""
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    r = Rollout(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.long), torch.ones(2, 6, dtype=torch.long),
                mask, torch.zeros(2, 6), torch.tensor([3, 2]), ["a", "b"], seconds=1.0,
                token_version=torch.tensor([[3, 3, 4, 4, 5, 5], [2, 3, 3, 4, 0, 0]]))
    return Batch(0, ["p"], r, torch.tensor([1.0, 0.0]), torch.tensor([0, 0]))


def test_token_staleness_of_constructed_multi_version_responses():
    batch = constructed_batch()
    row = rollout_metrics(batch, 5)
    # tokens: ages 2 2 1 1 0 0 and 3 2 2 1 -> sum 6 + 8 = 14 over 10 tokens
    assert row["stale/token_mean"] == pytest.approx(1.4, abs=1e-7) and row["stale/token_max"] == 3
    # responses: mean ages 6/6 = 1 and 8/4 = 2 -> 1.5; spans 2 − 0 = 2 and 3 − 1 = 2 -> 2
    assert row["stale/response_mean"] == pytest.approx(1.5, abs=1e-7) and row["stale/response_span_mean"] == 2
    # per response, its oldest token (the first, `version`): ages 2 and 3
    assert row["stale/mean"] == 2.5 and row["stale/max"] == 3
    # by age 0, 1, 2, 3: two, three, four and one tokens
    assert token_age_histogram(batch.rollout, 5) == {"token_age_counts": [2, 3, 4, 1]}
    assert schedules_of(batch.rollout) == [((0, 3), (2, 4), (4, 5)), ((0, 2), (1, 3), (3, 4))]
    assert trace_line(schedules_of(batch.rollout)) == {"segments": [[3, 4, 5], [2, 3, 4]],
                                                       "starts": [[0, 2, 4], [0, 1, 3]]}
    # one version per response: no token metrics, the trace line of before
    batch.rollout.token_version = None
    assert not any(k.startswith("stale/token") for k in rollout_metrics(batch, 5)) and \
        token_age_histogram(batch.rollout, 5) == {}
    assert trace_line(schedules_of(batch.rollout)) == {"versions": [3, 2]}


@pytest.mark.parametrize("forward", ["lean", "lean3"])
def test_the_lean_engines_switch_weights_between_two_decoding_steps(tiny_model_dir, forward):
    a, tok = load_model(tiny_model_dir)
    b, _ = load_model(tiny_model_dir)
    with torch.no_grad():
        for p in b.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    engine, prompts = FORWARDS.get(forward).engine(a, tok), ["1+2=", "123+456="]
    logits = FORWARDS.get(forward).response_logits
    kw = dict(n=3, temperature=1.0, max_new_tokens=6, seed=4)
    plain = engine.generate(prompts, **kw)
    switched = engine.generate(prompts, **kw, policies=[(0, a, 7), (3, b, 8)])
    T = switched.response_ids.shape[1]
    assert switched.token_version.tolist() == [[7, 7, 7, 8, 8, 8][:T]] * 6 and switched.version.tolist() == [7] * 6
    # tokens 0..2 were sampled by a alone: the same draws and log-probs as a's own rollout
    assert torch.equal(switched.response_ids[:, :3], plain.response_ids[:, :3])
    assert torch.equal(switched.logp_behavior[:, :3], plain.logp_behavior[:, :3])
    # ... which are a's log-probs (a full forward), not b's
    err = {name: (token_logp(m, switched, slice(None), 1.0, 1, logits)[0].detach()
                  - switched.logp_behavior)[:, :3][switched.response_mask[:, :3]].abs().max() for name, m in
           (("a", a), ("b", b))}
    assert err["a"] < 1e-5 and err["b"] > 1e-3
    # from token 3 on, b decides: the recorded log-probs leave a's
    assert not torch.equal(switched.logp_behavior[:, 3:], plain.logp_behavior[:, 3:])
    # every token against a slow reference in transformers: token t's logits come from a decoding step run
    # by the policy in force at t over the KV cache the earlier steps wrote (a's for the prompt and tokens
    # 0, 1; b's from token 2 on, the input of the step that predicts token 3)
    for i in range(switched.response_ids.shape[0]):
        ref = keep_kv_reference(lambda t: a if t < 3 else b, switched, i)
        got = switched.logp_behavior[i, switched.response_mask[i]]
        assert (ref - got).abs().max() < 1e-5, (i, ref, got)
    # switching to the same weights changes nothing, bit for bit (the switch itself is exact)
    same = engine.generate(prompts, **kw, policies=[(0, a, 0), (2, load_model(tiny_model_dir)[0], 1)])
    assert torch.equal(same.response_ids, plain.response_ids) and torch.equal(same.logp_behavior, plain.logp_behavior)


@torch.no_grad()
def keep_kv_reference(model_at, r: Rollout, i: int) -> torch.Tensor:
    """Row i's token log-probs, one transformers step per token: the prompt by model_at(0), then token t − 1
    fed to model_at(t) with the cache so far (kept across switches), predicting token t."""
    prompt = r.prompt_ids[i][r.prompt_mask[i].bool()][None]                      # (1, P) without padding
    tokens = r.response_ids[i][r.response_mask[i]]
    out = model_at(0)(prompt, use_cache=True)
    logps = [torch.log_softmax(out.logits[0, -1], -1)[tokens[0]]]
    for t in range(1, len(tokens)):
        out = model_at(t)(tokens[t - 1].view(1, 1), **{CACHE: out[CACHE]}, use_cache=True)
        logps.append(torch.log_softmax(out.logits[0, -1], -1)[tokens[t]])
    return torch.stack(logps)


def test_each_token_is_sampled_by_its_version_and_estimators_get_its_log_prob(lean_learning_base):
    cfg = build_run_config(lean_learning_base, {"inflight": {"tokens_per_update": 2}, "delay": 1})
    t = Trainer(cfg)
    t.start_source()
    for v in range(5):                                 # versions 0..4 with real updates in between
        t.source.ready(v)
        if v < 4:
            t.update(t.source.take(v))
            t.version += 1
    r = t.source.take(4).rollout                       # batch 4, generated at version 4: newest token version 3
    expected = cfg.inflight.schedules(0, 4, B, updates_per_batch=1, delay=1, max_new_tokens=6)
    assert len(set(expected)) == 2 and {len(s) for s in expected} == {3, 4}       # φ = 0 and 1 both drawn
    for i, schedule in enumerate(expected):
        n = int(r.response_mask[i].sum())
        assert r.token_version[i, :n].tolist() == [version_at(schedule, j) for j in range(n)]
        assert r.version[i] == schedule[0][1]
    # the behavior log-probs the estimators receive are per token: on each response's first segment (whose
    # KV cache that version wrote alone) they are that snapshot's full-forward log-probs, and not the others'
    first = {v for s in expected for _, v in s[:1]}
    for v in first:
        rows = [i for i, s in enumerate(expected) if s[0][1] == v]
        sub = r.take(rows)
        cells = sub.response_mask & (sub.token_version == v)
        err = {u: float((token_logp(t.source.model_at(u), sub, slice(None), 1.0, 1, lean_logits)[0].detach()
                         - sub.logp_behavior)[cells].abs().max()) for u in range(5)}
        assert err[v] < 5e-5 and all(err[u] > 10 * err[v] for u in err if u != v), (v, err)


def test_an_inflight_trial_records_segments_and_replays_exactly(lean_learning_base, tmp_path):
    inflight = {"inflight": {"tokens_per_update": 2}, "delay": 0}
    status, rows, _ = run(lean_learning_base, tmp_path, "inflight", **inflight)
    assert status == "completed" and sum(r["loss/value"] != 0 for r in rows) >= 2    # the policy moves
    cfg = build_run_config(lean_learning_base, inflight)
    recorded = trialdir.read_side_rows(tmp_path / "inflight", trialdir.TRACE)
    hist = trialdir.read_side_rows(tmp_path / "inflight", trialdir.IS_HIST)
    for s, (row, line, h) in enumerate(zip(rows, recorded, hist)):
        schedules = [((0, v),) for v in line["versions"]] if "versions" in line else \
            [tuple(zip(starts, seg)) for seg, starts in zip(line["segments"], line["starts"])]
        full = cfg.inflight.schedules(0, s, B, updates_per_batch=1, delay=0, max_new_tokens=6)
        # each response's recorded segments are the law's, cut at the response's end
        assert all(rec == f[:len(rec)] for rec, f in zip(schedules, full))
        assert row["stale/mean"] == sum(s - sch[0][1] for sch in schedules) / B      # k = 1: consumed at version s
        assert row["stale/token_max"] == row["stale/max"] and sum(h["token_age_counts"]) == sum(h["tokens_by_position"])
        ages = [a for a, n in enumerate(h["token_age_counts"]) for _ in range(n)]
        assert row["stale/token_mean"] == pytest.approx(sum(ages) / len(ages), abs=1e-6)
    assert any("segments" in line for line in recorded) and max(r["stale/token_max"] for r in rows) == 3
    path = trialdir.trace_file(tmp_path / "inflight")
    replay = {"delay": {"dist": "trace", "path": str(path), "max": 3}}
    _, a, a_eval = run(lean_learning_base, tmp_path, "replay-a", **replay)
    _, b, b_eval = run(lean_learning_base, tmp_path, "replay-b", **replay)
    assert strip_perf(a) == strip_perf(b) and a_eval == b_eval
    assert [r["stale/mean"] for r in a] == [r["stale/mean"] for r in rows]


def test_resume_of_an_inflight_trial_matches_uninterrupted(lean_learning_base, tmp_path, killed_at_update):
    inflight = {"inflight": {"tokens_per_update": 3}, "delay": 1}
    _, full, full_eval = run(lean_learning_base, tmp_path, "full", **inflight)
    with killed_at_update(5):                          # checkpoint_every = 2: resumes from step 4
        run(lean_learning_base, tmp_path, "resumed", **inflight)
    _, resumed, resumed_eval = run(lean_learning_base, tmp_path, "resumed", **inflight)
    assert strip_perf(resumed) == strip_perf(full) and resumed_eval == full_eval
    for side in (trialdir.TRACE, trialdir.IS_HIST):
        assert trialdir.read_side_rows(tmp_path / "resumed", side) == trialdir.read_side_rows(tmp_path / "full", side)


@pytest.mark.parametrize("overrides,message", [
    ({"inflight": {"tokens_per_update": 0}}, "inflight.tokens_per_update: must be >= 1"),
    ({"inflight": {"phase": "random"}}, "inflight.phase: 'random' is not valid; choose one of uniform, zero"),
    ({"inflight": {"tokens": 2}}, "inflight.tokens: unknown key; valid keys: phase, tokens_per_update"),
    ({"inflight": {}, "delay": {"dist": "uniform", "min": 0, "max": 2}}, "inflight: takes an integer delay"),
    ({"inflight": {}, "async": {"max_staleness": 2}}, "inflight: takes an integer delay"),
    ({"inflight": {}, "delay": 255}, "inflight: tokens up to 257 versions old"),
    ({"inflight": {}, "model.forward": "hf"}, "inflight: needs an engine that switches weights mid-response"),
    ({"inflight": {}, "mismatch": {}}, "inflight: needs the plain lean engine in one process"),
])
def test_bad_inflight_settings_are_one_line_errors(lean_base, overrides, message):
    with pytest.raises(ConfigError) as exc:
        build_run_config(lean_base, overrides)
    assert message in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_configs_without_inflight_keep_their_identity(lean_base):
    from harness.config.dicts import to_dict
    assert "inflight" not in to_dict(build_run_config(lean_base))
    assert to_dict(build_run_config(lean_base, {"inflight": {}}))["inflight"] == {"tokens_per_update": 4,
                                                                                 "phase": "uniform"}


def test_the_inflight_suite_loads_and_stays_small(monkeypatch):
    from pathlib import Path

    from harness.config.expand import expand, load_suite_file
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    trials = expand(load_suite_file("suites/inflight.yaml"))
    assert 2 <= len(trials) <= 4 and len({t.trial_id for t in trials}) == len(trials)
    assert all(t.config.inflight is not None and t.config.forward.name == "lean" for t in trials)
    # small: at most 4 trials × 24 batches of 64 responses of <= 8 tokens
    assert all(t.config.train.steps <= 24 and t.config.train.prompts_per_step * t.config.group_size <= 64
               and t.config.train.max_new_tokens <= 8 for t in trials)
