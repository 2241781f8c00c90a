"""The ring-3 group of scripts/bad_inputs.py (issue 54): writes through symbolic links, archives that expand
past what they store, silently wrong cells, names, `--only`, values `check` must refuse, read-only paths.

"warned": exit 0, no traceback, and a `stalebench: warning: ... not counted` line naming the trial (the
report still renders; the trial is shown as invalid, never counted). A case's ``after`` check (a file
outside the target left unchanged) must hold too.
"""
from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path
from typing import Callable

from bad_inputs_cases import TRIAL, Case, base, dump, suite, trial_file

VICTIM = "do not overwrite me\n"
EVALS = "".join(json.dumps({"step": s, "eval/acc": 0.25}) + "\n" for s in (0, 2, 4))


def _victim(d: Path, link: str) -> None:
    (d / "victim.txt").write_text(VICTIM)
    (d / link).parent.mkdir(parents=True, exist_ok=True)
    (d / link).symlink_to(d / "victim.txt")


def _untouched(d: Path) -> str | None:
    return None if (d / "victim.txt").read_text() == VICTIM else "the file behind the link was overwritten"


def _results_and_link(link: str) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        trial_file("eval.jsonl", EVALS)(d)
        _victim(d, link)
    return setup


def _site_with_link(d: Path) -> None:
    (d / "reports" / "s1").mkdir(parents=True)
    (d / "reports" / "s1" / "results.json").write_text(json.dumps({"schema_version": 2, "leaderboard": [],
                                                                   "rendered": "x"}))
    _victim(d, "reports/index.html")


def _copied(new_id: str, seed: int) -> Callable[[Path], None]:
    """A sound suite (its trials at delay 0) plus grpo-s0 copied as ``new_id`` with params seed ``seed``
    (outside the suite's [0])."""
    def setup(d: Path) -> None:
        import shutil
        trial_file("eval.jsonl", EVALS)(d)
        for params in (d / "results" / "s1").glob("*/params.json"):
            params.write_text(json.dumps({**json.loads(params.read_text()), "delay": 0}))
        copy = d / "results" / "s1" / new_id
        shutil.copytree(d / "results" / "s1" / TRIAL, copy)
        (copy / "params.json").write_text(json.dumps({"trial_id": new_id, "algorithm": "grpo", "delay": 0,
                                                      "seed": seed}))
        (copy / "config.yaml").write_text(dump({"algorithm": "grpo", "seed": seed, "train": {"steps": 4}}))
    return setup


def _tar(members: list[tuple[tarfile.TarInfo, bytes]], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt, encoding="utf-8", errors="surrogateescape") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue(), mtime=0)


def _member(name: str, data: bytes, kind: bytes = tarfile.REGTYPE, **pax: str) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.pax_headers = kind, len(data), dict(pax)
    return info, data


def hostile_archive(kind: str) -> bytes:
    """A raw.tar.gz that expands past what it stores, or names a member in bytes that are not UTF-8."""
    head = [_member("suite.yaml", suite().encode()), _member(f"{TRIAL}/params.json", b'{"seed": 0}')]
    if kind == "GNU sparse member":
        sparse = tarfile.TarInfo(f"{TRIAL}/metrics.jsonl")
        sparse.type, sparse.size = tarfile.GNUTYPE_SPARSE, 0
        return _tar([*head, (sparse, b"")], tarfile.GNU_FORMAT)
    if kind == "pax sparse member (1 TiB declared)":
        return _tar([*head, _member(f"{TRIAL}/GNUSparseFile.0/metrics.jsonl", b"{}", **{
            "GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": f"{TRIAL}/metrics.jsonl",
            "GNU.sparse.realsize": str(2**40)})])
    if kind == "a member name not UTF-8":
        return _tar([*head, _member("t\udcff/params.json", b"{}")], tarfile.GNU_FORMAT)
    if kind == "48 MiB of {} rows":
        return _tar([*head, _member(f"{TRIAL}/status.json", b'{"status": "completed", "step": 4}'),
                     _member(f"{TRIAL}/metrics.jsonl", b"{}\n" * (16 * 2**20))])
    raise ValueError(kind)


