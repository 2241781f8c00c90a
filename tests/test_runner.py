"""The suite runner on real Ray Tune and real MLflow (a tracking server and the embedded SQLite store).

Without Ray (fast): the status table and progress line, the driver-side model preparation, the MLflow
resume dedupe and the kill-while-mirroring order, the experiment-creation race, the `tune:` section, the
import boundary. With Ray: one suite through run_suite against a real `mlflow server` (default run);
behind `-m slow`: SIGKILL of the CLI and rerun, a killed worker retried, tune_suite, a `ray start` cluster
with shared storage. Ray tests use conftest's random tiny model (`model.kind: path`): no base model build.
"""
from __future__ import annotations

import ast
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch
import yaml

from harness.config.run import ConfigError
from harness.suite.status import ProgressLine, suite_status
from harness.config.expand import expand, load_suite_file, parse_suite
from harness.store.tracking import MlflowSink, RunLog, open_suite_run
from harness.store.trialdir import read_jsonl

PROV = {"config_sha256": "test"}

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- helpers


def make_suite(tmp_path: Path, name: str, base: dict, grid: dict, **extra) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"suite": name, "base": base, "grid": grid, "seeds": [0], **extra}, sort_keys=False))
    return path


def child_runs(client, experiment_id: str) -> dict[str, object]:
    runs = client.search_runs([experiment_id], "tags.trial_id != ''", max_results=1000)
    ids = [r.data.tags["trial_id"] for r in runs]
    assert len(ids) == len(set(ids)), f"duplicate child runs: {sorted(ids)}"
    return {r.data.tags["trial_id"]: r for r in runs}


def assert_mlflow_mirrors_files(client, run, trial_dir: Path) -> None:
    """Every metric of metrics.jsonl / eval.jsonl is in MLflow at exactly the steps of the files, once."""
    for name in ("metrics.jsonl", "eval.jsonl"):
        rows = read_jsonl(trial_dir / name)
        for key in {k for r in rows for k in r if k != "step"}:
            want = [r["step"] for r in rows if key in r]
            got = sorted(m.step for m in client.get_metric_history(run.info.run_id, key))
            assert got == want, f"{trial_dir.name} {key}: MLflow steps {got} != file steps {want}"


