"""Every module in its layer: the import rules of ``src/graphwright``, checked on the source.

Each module is parsed with :mod:`ast` (nothing is imported) and every import
statement, at module level or inside a function, is checked against the rules:

- format libraries (onnx, protobuf, TensorFlow, …) only in ``formats/`` and ``runtime/``,
  and TensorFlow itself only in ``runtime/tensorflow.py``;
- nothing outside ``cli/`` imports ``graphwright.cli``;
- ``runtime`` never imports ``verify`` (``verify`` is built on ``runtime``);
- no private cross-package import: an underscore module or name belongs to the package
  that holds it and to that package's sub-packages only;
- packages import only packages of lower layers (:data:`LAYERS`);
- an import inside a function says why it is lazy (a ``# lazy: …`` comment).

A failure names the module and line of each offending import.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "graphwright"

#: The packages (and top-level modules) of graphwright, bottom up.  A module may import
#: its own package and the rows below its own; never its own row, never a row above.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),                                      # exception types
    ("ir",),                                          # graphs, values, tensors, traversal
    ("formats", "patterns"),                          # readers/writers; the rewrite engine
    ("runtime",),                                     # backends, feeds, NumPy/ORT/TF evaluation
    ("transforms", "verify"),                         # graph rewrites; comparing two models
    ("simplify", "inspect", "extract", "calibrate", "diff", "quantize"),  # policies and tools over those
    ("batch",),                                       # many models in worker processes, over the policies
    (PACKAGE,),                                       # graphwright/__init__.py: the public facade
    ("cli",),                                         # the command line
)

#: Third-party libraries of model formats and runtimes, and the packages that may import them.
FORMAT_LIBRARIES = ("onnx", "onnxruntime", "tensorflow", "tensorboard", "google.protobuf", "flatbuffers",
                    "ai_edge_litert", "tflite_micro")
FORMAT_HOMES = ("formats", "runtime")
#: TensorFlow is an optional extra and a slow import: one module imports it.  (formats/graphdef
#: reads and writes GraphDefs with the protos tensorboard ships, so it needs no exception.)
TENSORFLOW_HOME = "runtime.tensorflow"


@dataclass(frozen=True, slots=True)
class Import:
    """One imported name: ``target`` is absolute (``graphwright.ir.Graph``, ``onnx.helper``)."""

    module: str
    where: str  # "graphwright/runtime/execute.py:119"
    target: str
    lazy: bool  # inside a function body
    reason: bool  # a "# lazy" comment on the statement or just above it


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_imports(src: Path, package: str = PACKAGE) -> tuple[list[Import], set[str], set[str]]:
    """Every import of every module under ``src/package``, plus the module and package names."""
    paths = sorted((src / package).rglob("*.py"))
    modules = {module_name(p, src) for p in paths}
    packages = {module_name(p, src) for p in paths if p.name == "__init__.py"}
    found: list[Import] = []
    for path in paths:
        name = module_name(path, src)
        base = name if name in packages else name.rpartition(".")[0]
        lines = path.read_text().splitlines()
        where = path.relative_to(src).as_posix()
        for stmt, lazy in _import_statements(ast.parse("\n".join(lines), str(path))):
            reason = _has_lazy_comment(lines, stmt)
            for target in _targets(stmt, base, modules):
                found.append(Import(name, f"{where}:{stmt.lineno}", target, lazy, reason))
    return found, modules, packages


def _import_statements(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, in_function = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            stack.append((child, inner))


def _targets(stmt: ast.Import | ast.ImportFrom, base: str, modules: set[str]) -> list[str]:
    """What the statement imports, absolute: a module, or ``module.name`` for each name."""
    if isinstance(stmt, ast.Import):
        return [alias.name for alias in stmt.names]
    if stmt.level:
        parts = base.split(".")
        parts = parts[: len(parts) - (stmt.level - 1)]
        module = ".".join(parts + ([stmt.module] if stmt.module else []))
    else:
        module = stmt.module or ""
    return [f"{module}.{alias.name}" if alias.name != "*" else module for alias in stmt.names]


def _has_lazy_comment(lines: list[str], stmt: ast.stmt) -> bool:
    end = stmt.end_lineno or stmt.lineno
    if any("# lazy" in line for line in lines[stmt.lineno - 1:end]):
        return True
    i = stmt.lineno - 2
    while i >= 0 and lines[i].strip().startswith("#"):
        if "# lazy" in lines[i]:
            return True
        i -= 1
    return False


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _library(target: str) -> str | None:
    return next((lib for lib in FORMAT_LIBRARIES if _under(target, lib)), None)


def _unit(name: str, modules: set[str], package: str) -> str:
    """The row of :data:`LAYERS` a module or imported name belongs to."""
    parts = name.split(".")
    if len(parts) > 1 and ".".join(parts[:2]) in modules:
        return parts[1]
    return package  # the package itself, or a name its __init__ re-exports


def _private_owner(target: str, modules: set[str], packages: set[str]) -> str | None:
    """The package a private module or name belongs to, or None when ``target`` is public."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            holder = ".".join(parts[:i])
            return holder if holder in packages or holder not in modules else holder.rpartition(".")[0]
    return None


