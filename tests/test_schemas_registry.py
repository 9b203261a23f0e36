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


def test_look_alikes_of_builtins_and_names_outside_the_safe_set_are_refused(store):
    for name in ("NLSI", "Sgd", "sgd-", "n.l.s.i", "nlsi.", "a b", "x" * 65, "trävel"):
        with pytest.raises(ValidationError, match="name"):
            store.add(TOOLS, name=name)
    assert [i.name for i in store.list()] == ["nlsi", "sgd"]
    store.add(TOOLS, name="nlsi-extra_2")  # a distinct name that merely contains a built-in's is fine


def test_limits_come_from_the_settings_and_name_their_setting(tmp_path):
    from prefcall.config import Settings
    from prefcall.errors import LimitError

    small = Settings(max_tools=2, max_catalogue_bytes=2048, max_enum_values=3, max_description_chars=100)
    with CatalogueRegistry(tmp_path / "p.db", settings=small) as registry:
        with pytest.raises(LimitError, match=r"catalogue has 3 tools; the limit is 2 \(PREFCALL_MAX_TOOLS\)"):
            registry.add([{"name": f"t{i}"} for i in range(3)], name="many")
        with pytest.raises(LimitError, match=r"the limit is 2048 \(PREFCALL_MAX_CATALOGUE_BYTES\)"):
            registry.add([{"name": "t", "description": "d" * 99, "parameters": {"type": "object", "properties": {
                f"p{i}": {"type": "string"} for i in range(200)}}}], name="big")
        with pytest.raises(LimitError, match=r"enum has 4 values; the limit is 3 \(PREFCALL_MAX_ENUM_VALUES\)"):
            registry.add([{"name": "t", "parameters": {"type": "object", "properties": {
                "e": {"enum": ["a", "b", "c", "d"]}}}}], name="enum")
        with pytest.raises(LimitError, match=r"\(PREFCALL_MAX_DESCRIPTION_CHARS\)"):
            registry.add(TOOLS, name="wordy", description="w" * 101)
        assert [i.name for i in registry.list()] == ["nlsi", "sgd"]
        registry.add(TOOLS, name="net")


def test_an_uncompilable_catalogue_is_refused_by_the_import_check(store):
    from prefcall.strategies.grammars import check_catalogue_grammars, grammar_checker

    quoted = [{"name": "odd", "parameters": {"type": "object", "properties": {'a "b"': {"type": "string"}}}}]
    with pytest.raises(ValidationError, match=r"functions\[0\] odd: its schema cannot be compiled to a grammar"):
        store.add(quoted, name="odd", check=lambda c: check_catalogue_grammars(c, grammar_checker(None)))
    assert not store.exists("odd")
