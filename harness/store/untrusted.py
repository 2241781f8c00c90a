"""Reading files this process did not write: the one owner of "open a file someone handed us".

Every command that opens a file it did not write in this process reads it here (a suite file, an
overrides file, a trace, a raw archive and every trial file inside it, a committed report's bundle).
Public API: :func:`read_bytes`, :func:`read_text_file`, :func:`load_yaml_file`, :func:`load_yaml_text`,
:func:`check_value`, :func:`short`, :func:`display`; untrusted_json.py: :func:`load_json_text`,
:func:`read_json_file`; untrusted_archive.py: :func:`check_tar_gz`.

Every problem raises :class:`UntrustedError` (a ``ConfigError``, so a ``ValueError``) whose message is
one line naming the file (or CLI value) and the rule; nothing unbounded, and no control character, is
formatted into a message.

What is refused, and why:

1. **Files** (:func:`read_bytes`): an empty path, a missing path, a directory, anything that is not a
   regular file (a FIFO would block ``open`` forever, a device could stream without end: checked with
   ``os.stat`` before opening, then again with ``fstat`` on a non-blocking descriptor), anything under
   /proc, /sys or /dev (their "regular" files claim size 0 and may block or fail on read:
   ``/proc/kmsg``, ``/proc/self/mem``), more than ``max_bytes`` (default ``MAX_FILE_BYTES`` = 1 MiB),
   a read error (a permission refused), and bytes that are not UTF-8 where text is expected.
2. **YAML** (:func:`load_yaml_text`): PyYAML's safe loader (no ``!!python/...`` tags, no code), plus
   - duplicate mapping keys (PyYAML silently keeps the last one; a suite with two ``seed:`` keys
     would run something other than what its author reads);
   - more than ``MAX_NODES`` values once aliases are expanded ("billion laughs": ten lines of
     ``&a``/``*a`` expand to 10^9 values; the loader shares the objects, but whatever walks the result
     afterwards — validation, ``yaml.safe_dump``, a report — expands them). Counted while composing,
     before any object is built; an alias to a node that contains it (a cycle) is refused too;
   - nesting deeper than ``MAX_DEPTH`` levels (PyYAML composes recursively; this refuses well before
     Python's recursion limit, and ``RecursionError`` is still caught as a fallback);
   - invalid YAML, reported with its line and column.
3. **JSON** (untrusted_json.py's :func:`load_json_text`): duplicate keys; ``NaN``/``Infinity`` and numbers that overflow to
   infinity (unless ``allow_nonfinite``: a diverged step's loss is NaN); integers of more than
   ``MAX_INT_DIGITS`` digits; nesting deeper than ``MAX_DEPTH`` (checked after the C parser, which
   stops at Python's recursion limit with a ``RecursionError`` that is caught here); more than
   ``MAX_NODES`` values.
4. **Archives**: harness/store/untrusted_archive.py (its docstring).

An empty document loads as ``None``, as with ``yaml.safe_load``; callers check the type they need.
"""
from __future__ import annotations

import math
import os
import reprlib
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from harness.errors import ConfigError


class UntrustedError(ConfigError):
    """A file or value from outside this process that breaks one of this module's rules (one line)."""


MAX_FILE_BYTES = 1 << 20          # 1 MiB: suites and configs are a few kB
MAX_NODES = 100_000               # values after alias expansion
MAX_DEPTH = 100                   # nesting levels of the YAML document
SHORT_CHARS = 80                  # longest repr that :func:`short` returns
MAX_INT_DIGITS = 18               # |n| < 10**18: every count, step and seed fits, and int64 and float too

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = SHORT_CHARS
_REPR.maxlevel = 3
_MERGE_TAG = "tag:yaml.org,2002:merge"
_PSEUDO_FS = ("/proc/", "/sys/", "/dev/")


def short(value: Any, limit: int = SHORT_CHARS) -> str:
    """``repr(value)`` cut to at most ``limit`` characters (``...`` marks a cut), on one line.

    Safe for any value: reprlib never builds the full repr of a huge container or string, and the
    repr of a ``str`` escapes newlines and other control characters.
    """
    try:
        text = _REPR.repr(value)
    except Exception:  # noqa: BLE001  # e.g. an int over Python's 4300-digit str limit, a broken __repr__
        text = f"<{type(value).__name__}>"
    return one_line(text, limit)


def one_line(text: str, limit: int) -> str:
    """``text`` with control characters escaped (``\\x1b``, ``\\n``), cut to ``limit`` characters."""
    text = _escape(text[: 2 * limit])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def display(name: Any) -> str:
    """A file name or CLI label fit for a one-line message: control characters escaped, a long one cut
    to its start and its end."""
    text, half = str(name), SHORT_CHARS
    if len(text) <= 2 * half and len(_escape(text)) <= 2 * half:
        return _escape(text)
    return _escape(text[:half])[:half] + "..." + _escape(text[-half:])[-half:]


def _escape(text: str) -> str:
    if text.isprintable():               # the common case, in C: a report reads ~7 names per trial
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


