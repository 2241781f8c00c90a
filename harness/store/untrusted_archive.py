"""Raw archives (.tar.gz) from outside this process, checked before ``tarfile`` sees them: the archive half
of harness/store/untrusted.py (whose module docstring lists what is refused, item 4, and why)."""
from __future__ import annotations

import gzip
import os
import tarfile
import zlib

from harness.store.untrusted import UntrustedError, display, one_line, open_regular

MAX_EXT_HEADERS = 4               # extension headers before one tar member (pax x + g, GNU L + K)
MAX_EXT_BYTES = 64 * 2**10        # one extension header's data (a long name, a few pax records)
_BLOCK = 512
_EXT_TYPES = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK,
              tarfile.SOLARIS_XHDTYPE)


def check_tar_gz(path: str | os.PathLike[str], max_members: int, max_bytes: int) -> None:
    """Refuse (UntrustedError, one line) a .tar.gz whose gzip stream is damaged anywhere (a bad block,
    a CRC-32 or length trailer that does not match, a truncated end, bytes after it) or whose tar
    stream breaks the bounds of the module docstring. Reads the file once, in chunks; builds nothing."""
    where = display(path)
    walker = _TarWalker(where, max_members, max_bytes)
    fd = open_regular(path, "archive", max_bytes)
    try:
        # reading to EOF checks every gzip member's CRC-32 and length, and that nothing follows the last
        with os.fdopen(fd, "rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as gz:
            while chunk := gz.read(2**20):
                walker.feed(chunk)
    except UntrustedError:
        raise
    except (gzip.BadGzipFile, EOFError, zlib.error, OSError) as exc:
        raise UntrustedError(f"{where}: a damaged gzip stream ({one_line(str(exc) or type(exc).__name__, 100)}); "
                             f"re-download or re-pack it") from None
    walker.finish()


class _TarWalker:
    """The tar stream's headers, checked as the bytes arrive (see check_tar_gz)."""

    def __init__(self, where: str, max_members: int, max_bytes: int) -> None:
        self.where, self.max_members, self.max_bytes = where, max_members, max_bytes
        self.buf, self.skip, self.members, self.total, self.chain, self.ended = bytearray(), 0, 0, 0, 0, False
        self.ext_left, self.ext_data, self.pax_size, self.ext_total, self.padding = 0, bytearray(), None, 0, 0

    def _refuse(self, rule: str) -> None:
        raise UntrustedError(f"{self.where}: {rule}; refusing the archive")

    def feed(self, chunk: bytes) -> None:
        self.buf += chunk
        while True:
            if self.skip:                                   # a member's data (or an extension's)
                n = min(self.skip, len(self.buf))
                if self.ext_left:
                    self.ext_data += self.buf[:min(n, self.ext_left)]
                    self.ext_left -= min(n, self.ext_left)
                del self.buf[:n]
                self.skip -= n
                if self.skip:
                    return
            if len(self.buf) < _BLOCK:
                return
            block = bytes(self.buf[:_BLOCK])
            del self.buf[:_BLOCK]
            self._header(block)

    def _header(self, block: bytes) -> None:
        if self.ended:
            self.padding += _BLOCK
            if block.strip(b"\0"):
                self._refuse("data after the end of the tar stream")
            if self.padding > MAX_EXT_BYTES * 16:
                self._refuse("over a megabyte of padding after the end of the tar stream")
            return
        if not block.strip(b"\0"):
            self.ended = True                               # the end marker (and the zero padding after it)
            return
        try:
            info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
        except tarfile.HeaderError as exc:
            self._refuse(f"a damaged tar header after {self.members} members ({one_line(str(exc), 60)})")
        size = info.size
        if info.type == tarfile.GNUTYPE_SPARSE:
            self._refuse(f"a sparse member after {self.members} members (extracting it writes its declared size)")
        if size < 0:
            self._refuse(f"a tar header of negative size after {self.members} members")
        if info.type in _EXT_TYPES:
            self.chain += 1
            if self.chain > MAX_EXT_HEADERS:
                self._refuse(f"more than {MAX_EXT_HEADERS} extension headers in a row (a header chain)")
            self.ext_total += size
            if size > MAX_EXT_BYTES or self.ext_total > MAX_EXT_BYTES * 1024:
                self._refuse(f"an extension header of {size} bytes (at most {MAX_EXT_BYTES}; "
                             f"{MAX_EXT_BYTES * 1024} in all)")
            self._pax_done()
            self.ext_left, self.ext_type = size, info.type
        else:
            self._pax_done()
            if self.pax_size is not None:
                size, self.pax_size = self.pax_size, None
            self.chain = 0
            self.members += 1
            if self.members > self.max_members:
                self._refuse(f"more than {self.max_members} members")
            self.total += size
            if self.total > self.max_bytes:
                self._refuse(f"over {self.max_bytes} bytes in all")
            if info.type not in tarfile.REGULAR_TYPES:
                size = 0                                    # a directory, a link: no data blocks
        self.skip = -(-size // _BLOCK) * _BLOCK

    def _pax_done(self) -> None:
        """A finished pax header's ``size`` record replaces the next member's size field."""
        if self.ext_data and getattr(self, "ext_type", None) in (tarfile.XHDTYPE, tarfile.SOLARIS_XHDTYPE):
            for record in bytes(self.ext_data).split(b"\n"):
                key, _, value = record.partition(b"=")
                if key.split(b" ")[-1].startswith(b"GNU.sparse"):
                    self._refuse("a sparse member (pax GNU.sparse records; extracting it writes its declared size)")
                if key.split(b" ")[-1] == b"size":
                    try:
                        self.pax_size = int(value)
                    except ValueError:
                        self._refuse("a pax header with a size that is not a number")
        self.ext_data = bytearray()

    def finish(self) -> None:
        if self.skip or self.buf.strip(b"\0") or not self.ended:
            self._refuse("the tar stream ends inside a member or without its end marker")
        if self.chain:
            self._refuse("extension headers without a member after them")
