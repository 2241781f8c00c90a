"""Tests for the YAML half of harness.store.untrusted: every refusal is a one-line ConfigError, and hostile input stays cheap."""
from __future__ import annotations

import os
import time
import tracemalloc
from pathlib import Path

import pytest

from harness.config.run import ConfigError
from harness.store.untrusted import (MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES, SHORT_CHARS, load_yaml_file,
                            load_yaml_text, read_text_file, short)


def _refused(call, *args, match: str, **kwargs) -> str:
    """Run ``call``; assert it raises a one-line ConfigError matching ``match``; return the message."""
    with pytest.raises(ConfigError, match=match) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message and "\r" not in message
    assert len(message) < 400
    return message


# ---------------------------------------------------------------- files


def test_reads_a_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text("name: ü\n", encoding="utf-8")
    assert read_text_file(path, "suite file") == "name: ü\n"
    assert load_yaml_file(path, "suite file") == {"name": "ü"}


def test_refuses_empty_missing_and_directory_paths(tmp_path: Path) -> None:
    _refused(read_text_file, "", "suite file", match="^suite file: the path is empty")
    _refused(read_text_file, tmp_path / "nope.yaml", "suite file", match=r"nope\.yaml: no such suite file")
    _refused(read_text_file, tmp_path, "suite file", match="is a directory; give the path of a suite file")
    _refused(read_text_file, "a\0b", "suite file", match="cannot read the suite file")


@pytest.mark.timeout(10)
def test_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "suite.yaml"
    os.mkfifo(fifo)  # open() for reading would wait forever for a writer
    _refused(read_text_file, fifo, "suite file", match="not a regular file")
    _refused(load_yaml_file, "/dev/zero", "suite file", match="not a regular file")  # a device never ends


def test_refuses_a_file_over_the_size_cap(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    _refused(read_text_file, path, "suite file", match=f"is {MAX_FILE_BYTES + 1} bytes, over the limit of {MAX_FILE_BYTES}")
    path.write_bytes(b"a: 1\n")
    _refused(read_text_file, path, "suite file", max_bytes=4, match="is 5 bytes, over the limit of 4")
    assert read_text_file(path, "suite file", max_bytes=5) == "a: 1\n"


def test_refuses_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: é\n".encode("latin-1"))  # b"name: \xe9\n": 0xe9 at offset 6
    _refused(read_text_file, path, "suite file", match=r"not UTF-8 text \(bad byte at offset 6\); save it as UTF-8")


def test_a_hostile_file_name_is_escaped_and_bounded(tmp_path: Path) -> None:
    name = "\x1b[2J" + "x" * 200 + ".yaml"  # the message keeps the start and the end of a long path
    message = _refused(read_text_file, tmp_path / name, "suite file", match=r"x\.\.\.x+\.yaml: no such suite file")
    assert "\x1b" not in message
    short_name = "\x1b[2J.yaml"
    assert "\\x1b[2J.yaml: no such" in _refused(read_text_file, tmp_path / short_name, "suite file", match="no such")


# ---------------------------------------------------------------- YAML


def test_loads_plain_yaml_like_safe_load() -> None:
    text = "base: &b {lr: 1.0e-6, steps: 3}\ntrial: {<<: *b, steps: 5}\nseeds: [0, 1]\n"
    assert load_yaml_text(text, "s.yaml") == {"base": {"lr": 1e-6, "steps": 3}, "trial": {"lr": 1e-6, "steps": 5},
                                              "seeds": [0, 1]}  # a merge key may be overridden
    assert load_yaml_text("", "s.yaml") is None
    assert load_yaml_text("[0, 1]", "--trial value") == [0, 1]


def test_invalid_yaml_names_the_line() -> None:
    _refused(load_yaml_text, "a: 1\nb: [1,\nc: 2\n", "s.yaml",
             match=r"^s\.yaml: not valid YAML: line \d+, column \d+: .*; fix the syntax$")
    # what `--trial 'seed=['` hands over: one line
    _refused(load_yaml_text, "[", "--trial value 'seed=['", match=r"^--trial value 'seed=\[': not valid YAML: line 1")
    _refused(load_yaml_text, "a: 1\n---\nb: 2\n", "s.yaml", match="expected a single document")
    _refused(load_yaml_text, "a: \x1b[2J", "s.yaml", match="not valid YAML: unacceptable character #x001b")


@pytest.mark.parametrize(("text", "key", "line", "first"), [
    ("seed: 0\nlr: 1\nseed: 1\n", "'seed'", 3, 1),
    ("a:\n  x: 1\n  x: 2\n", "'x'", 3, 2),  # nested mappings too
    ("1: a\n01: b\n", "1", 2, 1),           # equal after construction (YAML 1.1 octal)
])
def test_duplicate_keys_are_refused(text: str, key: str, line: int, first: int) -> None:
    # yaml.safe_load would silently keep the last value
    _refused(load_yaml_text, text, "s.yaml",
             match=rf"^s\.yaml: line {line}, column \d+: duplicate key {key} \(first at line {first}\); .*remove one$")


def _billion_laughs(tag: str) -> str:
    """10 levels of 10 aliases each: 10**9 values once expanded, ~1 kB of text."""
    if tag == "seq":
        return "a0: &a0 [lol]\n" + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10))
    return "a0: &a0 {k: 1}\n" + "".join(f"a{i}: &a{i} {{<<: [{', '.join([f'*a{i - 1}'] * 10)}]}}\n" for i in range(1, 10))


