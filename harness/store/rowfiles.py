"""JSON-lines row files and atomic writes: the generic I/O under harness/store/trialdir.py (which owns what the
files of a trial directory are called and hold; this module knows no file names)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

import orjson

from harness.errors import TrialDirError


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_rows(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Rows of a JSONL file (NaN/Infinity allowed) and the number of unreadable lines, for readers that
    report damage rather than stop on it (the report); ([], 0) if absent. Fast for large files."""
    try:
        raw = Path(path).read_bytes().strip()
    except (FileNotFoundError, IsADirectoryError):
        return [], 0
    if not raw:
        return [], 0
    rows = _json_array(raw)
    if rows is None:  # a torn or damaged line: parse line by line
        rows = []
        for line in filter(str.strip, raw.decode("utf-8", errors="replace").splitlines()):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                rows.append(None)
    good = [r for r in rows if isinstance(r, dict)]
    return good, len(rows) - len(good)


def _json_array(raw: bytes) -> list[Any] | None:
    """The lines of `raw` as one JSON array (None if a line is damaged): by orjson, three times faster
    than the stdlib, unless a NaN or Infinity (a diverged step), which orjson rejects, needs the stdlib."""
    joined = b"[" + raw.replace(b"\n", b",") + b"]"
    try:
        return orjson.loads(joined)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(joined.decode("utf-8", errors="replace"))
    except json.JSONDecodeError:
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
    with open(path, "a") as f:
        f.write(json.dumps(dict(row)) + "\n")


def truncate_jsonl(path: Path, through_step: int) -> list[dict[str, Any]]:
    """Keep the rows with step <= through_step (a resume from that checkpoint); returns them."""
    kept = [r for r in read_jsonl(path, strict=True) if r.get("step", 0) <= through_step] if through_step else []
    write_atomic(Path(path), "".join(json.dumps(r) + "\n" for r in kept))
    return kept
