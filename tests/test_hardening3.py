"""Hardening, ring 3 (issue 54): writes through symbolic links and colliding writers, silently wrong cells.
Each test fails on the behaviour before the fix it names; the suites are tiny synthetic ones
(tests/fixtures/synthetic_results.py), nothing trains and nothing starts Ray."""
from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

from harness.cli import main
from harness.report.compare import compare
from harness.report.html import build_site, records
from harness.report.load import load_results
from harness.report.published import differences
from harness.report.tables import analyse
from harness.store import archive, safewrite, trialdir
from tests.fixtures.synthetic_results import write_suite

VICTIM = "do not overwrite me\n"


def small_suite(root: Path, name: str = "ring3") -> Path:
    """2 estimators x delays (0, 8) x seeds (0, 1), 20 steps, evaluated every 5 (last eval at step 20)."""
    return write_suite(root, name, ("grpo", "m2po"), (0, 8), (0, 1), steps=20)


def planted(tmp_path: Path, link: Path) -> Path:
    """A symbolic link at ``link`` to a file outside, which no write may change; returns that file."""
    victim = tmp_path / "elsewhere" / "victim.txt"
    victim.parent.mkdir(exist_ok=True)
    victim.write_text(VICTIM)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim)
    return victim


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("stalebench: ") and "warning" not in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ---------------------------------------------------------------- 1: no write through a link, no collision


@pytest.mark.parametrize("name", ["index.html", "results.json", "leaderboard.csv", "paper_table.md", "raw.tar.gz"])
def test_report_refuses_an_output_file_that_is_a_link(tmp_path, capsys, name):
    suite, out = small_suite(tmp_path / "results"), tmp_path / "out"
    victim = planted(tmp_path, out / name)
    assert main(["report", str(suite), "--out", str(out), "--raw"]) == 2
    assert f"{name} there is a symbolic link" in one_error_line(capsys)
    assert victim.read_text() == VICTIM and not (out / "index.html").is_file() or name == "index.html"


def test_report_never_writes_through_a_planted_temporary_name(tmp_path, capsys):
    """The old fixed names (raw.tar.gz.tmp, status.json.tmp) are not used: a link planted there is left alone."""
    suite, out = small_suite(tmp_path / "results"), tmp_path / "out"
    victim = planted(tmp_path, out / "raw.tar.gz.tmp")
    assert main(["report", str(suite), "--out", str(out), "--raw"]) == 0
    assert victim.read_text() == VICTIM and (out / "raw.tar.gz").is_file()
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()]   # no temp file left


def test_a_figure_that_is_a_link_is_not_written(tmp_path, capsys):
    suite, out = small_suite(tmp_path / "results"), tmp_path / "out"
    main(["report", str(suite), "--out", str(tmp_path / "first")])
    figure = sorted((tmp_path / "first").glob("*.png"))[0].name
    victim = planted(tmp_path, out / figure)
    main(["report", str(suite), "--out", str(out)])
    assert victim.read_text() == VICTIM
    assert f"{figure}: is a symbolic link" in capsys.readouterr().err


def test_site_refuses_an_index_that_is_a_link(tmp_path, capsys):
    suite, reports = small_suite(tmp_path / "results"), tmp_path / "reports"
    assert main(["report", str(suite), "--out", str(reports / "ring3")]) == 0
    victim = planted(tmp_path, reports / "index.html")
    assert main(["site", "--reports", str(reports)]) == 2
    assert "index.html: is a symbolic link" in one_error_line(capsys)
    assert victim.read_text() == VICTIM


def test_site_lists_a_report_whose_rendered_is_not_a_mapping(tmp_path, capsys):
    suite, reports = small_suite(tmp_path / "results"), tmp_path / "reports"
    assert main(["report", str(suite), "--out", str(reports / "ring3")]) == 0
    bundle = json.loads((reports / "ring3" / "results.json").read_text())
    (reports / "ring3" / "results.json").write_text(json.dumps({**bundle, "rendered": "x"}))
    assert "ring3" in build_site(reports).read_text()            # was: AttributeError traceback


