"""The paper's study (studies/) sits above the product: harness alone registers none of its entries, importing
the package composes them after the built-ins, and `stalebench --plugin studies` imports it before the command."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _python(code: str) -> str:
    """The last line a fresh interpreter prints after running `code` in the repository."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def test_the_study_registers_its_section_after_the_built_ins_only_when_imported():
    names = "from harness.registry import SECTIONS; print(json.dumps(SECTIONS.names()))"
    product = json.loads(_python(f"import json; {names}"))
    assert "lab" in product and "lab_claims" not in product
    assert json.loads(_python(f"import json, studies; {names}")) == [*product, "lab_claims"]
    # the study's root named before the product's registries were first used, and after: the same order
    late = json.loads(_python(f"import json; from harness.registry import SECTIONS; SECTIONS.names(); import studies; {names}"))
    assert late == [*product, "lab_claims"]


def test_the_plugin_option_imports_the_study_before_the_command(tmp_path):
    suite = "from tests.fixtures.synthetic_results import write_suite; " \
            f"d = write_suite(Path({str(tmp_path)!r}), 'plug', ('grpo',), (0, 2), (0,), steps=10)"
    run = "main(['--plugin', 'studies', 'report', str(d), '--out', " + repr(str(tmp_path / "out")) + "])"
    code = f"import sys; from pathlib import Path; from harness.cli import main; {suite}; rc = {run}; " \
           "print(rc, 'studies.lab_verdicts' in sys.modules)"
    assert _python(code) == "0 True"
    assert (tmp_path / "out" / "index.html").is_file()
