"""A suite's raw trial record as one compressed archive (raw.tar.gz), and back.

``pack_suite(suite_dir, out_path)`` writes suite.yaml (and coincidences.json, lab/sweeps.json: SUITE_FILES) and
every trial directory's raw files (trialdir.RAW: config, params, provenance, metrics, eval, status, and the
side rows trace and is_hist where present; never checkpoints, kept policies or logs) as a gzip'd tar,
deterministically (sorted members, zero times and owners), so re-packing the same results gives the same
bytes and anyone can re-render or audit a committed report from it (`stalebench report RAW.tar.gz`). A tuned suite's tuning trials (results/<suite>/tune/) pack the
same way, beside it (tune.raw.tar.gz), so the choice of its step sizes can be audited too.

``open_archive(path)`` extracts one into a new temporary suite results directory and returns it. An
archive is untrusted input: every member must be a regular file named in ``SUITE_FILES`` or
``<trial_id>/<record file>`` (no absolute path, no ``..``, no link, device or other special member), at
most ``MAX_MEMBER_BYTES`` each, ``MAX_TOTAL_BYTES`` and ``MAX_MEMBERS`` in all; anything else is refused
with a one-line ``ArchiveError`` before a byte is written, and nothing is executed. Before ``tarfile`` sees
the file, ``untrusted_archive.check_tar_gz`` reads the gzip stream to its end (CRC-32 and length of every member)
and walks the tar headers with bounds of its own (no chain of extension headers, no huge long name, no
damaged header that tarfile would take for the end of the archive, no sparse member: its extraction would
write the size it declares, not the bytes it stores). The temporary directory is removed on every way out
but success, and after it by its caller, SIGTERM and SIGHUP included (``exit_on_signals``).
"""
from __future__ import annotations

import contextlib
import errno
import gzip
import io
import shutil
import signal
import tarfile
import tempfile
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from harness.store import trialdir, untrusted
from harness.errors import os_error_line
from harness.store.safewrite import open_atomic
from harness.store.untrusted_archive import check_tar_gz
SUITE_FILE = trialdir.SUITE_FILE
SUITE_FILES = (SUITE_FILE, trialdir.PLAN, "coincidences.json", "lab/sweeps.json")   # the suite-level files an
# archive carries: the suite, its trials (what a partial suite lacks), the estimators whose gradients coincide in its regime (harness/suite/coincidences.py), an estimator-lab
# suite's stored sweeps (harness/lab/sweep_file.py); the report renders from all three
ARCHIVE_NAME = "raw.tar.gz"
TUNE_ARCHIVE_NAME = "tune.raw.tar.gz"   # the tuning trials of `stalebench tune` (results/<suite>/tune/)
MAX_MEMBER_BYTES = 512 * 2**20   # one metrics.jsonl of a long run stays far below this
MAX_TOTAL_BYTES = 8 * 2**30
MAX_MEMBERS = 200_000           # 10,000 trials x (6 files + a directory)
_CHUNK = 2**20
_LOCAL_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EMFILE)


class ArchiveError(ValueError):
    """A raw-trial archive that cannot be written or trusted (one line naming the problem and the fix)."""


def _trial_name(name: str) -> bool:
    """Whether a top-level archive directory name can be a trial (what trialdir.is_trial_dir accepts)."""
    return bool(name) and not name.startswith(".") and name not in trialdir.NOT_TRIALS


def _trial_dirs(suite_dir: Path) -> list[Path]:
    return sorted(d for d in suite_dir.iterdir() if trialdir.is_trial_dir(d)
                  and any((d / name).is_file() for name in trialdir.RECORD))