# ----------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------

def read_bytes(path: str | os.PathLike[str], what: str, max_bytes: int = MAX_FILE_BYTES,
               missing_ok: bool = False) -> bytes | None:
    """The bytes of the regular file ``path``; ``what`` names it in messages ("suite file"). None for a
    missing file when ``missing_ok``.

    Raises UntrustedError (one line) for an empty path, a missing file, a directory, a FIFO, device or
    socket, a file of /proc, /sys or /dev, a file over ``max_bytes`` or a read error.
    """
    fd = open_regular(path, what, max_bytes, missing_ok)
    if fd is None:
        return None
    name = display(path)
    with os.fdopen(fd, "rb") as f:
        _check_regular(name, what, os.fstat(fd).st_mode)
        try:
            data = f.read(max_bytes + 1)
        except OSError as exc:
            raise UntrustedError(f"{name}: cannot read the {what} ({_reason(exc)})") from None
    if len(data) > max_bytes:
        raise UntrustedError(f"{name}: the {what} is over the limit of {max_bytes} bytes; is this the right file?")
    return data


def open_regular(path: str | os.PathLike[str], what: str, max_bytes: int, missing_ok: bool = False) -> int | None:
    """A non-blocking read descriptor of the regular file ``path`` (see :func:`read_bytes`)."""
    if path is None or str(path) == "":
        raise UntrustedError(f"{what}: the path is empty; give the path of a {what}")
    name = display(path)
    try:
        info = os.stat(path)             # before opening: open() on a FIFO blocks until a writer comes
        real = os.path.realpath(path)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise UntrustedError(f"{name}: no such {what}; check the path") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise UntrustedError(f"{name}: cannot read the {what} ({_reason(exc)}); check the path") from None
    _check_regular(name, what, info.st_mode)
    if real.startswith(_PSEUDO_FS):
        raise UntrustedError(f"{name}: a file of the kernel's {real.split('/')[1]}/, not a regular file; "
                             f"give the path of a {what}")
    if info.st_size > max_bytes:
        raise UntrustedError(f"{name}: the {what} is {info.st_size} bytes, over the limit of {max_bytes}; "
                             f"is this the right file?")
    try:                                 # non-blocking, so a FIFO swapped in after stat() cannot hang us
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UntrustedError(f"{name}: cannot open the {what} ({_reason(exc)}); check its permissions") from None
    return fd


def read_text_file(path: str | os.PathLike[str], what: str, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of the regular file ``path`` (:func:`read_bytes`); UntrustedError for bytes that
    are not UTF-8."""
    return decode(read_bytes(path, what, max_bytes), display(path), what)


def decode(data: bytes, name: str, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UntrustedError(f"{name}: the {what} is not UTF-8 text (bad byte at offset {exc.start}); "
                             f"save it as UTF-8") from None


def _check_regular(name: str, what: str, mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise UntrustedError(f"{name}: is a directory; give the path of a {what}")
    if not stat.S_ISREG(mode):
        raise UntrustedError(f"{name}: not a regular file (a FIFO, device or socket); give the path of a {what}")


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__


def load_yaml_file(path: str | os.PathLike[str], what: str, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """The YAML document in the file ``path`` (see :func:`read_text_file` and :func:`load_yaml_text`)."""
    return load_yaml_text(read_text_file(path, what, max_bytes), where=display(Path(path)))


# ----------------------------------------------------------------------------------------------
# YAML
# ----------------------------------------------------------------------------------------------

class _Refused(yaml.MarkedYAMLError):
    """A document that is valid YAML but over one of this module's limits."""


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, deep nesting, alias cycles and alias bombs.

    Sizes are counted on the node graph while composing: a scalar is 1, a collection 1 + its
    children, an alias the size of the node it names. No Python object is built before the check.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._sizes: dict[int, int] = {}   # id(node) -> expanded size; nodes live as long as the loader

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = super().compose_node(parent, index)      # raises for an undefined alias
            if id(node) not in self._sizes:                 # still being composed: it contains itself
                raise _Refused(None, None, f"alias *{one_line(str(event.anchor), SHORT_CHARS)} refers to a node that contains it; "
                               "write the value out", event.start_mark)
            return node
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(None, None, f"nested more than {MAX_DEPTH} levels deep; flatten the document",
                               self.peek_event().start_mark)
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        size = 1
        if isinstance(node, SequenceNode):
            size += sum(self._sizes[id(child)] for child in node.value)
        elif isinstance(node, MappingNode):
            size += sum(self._sizes[id(k)] + self._sizes[id(v)] for k, v in node.value)
        if size > MAX_NODES:
            raise _Refused(None, None, f"more than {MAX_NODES} values once aliases (*name) are expanded; "
                           "use fewer or smaller aliases", node.start_mark)
        self._sizes[id(node)] = size
        return node

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        _no_duplicate_keys(self, node)
        return super().construct_mapping(node, deep=deep)


def _no_duplicate_keys(loader: Any, node: Any) -> None:
    if isinstance(node, MappingNode):
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, ScalarNode):
                continue                                # "<<" merges; explicit keys may override them
            key = loader.construct_object(key_node, deep=True)
            if key in first_line:
                raise _Refused(None, None, f"duplicate key {short(key)} (first at line {first_line[key] + 1}); "
                               "a mapping holds each key once: remove one", key_node.start_mark)
            first_line[key] = key_node.start_mark.line


