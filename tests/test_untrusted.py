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


# ---------------------------------------------------------------- archives (harness/store/untrusted.check_tar_gz)

import gzip
import io
import shutil
import tarfile
import tracemalloc

from harness.store import archive
from harness.store.archive import ArchiveError, open_archive


def _block(name: str, kind: bytes, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(tarfile.USTAR_FORMAT)


def _data(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 512)


def _good_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (("suite.yaml", b"suite: s\n"), ("t/params.json", b'{"seed": 0}')):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _open_refused(tmp_path, monkeypatch, raw: bytes, match: str) -> str:
    """open_archive of `raw` (bytes of a .tar.gz) is one ArchiveError line matching `match`, and no
    temporary directory is left."""
    monkeypatch.setattr(archive.tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(exist_ok=True)
    path = tmp_path / "bad.tar.gz"
    path.write_bytes(raw)
    with pytest.raises(ArchiveError, match=match) as err:
        open_archive(path)
    assert "\n" not in str(err.value) and len(str(err.value)) < 400
    assert list((tmp_path / "tmp").iterdir()) == []
    return str(err.value)


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME])
def test_a_chain_of_extension_headers_is_refused_before_tarfile_recurses(tmp_path, monkeypatch, kind):
    # before: tarfile followed the chain recursively -> RecursionError traceback, a stalebench-raw-* dir left
    record = b"11 path=ab\n" if kind != tarfile.GNUTYPE_LONGNAME else b"suite.yaml\0"
    chain = (_block("././@x", kind, len(record)) + _data(record)) * 5000
    raw = gzip.compress(chain + _good_tar())
    _open_refused(tmp_path, monkeypatch, raw, "more than 4 extension headers in a row")


def test_a_huge_declared_long_name_is_refused_without_reading_it(tmp_path, monkeypatch):
    # before: a 5 MB archive declaring a 1 GiB GNU long name took 2 GB of memory before any check
    raw = gzip.compress(_block("././@LongLink", tarfile.GNUTYPE_LONGNAME, 2**30) + b"a" * (5 * 2**20))
    tracemalloc.start()
    try:
        _open_refused(tmp_path, monkeypatch, raw, "an extension header of 1073741824 bytes")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20