def pack_suite(suite_dir: Path, out_path: Path, trials_from: Path | None = None,
               only: frozenset[str] | None = None) -> Path:
    """Write ``out_path`` (a .tar.gz) holding ``suite_dir``'s suite.yaml and the record files of each trial
    of ``trials_from`` (default: ``suite_dir``; its tune/ directory packs the suite's tuning trials), or of
    the trials named in ``only``; returns it. Written to a temporary file beside it first
    (safewrite.open_atomic), so a failure leaves nothing half written."""
    suite_dir, out_path = Path(suite_dir), Path(out_path)
    if not (suite_dir / SUITE_FILE).is_file():
        raise ArchiveError(f"{suite_dir} is not a suite results dir (no {SUITE_FILE}); pass results/<suite>")
    trials = [(f"{d.name}/{name}", d / name) for d in _trial_dirs(Path(trials_from) if trials_from is not None
                                                                     else suite_dir)
              if only is None or d.name in only
              for name in trialdir.RAW if (d / name).is_file() and not (d / name).is_symlink()]
    suite_files = [SUITE_FILE] if trials_from is not None else [
        name for name in SUITE_FILES if (suite_dir / name).is_file() and not (suite_dir / name).is_symlink()]
    files = [(name, suite_dir / name) for name in suite_files] + trials
    if not trials:
        raise ArchiveError(f"{suite_dir} holds no trial directories; run the suite before packing it")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with open_atomic(out_path) as raw, \
            gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0, compresslevel=9) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted({n.split("/")[0] for n, _ in files if "/" in n}):
            tar.addfile(_info(name, tarfile.DIRTYPE, 0))
        for name, path in files:
            data = path.read_bytes()
            tar.addfile(_info(name, tarfile.REGTYPE, len(data)), io.BytesIO(data))
    return out_path


def pack_tuning(suite_dir: Path, out_path: Path) -> Path | None:
    """pack_suite of the suite's tuning trials (``stalebench tune``: results/<suite>/tune/) into ``out_path``;
    None when the suite has none."""
    tune = trialdir.tune_dir(suite_dir)
    return pack_suite(suite_dir, out_path, tune) if tune.is_dir() and _trial_dirs(tune) else None


def _info(name: str, kind: bytes, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mtime, info.mode = kind, size, 0, 0o755 if kind == tarfile.DIRTYPE else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _check(member: tarfile.TarInfo, where: str) -> PurePosixPath | None:
    """The member's relative path if it may be extracted, None for a plain directory; ArchiveError else."""
    name = member.name
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise ArchiveError(f"{where}: member {untrusted.display(name[:120])!r} has a name that is not UTF-8; "
                           f"refusing the archive") from None
    path = PurePosixPath(name)
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":") or path.is_absolute():
        raise ArchiveError(f"{where}: member {name[:120]!r} has an absolute path; refusing the archive")
    if ".." in path.parts or "\\" in name:
        raise ArchiveError(f"{where}: member {name[:120]!r} leaves the archive's directory; refusing the archive")
    if member.issym() or member.islnk():
        raise ArchiveError(f"{where}: member {name[:120]!r} is a link; a raw archive holds plain files only")
    if member.isdir():
        if len(path.parts) != 1 or not (_trial_name(path.parts[0]) or any(f.startswith(f"{name}/") for f in SUITE_FILES)):
            raise ArchiveError(f"{where}: unexpected directory {name[:120]!r}; a raw archive holds "
                               f"{SUITE_FILE} and <trial_id>/ directories only")
        return None
    if not member.isreg():
        raise ArchiveError(f"{where}: member {name[:120]!r} is a device or special file; refusing the archive")
    if member.issparse():      # extraction writes its declared size, not the bytes stored: a disk-filling member
        raise ArchiveError(f"{where}: member {name[:120]!r} is a sparse file; a raw archive holds plain files only "
                           f"(re-pack it with --raw)")
    if member.size > MAX_MEMBER_BYTES:
        raise ArchiveError(f"{where}: member {name[:120]!r} is {member.size} bytes, over the "
                           f"{MAX_MEMBER_BYTES}-byte limit of one file; refusing the archive")
    ok = (path.as_posix() in SUITE_FILES or (len(path.parts) == 2 and _trial_name(path.parts[0])
                                              and path.parts[1] in trialdir.RAW))
    if not ok:
        raise ArchiveError(f"{where}: unexpected member {name[:120]!r}; a raw archive holds {', '.join(SUITE_FILES)} "
                           f"and <trial_id>/{{{', '.join(trialdir.RAW)}}} only")
    return path


@contextlib.contextmanager
def unpacked_archive(path: Path) -> Iterator[Path]:
    """The raw archive ``path`` unpacked (``open_archive``) into a temporary directory, removed afterwards."""
    unpacked = Path(open_archive(path))
    try:
        yield unpacked
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)


