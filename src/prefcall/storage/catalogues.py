"""User catalogues in the prefcall database (table `catalogues`): persistence only.

Importing other formats, built-in catalogues and the rule that a user catalogue may not shadow a built-in
one live in `prefcall.schemas.registry`, which stores through this class.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel

from prefcall.errors import ValidationError
from prefcall.schemas.model import Catalogue, Function
from prefcall.storage.db import Store, utc_now

CATALOGUE_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,100}")


class CatalogueInfo(BaseModel):
    name: str
    description: str
    functions: int
    builtin: bool


def check_catalogue_name(name: Any) -> str:
    if not isinstance(name, str) or not CATALOGUE_NAME_RE.fullmatch(name):
        raise ValidationError(
            f"name: {repr(name)[:80]} is not a valid catalogue name; use 1-100 letters, digits and _ . -"
        )
    return name


class CatalogueStore(Store):
    """Stored catalogues by name; `CatalogueStore(path)` or `CatalogueStore.from_settings(settings)`. Thread-safe."""

    def _row(self, name: str) -> dict[str, Any] | None:
        rows = list(self.db.query("select * from catalogues where name = ?", [name]))
        return rows[0] if rows else None

    def save(self, catalogue: Catalogue, *, replace: bool = False) -> Catalogue:
        """Store under `catalogue.name`; an existing one is an error unless `replace`."""
        check_catalogue_name(catalogue.name)
        functions = json.dumps([f.model_dump() for f in catalogue.functions], ensure_ascii=False)
        with self._write():
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

    def load(self, name: str) -> Catalogue | None:
        check_catalogue_name(name)
        with self._lock:
            row = self._row(name)
        if row is None:
            return None
        functions = [Function.model_validate(f) for f in json.loads(row["functions"])]
        return Catalogue(name=row["name"], description=row["description"] or "", functions=functions)

    def infos(self) -> list[CatalogueInfo]:
        with self._lock:
            rows = list(self.db.query("select name, description, functions from catalogues order by name"))
        return [
            CatalogueInfo(name=r["name"], description=r["description"] or "",
                          functions=len(json.loads(r["functions"])), builtin=False)
            for r in rows
        ]

    def delete(self, name: str) -> bool:
        """Remove it; False when there was none by that name."""
        check_catalogue_name(name)
        with self._write():
            if self._row(name) is None:
                return False
            self.db.execute("delete from catalogues where name = ?", [name])
        return True