def test_train_files_are_never_written_through_links(tmp_path):
    """status.json.tmp and suite.yaml.tmp planted as links (what `train` wrote before) are left alone; a row
    file that is a link is refused."""
    from harness.config.suite import parse_suite
    from harness.suite.session import write_suite_file

    trial = tmp_path / "results" / "s" / "t"
    trial.mkdir(parents=True)
    status_victim = planted(tmp_path, trial / "status.json.tmp")
    trialdir.write_status(trial, {"status": "running", "step": 0})
    assert status_victim.read_text() == VICTIM and trialdir.read_status(trial)["status"] == "running"
    suite_victim = tmp_path / "elsewhere" / "suite-victim.txt"
    suite_victim.write_text(VICTIM)
    (trial.parent / "suite.yaml.tmp").symlink_to(suite_victim)
    write_suite_file(parse_suite({"suite": "s", "base": {}, "seeds": [0]}, "s.yaml"), trial.parent)
    assert suite_victim.read_text() == VICTIM and "suite: s" in (trial.parent / "suite.yaml").read_text()
    (trial / "status.json").unlink()
    metrics_victim = tmp_path / "elsewhere" / "metrics-victim.txt"
    metrics_victim.write_text(VICTIM)
    (trial / trialdir.METRICS).symlink_to(metrics_victim)
    with pytest.raises(safewrite.UnsafeWriteError, match="metrics.jsonl: is a symbolic link"):
        trialdir.append_jsonl(trial / trialdir.METRICS, {"step": 1})
    (trial / "status.json").symlink_to(status_victim)
    with pytest.raises(safewrite.UnsafeWriteError, match="status.json: is a symbolic link"):
        trialdir.write_status(trial, {"status": "completed"})
    assert metrics_victim.read_text() == VICTIM and status_victim.read_text() == VICTIM


def test_two_writers_of_one_file_never_collide(tmp_path):
    """Two writers of one suite.yaml: with the shared name suite.yaml.tmp, ~1 write in 3 failed
    (FileNotFoundError when the other writer had renamed it). Every write must succeed, whole."""
    path, errors = tmp_path / "suite.yaml", []

    def writer(text: str) -> None:
        for _ in range(300):
            try:
                safewrite.write_file(path, text)
            except OSError as exc:            # noqa: PERF203
                errors.append(exc)

    threads = [threading.Thread(target=writer, args=(c * 5000,)) for c in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and path.read_text() in ("a" * 5000, "b" * 5000)
    assert [p.name for p in tmp_path.iterdir()] == ["suite.yaml"]       # no temporary file left behind


# ---------------------------------------------------------------- 2: silently wrong cells


def notes_of(suite: Path) -> dict[str, tuple[str, str]]:
    trials = load_results(suite).trials
    return {t: (s, n) for t, s, n in zip(trials["trial_id"], trials["status"], trials["notes"])}


def test_a_torn_final_evaluation_makes_the_trial_invalid(tmp_path):
    """The last eval row torn: the trial was counted with its step-15 evaluation (cell moved, no word)."""
    suite = small_suite(tmp_path)
    evals = suite / "grpo-d0-e0.2-g8-s0" / trialdir.EVALS
    lines = evals.read_text().splitlines()
    evals.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:10])            # a writer killed mid-line
    status, note = notes_of(suite)["grpo-d0-e0.2-g8-s0"]
    assert status == "invalid"
    assert "completed at step 20, but eval.jsonl has no eval/acc there (the last at step 15" in note
    evals.write_text("\n".join(lines[:-1]) + "\n")                               # the last row lost
    assert notes_of(suite)["grpo-d0-e0.2-g8-s0"][0] == "invalid"


@pytest.mark.parametrize("new_id, seed", [("grpo-d0-e0.2-g8-s2", 2), ("grpo-d0-e0.2-g8-s0\u200b", 7)])
def test_a_trial_outside_the_suites_seeds_is_not_counted(tmp_path, new_id, seed):
    suite = small_suite(tmp_path)
    copy = suite / new_id
    shutil.copytree(suite / "grpo-d0-e0.2-g8-s0", copy)
    params = json.loads((copy / trialdir.PARAMS).read_text())
    (copy / trialdir.PARAMS).write_text(json.dumps({**params, "trial_id": new_id, "seed": seed}))
    status, note = notes_of(suite)[new_id]
    assert status == "invalid" and f"seed {seed} is not one of the suite's seeds [0, 1]" in note
    cell = analyse(load_results(suite)).cells.set_index(["algorithm", "delay"]).loc[("grpo", 0)]
    assert cell["seeds"] == 2                                                    # was 3


def test_a_grid_value_or_trial_id_the_suite_does_not_have_is_not_counted(tmp_path):
    suite = small_suite(tmp_path)
    trial = suite / "m2po-d8-e0.2-g8-s1"
    params = json.loads((trial / trialdir.PARAMS).read_text())
    (trial / trialdir.PARAMS).write_text(json.dumps({**params, "delay": 16}))
    assert "delay=16 is not a value of the suite's grid" in notes_of(suite)[trial.name][1]
    (trial / trialdir.PARAMS).write_text(json.dumps({**params, "seed": True}))   # True is not seed 1
    assert "seed True is not one of the suite's seeds" in notes_of(suite)[trial.name][1]
    (trial / trialdir.PARAMS).write_text(json.dumps({**params, "trial_id": "other"}))
    assert "params.json trial_id 'other' is not the directory's name" in notes_of(suite)[trial.name][1]


