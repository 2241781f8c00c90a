"""Hardening, ring 3 (issue 54), continued: archives bounded by what they expand, an MLflow store that
survives a full disk, names, `--only`, values `check` must refuse, and file-system errors as one line.
Each test fails on the behaviour before the fix it names."""
from __future__ import annotations

import errno
import io
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.config.expand import expand, load_suite_file, select_trials
from harness.config.run import ConfigError
from harness.errors import os_error_line
from harness.store import archive, rowfiles
from harness.store.archive import ArchiveError, open_archive, pack_suite
from tests.fixtures.synthetic_results import write_suite

REPO = Path(__file__).resolve().parents[1]


def tar_gz(path: Path, members: list[tuple[tarfile.TarInfo, bytes]], fmt: int = tarfile.PAX_FORMAT) -> Path:
    with tarfile.open(path, "w:gz", format=fmt, encoding="utf-8", errors="surrogateescape") as tar:
        for info, data in members:
            info.size = len(data) if info.type != tarfile.GNUTYPE_SPARSE else info.size
            tar.addfile(info, io.BytesIO(data))
    return path


def member(name: str, data: bytes = b"{}", **pax: str) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.pax_headers = dict(pax)
    return info, data


# ---------------------------------------------------------------- 3: archives bounded by what they expand


def test_a_gnu_sparse_member_is_refused(tmp_path):
    """A 9.5 KB archive of sparse members wrote 1.5 GB into TMPDIR (stored bytes were checked, declared written)."""
    sparse = tarfile.TarInfo("t/metrics.jsonl")
    sparse.type, sparse.size = tarfile.GNUTYPE_SPARSE, 0
    path = tar_gz(tmp_path / "s.tar.gz", [member("suite.yaml", b"suite: s\n"), (sparse, b"")], tarfile.GNU_FORMAT)
    with pytest.raises(ArchiveError, match="a sparse member after 1 members"):
        open_archive(path)


def test_a_pax_sparse_member_is_refused(tmp_path):
    path = tar_gz(tmp_path / "s.tar.gz", [member("suite.yaml", b"suite: s\n"), member(
        "t/GNUSparseFile.0/metrics.jsonl", b"{}", **{"GNU.sparse.major": "1", "GNU.sparse.minor": "0",
                                                      "GNU.sparse.name": "t/metrics.jsonl",
                                                      "GNU.sparse.realsize": str(2**40)})])
    with pytest.raises(ArchiveError, match=r"a sparse member \(pax GNU.sparse records"):
        open_archive(path)


def test_a_member_name_that_is_not_utf8_is_named(tmp_path):
    """Was pyarrow's UnicodeEncodeError, naming no file, after extraction."""
    path = tar_gz(tmp_path / "u.tar.gz", [member("suite.yaml", b"suite: s\n"), member("t\udcff/params.json")],
                  tarfile.GNU_FORMAT)
    with pytest.raises(ArchiveError, match=r"member 't\\\\udcff/params.json' has a name that is not UTF-8"):
        open_archive(path)


def test_rows_are_bounded_by_a_memory_budget(tmp_path, monkeypatch):
    """48 MiB of `{}` lines took 2.5 GB: the rows' cost is estimated (200 bytes a row + 4 per byte) before parsing."""
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n' + "{}\n" * 99)
    # 100 rows x 200 + (12 + 99 * 3 - 1 stripped newline) bytes x 4 = 20000 + 1232 = 21232
    monkeypatch.setattr(rowfiles, "MAX_ROWS_MEMORY", 21232)
    assert len(rowfiles.read_rows(path)[0]) == 100
    monkeypatch.setattr(rowfiles, "MAX_ROWS_MEMORY", 21231)
    assert rowfiles.read_rows(path) == ([], 1)                 # one unreadable file: its trial's notes say so


