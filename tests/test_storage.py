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


# ------------------------------------------------------------------------------- owners (issue 13)
def pre_owner_database(path) -> None:
    """A database as prefcall wrote it before owners existed (migrations m001-m004), with rows in every table."""
    db = sqlite_utils.Database(str(path))
    migrate(db, [m for m in MIGRATIONS if m.__name__ < "m005"])
    db.execute("insert into users (id, created_at) values ('alice', 'then')")
    db.execute("insert into instructions (user_id, position, text, created_at, updated_at)"
               " values ('alice', 1, 'I fly Delta.', 'then', 'then')")
    functions = json.dumps([{"name": "GetFlights", "description": "", "parameters": {"type": "object",
                                                                                   "properties": {}}}])
    db.execute("insert into catalogues (name, description, functions, created_at, updated_at)"
               " values ('travel', 'mine', ?, 'then', 'then')", [functions])
    for demo_id, source in [("host-1", "host"), ("seed-1", "nlsi:dev.json")]:
        db["demonstrations"].insert({"id": demo_id, "dialogue": "User: a flight", "instructions": "[]",
                                     "catalogue": "travel", "calls": "[]", "source": source, "added_at": 1.0})
    db.conn.commit()
    db.close()


def test_the_owner_migration_gives_old_rows_to_the_local_user_and_seeds_to_everyone(tmp_path):
    from prefcall.storage.db import LOCAL_OWNER, SHARED_OWNER

    path = tmp_path / "old.db"
    pre_owner_database(path)
    with CatalogueStore(path) as catalogues:
        assert "m005_owners_and_request_keys" in applied_migrations(catalogues.db)
        assert catalogues.load("travel").description == "mine"  # the local (stdio) user still has it
        assert catalogues.load("travel", owner="alice") is None  # an HTTP user does not
        assert [i.name for i in catalogues.infos()] == ["travel"] and catalogues.infos("bob") == []
        # Same name, other owner: a separate catalogue.
        catalogues.save(Catalogue(name="travel", description="bob's", functions=[Function(name="F")]), owner="bob")
        assert catalogues.load("travel").description == "mine"
        assert catalogues.load("travel", owner="bob").description == "bob's"
    with DemoStore(path) as demos:
        owners = {d.id: d.owner for d in demos.all()}
        assert owners == {"host-1": LOCAL_OWNER, "seed-1": SHARED_OWNER}
        assert [d.id for d in demos.all("travel", owner="bob")] == ["seed-1"]
        assert sorted(d.id for d in demos.all("travel", owner=LOCAL_OWNER)) == ["host-1", "seed-1"]
    with ProfileStore(path) as profiles:
        assert profiles.list_instructions("alice")[0].text == "I fly Delta."
        added = profiles.add_instruction("alice", "I like aisle seats.", request_key="k-1")
        assert profiles.add_instruction("alice", "I like aisle seats.", request_key="k-1").id == added.id
        assert len(profiles.list_instructions("alice")) == 2
