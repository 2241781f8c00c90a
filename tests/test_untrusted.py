"""Issue 39, untrusted inputs (second ring): every command that opens a file it did not write refuses a
bad one with one line, never hangs, writes nothing half-done and never silently gives a wrong result.
Each test fails on the behaviour before the fix it names; hostile files are made by hand in tmp_path."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from harness import cli

REPO = Path(__file__).resolve().parents[1]


def test_run_report_renders_in_a_fresh_process(tmp_path, monkeypatch):
    """`run --report` drew figures in workers forked from the process that ran Ray (segfaults in
    _raylet.so): the report is now rendered by a fresh `stalebench report` process."""
    import harness.suite.runner as runner
    suite = tmp_path / "s.yaml"
    suite.write_text(yaml.safe_dump({"suite": "s1", "base": {"task": {"name": "addrev"}}, "seeds": [0]}))
    monkeypatch.setattr(runner, "run_suite", lambda *a, **k: {"completed": 1})
    calls = []
    monkeypatch.setattr(cli.subprocess, "run", lambda argv, **k: calls.append(argv) or type("P", (), {"returncode": 0}))
    monkeypatch.setattr(cli, "_report", lambda *a, **k: pytest.fail("rendered in the process that ran Ray"))
    assert cli.main(["run", str(suite), "--results", str(tmp_path / "r"), "--report"]) == 0
    assert calls == [[sys.executable, "-m", "harness.cli", "report", str(tmp_path / "r" / "s1")]]