def test_the_budget_holds_a_trainers_file_at_the_size_limit():
    rows = rowfiles.MAX_ROWS_BYTES // 700                      # a trainer's row of ~30 metrics is ~700 bytes
    assert rows * rowfiles.ROW_BYTES + rowfiles.MAX_ROWS_BYTES * rowfiles.TEXT_FACTOR <= rowfiles.MAX_ROWS_MEMORY
    lines = 48 * 2**20 // 3                                    # the 48 MiB of `{}` lines of the issue
    assert lines * rowfiles.ROW_BYTES > rowfiles.MAX_ROWS_MEMORY


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_unpacked_archives_are_removed_on_sigterm_and_sighup(tmp_path, sig):
    suite = write_suite(tmp_path / "results", "sig", ("grpo",), (0,), (0,), steps=10)
    pack_suite(suite, tmp_path / "report" / "raw.tar.gz")
    code = ("import signal, sys, time; from pathlib import Path; from harness.store.archive import committed_results, "
            "exit_on_signals\nsignal.signal(signal.SIGHUP, signal.SIG_DFL)  # as in a terminal, also when pytest runs under "
            "nohup\nexit_on_signals()\nwith committed_results(Path(sys.argv[1])) as d:\n"
            "    print(d, flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "report")], stdout=subprocess.PIPE,
                            text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    unpacked = Path(proc.stdout.readline().strip())
    assert (unpacked / "suite.yaml").is_file()
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == 128 + sig                  # was: killed on the spot, the folder left behind
    assert not unpacked.exists()


def test_a_full_temporary_folder_does_not_blame_the_archive(tmp_path, monkeypatch):
    suite = write_suite(tmp_path / "results", "full", ("grpo",), (0,), (0,), steps=10)
    raw = pack_suite(suite, tmp_path / "raw.tar.gz")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(archive, "_extract", full)
    with pytest.raises(ArchiveError, match="cannot unpack it into .*no space left on the device; free some space "
                                           "or write elsewhere; set TMPDIR to another folder") as err:
        open_archive(raw)
    assert "re-pack" not in str(err.value)


# ---------------------------------------------------------------- 4: the MLflow store survives a full disk

FILL = """import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (200000, 200000))   # a disk that fills 200 kB into the store's setup
from harness.store.tracking.mlflow_store import _open_store
try:
    _open_store(sys.argv[1], "x")
except Exception as exc:
    print("failed:", str(exc).splitlines()[0])
"""


def test_a_store_whose_setup_hit_a_full_disk_opens_on_the_next_run(tmp_path):
    """Was: `table ... already exists` on every later run, until the database was deleted by hand."""
    from harness.store.tracking.mlflow_store import _open_store

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = subprocess.run([sys.executable, "-c", FILL, uri], capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.startswith("failed:"), done.stdout + done.stderr[-2000:]
    assert not (tmp_path / "mlflow.db").exists()               # the half-built store never took the name
    client, _ = _open_store(uri, "x")                          # space freed: the next run builds it
    assert [e.name for e in client.search_experiments()] == ["Default"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db", "mlflow.db.lock"]


def test_a_store_left_half_built_is_moved_aside_not_deleted(tmp_path):
    import sqlite3

    from harness.store.tracking.mlflow_store import _open_store

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client, _ = _open_store(uri, "x")
    client.create_run(client.create_experiment("kept")).info.run_id
    with sqlite3.connect(tmp_path / "mlflow.db") as con:       # a setup cut short, as an older stalebench left it
        con.execute("DELETE FROM alembic_version")
    _open_store(uri, "x")                                      # it holds a run: never moved
    assert not list(tmp_path.glob("mlflow.db.interrupted-*"))
    with sqlite3.connect(tmp_path / "mlflow.db") as con:
        con.execute("DELETE FROM runs")
    _open_store(uri, "x")
    aside = list(tmp_path.glob("mlflow.db.interrupted-*"))
    names = [[r[0] for r in sqlite3.connect(db).execute("SELECT name FROM experiments ORDER BY name")]
             for db in (tmp_path / "mlflow.db", *aside)]         # (this process's MLflow caches its engine)
    assert len(aside) == 1 and names == [["Default"], ["Default", "kept"]]


# ---------------------------------------------------------------- 5: names, --only, values check refuses


def test_one_name_pattern_for_suites_and_estimators():
    from algorithms.registry import NAME as ESTIMATOR_NAME
    from harness.config.suite import NAME as SUITE_NAME

    assert SUITE_NAME.pattern == ESTIMATOR_NAME.pattern


@pytest.mark.parametrize("name", ["demo\n", ".hidden", "gr\u0440o", "\uff47rpo", "-x"])
def test_bad_names_are_refused_for_suites_and_estimators(tmp_path, capsys, name):
    from algorithms.registry import register

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"suite": name, "base": {}, "seeds": [0]}))
    assert main(["check", str(path)]) == 2
    assert "is not a valid name" in capsys.readouterr().err
    with pytest.raises(ValueError, match="is not valid: ASCII letters"):
        register(name)(lambda *a, **k: None)


