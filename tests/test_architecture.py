"""Facts about the code that anyone can check, checked: no import cycle among harness modules, one owner
of the trial directory's format and of every path in it, one meaning of a missing status, one definition
of the trial statuses, one reader of the suite file, trial kinds instead of `lab` branches, files that
fit on a reader's desk, the tracking packages imported only by harness/store/tracking/, and a repository that
stands alone.

The import graph is built from the AST of harness/**/*.py and studies/**/*.py (the paper's study, the floor
above harness). Module-level and function-level imports count alike (a lazy import still couples two
modules), and so does a string that is a module's name outside a docstring (`importlib.import_module("harness.x")`, `compose("harness.builtins")`, a tuple of homes that a
registry imports): a module named in a string is one imported by name. `from pkg import name` is an edge to
`pkg.name` when that is a module, else to `pkg`; importing a module does not add an edge to its parent
package, since Python completes a partially imported package for a submodule import.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from harness.store import trialdir
REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "harness"
STUDIES = REPO / "studies"                  # the paper's study, the floor above harness
MAX_LINES = 400
# The names of the trial directory's files, as trialdir.py defines them: no other module may spell them.
TRIAL_FILES = (trialdir.CONFIG, trialdir.PARAMS, trialdir.PROVENANCE, trialdir.METRICS, trialdir.EVALS,
               trialdir.STATUS, trialdir.ERROR_LOG, trialdir.CHECKPOINT, trialdir.SUITE_FILE, trialdir.TUNE_TRIALS)
# Directory names inside results/<suite>/ and a trial directory, as trialdir.py defines them: no other module
# joins them onto a path (`trial_dir / "policy"`, `Path("lab")`). Names that mean something else elsewhere:
PATH_NAMES = (trialdir.POLICY_DIR, trialdir.BENCHMARKS_DIR, trialdir.BENCHMARK_RESULTS, trialdir.LAB_DIR,
              trialdir.RAY_DIR, trialdir.TUNE_DIR, trialdir.LOCK)
OTHER_MEANINGS = {("harness/tasks/benchmarks.py", "benchmarks"): "the shared benchmark data directory",
                  ("harness/report/html.py", "results.json"): "the report's bundle, reports/<suite>/results.json",
                  ("harness/reproduce.py", "results.json"): "the report's bundle, checked against the raw trials"}
# The modules that may know that a run config can be an estimator-lab one (the `lab` kind and its package,
# the run config that declares the section, the kind registry): everyone else asks the trial's kind.
LAB_KNOWERS = ("harness.lab", "harness.config.lab", "harness.store.trialdir")


def _modules(packages: tuple[Path, ...] = (PACKAGE,)) -> dict[str, Path]:
    """module name -> file, for every module of `packages` (harness/ alone unless told)."""
    out = {}
    for path in sorted(p for package in packages for p in package.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    assert len(out) > 50 and "harness.store.trialdir" in out, sorted(out)[:5]
    return out


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the harness modules it imports anywhere in its file."""
    graph = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        edges = set()
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[:len(package) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    edges |= {sub} if sub in modules else {target} if target in modules else set()
        edges |= {n.value for n in _strings(tree)} & set(modules)      # import_module("harness.x"), compose(...)
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph)))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_the_cycle_finder_finds_cycles():
    # a -> b -> c -> a is one cycle; d -> a hangs off it; e stands alone
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_relative_and_lazy_imports_are_edges(tmp_path):
    # the graph of a made-up package: a relative import in a function body, a package-level name
    modules = {"p": tmp_path / "p" / "__init__.py", "p.a": tmp_path / "p" / "a.py", "p.b": tmp_path / "p" / "b.py"}
    modules["p"].parent.mkdir()
    modules["p"].write_text("from .a import thing\n")
    modules["p.a"].write_text("def f():\n    from . import b\n")
    modules["p.b"].write_text("from p import thing\n")
    assert import_graph(modules) == {"p": {"p.a"}, "p.a": {"p.b"}, "p.b": {"p"}}
    assert cycles(import_graph(modules)) == [["p", "p.a", "p.b"]]


