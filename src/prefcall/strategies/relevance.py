"""Does a function fit the request at all? Cosine similarity of the user's words and the function's text.

The grounded pipeline refuses a request that no function of the catalogue fits (BFCL's irrelevance set: "What's
the time right now?" against `calculate_time`). Two rules decide, from relevance evidence only, never from what the
filler could fill:

- A model with a fitted rule (`prefcall fit --relevance`, stored with its fit; strategies.fnctod.AbstentionRule)
  decides at stage 1 from this cosine and the model's own score of "None".
- Otherwise the embedder's threshold here (`data/relevance.json`, fitted by `prefcall fit --relevance
  --embedder-only` on the tune requests of every source, keeping 98% of the relevant ones and 95% of each
  source's): a request whose cosine with every function of the catalogue is under it is refused. The config field
  `relevance_scope` says which answers it reads. An embedder without a threshold never turns an answer into a
  refusal.
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
from prefcall.retrieval.vectors import TOOL_VECTORS
from prefcall.schemas.model import Function

RULES_FILE = "relevance.json"


class RelevanceRule(BaseModel):
    """Below `threshold`, no function of the catalogue fits the request."""

    embedder: str
    threshold: float
    source: str = ""


def function_text(name: str, description: str) -> str:
    return f"{humanise(name)}: {description}".strip()


def similarities(embedder: Embedder, request: str, functions: Sequence[Function]) -> dict[str, float]:
    """Cosine of the request with each function's "humanised name: description" (the embedder normalises)."""
    if not functions:
        return {}
    tools = TOOL_VECTORS.get(embedder, [function_text(f.name, f.description) for f in functions])
    query = np.asarray(embedder.embed([request]), dtype=np.float32)[0]
    return {f.name: float(v) for f, v in zip(functions, tools @ query)}


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
