"""Bad inputs through the real command line: every case is `python -m harness.cli ...` in a fresh temp
directory, with a timeout; the table says what the user saw.

    python scripts/bad_inputs.py [--jobs 2] [--only SUBSTRING] [--timeout 120]

A case passes ("ok") when the command either refuses the input with exit status 2 and exactly one line on
stderr with no traceback, or (for hostile result files that `status`/`report` can still show) exits 0
without a traceback; the expected outcome is listed per case. Prints a Markdown table (kind, command,
exit status, the stderr line, ok) and a summary; exits 1 if any case is not ok.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bad_inputs_cases import BASE, GOOD, TRIAL, Case, base, dump, suite, trial_file
from bad_inputs_ring3 import ring3

REPO = Path(__file__).resolve().parents[1]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def results_with(status: str | bytes | None = None, params: str | bytes | None = None,
                 metrics: str | bytes | None = None, config: str | None = None) -> Callable[[Path], None]:
    """results/s1/ with the good suite file and one trial directory holding the given files."""
    def setup(d: Path) -> None:
        trial = d / "results" / "s1" / TRIAL
        trial.mkdir(parents=True)
        (d / "results" / "s1" / "suite.yaml").write_text(suite())
        for name, content in (("status.json", status), ("params.json", params), ("metrics.jsonl", metrics),
                              ("config.yaml", config)):
            if content is not None:
                (trial / name).write_bytes(content.encode() if isinstance(content, str) else content)
    return setup


def _fifo(d: Path) -> None:
    os.mkfifo(d / "fifo.yaml")


def _status_dir(d: Path) -> None:
    results_with()(d)
    (d / "results" / "s1" / TRIAL / "status.json").mkdir()


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi"))
HOSTILE = "\x1b[2J\x1b[31mPWNED\x07\r\n" * 50


def cases() -> list[Case]:
    check = lambda text, kind: Case(kind, ["check", "{d}/s.yaml"], {"s.yaml": text})   # noqa: E731
    port = closed_port()
    c = [
        # ---- YAML itself
        check("suite: x\nbase: {train: [\n", "yaml: syntax error"),
        check("suite: s1\nbase:\n\tmodel: {}\n", "yaml: tab indentation"),
        check("suite: s1\nsuite: s2\nbase: {}\n", "yaml: duplicate top-level key"),
        check("suite: s1\nbase:\n  train: {lr: 1.0e-3, lr: 1.0}\n", "yaml: duplicate nested key"),
        check(BOMB + "suite: s1\nbase: {}\n", "yaml: alias bomb (10^9 values)"),
        check("x: " + "[" * 5000 + "]" * 5000 + "\n", "yaml: 5000 levels of nesting"),
        check("suite: !!python/object/apply:os.system ['touch pwned']\nbase: {}\n", "yaml: python tag"),
        check("a: &a [*a]\n", "yaml: recursive alias"),
        check("", "yaml: empty file"),
        check("# only a comment\n", "yaml: only a comment"),
        check("- a\n- b\n", "yaml: a list, not a mapping"),
        check("just a string\n", "yaml: a scalar document"),
        check(suite() + "---\nsuite: s2\n", "yaml: two documents"),
        check("suite: s1\nbase: {}\n" + "\x00", "yaml: NUL byte"),
        # ---- suite structure
        check(suite(extra=1), "suite: unknown top-level key"),
        check(suite(suite=None), "suite: missing name"),
        check(suite(base=None), "suite: missing base"),
        check(suite(suite="a/b"), "name: a slash"),
        check(suite(suite=".hidden"), "name: starts with a dot"),
        check(suite(suite=12), "name: a number"),
        check(suite(suite="n" * 256), "name: 256 characters"),
        check(suite(suite="x\x1b[31m"), "name: control characters"),
        check(suite(version="one"), "version: a string"),
        check(suite(base=[1, 2]), "base: a list"),
        check(suite(notes=["a"]), "notes: a list"),
        check(suite(share_on_policy="yes"), "share_on_policy: a string"),
        # ---- run config values
        check(base(foo=1), "base: unknown key"),
        check(base(train__lrr=1e-3), "base: unknown nested key"),
        check(base(train__steps="ten"), "type: steps a string"),
        check(base(train__steps=True), "type: steps a boolean"),
        check(base(train__steps=1.5), "type: steps a float"),
        check(base(train__steps=0), "value: steps 0"),
        check(base(train__lr=-1e-3), "value: negative lr"),
        check(base(group_size=1), "value: group_size 1"),
        check(suite(grid={"algorithm": ["grpo", "ppo_magic"]}), "value: unknown estimator"),
        check(base(task__name="mnist"), "value: unknown task"),
        check(base(model__kind="remote"), "value: unknown model kind"),
        check(base(model__base="tiny-addrev-v999"), "value: unknown frozen base"),
        check(base(train__steps=10**30), "value: steps 10^30"),
        check(suite().replace("group_size: 4", "eps: .inf\n  group_size: 4"), "non-finite: eps .inf"),
        check(suite().replace("max_new_tokens: 6", "max_new_tokens: 6\n    grad_clip: .nan"), "non-finite: grad_clip .nan"),
        check(suite().replace("max_new_tokens: 6", "max_new_tokens: 6\n    temperature: .nan"), "non-finite: temperature .nan"),
        check(suite().replace("max_new_tokens: 6", "max_new_tokens: 6\n    lr: 1e400"), "non-finite: lr 1e400"),
        check(suite(resources={"cpu": float("nan")}), "non-finite: resources.cpu .nan"),
        check(suite(resources={"cpu": float("inf")}), "non-finite: resources.cpu .inf"),
        # ---- grid, seeds, resources, overrides
        check(suite(grid=["algorithm"]), "grid: a list"),
        check(suite(grid={"delay": 4}), "grid: a value not a list"),
        check(suite(grid={"delay": []}), "grid: an empty list"),
        check(suite(grid={"delay": [0, 0]}), "grid: duplicate values"),
        check(suite(grid={"seed": [0, 1]}), "grid: seed in the grid"),
        check(suite(grid={"train.nope": [1]}), "grid: unknown key"),
        check(suite(grid={"delay": [0, -4]}), "grid: a negative delay"),
        check(suite(grid={"eps": [0.2, "0.2"]}), "grid: values that collide in trial ids"),
        check(suite(grid={f"params.k{i}": list(range(10)) for i in range(6)}), "grid: 10^6 trials"),
        check(suite(seeds=0), "seeds: not a list"),
        check(suite(seeds=[0, 0]), "seeds: duplicates"),
        check(suite(seeds=[True]), "seeds: a boolean"),
        check(suite(resources={"cpu": 0}), "resources: cpu 0"),
        check(suite(resources={"cpus": 2}), "resources: unknown key"),
        check(suite(resources={"max_concurrent": 0}), "resources: max_concurrent 0"),
        check(suite(resources={"max_failures": -1}), "resources: max_failures -1 (forever)"),
        check(suite(resources={"max_failures": 11}), "resources: max_failures 11"),
        check(suite(overrides={"tis": {"train.lr": 1e-5}}), "overrides: an estimator not in the grid"),
        check(suite(overrides={"grpo": 1e-5}), "overrides: not a mapping"),
        check(suite(tracking={"neptune": {}}), "tracking: an unknown mirror"),
        check(suite(tracking={"wandb": {"mode": "cloud"}}), "tracking: wandb mode not offline|online"),
        check(suite(tracking={"wandb": {"project": "a/b"}}), "tracking: wandb project with '/'"),
        Case("tracking: wandb online without an API key", ["check", "{d}/s.yaml"],
             {"s.yaml": suite(tracking={"wandb": {"mode": "online"}})},
             env={"WANDB_API_KEY": "", "NETRC": "/nonexistent"}),
        # ---- the suite path
        Case("path: a directory", ["check", "{d}"]),
        Case("path: a FIFO", ["check", "{d}/fifo.yaml"], setup=_fifo),
        Case("path: empty", ["check", ""]),
        Case("path: missing", ["check", "{d}/nope.yaml"]),
        Case("path: /dev/zero", ["check", "/dev/zero"]),
        Case("path: not UTF-8", ["check", "{d}/s.yaml"], {"s.yaml": b"suite: s1\nbase: {}\n# \xff\xfe\n"}),
        Case("path: 2 MiB file", ["check", "{d}/s.yaml"], {"s.yaml": "# " + "x" * (2 << 20) + "\n"}),
        # ---- --set, --max-trials, --trial
        Case("--set: no '='", ["check", "{d}/s.yaml", "--set", "train.lr"], {"s.yaml": suite()}),
        Case("--set: unknown key", ["check", "{d}/s.yaml", "--set", "train.lrr=1"], {"s.yaml": suite()}),
        Case("--set: .nan", ["check", "{d}/s.yaml", "--set", "train.lr=.nan"], {"s.yaml": suite()}),
        Case("--set: bad YAML value", ["check", "{d}/s.yaml", "--set", "train.lr=[["], {"s.yaml": suite()}),
        Case("--set: into a number", ["check", "{d}/s.yaml", "--set", "train.lr.x=1"], {"s.yaml": suite()}),
        Case("--max-trials: below the grid", ["check", "{d}/s.yaml", "--max-trials", "1"], {"s.yaml": suite()}),
        Case("--trial: matches none", ["train", "{d}/s.yaml", "--trial", "algorithm=tis"], {"s.yaml": suite()}),
        Case("--trial: matches two", ["train", "{d}/s.yaml", "--trial", "seed=0"], {"s.yaml": suite()}),
        Case("--trial: not key=value", ["train", "{d}/s.yaml", "--trial", "grpo"], {"s.yaml": suite()}),
        # ---- run: refused before any trial starts
        Case("run: --results is a file", ["run", "{d}/s.yaml", "--results", "{d}/r"], {"s.yaml": suite(), "r": "x"}),
        Case("run: results/<suite> is a file", ["run", "{d}/s.yaml", "--results", "{d}/r"],
             {"s.yaml": suite(), "r/s1": "x"}),
        Case("run: MLFLOW_TRACKING_URI closed port", ["run", "{d}/s.yaml", "--results", "{d}/r"], {"s.yaml": suite()},
             env={"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{port}"}),
        Case("run: --address closed port", ["run", "{d}/s.yaml", "--results", "{d}/r", "--address", f"127.0.0.1:{port}"],
             {"s.yaml": suite()}),
        Case("run: --address not host:port", ["run", "{d}/s.yaml", "--results", "{d}/r", "--address", "127.0.0.1:xx"],
             {"s.yaml": suite()}),
        Case("run: resources cpu 1000 (Ray starts)", ["run", "{d}/s.yaml", "--results", "{d}/r"],
             {"s.yaml": suite(resources={"cpu": 1000})}),
        Case("run: config changed since the results", ["run", "{d}/s.yaml", "--results", "{d}/results"],
             {"s.yaml": suite()}, setup=results_with(status='{"status": "completed"}', config=dump({"delay": 99}))),
        Case("train: --results is a file", ["train", "{d}/s.yaml", "--trial", "algorithm=grpo", "--results", "{d}/r"],
             {"s.yaml": suite(), "r": "x"}),
        # ---- status and report over hostile result files
        Case("status: unknown suite", ["status", "nope", "--results", "{d}/results"]),
        Case("status: status.json with escape codes", ["status", "s1", "--results", "{d}/results"],
             setup=results_with(status=json.dumps({"status": HOSTILE, "step": HOSTILE, "error": HOSTILE})), expect="shown"),
        Case("status: status.json not JSON", ["status", "s1", "--results", "{d}/results"],
             setup=results_with(status=b"\xff{not json"), expect="shown"),
        Case("status: status.json a list", ["status", "s1", "--results", "{d}/results"],
             setup=results_with(status="[1, 2]"), expect="shown"),
        Case("status: status.json a directory", ["status", "s1", "--results", "{d}/results"], setup=_status_dir,
             expect="shown"),
        Case("status: params.json hostile", ["status", "s1", "--results", "{d}/results"],
             setup=results_with(status='{"status": "running", "step": 1}', params=json.dumps({HOSTILE: [HOSTILE] * 100})),
             expect="shown"),
        Case("report: missing directory", ["report", "{d}/nope"]),
        Case("report: a regular file", ["report", "{d}/f"], {"f": "x"}),
        Case("report: an empty directory", ["report", "{d}/empty"], setup=lambda d: (d / "empty").mkdir()),
        Case("report: hostile metrics and params", ["report", "{d}/results/s1", "--out", "{d}/rep"],
             setup=results_with(status='{"status": "completed", "step": 4}', params=json.dumps({"x": HOSTILE}),
                                metrics='{"step": 1, "loss/value": 1e999}\n[1]\n{"step": "x"}\n' + HOSTILE),
             expect="shown"),
        # ---- multi-worker trials (docs/workers.md)
        check(base(train__workers=3), "workers: 3 do not divide prompts_per_step 4"),
        check(base(train__workers=0), "workers: 0"),
        check(base(train__workers=2, model__backend="deepspeed", model__zero_stage=3), "workers: 2 with ZeRO-3"),
        check(suite(resources={"cpu": 1, "workers": 2}), "workers: under resources"),
        Case("workers: 2 of cpu 1000 (Ray starts)", ["run", "{d}/s.yaml", "--results", "{d}/r"],
             {"s.yaml": dump({**GOOD, "base": {**BASE, "train": {**BASE["train"], "workers": 2}},
                              "resources": {"cpu": 1000}})}),
        # ---- delay laws, version traces, engine mismatch (docs/staleness.md)
        check(base(delay={"dist": "geometric", "p": 1.5, "max": 8}), "staleness: geometric p 1.5"),
        check(base(delay={"dist": "poisson", "mean": 2}), "staleness: a law without max"),
        check(base(mismatch={"top_p": 0}), "staleness: mismatch top_p 0"),
        *[Case(f"staleness: trace {kind}", ["check", "{d}/s.yaml"],
               {"s.yaml": base(delay={"dist": "trace", "path": "t.jsonl", "max": 8}), "t.jsonl": text})
          for kind, text in [
              ("from the future", "".join(json.dumps({"step": s + 1, "versions": [s + 1] * 16}) + "\n" for s in range(4))),
              ("of the wrong batch shape", json.dumps({"step": 1, "versions": [0] * 15}) + "\n"),
              ("nested 10^6 deep", "[" * 10**6 + "]" * 10**6 + "\n"),
              ("non-numeric", json.dumps({"step": 1, "versions": ["x"] * 16}) + "\n"),
              ("too short", json.dumps({"step": 1, "versions": [0] * 16}) + "\n")]],
        *ring2(),
        *ring3(),
    ]
    return c


# ---- issue 39 (untrusted inputs, second ring): hostile archives, trial files, merges

def _tar_block(name: str, kind: bytes, size: int) -> bytes:
    import tarfile
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(tarfile.USTAR_FORMAT)


def _good_tar(files: dict[str, bytes]) -> bytes:
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def archive(kind: str) -> bytes:
    """A hostile raw.tar.gz: a chain of extension headers, a huge declared long name, a bad CRC, a damaged
    body or a damaged tar header in the middle."""
    import gzip
    import tarfile
    tar = _good_tar({"suite.yaml": suite().encode(), f"{TRIAL}/params.json": b'{"seed": 0}',
                     f"{TRIAL}/status.json": b'{"status": "completed"}'})
    if kind == "pax chain":
        record = b"11 path=ab\n"
        return gzip.compress((_tar_block("././@x", tarfile.XHDTYPE, len(record)) + record.ljust(512, b"\0")) * 5000 + tar)
    if kind == "gnu long-name chain":
        record = b"suite.yaml\0"
        return gzip.compress((_tar_block("././@LongLink", tarfile.GNUTYPE_LONGNAME, len(record))
                              + record.ljust(512, b"\0")) * 5000 + tar)
    if kind == "1 GiB long name":
        return gzip.compress(_tar_block("././@LongLink", tarfile.GNUTYPE_LONGNAME, 2**30) + b"a" * (5 * 2**20))
    good = gzip.compress(tar, mtime=0)
    if kind == "bad CRC":
        return good[:-8] + bytes([good[-8] ^ 1]) + good[-7:]
    if kind == "damaged body":
        body = bytearray(good)
        body[len(body) // 2] ^= 0xFF
        return bytes(body)
    if kind == "damaged header mid-stream":
        raw = bytearray(tar)
        raw[1024 + 148] ^= 1
        return gzip.compress(bytes(raw))
    raise ValueError(kind)


def merge_with(config: str) -> Callable[[Path], None]:
    """raw.tar.gz of a reference (results/s1) and a user's results/mine/s1 whose new trial has `config`."""
    def setup(d: Path) -> None:
        sys.path.insert(0, str(REPO))
        from harness.store.archive import pack_suite
        trial_file("eval.jsonl", "".join(json.dumps({"step": s, "eval/acc": 0.25}) + "\n" for s in (0, 2, 4)))(d)
        pack_suite(d / "results" / "s1", d / "raw.tar.gz")
        mine = d / "mine" / "s1" / "tis-s0"
        mine.mkdir(parents=True)
        (mine / "params.json").write_text(json.dumps({"trial_id": "tis-s0", "algorithm": "tis", "seed": 0}))
        (mine / "config.yaml").write_text(config)
        (mine / "status.json").write_text('{"status": "completed", "step": 4}')
        (d / "mine" / "s1" / "suite.yaml").write_text(suite())
    return setup


