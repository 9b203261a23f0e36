"""The one-way import rule (docs/architecture.md): a module imports only from its own layer or lower ones,
never by string, and no two modules import each other, directly or round a longer circle. Checked on the source
text, so lazy imports inside functions and imports under `if TYPE_CHECKING:` count too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import prefcall

SRC = Path(prefcall.__file__).resolve().parent

# Lowest first. A module belongs to the longest prefix listed; `prefcall.schemas.model` holds plain data models
# (Catalogue, Function, Call, Turn, MissingArgument) with no logic and sits at layer 1, so storage can store them.
LAYERS: dict[str, int] = {
    "prefcall": 0,
    "prefcall.config": 0,
    "prefcall.errors": 0,
    "prefcall.engine": 1,
    "prefcall.storage": 1,
    "prefcall.schemas.model": 1,
    "prefcall.schemas": 2,
    "prefcall.retrieval": 2,
    "prefcall.tagging": 3,
    "prefcall.strategies": 4,
    "prefcall.server": 5,
    "prefcall.evaluation": 6,
    "prefcall.bench": 6,
    "prefcall.commands": 6,
    "prefcall.cli": 6,
    "prefcall.__main__": 6,
    "prefcall.demo": 6,
    "prefcall.modelhub": 6,
}
# Calls that import a module named by a string (or load one from a file): never used in src.
STRING_IMPORTS = {"import_module", "__import__", "spec_from_file_location", "module_from_spec", "exec_module", "reload"}


def module_name(path: Path) -> str:
    parts = ("prefcall", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int | None:
    """The layer of a prefcall module (None: not in the map, i.e. a package nobody placed yet)."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in LAYERS and (end > 1 or len(parts) == 1):
            return LAYERS[prefix]
    return None


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, module) of every prefcall import anywhere in the file; `from x import y` yields x.y when y is a
    module of its own (a submodule), else x."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.append((node.lineno, candidate if is_module(candidate) else base))
    return [(line, name) for line, name in found if name == "prefcall" or name.startswith("prefcall.")]


def is_module(name: str) -> bool:
    path = SRC.joinpath(*name.split(".")[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def string_imports(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in STRING_IMPORTS:
                out.append((node.lineno, name))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("importlib"):
            out += [(node.lineno, alias.name) for alias in node.names if alias.name in STRING_IMPORTS]
    return out


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of a module graph: its strongly connected components of more than one module
    (Tarjan's algorithm, iterative), each sorted, lowest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next((c for c in children if c in graph and (c not in index or c in on_stack)), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                else:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


SOURCES = sorted(SRC.rglob("*.py"))


def import_graph() -> dict[str, set[str]]:
    """Every prefcall module -> the prefcall modules it imports anywhere in its file (itself left out)."""
    graph = {}
    for path in SOURCES:
        module = module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[module] = {name for _, name in imported_modules(tree, module, path.name == "__init__.py")} - {module}
    return graph


def test_every_module_has_a_layer():
    unplaced = [module_name(p) for p in SOURCES if layer_of(module_name(p)) is None]
    assert not unplaced, f"add these to LAYERS here and to docs/architecture.md: {unplaced}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_run_downwards_only(path: Path):
    module = module_name(path)
    own = layer_of(module)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    upward = [f"line {line}: {name} (layer {layer_of(name)})"
              for line, name in imported_modules(tree, module, path.name == "__init__.py")
              if (layer_of(name) or 0) > (own or 0)]
    assert not upward, f"{module} (layer {own}) imports upwards: {upward}"


def test_no_import_circles():
    found = circles(import_graph())
    assert not found, ("these modules import each other (lazy and TYPE_CHECKING imports count); move what they "
                       f"share into the lower one: {[' <-> '.join(c) for c in found]}")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_string_imports(path: Path):
    found = string_imports(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    assert not found, f"{module_name(path)} imports by string: {found}; use a plain import (inside a function if heavy)"


def test_the_checker_sees_upward_lazy_and_string_imports():
    source = (
        "from prefcall.storage.demos import DemoStore\n"
        "def f():\n    from prefcall.server.app import create_server\n"
        "import importlib\nimportlib.import_module('prefcall.bench')\n"
    )
    tree = ast.parse(source)
    names = [name for _, name in imported_modules(tree, "prefcall.strategies.x", False)]
    assert names == ["prefcall.storage.demos", "prefcall.server.app"]
    assert [layer_of(n) for n in names] == [1, 5] and layer_of("prefcall.strategies.x") == 4
    assert string_imports(tree) == [(5, "import_module")]
    assert layer_of("prefcall.schemas.model") == 1 and layer_of("prefcall.schemas.calls") == 2
    assert layer_of("prefcall.nowhere") is None and layer_of("prefcall") == 0


def test_the_checker_sees_circles_through_lazy_and_type_checking_imports():
    lazy = ast.parse("def f():\n    from prefcall.engine.b import g\n")
    typing_only = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from prefcall.engine.c import T\n")
    top = ast.parse("from prefcall.engine.a import h\n")
    graph = {
        "prefcall.engine.a": {n for _, n in imported_modules(lazy, "prefcall.engine.a", False)},
        "prefcall.engine.b": {n for _, n in imported_modules(typing_only, "prefcall.engine.b", False)},
        "prefcall.engine.c": {n for _, n in imported_modules(top, "prefcall.engine.c", False)},
        "prefcall.engine.d": {"prefcall.engine.a", "prefcall.errors"},
        "prefcall.errors": set(),
    }
    assert circles(graph) == [["prefcall.engine.a", "prefcall.engine.b", "prefcall.engine.c"]]
    assert circles({"x": {"y"}, "y": {"x"}, "z": {"z"}}) == [["x", "y"]]
    assert circles({"x": {"y"}, "y": set()}) == []
