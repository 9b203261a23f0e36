"""prefcall's catalogue of recommended GGUF chat models (package data `data/models.json`).

A short name from it (`qwen2.5-1.5b`) works wherever a model is named. `sha256` is set only where the hash
was computed from the file itself; other entries are checked against the hub's LFS hash at download time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class RecommendedModel:
    name: str
    title: str
    params: str
    source: str  # "hf" | "embedded"
    repo: str
    file: str
    licence: str
    revision: str = "main"
    quantisation: str | None = None
    size: int | None = None  # bytes, exact when verified
    size_approx: str | None = None
    sha256: str | None = None  # pinned; only where computed from the file
    notes: str = ""
    measured: dict[str, Any] = field(default_factory=dict)  # smoke suite / eval figures, with their source

    @property
    def verified(self) -> bool:
        return self.sha256 is not None

    @property
    def reference(self) -> str:
        if self.source == "embedded":
            return "embedded"
        revision = f"@{self.revision}" if self.revision and self.revision != "main" else ""
        return f"hf:{self.repo}/{self.file}{revision}"


@lru_cache(maxsize=1)
def recommended_models() -> tuple[RecommendedModel, ...]:
    raw = json.loads((resources.files("prefcall") / "data" / "models.json").read_text(encoding="utf-8"))
    fields = set(RecommendedModel.__dataclass_fields__)
    return tuple(RecommendedModel(**{k: v for k, v in item.items() if k in fields}) for item in raw["models"])


def find_recommended(name: str) -> RecommendedModel | None:
    key = name.strip().lower()
    return next((m for m in recommended_models() if m.name == key), None)


def recommended_for_file(repo: str, filename: str) -> RecommendedModel | None:
    """The catalogue entry for a hub file, so that `pull hf:...` of a pinned file also checks the pin."""
    return next(
        (m for m in recommended_models() if m.source == "hf" and m.repo.lower() == repo.lower() and m.file == filename),
        None,
    )


def recommended_for_sha256(digest: str) -> RecommendedModel | None:
    """The pinned catalogue entry with this SHA-256 (Ollama and the HF cache name blobs by their hash)."""
    digest = digest.lower().removeprefix("sha256-").removeprefix("sha256:")
    return next((m for m in recommended_models() if m.sha256 == digest), None)