def check(src: Path = SRC, package: str = PACKAGE) -> dict[str, list[str]]:
    """Every broken rule: rule name -> ``"file:line: module imports target: why"`` messages."""
    imports, modules, packages = read_imports(src, package)
    layer = {unit: i for i, row in enumerate(LAYERS) for unit in row}
    found: dict[str, list[str]] = {rule: [] for rule in (
        "format library", "tensorflow", "cli", "runtime -> verify", "private", "layer", "unplaced", "lazy")}
    lazy_reported: set[str] = set()  # one message per statement

    def report(rule: str, imp: Import, why: str) -> None:
        found[rule].append(f"{imp.where}: {imp.module} imports {imp.target}: {why}")

    in_pkg = f"{package}."
    for imp in imports:
        relative = imp.module.removeprefix(in_pkg)
        library = _library(imp.target)
        if library is not None and not any(_under(relative, home) for home in FORMAT_HOMES):
            report("format library", imp, f"{library} belongs in {' or '.join(f'{h}/' for h in FORMAT_HOMES)}")
        if library == "tensorflow" and relative != TENSORFLOW_HOME:
            report("tensorflow", imp, f"only {TENSORFLOW_HOME.replace('.', '/')}.py imports TensorFlow")
        if imp.lazy and not imp.reason and imp.where not in lazy_reported:
            lazy_reported.add(imp.where)
            report("lazy", imp, "an import inside a function needs a '# lazy: <why>' comment, "
                                    "or belongs at the top of the module")
        if not _under(imp.target, package):
            continue
        if _under(imp.target, f"{package}.cli") and not _under(imp.module, f"{package}.cli"):
            report("cli", imp, "only cli/ imports the command line")
        if _under(imp.module, f"{package}.runtime") and _under(imp.target, f"{package}.verify"):
            report("runtime -> verify", imp, "verify is built on runtime, not the reverse")
        owner = _private_owner(imp.target, modules, packages)
        if owner is not None and not _under(imp.module, owner):
            report("private", imp, f"private to {owner}; make it public there or move it")
        src_unit, dst_unit = _unit(imp.module, modules, package), _unit(imp.target, modules, package)
        for unit in (src_unit, dst_unit):
            if unit not in layer:
                report("unplaced", imp, f"{unit!r} has no row in LAYERS")
        if src_unit != dst_unit and src_unit in layer and dst_unit in layer and layer[dst_unit] >= layer[src_unit]:
            report("layer", imp, f"{src_unit} (layer {layer[src_unit]}) may not import {dst_unit} "
                                 f"(layer {layer[dst_unit]})")
    return found


@pytest.fixture(scope="module")
def broken() -> dict[str, list[str]]:
    return check()


@pytest.mark.parametrize("rule", ["format library", "tensorflow", "cli", "runtime -> verify", "private",
                                  "layer", "unplaced", "lazy"])
