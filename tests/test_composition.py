"""The composition root (harness/builtins.py, named by harness/__init__.py): the registries name no modules;
a registry's first use asks the root to load that registry's built-ins, and only those."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness import registry
from harness.errors import ConfigError
from harness.registry import Registry

ROOT = str(registry.__file__).rsplit("/harness/", 1)[0]


def test_a_root_loads_a_registry_on_its_first_use_and_once(tmp_path, monkeypatch):
    widgets, gadgets = Registry("widget"), Registry("gadget")
    monkeypatch.setattr(registry, "WIDGETS", widgets, raising=False)
    monkeypatch.setattr(registry, "_ROOTS", [])
    (tmp_path / "widget_root.py").write_text(
        "from harness.registry import WIDGETS\nasked = []\n"
        "def load(reg):\n    asked.append(reg.kind)\n    if reg is WIDGETS:\n        WIDGETS.register('w')(1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "widget_root", raising=False)
    registry.compose("widget_root")
    registry.compose("widget_root")                       # named twice: one root
    assert registry._ROOTS == ["widget_root"] and "widget_root" not in sys.modules
    assert widgets.names() == ["w"] and "w" in widgets and widgets.get("w") == 1 and list(widgets) == [("w", 1)]
    assert gadgets.names() == []
    assert sys.modules["widget_root"].asked == ["widget", "gadget"]     # once per registry, each its own


def test_an_empty_registry_names_the_fix(monkeypatch):
    monkeypatch.setattr(registry, "_ROOTS", [])
    with pytest.raises(ConfigError, match=r"^gadget: 'x' is not valid; choose one of \(no gadget registered: no "
                                          r"composition root was named; .*harness.registry.compose\)$"):
        Registry("gadget").check("gadget", "x")
    monkeypatch.setattr(registry, "_ROOTS", ["harness.builtins"])
    with pytest.raises(ConfigError, match=r"\(no gadget registered: no composition root \(harness.builtins\) "
                                          r"loads one\)$"):
        Registry("gadget").check("gadget", "x")


def _fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={"PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, check=True).stdout.strip()


def test_importing_the_package_composes_each_registry_with_its_own_built_ins():
    # importing a config module loads no built-in; the figures load the report's modules, not torch
    assert _fresh("import sys, harness.config.run; print(sorted(m for m in sys.modules if m.startswith("
                  "('harness.rollout', 'harness.report', 'torch'))))") == "[]"
    assert _fresh("import sys, harness.registry as r; f = r.FIGURES.names(); print(f[0], f[-1], 'torch' in "
                  "sys.modules, 'harness.rollout' in sys.modules)") == "accuracy staleness False False"
    assert _fresh("import harness.registry as r; print(r.ENGINES.names(), r.BACKENDS.names(), r.KINDS.names(), "
                  "r.SECTIONS.names())") == "['hf', 'vllm'] ['torch', 'deepspeed'] ['llm', 'lab'] " \
                                             "['regime', 'benchmarks', 'tolerance', 'lab']"


RAW_REPORTS = sorted(p.parent.name for p in (Path(ROOT) / "reports").glob("*/raw.tar.gz"))
ENGINE_OF = {"hf": 1, "lean": 2, "lean3": 3}       # as the tables said before the forwards declared it


@pytest.mark.parametrize("report", RAW_REPORTS)
def test_every_committed_trial_hashes_as_its_suite_resolves_it_now(report):
    """v1, v2 and v3 alike: each committed trial's config.yaml hashes as its stored suite resolves it now, under
    the same trial id, and its forward declares the engine version the name-keyed table gave."""
    from harness.config.dicts import to_dict
    from harness.config.expand import load_suite_trials
    from harness.store import trialdir
    from harness.store.archive import committed_results

    with committed_results(Path(ROOT) / "reports" / report) as committed:
        _, trials = load_suite_trials(committed / trialdir.SUITE_FILE, stored=True)
        finished = [t for t in trials if (committed / t.trial_id / trialdir.CONFIG).is_file()]
        assert finished
        for t in finished:
            assert trialdir.config_sha256(trialdir.read_config(committed / t.trial_id)) == \
                trialdir.config_sha256(to_dict(t.config)), t.trial_id
            assert t.config.engine_version == ENGINE_OF[t.config.forward.name]
