"""Version traces: the asynchronous producer records one; the exact mode replays it (same trace, same
numbers); a trace that does not fit the suite, or is malformed or hostile, is refused with one line."""
from __future__ import annotations

import json

import pytest

from harness.config import trace as trace_mod
from harness.store import trialdir
from harness.config.run import ConfigError, build_run_config

from test_trainer import run, strip_perf

B = 16                      # tiny_base: 4 prompts × group_size 4; 6 steps, one update per batch


def replay(path, max_lag=8):
    return {"delay": {"dist": "trace", "path": str(path), "max": max_lag}}


def write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_async_trial_records_its_versions_and_replaying_them_twice_is_identical(learning_base, tmp_path):
    status, async_rows, _ = run(learning_base, tmp_path, "async", **{"async": {"max_staleness": 2}})
    assert status == "completed"
    recorded = trialdir.read_side_rows(tmp_path / "async", trialdir.TRACE)
    assert [r["step"] for r in recorded] == [1, 2, 3, 4, 5, 6] and all(len(r["versions"]) == B for r in recorded)
    for s, (row, tr) in enumerate(zip(async_rows, recorded)):     # k = 1: staleness = s − version
        assert row["stale/mean"] == sum(s - v for v in tr["versions"]) / B
    path = trialdir.trace_file(tmp_path / "async")
    _, a, a_eval = run(learning_base, tmp_path, "replay-a", **replay(path))
    _, b, b_eval = run(learning_base, tmp_path, "replay-b", **replay(path))
    assert strip_perf(a) == strip_perf(b) and a_eval == b_eval
    assert [r["stale/mean"] for r in a] == [r["stale/mean"] for r in async_rows]
    assert sum(r["loss/value"] != 0 for r in a) >= 2
    # the replay records the trace it replayed
    assert trialdir.read_side_rows(tmp_path / "replay-a", trialdir.TRACE) == recorded


def test_a_constant_trace_is_the_exact_delay_bit_for_bit(learning_base, tmp_path):
    d = 2
    path = write(tmp_path / "d2.jsonl", [{"step": s + 1, "versions": [max(0, s - d)] * B} for s in range(6)])
    _, exact, exact_eval = run(learning_base, tmp_path, "exact", delay=d)
    _, replayed, replayed_eval = run(learning_base, tmp_path, "replayed", **replay(path))
    assert strip_perf(replayed) == strip_perf(exact) and replayed_eval == exact_eval


def test_mixed_trace_replays_each_response_at_its_version(tiny_base, tmp_path):
    # step s (0-based batch s) gives response i the version max(0, s − (i mod 3)): lags 0, 1, 2 mixed
    rows = [{"step": s + 1, "versions": [max(0, s - i % 3) for i in range(B)]} for s in range(6)]
    _, out, _ = run(tiny_base, tmp_path, "mixed", **replay(write(tmp_path / "m.jsonl", rows), max_lag=2))
    for s, row in enumerate(out):
        assert row["stale/mean"] == sum(s - v for v in rows[s]["versions"]) / B
        assert row["stale/max"] == min(s, 2)


GOOD = [{"step": s + 1, "versions": [0] * B} for s in range(6)]