@pytest.mark.parametrize("step", [-5, "x", 10**15, True])
def test_a_diverged_step_out_of_range_makes_the_trial_invalid(tmp_path, step):
    suite = small_suite(tmp_path)
    status = suite / "grpo-d8-e0.2-g8-s0" / trialdir.STATUS
    status.write_text(json.dumps({"status": "diverged", "step": 12, "diverged_step": step}))
    state, note = notes_of(suite)["grpo-d8-e0.2-g8-s0"]
    assert state == "invalid" and "status.json diverged_step" in note and "is not an integer in 0..12" in note


@pytest.mark.parametrize("key", ["final_acc", "collapsed", "start_acc"])
def test_a_params_key_the_report_computes_is_named(tmp_path, key):
    """Was: pandas' "The truth value of a Series is ambiguous" from deep in the report."""
    suite = small_suite(tmp_path)
    trial = suite / "grpo-d0-e0.2-g8-s1"
    params = json.loads((trial / trialdir.PARAMS).read_text())
    (trial / trialdir.PARAMS).write_text(json.dumps({**params, key: 0.5}))
    res = load_results(suite)
    assert f"params.json key '{key}' is a column the report computes" in notes_of(suite)[trial.name][1]
    assert analyse(res).cells["seeds"].sum() == 7


def test_compare_names_the_invalid_trials_it_leaves_out(tmp_path):
    a, b = small_suite(tmp_path / "a"), small_suite(tmp_path / "b")
    acc = b / "m2po-d8-e0.2-g8-s1" / trialdir.EVALS
    acc.write_text(acc.read_text().replace('"eval/acc": 0.', '"eval/acc": 7.', 1))
    text = compare(a, b)
    assert "B: 1 invalid trial(s) left out: trial m2po-d8-e0.2-g8-s1 is not counted: eval.jsonl step 0: eval/acc 7." in text
    assert "A: " not in text.replace("A = ", "")


def test_published_values_are_checked_one_by_one(tmp_path):
    """Every cell and leaderboard number at 0.99, or a trial listed twice with a wrong value first: before,
    reproduce said "matches"."""
    suite = small_suite(tmp_path)
    a = analyse(load_results(suite))
    bundle = {"trials": records(a.trials), "cells": records(a.cells), "leaderboard": records(a.board)}
    assert differences(bundle, suite) == ([], 8)
    edited = {**bundle, "cells": [{**c, "final": 0.99} for c in bundle["cells"]],
              "leaderboard": [{**r, "final": 0.99, "ci_low": 0.99} for r in bundle["leaderboard"]]}
    wrong, _ = differences(edited, suite)
    # 4 cells x final, and the leaderboard (the largest delay's 2 estimators) x (final, ci_low)
    assert len(wrong) == 4 + 2 * 2 and wrong[0].startswith("cells row 1 (grpo, delay 0): final 0.99 published, ")
    first = bundle["trials"][0]
    twice = {**bundle, "trials": [{**first, "final_acc": 0.5}, *bundle["trials"]]}
    with pytest.raises(ValueError, match=f"trial {first['trial_id']} is listed twice"):
        differences(twice, suite)


def test_committed_reports_still_match_their_raw_trials():
    """The committed v1 and v3 reports: every trial valid, every published number their raw trials'."""
    from harness.store.archive import committed_results

    for report in (Path("reports/reference"), Path("reports/reference-v3")):
        with committed_results(report) as raw:
            assert set(load_results(raw).trials["status"]) == {"completed"}
            assert differences(json.loads((report / "results.json").read_text()), raw)[0] == []
    raw = archive.open_archive(Path("reports/reference-v3/tune.raw.tar.gz"))   # tuning seeds 1000.. are the suite's
    try:
        assert set(load_results(raw).trials["status"]) == {"completed"}
    finally:
        shutil.rmtree(raw)


def test_an_unreadable_status_json_is_warned_of(tmp_path):
    """A status.json nested 100,000 deep (issue 39's corpus): shown as pending without a word before."""
    suite = small_suite(tmp_path)
    (suite / "m2po-d0-e0.2-g8-s0" / trialdir.STATUS).write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    status, note = notes_of(suite)["m2po-d0-e0.2-g8-s0"]
    assert status == "invalid" and note.startswith("unreadable status.json (pending)")
