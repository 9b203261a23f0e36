"""FC-ICL demonstrations: hybrid retrieval over the demonstration store, and a reranker.

The demonstrations themselves are stored by `prefcall.storage.demos.DemoStore` (persistence only);
`DemoRetriever` keeps an in-memory index per catalogue over them, rebuilt when the store changes.

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
import threading
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import numpy as np
from pydantic import BaseModel, Field

from prefcall.engine.base import Embedder
from prefcall.errors import StoreError
from prefcall.retrieval.hybrid import HybridIndex
from prefcall.retrieval.text import tokenize
from prefcall.schemas.calls import parse_call
from prefcall.storage.db import SHARED_OWNER
from prefcall.storage.demos import Demonstration, DemoStore


def search_text(demo: Demonstration) -> str:
    """What a demonstration is retrieved by: its dialogue and the standing instructions that applied."""
    return demo.dialogue + "\n" + "\n".join(demo.instructions)


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


class DemoRetriever:
    """Hybrid (BM25 + embedding) retrieval over a DemoStore, one in-memory index per catalogue.

    An index is rebuilt when the store's `revision` moved since it was built (a demonstration was added).
    `owner` (a user id, `LOCAL_OWNER` on stdio) limits retrieval to that user's demonstrations and the shared
    seeded ones; None reads every row (evaluation over a private store).
    """

    def __init__(self, store: DemoStore, embedder: Embedder | None = None) -> None:
        self.store = store
        self.embedder = embedder
        self._lock = threading.RLock()
        self._indexes: dict[tuple[str, str | None], tuple[int, HybridIndex, list[Demonstration]]] = {}

    def _index(self, catalogue: str, owner: str | None = None) -> tuple[HybridIndex, list[Demonstration]]:
        with self._lock:
            cached = self._indexes.get((catalogue, owner))
            if cached is None or cached[0] != self.store.revision:
                revision = self.store.revision
                demos = self.store.all(catalogue, owner=owner)
                index = HybridIndex([search_text(d) for d in demos], self.embedder)
                self._indexes[(catalogue, owner)] = cached = (revision, index, demos)
            return cached[1], cached[2]

    def candidates(self, query: DemoQuery, catalogue: str, k: int = 20,
                   exclude_ids: Iterable[str] = frozenset(), *, owner: str | None = None) -> list[ScoredDemo]:
        """Top-k by fused BM25 + embedding score, leaving out `exclude_ids` (leave-one-out evaluation)."""
        index, demos = self._index(catalogue, owner)
        excluded = {str(i) for i in exclude_ids}
        allowed = [i for i, d in enumerate(demos) if d.id not in excluded and d.id.split("#")[0] not in excluded]
        if not allowed:
            return []
        text = query.dialogue + "\n" + "\n".join(query.instructions)
        hits = index.search(text, k, restrict_to=np.asarray(allowed))
        return [ScoredDemo(demo=demos[h.index], retrieval=h.score) for h in hits]

    def retrieve(self, query: DemoQuery, catalogue: str, *, n: int = 3, k: int = 20,
                 exclude_ids: Iterable[str] = frozenset(), reranker: Reranker | None = None,
                 owner: str | None = None) -> list[ScoredDemo]:
        pool = self.candidates(query, catalogue, k, exclude_ids, owner=owner)
        return (reranker or HeuristicReranker()).rerank(query, pool, n)


# -- seeding ----------------------------------------------------------------------------------
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
            calls=[parse_call(c) for c in item.get("api_calls") or []], source=f"nlsi:{Path(path).name}",
            owner=SHARED_OWNER,  # public data: every user reads it, nobody's feedback changes it
        ))
    return demos


def seed_from_nlsi(store: DemoStore, path: Path | str, catalogue: str = "nlsi") -> int:
    return store.add_many(load_nlsi_demonstrations(path, catalogue))
