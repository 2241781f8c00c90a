"""The Weights & Biases mirror: the suite's `tracking:` section, the one-line errors, and a real trial
mirrored to MLflow and W&B side by side (W&B offline: no network), read back from W&B's run file.

W&B's offline run file (<dir>/wandb/offline-run-*/run-<id>.wandb) is a LevelDB-style log of protobuf
records (a 7-byte header ':W&B' + magic + version, then 32 KiB blocks of chunks, each with a 7-byte
header crc32 / length / type); `wandb_records` reads it with W&B's own protobuf classes.
"""
from __future__ import annotations

import json
import pickle
import struct
import time
from pathlib import Path

import pytest
import yaml

from harness.config.run import ConfigError
from harness.config.expand import Trial, load_suite_file, parse_suite
from harness.store.tracking import Mirrors, MlflowTarget, WandbTarget, open_suite_run, require_wandb
from harness.store.tracking.wandb_sink import WandbConfig
from harness.store.tracking.wandb_sink import WandbSink, run_id

TINY_LAB = {"vocab": 3, "length": 2, "reward_frac": 0.3, "measure_groups": 40, "loop_groups": 8}
BASE = {"algorithm": "gmc_grpo", "eps": 0.2, "group_size": 4, "delay": 2,
        "train": {"steps": 12, "lr": 5.0, "prompts_per_step": 2, "advantage": "mean", "grad_clip": 0.0},
        "eval": {"every_steps": 5}, "lab": TINY_LAB}


def _suite(tracking) -> dict:
    return {"suite": "wb", "base": BASE, "seeds": [0], "tracking": tracking}


# ---------------------------------------------------------------- config (no wandb needed)


def test_tracking_section_is_typed_and_strict():
    suite = parse_suite(_suite({"wandb": {"project": "stale-runs", "mode": "online", "entity": "lab"}}))
    assert suite.tracking.wandb == WandbConfig(project="stale-runs", entity="lab", mode="online")
    assert parse_suite(_suite({"wandb": {}})).tracking.wandb == WandbConfig()          # offline by default
    assert parse_suite({k: v for k, v in _suite({}).items() if k != "tracking"}).tracking.wandb is None
    for tracking, message in [({"wandb": {"mode": "cloud"}}, "tracking.wandb.mode: 'cloud' is not valid; choose one of offline, online"),
                              ({"wandb": {"projekt": "x"}}, "tracking.wandb.projekt: unknown key; valid keys: entity, mode, project"),
                              ({"mlflow": {}}, "tracking.mlflow: unknown key; valid keys: wandb"),
                              ({"wandb": {"project": "a/b"}}, "tracking.wandb.project: 'a/b' is not a valid W&B name"),
                              ("wandb", "tracking: expected a mapping")]:
        with pytest.raises(ConfigError, match="^suite: " + message.replace(".", r"\.").replace("(", r"\(")) as err:
            parse_suite(_suite(tracking))
        assert "\n" not in str(err.value)


def test_tracking_is_not_part_of_a_trials_identity(tmp_path):
    plain, mirrored = tmp_path / "a.yaml", tmp_path / "b.yaml"
    plain.write_text(yaml.safe_dump({k: v for k, v in _suite({}).items() if k != "tracking"}))
    mirrored.write_text(yaml.safe_dump(_suite({"wandb": {"mode": "offline"}})))
    from harness.config.expand import expand
    (a,), (b,) = expand(load_suite_file(plain)), expand(load_suite_file(mirrored))
    assert (a.trial_id, a.config) == (b.trial_id, b.config)


def test_missing_package_and_missing_key_are_one_line(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError, match=r"^tracking\.wandb: the `wandb` package is not installed; "
                                          r"pip install 'stalebench\[wandb\]'"):
        require_wandb(WandbConfig())
    monkeypatch.setattr(importlib.util, "find_spec", real)
    pytest.importorskip("wandb", reason="needs the `wandb` extra: pip install 'stalebench[wandb]'")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", "/nonexistent")
    with pytest.raises(ConfigError, match=r"^tracking\.wandb\.mode online: no W&B API key \(set WANDB_API_KEY"):
        require_wandb(WandbConfig(mode="online"))
    require_wandb(WandbConfig(mode="offline"))                     # offline needs no key


