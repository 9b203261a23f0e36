"""The storage layer: one migrated database for every table, and databases written by older prefcall versions."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest
import sqlite_utils

from prefcall.errors import NotFoundError, StoreError, ValidationError
from prefcall.schemas.model import Call, Catalogue, Function
from prefcall.storage.catalogues import CatalogueStore
from prefcall.storage.db import MIGRATIONS, applied_migrations, migrate
from prefcall.storage.demos import Demonstration, DemoStore
from prefcall.storage.profiles import ProfileStore

EVENTS = Demonstration(id="d1", dialogue="User: concerts in Boston", instructions=["I like jazz."], catalogue="nlsi",
                       calls=[Call(name="GetEvents", arguments={"city": "Boston"})])


def old_demo_store_database(path) -> None:
    """What the demonstration store of earlier versions wrote: its own table, created outside the migrations,
    through a plain sqlite-utils connection (no `_migrations` table when nothing else opened the file)."""
    db = sqlite_utils.Database(str(path))
    db["demonstrations"].create(
        {"id": str, "dialogue": str, "instructions": str, "catalogue": str, "calls": str, "source": str,
         "added_at": float},
        pk="id",
    )
    db["demonstrations"].create_index(["catalogue"])
    db["demonstrations"].insert({"id": "old-1", "dialogue": "User: Thai food", "instructions": json.dumps(["x"]),
                                 "catalogue": "nlsi", "source": "seed", "added_at": time.time(),
                                 "calls": json.dumps([{"name": "GetRestaurants", "arguments": {"cuisine": "Thai"}}])})
    db.close()


def test_every_table_comes_from_the_migrations():
    store = DemoStore(None)
    assert applied_migrations(store.db) == [m.__name__ for m in MIGRATIONS]
    assert {"users", "instructions", "catalogues", "demonstrations"} <= set(store.db.table_names())


def test_a_database_written_by_the_old_demo_store_opens_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old.db"
    old_demo_store_database(path)
    with DemoStore(path) as store:
        assert applied_migrations(store.db) == [m.__name__ for m in MIGRATIONS]
        assert store.count() == 1
        assert store.get("old-1").calls == [Call(name="GetRestaurants", arguments={"cuisine": "Thai"})]
        store.add(EVENTS)
        assert [d.id for d in store.all("nlsi")] == ["old-1", "d1"]
    with ProfileStore(path) as profiles:  # the other stores share the upgraded file
        profiles.create_user("alice")
    with DemoStore(path) as again:
        assert migrate(again.db) == [] and again.count("nlsi") == 2


def test_a_profiles_database_with_an_old_demonstrations_table_is_upgraded(tmp_path):
    path = tmp_path / "shared.db"
    with ProfileStore(path) as profiles:  # the migrations of the time: m001-m003
        profiles.create_user("bob")
    with sqlite3.connect(path) as conn:
        conn.execute("delete from _migrations where name = 'm004_demonstrations'")
        conn.execute("drop table demonstrations")
    old_demo_store_database(path)
    with DemoStore(path) as store:
        assert "m004_demonstrations" in applied_migrations(store.db)
        assert store.get("old-1").catalogue == "nlsi"
    with ProfileStore(path) as profiles:
        assert profiles.list_users() == ["bob"]


def test_demo_store_round_trip_and_revision(tmp_path):
    with DemoStore(tmp_path / "d.db") as store:
        start = store.revision
        store.add(EVENTS)
        assert store.revision > start and store.get("d1") == EVENTS and store.count("other") == 0
        store.delete("d1")
        with pytest.raises(NotFoundError, match="no demonstration 'd1'"):
            store.get("d1")


def test_catalogue_store_is_persistence_only(tmp_path):
    catalogue = Catalogue(name="net", functions=[Function(name="ping")])
    with CatalogueStore(tmp_path / "c.db") as store:
        assert store.load("net") is None
        store.save(catalogue)
        with pytest.raises(ValidationError, match="already exists"):
            store.save(catalogue)
        assert store.load("net") == catalogue and [i.name for i in store.infos()] == ["net"]
        assert store.delete("net") and not store.delete("net")
        with pytest.raises(ValidationError, match="not a valid catalogue name"):
            store.save(catalogue.model_copy(update={"name": "../x"}))


def test_a_failed_write_is_a_store_error_and_changes_nothing(tmp_path):
    with DemoStore(tmp_path / "d.db") as store:
        store.add(EVENTS)
        with pytest.raises(StoreError, match="d.db"), store._write() as db:
            db.execute("insert into demonstrations (id) values ('d1')")  # primary key clash
        assert store.count() == 1