def _plugin(d: Path) -> None:
    (d / "exiting_plugin.py").write_text("import sys\nsys.exit(0)\n")


def _out_index_dir(d: Path) -> None:
    trial_file("eval.jsonl", "".join(json.dumps({"step": s, "eval/acc": 0.25}) + "\n" for s in (0, 2, 4)))(d)
    (d / "rep" / "index.html").mkdir(parents=True)


def ring2() -> list[Case]:
    report = ["report", "{d}/results/s1", "--out", "{d}/rep"]
    deep = "[" * 100_000 + "]" * 100_000
    evals = lambda rows: "".join(json.dumps(r) + "\n" for r in rows)   # noqa: E731
    return [
        *[Case(f"ring2: archive {kind}", ["report", "{d}/raw.tar.gz", "--out", "{d}/rep"], {"raw.tar.gz": archive(kind)})
          for kind in ("pax chain", "gnu long-name chain", "1 GiB long name", "bad CRC", "damaged body",
                       "damaged header mid-stream")],
        *[Case(f"ring2: report {kind}", report, setup=trial_file(name, text), expect="shown") for kind, name, text in [
            ("params.json nested 10^5 deep", "params.json", deep),
            ("status.json nested 10^5 deep", "status.json", '{"a":' * 100_000 + "1" + "}" * 100_000),
            ("provenance.json nested 10^5 deep", "provenance.json", deep),
            ("config.yaml nested 20,000 deep", "config.yaml", "a: [" * 20_000),
            ("config.yaml alias bomb", "config.yaml", BOMB),
            ("a step of 'x'", "metrics.jsonl", '{"step": "x", "loss/value": 0.1}\n'),
            ("a step of null", "metrics.jsonl", '{"step": null, "loss/value": 0.1}\n'),
            ("a 400-digit integer", "metrics.jsonl", '{"step": 1, "loss/value": ' + "9" * 400 + "}\n"),
            ("eval/acc 7.5", "eval.jsonl", evals([{"step": 0, "eval/acc": 0.2}, {"step": 4, "eval/acc": 7.5}])),
            ("eval/acc -3", "eval.jsonl", evals([{"step": 0, "eval/acc": 0.2}, {"step": 4, "eval/acc": -3}])),
            ("a NaN last evaluation", "eval.jsonl", '{"step": 0, "eval/acc": 0.2}\n{"step": 4, "eval/acc": NaN}\n'),
            ("rows at step -5 and 250.5", "eval.jsonl", evals([{"step": -5, "eval/acc": 0.2}, {"step": 250.5, "eval/acc": 0.9}])),
            ("a completed trial with no rows", "metrics.jsonl", ""),
            ("params contradicting config", "config.yaml", dump({"algorithm": "naive", "seed": 0, "train": {"steps": 4}}))]],
        Case("ring2: report a trial copied under another id", report, expect="shown",
             setup=lambda d: (trial_file("eval.jsonl", evals([{"step": 4, "eval/acc": 0.3}]))(d),
                              __import__("shutil").copytree(d / "results" / "s1" / TRIAL, d / "results" / "s1" / "grpo-s9"))),
        Case("ring2: report --out an existing file", ["report", "{d}/results/s1", "--out", "{d}/taken"], {"taken": "x"},
             setup=trial_file("eval.jsonl", evals([{"step": 4, "eval/acc": 0.3}]))),
        Case("ring2: report --out whose index.html is a directory", report, setup=_out_index_dir),
        Case("ring2: merge a billion-laughs config.yaml", ["report", "{d}/mine/s1", "--merge", "{d}/raw.tar.gz",
                                                          "--out", "{d}/rep"], setup=merge_with(BOMB)),
        Case("ring2: merge params contradicting config", ["report", "{d}/mine/s1", "--merge", "{d}/raw.tar.gz",
                                                         "--out", "{d}/rep"],
             setup=merge_with(dump({"algorithm": "naive", "seed": 0, "train": {"steps": 4}}))),
        Case("ring2: trace /proc/kmsg", ["check", "{d}/s.yaml"],
             {"s.yaml": base(delay={"dist": "trace", "path": "/proc/kmsg", "max": 8})}),
        Case("ring2: trace /proc/self/mem", ["check", "{d}/s.yaml"],
             {"s.yaml": base(delay={"dist": "trace", "path": "/proc/self/mem", "max": 8})}),
        Case("ring2: trace path with escape codes", ["check", "{d}/s.yaml"],
             {"s.yaml": base(delay={"dist": "trace", "path": "\x1b[2J\x1b[31mt.jsonl", "max": 8})}),
        Case("ring2: trace with a duplicate key", ["check", "{d}/s.yaml"],
             {"s.yaml": base(delay={"dist": "trace", "path": "t.jsonl", "max": 8}),
              "t.jsonl": "".join('{"step": %d, "step": %d, "versions": [%s]}\n' % (s, s, ", ".join(["0"] * 16))
                                 for s in range(1, 5))}),
        Case("ring2: --set seed=99", ["check", "{d}/s.yaml", "--set", "seed=99"], {"s.yaml": suite()}),
        Case("ring2: --set algorithm over the grid", ["check", "{d}/s.yaml", "--set", "algorithm=tis"], {"s.yaml": suite()}),
        Case("ring2: overrides file of a seed", ["check", "{d}/s.yaml", "--overrides", "{d}/o.yaml"],
             {"s.yaml": suite(), "o.yaml": dump({"overrides": {"grpo": {"seed": 3}}})}),
        Case("ring2: a plugin that calls sys.exit(0)", ["--plugin", "exiting_plugin", "check", "{d}/s.yaml"],
             {"s.yaml": suite()}, setup=_plugin),
        Case("ring2: run --report (Ray starts, then the report)", ["run", "{d}/s.yaml", "--results", "{d}/r", "--report"],
             {"s.yaml": suite()}, expect="shown"),
    ]