def test_a_gzip_with_a_bad_crc_or_a_damaged_body_or_a_damaged_header_is_refused(tmp_path, monkeypatch):
    # before: tarfile stops reading at the end of the tar stream and never checks the gzip trailer, and
    # takes a damaged header for the end of the archive: a report rendered with a trial silently missing
    good = gzip.compress(_good_tar(), mtime=0)
    bad_crc = good[:-8] + bytes([good[-8] ^ 1]) + good[-7:]
    _open_refused(tmp_path, monkeypatch, bad_crc, "a damaged gzip stream .*CRC")
    bad_length = good[:-4] + bytes([good[-4] ^ 1]) + good[-3:]
    _open_refused(tmp_path, monkeypatch, bad_length, "a damaged gzip stream")
    body = bytearray(good)
    body[len(body) // 2] ^= 0xFF
    _open_refused(tmp_path, monkeypatch, bytes(body), "a damaged gzip stream|damaged tar header")
    tar = bytearray(_good_tar())
    tar[1024 + 148] ^= 0x01                                 # the second member's header checksum
    _open_refused(tmp_path, monkeypatch, gzip.compress(bytes(tar)), "a damaged tar header after 1 members")
    _open_refused(tmp_path, monkeypatch, good + b"junk", "a damaged gzip stream")
    _open_refused(tmp_path, monkeypatch, gzip.compress(_good_tar()[:1100]), "ends inside a member")


def test_an_archive_that_is_not_a_regular_file_is_refused(tmp_path, monkeypatch):
    import os
    os.mkfifo(tmp_path / "fifo.tar.gz")
    with pytest.raises(ArchiveError):
        open_archive(tmp_path / "fifo.tar.gz")


def test_a_good_archive_still_opens(tmp_path):
    path = tmp_path / "ok.tar.gz"
    path.write_bytes(gzip.compress(_good_tar()))
    out = open_archive(path)
    try:
        assert (out / "t" / "params.json").read_text() == '{"seed": 0}'
    finally:
        shutil.rmtree(out)


# ---------------------------------------------------------------- trial files: the report validates before it renders

import json

from harness.report import tables
from harness.report.load import load_results
from harness.store import trialdir
from tests.fixtures.synthetic_results import write_suite

T = "grpo-d0-e0.2-g8-s0"          # the trial each case damages; grpo-d0-e0.2-g8-s1 is left as it was


def _suite(tmp_path) -> Path:
    suite = write_suite(tmp_path / "results", "s1", ("grpo",), (0,), (0, 1), steps=20)
    for d in suite.iterdir():
        if d.is_dir():           # a resolved config, as the runner writes it (train.steps bounds the steps)
            p = trialdir.read_params(d)
            (d / trialdir.CONFIG).write_text(yaml.safe_dump({"algorithm": "grpo", "delay": 0, "eps": 0.2,
                                                             "group_size": 8, "seed": p["seed"],
                                                             "train": {"steps": 20}}))
    return suite


def _rows(path: Path, edit) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    edit(rows)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _last_acc(value):
    return lambda rows: rows[-1].update({"eval/acc": value})


CASES = {
    # before: printed as 2.250 [0.000, 1.000] / -3 averaged in
    "acc 7.5": (trialdir.EVALS, _last_acc(7.5), "eval/acc 7.5 is not a number in [0, 1]"),
    "acc -3": (trialdir.EVALS, _last_acc(-3), "eval/acc -3 is not a number in [0, 1]"),
    # before: a NaN last evaluation fell back to the one before it
    "acc NaN": (trialdir.EVALS, _last_acc(float("nan")), "eval/acc nan is not a number in [0, 1]"),
    # before: rows at step -5 and 250.5 moved the cell
    "step -5": (trialdir.METRICS, lambda rows: rows[3].update(step=-5), "step -5 is not an integer in 1..20"),
    "step 250.5": (trialdir.EVALS, lambda rows: rows[2].update(step=250.5), "step 250.5 is not an integer in 0..20"),
    "step 21": (trialdir.METRICS, lambda rows: rows.append({**rows[-1], "step": 21}), "step 21 is not an integer"),
    # before: TypeError traceback from _columns / importance_summary
    "step x": (trialdir.METRICS, lambda rows: rows[0].update(step="x"), "step 'x' is not an integer"),
    "step null": (trialdir.METRICS, lambda rows: rows[0].update(step=None), "step None is not an integer"),
    # before: a completed trial with no rows counted as a seed
    "no rows": (trialdir.METRICS, lambda rows: rows.clear(), "completed, but metrics.jsonl holds no rows"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_trial_breaking_a_rule_is_marked_invalid_and_not_counted(tmp_path, case):
    name, edit, note = CASES[case]
    suite = _suite(tmp_path)
    _rows(suite / T / name, edit)
    res = load_results(suite)
    row = res.trials.set_index("trial_id").loc[T]
    assert row["status"] == "invalid" and note in row["notes"], row["notes"]
    assert res.trials.set_index("trial_id").loc["grpo-d0-e0.2-g8-s1", "status"] == "completed"
    cells = tables.analyse(res).cells
    assert int(cells["n_completed"].sum()) == 1 and "1 invalid" in cells["status_counts"].iloc[0]


def test_params_contradicting_config_and_a_copied_trial_are_not_counted(tmp_path):
    suite = _suite(tmp_path)
    params = trialdir.read_params(suite / T)      # before: a naive trial whose params say grpo counted as grpo
    config = yaml.safe_load((suite / T / trialdir.CONFIG).read_text())
    (suite / T / trialdir.CONFIG).write_text(yaml.safe_dump({**config, "algorithm": "naive"}))
    shutil.copytree(suite / "grpo-d0-e0.2-g8-s1", suite / "grpo-d0-e0.2-g8-s7")   # before: another seed
    trials = load_results(suite).trials.set_index("trial_id")
    assert trials.loc[T, "status"] == "invalid"
    assert "params.json algorithm='grpo' contradicts config.yaml 'naive'" in trials.loc[T, "notes"]
    assert trials.loc["grpo-d0-e0.2-g8-s7", "status"] == "invalid"
    assert "a copy of trial grpo-d0-e0.2-g8-s1" in trials.loc["grpo-d0-e0.2-g8-s7", "notes"]
    assert trials.loc["grpo-d0-e0.2-g8-s1", "status"] == "completed"
    assert params["algorithm"] == "grpo"


@pytest.mark.parametrize("name, text, note", [
    # before: RecursionError traceback from read_object / read_config
    (trialdir.PARAMS, "[" * 100_000 + "]" * 100_000, "unreadable params.json"),
    (trialdir.STATUS, '{"a":' * 100_000 + "1" + "}" * 100_000, "unreadable status.json"),
    (trialdir.PROVENANCE, "[" * 100_000 + "]" * 100_000, "unreadable provenance.json"),
    (trialdir.CONFIG, "a: [" * 20_000, "nested more than 100 levels deep"),
    (trialdir.CONFIG, "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi")),
     "more than 100000 values once aliases (*name) are expanded"),     # before: > 60 s and 2 GB
    (trialdir.PARAMS, '{"seed": 0, "seed": 1}', "unreadable params.json"),
    # before: OverflowError traceback from _columns
    (trialdir.METRICS, '{"step": 1, "loss/value": ' + "9" * 400 + "}\n", "1 unreadable line(s) in metrics.jsonl"),
], ids=["params deep", "status deep", "provenance deep", "config deep", "config alias bomb", "params duplicate key",
        "metrics 400 digits"])
def test_hostile_trial_files_are_notes_not_tracebacks(tmp_path, name, text, note):
    suite = _suite(tmp_path)
    (suite / T / name).write_text(text)
    trials = load_results(suite).trials.set_index("trial_id")
    assert note in trials.loc[T, "notes"], trials.loc[T, "notes"]


# ---------------------------------------------------------------- elsewhere: --set, overrides, plugins, escapes, --out

from harness.config.run import ConfigError
from harness.config.expand import load_suite_file


def _grid_suite(tmp_path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"suite": "s1", "base": {"task": {"name": "addrev"}},
                                    "grid": {"algorithm": ["grpo", "gmc_grpo"], "delay": [0, 4]}, "seeds": [0]}))
    return path