def test_cli_check_validates_the_tracking_section(tmp_path, monkeypatch, capsys):
    from harness.cli import main

    bad, good = tmp_path / "bad.yaml", tmp_path / "good.yaml"
    bad.write_text(yaml.safe_dump(_suite({"wandb": {"mode": "sometimes"}})))
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tracking.wandb.mode: 'sometimes' is not valid" in err
    pytest.importorskip("wandb", reason="needs the `wandb` extra: pip install 'stalebench[wandb]'")
    good.write_text(yaml.safe_dump(_suite({"wandb": {"project": "p1"}})))
    assert main(["check", str(good)]) == 0
    assert "tracking: MLflow and W&B (project p1, mode offline)" in capsys.readouterr().out


def test_run_ids_follow_the_trial_and_its_config():
    params = {"train.lr": 0.1, "trial_id": "gmc_grpo-d16-e0.2-g8-s0"}
    rid = run_id("suite", "gmc_grpo-d16-e0.2-g8-s0", params)
    assert rid.startswith("gmc_grpo-d16-e0_2-g8-s0-") and len(rid) == 23 + 1 + 12   # the id, "-", 12 hex digits
    assert rid == run_id("suite", "gmc_grpo-d16-e0.2-g8-s0", dict(params))           # a resume: the same run
    assert rid != run_id("suite", "gmc_grpo-d16-e0.2-g8-s0", {**params, "train.lr": 0.2})   # config changed
    assert rid != run_id("other", "gmc_grpo-d16-e0.2-g8-s0", params)
    target = WandbTarget("p", None, "offline", "suite", "/r")
    assert pickle.loads(pickle.dumps(Mirrors((target,)))) == Mirrors((target,))       # travels to Ray workers


class _FakeRun:
    def __init__(self):
        self.logged: list[tuple[int, dict]] = []

    def log(self, row, step):
        self.logged.append((step, dict(row)))


def test_rows_reach_wandb_in_step_order_once():
    """RunLog offers rows in the order it wrote them: on a resume, the kept metrics rows (steps 1-3) and
    then the kept evaluation rows (steps 0, 3); W&B's history needs increasing steps, so the sink sorts
    them and merges one step's metrics and evaluation rows: steps 0, 1, 2, 3 once each. A later batch
    may still add to the last step (its evaluation row); a step before it is dropped, not reordered."""
    sink = WandbSink.__new__(WandbSink)
    sink.run, sink.next_step, sink.held = _FakeRun(), 0, set()
    sink.log_rows([(1, {"loss/value": 1.0}), (2, {"loss/value": 2.0}), (3, {"loss/value": 3.0, "lab/J": 0.3}),
                   (0, {"eval/acc": 0.1}), (3, {"eval/acc": 0.4, "lab/J": 0.7})])
    sink.log_rows([(3, {"eval/pass_k": 0.5, "lab/J": 0.9}), (2, {"loss/value": 9.0}), (4, {"loss/value": 4.0})])
    # lab/J at step 3 keeps its first value 0.3 (in the batch and across batches), as MLflow does
    assert sink.run.logged == [(0, {"eval/acc": 0.1}), (1, {"loss/value": 1.0}), (2, {"loss/value": 2.0}),
                               (3, {"loss/value": 3.0, "lab/J": 0.3, "eval/acc": 0.4}), (3, {"eval/pass_k": 0.5}),
                               (4, {"loss/value": 4.0})]
    resumed = WandbSink.__new__(WandbSink)                  # online resume: W&B holds steps < starting_step
    resumed.run, resumed.next_step, resumed.held = _FakeRun(), 3, set()
    resumed.log_rows([(1, {"loss/value": 1.0}), (3, {"loss/value": 3.0})])
    assert resumed.run.logged == [(3, {"loss/value": 3.0})]


# ---------------------------------------------------------------- a real trial, W&B offline


def wandb_records(path: Path) -> list:
    """Every protobuf Record of a W&B run file (see the module docstring)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B", path
    pos, buf, out = 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:                   # a block trailer too short for a header: padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:                 # zero padding at the end of a block
            pos += block - pos % block
            continue
        if pos + 7 + length > len(data):             # a chunk the service is still writing: read it next time
            break
        buf += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):                            # FULL or LAST chunk: a whole record
            record = pb.Record()
            record.ParseFromString(buf)
            out.append(record)
            buf = b""
    return out


def finished_records(path: Path, timeout_s: float = 60.0) -> list:
    """The run file's records once W&B's service has written its exit record: `finish()` returns before
    the service (a separate process) has flushed the file, so a reader right after it may see only the
    header (seen here about one run in four)."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = wandb_records(path)
        if records and records[-1].WhichOneof("record_type") == "exit" or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def _values(items) -> dict[str, object]:
    return {"/".join([i.key] if i.key else list(i.nested_key)): json.loads(i.value_json) for i in items}