def kill_session(sid: int) -> None:
    """SIGKILL every process of session `sid` (a driver started with start_new_session and its Ray)."""
    out = subprocess.run(["ps", "-eo", "pid=,sid="], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        pid, s = map(int, line.split())
        if s == sid and pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    env.update(PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""), RAY_AUTH_MODE="disabled")
    return env


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` on 127.0.0.1 (free port, SQLite backend in tmp) for the module's tests."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    with open(root / "server.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{root / 'db.sqlite'}",
             "--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
             "--workers", "1"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})   # no job-runner processes
    uri = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    try:
        while True:
            try:
                urllib.request.urlopen(f"{uri}/health", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail(f"mlflow server did not start: {(root / 'server.log').read_text()[-2000:]}")
                time.sleep(0.3)
        yield uri
    finally:
        kill_session(proc.pid)
        proc.wait(timeout=30)


# ---------------------------------------------------------------- no Ray


def test_only_the_runner_package_imports_ray():
    offenders = []
    for path in (REPO / "harness").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            if any(n == "ray" or n.startswith("ray.") for n in names) and path.parent.name != "runner":
                offenders.append(str(path.relative_to(REPO)))
    assert offenders == []


def test_status_table_and_counts(tmp_path, tiny_base):
    suite_path = make_suite(tmp_path, "st", tiny_base, {"algorithm": ["grpo", "tis"], "delay": [0, 2]})
    suite = load_suite_file(suite_path)
    results = tmp_path / "results" / "st"
    results.mkdir(parents=True)
    (results / "suite.yaml").write_text(suite.source)
    ids = [t.trial_id for t in expand(suite)]
    done, failed, running = RunLog(results / ids[0]), RunLog(results / ids[1]), RunLog(results / ids[2])
    done.start({"train": {"steps": 6}}, {}, PROV)
    for s in range(1, 7):
        done.metrics(s, {"loss/value": 0.1})
    done.eval(6, {"eval/acc": 0.25})
    done.status("completed", step=6)
    failed.status("failed", step=0, error="FileNotFoundError: no model at /x")
    running.start({"train": {"steps": 6}}, {}, PROV)
    running.metrics(1, {"loss/value": 0.1})
    running.metrics(2, {"loss/value": 0.1})
    table = suite_status(results)
    lines = table.splitlines()
    assert lines[-1] == "4 trials: 1 running, 1 failed, 1 completed, 1 pending"
    row = {ln.split()[0]: ln.split() for ln in lines[2:-1]}
    assert row[ids[0]][1:4] == ["completed", "6/6", "0.250"]
    assert row[ids[1]][1:3] == ["failed", "0/6"] and "FileNotFoundError: no model at /x" in table
    assert row[ids[2]][1:3] == ["running", "2/6"]
    assert row[ids[3]][1:3] == ["pending", "0/6"]
    # order: running, failed, completed, pending
    assert [ln.split()[0] for ln in lines[2:-1]] == [ids[2], ids[1], ids[0], ids[3]]
    with pytest.raises(ConfigError, match="no suite results here"):
        suite_status(tmp_path / "nothing")
    # the live progress line: failed counts as done; steps 6 (completed) + 6 (failed) + 2 (running) + 0
    phase, line = str(ProgressLine(results, {t: 6 for t in ids})).split(" | ", 1)   # no step moved yet: a phase first
    assert phase in ("starting the trials' workers", "loading the base model"), phase
    assert line.startswith("2/4 trials done | 1 running | 1 failed | trial-steps 14/24 (running: 2/6) | elapsed 0m00s "
                           "| ETA ?"), line


def test_cli_status_resolves_name_dir_and_file(tmp_path, tiny_base, monkeypatch, capsys):
    from harness.cli import main

    suite_path = make_suite(tmp_path, "res", tiny_base, {"algorithm": ["grpo"]})
    results = tmp_path / "results"
    (results / "res").mkdir(parents=True)
    (results / "res" / "suite.yaml").write_text(suite_path.read_text())
    monkeypatch.chdir(tmp_path)
    for spec in ("res", str(results / "res"), str(suite_path)):
        assert main(["status", spec, "--results", str(results)]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == "1 trials: 1 pending"
    assert main(["status", "nope", "--results", str(results)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_damaged_base_stops_the_run_before_anything_is_written(tmp_path, monkeypatch, capsys):
    """The frozen base is checked against its manifest in the driver: one line naming the file and the
    expected hash, exit 2, no results directory, no MLflow run."""
    import shutil

    from harness import bases as base_models
    bases = tmp_path / "bases"
    shutil.copytree(base_models.BASES_DIR / "tiny-addrev-v1", bases / "tiny-addrev-v1")
    monkeypatch.setattr(base_models, "BASES_DIR", bases)
    weights = bases / "tiny-addrev-v1" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x00")
    base = {"model": {"kind": "tiny"}, "train": {"steps": 2}}
    suite_path = tmp_path / "b.yaml"
    suite_path.write_text(yaml.safe_dump({"suite": "b", "base": base}))
    results = tmp_path / "results"
    from harness.cli import main
    assert main(["run", str(suite_path), "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.safetensors: sha256" in err and "does not match the expected" in err
    assert not results.exists()


def test_mlflow_resume_backfills_unflushed_rows_and_skips_logged_ones(tmp_path, mlflow_server):
    """A killed trial can leave rows in metrics.jsonl that never reached MLflow (the mirror is fed in
    batches of `flush_every`) and MLflow rows beyond its checkpoint; resumed, it holds each step once."""
    from mlflow.tracking import MlflowClient

    exp, parent = open_suite_run(mlflow_server, "dedupe", "suite-1", {"stalebench.role": "suite"})
    trial_dir = tmp_path / "t"

    def attempt(resume_step: int, steps: range, offset: float) -> RunLog:
        log = RunLog(trial_dir, MlflowSink(mlflow_server, exp, parent, "t", {"train.lr": 1e-3}), flush_every=4)
        log.start({"train": {"steps": 10}}, {}, PROV, resume_step=resume_step)
        for s in steps:
            log.metrics(s, {"loss/value": s + offset})
        return log

    attempt(0, range(1, 7), 0.0)          # MLflow gets 1-4 (one batch); 5-6 only reach the file; killed
    attempt(5, range(6, 10), 0.5)         # checkpoint 5: file keeps 1-5, 5 must be backfilled; MLflow 1-9; killed
    last = attempt(7, range(8, 11), 0.75)  # checkpoint 7: file keeps 1-7; MLflow already holds 8-9
    last.status("completed", step=10)
    client = MlflowClient(mlflow_server)
    runs = child_runs(client, exp)
    assert list(runs) == ["t"]
    history = sorted((m.step, m.value) for m in client.get_metric_history(runs["t"].info.run_id, "loss/value"))
    assert [s for s, _ in history] == list(range(1, 11))
    # each step's first mirrored value: 1-5 from attempt 1 (5 by backfill), 6-9 from attempt 2, 10 from 3
    assert [v for _, v in history] == [1, 2, 3, 4, 5, 6.5, 7.5, 8.5, 9.5, 10.75]
    assert [r["step"] for r in read_jsonl(trial_dir / "metrics.jsonl")] == list(range(1, 11))
    assert runs["t"].data.params["train.lr"] == "0.001"
    assert client.get_run(runs["t"].info.run_id).info.status == "FINISHED"


class _DyingSink:
    """A mirror whose process is killed while it flushes (os._exit: no finally, no atexit)."""

    def log_rows(self, rows):
        os._exit(9)

    def set_status(self, status, error):
        pass

    def set_tags(self, tags):
        pass


def _finish_and_die(trial_dir: Path) -> None:
    log = RunLog(trial_dir, _DyingSink(), flush_every=100)
    log.start({}, {}, PROV)
    log.metrics(1, {"loss/value": 1.0})
    log.status("completed", step=1)


def test_a_kill_while_mirroring_the_last_rows_leaves_the_trial_unfinished(tmp_path):
    """status.json is what a rerun trusts to skip a trial: it may say `completed` only once the
    mirror holds every row, else a kill in between loses the last rows from MLflow for good."""
    import multiprocessing

    child = multiprocessing.get_context("fork").Process(target=_finish_and_die, args=(tmp_path / "t",))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 9
    assert json.loads((tmp_path / "t" / "status.json").read_text())["status"] == "running"
    assert [r["step"] for r in read_jsonl(tmp_path / "t" / "metrics.jsonl")] == [1]


def test_open_suite_run_survives_the_create_race(mlflow_server, monkeypatch):
    from mlflow.tracking import MlflowClient

    exp1, _ = open_suite_run(mlflow_server, "race", "suite-1", {})
    # the other driver created the experiment between our lookup and our create
    monkeypatch.setattr(MlflowClient, "get_experiment_by_name",
                        _first_call_returns_none(MlflowClient.get_experiment_by_name))
    exp2, run2 = open_suite_run(mlflow_server, "race", "suite-2", {})
    assert exp2 == exp1 and MlflowClient(mlflow_server).get_run(run2).info.experiment_id == exp1


def _first_call_returns_none(fn):
    calls = []

    def wrapper(self, name):
        calls.append(name)
        return None if len(calls) == 1 else fn(self, name)
    return wrapper


def test_tune_section_is_strict(tiny_base):
    from harness.suite.runner import tune_spec

    def suite(tune):
        return parse_suite({"suite": "t", "base": tiny_base, "grid": {"algorithm": ["grpo", "tis"]}, "tune": tune})

    spec = tune_spec(suite({"param": "train.lr", "low": 1e-5, "high": "1e-3", "trials_per_algorithm": 4}))
    assert (spec.param, spec.low, spec.high, spec.trials_per_algorithm, spec.metric, spec.mode) == \
        ("train.lr", 1e-5, 1e-3, 4, "eval/acc", "max")
    for tune, needle in [
        ({"param": "train.lr", "low": 1e-5, "high": 1e-3, "trails_per_algorithm": 4}, "tune.trails_per_algorithm: unknown key"),
        ({"param": "train.lr", "high": 1e-3}, "tune.low: required"),
        ({"param": "train.lr", "low": 1e-3, "high": 1e-5}, "need 0 < low < high"),
        ({"param": "train.lr", "low": 0, "high": 1e-3}, "need 0 < low < high"),
        ({"param": "train.lrr", "low": 1e-5, "high": 1e-3}, "tune.param: 'train.lrr' is not a run-config key"),
        ({"param": "train.steps", "low": 1, "high": 10}, "tune.param: 'train.steps' must be a float setting"),
        ({"param": "train.lr", "low": 1e-5, "high": 1e-3, "mode": "best"}, "tune.mode: 'best' is not valid"),
        ({"param": "train.lr", "low": 1e-5, "high": 1e-3, "trials_per_algorithm": 0}, "must be >= 1"),
        ({"param": "train.lr", "low": 1e-5, "high": 1e-3, "trials_per_algorithm": "8"}, "tune.trials_per_algorithm: expected int"),
        ({}, "has no tune section"),
    ]:
        with pytest.raises(ConfigError) as err:
            tune_spec(suite(tune))
        assert needle in str(err.value) and "\n" not in str(err.value)


def test_tune_never_tunes_on_a_reported_seed(tiny_base):
    from harness.suite.runner import tune_spec

    def suite(**tune):
        return parse_suite({"suite": "t", "base": tiny_base, "grid": {"algorithm": ["grpo", "tis"]}, "seeds": [0, 1, 7],
                            "tune": {"param": "train.lr", "low": 1e-5, "high": 1e-3, **tune}})

    s = suite()
    assert tune_spec(s).tune_seed(s) == 1007                        # 1000 + the largest reported seed
    s = suite(seed=42)
    assert tune_spec(s).tune_seed(s) == 42
    with pytest.raises(ConfigError, match=r"tune.seed: 1 is one of the suite's reported seeds \[0, 1, 7\]"):
        tune_spec(suite(seed=1))


def test_tuned_overrides_file_can_be_copied_into_a_suite(tmp_path, tiny_base):
    from harness.suite.runner import tune_spec
    from harness.suite.runner.search import _write_overrides

    suite = parse_suite({"suite": "t", "base": tiny_base, "grid": {"algorithm": ["grpo", "tis", "gspo"]},
                         "tune": {"param": "train.lr", "low": 1e-5, "high": 1e-3, "trials_per_algorithm": 2}})
    spec = tune_spec(suite)
    rows = lambda algo, pts: [{"algorithm": algo, "train.lr": lr, "status": st, "objective": obj} for lr, obj, st in pts]
    results = {"grpo": rows("grpo", [(1e-4, 0.5, "completed"), (3e-4, 0.6, "completed")]),
               "tis": rows("tis", [(2e-5, 0.4, "completed"), (9e-4, float("-inf"), "diverged")]),
               "gspo": rows("gspo", [(1e-4, None, "failed"), (2e-4, None, "failed")])}
    path = _write_overrides(suite, spec, results, tmp_path)
    text = path.read_text()
    assert yaml.safe_load(text) == {"overrides": {"grpo": {"train.lr": 3e-4}, "tis": {"train.lr": 2e-5}}}
    assert "No completed trial for: gspo" in text
    copied = {"suite": "uses", "base": tiny_base, "grid": {"algorithm": ["grpo", "tis"]}, **yaml.safe_load(text)}
    trials = {t.config.algorithm: t for t in expand(parse_suite(copied))}
    assert trials["grpo"].config.train.lr == 3e-4 and trials["tis"].config.train.lr == 2e-5


def test_tune_lr_suite_file_is_valid():
    from harness.suite.runner import tune_spec

    suite = load_suite_file(REPO / "suites" / "tune-lr.yaml")
    spec = tune_spec(suite)
    assert spec.param == "train.lr" and len(suite.grid["algorithm"]) >= 2


# ---------------------------------------------------------------- Ray


def test_run_suite_with_mlflow_server(tmp_path, tiny_base, mlflow_server, monkeypatch, capfd):
    """2 working estimators × 2 delays complete, a third estimator with a broken model (a directory whose
    config.json is not a model config) fails inside its trial after its retry; results files, one line
    per failure, and MLflow (one parent, one child per trial, params, every step once) are checked."""
    from mlflow.tracking import MlflowClient

    from harness.suite.runner import run_suite

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    path = make_suite(tmp_path, "e2e", tiny_base, {"algorithm": ["grpo", "gmc_grpo", "tis"], "delay": [0, 2]},
                      overrides={"tis": {"model.path": str(broken)}},
                      resources={"cpu": 1, "max_failures": 1})
    suite = load_suite_file(path)
    results = tmp_path / "results"
    counts = run_suite(suite, results_root=results, progress=True)
    out, err = capfd.readouterr()
    assert counts == {"completed": 4, "failed": 2}, err
    suite_dir = results / "e2e"
    assert (suite_dir / "suite.yaml").read_text() == path.read_text()
    trials = {t.trial_id: t for t in expand(suite)}
    failed = [tid for tid in trials if tid.startswith("tis")]
    for tid in trials:
        status = json.loads((suite_dir / tid / "status.json").read_text())
        if tid in failed:
            assert status["status"] == "failed" and status["error"] and "\n" not in status["error"]
            assert "Traceback" in (suite_dir / tid / "error.log").read_text()
        else:
            assert status["status"] == "completed" and status["step"] == 6
            assert [r["step"] for r in read_jsonl(suite_dir / tid / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
            assert [r["step"] for r in read_jsonl(suite_dir / tid / "eval.jsonl")] == [0, 3, 6]
            assert not (suite_dir / tid / "checkpoint.pt").exists()
    # the console: one FAILED line per failed trial with its reason, a retry line, no traceback
    for tid in failed:
        reason = json.loads((suite_dir / tid / "status.json").read_text())["error"]
        assert sum(f"FAILED {tid}: {reason}" in ln for ln in err.splitlines()) == 1, err
        assert f"retrying {tid}: {reason.split(':')[0]}" in err
    assert "Traceback" not in out + err and "(raylet)" not in out + err and "ERROR" not in err, err
    # MLflow: the experiment is named after the suite; one parent run; one child per trial under it
    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name("e2e")
    parents = client.search_runs([experiment.experiment_id], "tags.`stalebench.role` = 'suite'")
    assert len(parents) == 1 and parents[0].info.status == "FAILED"
    assert parents[0].data.metrics == {"trials/completed": 4.0, "trials/failed": 2.0}
    runs = child_runs(client, experiment.experiment_id)
    assert sorted(runs) == sorted(trials)
    for tid, run in runs.items():
        assert run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert run.data.params["algorithm"] == trials[tid].config.algorithm
        assert run.data.params["train.steps"] == "6" and run.data.params["delay"] == str(trials[tid].config.delay)
        if tid in failed:
            assert run.info.status == "FAILED" and run.data.tags["stalebench.error"] == json.loads(
                (suite_dir / tid / "status.json").read_text())["error"]
        else:
            assert run.info.status == "FINISHED"
            assert_mlflow_mirrors_files(client, run, suite_dir / tid)
            accs = [r["eval/acc"] for r in read_jsonl(suite_dir / tid / "eval.jsonl")]
            assert run.data.metrics["summary/final_acc"] == accs[-1] and run.data.metrics["summary/best_acc"] == max(accs)
            assert run.data.metrics["summary/diverged"] == 0.0
            assert run.data.tags["stalebench.base_sha256"] and run.data.tags["stalebench.config_sha256"]
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"     # the UI opens on runs
    assert "3 failed" not in suite_status(suite_dir) and "6 trials: 2 failed, 4 completed" in suite_status(suite_dir)


@pytest.mark.slow      # two CLI runs, two Ray starts: 80-150 s on 2 cores
def test_sigkill_driver_then_rerun_resumes_without_loss(tmp_path, tiny_base):
    """SIGKILL the whole `stalebench run` process group mid-suite, run the same command again: finished
    trials are not rerun, the interrupted one resumes from its checkpoint, files and MLflow (the default
    SQLite store) hold every step exactly once, one child run per trial."""
    from mlflow.tracking import MlflowClient

    base = {**tiny_base, "train": {**tiny_base["train"], "steps": 30, "checkpoint_every": 4}, "eval": {"every_steps": 10}}
    path = make_suite(tmp_path, "resume", base, {"algorithm": ["grpo", "gmc_grpo"], "delay": [0, 2]})
    suite = load_suite_file(path)
    ids = [t.trial_id for t in expand(suite)]
    results = tmp_path / "results"
    suite_dir = results / "resume"
    cmd = [sys.executable, "-m", "harness.cli", "run", str(path), "--results", str(results)]
    with open(tmp_path / "run1.log", "w") as log1:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=cli_env(), stdout=log1, stderr=subprocess.STDOUT,
                                start_new_session=True)
    statuses: dict[str, str | None] = {}
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            statuses = {t: _status(suite_dir / t) for t in ids}
            done = [t for t, s in statuses.items() if s == "completed"]
            partial = [t for t, s in statuses.items() if s == "running" and (suite_dir / t / "checkpoint.pt").exists()]
            if done and partial:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"no completed + checkpointed trial before the kill: {statuses}\n{(tmp_path / 'run1.log').read_text()[-3000:]}")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        kill_session(proc.pid)
    statuses = {t: _status(suite_dir / t) for t in ids}
    finished = {t: (suite_dir / t / "status.json").read_text() for t, s in statuses.items() if s == "completed"}
    interrupted = [t for t, s in statuses.items() if s == "running"]
    assert finished and interrupted
    before = {t: read_jsonl(suite_dir / t / "metrics.jsonl") for t in interrupted}
    checkpoint_step = {t: torch.load(suite_dir / t / "checkpoint.pt", weights_only=False)["batches_done"]
                       for t in interrupted if (suite_dir / t / "checkpoint.pt").exists()}
    assert checkpoint_step

    rerun = subprocess.run(cmd, check=False, cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=600,
                           start_new_session=True)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"{len(finished)} already finished, {len(ids) - len(finished)} to run" in rerun.stderr
    assert "Traceback" not in rerun.stdout + rerun.stderr
    for t in ids:
        assert _status(suite_dir / t) == "completed"
        assert [r["step"] for r in read_jsonl(suite_dir / t / "metrics.jsonl")] == list(range(1, 31))
        assert [r["step"] for r in read_jsonl(suite_dir / t / "eval.jsonl")] == [0, 10, 20, 30]
    for t, text in finished.items():                   # not scheduled again: status.json untouched
        assert (suite_dir / t / "status.json").read_text() == text
    for t, step in checkpoint_step.items():            # resumed, not restarted: the rows up to the
        kept = [r for r in before[t] if r["step"] <= step]   # checkpoint are the first attempt's (timings too)
        assert step > 0 and read_jsonl(suite_dir / t / "metrics.jsonl")[:len(kept)] == kept
    client = MlflowClient(f"sqlite:///{(results / 'mlflow.db').resolve()}")
    experiment = client.get_experiment_by_name("resume")
    assert len(client.search_runs([experiment.experiment_id], "tags.`stalebench.role` = 'suite'")) == 2
    runs = child_runs(client, experiment.experiment_id)
    assert sorted(runs) == sorted(ids)
    for t, run in runs.items():
        assert_mlflow_mirrors_files(client, run, suite_dir / t)
        assert client.get_run(run.info.run_id).info.status == "FINISHED"


def _status(trial_dir: Path) -> str | None:
    try:
        return json.loads((trial_dir / "status.json").read_text())["status"]
    except (OSError, ValueError):
        return None


@pytest.mark.slow
def test_worker_crash_is_retried_and_resumes(tmp_path, tiny_base, monkeypatch, capfd):
    """SIGKILL the Ray worker running a trial (a transient failure): Tune retries it, the retry resumes
    from the checkpoint, the console shows one 'retrying' line and no traceback."""
    import threading

    import psutil

    from harness.suite.runner import run_suite

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    base = {**tiny_base, "train": {**tiny_base["train"], "steps": 40, "checkpoint_every": 4}}
    suite = load_suite_file(make_suite(tmp_path, "crash", base, {"algorithm": ["grpo"]}, resources={"max_failures": 1}))
    trial_dir = tmp_path / "results" / "crash" / expand(suite)[0].trial_id
    killed = []

    def killer():
        deadline = time.time() + 300
        while time.time() < deadline and not killed:
            if (trial_dir / "checkpoint.pt").exists():
                for p in psutil.Process().children(recursive=True):
                    if "ImplicitFunc" in " ".join(p.cmdline()):
                        p.kill()
                        killed.append(p.pid)
            time.sleep(0.05)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    counts = run_suite(suite, results_root=tmp_path / "results")
    thread.join(timeout=1)
    _, err = capfd.readouterr()
    assert killed and counts == {"completed": 1}, err
    assert [r["step"] for r in read_jsonl(trial_dir / "metrics.jsonl")] == list(range(1, 41))
    retries = [ln for ln in err.splitlines() if "retrying" in ln]
    assert len(retries) == 1 and f"retrying {trial_dir.name}: " in retries[0], err
    assert "Traceback" not in err and "(raylet)" not in err, err
    print(retries[0])


@pytest.mark.slow
def test_tune_suite_equal_budget_and_overrides(tmp_path, tiny_base, monkeypatch):
    from harness.suite.runner import tune_suite

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    base = {**tiny_base, "train": {**tiny_base["train"], "steps": 4}, "eval": {"every_steps": 2}}
    suite = load_suite_file(make_suite(tmp_path, "tn", base, {"algorithm": ["grpo", "tis"], "delay": [4]},
                                  tune={"param": "train.lr", "low": 1e-5, "high": 1e-2, "trials_per_algorithm": 3}))
    path = tune_suite(suite, results_root=tmp_path / "results")
    assert path == tmp_path / "results" / "tn" / "tuned-overrides.yaml"
    chosen = yaml.safe_load(path.read_text())["overrides"]
    assert set(chosen) == {"grpo", "tis"} and all(1e-5 <= v["train.lr"] <= 1e-2 for v in chosen.values())
    rows = read_jsonl(tmp_path / "results" / "tn" / "tune" / "trials.jsonl")
    assert sorted(r["algorithm"] for r in rows) == ["grpo"] * 3 + ["tis"] * 3     # the same budget each
    for r in rows:
        cfg = yaml.safe_load((tmp_path / "results" / "tn" / "tune" / r["trial_id"] / "config.yaml").read_text())
        # tuned at the grid's largest delay: at delay 0 every estimator's gradient is grpo's
        assert cfg["delay"] == 4 and cfg["train"]["lr"] == pytest.approx(r["train.lr"])


@pytest.mark.slow
def test_run_suite_on_a_ray_cluster_with_shared_storage(tmp_path, tiny_base, monkeypatch):
    """The cluster path: a Ray head started with `ray start` (its own temp dir, so no other process on
    the machine discovers it), run_suite(address=...), Tune's storage at $STALEBENCH_STORAGE_PATH."""
    import shutil
    import tempfile

    from harness.suite.runner import run_suite

    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")      # short: Ray's socket paths have a length limit
    port = free_port()
    head = subprocess.Popen(["ray", "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
                             f"--temp-dir={temp}", "--disable-usage-stats"], env=cli_env(), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = head.communicate(timeout=240)
        assert head.returncode == 0, out
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
        monkeypatch.setenv("STALEBENCH_STORAGE_PATH", str(tmp_path / "shared" / "ray"))
        suite = load_suite_file(make_suite(tmp_path, "cluster", tiny_base, {"algorithm": ["grpo", "tis"]}))
        counts = run_suite(suite, results_root=tmp_path / "results", address=f"127.0.0.1:{port}")
        assert counts == {"completed": 2}
        assert [p.name.startswith("cluster-") for p in (tmp_path / "shared" / "ray").iterdir()] == [True]
        assert not (tmp_path / "results" / "cluster" / "ray").exists()
    finally:
        kill_session(head.pid)
        shutil.rmtree(temp, ignore_errors=True)
