"""Tests for harness.suite.status on hostile or malformed result files (the happy path is in test_runner.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.suite.status import ProgressLine, count_statuses, printable, run_summary, suite_status
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


def test_run_summary_ends_with_the_next_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    text = run_summary(Path("results/quickstart-v3"), {"completed": 2}, reported=True)
    assert text.splitlines() == [
        "results: results/quickstart-v3   completed: 2",
        "next:",
        # the widest command (the mlflow line, 57 characters) sets the column of the comments
        "  stalebench status results/quickstart-v3                     # trials by status",
        "  stalebench site                                             # reports/index.html, every suite's report",
        "  mlflow ui --backend-store-uri sqlite:///results/mlflow.db   # browse the trials' metrics"]
    unreported = run_summary(Path("results/s"), {"completed": 1, "failed": 1}, reported=False).splitlines()
    assert unreported[0] == "results: results/s   completed: 1, failed: 1"
    assert unreported[3].split("#")[0].strip() == "stalebench report results/s"


def test_bare_stalebench_prints_the_help_and_exits_0(capsys: pytest.CaptureFixture) -> None:
    from harness import cli
    with pytest.raises(SystemExit) as exit_info:
        cli.main([])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: stalebench") and "reproduce" in out and "site" in out


def test_progress_line_names_the_phase_until_steps_move_then_counts_down(tmp_path: Path, monkeypatch) -> None:
    from harness.suite import status as status_module
    from harness.store.tracking import RunLog
    clock = [1000.0]                                     # a fake clock; real file mtimes are all later than it
    monkeypatch.setattr(status_module.time, "time", lambda: clock[0])
    line = ProgressLine(tmp_path, {"a": 4, "b": 4}, projected_s=600.0)
    tail = "0/2 trials done | 0 running | 0 failed | trial-steps 0/8 | elapsed 0m00s | ETA ~10m00s (projected)"
    assert str(line) == "starting the trials' workers | " + tail
    (tmp_path / "a").mkdir()                             # a worker took trial a up (RunLog makes its directory)
    assert str(line) == "loading the base model | " + tail
    log = RunLog(tmp_path / "a")
    log.start({"train": {"steps": 4}}, {}, {"config_sha256": "test"})      # its base is loaded: status running
    running = "0/2 trials done | 1 running | 0 failed | trial-steps 0/8 (running: 0/4) | elapsed 0m00s"
    assert str(line) == f"evaluating step 0 on the held-out set | {running} | ETA ~10m00s (projected)"
    log.eval(0, {"eval/acc": 0.5})
    assert str(line).startswith("taking the first steps | ")
    clock[0] += 60                                       # the first step, a minute in: no pace yet, the projection
    log.metrics(1, {"loss/value": 0.1})
    assert str(line) == ("0/2 trials done | 1 running | 0 failed | trial-steps 1/8 (running: 1/4) | elapsed 1m00s "
                         "| ETA ~9m00s (projected)")
    clock[0] += 10                                       # one more step in 10 s: 0.1 step/s, 6 to go -> 60 s
    log.metrics(2, {"loss/value": 0.1})
    assert str(line).endswith("trial-steps 2/8 (running: 2/4) | elapsed 1m10s | ETA 1m00s")


def test_progress_line_without_a_projection_says_it_does_not_know_yet(tmp_path: Path, monkeypatch) -> None:
    assert str(ProgressLine(tmp_path, {"a": 3})).endswith("trial-steps 0/3 | elapsed 0m00s | ETA ?")
    from harness.suite import status as status_module
    clock = [1000.0]
    monkeypatch.setattr(status_module.time, "time", lambda: clock[0])
    line = ProgressLine(tmp_path, {"a": 3}, projected_s=6.0)
    clock[0] += 30                                       # 30 s in, no step yet: the 6 s projection is exceeded
    assert str(line).endswith("elapsed 0m30s | ETA ? (past the projected 0m06s)")


def test_status_names_a_campaigns_landed_trials_on_a_machine_that_has_not_run_it(tmp_path, monkeypatch) -> None:
    from harness.errors import ConfigError

    monkeypatch.chdir(tmp_path)                          # campaigns/ is relative to where the command runs
    tune = tmp_path / "campaigns" / "camp" / "tune"
    tune.mkdir(parents=True)
    for i in range(3):
        (tune / f"tune-grpo-lr1e-05-seed100{i}.tar.gz").write_bytes(b"")
    (tmp_path / "campaigns" / "camp" / "grpo-d0-s0.tar.gz").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"^results/camp: not run on this machine; campaign camp: 1 table and 3 "
                                          r"tuning trials landed in campaigns/camp/ \(`stalebench run camp "
                                          r"--restore-only` brings them into results/camp/, running nothing\); "
                                          r"`stalebench run` \(or `tune`\) SUITE_FILE --dry-run counts what is left$"):
        suite_status(Path("results/camp"))
    _trial(tmp_path / "results" / "camp", "grpo-d0-s1", {"status": "running", "step": 1})
    assert suite_status(Path("results/camp")).splitlines()[-1] == (
        "campaign camp: 1 table and 3 tuning trials landed in campaigns/camp/ (`stalebench run camp --restore-only` "
        "brings them into results/camp/, running nothing)")
    with pytest.raises(ConfigError, match="no suite results here"):
        suite_status(Path("results/other"))