@contextlib.contextmanager
def committed_results(report_dir: Path) -> Iterator[Path]:
    """The committed suite results directory behind REPORT_DIR: its raw.tar.gz unpacked into a temporary
    directory (removed afterwards), or REPORT_DIR itself when it is a results directory."""
    report_dir = Path(report_dir)
    if (report_dir / ARCHIVE_NAME).is_file():
        with unpacked_archive(report_dir / ARCHIVE_NAME) as unpacked:
            yield unpacked
    elif (report_dir / SUITE_FILE).is_file():
        yield report_dir
    else:
        raise ArchiveError(f"{report_dir}: neither {ARCHIVE_NAME} nor a suite results directory ({SUITE_FILE} and "
                           f"trial directories); pass a committed report directory or results/<suite>")


def exit_on_signals() -> None:
    """Make SIGTERM and SIGHUP end this process as SIGINT does, by an exception (SystemExit 128 + the
    signal), so that every ``finally`` runs and the temporary directory of an unpacked archive is removed;
    their default action killed the process on the spot, leaving it behind. A signal set to be ignored
    (``nohup``) stays ignored. ``open_archive`` calls it: a process that unpacked an archive keeps it."""
    def leave(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():
        return                                  # only the main thread may set handlers
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, leave)


def open_archive(path: Path) -> Path:
    """Extract the raw archive ``path`` into a new temporary directory and return it (a suite results
    directory: suite.yaml and one directory per trial). The caller removes it (``shutil.rmtree``).
    Raises ArchiveError (one line) for a missing, damaged or unsafe archive; nothing is left behind then."""
    path = Path(path)
    where = untrusted.display(path)
    if not path.is_file():
        raise ArchiveError(f"{where}: no such archive; give the raw.tar.gz a report was packed with (--raw)")
    try:
        check_tar_gz(path, MAX_MEMBERS, MAX_TOTAL_BYTES)   # gzip CRC and length, header chains, sizes
    except untrusted.UntrustedError as exc:
        raise ArchiveError(str(exc)) from None
    exit_on_signals()                           # SIGTERM, SIGHUP: the `finally` below and the caller's remove it
    dest = Path(tempfile.mkdtemp(prefix="stalebench-raw-"))
    try:
        with tarfile.open(path, mode="r:gz") as tar:
            members, total = [], 0
            for member in tar:  # headers only: the checks run before anything is written
                if len(members) >= MAX_MEMBERS:
                    raise ArchiveError(f"{where}: more than {MAX_MEMBERS} members; refusing the archive")
                rel = _check(member, where)
                total += member.size
                if total > MAX_TOTAL_BYTES:
                    raise ArchiveError(f"{where}: over {MAX_TOTAL_BYTES} bytes in all; refusing the archive")
                members.append((member, rel))
            names = [str(rel) for _, rel in members if rel is not None]
            if len(names) != len(set(names)):
                raise ArchiveError(f"{where}: a member appears twice; refusing the archive")
            if SUITE_FILE not in names:
                raise ArchiveError(f"{where}: no {SUITE_FILE}; not a raw suite archive (pack one with --raw)")
            for member, rel in members:
                if rel is not None:
                    _extract(tar, member, dest / rel)
    except ArchiveError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    except OSError as exc:
        shutil.rmtree(dest, ignore_errors=True)
        if exc.errno in _LOCAL_ERRORS:      # this machine's temporary folder, not the archive, is at fault
            raise ArchiveError(f"{where}: cannot unpack it into {untrusted.display(dest.parent)} "
                               f"({os_error_line(exc).split(': ', 1)[-1]}; set TMPDIR to another folder)") from None
        raise ArchiveError(f"{where}: not a readable .tar.gz ({type(exc).__name__}); re-download or re-pack "
                           "it") from None
    except (tarfile.TarError, EOFError, zlib.error, RecursionError, MemoryError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise ArchiveError(f"{where}: not a readable .tar.gz ({type(exc).__name__}); re-download or re-pack "
                           "it") from None
    except BaseException:              # an interrupt: never leave a half-extracted directory behind
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return dest


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    """Copy one checked regular member to ``target``, never more than its header's size."""
    target.parent.mkdir(parents=True, exist_ok=True)
    source = tar.extractfile(member)
    if source is None:
        raise ArchiveError(f"member {member.name[:120]!r} has no data; refusing the archive")
    left = member.size
    with source, open(target, "xb") as out:
        while left > 0:
            chunk = source.read(min(_CHUNK, left))
            if not chunk:
                raise EOFError("archive ends inside a member")
            out.write(chunk)
            left -= len(chunk)
