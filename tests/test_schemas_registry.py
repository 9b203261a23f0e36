"""CatalogueRegistry: built-ins plus user catalogues in the SQLite database (storage.catalogues)."""

from __future__ import annotations

import json

import pytest

from prefcall.errors import NotFoundError, ValidationError
from prefcall.schemas.importers import import_catalogue
from prefcall.schemas.registry import CatalogueRegistry, builtin_catalogue

TOOLS = [{"type": "function", "function": {"name": "ping", "description": "Ping a host",
                                            "parameters": {"type": "object", "properties": {"host": {"type": "string"}}}}}]


@pytest.fixture
def store(tmp_path):
    with CatalogueRegistry(tmp_path / "sub" / "prefcall.db") as s:
        yield s


def test_builtins_are_listed_and_describe_their_source():
    nlsi, sgd = builtin_catalogue("nlsi"), builtin_catalogue("sgd")
    assert len(nlsi.functions) == 17 and "NLSI" in nlsi.description
    assert "CC BY-SA 4.0" in sgd.description and len(sgd.functions) == 30


def test_add_get_list_export_remove(store, tmp_path):
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(TOOLS))
    added = store.add(path, name="net")
    assert store.get("net") == added
    infos = {i.name: i for i in store.list()}
    assert infos["net"].functions == 1 and not infos["net"].builtin and infos["nlsi"].builtin
    assert import_catalogue(store.export("net")) == added
    store.remove("net")
    with pytest.raises(NotFoundError, match="unknown catalogue 'net'"):
        store.get("net")
    with pytest.raises(NotFoundError):
        store.remove("net")


def test_add_from_tool_list_and_replace(store):
    store.add(TOOLS, name="net")
    with pytest.raises(ValidationError, match="already exists"):
        store.add(TOOLS, name="net")
    store.add(TOOLS, name="net", description="v2", replace=True)
    assert store.get("net").description == "v2"


def test_builtins_cannot_be_removed_or_shadowed(store):
    with pytest.raises(ValidationError, match="built-in catalogue and cannot be removed"):
        store.remove("nlsi")
    with pytest.raises(ValidationError, match="built-in"):
        store.add(TOOLS, name="sgd")
    assert store.get("nlsi").names[0] == "GetBanks"


def test_bad_names_and_bad_files_leave_store_unchanged(store):
    with pytest.raises(ValidationError, match="name"):
        store.add(TOOLS, name="../etc")
    with pytest.raises(ValidationError, match="line 1"):
        store.add('[{"name": ')
    assert [i.name for i in store.list()] == ["nlsi", "sgd"]


def test_catalogues_persist_across_opens(tmp_path):
    path = tmp_path / "p.db"
    with CatalogueRegistry(path) as first:
        first.add(TOOLS, name="net")
    with CatalogueRegistry(path) as second:
        assert second.get("net").names == ["ping"]
