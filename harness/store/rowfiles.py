"""JSON-lines row files and atomic writes: the generic I/O under harness/store/trialdir.py (which owns what the
files of a trial directory are called and hold; this module knows no file names)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import orjson

from harness.errors import TrialDirError
from harness.store.safewrite import open_append, write_file
from harness.store.untrusted import UntrustedError, read_bytes
from harness.store.untrusted_json import bounded_int, load_json_text

MAX_ROWS_BYTES = 256 * 2**20     # one metrics.jsonl of a long run stays far below this (~700 bytes a step)
MAX_ROWS_MEMORY = 1280 * 2**20   # what the parsed rows of one file may cost, estimated as below (a file at
                                 # MAX_ROWS_BYTES of a trainer's rows: ~1.1 GiB; of `{}` lines: refused)
ROW_BYTES, TEXT_FACTOR = 200, 4  # per row (a dict, its list slot: ~75 bytes for `{}`) and per byte of text
                                 # (~2.7 for a trainer's row of 30 floats, the joined copy at parse time beside)


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``, whole (safewrite.write_file: a private temporary name, no link followed)."""
    write_file(path, text)


def read_rows(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Rows of a JSONL file (NaN/Infinity allowed) and the number of unreadable lines, for readers that
    report damage rather than stop on it (the report); ([], 0) if absent. Fast for large files.

    The file is untrusted (store/untrusted.py): a FIFO, device, file over MAX_ROWS_BYTES, or one whose rows
    would cost over MAX_ROWS_MEMORY (a few MiB of ``{}`` lines are millions of dicts) counts as one
    unreadable line; a line nested deeply, with an integer of over MAX_INT_DIGITS digits or a
    duplicate key is an unreadable line (orjson refuses integers over 64 bits and nesting over 1024
    levels, so those lines take the checked path)."""
    try:
        raw = read_bytes(path, Path(path).name, MAX_ROWS_BYTES, missing_ok=True)
    except UntrustedError:
        return [], 1
    raw = (raw or b"").strip()
    if not raw:
        return [], 0
    if (raw.count(b"\n") + 1) * ROW_BYTES + len(raw) * TEXT_FACTOR > MAX_ROWS_MEMORY:
        return [], 1
    rows = _json_array(raw)
    if rows is None:  # a torn or damaged line, a number orjson refuses: parse line by line, checked
        rows = []
        for line in filter(str.strip, raw.decode("utf-8", errors="replace").splitlines()):
            try:
                rows.append(load_json_text(line, str(path), allow_nonfinite=True))
            except UntrustedError:
                rows.append(None)
    good = [r for r in rows if isinstance(r, dict)]
    return good, len(rows) - len(good)


def _json_array(raw: bytes) -> list[Any] | None:
    """The lines of `raw` as one JSON array (None if a line is damaged or breaks a limit), by orjson,
    three times faster than the stdlib, unless a NaN or Infinity (a diverged step), which orjson rejects,
    needs the stdlib."""
    joined = b"[" + raw.replace(b"\n", b",") + b"]"
    try:
        return orjson.loads(joined)
    except orjson.JSONDecodeError:
        pass
    try:        # the stdlib reads NaN; integers stay bounded, and a deep line raises RecursionError
        return json.loads(joined.decode("utf-8", errors="replace"), parse_int=bounded_int)
    except (ValueError, RecursionError):
        return None


def read_jsonl(path: Path, strict: bool = False) -> list[dict[str, Any]]:
    """Rows of a JSONL file. A torn last line (a writer killed mid-line) is dropped; a damaged line
    anywhere else is skipped, or with `strict` raises TrialDirError (resume must not drop rows)."""
    if not strict:
        return read_rows(path)[0]
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    rows = []
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not an object")
        except ValueError:
            if i == len(lines) - 1:
                break
            if strict:
                raise TrialDirError(f"{path}: line {i + 1} is damaged (not a JSON object); repair or delete "
                                    f"that line, or rerun the trial with --rerun-changed/--force") from None
            continue
        rows.append(row)
    return rows


def append_jsonl(path: Path, row: Mapping[str, Any]) -> None:
    with open_append(path) as f:
        f.write(json.dumps(dict(row)) + "\n")


def truncate_jsonl(path: Path, through_step: int) -> list[dict[str, Any]]:
    """Keep the rows with step <= through_step (a resume from that checkpoint); returns them."""
    kept = [r for r in read_jsonl(path, strict=True) if r.get("step", 0) <= through_step] if through_step else []
    write_atomic(Path(path), "".join(json.dumps(r) + "\n" for r in kept))
    return kept
