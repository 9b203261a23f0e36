"""The one-way import rule (docs/architecture.md): a module imports only from its own layer or lower ones,
and never by string. Checked on the source text, so lazy imports inside functions count too."""

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
    "prefcall.profiles": 3,
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


SOURCES = sorted(SRC.rglob("*.py"))


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