@pytest.mark.parametrize("item, needle", [
    ("seed=99", "--set 'seed=99': seed tells the suite's trials apart and is set per trial by the suite's seeds: list"),
    ("delay=4", "--set 'delay=4': delay tells the suite's trials apart and is set per trial by its grid: values"),
    ("algorithm=m2po", "algorithm tells the suite's trials apart"),
])
def test_set_of_an_identity_key_is_refused(tmp_path, item, needle):
    # before: silently ignored (the grid and seeds win over base)
    with pytest.raises(ConfigError) as err:
        load_suite_file(_grid_suite(tmp_path), sets=[item])
    assert needle in str(err.value)
    load_suite_file(_grid_suite(tmp_path), sets=["train.lr=0.001"])          # a setting is still fine


def test_an_overrides_file_of_identity_keys_is_refused(tmp_path):
    # before: ignored, and it split the shared on-policy run
    over = tmp_path / "o.yaml"
    over.write_text(yaml.safe_dump({"overrides": {"gmc_grpo": {"seed": 3}}}))
    with pytest.raises(ConfigError, match="o.yaml: overrides.gmc_grpo.seed: seed tells the suite's trials apart"):
        load_suite_file(_grid_suite(tmp_path), overrides_file=over)
    over.write_text(yaml.safe_dump({"overrides": {"gmc_grpo": {"delay": 8}}}))
    with pytest.raises(ConfigError, match="delay tells the suite's trials apart"):
        load_suite_file(_grid_suite(tmp_path), overrides_file=over)


