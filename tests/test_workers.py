"""Multi-worker trials (train.workers; harness/trial/world.py, harness/suite/runner/ray_train.py).

Fast: the one-line refusals of `stalebench check`, the runner's worker-slot arithmetic and resource
requests, a sharded batch in one process, and a 2-process gloo group (torch.multiprocessing, torch
backend) against one process running the same trial. Slow: the same trial through `stalebench run`
(Ray Tune -> Ray Train, 2 workers, DeepSpeed ZeRO-1) on a 2-CPU local Ray, which also runs one trial at a
time; a 2-worker DeepSpeed trial killed after its checkpoint and resumed.

The trials start from the frozen base (tiny-addrev-v1, 0.5M parameters), not conftest's random model:
its rewards are not all zero, so losses and gradients are not zero (each parity test checks that).
"""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import yaml

from harness.config.run import ConfigError, build_run_config
from harness.config.expand import Resources, Trial, load_suite_file
from harness.trial.lifecycle import run_trial, run_trial_worker
from harness.store.trialdir import read_jsonl, read_status

# The tolerances of tests/test_trainer.py::test_deepspeed_backend_matches_plain_torch.
LOSS_ABS, GRAD_NORM_REL = 1e-5, 1e-4


def frozen_base(**train) -> dict:
    """A few steps of the CPU default's frozen base on 8 prompts x 4 responses, 2 workers."""
    return {"algorithm": "gmc_grpo", "delay": 1, "group_size": 4, "task": {"name": "addrev", "eval_size": 32},
            "train": {"steps": 4, "prompts_per_step": 8, "lr": 1e-3, "max_new_tokens": 6, "checkpoint_every": 2,
                      "workers": 2, **train},
            "eval": {"every_steps": 3}}


def trial_of(base: dict, name: str) -> Trial:
    return Trial(name, {"seed": 0}, build_run_config(base))


