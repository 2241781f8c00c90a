"""Delay distributions: the laws (hand-computed), seeded draws, strict config, and the trainer's mixed
batches (a point mass is the exact delay bit for bit; a law's draws are the realized staleness)."""
from __future__ import annotations

import math

import pytest
import torch

from harness.config.run import ConfigError, build_run_config
from harness.config.delays import DelayDistribution
from harness.config.expand import Suite, expand
from harness.trial.trainer import Trainer

from test_trainer import run, strip_perf


def law(**kw) -> DelayDistribution:
    d = DelayDistribution(**kw)
    d.validate()
    return d


def test_pmfs_are_the_truncated_renormalized_laws():
    # geometric p = 1/2 on 0..2: weights 1/2, 1/4, 1/8 (sum 7/8) -> 4/7, 2/7, 1/7
    assert law(dist="geometric", p=0.5, max=2).pmf() == pytest.approx([4 / 7, 2 / 7, 1 / 7], abs=1e-12)
    # poisson λ = 1 on 0..1: e^-1 · 1^j / j! = e^-1, e^-1 -> 1/2, 1/2
    assert law(dist="poisson", mean=1.0, max=1).pmf() == pytest.approx([0.5, 0.5], abs=1e-12)
    # poisson λ = 2 on 0..2: e^-2 · (1, 2, 2) -> 1/5, 2/5, 2/5
    assert law(dist="poisson", mean=2.0, max=2).pmf() == pytest.approx([0.2, 0.4, 0.4], abs=1e-12)
    assert law(dist="uniform", min=2, max=4).pmf() == pytest.approx([0, 0, 1 / 3, 1 / 3, 1 / 3], abs=1e-12)
    # empirical: entries past max are dropped (truncation), missing ones are 0
    assert law(dist="empirical", weights=(1.0, 0.0, 3.0), max=1).pmf() == [1.0, 0.0]
    assert law(dist="empirical", weights=(1.0, 3.0), max=2).pmf() == [0.25, 0.75, 0.0]
    assert law(dist="geometric", p=1.0, max=3).pmf() == [1.0, 0.0, 0.0, 0.0]


def test_draws_are_seeded_by_seed_and_batch_only_and_follow_the_law():
    d = law(dist="geometric", p=0.3, max=6)
    assert d.draw(0, 5, 100) == d.draw(0, 5, 100)
    assert d.draw(0, 5, 100) != d.draw(0, 6, 100) and d.draw(0, 5, 100) != d.draw(1, 5, 100)
    n, pmf = 20_000, d.pmf()
    draws = d.draw(3, 0, n)
    for j, p in enumerate(pmf):                           # each frequency within 4 binomial standard errors
        assert abs(draws.count(j) / n - p) < 4 * math.sqrt(p * (1 - p) / n), j
    # a point mass draws its value every time; per: prompt repeats one draw over the group
    assert set(law(dist="uniform", min=3, max=3).draw(0, 0, 50)) == {3}
    lags = law(dist="poisson", mean=2.0, max=5, per="prompt").lags(0, 1, prompts=3, group_size=4)
    assert len(lags) == 12 and all(len(set(lags[i * 4:(i + 1) * 4])) == 1 for i in range(3))


@pytest.mark.parametrize("delay,message", [
    ({"dist": "gamma", "max": 4}, "delay.dist: 'gamma' is not valid; choose one of uniform, geometric, poisson, empirical, trace"),
    ({"dist": "geometric", "p": 0.2}, "delay.max: required, the largest lag, an integer 0..256"),
    ({"dist": "geometric", "p": 0.2, "max": 1000}, "delay.max: required, the largest lag, an integer 0..256"),
    ({"dist": "geometric", "p": 0.0, "max": 4}, "delay.p: required, the success probability in (0, 1]"),
    ({"dist": "geometric", "max": 4}, "delay.p: required"),
    ({"dist": "geometric", "p": 0.2, "mean": 3, "max": 4}, "delay.mean: not a parameter of geometric"),
    ({"dist": "poisson", "mean": -1, "max": 4}, "delay.mean: required, λ in [0, 2560]"),
    ({"dist": "uniform", "min": 5, "max": 4}, "delay.min: must be 0..max (4); got 5"),
    ({"dist": "empirical", "weights": [0, 0, 1], "max": 1}, "delay: the law has no mass on lags 0..1"),
    ({"dist": "empirical", "weights": [1, -2], "max": 1}, "delay.weights: every weight must be a finite number >= 0"),
    ({"dist": "empirical", "weights": [1, "x"], "max": 1}, "delay.weights[1]: expected float"),
    ({"dist": "empirical", "max": 1}, "delay.weights: required"),
    ({"dist": "trace", "max": 1}, "delay.path: required"),
    ({"dist": "geometric", "p": 0.2, "max": 4, "skew": 1}, "delay.skew: unknown key; valid keys: dist, max, mean, min, p, path, per, sha256, weights"),
    ({"dist": "geometric", "p": 0.2, "max": 4, "per": "token"}, "delay.per: 'token' is not valid; choose one of response, prompt"),
])
def test_bad_parameters_are_one_line_errors(tiny_base, delay, message):
    with pytest.raises(ConfigError) as exc:
        build_run_config(tiny_base, {"delay": delay})
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_integer_delay_is_unchanged_and_distributions_are_refused_where_unsupported(tiny_base):
    assert build_run_config(tiny_base, {"delay": 3}).delay == 3
    with pytest.raises(ConfigError, match="train.workers: a delay distribution"):
        build_run_config(tiny_base, {"delay": {"dist": "uniform", "max": 2}, "train.workers": 2})
    with pytest.raises(ConfigError, match="staleness: set either delay"):
        build_run_config(tiny_base, {"delay": {"dist": "uniform", "max": 2}, "async": {"max_staleness": 1}})


