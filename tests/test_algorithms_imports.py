"""Import boundaries of `algorithms/`: torch, numpy and the standard library only; no host syncs via .item().

"torch-related" is defined by measurement, not by a hand-kept list: the top-level modules that
`import torch` loads in the same fresh interpreter just before `import algorithms` (torch's own
dependencies such as typing_extensions).
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "algorithms"

SCRIPT = """
import json, sys
top = lambda: sorted({m.split('.')[0] for m in sys.modules})
import torch
with_torch = top()
import algorithms
print(json.dumps([with_torch, top()]))
"""


def test_importing_algorithms_loads_only_torch_numpy_and_stdlib():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    with_torch, with_algorithms = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "algorithms" in with_algorithms and "algorithms" not in with_torch
    allowed = set(sys.stdlib_module_names) | set(with_torch) | {"numpy", "algorithms"}
    offenders = sorted(m for m in set(with_algorithms) - allowed if not m.startswith(("torch", "numpy")))
    assert not offenders, f"algorithms pulls in non-torch, non-stdlib modules: {offenders}"


def _sources():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) >= 10, files                           # registry, common, one file per estimator
    for path in files:
        yield path.relative_to(ROOT), ast.parse(path.read_text(), filename=str(path))


def test_no_item_calls():
    # .item() is a host sync per call; the registry leaves tensor land once, with one .tolist().
    offenders = [f"{path}:{node.lineno}" for path, tree in _sources() for node in ast.walk(tree)
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "item"]
    assert not offenders, f".item() calls in algorithms/: {offenders}"


def test_imports_are_torch_numpy_stdlib_or_relative():
    allowed = set(sys.stdlib_module_names) | {"torch", "numpy"}
    offenders = []
    for path, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [] if node.level > 0 else [node.module or ""]
            else:
                continue
            offenders += [f"{path}:{node.lineno} {name}" for name in names if name.split(".")[0] not in allowed]
    assert not offenders, f"imports beyond torch/numpy/stdlib in algorithms/: {offenders}"
