"""The prefcall SQLite database: opening (WAL, busy timeout), numbered migrations, write transactions,
and `Store`, the base every store (profiles, catalogues, demonstrations) builds on.

Migrations follow simonw/llm's migrations.py: each is a function applied once, in order, and recorded
by name in `_migrations`; a database created by an older prefcall is upgraded in place on open.
Migrations run inside one `BEGIN IMMEDIATE` transaction, so two processes opening a fresh database at
the same time cannot both apply the same migration. Every table is created here and nowhere else.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Self

import sqlite_utils

from prefcall.config import Settings
from prefcall.errors import StoreError

Migration = Callable[[sqlite_utils.Database], None]
MIGRATIONS: list[Migration] = []
# Owners of catalogues and demonstrations. Over HTTP the owner is the bearer token's user id, which is never
# empty and never "*" (user ids match [A-Za-z0-9_.@-]{1,64}); stdio and the CLI act as the one local user.
LOCAL_OWNER = ""  # the local user (stdio, CLI, evaluation): what every row made before owners existed belongs to
SHARED_OWNER = "*"  # shared and read-only for everyone: demonstrations seeded from public data
BUSY_TIMEOUT_S = 30.0  # a writer waits this long for another process's transaction before failing


def migration(fn: Migration) -> Migration:
    MIGRATIONS.append(fn)
    return fn


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@migration
def m001_users_and_instructions(db: sqlite_utils.Database) -> None:
    db["users"].create({"id": str, "created_at": str}, pk="id")
    db["instructions"].create(
        {"id": int, "user_id": str, "position": int, "text": str, "created_at": str, "updated_at": str},
        pk="id",
        foreign_keys=[("user_id", "users", "id")],
    )
    db["instructions"].create_index(["user_id", "position"])


@migration
def m002_instruction_tags(db: sqlite_utils.Database) -> None:
    # TAPS tags of an instruction, the model that made them, and a hash of the text they were made from.
    table = db["instructions"]
    table.add_column("tags", str)
    table.add_column("tags_model", str)
    table.add_column("tagged_at", str)
    table.add_column("tags_text_hash", str)


@migration
def m003_catalogues(db: sqlite_utils.Database) -> None:
    db["catalogues"].create(
        {"name": str, "description": str, "functions": str, "created_at": str, "updated_at": str}, pk="name"
    )


@migration
def m004_demonstrations(db: sqlite_utils.Database) -> None:
    # FC-ICL demonstrations. Before this migration the demonstration store created the table itself, so a
    # database it wrote already has the table (same columns): keep it and its rows, add only what is missing.
    if "demonstrations" not in db.table_names():
        db["demonstrations"].create(
            {"id": str, "dialogue": str, "instructions": str, "catalogue": str, "calls": str, "source": str,
             "added_at": float},
            pk="id",
        )
    db["demonstrations"].create_index(["catalogue"], if_not_exists=True)


@migration
def m005_owners_and_request_keys(db: sqlite_utils.Database) -> None:
    # Catalogues belong to a user: the primary key becomes (owner, name). Rows made before owners existed were
    # made by the one local user (stdio, CLI). Raw SQL: sqlite-utils' transform() commits on its own.
    db.execute(
        "create table catalogues_owned (owner text not null, name text not null, description text, functions text,"
        " created_at text, updated_at text, primary key (owner, name))"
    )
    db.execute(
        "insert into catalogues_owned (owner, name, description, functions, created_at, updated_at)"
        " select ?, name, description, functions, created_at, updated_at from catalogues",
        [LOCAL_OWNER],
    )
    db.execute("drop table catalogues")
    db.execute("alter table catalogues_owned rename to catalogues")
    # Demonstrations too: the host's feedback was the local user's; seeded pools (public data) are shared.
    db.execute("alter table demonstrations add column owner text not null default ''")
    db.execute("update demonstrations set owner = ? where source != 'host'", [SHARED_OWNER])
    db.execute("create index demonstrations_catalogue_owner on demonstrations (catalogue, owner)")
    # add_instruction's idempotency key: one instruction per (user, key).
    db.execute("alter table instructions add column request_key text")
    db.execute(
        "create unique index instructions_user_request_key on instructions (user_id, request_key)"
        " where request_key is not null"
    )


def applied_migrations(db: sqlite_utils.Database) -> list[str]:
    if "_migrations" not in db.table_names():
        return []
    return [row["name"] for row in db.query("select name from _migrations order by rowid")]


def migrate(db: sqlite_utils.Database, migrations: list[Migration] | None = None) -> list[str]:
    """Apply the migrations not yet recorded; returns the names applied now."""
    todo = MIGRATIONS if migrations is None else migrations
    applied_now: list[str] = []
    with transaction(db):
        if "_migrations" not in db.table_names():
            db["_migrations"].create({"name": str, "applied_at": str}, pk="name")
        done = set(applied_migrations(db))
        for fn in todo:
            if fn.__name__ in done:
                continue
            fn(db)
            db.execute("insert into _migrations (name, applied_at) values (?, ?)", [fn.__name__, utc_now()])
            applied_now.append(fn.__name__)
    return applied_now


def connect(path: str | Path | None, *, timeout: float = BUSY_TIMEOUT_S) -> sqlite_utils.Database:
    """An sqlite-utils Database on a connection in WAL mode with a busy timeout; parent folders created.
    `path=None` is a private in-memory database (tests, one-off evaluations)."""
    try:
        if path is None:
            conn = sqlite3.connect(":memory:", check_same_thread=False)
        else:
            path = Path(path).expanduser()
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(path), timeout=timeout, check_same_thread=False)
        db = sqlite_utils.Database(conn)
        # WAL: readers never block the writer; NORMAL sync is crash-safe for process kills in WAL mode.
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
        db.execute("PRAGMA foreign_keys=ON")
    except (sqlite3.Error, OSError) as exc:
        raise StoreError(f"cannot open database {path}: {exc}; check the path and its permissions") from exc
    return db


def open_database(path: str | Path | None, *, timeout: float = BUSY_TIMEOUT_S) -> sqlite_utils.Database:
    db = connect(path, timeout=timeout)
    try:
        migrate(db)
    except sqlite3.DatabaseError as exc:
        db.close()
        raise StoreError(f"database {path} is unreadable or not a prefcall database: {exc}") from exc
    return db


@contextmanager
def transaction(db: sqlite_utils.Database) -> Iterator[sqlite_utils.Database]:
    """One write transaction that takes the write lock up front (BEGIN IMMEDIATE).

    Taking the lock at the start, not at the first write, is what makes read-then-write steps (such as
    "next position = max + 1") safe against another process doing the same at once; a locked database
    is waited for (busy timeout) rather than failed. sqlite-utils calls inside nest as savepoints.
    """
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        if db.conn.in_transaction:
            db.conn.execute("ROLLBACK")
        raise
    else:
        db.conn.execute("COMMIT")


class Closing:
    """`with thing:` closes it afterwards."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Store(Closing):
    """What every store shares: the migrated database (`path=None`: in memory), a lock that makes it
    thread-safe, and `_write()`, one locked write transaction whose SQLite errors become StoreError."""

    def __init__(self, path: str | Path | None = None, *, db: sqlite_utils.Database | None = None,
                 settings: Settings | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.db = db if db is not None else open_database(self.path)
        self._lock = threading.RLock()
        self.settings = settings or Settings.model_construct()  # limits: the given settings, else the defaults

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """The store on the configured database file (PREFCALL_DB_PATH or DATA_DIR/prefcall.db)."""
        return cls(settings.database_path(), settings=settings)

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite_utils.Database]:
        with self._lock:
            try:
                with transaction(self.db) as db:
                    yield db
            except sqlite3.Error as exc:
                where = self.path or "the in-memory database"
                raise StoreError(f"write to {where} failed (busy or unwritable): {exc}; retry") from exc
