"""FC-ICL demonstrations: a store of solved examples, hybrid retrieval, and a reranker.

Retrieval follows FC-ICL: BM25 and embedding candidates fused (reciprocal rank, via
`prefcall.retrieval.hybrid.HybridIndex`) into a top-K pool, then a reranker keeps the top N.

The default reranker (`HeuristicReranker`) needs no trained model. Its score is an MMR
(maximal marginal relevance) objective over three signals, each chosen because it predicts whether a
demonstration helps *this* request:
- retrieval relevance (the fused score, min-max normalised in the pool): similar wording;
- function overlap with the functions stage 1 predicted: a demonstration of the right API shows the
  right argument names and value formats, which is what a small model copies best;
- instruction overlap (word Jaccard) with the applicable standing instructions: shows how an
  instruction of the same shape ("my go-to city is X") turns into an argument;
minus a diversity penalty (max word Jaccard with demonstrations already chosen), so N demonstrations
do not repeat one example N times. A trained reranker (FC-ICL's sigmoid-scored BERT cross-encoder with
utility-weighted pairwise loss) fits the same `Reranker` protocol.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import sqlite_utils
from pydantic import BaseModel, Field

from prefcall.engine.base import Embedder
from prefcall.errors import NotFoundError, StoreError
from prefcall.retrieval.hybrid import HybridIndex
from prefcall.retrieval.text import tokenize
from prefcall.schemas.model import Call

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

    def search_text(self) -> str:
        return self.dialogue + "\n" + "\n".join(self.instructions)


class ScoredDemo(BaseModel):
    demo: Demonstration
    retrieval: float
    score: float = 0.0


class DemoQuery(BaseModel):
    dialogue: str
    instructions: list[str] = Field(default_factory=list)
    functions: list[str] = Field(default_factory=list)  # predicted by stage 1, when known


class Reranker(Protocol):
    def rerank(self, query: DemoQuery, candidates: list[ScoredDemo], n: int) -> list[ScoredDemo]: ...


_SPEAKERS = {"user", "agent", "assistant", "system"}


def _words(text: str) -> set[str]:
    return set(tokenize(text)) - _SPEAKERS  # speaker labels are in every transcript: no signal


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


class HeuristicReranker:
    """MMR over relevance + function overlap + instruction overlap (see module docstring)."""

    def __init__(self, w_retrieval: float = 1.0, w_function: float = 1.0, w_instruction: float = 0.5,
                 diversity: float = 0.5) -> None:
        self.w_retrieval, self.w_function, self.w_instruction, self.diversity = w_retrieval, w_function, w_instruction, diversity

    def relevance(self, query: DemoQuery, candidate: ScoredDemo, low: float, high: float) -> float:
        retrieval = (candidate.retrieval - low) / (high - low) if high > low else 1.0
        wanted = set(query.functions)
        function = len(wanted & set(candidate.demo.functions)) / len(wanted | set(candidate.demo.functions)) if wanted else 0.0
        instruction = _jaccard(_words(" ".join(query.instructions)), _words(" ".join(candidate.demo.instructions)))
        return self.w_retrieval * retrieval + self.w_function * function + self.w_instruction * instruction

    def rerank(self, query: DemoQuery, candidates: list[ScoredDemo], n: int) -> list[ScoredDemo]:
        if not candidates:
            return []
        low, high = min(c.retrieval for c in candidates), max(c.retrieval for c in candidates)
        relevance = [self.relevance(query, c, low, high) for c in candidates]
        bags = [_words(c.demo.dialogue) for c in candidates]
        chosen: list[int] = []
        while len(chosen) < min(n, len(candidates)):
            def mmr(i: int) -> float:
                redundancy = max((_jaccard(bags[i], bags[j]) for j in chosen), default=0.0)
                return relevance[i] - self.diversity * redundancy
            best = max((i for i in range(len(candidates)) if i not in chosen), key=lambda i: (mmr(i), -i))
            chosen.append(best)
        return [candidates[i].model_copy(update={"score": relevance[i]}) for i in chosen]


class DemoStore:
    """Demonstrations in SQLite (table `demonstrations`), with an in-memory hybrid index per catalogue.

    `DemoStore(path)` opens/creates the file (the profiles DB is fine: Settings.database_path());
    `DemoStore(None)` keeps everything in memory (tests, one-off evaluations).
    """

    def __init__(self, path: Path | str | None = None, embedder: Embedder | None = None) -> None:
        try:
            if path is None:
                self.db = sqlite_utils.Database(memory=True)
            else:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                self.db = sqlite_utils.Database(str(path))
        except Exception as exc:  # sqlite3 errors carry no common base worth naming here
            raise StoreError(f"cannot open demonstration store {path}: {exc}: check the path is writable") from exc
        self.embedder = embedder
        self._lock = threading.RLock()
        self._indexes: dict[str, tuple[HybridIndex, list[Demonstration]]] = {}
        if TABLE not in self.db.table_names():
            self.db[TABLE].create(
                {"id": str, "dialogue": str, "instructions": str, "catalogue": str, "calls": str, "source": str,
                 "added_at": float},
                pk="id",
            )
            self.db[TABLE].create_index(["catalogue"])

    # -- writing ----------------------------------------------------------------------
    def add_many(self, demos: Iterable[Demonstration]) -> int:
        rows = [
            {"id": d.id, "dialogue": d.dialogue, "instructions": json.dumps(d.instructions), "catalogue": d.catalogue,
             "calls": json.dumps([c.model_dump() for c in d.calls]), "source": d.source, "added_at": time.time()}
            for d in demos
        ]
        with self._lock:
            self.db[TABLE].upsert_all(rows, pk="id")
            for catalogue in {r["catalogue"] for r in rows}:
                self._indexes.pop(catalogue, None)  # rebuilt lazily on the next retrieval
        return len(rows)

    def add(self, demo: Demonstration) -> Demonstration:
        self.add_many([demo])
        return demo

    def delete(self, demo_id: str) -> None:
        with self._lock:
            demo = self.get(demo_id)
            self.db[TABLE].delete(demo_id)
            self._indexes.pop(demo.catalogue, None)

    # -- reading ----------------------------------------------------------------------
    @staticmethod
    def _from_row(row: dict[str, Any]) -> Demonstration:
        return Demonstration(
            id=row["id"], dialogue=row["dialogue"], instructions=json.loads(row["instructions"]),
            catalogue=row["catalogue"], calls=[Call.model_validate(c) for c in json.loads(row["calls"])],
            source=row["source"],
        )

    def get(self, demo_id: str) -> Demonstration:
        try:
            return self._from_row(self.db[TABLE].get(demo_id))
        except sqlite_utils.db.NotFoundError as exc:
            raise NotFoundError(f"no demonstration {demo_id!r}: list them with DemoStore.all()") from exc

    def all(self, catalogue: str | None = None) -> list[Demonstration]:
        where, args = ("catalogue = ?", [catalogue]) if catalogue else (None, None)
        return [self._from_row(r) for r in self.db[TABLE].rows_where(where, args, order_by="rowid")]

    def count(self, catalogue: str | None = None) -> int:
        return len(self.all(catalogue)) if catalogue else self.db[TABLE].count

    # -- retrieval --------------------------------------------------------------------
    def _index(self, catalogue: str) -> tuple[HybridIndex, list[Demonstration]]:
        with self._lock:
            if catalogue not in self._indexes:
                demos = self.all(catalogue)
                index = HybridIndex([d.search_text() for d in demos], self.embedder)
                self._indexes[catalogue] = (index, demos)
            return self._indexes[catalogue]

    def candidates(self, query: DemoQuery, catalogue: str, k: int = 20,
                   exclude_ids: Iterable[str] = frozenset()) -> list[ScoredDemo]:
        """Top-k by fused BM25 + embedding score, leaving out `exclude_ids` (leave-one-out evaluation)."""
        index, demos = self._index(catalogue)
        excluded = {str(i) for i in exclude_ids}
        allowed = [i for i, d in enumerate(demos) if d.id not in excluded and d.id.split("#")[0] not in excluded]
        if not allowed:
            return []
        text = query.dialogue + "\n" + "\n".join(query.instructions)
        hits = index.search(text, k, restrict_to=np.asarray(allowed))
        return [ScoredDemo(demo=demos[h.index], retrieval=h.score) for h in hits]

    def retrieve(self, query: DemoQuery, catalogue: str, *, n: int = 3, k: int = 20,
                 exclude_ids: Iterable[str] = frozenset(), reranker: Reranker | None = None) -> list[ScoredDemo]:
        pool = self.candidates(query, catalogue, k, exclude_ids)
        return (reranker or HeuristicReranker()).rerank(query, pool, n)


# -- seeding ----------------------------------------------------------------------------------
_CALL_RE = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*\((.*)\)\s*$", re.S)
_ARG_RE = re.compile(r'\s*([A-Za-z_]\w*)\s*=\s*("(?:[^"\\]|\\.)*"|[^,]+)\s*(?:,|$)')


def parse_call_string(text: str) -> Call:
    """`GetRestaurants(city="San Fran", cuisine="Ethiopian")` -> Call.

    Private minimal parser for seeding; prefer prefcall.schemas.calls when it is installed.
    """
    try:
        from prefcall.schemas.calls import parse_call  # type: ignore[attr-defined]

        return parse_call(text)
    except ImportError:
        pass
    match = _CALL_RE.match(text)
    if match is None:
        raise StoreError(f"not a call string: {text!r}: expected Name(arg=\"value\", ...)")
    arguments = {}
    for arg in _ARG_RE.finditer(match.group(2)):
        value = arg.group(2).strip()
        arguments[arg.group(1)] = json.loads(value) if value.startswith('"') else value
    return Call(name=match.group(1), arguments=arguments)


def load_nlsi_demonstrations(path: Path | str, catalogue: str = "nlsi") -> list[Demonstration]:
    """Demonstrations from an NLSI-style JSON list (user_utterance, applicable_standing_instructions, api_calls)."""
    try:
        items = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise StoreError(f"cannot read NLSI data {path}: {exc}: pass a JSON list like nlsi/dev.json") from exc
    demos, seen = [], Counter()
    for item in items:
        base = str(item["example_id"])
        seen[base] += 1
        # NLSI dev repeats one example_id; keep both, as base#n, excluded together by `exclude_ids`.
        demo_id = base if seen[base] == 1 else f"{base}#{seen[base]}"
        demos.append(Demonstration(
            id=demo_id, dialogue=item["user_utterance"],
            instructions=list(item.get("applicable_standing_instructions") or []), catalogue=catalogue,
            calls=[parse_call_string(c) for c in item.get("api_calls") or []], source=f"nlsi:{Path(path).name}",
        ))
    return demos


def seed_from_nlsi(store: DemoStore, path: Path | str, catalogue: str = "nlsi") -> int:
    return store.add_many(load_nlsi_demonstrations(path, catalogue))


def add_demonstration(store: DemoStore, dialogue: str, instructions: Sequence[str], catalogue: str,
                      calls: Sequence[Call], *, source: str = "host", demo_id: str | None = None) -> Demonstration:
    """Record calls a host accepted, so later similar requests see them as examples."""
    demo = Demonstration(id=demo_id or f"{source}-{uuid.uuid4().hex[:12]}", dialogue=dialogue,
                         instructions=list(instructions), catalogue=catalogue, calls=list(calls), source=source)
    return store.add(demo)