def test_rule_holds(broken: dict[str, list[str]], rule: str) -> None:
    assert not broken[rule], f"{rule}:\n" + "\n".join(broken[rule])


def test_the_layer_table_names_real_packages() -> None:
    _, modules, _ = read_imports(SRC)
    units = {_unit(m, modules, PACKAGE) for m in modules}
    listed = {unit for row in LAYERS for unit in row}
    assert units == listed, f"missing from LAYERS: {sorted(units - listed)}; stale: {sorted(listed - units)}"


def test_the_checker_reports_each_rule_with_module_and_line(tmp_path: Path) -> None:
    files = {
        "__init__.py": "from .ir import Graph\n",
        "errors.py": "",
        "ir/__init__.py": "from .graph import Graph\n",
        "ir/graph.py": "class Graph: ...\n",
        "formats/__init__.py": "import onnx\nimport tensorflow as tf\n",  # tensorflow outside runtime/tensorflow.py
        "patterns/__init__.py": "from ..formats import load\n",  # same layer
        "runtime/__init__.py": "",
        "runtime/tensorflow.py": "import tensorflow\n",
        "runtime/execute.py": """
            def feeds():
                from ..verify.feeds import random_feeds  # lazy: allowed here, but runtime -> verify is not
                return random_feeds
        """,
        "transforms/__init__.py": "",
        "transforms/_onnx.py": "def all_graphs(): ...\n",
        "transforms/fold.py": "from ._onnx import all_graphs\nimport google.protobuf\n",
        "verify/__init__.py": "",
        "verify/feeds.py": "def random_feeds(): ...\n",
        "simplify/__init__.py": """
            from ..transforms._onnx import all_graphs
            from ..transforms.fold import _private_helper
            from ..cli.console import stdout


            def run():
                from ..verify import feeds
                return feeds
        """,
        "cli/__init__.py": "",
        "cli/console.py": "from .. import simplify, verify\n",
        "newpkg/__init__.py": "from ..ir import Graph\n",
    }
    for name, text in files.items():
        path = tmp_path / "graphwright" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    found = check(tmp_path)
    expected = {
        "format library": ["graphwright/transforms/fold.py:2: graphwright.transforms.fold imports google.protobuf"],
        "tensorflow": ["graphwright/formats/__init__.py:2: graphwright.formats imports tensorflow"],
        "cli": ["graphwright/simplify/__init__.py:3: graphwright.simplify imports graphwright.cli.console.stdout"],
        "runtime -> verify": ["graphwright/runtime/execute.py:2: graphwright.runtime.execute imports "
                              "graphwright.verify.feeds.random_feeds"],
        "private": ["graphwright/simplify/__init__.py:1: graphwright.simplify imports "
                    "graphwright.transforms._onnx.all_graphs: private to graphwright.transforms",
                    "graphwright/simplify/__init__.py:2: graphwright.simplify imports "
                    "graphwright.transforms.fold._private_helper: private to graphwright.transforms"],
        "layer": ["graphwright/patterns/__init__.py:1: graphwright.patterns imports graphwright.formats.load: "
                  "patterns (layer 2) may not import formats (layer 2)",
                  "graphwright/runtime/execute.py:2: graphwright.runtime.execute imports "
                  "graphwright.verify.feeds.random_feeds: runtime (layer 3) may not import verify (layer 4)",
                  "graphwright/simplify/__init__.py:3: graphwright.simplify imports graphwright.cli.console.stdout"],
        "unplaced": ["graphwright/newpkg/__init__.py:1: graphwright.newpkg imports graphwright.ir.Graph: "
                     "'newpkg' has no row in LAYERS"],
        "lazy": ["graphwright/simplify/__init__.py:7: graphwright.simplify imports graphwright.verify.feeds: "
                 "an import inside a function needs"],
    }
    for rule, messages in expected.items():
        for message in messages:
            assert any(m.startswith(message) for m in found[rule]), f"{rule}: {message!r} not in {found[rule]}"
        assert len(found[rule]) == len(messages), f"{rule}: {found[rule]}"
