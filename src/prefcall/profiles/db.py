"""The prefcall SQLite database: opening (WAL, busy timeout), numbered migrations, write transactions.

Migrations follow simonw/llm's migrations.py: each is a function applied once, in order, and recorded
by name in `_migrations`; a database created by an older prefcall is upgraded in place on open.
Migrations run inside one `BEGIN IMMEDIATE` transaction, so two processes opening a fresh database at
the same time cannot both apply the same migration.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import sqlite_utils

from prefcall.errors import StoreError

Migration = Callable[[sqlite_utils.Database], None]
MIGRATIONS: list[Migration] = []
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


def connect(path: str | Path, *, timeout: float = BUSY_TIMEOUT_S) -> sqlite_utils.Database:
    """An sqlite-utils Database on a connection in WAL mode with a busy timeout; parent folders created."""
    path = Path(path).expanduser()
    try:
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


def open_database(path: str | Path, *, timeout: float = BUSY_TIMEOUT_S) -> sqlite_utils.Database:
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
