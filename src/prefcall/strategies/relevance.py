"""Does a function fit the request at all? Cosine similarity of the user's words and the function's text.

The grounded pipeline asks this before it asks the user for missing arguments: an `ask` for a function the
request is not about (BFCL's irrelevance set: "What's the time right now?" against `calculate_time`, "the
freezing point of water" against a boiling-point function) is the wrong question, and a refusal is right.
Only the embedder's similarity is used, not the language model's YES/NO: on the tuning items the embedded
SmolLM2's calibrated YES/NO log-odds separate fitting from unfitting functions with AUC 0.70, the embedder's
cosine with AUC 0.96 (scripts/fit_relevance.py; docs/results-history.md). The threshold is fitted per embedder
(`data/relevance.json`); an embedder without one never turns an ask into a refusal.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources

import numpy as np
from pydantic import BaseModel

from prefcall.engine.base import Embedder
from prefcall.retrieval.text import humanise
from prefcall.schemas.model import Function

RULES_FILE = "relevance.json"


class RelevanceRule(BaseModel):
    """Below `threshold`, no selected function fits the request well enough to ask for its arguments."""

    embedder: str
    threshold: float
    source: str = ""


def function_text(name: str, description: str) -> str:
    return f"{humanise(name)}: {description}".strip()


def similarities(embedder: Embedder, request: str, functions: Sequence[Function]) -> dict[str, float]:
    """Cosine of the request with each function's "humanised name: description" (the embedder normalises)."""
    if not functions:
        return {}
    vectors = np.asarray(embedder.embed([request] + [function_text(f.name, f.description) for f in functions]))
    return {f.name: float(vectors[0] @ vectors[i + 1]) for i, f in enumerate(functions)}


@lru_cache(maxsize=1)
def _packaged() -> dict[str, dict]:
    text = resources.files("prefcall").joinpath("data", RULES_FILE).read_text(encoding="utf-8")
    return {k: v for k, v in json.loads(text).items() if not k.startswith("_")}


def ask_rule(embedder: Embedder | None) -> RelevanceRule | None:
    """The fitted rule for this embedder (by its folder name), or None: then asks are never turned into refusals."""
    if embedder is None:
        return None
    found = _packaged().get(embedder.name)
    return RelevanceRule(embedder=embedder.name, **found) if found else None


class Unrelated(BaseModel):
    """Every function is under the fitted threshold: the closest one, its similarity and the rule."""

    closest: str
    similarity: float
    rule: RelevanceRule

    def describe(self) -> str:
        return f"closest {self.closest}: similarity {self.similarity:.2f} < {self.rule.threshold:.2f}, {self.rule.embedder}"


def unrelated(embedder: Embedder | None, request: str, functions: Sequence[Function],
              scores: dict[str, float] | None = None) -> Unrelated | None:
    """The request is not about any of `functions` (all under the embedder's fitted threshold); None when one
    clears it, or when there is no embedder, fitted rule, function or request text. `scores` reuses similarities
    already computed for these functions."""
    rule = ask_rule(embedder)
    if rule is None or embedder is None or not functions or not request.strip():
        return None
    if scores is None or any(f.name not in scores for f in functions):
        scores = similarities(embedder, request, functions)
    best = max((f.name for f in functions), key=lambda name: scores[name])
    return None if scores[best] >= rule.threshold else Unrelated(closest=best, similarity=scores[best], rule=rule)