@pytest.mark.parametrize("rows,message", [
    (GOOD[:5], "5 steps, fewer than train.steps 6"),
    ([], "no steps (an empty trace)"),
    ([{"step": 1, "versions": [0] * 15}] + GOOD[1:], "line 1: 15 responses, but a step of this suite has 16"),
    ([GOOD[0], {"step": 3, "versions": [0] * B}], "line 2: step 3, expected 2"),
    ([GOOD[0], {"step": 2, "versions": [2] + [0] * 15}], "line 2: response 0: version 2 is outside 0..1 "
                                                          "(step 2 is consumed at version 1: no version from the future)"),
    ([{"step": 1, "versions": [-1] + [0] * 15}], "response 0: version -1 is outside 0..0"),
    ([GOOD[0], {"step": 2, "versions": ["1"] + [0] * 15}], "response 0: version '1' is not an integer"),
    ([GOOD[0], {"step": 2, "versions": [True] + [0] * 15}], "response 0: version True is not an integer"),
    ([GOOD[0], {"step": 2, "versions": [0.5] + [0] * 15}], "response 0: version 0.5 is not an integer"),
    ([GOOD[0], '{"step": 2, "versions": [NaN' + ", 0" * 15 + "]}"], "line 2: not a JSON object (ValueError)"),
    (["[" * 100_000 + "]" * 100_000], "line 1: not a JSON object (RecursionError)"),
    (['{"step": 1, "versions": ' + "[" * 50 + "0" + "]" * 50 + "}"], "line 1: 1 responses, but a step"),
    (["not json"], "line 1: not a JSON object"),
    (["[1, 2]"], "line 1: expected the keys step and versions (or step and segments); got 'list'"),
    ([{"step": 1, "versions": [0] * B, "extra": 1}], "expected the keys step and versions"),
    ([{"step": 1, "segments": [[0, 0]] + [[0]] * 15}], "response 0: starts must list the first token of each of "
                                                       "its 2 segments (0 first); got None"),
    ([{"step": 1, "segments": [[0, 0]] + [[0]] * 15, "starts": [[0, 2]] + [[0]] * 15}],
     "response 0: segment versions [0, 0] must increase"),
    ([{"step": 1, "segments": [[0]] * B, "starts": [[1]] + [[0]] * 15}], "response 0: starts [1] must be integers "
                                                                         "increasing from 0"),
    ([{"step": 1, "segments": [[0]] * B, "starts": [[0]] * 15}], "line 1: starts: 15 responses, but a step"),
    ([GOOD[0], {"step": 2, "segments": [[0, 2]] + [[0]] * 15, "starts": [[0, 3]] + [[0]] * 15}],
     "response 0: version 2 is outside 0..1"),
    ([GOOD[0], {"step": 2, "segments": [[0, 1]] + [[0]] * 15, "starts": [[0, 3]] + [[0]] * 15}, *GOOD[2:]],
     "delay.path: a trace of responses of several segments needs an engine that switches weights mid-response"),
    ([{"step": 1, "segments": [[]] + [[0]] * 15}], "response 0: segments must be a non-empty list of versions"),
])
def test_bad_traces_are_one_line_errors(tiny_base, tmp_path, rows, message):
    path = write(tmp_path / "t.jsonl", rows)
    with pytest.raises(ConfigError) as exc:
        build_run_config(tiny_base, replay(path))
    assert message in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_segment_traces_of_one_segment_replay_like_versions(tiny_base, tmp_path):
    # response i of batch s at version max(0, s − (i mod 3)), written once as versions, once as one-segment lists
    versions = [[max(0, s - i % 3) for i in range(B)] for s in range(6)]
    ver = write(tmp_path / "ver.jsonl", [{"step": s + 1, "versions": v} for s, v in enumerate(versions)])
    seg = write(tmp_path / "seg.jsonl", [{"step": s + 1, "segments": [[x] for x in v]} for s, v in enumerate(versions)])
    read = [trace_mod.read_trace(p, B, updates_per_batch=1, max_lag=2, steps=6) for p in (seg, ver)]
    schedules = [[((0, v),) for v in row] for row in versions]       # one segment from token 0, at version v
    assert read == [schedules, schedules] and versions[5][:4] == [5, 4, 3, 5]
    _, by_versions, ver_eval = run(tiny_base, tmp_path, "ver", **replay(ver, max_lag=2))
    _, by_segments, seg_eval = run(tiny_base, tmp_path, "seg", **replay(seg, max_lag=2))
    assert strip_perf(by_segments) == strip_perf(by_versions) and seg_eval == ver_eval
    assert [r["stale/mean"] for r in by_segments] == [sum(s - x for x in v) / B for s, v in enumerate(versions)]


