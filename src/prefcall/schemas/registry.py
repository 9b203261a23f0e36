"""Catalogue registry: the built-in catalogues shipped with prefcall plus user catalogues in the database.

`CatalogueRegistry` imports (any supported format), keeps user catalogues from shadowing built-ins, and
stores through `prefcall.storage.catalogues.CatalogueStore`.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Self

from prefcall.config import Settings
from prefcall.errors import NotFoundError, ValidationError
from prefcall.schemas.importers import export_catalogue, import_catalogue, validate_catalogue
from prefcall.schemas.model import Catalogue
from prefcall.storage.catalogues import CatalogueInfo, CatalogueStore, check_catalogue_name
from prefcall.storage.db import Closing

BUILTIN_NAMES = ("nlsi", "sgd")


@lru_cache(maxsize=None)
def _builtin_text(name: str) -> str:
    return (resources.files("prefcall") / "data" / "catalogues" / f"{name}.json").read_text(encoding="utf-8")


def builtin_catalogue(name: str) -> Catalogue:
    """A built-in catalogue (`nlsi`, `sgd`); a fresh copy each call so callers may modify it."""
    if name not in BUILTIN_NAMES:
        raise NotFoundError(f"no built-in catalogue {name!r}; built-ins are {', '.join(BUILTIN_NAMES)}")
    return Catalogue.model_validate(json.loads(_builtin_text(name)))


class CatalogueRegistry(Closing):
    """Built-ins + user catalogues; `CatalogueRegistry(path)`, `.from_settings(settings)` or around a store."""

    def __init__(self, path: str | Path | None = None, *, store: CatalogueStore | None = None) -> None:
        self.store = store if store is not None else CatalogueStore(path)

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        return cls(settings.database_path())

    @property
    def path(self) -> Path | None:
        return self.store.path

    def close(self) -> None:
        self.store.close()

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
        return self.store.save(catalogue, replace=replace)

    def list(self) -> list[CatalogueInfo]:
        infos = [
            CatalogueInfo(name=c.name, description=c.description, functions=len(c.functions), builtin=True)
            for c in (builtin_catalogue(n) for n in BUILTIN_NAMES)
        ]
        return infos + self.store.infos()

    def exists(self, name: str) -> bool:
        return name in BUILTIN_NAMES or self.store.load(check_catalogue_name(name)) is not None

    def get(self, name: str) -> Catalogue:
        if name in BUILTIN_NAMES:
            return builtin_catalogue(name)
        catalogue = self.store.load(check_catalogue_name(name))
        if catalogue is None:
            known = ", ".join(i.name for i in self.list())
            raise NotFoundError(f"unknown catalogue {name!r}; known: {known}")
        return catalogue

    def remove(self, name: str) -> None:
        if name in BUILTIN_NAMES:
            raise ValidationError(f"name: {name!r} is a built-in catalogue and cannot be removed")
        if not self.store.delete(check_catalogue_name(name)):
            raise NotFoundError(f"unknown catalogue {name!r}; see `prefcall schema list`")

    def export(self, name: str) -> str:
        return export_catalogue(self.get(name))
