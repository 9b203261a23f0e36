"""ProfileStore: every operation, bad input (error names the field, store unchanged), migrations."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

from prefcall.config import Settings
from prefcall.errors import NotFoundError, ValidationError
from prefcall.storage.db import MIGRATIONS, applied_migrations, connect, migrate
from prefcall.storage.profiles import MAX_INSTRUCTION_CHARS, ProfileStore


@pytest.fixture
def store(tmp_path):
    with ProfileStore(tmp_path / "nested" / "dir" / "prefcall.db") as s:
        yield s


def snapshot(store: ProfileStore) -> list[tuple]:
    return [tuple(r.values()) for r in store.db.query("select * from instructions order by id")] + [
        tuple(r.values()) for r in store.db.query("select * from users order by id")
    ]


def test_creates_parent_dirs_wal_and_all_migrations(store):
    assert store.path.parent.is_dir()
    assert store.db.execute("pragma journal_mode").fetchone()[0] == "wal"
    assert applied_migrations(store.db) == [m.__name__ for m in MIGRATIONS]


def test_settings_path_is_used(tmp_path):
    settings = Settings(db_path=tmp_path / "s.db")
    with ProfileStore.from_settings(settings) as s:
        s.create_user("u1")
    assert (tmp_path / "s.db").is_file()


def test_create_list_and_duplicate_user(store):
    store.create_user("alice")
    store.create_user("bob@example.com")
    assert store.list_users() == ["alice", "bob@example.com"]
    with pytest.raises(ValidationError, match="already exists"):
        store.create_user("alice")
    assert store.create_user("alice", exist_ok=True).user_id == "alice"


def test_add_insert_edit_remove_keep_positions_contiguous(store):
    store.create_user("alice")
    a = store.add_instruction("alice", "If I book flights I fly Delta")
    b = store.add_instruction("alice", "If I ask for Restaurants, my preferred city is Oakland")
    c = store.add_instruction("alice", "Put this first", position=1)
    assert [i.text for i in store.list_instructions("alice")] == [c.text, a.text, b.text]
    assert [i.position for i in store.list_instructions("alice")] == [1, 2, 3]
    edited = store.edit_instruction(a.id, "If I book flights I fly United")
    assert edited.text.endswith("United") and edited.position == 2
    store.remove_instruction(c.id)
    listed = store.list_instructions("alice")
    assert [(i.position, i.id) for i in listed] == [(1, a.id), (2, b.id)]
    assert store.instruction_at("alice", 2).id == b.id
    with pytest.raises(NotFoundError, match="#3"):
        store.instruction_at("alice", 3)


def test_add_many_is_one_transaction(store):
    store.create_user("alice")
    with pytest.raises(ValidationError, match=r"texts\[1\]"):
        store.add_instructions("alice", ["fine", "bad \x00 text", "fine too"])
    assert store.list_instructions("alice") == []
    added = store.add_instructions("alice", ["one", "two"])
    assert [i.position for i in added] == [1, 2]


def test_tags_become_stale_when_text_changes(store):
    store.create_user("alice")
    ins = store.add_instruction("alice", "If I book flights I fly Delta")
    assert ins.tags is None and not ins.stale and ins.needs_tagging
    tagged = store.set_tags(ins.id, "[IN:GET_FLIGHTS [SL:AIRLINES Delta Airlines ] ]", "smollm2-135m")
    assert tagged.tags_model == "smollm2-135m" and tagged.tagged_at and not tagged.stale
    assert not tagged.needs_tagging
    edited = store.edit_instruction(ins.id, "If I book flights I fly United")
    assert edited.stale and edited.tags is not None and edited.needs_tagging
    assert not store.set_tags(ins.id, "[IN:GET_FLIGHTS [SL:AIRLINES United Airlines ] ]", "m").stale
    assert store.clear_tags(ins.id).tags is None


def test_export_import_round_trip_and_stale_tags_not_exported(store):
    store.create_user("alice")
    a = store.add_instruction("alice", "If I book flights I fly Delta")
    b = store.add_instruction("alice", "Request Restaurants in Oakland.")
    store.set_tags(a.id, "[IN:GET_FLIGHTS ]", "m")
    store.set_tags(b.id, "[IN:GET_RESTAURANTS ]", "m")
    store.edit_instruction(b.id, "Request Restaurants in Berkeley.")
    exported = store.export_profile("alice")
    assert exported["instructions"][0]["tags"] == "[IN:GET_FLIGHTS ]"
    assert "tags" not in exported["instructions"][1]
    imported = store.import_profile(json.dumps(exported), user_id="alice2")
    assert imported.texts == store.get_profile("alice").texts
    assert imported.instructions[0].tags == "[IN:GET_FLIGHTS ]" and not imported.instructions[0].stale
    with pytest.raises(ValidationError, match="already exists"):
        store.import_profile(exported)
    replaced = store.import_profile({"user_id": "alice", "instructions": ["only one"]}, replace=True)
    assert replaced.texts == ["only one"]


def test_delete_user_removes_everything(store):
    store.create_user("alice")
    store.add_instructions("alice", ["a", "b"])
    store.create_user("bob")
    store.add_instruction("bob", "c")
    assert store.delete_user("alice") == 2
    assert store.list_users() == ["bob"]
    assert next(store.db.query("select count(*) n from instructions where user_id='alice'"))["n"] == 0
    with pytest.raises(NotFoundError, match="unknown user 'alice'"):
        store.get_profile("alice")


def test_unknown_user_and_instruction(store):
    for call in (lambda: store.get_profile("ghost"), lambda: store.add_instruction("ghost", "x"),
                 lambda: store.delete_user("ghost"), lambda: store.list_instructions("ghost")):
        with pytest.raises(NotFoundError, match="unknown user 'ghost'"):
            call()
    store.create_user("alice")
    store.create_user("bob")
    ins = store.add_instruction("alice", "x")
    for call in (lambda: store.edit_instruction(999, "y"), lambda: store.remove_instruction(999),
                 lambda: store.set_tags(999, "t", "m"), lambda: store.remove_instruction(ins.id, user_id="bob")):
        with pytest.raises(NotFoundError, match="no instruction with id"):
            call()


@pytest.mark.parametrize("user_id", ["bob/../x", "a\\b", "x'; drop table users; --", "", "a" * 65, "spa ce", None])
def test_bad_user_ids_name_the_field_and_change_nothing(store, user_id):
    store.create_user("alice")
    store.add_instruction("alice", "keep me")
    before = snapshot(store)
    with pytest.raises(ValidationError, match="^user_id: "):
        store.create_user(user_id)
    with pytest.raises(ValidationError, match="user_id"):
        store.import_profile({"user_id": user_id, "instructions": ["x"]})
    assert snapshot(store) == before


@pytest.mark.parametrize("text, fragment", [
    ("x" * (1024 * 1024), f"the limit is {MAX_INSTRUCTION_CHARS} (PREFCALL_MAX_INSTRUCTION_CHARS)"),
    ("bell \x07 here", "control character U+0007"),
    ("nul \x00", "control character U+0000"),
    ("escape \x1b[31m", "control character U+001B"),
    ("   ", "empty"),
])
def test_bad_instruction_text_names_the_field_and_changes_nothing(store, text, fragment):
    store.create_user("alice")
    ins = store.add_instruction("alice", "keep me")
    before = snapshot(store)
    with pytest.raises(ValidationError, match=f"^text: .*{re.escape(fragment)}"):
        store.add_instruction("alice", text)
    with pytest.raises(ValidationError, match="^text: "):
        store.edit_instruction(ins.id, text)
    with pytest.raises(ValidationError, match=r"^instructions\[1\].text: "):
        store.import_profile({"user_id": "carol", "instructions": ["fine", text]})
    assert snapshot(store) == before


def test_newlines_and_tabs_are_kept_crlf_folded(store):
    store.create_user("alice")
    ins = store.add_instruction("alice", "line one\r\n\tline two")
    assert ins.text == "line one\n\tline two"


@pytest.mark.parametrize("data, fragment", [
    ('{"user_id": "a", "instructions": [', "malformed JSON at line 1, column"),
    ("[1, 2]", "expected a JSON object"),
    ('{"user_id": "a"}', "profile.instructions"),
    ('{"user_id": "a", "instructions": [42]}', r"instructions\[0\]"),
    ('{"format": "other", "user_id": "a", "instructions": []}', "profile.format"),
])
def test_malformed_imports_change_nothing(store, data, fragment):
    before = snapshot(store)
    with pytest.raises(ValidationError, match=fragment):
        store.import_profile(data)
    assert snapshot(store) == before


def test_bad_position(store):
    store.create_user("alice")
    with pytest.raises(ValidationError, match="^position: 5"):
        store.add_instruction("alice", "x", position=5)


def test_v1_database_is_upgraded_in_place_keeping_data(tmp_path):
    path = tmp_path / "old.db"
    old = connect(path)
    assert migrate(old, MIGRATIONS[:1]) == ["m001_users_and_instructions"]
    old.execute("insert into users (id, created_at) values ('alice', '2024-01-01T00:00:00+00:00')")
    old.execute("insert into instructions (user_id, position, text, created_at, updated_at)"
                " values ('alice', 1, 'If I book flights I fly Delta', 'x', 'x')")
    assert "tags" not in old["instructions"].columns_dict
    old.close()

    with ProfileStore(path) as store:
        assert applied_migrations(store.db) == [m.__name__ for m in MIGRATIONS]
        assert {"tags", "tags_model", "tagged_at", "tags_text_hash"} <= set(store.db["instructions"].columns_dict)
        profile = store.get_profile("alice")
        assert profile.texts == ["If I book flights I fly Delta"] and profile.created_at.startswith("2024")
        assert not profile.instructions[0].stale
        store.set_tags(profile.instructions[0].id, "[IN:GET_FLIGHTS ]", "m")
    with ProfileStore(path) as again:  # reopening applies nothing twice
        assert migrate(again.db) == []


def test_not_a_database_is_a_store_error(tmp_path):
    from prefcall.errors import StoreError

    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="junk.db"):
        ProfileStore(path)


def test_integrity_after_operations(store):
    store.create_user("alice")
    store.add_instructions("alice", [f"i{n}" for n in range(20)])
    assert store.db.execute("pragma integrity_check").fetchone()[0] == "ok"
    with pytest.raises(sqlite3.IntegrityError):
        store.db.execute("insert into instructions (user_id, position, text) values ('ghost', 1, 'x')")


def test_instruction_ids_do_not_count_other_users_instructions(store):
    store.create_user("alice")
    store.create_user("bob")
    ids = []
    for i in range(10):  # alternating writers: one global counter would hand out 1, 2, 3, ...
        ids.append(store.add_instruction("alice" if i % 2 else "bob", f"instruction {i}").id)
    assert len(set(ids)) == 10
    assert not any(abs(a - b) == 1 for a in ids for b in ids), ids
    assert all(1 <= i < 2**31 for i in ids)  # JSON-safe integers, as before


def test_an_idempotency_key_stores_a_retried_add_once(store):
    store.create_user("alice")
    store.create_user("bob")
    first, stored = store.add_instruction_once("alice", "I fly Delta.", "req-1")
    again, stored_again = store.add_instruction_once("alice", "I fly Delta.", "req-1")
    assert stored and not stored_again and again.id == first.id
    assert [i.text for i in store.list_instructions("alice")] == ["I fly Delta."]
    other, stored = store.add_instruction_once("bob", "I fly Delta.", "req-1")  # keys are per user
    assert stored and other.id != first.id
    with pytest.raises(ValidationError, match="idempotency_key: already used"):
        store.add_instruction_once("alice", "I fly United.", "req-1")
    with pytest.raises(ValidationError, match="idempotency_key"):
        store.add_instruction_once("alice", "x", "has space")


def test_instruction_limits_come_from_settings_and_name_the_setting(tmp_path):
    from prefcall.errors import LimitError

    with ProfileStore(tmp_path / "p.db", settings=Settings(max_instructions=2, max_instruction_chars=20)) as small:
        small.create_user("alice")
        small.add_instructions("alice", ["one", "two"])
        with pytest.raises(LimitError, match=r"would have 3 standing instructions; the limit is 2 "
                                             r"\(PREFCALL_MAX_INSTRUCTIONS\)"):
            small.add_instruction("alice", "three")
        with pytest.raises(LimitError, match=r"the limit is 20 \(PREFCALL_MAX_INSTRUCTION_CHARS\)"):
            small.edit_instruction(small.list_instructions("alice")[0].id, "x" * 21)
        assert [i.text for i in small.list_instructions("alice")] == ["one", "two"]