def test_hostile_files_are_refused_before_reading(tiny_base, tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="no such trace file"):
        build_run_config(tiny_base, replay(tmp_path / "missing.jsonl"))
    with pytest.raises(ConfigError, match="not a file"):
        build_run_config(tiny_base, replay(tmp_path))
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        build_run_config(tiny_base, replay(tmp_path / "bin.jsonl"))
    monkeypatch.setattr(trace_mod, "MAX_TRACE_BYTES", 100)
    with pytest.raises(ConfigError, match="more than a trace may hold"):
        build_run_config(tiny_base, replay(write(tmp_path / "big.jsonl", GOOD)))


def test_a_lag_beyond_max_is_refused(tiny_base, tmp_path):
    rows = [{"step": s + 1, "versions": [0] * B} for s in range(6)]      # step 6 holds version 0: 5 old
    with pytest.raises(ConfigError, match="version 0 is 4 versions old, more than delay.max 3"):
        build_run_config(tiny_base, replay(write(tmp_path / "t.jsonl", rows), max_lag=3))


def test_the_staleness_suites_load(monkeypatch):
    from pathlib import Path

    from harness.config.expand import expand, load_suite_file
    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(repo)                          # trace paths are relative to where stalebench runs
    ids = {name: [t.trial_id for t in expand(load_suite_file(f"suites/{name}.yaml"))]
           for name in ("mismatch-vs-lag", "async-trace", "async-trace-record")}
    assert len(ids["mismatch-vs-lag"]) == 4 * 2 * 2 * 2 * 2 and len(ids["async-trace"]) == 4 * 3 * 2
    assert len(set(ids["async-trace"])) == len(ids["async-trace"])


def test_an_edited_trace_changes_the_trials_config_and_other_delays_keep_theirs(tiny_base, tmp_path):
    """Issue 39: identity held the trace's path, so a trace edited in place was silently reused (`run`
    said "1 already finished"); the resolved config now carries the file's sha256."""
    from harness.config.dicts import to_dict

    path = write(tmp_path / "t.jsonl", GOOD)
    before = to_dict(build_run_config(tiny_base, replay(path)))
    assert len(before["delay"]["sha256"]) == 64
    write(path, GOOD[:1] + [{"step": 2, "versions": [1] + [0] * 15}] + GOOD[2:])
    after = to_dict(build_run_config(tiny_base, replay(path)))
    assert trialdir.config_changes(before, after) == [                      # _short: 40 characters of a repr
        f"delay.sha256 '{before['delay']['sha256'][:36]}... -> '{after['delay']['sha256'][:36]}..."]
    with pytest.raises(ConfigError, match="delay.sha256: the trace .* now has sha256 .* it was edited since"):
        build_run_config(tiny_base, {"delay": before["delay"]})     # a config that recorded the old sha256
    # no trace, no new key: committed trials keep their identity
    assert to_dict(build_run_config(tiny_base, {"delay": 3}))["delay"] == 3
    assert "sha256" not in to_dict(build_run_config(tiny_base, {"delay": {"dist": "geometric", "p": 0.5, "max": 4}}))["delay"]


def test_a_fifo_proc_file_or_duplicate_key_trace_is_one_line(tiny_base, tmp_path):
    import os
    os.mkfifo(tmp_path / "fifo.jsonl")                       # before: `check` hung on /proc/kmsg; an OSError
    for path, message in ((tmp_path / "fifo.jsonl", "not a file"),           # traceback on /proc/self/mem
                          ("/proc/self/mem", "a file of the kernel's proc/"),
                          ("/proc/kmsg", "a file of the kernel's proc/|cannot read")):
        with pytest.raises(ConfigError, match=message) as exc:
            build_run_config(tiny_base, replay(path))
        assert str(exc.value).startswith("delay.path: ") and "\n" not in str(exc.value)
    dup = write(tmp_path / "dup.jsonl", ['{"step": 1, "step": 1, "versions": [' + ", ".join(["0"] * B) + "]}"])
    with pytest.raises(ConfigError, match="line 1: not a JSON object"):
        build_run_config(tiny_base, replay(dup))
