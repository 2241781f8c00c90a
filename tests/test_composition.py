"""The composition root (harness/builtins.py, named by harness/__init__.py): the registries name no modules,
and the root is imported on a registry's next use, once, so that naming it costs nothing."""
from __future__ import annotations

import subprocess
import sys

import pytest

from harness import registry
from harness.errors import ConfigError
from harness.registry import Registry

ROOT = str(registry.__file__).rsplit("/harness/", 1)[0]


def test_a_root_is_imported_on_the_next_use_of_a_registry_and_once(tmp_path, monkeypatch):
    widgets = Registry("widget")
    monkeypatch.setattr(registry, "WIDGETS", widgets, raising=False)
    monkeypatch.setattr(registry, "_ROOTS", [])
    monkeypatch.setattr(registry, "_imported", set())
    (tmp_path / "widget_root.py").write_text("from harness.registry import WIDGETS\nWIDGETS.register('w')(1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "widget_root", raising=False)
    registry.compose("widget_root")
    registry.compose("widget_root")                       # named twice: one root
    assert registry._ROOTS == ["widget_root"] and "widget_root" not in sys.modules
    assert widgets.names() == ["w"] and "w" in widgets and widgets.get("w") == 1
    assert list(widgets) == [("w", 1)]                    # a second import would register 'w' twice: an error


def test_an_empty_registry_names_the_fix(monkeypatch):
    monkeypatch.setattr(registry, "_ROOTS", [])
    with pytest.raises(ConfigError, match=r"^gadget: 'x' is not valid; choose one of \(no gadget registered: no "
                                          r"composition root was named; .*harness.registry.compose\)$"):
        Registry("gadget").check("gadget", "x")


def _fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={"PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, check=True).stdout.strip()


def test_importing_the_package_composes_the_built_ins_lazily():
    # a config module is imported without the built-ins (no torch); the first registry use brings them all
    assert _fresh("import sys, harness.config.run; print('harness.builtins' in sys.modules, 'torch' in sys.modules)") \
        == "False False"
    assert _fresh("import harness.registry as r; print(r.ENGINES.names(), r.BACKENDS.names(), r.KINDS.names(), "
                  "r.SECTIONS.names())") == "['hf', 'vllm'] ['torch', 'deepspeed'] ['llm', 'lab'] " \
                                             "['regime', 'benchmarks', 'lab']"
