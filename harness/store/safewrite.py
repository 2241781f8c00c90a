"""Writing a file this process owns: the one way every writer of stalebench opens a file (stdlib only).

A results or report directory may come from anywhere (a cloned repository, a copied folder) and may hold
a symbolic link where a file will be written; several processes may write one file at once (two `run`s of
one suite writing its suite.yaml). So every file is written as

1. a new temporary file in the target's own directory, under a name no other writer uses
   (``.<name>.<pid>.<random>.tmp``), opened with ``O_CREAT | O_EXCL | O_NOFOLLOW``: it cannot follow a
   link planted under that name nor be shared with another writer;
2. renamed over the target (``os.replace``: atomic; a reader sees the old file or the new one, whole).

A target that is a symbolic link is refused (:class:`UnsafeWriteError`, one line) before anything is
written: ``os.replace`` would replace the link itself, but whoever planted it expects the write to land
elsewhere, and the user is better told. Appending (:func:`open_append`) opens with ``O_NOFOLLOW`` too.
The temporary file is removed on every way out but success.
"""
from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from harness.errors import ConfigError

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class UnsafeWriteError(ConfigError):
    """A target that must not be written (a symbolic link): one line naming it and the way out."""


def refuse_link(path: str | os.PathLike[str]) -> None:
    """UnsafeWriteError when ``path`` is a symbolic link (dangling or not)."""
    if os.path.islink(path):
        raise UnsafeWriteError(f"{_show(path)}: is a symbolic link; stalebench does not write through links "
                               f"(remove the link, or write somewhere else)")


def temp_path(path: str | os.PathLike[str]) -> Path:
    """A fresh temporary name beside ``path`` (``.<name>.<pid>.<random>.tmp``)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")


@contextlib.contextmanager
def open_atomic(path: str | os.PathLike[str], mode: str = "wb", **kwargs: Any) -> Iterator[IO[Any]]:
    """A file object to write ``path`` whole: a new temporary file beside it (the module docstring), renamed
    over ``path`` when the block ends without an exception, removed otherwise. ``mode``: "wb" or "w"
    (text: ``kwargs`` such as ``encoding``, ``newline`` go to ``open``)."""
    assert mode in ("w", "wb"), mode
    path = Path(path)
    refuse_link(path)
    while True:
        tmp = temp_path(path)
        try:
            fd = os.open(tmp, _FLAGS, 0o666)      # the umask applies, as for open(path, "w")
            break
        except FileExistsError:                   # a 48-bit name taken: draw another
            continue
    try:
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
        refuse_link(path)                         # planted while we wrote
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_file(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8, "\\n" kept as it is) to ``path`` through :func:`open_atomic`."""
    with open_atomic(path) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


def open_append(path: str | os.PathLike[str], encoding: str = "utf-8") -> IO[str]:
    """``open(path, "a")`` that refuses a symbolic link (UnsafeWriteError) instead of following it."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if os.path.islink(path):
            refuse_link(path)
        raise exc
    return os.fdopen(fd, "a", encoding=encoding)


def _show(path: str | os.PathLike[str]) -> str:
    from harness.store.untrusted import display
    return display(Path(path))
