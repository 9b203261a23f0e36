"""Catalogue registry: the built-in catalogues shipped with prefcall plus user catalogues in the database."""

from __future__ import annotations

import json
import re
import threading
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import sqlite_utils
from pydantic import BaseModel

from prefcall.config import Settings
from prefcall.errors import NotFoundError, ValidationError
from prefcall.profiles.db import open_database, transaction, utc_now
from prefcall.schemas.importers import export_catalogue, import_catalogue, validate_catalogue
from prefcall.schemas.model import Catalogue, Function

CATALOGUE_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,100}")
BUILTIN_NAMES = ("nlsi", "sgd")


class CatalogueInfo(BaseModel):
    name: str
    description: str
    functions: int
    builtin: bool


@lru_cache(maxsize=None)
def _builtin_text(name: str) -> str:
    return (resources.files("prefcall") / "data" / "catalogues" / f"{name}.json").read_text(encoding="utf-8")


def builtin_catalogue(name: str) -> Catalogue:
    """A built-in catalogue (`nlsi`, `sgd`); a fresh copy each call so callers may modify it."""
    if name not in BUILTIN_NAMES:
        raise NotFoundError(f"no built-in catalogue {name!r}; built-ins are {', '.join(BUILTIN_NAMES)}")
    return Catalogue.model_validate(json.loads(_builtin_text(name)))


def check_catalogue_name(name: Any) -> str:
    if not isinstance(name, str) or not CATALOGUE_NAME_RE.fullmatch(name):
        raise ValidationError(
            f"name: {repr(name)[:80]} is not a valid catalogue name; use 1-100 letters, digits and _ . -"
        )
    return name


class CatalogueStore:
    """Built-ins + user catalogues (table `catalogues` in the profile database). Thread-safe."""

    def __init__(self, path: str | Path | None = None, *, settings: Settings | None = None,
                 db: sqlite_utils.Database | None = None) -> None:
        self.path = Path(path) if path is not None else (settings or Settings()).database_path()
        self.db = db if db is not None else open_database(self.path)
        self._lock = threading.RLock()

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> CatalogueStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _row(self, name: str) -> dict[str, Any] | None:
        rows = list(self.db.query("select * from catalogues where name = ?", [name]))
        return rows[0] if rows else None

    def add(self, source: str | bytes | Path | dict | list | Catalogue, *, name: str | None = None,
            description: str | None = None, replace: bool = False) -> Catalogue:
        """Import (any supported format, or a Catalogue) and store under `name`; returns the stored catalogue."""
        if isinstance(source, Catalogue):
            catalogue = validate_catalogue(source)
            if name:
                catalogue = catalogue.model_copy(update={"name": name})
            if description is not None:
                catalogue = catalogue.model_copy(update={"description": description})
        else:
            catalogue = import_catalogue(source, name=name, description=description)
        check_catalogue_name(catalogue.name)
        if catalogue.name in BUILTIN_NAMES:
            raise ValidationError(f"name: {catalogue.name!r} is a built-in catalogue; choose another name")
        functions = json.dumps([f.model_dump() for f in catalogue.functions], ensure_ascii=False)
        with self._lock, transaction(self.db):
            existing = self._row(catalogue.name)
            if existing is not None and not replace:
                raise ValidationError(f"name: catalogue {catalogue.name!r} already exists; pass --replace to overwrite")
            now = utc_now()
            self.db.execute(
                "insert or replace into catalogues (name, description, functions, created_at, updated_at)"
                " values (?, ?, ?, ?, ?)",
                [catalogue.name, catalogue.description, functions,
                 existing["created_at"] if existing else now, now],
            )
        return catalogue

    def list(self) -> list[CatalogueInfo]:
        infos = [
            CatalogueInfo(name=c.name, description=c.description, functions=len(c.functions), builtin=True)
            for c in (builtin_catalogue(n) for n in BUILTIN_NAMES)
        ]
        with self._lock:
            rows = list(self.db.query("select name, description, functions from catalogues order by name"))
        infos += [
            CatalogueInfo(name=r["name"], description=r["description"] or "",
                          functions=len(json.loads(r["functions"])), builtin=False)
            for r in rows
        ]
        return infos

    def get(self, name: str) -> Catalogue:
        if name in BUILTIN_NAMES:
            return builtin_catalogue(name)
        check_catalogue_name(name)
        with self._lock:
            row = self._row(name)
        if row is None:
            known = ", ".join(i.name for i in self.list())
            raise NotFoundError(f"unknown catalogue {name!r}; known: {known}")
        functions = [Function.model_validate(f) for f in json.loads(row["functions"])]
        return Catalogue(name=row["name"], description=row["description"] or "", functions=functions)

    def remove(self, name: str) -> None:
        if name in BUILTIN_NAMES:
            raise ValidationError(f"name: {name!r} is a built-in catalogue and cannot be removed")
        check_catalogue_name(name)
        with self._lock, transaction(self.db):
            if self._row(name) is None:
                raise NotFoundError(f"unknown catalogue {name!r}; see `prefcall schema list`")
            self.db.execute("delete from catalogues where name = ?", [name])

    def export(self, name: str) -> str:
        return export_catalogue(self.get(name))