def assert_parity(solo: list[dict], multi: list[dict], label: str) -> None:
    """Per-step agreement of two trials' losses and gradient norms; prints the differences (run with -s:
    the figures of docs/workers.md)."""
    assert [r["step"] for r in multi] == [r["step"] for r in solo]
    assert sum(r["loss/value"] != 0 for r in solo) >= 2, "the trial must train on a non-zero loss"
    for a, b in zip(solo, multi):
        assert b["train/reward_mean"] == a["train/reward_mean"]          # the same samples
        assert b["loss/value"] == pytest.approx(a["loss/value"], abs=LOSS_ABS)
        assert b["opt/grad_norm"] == pytest.approx(a["opt/grad_norm"], rel=GRAD_NORM_REL)
    print(f"\n{label}: |loss diff| " + " ".join(f"{abs(b['loss/value'] - a['loss/value']):.1e}" for a, b in zip(solo, multi))
          + ", |grad-norm diff| " + " ".join(f"{abs(b['opt/grad_norm'] - a['opt/grad_norm']):.1e}" for a, b in zip(solo, multi))
          + " (steps " + " ".join(str(a["step"]) for a in solo) + ")")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gloo_worker(rank: int, port: int, trial: Trial, suite_dir: Path, crash_at_update: int) -> None:
    """One rank of a 2-process group, as a Ray Train worker would run it (without Ray)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2")
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    if crash_at_update:
        from harness.trial.trainer import Trainer
        original, calls = Trainer.update, {"n": 0}

        def crash(self, batch):
            calls["n"] += 1
            if calls["n"] == crash_at_update:      # both ranks, at the same update: a killed trial
                raise SystemExit(3)
            return original(self, batch)
        Trainer.update = crash
    try:
        run_trial_worker(trial, suite_dir, rank)
    finally:
        torch.distributed.destroy_process_group()


def run_two_processes(trial: Trial, suite_dir: Path, crash_at_update: int = 0) -> None:
    torch.multiprocessing.spawn(_gloo_worker, args=(free_port(), trial, suite_dir, crash_at_update), nprocs=2)


# ---------------------------------------------------------------- config: one-line refusals


@pytest.mark.parametrize("change,message", [
    ({"train.workers": 0}, "train.workers: must be > 0; got 0"),
    ({"train.workers": 3}, "train.workers: train.prompts_per_step 8 does not divide into 3 workers"),
    ({"train.workers": True}, "base.train.workers: expected int; got True"),
    ({"model.backend": "deepspeed", "model.zero_stage": 3}, "train.workers: ZeRO-3 partitions the parameters"),
    ({"model.engine": "vllm"}, "train.workers: engine 'vllm' is not supported with several workers"),
    ({"delay": 0, "async": {"max_staleness": 1}}, "train.workers: staleness source 'async' is not supported with several workers"),
])
def test_workers_are_validated_in_one_line(change, message):
    with pytest.raises(ConfigError) as err:
        build_run_config(frozen_base(), change)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_check_refuses_a_bad_workers_value_and_resources_workers(tmp_path, capsys):
    from harness.cli import main

    suite = tmp_path / "w.yaml"
    suite.write_text(yaml.safe_dump({"suite": "w", "base": frozen_base(), "grid": {"train.workers": [1, 2, 3]}}))
    assert main(["check", str(suite)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("stalebench: train.workers: train.prompts_per_step 8 does not divide into 3 workers")
    assert "\n" not in err and "train.workers=3" in err
    suite.write_text(yaml.safe_dump({"suite": "w", "base": frozen_base(), "resources": {"cpu": 1, "workers": 2}}))
    assert main(["check", str(suite)]) == 2
    assert "resources.workers: set a trial's workers with train.workers" in capsys.readouterr().err
    suite.write_text(yaml.safe_dump({"suite": "w", "base": frozen_base(), "grid": {"train.workers": [1, 2]}}))
    assert main(["check", str(suite)]) == 0
    assert capsys.readouterr().out.split("\n")[1:3] == ["  workers1-s0", "  workers2-s0"]


# ---------------------------------------------------------------- the runner's accounting


def test_worker_slots_and_trials_at_once():
    from harness.suite.runner.ray_train import concurrent_trials, worker_slots

    two_cpus = [{"CPU": 2.0}]
    assert worker_slots(Resources(cpu=1), two_cpus) == 2                  # 2 // 1
    assert concurrent_trials(Resources(cpu=1), 2, two_cpus) == 1          # 2 slots // 2 workers: one trial at a time
    assert concurrent_trials(Resources(cpu=1), 1, two_cpus) is None       # one worker: Tune packs as before
    nodes = [{"CPU": 16.0, "GPU": 2.0}, {"CPU": 16.0, "GPU": 2.0}, {"CPU": 64.0}]
    # per node min(16 // 4, 2 // 1) = 2 GPU-bound slots; the CPU-only node holds none: 4 slots
    assert worker_slots(Resources(cpu=4, gpu=1), nodes) == 4
    assert concurrent_trials(Resources(cpu=4, gpu=1), 2, nodes) == 2      # 4 // 2
    assert concurrent_trials(Resources(cpu=4, gpu=1, max_concurrent=1), 2, nodes) == 1
    assert worker_slots(Resources(cpu=1.5), [{"CPU": 4.0}, {"CPU": 3.0}]) == 4   # 2 + 2: no worker spans nodes


def test_a_trial_whose_workers_fit_nowhere_is_refused(monkeypatch):
    from harness.suite.runner import ray_tune

    monkeypatch.setattr(ray_tune.ray, "nodes", lambda: [{"Alive": True, "Resources": {"CPU": 2.0}},
                                                           {"Alive": False, "Resources": {"CPU": 64.0}}])
    ray_tune.check_fits(Resources(cpu=1), workers=2)
    with pytest.raises(ConfigError) as err:
        ray_tune.check_fits(Resources(cpu=1), workers=4)
    assert str(err.value) == ("resources: a trial of train.workers 4 needs 4 workers of cpu=1, gpu=0 each, but the "
                              "Ray cluster has room for 2 (1 node(s)); lower train.workers or resources.cpu/gpu, or "
                              "run on a cluster that has them")


def test_tune_reserves_the_process_or_only_the_driver():
    from harness.suite.runner.ray_train import DRIVER_REQUEST, trial_resources

    res = Resources(cpu=1)
    one, two = trial_of(frozen_base(workers=1), "one"), trial_of(frozen_base(), "two")
    assert trial_resources(res, [one]) == {"cpu": 1.0, "gpu": 0.0}       # exactly the request before workers existed
    assert trial_resources(res, [two]) == DRIVER_REQUEST == {"memory": 1}
    mixed = trial_resources(res, [one, two])
    assert mixed({"trial_id": "one"}).bundles == [{"CPU": 1.0}]
    assert mixed({"trial_id": "two"}).bundles == [{"memory": 1.0}]


# ---------------------------------------------------------------- the trainer in one process and in two


def test_a_sharded_batch_is_its_shards_sampled_apart():
    from harness.rollout.hf import HFEngine
    from harness.rollout import token_logp
    from harness.trial.batches import shard_seed
    from harness.trial.trainer import Trainer

    trainer = Trainer(build_run_config(frozen_base(workers=1)))
    trainer.batches.shards = 2                                                         # one process, two shards
    batch = trainer.make_batch(5)
    prompts, G = [p.prompt for p in batch.problems], 4
    engine = HFEngine(trainer.model, trainer.tokenizer)
    for s in range(2):                                   # shard s: prompts 4s..4s+3 with its own seed
        shard = engine.generate(prompts[4 * s:4 * s + 4], n=G, temperature=1.0, max_new_tokens=6, seed=shard_seed(0, 5, s))
        assert batch.rollout.texts[16 * s:16 * s + 16] == shard.texts
        rows = batch.rollout.response_mask[16 * s:16 * s + 16]
        assert torch.equal(batch.rollout.response_ids[16 * s:16 * s + 16][rows], shard.response_ids[shard.response_mask])
    assert batch.group_ids.tolist() == [g for g in range(8) for _ in range(G)]
    # Padding to the widest shard leaves every row's log-probs as sampled.
    logp, _ = token_logp(trainer.model, batch.rollout, slice(None), 1.0, G)
    assert (logp.detach() - batch.rollout.logp_behavior)[batch.rollout.response_mask].abs().max() < 1e-5


def test_two_processes_train_like_one(tmp_path):
    """2 ranks of a gloo group (each samples and trains on its shard) vs one process sampling both shards
    and training on the whole batch: the same losses and gradient norms; only rank 0 writes files."""
    base = frozen_base()
    run_trial(trial_of(base, "one"), tmp_path)
    run_two_processes(trial_of(base, "two"), tmp_path)
    assert read_status(tmp_path / "two")["status"] == "completed"
    solo, multi = read_jsonl(tmp_path / "one" / "metrics.jsonl"), read_jsonl(tmp_path / "two" / "metrics.jsonl")
    assert_parity(solo, multi, "2 workers (torch backend, gloo) vs 1 process")
    assert [e["step"] for e in read_jsonl(tmp_path / "two" / "eval.jsonl")] == [0, 3, 4]
    assert not (tmp_path / "two" / "checkpoint.pt").exists()          # removed at the end, by rank 0


# ---------------------------------------------------------------- slow: DeepSpeed, Ray


@pytest.mark.slow
def test_two_deepspeed_workers_resume_after_a_kill(tmp_path):
    """ZeRO-1 across 2 processes: each writes its optimizer partition at the step-2 checkpoint; killed at
    step 3 and rerun, the trial resumes and ends with the numbers of an uninterrupted run."""
    pytest.importorskip("deepspeed")
    base = frozen_base(micro_batch_size=8)
    base["model"] = {"backend": "deepspeed", "zero_stage": 1}
    run_two_processes(trial_of(base, "full"), tmp_path)
    with pytest.raises(Exception):
        run_two_processes(trial_of(base, "resumed"), tmp_path, crash_at_update=3)
    parts = sorted(p.name for p in (tmp_path / "resumed" / "checkpoint.ds" / "state").iterdir())
    assert sum("optim_states" in p for p in parts) == 2, parts      # one optimizer partition per worker
    run_two_processes(trial_of(base, "resumed"), tmp_path)
    strip = [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in read_jsonl(tmp_path / "resumed" / "metrics.jsonl")]
    assert strip == [{k: v for k, v in r.items() if not k.startswith("perf/")}
                     for r in read_jsonl(tmp_path / "full" / "metrics.jsonl")]
    assert read_jsonl(tmp_path / "resumed" / "eval.jsonl") == read_jsonl(tmp_path / "full" / "eval.jsonl")


@pytest.mark.slow
def test_stalebench_run_trains_two_deepspeed_workers_one_trial_at_a_time(tmp_path, monkeypatch):
    """`stalebench run` of 2 trials with train.workers 2 (DeepSpeed ZeRO-1, Ray Train in Ray Tune) on a
    2-CPU local Ray: the trials run one after the other (2 workers x 1 CPU fill the node), and seed 0's
    losses and gradient norms are those of the same trial run in one process (`stalebench train`)."""
    pytest.importorskip("deepspeed")
    from harness.suite.runner import run_suite

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)              # the local Ray gets 2 CPUs on any machine
    base = frozen_base()
    base["model"] = {"backend": "deepspeed", "zero_stage": 1}
    path = tmp_path / "w2.yaml"
    path.write_text(yaml.safe_dump({"suite": "w2", "base": base, "seeds": [0, 1], "resources": {"cpu": 1}}))
    counts = run_suite(load_suite_file(path), results_root=tmp_path / "results", progress=False)
    assert counts == {"completed": 2}
    suite_dir = tmp_path / "results" / "w2"
    spans = sorted((json.loads((suite_dir / t / "provenance.json").read_text())["started_utc"],
                    read_status(suite_dir / t)["updated_at"]) for t in ("s0", "s1"))
    import datetime as dt
    second_start = dt.datetime.strptime(spans[1][0], "%Y-%m-%d %H:%M:%S UTC").replace(tzinfo=dt.timezone.utc).timestamp()
    assert second_start >= spans[0][1] - 1.0, spans               # the second started after the first ended
    run_trial(trial_of(base, "s0"), tmp_path / "solo")
    assert_parity(read_jsonl(tmp_path / "solo" / "s0" / "metrics.jsonl"), read_jsonl(suite_dir / "s0" / "metrics.jsonl"),
                  "2 DeepSpeed ZeRO-1 workers (Ray Train) vs 1 process")
