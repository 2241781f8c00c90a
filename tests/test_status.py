"""Tests for harness.suite.status on hostile or malformed result files (the happy path is in test_runner.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.suite.status import ProgressLine, count_statuses, printable, suite_status
from harness.store.trialdir import read_status

ESCAPES = ["\x1b[2J", "\x1b]0;pwned\x07", "\x9b31m", "\r", "\x08", "\u202e"]  # clear, retitle, CSI, CR, BS, RTL


def _trial(results: Path, name: str, status: object, *, raw: str | None = None) -> Path:
    trial_dir = results / name
    trial_dir.mkdir(parents=True)
    (trial_dir / "status.json").write_text(raw if raw is not None else json.dumps(status))
    return trial_dir


def _assert_inert(text: str) -> None:
    """No character that a terminal would act on (anything but printable text and newlines)."""
    assert all(c.isprintable() or c == "\n" for c in text), [c for c in text if not (c.isprintable() or c == "\n")]


def test_printable_escapes_control_characters() -> None:
    assert printable("ok: 1/2") == "ok: 1/2"
    assert printable("\x1b[2J") == "\\x1b[2J"
    assert printable("a\nb\tc\x07") == "a\\nb\\tc\\x07"
    assert printable("\u202eabc") == "\\u202eabc"
    assert printable(3) == "3"


def test_status_table_neutralises_escape_codes_in_result_files(tmp_path: Path) -> None:
    # Old code printed the error and the trial id raw: "\x1b[2J" cleared the user's terminal.
    results = tmp_path / "st"
    _trial(results, "algorithm=grpo\x1b]0;pwned\x07", {"status": "failed", "step": 3,
                                                     "error": "boom " + "".join(ESCAPES)})
    _trial(results, "t2", {"status": "running\x1b[2J", "step": 1})
    table = suite_status(results)
    _assert_inert(table)
    assert "\\x1b]0;pwned\\x07" in table and "boom \\x1b[2J" in table
    assert "running\\x1b[2J" in table


@pytest.mark.parametrize("raw", ["[1, 2]", '"completed"', "3", "null", "{", "\x00\x01"])
def test_status_json_that_is_not_an_object_reads_as_unreadable(tmp_path: Path, raw: str) -> None:
    # Old code: a JSON list or string made `.get` raise AttributeError in every reader.
    results = tmp_path / "st"
    trial_dir = _trial(results, "t", None, raw=raw)
    assert read_status(trial_dir) == {}
    assert count_statuses(results, ["t"]) == {"pending": 1}
    assert "0/1 trials done" in str(ProgressLine(results, {"t": 5}))
    assert suite_status(results).splitlines()[-1] == "1 trials: 1 pending"


def test_junk_fields_in_status_json_do_not_crash(tmp_path: Path) -> None:
    results = tmp_path / "st"
    _trial(results, "t", {"status": ["completed"], "step": "many", "error": {"nested": "\x1b[2J" * 1000}})
    table = suite_status(results)
    _assert_inert(table)
    row = table.splitlines()[2].split()
    assert row[:3] == ["t", "unknown", "0/?"]
    assert len(table.splitlines()[2]) < 200  # the error column stays bounded
    assert count_statuses(results, ["t"]) == {"unknown": 1}


@pytest.mark.parametrize("config", ["train: [1,\n", "- 1\n- 2\n", "train: {steps: many}\n", "a: 1\na: 2\n"])
def test_unreadable_trial_config_shows_unknown_steps(tmp_path: Path, config: str) -> None:
    # Old code: invalid YAML raised yaml.YAMLError, a list raised AttributeError.
    results = tmp_path / "st"
    trial_dir = _trial(results, "t", {"status": "running", "step": 2})
    (trial_dir / "config.yaml").write_text(config)
    assert suite_status(results).splitlines()[2].split()[:3] == ["t", "running", "2/?"]


def test_valid_trial_config_still_gives_steps(tmp_path: Path) -> None:
    results = tmp_path / "st"
    trial_dir = _trial(results, "t", {"status": "running", "step": 2})
    (trial_dir / "config.yaml").write_text("train:\n  steps: 6\n")
    assert suite_status(results).splitlines()[2].split()[:3] == ["t", "running", "2/6"]