def test_a_module_named_in_a_string_is_an_edge(tmp_path):
    # import_module("p.b"), compose("p.c") and a tuple naming p.d import them; a docstring or a message that
    # mentions a module, or a string that is no module of the graph, is no edge
    modules = {m: tmp_path / f"{m}.py" for m in ("p", "p.a", "p.b", "p.c", "p.d")}
    modules["p"].write_text('"""p.a"""\nimport importlib\ndef f():\n    importlib.import_module("p.b")\n'
                            '    print("see p.a")\n')
    modules["p.a"].write_text('from harness.registry import compose\ncompose("p.c")\nHOMES = ("p.d", "os.path")\n')
    for m in ("p.b", "p.c", "p.d"):
        modules[m].write_text("")
    assert import_graph(modules) == {"p": {"p.b"}, "p.a": {"p.c", "p.d"}, "p.b": set(), "p.c": set(), "p.d": set()}
    assert upward_imports({"harness.registry": {"harness.builtins"}}) == ["harness.registry -> harness.builtins"]


def test_no_import_cycle_among_harness_modules():
    assert cycles(import_graph(_modules((PACKAGE, STUDIES)))) == []


# The rooms of harness/, bottom to top (README, "Where things live"): a module imports modules of its own room
# and of rooms below it, never above; lazy and TYPE_CHECKING imports count. Components (tasks, engines,
# bases) sit below the specification that names them; the lab, a kind of trial with its own report
# sections, sits above the report and registers itself into both. The composition root (harness/builtins.py,
# named by the package's __init__) imports the built-ins of every floor, so it sits on the top one. A paper's
# study (studies/) lives above the product: it imports harness, harness never names it, and it registers its
# report sections through its own composition root (studies/builtins.py).
LAYERS = (("harness.errors", "harness.registry"), ("harness.store",), ("harness.tasks", "harness.rollout"),
          ("harness.bases",), ("harness.config",), ("harness.trial",), ("harness.suite",), ("harness.report",),
          ("harness.lab",), ("harness.evaluation", "harness.reproduce", "harness.cli", "harness.builtins", "harness"),
          ("studies",))


def layer_of(module: str) -> int:
    """The index in LAYERS of the longest room name that `module` is or lies in."""
    rooms = [(len(room), i) for i, names in enumerate(LAYERS) for room in names
             if module == room or module.startswith(room + ".")]
    assert rooms, f"{module} is in no room of LAYERS: add it"
    return max(rooms)[1]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{a} -> {b}" for a, targets in sorted(graph.items()) for b in sorted(targets) if layer_of(b) > layer_of(a)]


def test_the_layer_check_finds_an_upward_import():
    assert upward_imports({"harness.config.run": {"harness.report.collapse"}}) == \
        ["harness.config.run -> harness.report.collapse"]
    assert upward_imports({"harness.report.html": {"harness.config.suite"}}) == []
    assert upward_imports({"harness.builtins": {"studies.lab_verdicts"}}) == ["harness.builtins -> studies.lab_verdicts"]
    assert upward_imports({"studies.lab_verdicts": {"harness.lab.report"}}) == []


def test_imports_only_go_down():
    """Within harness/, and from harness/ to the study above it (a string naming a study module counts)."""
    assert upward_imports(import_graph(_modules((PACKAGE, STUDIES)))) == []


def _strings(tree: ast.AST) -> list[ast.Constant]:
    """String constants of a module that are not docstrings."""
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docstrings]


def test_only_trialdir_names_the_trial_files():
    """A file name as a string (`trial_dir / "status.json"`, or a path ending in it) outside trialdir.py
    is a second owner of the format; messages that mention a file by name are fine."""
    pattern = re.compile(r"(^|/)(" + "|".join(map(re.escape, TRIAL_FILES)) + r")$")
    offenders = [f"{path.relative_to(REPO)}:{node.lineno} {node.value!r}"
                 for name, path in _modules().items() if name != "harness.store.trialdir"
                 for node in _strings(ast.parse(path.read_text())) if pattern.search(node.value)]
    assert offenders == []