def test_trial_ids_distinguish_distributions(tiny_base):
    suite = Suite("s", 1, tiny_base, {"delay": [{"dist": "geometric", "p": 0.2, "max": 8},
                                                {"dist": "geometric", "p": 0.5, "max": 8}, 8]}, [0])
    ids = [t.trial_id for t in expand(suite)]
    assert len(set(ids)) == 3, ids


@pytest.mark.parametrize("d,passes,minibatches", [(2, 1, 1), (3, 2, 1), (3, 1, 2)])
def test_point_mass_is_the_exact_delay_bit_for_bit(learning_base, tmp_path, d, passes, minibatches):
    extra = {"train.passes": passes, "train.minibatches": minibatches}
    _, exact, exact_eval = run(learning_base, tmp_path, "exact", delay=d, **extra)
    _, point, point_eval = run(learning_base, tmp_path, "point", delay={"dist": "uniform", "min": d, "max": d}, **extra)
    assert sum(r["loss/value"] != 0 for r in exact) >= 2          # the policy moves, so versions differ
    assert strip_perf(point) == strip_perf(exact) and point_eval == exact_eval


def test_each_response_comes_from_its_drawn_version(learning_base):
    law_ = {"dist": "uniform", "min": 0, "max": 3}
    cfg = build_run_config(learning_base, {"delay": law_})
    t = Trainer(cfg)
    t.start_source()
    B, lags = 16, DelayDistribution(**law_).lags(0, 4, 4, 4)
    for v in range(5):                                 # versions 0..4 with real updates in between
        t.source.ready(v)
        if v < 4:
            batch = t.source.take(v)
            t.update(batch)
            t.version += 1
    batch = t.source.take(4)                           # batch 4, generated at version 4
    assert batch.rollout.version.tolist() == [4 - lag for lag in lags] and len(lags) == B
    assert len(set(lags)) > 1                          # the batch mixes versions
    # a response of version v is what that snapshot generates: of the kept versions, v's log-probs are the
    # ones its recorded behavior log-probs match (to float32 rounding of a cached vs a full forward)
    from harness.rollout import token_logp
    for v in set(batch.rollout.version.tolist()):
        sub = batch.rollout.take((batch.rollout.version == v).nonzero().squeeze(1).tolist())
        err = {u: float((token_logp(t.source.model_at(u), sub, slice(None), 1.0)[0].detach()
                         - sub.logp_behavior)[sub.response_mask].abs().max()) for u in range(1, 5)}
        assert err[v] < 5e-5 and all(err[u] > 10 * err[v] for u in err if u != v), (v, err)


def test_realized_staleness_is_the_drawn_lags(learning_base, tmp_path):
    law_ = {"dist": "geometric", "p": 0.4, "max": 3}
    _, rows, _ = run(learning_base, tmp_path, delay=law_)
    d = DelayDistribution(**law_)
    for s, row in enumerate(rows):                     # k = 1: response i of batch s is min(s, D_i) old
        lags = [min(s, lag) for lag in d.lags(0, s, 4, 4)]
        assert row["stale/mean"] == pytest.approx(sum(lags) / len(lags), abs=1e-12)
        assert row["stale/max"] == max(lags)


def test_resume_with_a_distribution_matches_uninterrupted(learning_base, tmp_path, killed_at_update):
    law_ = {"dist": "poisson", "mean": 1.5, "max": 3}
    _, full, full_eval = run(learning_base, tmp_path, "full", delay=law_)
    with killed_at_update(5):                          # checkpoint_every = 2: resumes from step 4
        run(learning_base, tmp_path, "resumed", delay=law_)
    _, resumed, resumed_eval = run(learning_base, tmp_path, "resumed", delay=law_)
    assert strip_perf(resumed) == strip_perf(full) and resumed_eval == full_eval
