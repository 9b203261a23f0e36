"""User catalogues in the prefcall database (table `catalogues`): persistence only.

Every stored catalogue belongs to an owner (`LOCAL_OWNER` for stdio and the CLI, else the HTTP user); the key
is (owner, name), and every read and write names the owner, so one user never sees another's catalogue.
Importing other formats, built-in catalogues, limits and the rule that a user catalogue may not shadow (or
look like) a built-in one live in `prefcall.schemas.registry`, which stores through this class.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel

from prefcall.errors import ValidationError
from prefcall.schemas.model import Catalogue, Function
from prefcall.storage.db import LOCAL_OWNER, Store, utc_now

# What a stored name may look like. New names are stricter (NEW_CATALOGUE_NAME_RE, no dots); names stored by an
# older prefcall with dots stay readable.
CATALOGUE_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,100}")
NEW_CATALOGUE_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


class CatalogueInfo(BaseModel):
    name: str
    description: str
    functions: int
    builtin: bool


def check_catalogue_name(name: Any) -> str:
    if not isinstance(name, str) or not CATALOGUE_NAME_RE.fullmatch(name):
        raise ValidationError(
            f"name: {repr(name)[:80]} is not a valid catalogue name; use 1-64 letters, digits, _ and -"
        )
    return name


def check_new_catalogue_name(name: Any) -> str:
    """A name a new catalogue may be stored under: 1-64 of [A-Za-z0-9_-]."""
    if not isinstance(name, str) or not NEW_CATALOGUE_NAME_RE.fullmatch(name):
        raise ValidationError(
            f"name: {repr(name)[:80]} is not a valid catalogue name; use 1-64 letters, digits, _ and -"
        )
    return name


class CatalogueStore(Store):
    """Stored catalogues by (owner, name); `CatalogueStore(path)` or `CatalogueStore.from_settings(settings)`.
    Thread-safe. `owner` defaults to the local user (stdio, CLI)."""

    def _row(self, name: str, owner: str) -> dict[str, Any] | None:
        rows = list(self.db.query("select * from catalogues where owner = ? and name = ?", [owner, name]))
        return rows[0] if rows else None

    def save(self, catalogue: Catalogue, *, replace: bool = False, owner: str = LOCAL_OWNER) -> Catalogue:
        """Store under `catalogue.name` for `owner`; an existing one is an error unless `replace`."""
        check_catalogue_name(catalogue.name)
        functions = json.dumps([f.model_dump() for f in catalogue.functions], ensure_ascii=False)
        with self._write():
            existing = self._row(catalogue.name, owner)
            if existing is not None and not replace:
                raise ValidationError(f"name: catalogue {catalogue.name!r} already exists; pass --replace to overwrite")
            now = utc_now()
            self.db.execute(
                "insert or replace into catalogues (owner, name, description, functions, created_at, updated_at)"
                " values (?, ?, ?, ?, ?, ?)",
                [owner, catalogue.name, catalogue.description, functions,
                 existing["created_at"] if existing else now, now],
            )
        return catalogue

    def load(self, name: str, owner: str = LOCAL_OWNER) -> Catalogue | None:
        check_catalogue_name(name)
        with self._lock:
            row = self._row(name, owner)
        if row is None:
            return None
        functions = [Function.model_validate(f) for f in json.loads(row["functions"])]
        return Catalogue(name=row["name"], description=row["description"] or "", functions=functions)

    def exists(self, name: str, owner: str = LOCAL_OWNER) -> bool:
        check_catalogue_name(name)
        with self._lock:
            return next(self.db.query("select count(*) as n from catalogues where owner = ? and name = ?",
                                      [owner, name]))["n"] > 0

    def infos(self, owner: str = LOCAL_OWNER) -> list[CatalogueInfo]:
        with self._lock:
            rows = list(self.db.query(
                "select name, description, json_array_length(functions) as n from catalogues where owner = ?"
                " order by name", [owner]))
        return [CatalogueInfo(name=r["name"], description=r["description"] or "", functions=r["n"], builtin=False)
                for r in rows]

    def delete(self, name: str, owner: str = LOCAL_OWNER) -> bool:
        """Remove it; False when `owner` has none by that name."""
        check_catalogue_name(name)
        with self._write():
            if self._row(name, owner) is None:
                return False
            self.db.execute("delete from catalogues where owner = ? and name = ?", [owner, name])
        return True