@dataclass
class Result:
    case: Case
    rc: int
    line: str
    lines: int
    traceback: bool
    seconds: float
    warned: bool = False
    problem: str | None = None

    @property
    def ok(self) -> bool:
        if self.traceback or self.problem:
            return False
        if self.case.expect in ("shown", "warned"):
            return self.rc == 0 and (self.warned or self.case.expect == "shown")
        return self.rc == 2 and self.lines == 1


def run_case(case: Case, timeout_s: float) -> Result:
    with tempfile.TemporaryDirectory(prefix="stalebench-bad-") as tmp:
        d = Path(tmp)
        for rel, content in case.files.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_bytes(content.encode() if isinstance(content, str) else content)
        if case.setup:
            case.setup(d)
        env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
        env.update(PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""), RAY_AUTH_MODE="disabled", **case.env)
        argv = [a.replace("{d}", str(d)) for a in case.argv]
        start = time.time()
        try:
            proc = subprocess.run([sys.executable, "-m", "harness.cli", *argv], cwd=d, env=env, capture_output=True,
                                  text=True, errors="replace", timeout=timeout_s, start_new_session=True)
            rc, err = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, err = 124, f"TIMEOUT after {timeout_s:g} s " + (exc.stderr or b"").decode(errors="replace")[-200:]
        err = err.replace(str(d) + "/", "").replace(str(d), ".")
        lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("[stalebench]")]
        return Result(case, rc, lines[0] if len(lines) == 1 else " / ".join(lines[-2:]), len(lines),
                      "Traceback" in err, time.time() - start, "not counted" in err,
                      case.after(d) if case.after else None)


