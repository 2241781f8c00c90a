"""Kill-and-resume soak of `stalebench run`: SIGKILL the driver's process group at random (seeded) moments,
run the same command again until the suite is done, then check that nothing was lost or doubled.

    python scripts/soak_resume.py [--kills 20] [--trials 4] [--steps 30] [--seed 0] [--work DIR]

1. Builds a tiny random Qwen3-architecture model in <work>/model (as tests/conftest.py does).
2. Runs the suite once without interruption into <work>/reference (the values to compare against).
3. Runs it into <work>/soak, SIGKILLing the whole process group of `python -m harness.cli run` after a
   random wait in [--min-wait, --max-wait] seconds (default: from half the reference run's start-up, the
   time to its first metrics row, to start-up + its training time / kills), --kills times; processes
   of the driver's session that survive the group kill (Ray's) are killed too.
4. Runs it once more to the end and checks: every trial completed; metrics.jsonl and eval.jsonl hold
   exactly one row per step; every row equals the reference run's (perf/* keys ignored: timings);
   MLflow (the default SQLite store <work>/soak/mlflow.db) holds one live child run per trial, FINISHED,
   with every metric at exactly the files' steps, once, with the files' values; no parent run is left
   RUNNING.
Prints the number of kills and of rows checked; exits 1 on any mismatch.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def build_model(out: Path) -> Path:
    """A randomly initialized tiny Qwen3 model with the addrev tokenizer (seconds; no download)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    sys.path.insert(0, str(REPO))
    from harness.bases.models import char_tokenizer
    from harness.tasks.synthetic import ADDREV_VOCAB

    if (out / "config.json").exists():
        return out
    tok = char_tokenizer(ADDREV_VOCAB)
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, head_dim=16, intermediate_size=64, max_position_embeddings=64,
                         tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    Qwen3ForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def write_suite(work: Path, model: Path, trials: int, steps: int, checkpoint_every: int, eval_every: int) -> Path:
    algorithms = ["grpo", "gmc_grpo", "tis"][:max(1, (trials + 1) // 2)]
    delays = [0, 2] if trials > 1 else [0]
    base = {"model": {"kind": "path", "path": str(model)}, "task": {"name": "addrev", "eval_size": 32},
            "train": {"steps": steps, "prompts_per_step": 4, "lr": 1e-3, "max_new_tokens": 6,
                      "checkpoint_every": checkpoint_every},
            "eval": {"every_steps": eval_every}, "group_size": 4}
    suite = {"suite": "soak", "base": base, "grid": {"algorithm": algorithms, "delay": delays}, "seeds": [0],
             "resources": {"cpu": 1, "max_failures": 2}}
    path = work / "soak.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    return path


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS", STORAGE)}
    env.update(PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""), RAY_AUTH_MODE="disabled",
               TOKENIZERS_PARALLELISM="false")
    return env


STORAGE = "STALEBENCH_STORAGE_PATH"


def run_cmd(suite: Path, results: Path) -> list[str]:
    return [sys.executable, "-m", "harness.cli", "run", str(suite), "--results", str(results)]


def kill_session(sid: int) -> int:
    """SIGKILL every process left in session `sid`; returns how many there were."""
    out = subprocess.run(["ps", "-eo", "pid=,sid="], capture_output=True, text=True, check=True).stdout
    killed = 0
    for line in out.splitlines():
        pid, s = map(int, line.split())
        if s == sid and pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


def run_to_end(cmd: list[str], cwd: Path, log: Path, timeout_s: float, watch: Path | None = None
               ) -> tuple[int, float, float]:
    """Run to the end: (exit status, seconds, seconds until the first metrics row appeared under `watch`)."""
    start, first_row = time.time(), None
    with open(log, "a") as f:
        proc = subprocess.Popen(cmd, cwd=cwd, env=cli_env(), stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        while proc.poll() is None and time.time() - start < timeout_s:
            if first_row is None and watch is not None and any(p.stat().st_size for p in watch.glob("*/metrics.jsonl")):
                first_row = time.time() - start
            time.sleep(0.2)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        rc = proc.wait()
        kill_session(proc.pid)
    seconds = time.time() - start
    return rc, seconds, first_row if first_row is not None else seconds


def soak(cmd: list[str], cwd: Path, log: Path, kills: int, rng: random.Random, lo: float, hi: float) -> dict:
    """Start the run and SIGKILL its process group after a random wait, `kills` times (a run that ends by
    itself before its kill is started again, and does not count)."""
    done, ended, stragglers, waits = 0, 0, 0, []
    while done < kills:
        wait = rng.uniform(lo, hi)
        with open(log, "a") as f:
            f.write(f"\n===== attempt {done + ended + 1}: kill after {wait:.1f} s =====\n")
            f.flush()
            proc = subprocess.Popen(cmd, cwd=cwd, env=cli_env(), stdout=f, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                proc.wait(timeout=wait)
                ended += 1                   # finished before the kill (e.g. nothing left to run)
                if ended > 3 * kills:
                    raise SystemExit("soak: the run keeps ending before its kill; lower --max-wait")
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                done += 1
                waits.append(wait)
            time.sleep(0.5)
            stragglers += kill_session(proc.pid)
    return {"kills": done, "ended_early": ended, "stragglers": stragglers, "waits": waits}


# ---------------------------------------------------------------- checks


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]      # strict: any damage raises


def _strip(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith("perf/")}


def _same(a: float, b: float) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def check(soak_dir: Path, ref_dir: Path, steps: int, eval_every: int, mlflow_db: Path) -> tuple[list[str], int]:
    from mlflow.tracking import MlflowClient

    problems, checked = [], 0
    trials = sorted(p.name for p in soak_dir.iterdir() if p.is_dir() and (p / "params.json").exists())
    ref_trials = sorted(p.name for p in ref_dir.iterdir() if p.is_dir() and (p / "params.json").exists())
    if trials != ref_trials:
        problems.append(f"trials {trials} != reference {ref_trials}")
    want_eval = sorted({0, steps, *range(eval_every, steps + 1, eval_every)})
    files: dict[str, dict[str, list[dict]]] = {}
    for t in trials:
        status = json.loads((soak_dir / t / "status.json").read_text())
        if status.get("status") != "completed":
            problems.append(f"{t}: status {status.get('status')}")
        files[t] = {}
        for name, want in (("metrics.jsonl", list(range(1, steps + 1))), ("eval.jsonl", want_eval)):
            rows, ref = _rows(soak_dir / t / name), _rows(ref_dir / t / name)
            files[t][name] = rows
            if [r["step"] for r in rows] != want:
                problems.append(f"{t}/{name}: steps {[r['step'] for r in rows]} != {want}")
            for r, q in zip(rows, ref):
                checked += 1
                a, b = _strip(r), _strip(q)
                if a.keys() != b.keys() or not all(_same(a[k], b[k]) for k in a):
                    diff = [k for k in a.keys() | b.keys() if not _same(a.get(k), b.get(k))][:4]
                    problems.append(f"{t}/{name} step {r['step']}: differs from the uninterrupted run in {diff}")
    client = MlflowClient(f"sqlite:///{mlflow_db}")
    experiment = client.get_experiment_by_name("soak")
    children = client.search_runs([experiment.experiment_id], "tags.trial_id != ''", max_results=1000)
    by_trial: dict[str, list] = {}
    for run in children:
        by_trial.setdefault(run.data.tags["trial_id"], []).append(run)
    if sorted(by_trial) != trials or any(len(v) != 1 for v in by_trial.values()):
        problems.append(f"MLflow child runs {[(k, len(v)) for k, v in sorted(by_trial.items())]} != one per trial {trials}")
    points = 0
    for t, runs in by_trial.items():
        run = runs[0]
        if run.info.status != "FINISHED":
            problems.append(f"MLflow {t}: run status {run.info.status}")
        for name, rows in files.get(t, {}).items():
            for key in sorted({k for r in rows for k in r if k != "step"}):
                want = [(r["step"], float(r[key])) for r in rows if key in r]
                got = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
                points += len(got)
                if [s for s, _ in got] != [s for s, _ in want]:
                    problems.append(f"MLflow {t} {key}: steps {[s for s, _ in got]} != files' {[s for s, _ in want]}")
                elif not all(_same(a, b) for (_, a), (_, b) in zip(got, want)):
                    problems.append(f"MLflow {t} {key}: values differ from the files")
    parents = client.search_runs([experiment.experiment_id], "tags.`stalebench.role` = 'suite'", max_results=1000)
    states = sorted(r.info.status for r in parents)
    if "RUNNING" in states:
        problems.append(f"parent runs still RUNNING: {states.count('RUNNING')} of {len(states)}")
    print(f"soak: MLflow parent runs by status: "
          + ", ".join(f"{s} {states.count(s)}" for s in sorted(set(states))), flush=True)
    return problems, checked + points


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--trials", type=int, default=4, help="2 or 4 or 6 (estimators x delays 0, 2)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--checkpoint-every", type=int, default=3)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-wait", type=float, default=None,
                   help="seconds before a kill, at least (default: half the reference run's start-up)")
    p.add_argument("--max-wait", type=float, default=None,
                   help="at most (default: start-up + 2 x the training time / kills)")
    p.add_argument("--work", type=Path, default=None, help="working directory (default: a new temp dir)")
    p.add_argument("--timeout", type=float, default=900, help="seconds allowed for an uninterrupted run")
    args = p.parse_args(argv)
    import tempfile
    work = (args.work or Path(tempfile.mkdtemp(prefix="stalebench-soak-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    suite = write_suite(work, build_model(work / "model"), args.trials, args.steps, args.checkpoint_every, args.eval_every)
    rc, ref_s, startup_s = run_to_end(run_cmd(suite, work / "reference"), work, work / "reference.log", args.timeout,
                                      watch=work / "reference" / "soak")
    print(f"soak: reference run: exit {rc} in {ref_s:.0f} s, first row after {startup_s:.0f} s ({work / 'reference'})",
          flush=True)
    if rc != 0:
        print((work / "reference.log").read_text()[-3000:])
        return 1
    # Kill moments: from mid start-up to start-up plus a share of the training time, so that most kills land
    # while trials train and write, some during start-up, and the kills do not finish the suite: the runs
    # before the kills train about half the training time in all (with 2 x the share, as before 2026-12-07,
    # about all of it, and a slower start-up than the reference's often let the suite end before its kills).
    lo = args.min_wait if args.min_wait is not None else 0.5 * startup_s
    hi = args.max_wait or max(lo + 1, startup_s + (ref_s - startup_s) / max(args.kills, 1))
    stats = soak(run_cmd(suite, work / "soak"), work, work / "soak.log", args.kills, random.Random(args.seed),
                 lo, hi)
    print(f"soak: {stats['kills']} kills (SIGKILL of the driver's process group after {lo:.0f}-{hi:.0f} s, "
          f"seed {args.seed}); {stats['ended_early']} runs ended before their kill; "
          f"{stats['stragglers']} processes outlived their group and were killed", flush=True)
    reruns = 0
    while True:
        reruns += 1
        rc, final_s, _ = run_to_end(run_cmd(suite, work / "soak"), work, work / "soak.log", args.timeout)
        if rc == 0 or reruns >= 3:
            break
    print(f"soak: final run: exit {rc} in {final_s:.0f} s ({reruns} run(s))", flush=True)
    log = (work / "soak.log").read_text()
    problems, checked = check(work / "soak" / "soak", work / "reference" / "soak", args.steps, args.eval_every,
                              work / "soak" / "mlflow.db")
    if rc != 0:
        problems.append(f"the final run exited {rc}")
    if "Traceback" in log:
        problems.append(f"a traceback in {work / 'soak.log'}")
    print(f"soak: {checked} rows checked (file rows against the uninterrupted run, and MLflow metric points "
          f"against the files) in {time.time() - t0:.0f} s")
    for line in problems[:30]:
        print(f"soak: MISMATCH {line}")
    print("soak: OK" if not problems else f"soak: FAILED ({len(problems)} problems; logs in {work})")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
