"""FC-ICL demonstrations in the prefcall database (table `demonstrations`): persistence only.

Retrieval and reranking over these rows are the FC-ICL strategy's (`prefcall.strategies.fcicl`).
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

from prefcall.errors import NotFoundError
from prefcall.schemas.model import Call
from prefcall.storage.db import Store

TABLE = "demonstrations"


class Demonstration(BaseModel):
    id: str
    dialogue: str  # rendered transcript ("User: ...\nAgent: ...")
    instructions: list[str] = Field(default_factory=list)  # the standing instructions that applied
    catalogue: str = "nlsi"
    calls: list[Call] = Field(default_factory=list)
    source: str = "seed"

    @property
    def functions(self) -> list[str]:
        return list(dict.fromkeys(c.name for c in self.calls))


class DemoStore(Store):
    """Demonstrations by id; `DemoStore(path)` (the profiles database is fine) or `DemoStore(None)` in memory.

    `revision` grows with every write, so a retrieval index built from `all()` knows when it is stale.
    """

    def __init__(self, path: str | Path | None = None, *, db: sqlite_utils.Database | None = None) -> None:
        super().__init__(path, db=db)
        self.revision = 0

    def add_many(self, demos: Iterable[Demonstration]) -> int:
        rows = [
            {"id": d.id, "dialogue": d.dialogue, "instructions": json.dumps(d.instructions), "catalogue": d.catalogue,
             "calls": json.dumps([c.model_dump() for c in d.calls]), "source": d.source, "added_at": time.time()}
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
            source=row["source"],
        )

    def get(self, demo_id: str) -> Demonstration:
        with self._lock:
            try:
                return self._from_row(self.db[TABLE].get(demo_id))
            except sqlite_utils.db.NotFoundError as exc:
                raise NotFoundError(f"no demonstration {demo_id!r}: list them with DemoStore.all()") from exc

    def all(self, catalogue: str | None = None) -> list[Demonstration]:
        where, args = ("catalogue = ?", [catalogue]) if catalogue else (None, None)
        with self._lock:
            return [self._from_row(r) for r in self.db[TABLE].rows_where(where, args, order_by="rowid")]

    def count(self, catalogue: str | None = None) -> int:
        where, args = (" where catalogue = ?", [catalogue]) if catalogue else ("", [])
        with self._lock:
            return next(self.db.query(f"select count(*) as n from {TABLE}{where}", args))["n"]  # noqa: S608


def add_demonstration(store: DemoStore, dialogue: str, instructions: Sequence[str], catalogue: str,
                      calls: Sequence[Call], *, source: str = "host", demo_id: str | None = None) -> Demonstration:
    """Record calls a host accepted, so later similar requests see them as examples."""
    demo = Demonstration(id=demo_id or f"{source}-{uuid.uuid4().hex[:12]}", dialogue=dialogue,
                         instructions=list(instructions), catalogue=catalogue, calls=list(calls), source=source)
    return store.add(demo)
