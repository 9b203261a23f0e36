"""Catalogue registry: the built-in catalogues shipped with prefcall plus user catalogues in the database.

`CatalogueRegistry` imports (any supported format, within the settings' limits), keeps user catalogues from
shadowing or imitating built-ins, and stores through `prefcall.storage.catalogues.CatalogueStore`. Every method
takes the `owner` it acts for (default: the local user of stdio and the CLI): built-ins are shared and read-only,
stored catalogues are the owner's alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Self

from prefcall.config import Settings
from prefcall.errors import NotFoundError, ValidationError
from prefcall.schemas.importers import export_catalogue, import_catalogue, validate_catalogue
from prefcall.schemas.model import Catalogue
from prefcall.storage.catalogues import CatalogueInfo, CatalogueStore, check_catalogue_name, check_new_catalogue_name
from prefcall.storage.db import LOCAL_OWNER, Closing

BUILTIN_NAMES = ("nlsi", "sgd")
CatalogueCheck = Callable[[Catalogue], None]  # e.g. compile every grammar the strategies will build (strategies/grammars.py)


def name_key(name: str) -> str:
    """A name with case and punctuation folded away: names with the same key look alike."""
    return re.sub(r"[^a-z0-9]", "", name.casefold())


def check_not_builtin(name: str) -> str:
    """Refuse a built-in's name and any look-alike of one (`NLSI`, `nlsi.`, `sgd-`, `S_G_D`)."""
    if name in BUILTIN_NAMES:
        raise ValidationError(f"name: {name!r} is a built-in catalogue; choose another name")
    for builtin in BUILTIN_NAMES:
        if name_key(name) == name_key(builtin):
            raise ValidationError(f"name: {name!r} looks like the built-in catalogue {builtin!r} (only case or "
                                  "punctuation differ); choose a distinct name")
    return name


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

    def __init__(self, path: str | Path | None = None, *, store: CatalogueStore | None = None,
                 settings: Settings | None = None) -> None:
        self.store = store if store is not None else CatalogueStore(path, settings=settings)
        self.limits = settings or self.store.settings

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        return cls(settings.database_path(), settings=settings)

    @property
    def path(self) -> Path | None:
        return self.store.path

    def close(self) -> None:
        self.store.close()

    def prepare(self, source: str | bytes | Path | dict | list | Catalogue, *, name: str | None = None,
                description: str | None = None, check: CatalogueCheck | None = None) -> Catalogue:
        """Import and check without storing: format, name rules, the settings' limits, then `check` (grammars)."""
        if name is not None:
            check_not_builtin(check_new_catalogue_name(name))
        if isinstance(source, Catalogue):
            catalogue = validate_catalogue(source, self.limits)
            if name:
                catalogue = catalogue.model_copy(update={"name": name})
            if description is not None:
                catalogue = catalogue.model_copy(update={"description": description})
                validate_catalogue(catalogue, self.limits)
        else:
            catalogue = import_catalogue(source, name=name, description=description, limits=self.limits)
        check_not_builtin(check_new_catalogue_name(catalogue.name))
        if check is not None:
            check(catalogue)
        return catalogue

    def add(self, source: str | bytes | Path | dict | list | Catalogue, *, name: str | None = None,
            description: str | None = None, replace: bool = False, owner: str = LOCAL_OWNER,
            check: CatalogueCheck | None = None) -> Catalogue:
        """Import (any supported format, or a Catalogue), check, and store under `name` for `owner`."""
        catalogue = self.prepare(source, name=name, description=description, check=check)
        return self.store.save(catalogue, replace=replace, owner=owner)

    def list(self, owner: str = LOCAL_OWNER) -> list[CatalogueInfo]:
        """The built-ins and `owner`'s own catalogues (nobody else's)."""
        infos = [
            CatalogueInfo(name=c.name, description=c.description, functions=len(c.functions), builtin=True)
            for c in (builtin_catalogue(n) for n in BUILTIN_NAMES)
        ]
        return infos + self.store.infos(owner)

    def exists(self, name: str, owner: str = LOCAL_OWNER) -> bool:
        return name in BUILTIN_NAMES or self.store.exists(check_catalogue_name(name), owner)

    def is_builtin(self, name: str) -> bool:
        return name in BUILTIN_NAMES

    def get(self, name: str, owner: str = LOCAL_OWNER) -> Catalogue:
        if name in BUILTIN_NAMES:
            return builtin_catalogue(name)
        catalogue = self.store.load(check_catalogue_name(name), owner)
        if catalogue is None:
            # The same answer whether another user has one by that name or nobody has: names do not leak.
            known = ", ".join(i.name for i in self.list(owner))
            raise NotFoundError(f"unknown catalogue {name!r}; known: {known}")
        return catalogue

    def remove(self, name: str, owner: str = LOCAL_OWNER) -> None:
        if name in BUILTIN_NAMES:
            raise ValidationError(f"name: {name!r} is a built-in catalogue and cannot be removed")
        if not self.store.delete(check_catalogue_name(name), owner):
            raise NotFoundError(f"unknown catalogue {name!r}; see `prefcall schema list`")

    def export(self, name: str, owner: str = LOCAL_OWNER) -> str:
        return export_catalogue(self.get(name, owner))
