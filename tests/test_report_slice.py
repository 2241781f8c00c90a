"""A slice report (a suite with `slice_of:`) and a one-seed report: the header says what the report is and
how to check it, nothing is ranked, and the captions describe only the columns and lines that exist."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.config.expand import load_suite_trials
from harness.config.suite import parse_suite
from harness.errors import ConfigError
from harness.report import build_report
from tests.fixtures.synthetic_results import write_suite

REPO = Path(__file__).resolve().parents[1]


def _text(page: str) -> str:
    page = re.sub(r"<(style|script)>.*?</\1>", "", page, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)).replace("&#39;", "'")


def test_a_slice_report_says_what_it_is_ranks_nothing_and_names_its_check(tmp_path):
    suite_dir = write_suite(tmp_path, "qs", ("gmc_grpo", "grpo"), (64,), (0,), suite_extra={
        "slice_of": "reference-v3", "base": {"train": {"steps": 40}}})
    index = build_report(suite_dir, tmp_path / "reports" / "qs")
    text = _text(index.read_text())
    head = text[:text.index("Final accuracy by estimator and delay")]
    assert "A slice of reference-v3 , not a leaderboard." in head
    # one --only per trial, its grid point and seed (eps and group_size do not vary: the grid's keys all the same)
    assert ("stalebench reproduce reports/reference-v3 --only 'algorithm=gmc_grpo,delay=64,eps=0.2,group_size=8,"
            "seed=0' --only 'algorithm=grpo,delay=64,eps=0.2,group_size=8,seed=0' --steps 40") in head
    assert 'href="../reference-v3/index.html"' in index.read_text()
    board = json.loads((index.parent / "results.json").read_text())["leaderboard"]
    assert [r["vs_leader"] for r in board] == ["not ranked: a slice of reference-v3"] * 2
    assert all(r["rank"] is None for r in board)          # NaN in the bundle: no rank
    assert "leader " not in text.replace("vs leader", "") and "1.00*" not in text
    # no delay-0 run: the caption does not describe one, and the figures draw no on-policy line
    assert "Gain retained needs a delay-0 run, which this table does not have" in text
    assert "acc at delay 0 - base" not in text and "Dashed line = the on-policy level" not in text
    assert "Nothing is marked highest: not ranked, a slice of reference-v3." in text and "<b>0." not in index.read_text()


def test_one_seed_ranks_nothing_and_gives_no_probability_of_improvement(tmp_path):
    suite_dir = write_suite(tmp_path, "one", ("gmc_grpo", "grpo"), (0, 8), (0,))
    index = build_report(suite_dir, tmp_path / "reports" / "one")
    board = json.loads((index.parent / "results.json").read_text())["leaderboard"]
    assert {r["vs_leader"] for r in board} == {"not ranked: one seed"}
    assert all(r["poi_vs_baseline"] is None for r in board)   # one seed a side: no PoI (it was 1.00* or 0.00*)
    text = _text(index.read_text())
    assert "A slice of" not in text and "Not ranked (one seed)" in text
    assert "Gain retained = (acc at delay 8 - base) / (acc at delay 0 - base)" in text   # delay 0 is there


def test_two_seeds_are_still_ranked(tmp_path):
    suite_dir = write_suite(tmp_path, "two", ("gmc_grpo", "grpo"), (8,), (0, 1))
    index = build_report(suite_dir, tmp_path / "reports" / "two")
    board = json.loads((index.parent / "results.json").read_text())["leaderboard"]
    assert [r["rank"] for r in board] == [1, 2] and board[0]["vs_leader"] == "leader"


@pytest.mark.parametrize("value", ["qs", 3, "not a/name"])
def test_slice_of_must_name_another_suite(value):
    with pytest.raises(ConfigError, match="slice_of: expected the name of the suite this one is a slice of"):
        parse_suite({"suite": "qs", "base": {}, "slice_of": value})
    assert parse_suite({"suite": "qs", "base": {}, "slice_of": "reference-v3"}).slice_of == "reference-v3"


@pytest.mark.parametrize(("name", "reference"), [("quickstart", "reference"), ("quickstart-v2", "reference-v2"),
                                                 ("quickstart-v3", "reference-v3")])
def test_the_quickstarts_are_slices_and_slice_of_leaves_their_trials_alone(name, reference, tmp_path):
    path = REPO / "suites" / f"{name}.yaml"
    suite, trials = load_suite_trials(path)
    assert suite.slice_of == reference
    plain = tmp_path / f"{name}.yaml"                   # the same file without the field: the same ids and configs
    plain.write_text("".join(line for line in path.read_text().splitlines(keepends=True)
                             if not line.startswith("slice_of:")))
    _, same = load_suite_trials(plain)
    assert [(t.trial_id, t.config) for t in same] == [(t.trial_id, t.config) for t in trials]