@pytest.mark.parametrize("kind", ["seq", "merge"])
def test_alias_bomb_fails_fast_and_small(kind: str) -> None:
    tracemalloc.start()
    start = time.monotonic()
    try:
        _refused(load_yaml_text, _billion_laughs(kind), "bomb.yaml", match=f"more than {MAX_NODES} values once aliases")
        elapsed_s, (_, peak_bytes) = time.monotonic() - start, tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed_s < 1.0
    assert peak_bytes < 100 * 2**20


def test_aliases_within_the_cap_still_load() -> None:
    assert load_yaml_text("a: &a [1, 2]\nb: [*a, *a]\n", "s.yaml") == {"a": [1, 2], "b": [[1, 2], [1, 2]]}


def test_an_alias_cycle_is_refused() -> None:
    _refused(load_yaml_text, "&a [*a]", "s.yaml", match="alias \\*a refers to a node that contains it")


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 10_000, 100_000])
def test_deep_nesting_is_refused_before_recursion_error(levels: int) -> None:
    _refused(load_yaml_text, "[" * levels + "]" * levels, "s.yaml", match=f"nested more than {MAX_DEPTH} levels")
    block = "".join("  " * i + "a:\n" for i in range(min(levels, 300)))
    _refused(load_yaml_text, block, "s.yaml", match=f"nested more than {MAX_DEPTH} levels")


def test_nesting_at_the_cap_loads() -> None:
    levels = MAX_DEPTH - 1  # + the innermost scalar = MAX_DEPTH nodes deep
    expected: object = 1
    for _ in range(levels):
        expected = [expected]
    assert load_yaml_text("[" * levels + "1" + "]" * levels, "s.yaml") == expected
    block = "".join("  " * i + "a:\n" for i in range(levels)) + "  " * levels + "1\n"     # a: {a: ... {a: 1}}
    expected = 1
    for _ in range(levels):
        expected = {"a": expected}
    assert load_yaml_text(block, "s.yaml") == expected


def test_python_and_custom_tags_are_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    _refused(load_yaml_text, f"!!python/object/apply:os.system ['touch {marker}']", "s.yaml",
             match=r"line 1, column 1: could not determine a constructor .*; only plain YAML data is allowed")
    _refused(load_yaml_text, "x: !!python/name:os.system", "s.yaml", match="could not determine a constructor")
    _refused(load_yaml_text, "x: !custom 1", "s.yaml", match="could not determine a constructor")
    assert not marker.exists()


def test_unreadable_values_are_one_line_errors() -> None:
    _refused(load_yaml_text, "date: 2024-13-01", "s.yaml", match="a value cannot be read .*month must be in 1..12")
    _refused(load_yaml_text, "n: " + "9" * 5000, "s.yaml", match="a value cannot be read")
    _refused(load_yaml_text, "a" * 11, "s.yaml", max_chars=10, match="11 characters of YAML, over the limit of 10")


# ---------------------------------------------------------------- short


class _BrokenRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class _ShoutingRepr:
    def __repr__(self) -> str:
        return "\x1b[2J" + "!" * 10_000 + "\n"


@pytest.mark.parametrize("value", ["x" * 10_000_000, list(range(1_000_000)), {"k": ["v" * 1000] * 1000},
                                   10**5000, _BrokenRepr(), _ShoutingRepr(), "line\nbreak\x1b[2J"],
                         ids=["str_10MB", "list_1M", "nested", "int_5000_digits", "broken_repr", "escape_repr",
                              "control_chars"])
def test_short_is_bounded_and_one_line(value: object) -> None:
    start = time.monotonic()
    text = short(value)
    assert time.monotonic() - start < 0.5
    assert len(text) <= SHORT_CHARS
    assert text.isprintable()


def test_short_keeps_small_values_whole() -> None:
    assert short("seed") == "'seed'"
    assert short([1, 2]) == "[1, 2]"
    assert short("a\nb") == "'a\\nb'"


def test_imports_only_stdlib_yaml_and_errors() -> None:
    import ast
    import sys

    import harness.store.untrusted as module

    tree = ast.parse(Path(module.__file__).read_text())
    names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module.split(".")[0] for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module}
    ours = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
            and node.module.startswith("harness")}
    assert names - set(sys.stdlib_module_names) - {"__future__"} == {"yaml", "harness"}
    assert ours == {"harness.errors"}  # for ConfigError only: reading YAML never imports torch