def path_joins(tree: ast.AST, names: tuple[str, ...]) -> list[ast.Constant]:
    """String constants among `names` that are joined onto a path: the right side of `/`, or Path's argument."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            found.append(node.right)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Path":
            found.extend(node.args)
    return [n for n in found if isinstance(n, ast.Constant) and n.value in names]


def test_path_joins_finds_joins():
    tree = ast.parse('a / "policy"\nPath("lab")\nx = {"policy": 1}\nb / name\n')
    assert [n.value for n in path_joins(tree, ("policy", "lab"))] == ["policy", "lab"]


def test_only_trialdir_joins_the_trial_dir_paths():
    """`policy/`, `benchmarks/results.json`, `tune/`, `lab/`, `ray/` are trialdir's (its path functions)."""
    offenders = []
    for name, path in _modules().items():
        rel = str(path.relative_to(REPO))
        if name != "harness.store.trialdir":
            offenders += [f"{rel}:{n.lineno} {n.value!r}" for n in path_joins(ast.parse(path.read_text()), PATH_NAMES)
                          if (rel, n.value) not in OTHER_MEANINGS]
    assert offenders == []


def missing_status_defaults(tree: ast.AST) -> list[ast.Call]:
    """`.get("status", "running")` / `.get("status", "pending")`: a reader giving a missing status its own meaning."""
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "get"
            and len(n.args) == 2 and all(isinstance(a, ast.Constant) for a in n.args)
            and n.args[0].value == "status" and n.args[1].value in ("running", trialdir.PENDING)]


def test_a_missing_status_has_one_meaning():
    """Only trialdir.read_record decides what a trial without status.json is (PENDING)."""
    offenders = [f"{path.relative_to(REPO)}:{n.lineno}" for name, path in _modules().items()
                 if name != "harness.store.trialdir" for n in missing_status_defaults(ast.parse(path.read_text()))]
    assert offenders == []


def lab_branches(tree: ast.AST) -> list[ast.AST]:
    """`x.lab` (a run config's lab section) and the string "lab" outside docstrings (`base.get("lab")`)."""
    return [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "lab"] + \
        [n for n in _strings(tree) if n.value == "lab"]


def test_no_module_outside_the_trial_kinds_branches_on_lab():
    """A lab trial differs from an LLM trial behind harness/config/kinds.py's interface (validate, run, needs a base,
    after-suite step, report sections); no other module asks whether a config is a lab one."""
    offenders = [f"{path.relative_to(REPO)}:{n.lineno}" for name, path in _modules().items()
                 if not name.startswith(LAB_KNOWERS) for n in lab_branches(ast.parse(path.read_text()))]
    assert offenders == []


def test_one_reader_of_suite_files():
    """The suite file is parsed by the schema only: no other module builds a Suite or reads a suite's YAML
    itself (harness/config/suite.py's parse_suite / read_suite_yaml; suite.py adds --set and expansion)."""
    offenders = []
    for name, path in _modules().items():
        if name in ("harness.config.suite", "harness.config.expand"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Suite":
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


def test_statuses_are_defined_once():
    """No tuple, list or set of trial statuses outside trialdir.py (FINAL, ENDED, STATUSES live there)."""
    offenders = []
    for name, path in _modules().items():
        if name == "harness.store.trialdir":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2 and all(
                    isinstance(e, ast.Constant) and e.value in trialdir.STATUSES for e in node.elts):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


def test_no_harness_file_over_the_line_limit():
    long = {str(p.relative_to(REPO)): n for p in _modules().values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"over {MAX_LINES} lines (split by job): {long}"


def test_only_the_tracking_package_imports_mlflow_and_wandb():
    offenders = []
    for path in _modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            if any(n.split(".")[0] in ("mlflow", "wandb") for n in names) and path.parent.name != "tracking":
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


def test_the_repository_stands_alone():
    """The docs cite files of this repository only (no design notes that live elsewhere)."""
    texts = [REPO / "README.md", *(REPO / "docs").glob("*.md"), *PACKAGE.rglob("*.md"), *PACKAGE.rglob("*.py")]
    cited = [str(p.relative_to(REPO)) for p in texts if re.search(r"\b(ALGORITHMS|DESIGN)\.md\b", p.read_text())]
    assert cited == []