def _cell(text: str, limit: int) -> str:
    text = text.replace("|", "\\|").replace("`", "'")
    text = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _command(case: Case) -> str:
    argv = [a.replace("{d}/", "").replace("{d}", ".") or "''" for a in case.argv]
    return _cell("stalebench " + " ".join(argv), 70)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--only", default="", help="run the cases whose kind contains this")
    p.add_argument("--timeout", type=float, default=120)
    args = p.parse_args(argv)
    todo = [c for c in cases() if args.only in c.kind]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda c: run_case(c, args.timeout), todo))
    print("| # | kind | command | exit | stderr (one line expected) | s | ok |")
    print("|---|------|---------|------|----------------------------|---|----|")
    for i, r in enumerate(results, 1):
        shown = r.line if r.case.expect == "refused" or r.lines else "(nothing on stderr; the table is shown)"
        shown = f"{r.problem}: {shown}" if r.problem else shown
        print(f"| {i} | {_cell(r.case.kind, 45)} | `{_command(r.case)}` | {r.rc} | {_cell(shown, 160)} | "
              f"{r.seconds:.0f} | {'yes' if r.ok else 'NO'} |")
    refused = [r for r in results if r.case.expect == "refused"]
    one_line = sum(r.rc == 2 and r.lines == 1 and not r.traceback for r in refused)
    shown = [r for r in results if r.case.expect in ("shown", "warned")]
    print(f"\n{len(results)} cases: {sum(r.ok for r in results)} ok; {one_line}/{len(refused)} refused with exit 2 and "
          f"one line, no traceback; {sum(r.ok for r in shown)}/{len(shown)} hostile result files shown without a "
          f"traceback; {sum(r.traceback for r in results)} tracebacks; {sum(r.rc == 124 for r in results)} timeouts")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
