"""What every bench section shares: settings, the (lazily loaded) engine and embedder, the workload, raw limits."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefcall.config import Settings
from prefcall.engine.base import Embedder, Engine
from prefcall.evaluation.data import shared_data_dir
from prefcall.schemas.model import Catalogue
from prefcall.schemas.registry import builtin_catalogue

REPO_ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class WorkItem:
    """One NLSI-like request: the dialogue, the user's whole profile, the instructions that apply, gold function."""

    dialogue: str
    instructions: list[str]
    applicable: list[str]
    function: str

    @property
    def utterance(self) -> str:
        return self.dialogue.removeprefix("User:").strip()


# Used when ../shared/data is absent (an installed package, CI without the data): small but NLSI-shaped.
FALLBACK_ITEMS = [
    WorkItem("User: Find me a restaurant for tonight, I want Ethiopian food.",
             ["If I'm looking for Restaurants, my go-to city is San Fran.", "I usually fly with Delta."],
             ["If I'm looking for Restaurants, my go-to city is San Fran."], "GetRestaurants"),
    WorkItem("User: Can you look up restaurants with outdoor seating?",
             ["When I search for restaurants, I like Italian food.", "My preferred city for hotels is Boston."],
             ["When I search for restaurants, I like Italian food."], "GetRestaurants"),
    WorkItem("User: I need a flight to Chicago next Friday.",
             ["If I'm looking for a flight, I usually go with Southwest Airlines."],
             ["If I'm looking for a flight, I usually go with Southwest Airlines."], "GetFlights"),
    WorkItem("User: Book me a hotel in Paris for the weekend.",
             ["If I look for hotels, I want a 4 star rating.", "I like to watch comedy movies."],
             ["If I look for hotels, I want a 4 star rating."], "GetHotels"),
]


def load_workload(limit: int = 64) -> tuple[list[WorkItem], str]:
    """NLSI dev items (first `limit`, deterministic) or the fallback; and where they came from."""
    path = shared_data_dir() / "nlsi" / "dev.json"
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return list(FALLBACK_ITEMS), "built-in fallback (shared data not found)"
    items = []
    for row in rows:
        calls = row.get("api_calls") or []
        if not calls or not row.get("applicable_standing_instructions"):
            continue
        items.append(WorkItem(
            dialogue=row["user_utterance"], instructions=list(row["all_standing_instructions"]),
            applicable=list(row["applicable_standing_instructions"]), function=calls[0].split("(", 1)[0].strip(),
        ))
        if len(items) >= limit:
            break
    return (items or list(FALLBACK_ITEMS)), str(path)


def all_instruction_texts(limit: int = 5000) -> list[str]:
    """Every standing instruction in NLSI dev (for synthesising demonstrations), or the fallback's."""
    path = shared_data_dir() / "nlsi" / "dev.json"
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return sorted({i for item in FALLBACK_ITEMS for i in item.instructions})
    seen = dict.fromkeys(i for row in rows for i in row.get("all_standing_instructions", []))
    return list(seen)[:limit]


@dataclass
class BenchContext:
    """Settings plus lazily created engine/embedder; tests inject fakes through the factories."""

    settings: Settings = field(default_factory=Settings)
    quick: bool = False
    split: str | None = None  # the catalogue section: only this part's requests of the frozen split (None: all)
    reps: int = 2
    log: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr, flush=True))
    engine_factory: Callable[[Settings], Engine] | None = None
    embedder_factory: Callable[[Settings], Embedder] | None = None
    items: list[WorkItem] = field(default_factory=list)
    workload_source: str = ""
    model_args: list[str] = field(default_factory=list)  # passed on to spawned `prefcall serve`
    raw: dict[str, Any] | None = None  # raw llama.cpp throughput, measured once by the limit section
    _engine: Engine | None = None
    _embedder: Embedder | None = None
    _catalogue: Catalogue | None = None

    def __post_init__(self) -> None:
        if not self.items:
            self.items, self.workload_source = load_workload()

    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = self.new_engine()
        return self._engine

    def new_engine(self) -> Engine:
        """A fresh engine with an empty KV cache (for cold measurements)."""
        if self.engine_factory is not None:
            return self.engine_factory(self.settings)
        from prefcall.engine import load_engine

        return load_engine(self.settings)

    def embedder(self) -> Embedder:
        if self._embedder is None:
            if self.embedder_factory is not None:
                self._embedder = self.embedder_factory(self.settings)
            else:
                from prefcall.engine import load_embedder

                self._embedder = load_embedder(self.settings)
        return self._embedder

    def catalogue(self) -> Catalogue:
        if self._catalogue is None:
            self._catalogue = builtin_catalogue("nlsi")
        return self._catalogue

    def item(self, i: int) -> WorkItem:
        return self.items[i % len(self.items)]

    def same_function_pairs(self) -> list[tuple[WorkItem, WorkItem]]:
        """Pairs of different requests whose gold call uses the same function (prefix-reuse: warm stage 2 too)."""
        by_function: dict[str, list[WorkItem]] = {}
        for item in self.items:
            by_function.setdefault(item.function, []).append(item)
        pairs = [(group[0], group[1]) for group in by_function.values() if len(group) >= 2]
        return pairs or [(self.items[0], self.items[-1])]

    def close(self) -> None:
        for thing in (self._engine,):
            close = getattr(thing, "close", None)
            if callable(close):
                close()
        self._engine = None
