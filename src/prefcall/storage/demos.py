"""FC-ICL demonstrations in the prefcall database (table `demonstrations`): persistence only.

Retrieval and reranking over these rows are the FC-ICL strategy's (`prefcall.strategies.fcicl`).

Each demonstration has an owner: the user whose feedback made it (`LOCAL_OWNER` for stdio and the CLI), or
`SHARED_OWNER` for pools seeded from public data, which every user reads and nobody changes through the server.
`all(catalogue, owner=user)` gives a user their own demonstrations and the shared ones, never another user's.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import sqlite_utils
from pydantic import BaseModel, Field

from prefcall.config import Settings
from prefcall.errors import NotFoundError
from prefcall.schemas.model import Call
from prefcall.storage.db import LOCAL_OWNER, SHARED_OWNER, Store

TABLE = "demonstrations"


class Demonstration(BaseModel):
    id: str
    dialogue: str  # rendered transcript ("User: ...\nAgent: ...")
    instructions: list[str] = Field(default_factory=list)  # the standing instructions that applied
    catalogue: str = "nlsi"
    calls: list[Call] = Field(default_factory=list)
    source: str = "seed"
    owner: str = LOCAL_OWNER  # the user it belongs to; SHARED_OWNER: a shared, read-only seeded pool

    @property
    def functions(self) -> list[str]:
        return list(dict.fromkeys(c.name for c in self.calls))


class DemoStore(Store):
    """Demonstrations by id; `DemoStore(path)` (the profiles database is fine) or `DemoStore(None)` in memory.

    `revision` grows with every write, so a retrieval index built from `all()` knows when it is stale.
    """

    def __init__(self, path: str | Path | None = None, *, db: sqlite_utils.Database | None = None,
                 settings: Settings | None = None) -> None:
        super().__init__(path, db=db, settings=settings)
        self.revision = 0

    def add_many(self, demos: Iterable[Demonstration]) -> int:
        rows = [
            {"id": d.id, "dialogue": d.dialogue, "instructions": json.dumps(d.instructions), "catalogue": d.catalogue,
             "calls": json.dumps([c.model_dump() for c in d.calls]), "source": d.source, "added_at": time.time(),
             "owner": d.owner}
            for d in demos
        ]
        with self._write():
            self.db[TABLE].upsert_all(rows, pk="id")
            self.revision += 1
        return len(rows)

    def add(self, demo: Demonstration) -> Demonstration:
        self.add_many([demo])
        return demo

    def delete(self, demo_id: str) -> None:
        with self._write():
            self.get(demo_id)
            self.db[TABLE].delete(demo_id)
            self.revision += 1

    @staticmethod
    def _from_row(row: dict[str, Any]) -> Demonstration:
        return Demonstration(
            id=row["id"], dialogue=row["dialogue"], instructions=json.loads(row["instructions"]),
            catalogue=row["catalogue"], calls=[Call.model_validate(c) for c in json.loads(row["calls"])],
            source=row["source"], owner=row.get("owner") or LOCAL_OWNER,
        )

    def get(self, demo_id: str) -> Demonstration:
        with self._lock:
            try:
                return self._from_row(self.db[TABLE].get(demo_id))
            except sqlite_utils.db.NotFoundError as exc:
                raise NotFoundError(f"no demonstration {demo_id!r}: list them with DemoStore.all()") from exc

    @staticmethod
    def _where(catalogue: str | None, owner: str | None) -> tuple[str, list[str]]:
        clauses, args = [], []
        if catalogue:
            clauses.append("catalogue = ?")
            args.append(catalogue)
        if owner is not None:
            clauses.append("owner in (?, ?)")
            args += [owner, SHARED_OWNER]
        return " and ".join(clauses), args

    def all(self, catalogue: str | None = None, *, owner: str | None = None) -> list[Demonstration]:
        """Every demonstration (of one catalogue); with `owner`, only that user's and the shared ones."""
        where, args = self._where(catalogue, owner)
        with self._lock:
            return [self._from_row(r) for r in self.db[TABLE].rows_where(where or None, args or None, order_by="rowid")]

    def count(self, catalogue: str | None = None, *, owner: str | None = None) -> int:
        where, args = self._where(catalogue, owner)
        with self._lock:
            return next(self.db.query(f"select count(*) as n from {TABLE}" + (f" where {where}" if where else ""),
                                      args))["n"]


def add_demonstration(store: DemoStore, dialogue: str, instructions: Sequence[str], catalogue: str,
                      calls: Sequence[Call], *, source: str = "host", demo_id: str | None = None,
                      owner: str = LOCAL_OWNER) -> Demonstration:
    """Record calls a host accepted, so later similar requests of the same owner see them as examples."""
    demo = Demonstration(id=demo_id or f"{source}-{uuid.uuid4().hex[:12]}", dialogue=dialogue,
                         instructions=list(instructions), catalogue=catalogue, calls=list(calls), source=source,
                         owner=owner)
    return store.add(demo)
