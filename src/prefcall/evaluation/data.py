"""Where evaluation data lives and how tasks get a catalogue (built-in, or an imported file)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from prefcall.errors import ConfigError
from prefcall.schemas.importers import import_catalogue
from prefcall.schemas.model import Catalogue


T = TypeVar("T")


def read_resumable(path: Path | None, parse: Callable[[str], T]) -> list[T]:
    """The records an earlier, maybe interrupted, run appended to `path` (JSON lines), each read by `parse`; a line
    it cannot read (a torn last line: the run stopped mid-write) is skipped, and a missing file reads as none."""
    if path is None or not path.is_file():
        return []
    out: list[T] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            out.append(parse(line))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def shared_data_dir() -> Path:
    """PREFCALL_SHARED_DATA, else ../shared/data beside the repository checkout."""
    env = os.environ.get("PREFCALL_SHARED_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3].parent / "shared" / "data"


def read_json(path: str | Path) -> Any:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"data file {path} does not exist; pass an existing --data FILE")
    text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        # JSON lines (bfcl, acebench style)
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def require_data(args: Any, default: Path | None = None) -> Path:
    if getattr(args, "data", None):
        return Path(args.data)
    if default is not None and default.exists():
        return default
    raise ConfigError("no data file: pass --data FILE")


def load_catalogue(args: Any, default_name: str) -> Catalogue:
    """--schema FILE (imported, any supported format), else the built-in catalogue --catalogue NAME
    (default `default_name`)."""
    from prefcall.schemas.registry import BUILTIN_NAMES, builtin_catalogue  # opens no database, imports storage

    schema = getattr(args, "schema", None)
    name = getattr(args, "catalogue", None) or default_name
    if schema:
        return import_catalogue_file(Path(schema), name)
    if name in BUILTIN_NAMES:
        return builtin_catalogue(name)
    raise ConfigError(f"no built-in catalogue named {name!r}; pass --schema FILE or --catalogue {'|'.join(BUILTIN_NAMES)}")


def import_catalogue_file(path: Path, name: str) -> Catalogue:
    if not path.exists():
        raise ConfigError(f"schema file {path} does not exist; pass an existing --schema FILE")
    return import_catalogue(path, name=name)


def checkout_file(relative: str) -> Path:
    """A file of the source checkout (the NLT sets live under tests/, not in the installed package)."""
    for base in (Path(__file__).resolve().parents[3], Path.cwd()):
        if (base / relative).is_file():
            return base / relative
    raise ConfigError(f"{relative} is not here: run this command from a source checkout of prefcall")