def test_a_trial_mirrored_to_mlflow_and_wandb_offline(tmp_path, monkeypatch):
    """One estimator-lab trial through run_trial with both mirrors. W&B's run holds what MLflow's does:
    every metric at the steps of the files (a metrics row and an evaluation row of a step in one history
    row), the flat config as params, the summary metrics, the provenance tags, and the final status."""
    pytest.importorskip("wandb", reason="needs the `wandb` extra: pip install 'stalebench[wandb]'")
    from mlflow.tracking import MlflowClient

    from harness.config.run import build_run_config
    from harness.trial.lifecycle import mirror_params, run_trial
    from harness.store.trialdir import read_evals, read_metrics

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    experiment, parent = open_suite_run(uri, "wb", "suite-1", {"stalebench.role": "suite"},
                                        artifact_location=(tmp_path / "mlartifacts").as_uri())
    target = WandbTarget.of(WandbConfig(project="stalebench-test"), "wb", tmp_path / "results")
    trial = Trial("gmc_grpo-d2-s0", {"seed": 0}, build_run_config(BASE, {"seed": 0}))
    mirrors = Mirrors((MlflowTarget(uri, experiment, parent), target))
    status = run_trial(trial, tmp_path / "results" / "wb", mirrors)
    assert status["status"] == "completed"
    trial_dir = tmp_path / "results" / "wb" / trial.trial_id

    (run_dir,) = (tmp_path / "results" / "wandb").glob("offline-run-*")
    (run_file,) = run_dir.glob("run-*.wandb")
    records = finished_records(run_file)
    kinds = [r.WhichOneof("record_type") for r in records]
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    history = [_values(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
    summary = {k: v for r in records if r.WhichOneof("record_type") == "summary" for k, v in _values(r.summary.update).items()}
    config = {k: v for r in records if r.WhichOneof("record_type") == "config" for k, v in _values(r.config.update).items()}
    config.update(_values(run.config.update))
    assert run.run_id == run_id("wb", trial.trial_id, mirror_params(trial))
    assert run.display_name == trial.trial_id and run.project == "stalebench-test" and run.run_group == "wb"
    assert kinds[-1] == "exit" and next(r.exit.exit_code for r in records if r.WhichOneof("record_type") == "exit") == 0

    client = MlflowClient(uri)
    (ml,) = client.search_runs([experiment], "tags.trial_id = 'gmc_grpo-d2-s0'")
    # per-step metrics: for every key, the same (step, value) pairs in MLflow, in W&B and in the files
    metric_rows, eval_rows = read_metrics(trial_dir), read_evals(trial_dir)
    files = metric_rows + eval_rows
    keys = {k for r in files for k in r if k != "step"}
    assert {"loss/value", "eval/acc", "lab/bias_true"} <= keys
    for key in keys:
        steps = sorted({r["step"] for r in files if key in r})           # lab/J is in both files at eval steps
        wb = sorted((h["_step"], h[key]) for h in history if key in h)
        mlf = sorted((m.step, m.value) for m in client.get_metric_history(ml.info.run_id, key))
        assert [s for s, _ in wb] == steps and wb == [(s, pytest.approx(v, rel=1e-12)) for s, v in mlf], key
        sources = [rows for rows in (metric_rows, eval_rows) if any(key in r for r in rows)]
        if len(sources) == 1:                                             # and the values of the files
            assert [v for _, v in wb] == [pytest.approx(float(r[key]), rel=1e-12) for r in sources[0] if key in r]
    # params: the flat config, as MLflow's params (strings there)
    assert {k: str(config[k]) for k in ml.data.params} == ml.data.params
    assert config["train.lr"] == 5.0 and config["trial_id"] == trial.trial_id
    # summary metrics and provenance tags
    summaries = {k: v for k, v in ml.data.metrics.items() if k.startswith("summary/")}
    assert summaries and {k: summary[k] for k in summaries} == summaries
    tags = {k: v for k, v in ml.data.tags.items() if k.startswith("stalebench.") and k != "stalebench.status"}
    assert tags and {k: str(config[k]) for k in tags} == tags
    assert summary["stalebench.status"] == "completed" == ml.data.tags["stalebench.status"]
    saved = {p.name for p in (run_dir / "files").iterdir()}
    assert {"config.yaml", "metrics.jsonl", "eval.jsonl", "status.json"} <= saved
