"""Where evaluation data lives and how tasks get a catalogue (built-in, imported file, or the shared schema)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from prefcall.errors import ConfigError, PrefcallError
from prefcall.schemas.model import Catalogue, Function


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


def catalogue_from_openai(name: str, raw: Any) -> Catalogue:
    """A catalogue from a list of OpenAI-style functions or {"functions": [...]}."""
    functions = raw.get("functions", raw.get("tools", [])) if isinstance(raw, dict) else raw
    out = []
    for entry in functions:
        spec = entry.get("function", entry) if isinstance(entry, dict) else entry
        out.append(Function(name=spec["name"], description=spec.get("description", ""),
                            parameters=spec.get("parameters") or {"type": "object", "properties": {}}))
    return Catalogue(name=name, functions=out)


def load_catalogue(args: Any, default_name: str) -> Catalogue:
    """--schema FILE (imported by the schemas area when it can, else read as OpenAI-style functions),
    else the built-in catalogue --catalogue NAME (default `default_name`)."""
    schema = getattr(args, "schema", None)
    name = getattr(args, "catalogue", None) or default_name
    if schema:
        return import_catalogue_file(Path(schema), name)
    builtin = builtin_catalogue(name)
    if builtin is not None:
        return builtin
    fallback = {"nlsi": shared_data_dir() / "nlsi" / "schema.json", "sgd": shared_data_dir() / "sgd" / "dev_schema.json"}
    if name in fallback and fallback[name].exists():
        return import_catalogue_file(fallback[name], name)
    raise ConfigError(f"no catalogue named {name!r}; pass --schema FILE or --catalogue nlsi|sgd")


def import_catalogue_file(path: Path, name: str) -> Catalogue:
    from prefcall.schemas.importers import import_catalogue

    if not path.exists():
        raise ConfigError(f"schema file {path} does not exist; pass an existing --schema FILE")
    return import_catalogue(path, name=name)


def builtin_catalogue(name: str) -> Catalogue | None:
    """The schemas area's built-in catalogues, whichever entry point it ends up exposing."""
    for module_name, fn_name in (("prefcall.schemas.builtin", "load_builtin"), ("prefcall.schemas.builtin", "get"),
                                 ("prefcall.schemas", "builtin_catalogue"), ("prefcall.schemas.catalogues", "load")):
        try:
            module = __import__(module_name, fromlist=[fn_name])
        except ImportError:
            continue
        fn = getattr(module, fn_name, None)
        if callable(fn):
            try:
                return fn(name)
            except (PrefcallError, KeyError, ValueError):  # unknown there: try our fallbacks
                continue
    return None