def _plugin_named(name: str) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        (d / "dotted_plugin.py").write_text(
            "from algorithms.registry import register\n"
            f"@register({name!r})\ndef loss(inp, eps=0.2):\n    return None\n")
    return setup


def _git_without_identity(d: Path) -> None:
    """A fresh clone whose git cannot name a committer (nor guess one from the host name)."""
    import subprocess

    subprocess.run(["git", "init", "-q", str(d)], check=True)
    subprocess.run(["git", "config", "user.useConfigOnly", "true"], cwd=d, check=True)


def ring3() -> list[Case]:
    report = ["report", "{d}/results/s1", "--out", "{d}/rep"]
    rows = lambda items: "".join(json.dumps(r) + "\n" for r in items)   # noqa: E731
    completed4 = '{"status": "completed", "step": 4}'
    return [
        # ---- no write through a symbolic link, no shared temporary name
        *[Case(f"ring3: report --out whose {name} is a link", [*report, "--raw"], setup=_results_and_link(f"rep/{name}"),
               after=_untouched) for name in ("index.html", "results.json", "trials.csv", "paper_table.tex", "raw.tar.gz")],
        Case("ring3: report --raw with raw.tar.gz.tmp a link", [*report, "--raw"], expect="shown",
             setup=_results_and_link("rep/raw.tar.gz.tmp"), after=_untouched),
        Case("ring3: site whose reports/index.html is a link", ["site", "--reports", "{d}/reports"],
             setup=_site_with_link, after=_untouched),
        Case("ring3: train with suite.yaml.tmp and status.json.tmp links",
             ["train", "{d}/s.yaml", "--trial", "algorithm=grpo", "--results", "{d}/results"], {"s.yaml": suite()},
             setup=lambda d: (_victim(d, "results/s1/suite.yaml.tmp"), (d / "results/s1/grpo-s0").mkdir(),
                              (d / "results/s1/grpo-s0/status.json.tmp").symlink_to(d / "victim.txt")),
             expect="shown", after=_untouched),
        # ---- archives bounded by what they expand
        *[Case(f"ring3: archive {kind}", ["report", "{d}/raw.tar.gz", "--out", "{d}/rep"],
               {"raw.tar.gz": hostile_archive(kind)}) for kind in
          ("GNU sparse member", "pax sparse member (1 TiB declared)", "a member name not UTF-8")],
        Case("ring3: archive 48 MiB of {} rows (60 kB stored)", ["report", "{d}/raw.tar.gz", "--out", "{d}/rep"],
             {"raw.tar.gz": hostile_archive("48 MiB of {} rows")}, expect="warned"),
        # ---- silently wrong cells: shown as invalid, named, never counted
        *[Case(f"ring3: report {kind}", report, setup=trial_file(name, text, status), expect="warned")
          for kind, name, text, status in [
              ("a torn final eval row", "eval.jsonl", EVALS[:-12], completed4),
              ("a lost final eval row", "eval.jsonl", rows([{"step": 0, "eval/acc": 0.2}, {"step": 2, "eval/acc": 0.25}]),
               completed4),
              ("a 200-digit final eval/acc", "eval.jsonl", '{"step": 0, "eval/acc": 0.2}\n{"step": 4, "eval/acc": '
               + "9" * 200 + "}\n", completed4),
              ("diverged_step -5", "eval.jsonl", EVALS, '{"status": "diverged", "step": 4, "diverged_step": -5}'),
              ("diverged_step 'x'", "eval.jsonl", EVALS, '{"status": "diverged", "step": 4, "diverged_step": "x"}'),
              ("diverged_step 10^15", "eval.jsonl", EVALS, '{"status": "diverged", "step": 4, "diverged_step": 10'
               + "0" * 15 + "}"),
              ("a params.json key final_acc", "params.json", json.dumps(
                  {"trial_id": TRIAL, "algorithm": "grpo", "seed": 0, "final_acc": 1.0}), completed4),
              ("a params.json key collapsed", "params.json", json.dumps(
                  {"trial_id": TRIAL, "algorithm": "grpo", "seed": 0, "collapsed": True}), completed4)]],
        Case("ring3: report a copied trial of seed 2", report, setup=_copied("grpo-s2", 2), expect="warned"),
        Case("ring3: report a look-alike trial of seed 7", report, setup=_copied("grpo-s0\u200b", 7), expect="warned"),
        Case("ring3: compare with an invalid trial (named)", ["compare", "{d}/results/s1", "{d}/results/s1"],
             setup=_copied("grpo-s2", 2), expect="shown"),
        # ---- names
        Case("ring3: suite name ending in a newline", ["check", "{d}/s.yaml"], {"s.yaml": suite(suite="s1\n")}),
        Case("ring3: suite name in look-alike letters", ["check", "{d}/s.yaml"], {"s.yaml": suite(suite="s\u0440o")}),
        Case("ring3: a plugin estimator named .hidden", ["--plugin", "dotted_plugin", "check", "{d}/s.yaml"],
             {"s.yaml": suite()}, setup=_plugin_named(".hidden")),
        Case("ring3: a plugin estimator name ending in a newline", ["--plugin", "dotted_plugin", "check", "{d}/s.yaml"],
             {"s.yaml": suite()}, setup=_plugin_named("mine\n")),
        # ---- --only
        *[Case(f"ring3: --only {shown}", ["run", "{d}/s.yaml", "--results", "{d}/r", "--only", value],
               {"s.yaml": suite()}) for shown, value in [
              ("'' (every trial)", ""), ("seed=true", "seed=true"),
              ("algorithm=grpo,algorithm=gmc_grpo", "algorithm=grpo,algorithm=gmc_grpo")]],
        # ---- values check must refuse (the run fails on them)
        *[Case(f"ring3: check {kind}", ["check", "{d}/s.yaml"], {"s.yaml": text}) for kind, text in [
            ("eval.size -1", base(eval__size=-1)),
            ("seeds [-1]", suite(seeds=[-1])),
            ("beta1 -1", base(train__beta1=-1)), ("beta2 1", base(train__beta2=1.0)),
            ("tune.seed -1", suite(tune={"low": 1e-4, "high": 1e-3, "seed": -1})),
            ("tune.sampler_seed -1", suite(tune={"low": 1e-4, "high": 1e-3, "sampler_seed": -1})),
            ("model.path with kind tiny (trained the frozen base)", base(model__path="/models/qwen3")),
            ("task.data_dir for a generated task", base(task__data_dir="/data")),
            ("reuse: without campaign: true", suite(reuse=["other"])),
            ("reuse: a path out of reports/", suite(campaign=True, reuse=["reports/../x"]))]],
        Case("ring3: reuse: a committed report without its raw.tar.gz", ["run", "{d}/s.yaml", "--dry-run"],
             {"s.yaml": suite(campaign=True, reuse=["reports/nope"])}),
        Case("ring3: run a campaign where git has no user identity", ["run", "{d}/s.yaml", "--results", "{d}/r"],
             {"s.yaml": suite(campaign=True)}, setup=_git_without_identity,
             env={"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"},
             after=lambda d: "wrote before refusing" if (d / "r").exists() or (d / "campaigns").exists() else None),
        Case("ring3: run a campaign before its tuned values are in overrides:", ["run", "{d}/s.yaml", "--results",
             "{d}/r"], {"s.yaml": suite(campaign=True, tune={"low": 1e-4, "high": 1e-3})},
             after=lambda d: "wrote before refusing" if (d / "r").exists() or (d / "campaigns").exists() else None),
        # ---- a path that cannot be written: one line naming it and the cause
        Case("ring3: report --out on a read-only file system", ["report", "{d}/results/s1", "--out", "/sys/stalebench"],
             setup=trial_file("eval.jsonl", EVALS)),
        Case("ring3: site of a results.json whose rendered is not a mapping", ["site", "--reports", "{d}/reports"],
             setup=lambda d: ((d / "reports" / "s1").mkdir(parents=True), (d / "reports/s1/results.json").write_text(
                 json.dumps({"schema_version": 2, "leaderboard": [], "rendered": "x"}))), expect="shown"),
    ]

