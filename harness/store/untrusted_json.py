"""JSON from outside this process (trial files of a copied results directory or an archive, a trace, a
committed report's bundle): the JSON half of harness/store/untrusted.py, whose docstring (item 3) lists
what is refused and why."""
from __future__ import annotations

import json
import os
from typing import Any

from harness.store.untrusted import (MAX_DEPTH, MAX_FILE_BYTES, MAX_INT_DIGITS, UntrustedError, check_value,
                                     decode, display, read_bytes, short)


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _JsonRefused(f"duplicate key {short(key)}; an object holds each key once")
        out[key] = value
    return out


class _JsonRefused(ValueError):
    """A JSON document that parses but breaks a rule."""


def bounded_int(text: str) -> int:
    """``json.loads``'s ``parse_int`` that refuses (ValueError) integers of over MAX_INT_DIGITS digits."""
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _JsonRefused(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _constant(name: str) -> float:
    raise _JsonRefused(f"{name} is not a finite number")


def load_json_text(text: str | bytes, where: str, allow_nonfinite: bool = False) -> Any:
    """The JSON value of ``text``; ``where`` names it in messages (``"params.json"``,
    ``"metrics.jsonl line 3"``). UntrustedError (one line) for invalid JSON and for anything the
    module docstring lists (duplicate keys, non-finite or overlong numbers, deep nesting)."""
    where = display(where)
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_int=bounded_int,
                           parse_constant=float if allow_nonfinite else _constant)
    except _JsonRefused as exc:
        raise UntrustedError(f"{where}: {exc}") from None
    except RecursionError:
        raise UntrustedError(f"{where}: nested more than {MAX_DEPTH} levels deep") from None
    except (ValueError, TypeError) as exc:   # JSONDecodeError, bytes that are not UTF-8
        raise UntrustedError(f"{where}: not valid JSON ({short(str(exc), 120)[1:-1]})") from None
    check_value(value, where, allow_nonfinite)
    return value


def read_json_file(path: str | os.PathLike[str], what: str, max_bytes: int = MAX_FILE_BYTES,
                   allow_nonfinite: bool = False) -> Any:
    """The JSON value in the file ``path`` (:func:`read_bytes`, then :func:`load_json_text`)."""
    name = display(path)
    return load_json_text(decode(read_bytes(path, what, max_bytes), name, what), name, allow_nonfinite)