@pytest.fixture(scope="module")
def four_trials(tmp_path_factory) -> list:
    path = tmp_path_factory.mktemp("only") / "s.yaml"
    path.write_text(yaml.safe_dump({"suite": "only", "base": {}, "grid": {"algorithm": ["grpo", "m2po"]},
                                    "seeds": [0, 1]}))
    return expand(load_suite_file(path))


def test_only_refuses_an_empty_filter_and_a_repeated_key(four_trials):
    with pytest.raises(ConfigError, match="an empty filter would select every trial"):
        select_trials(four_trials, [""])                       # was: every trial (a rerun of them all)
    with pytest.raises(ConfigError, match="key 'algorithm' is given twice"):
        select_trials(four_trials, ["algorithm=grpo,algorithm=m2po"])   # was: m2po alone
    assert [t.params["algorithm"] for t in select_trials(four_trials, ["algorithm=grpo", "algorithm=m2po"])] == [
        "grpo", "grpo", "m2po", "m2po"]


def test_only_compares_values_as_the_axis_types_them(four_trials):
    assert [t.params["seed"] for t in select_trials(four_trials, ["seed=1"])] == [1, 1]
    with pytest.raises(ConfigError, match="matches no trial"):
        select_trials(four_trials, ["seed=true"])              # was: seed 1


@pytest.mark.parametrize("base, extra, expected", [
    ({"eval": {"size": -1}}, {}, "eval.size: must be > 0; got -1"),
    ({"train": {"beta1": -1}}, {}, "train.beta1: must be in [0, 1) (Adam's decay rate); got -1"),
    ({"train": {"beta2": 1.0}}, {}, "train.beta2: must be in [0, 1) (Adam's decay rate); got 1.0"),
    ({}, {"seeds": [-1]}, "seeds: must be >= 0 (numpy's generators take no negative seed); got -1"),
    ({}, {"tune": {"low": 1e-4, "high": 1e-3, "seed": -1}}, "tune.seed: must be >= 0; got -1"),
    ({}, {"tune": {"low": 1e-4, "high": 1e-3, "sampler_seed": -1}}, "tune.sampler_seed: must be >= 0; got -1"),
])
def test_check_refuses_values_the_run_fails_on(tmp_path, capsys, base, extra, expected):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"suite": "vals", "base": base, "seeds": [0], **extra}))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1, err


# ---------------------------------------------------------------- 6: a full disk or a read-only folder


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "no space left on the device"),
                                         (errno.EROFS, "a read-only file system; write elsewhere"),
                                         (errno.EACCES, "permission denied")])
def test_a_file_system_error_is_one_line_naming_path_and_cause(tmp_path, capsys, monkeypatch, code, words):
    """Was: an OSError traceback (`report --out` on a full disk, a read-only results or output folder)."""
    from harness.report import html

    suite = write_suite(tmp_path / "results", "disk", ("grpo",), (0,), (0,), steps=10)

    def refused(path, data):
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(html, "write_file", refused)
    assert main(["report", str(suite), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"stalebench: {tmp_path / 'out'}/index.html: {words}" in err and "Traceback" not in err, err
    assert os_error_line(OSError(code, "x")).startswith(words)