_FastBase = getattr(yaml, "CSafeLoader", None)


if _FastBase is not None:
    class _FastLoader(_FastBase):  # type: ignore[misc, valid-type]
        """libyaml's composer (7x faster) for documents that cannot break the limits (:func:`_plain`); the
        duplicate-key check is the constructor's, shared with _BoundedLoader."""

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            _no_duplicate_keys(self, node)
            return super().construct_mapping(node, deep=deep)


def _plain(text: str) -> bool:
    """Whether ``text`` has no anchor, alias or tag and cannot nest over MAX_DEPTH: every level of block
    nesting needs a column of indentation or a ``- ``, every level of flow nesting a bracket. A resolved
    config.yaml (``yaml.safe_dump``) always is: a report reads thousands of them."""
    if _FastBase is None or "&" in text or "*" in text or "!" in text:
        return False
    flow = text.count("[") + text.count("{")
    block = max((len(line) - len(line.lstrip(" ")) + line.count("- ") for line in text.splitlines()), default=0)
    return flow + block < MAX_DEPTH


def _load_fast(text: str) -> Any:
    loader = _FastLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load_yaml_text(text: str, where: str, max_chars: int = MAX_FILE_BYTES) -> Any:
    """The one YAML document in ``text``; ``where`` names its source in messages (a path, or e.g.
    ``"--trial value 'seed=['"``). Raises ConfigError (one line) for anything the module docstring
    lists. Safe loader only: tags such as ``!!python/object`` are refused.
    """
    where = display(where)
    if not isinstance(text, str):
        raise UntrustedError(f"{where}: expected YAML text, got {type(text).__name__}")
    if len(text) > max_chars:
        raise UntrustedError(f"{where}: {len(text)} characters of YAML, over the limit of {max_chars}")
    if _plain(text):
        try:
            value = _load_fast(text)
        except Exception:  # noqa: BLE001  # any problem: the bounded loader reports it, with its own words
            pass
        else:
            check_value(value, where, allow_nonfinite=True)
            return value
    loader = None
    try:
        loader = _BoundedLoader(text)  # the reader already refuses control characters here
        value = loader.get_single_data()
    except _Refused as exc:
        raise UntrustedError(f"{where}: {_at(exc)}{exc.problem}") from None
    except yaml.constructor.ConstructorError as exc:
        raise UntrustedError(f"{where}: {_at(exc)}{_problem(exc)}; only plain YAML data is allowed "
                          "(no !!python/... or custom tags)") from None
    except yaml.YAMLError as exc:
        raise UntrustedError(f"{where}: not valid YAML: {_at(exc)}{_problem(exc)}; fix the syntax") from None
    except RecursionError:
        raise UntrustedError(f"{where}: nested too deeply; flatten the document") from None
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a date 2024-13-01, a 5000-digit int
        raise UntrustedError(f"{where}: a value cannot be read ({short(str(exc))}); quote it to keep it a string") from None
    finally:
        if loader is not None:
            loader.dispose()
    check_value(value, where, allow_nonfinite=True)   # an integer of 400 digits; NaN is the schema's to refuse
    return value


def _at(exc: yaml.YAMLError) -> str:
    """``"line L, column C: "`` of the error's mark (1-based), or ``""`` if it has none."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""


def _problem(exc: yaml.YAMLError) -> str:
    parts = [getattr(exc, "context", None), getattr(exc, "problem", None)]
    text = ", ".join(str(p) for p in parts if p) or str(exc)
    return one_line(" ".join(text.split()), 2 * SHORT_CHARS)


def check_value(value: Any, where: str, allow_nonfinite: bool = False) -> None:
    """Refuse (UntrustedError) a parsed value nested over ``MAX_DEPTH``, of over ``MAX_NODES`` values, with
    an integer of over ``MAX_INT_DIGITS`` digits or (unless ``allow_nonfinite``) a NaN or infinity
    (``1e999`` parses as inf). Iterative: never a RecursionError."""
    limit = 10 ** MAX_INT_DIGITS
    stack, nodes = [(value, 1)], 0
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise UntrustedError(f"{display(where)}: more than {MAX_NODES} values")
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            if isinstance(item, float) and not allow_nonfinite and not math.isfinite(item):
                raise UntrustedError(f"{display(where)}: {item} is not a finite number")
            if isinstance(item, int) and not isinstance(item, bool) and not -limit < item < limit:
                raise UntrustedError(f"{display(where)}: an integer over {MAX_INT_DIGITS} digits")
            continue
        if depth > MAX_DEPTH:
            raise UntrustedError(f"{display(where)}: nested more than {MAX_DEPTH} levels deep")
        stack.extend((c, depth + 1) for c in children)
