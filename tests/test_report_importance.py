"""The importance-diagnostics figures of the report, drawn from hand-written trial files."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.store import trialdir
from harness.report.importance import delay_label, importance_figures
from harness.report.load import importance_summary
from harness.report.plotting import Output

LAW = json.dumps({"dist": "geometric", "p": 0.2, "max": 16, "min": 0, "mean": None}, sort_keys=True)


def test_delay_labels():
    assert delay_label(8) == "8"
    assert delay_label(LAW) == "geometric p=0.2 ≤16"
    assert delay_label(json.dumps({"dist": "trace", "path": "suites/traces/a.jsonl", "max": 8})) == "trace a"


def test_figures_by_delay_and_estimator(tmp_path):
    trials = []
    for algo in ("grpo", "tis"):
        for delay in (0, LAW):
            tid = f"{algo}-{'law' if delay else 0}"
            d = tmp_path / tid
            d.mkdir()
            for step in (1, 2, 3, 4):
                trialdir.append_jsonl(d / trialdir.METRICS, {"step": step, "is/log_ratio_q99": 0.1 * step,
                                                              "is/log_ratio_q01": -0.1, "is/group_ess_min": 0.9,
                                                              "is/adv_pos_clipped_frac": 0.01})
                trialdir.append_side_row(d, trialdir.IS_HIST, {"step": step, "log_ratio_counts": [1] * 82,
                                                               "clipped_by_position": [0, 1], "tokens_by_position": [4, 4]})
            trials.append({"trial_id": tid, "status": "completed", "algorithm": algo, "delay": delay, "slice": "",
                           "is/adv_pos_clipped_frac": 0.5})        # the trials table may hold a column of that name
    summaries = {t["trial_id"]: importance_summary(trialdir.read_metrics(tmp_path / t["trial_id"]), tmp_path / t["trial_id"])
                 for t in trials}
    assert summaries["grpo-0"].scalars["is/log_ratio_q99"] == pytest.approx(0.35)   # steps 3, 4: the second half
    assert list(summaries["grpo-0"].hists["clipped_by_position"]) == [0, 2]
    out = importance_figures(pd.DataFrame(trials), summaries, Output(tmp_path, ("png", "svg")), "grpo")
    assert [f.title for f in out] == ["Importance diagnostics by delay", "Token log-ratio histograms",
                                      "Clipped tokens by position"]
    assert all((tmp_path / f.file).stat().st_size > 1000 and (tmp_path / f.svg).exists() for f in out)
    assert "2-2 seeds" not in out[0].caption and "1-1 seeds" in out[0].caption


def test_nothing_to_draw_without_the_diagnostics(tmp_path):
    (tmp_path / "t").mkdir()
    trialdir.append_jsonl(tmp_path / "t" / trialdir.METRICS, {"step": 1, "loss/value": 0.0})
    trials = pd.DataFrame([{"trial_id": "t", "status": "completed", "algorithm": "grpo", "delay": 0, "slice": ""}])
    summary = importance_summary(trialdir.read_metrics(tmp_path / "t"), tmp_path / "t")
    assert summary.hists is None
    assert importance_figures(trials, {"t": summary}, Output(tmp_path), "grpo") == []