@pytest.mark.parametrize("body, needle", [
    ("import sys\nsys.exit(0)\n", "exited while it was imported (SystemExit: 0)"),
    ("raise KeyboardInterrupt\n", "exited while it was imported (KeyboardInterrupt)"),
])
def test_a_plugin_that_exits_at_import_is_an_error(tmp_path, monkeypatch, body, needle):
    # before: sys.exit(0) at import made `check` exit 0 without validating anything
    import algorithms.registry as reg
    (tmp_path / "exiting_plugin.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(reg.PLUGIN_ENV, "exiting_plugin")
    monkeypatch.setattr(reg, "_plugins_loaded", False)
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        reg.load_plugins()
    monkeypatch.delitem(sys.modules, "exiting_plugin", raising=False)


def test_control_characters_in_a_message_are_escaped(tmp_path, capsys):
    # before: a path or plugin message with terminal escape codes reached the terminal
    assert cli.main(["check", str(tmp_path / "\x1b[2J\x1b]0;owned\x07.yaml")]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\\x1b[2J" in err and err.count("\n") == 1


def test_report_out_that_is_a_file_or_holds_a_directory_is_refused_before_writing(tmp_path, capsys):
    suite = _suite(tmp_path)
    (tmp_path / "taken").write_text("x")                 # before: FileExistsError traceback
    assert cli.main(["report", str(suite), "--out", str(tmp_path / "taken")]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err
    (tmp_path / "out" / "index.html").mkdir(parents=True)   # before: a traceback and a half-written report
    assert cli.main(["report", str(suite), "--out", str(tmp_path / "out")]) == 2
    assert "index.html there is not a regular file" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["index.html"]


# ---------------------------------------------------------------- merge: resolved configs on both sides

from harness.report.merge import MergeError, merge_trials
from harness.store.archive import pack_suite
from tests.test_report_archive import reference, set_config, user_suite


def _merge(tmp_path, edit_ref=None, edit_mine=None):
    ref = reference(tmp_path / "results")
    if edit_ref:
        edit_ref(ref)
    raw = pack_suite(ref, tmp_path / "raw.tar.gz")
    mine = user_suite(tmp_path / "results")
    if edit_mine:
        edit_mine(mine)
    merged = merge_trials(mine, raw)
    shutil.rmtree(merged.path)
    return merged


def test_merge_compares_configs_not_ids(tmp_path):
    # before: the reference's own trial copied under a new id merged as "new" (a second seed of grpo)
    merged = _merge(tmp_path, edit_mine=lambda mine: shutil.copytree(mine / "grpo-d8-e0.2-g8-s0", mine / "grpo-copy"))
    assert (merged.added, merged.same) == (4, 2)


def test_merge_refuses_params_that_contradict_the_config(tmp_path):
    # before: a naive trial whose params say grpo counted as grpo
    def naive(mine):
        d = mine / "seq_tis-d8-e0.2-g8-s1"
        config = yaml.safe_load((d / trialdir.CONFIG).read_text())
        (d / trialdir.CONFIG).write_text(yaml.safe_dump({**config, "algorithm": "naive"}))
    with pytest.raises(MergeError, match="your trial seq_tis-d8-e0.2-g8-s1: params.json algorithm='seq_tis' "
                                         "contradicts config.yaml 'naive'"):
        _merge(tmp_path, edit_mine=naive)


def test_merge_accepts_your_estimators_own_params(tmp_path):
    # before: refused ("params is {...} but {} in every reference trial"), contrary to docs/report.md
    def with_params(root, params):
        def edit(suite):
            for d in suite.iterdir():
                if d.is_dir() and (root is None or d.name.startswith(root)):
                    config = yaml.safe_load((d / trialdir.CONFIG).read_text())
                    (d / trialdir.CONFIG).write_text(yaml.safe_dump({**config, "params": params}))
        return edit
    merged = _merge(tmp_path, edit_ref=with_params(None, {}), edit_mine=lambda mine: (
        with_params(None, {})(mine), with_params("seq_tis", {"alpha": 0.5})(mine)))
    assert merged.added == 4


def test_one_tampered_reference_trial_does_not_switch_off_the_check(tmp_path):
    # before: the setting was no longer "the same in every reference trial", so any value merged
    with pytest.raises(MergeError, match="reference trial .*: train.lr is .* and the reference suite does not "
                                         "vary it; the archive is not one benchmark"):
        _merge(tmp_path, edit_ref=lambda ref: set_config(ref / "m2po-d8-e0.2-g8-s1", lr=0.5))


def test_a_billion_laughs_config_is_one_line_and_fast(tmp_path):
    # before: trialdir.read_config used plain yaml.safe_load: > 60 s and 2 GB
    bomb = "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    with pytest.raises(MergeError, match="your trial seq_tis-d0-e0.2-g8-s0: .*more than 100000 values"):
        _merge(tmp_path, edit_mine=lambda mine: (mine / "seq_tis-d0-e0.2-g8-s0" / trialdir.CONFIG).write_text(bomb))


def test_site_reads_a_hostile_results_json_as_an_error_entry(tmp_path):
    # before: json.loads of a deep results.json raised RecursionError (not caught) through `stalebench site`
    from harness.report import build_site
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "dup").mkdir()
    (tmp_path / "dup" / "results.json").write_text('{"schema_version": 2, "schema_version": 2}')
    page = build_site(tmp_path).read_text()
    assert page.count("unreadable results.json: UntrustedError") == 2 and "duplicate key" in page


@pytest.mark.timeout(20)
def test_a_fifo_among_a_trials_files_never_hangs_status_or_the_report(tmp_path):
    import os
    from harness.suite.status import suite_status
    suite = _suite(tmp_path)
    for name in (trialdir.METRICS, trialdir.STATUS, trialdir.PARAMS):
        (suite / T / name).unlink()
        os.mkfifo(suite / T / name)
    assert trialdir.last_step(suite / T) == 0
    assert trialdir.read_rows(suite / T / trialdir.METRICS) == ([], 1)
    assert T in suite_status(suite)
    trials = load_results(suite).trials.set_index("trial_id")
    assert "unreadable params.json" in trials.loc[T, "notes"]
