"""Does a function fit the request at all? Cosine similarity of the user's words and the function's text.

The grounded pipeline refuses a request that no function of the catalogue fits (BFCL's irrelevance set: "What's
the time right now?" against `calculate_time`). Two rules decide, from relevance evidence only, never from what the
filler could fill:

- A model with a fitted rule (`prefcall fit --relevance`, stored with its fit; strategies.fnctod.AbstentionRule)
  decides at stage 1 from this cosine and the model's own score of "None".
- Otherwise the embedder's rule here (`data/relevance.json`, fitted by `prefcall fit --relevance
  --embedder-only` on the tune requests of every source, keeping 98% of the relevant ones and 95% of each
  source's): a logistic score of the request's evidence (`FEATURES`: its cosines with the functions' texts, names,
  descriptions and argument texts, per sentence too, and the share of a function's words it uses) under the
  rule's threshold is refused. A rule without weights reads the best cosine alone. The config field
  `relevance_scope` says which answers it reads. An embedder without a rule never turns an answer into a refusal.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources

import numpy as np
from pydantic import BaseModel

from prefcall.engine.base import Embedder
from prefcall.errors import ConfigError
from prefcall.retrieval.text import humanise, sentences, stem, tokenize
from prefcall.retrieval.vectors import TOOL_VECTORS
from prefcall.schemas.model import Function

RULES_FILE = "relevance.json"


# The relevance evidence of one request against a catalogue (`evidence`), each the largest over the functions unless
# it says "nearest" (the function whose text is closest to the whole request): cosines of the request with a
# function's "name: description", of its best sentence with it, with the name alone, with the description alone,
# with an argument's "name: description" (any function's, the nearest one's); the share of a function's name and
# description words the request uses (any, nearest), of its name words (any, nearest), and how many it uses.
FEATURES = ("cosine", "sentence_cosine", "name_cosine", "description_cosine", "argument_cosine",
            "nearest_argument_cosine", "word_share", "name_word_share", "shared_words", "nearest_word_share",
            "nearest_name_word_share")


class RelevanceRule(BaseModel):
    """Under `threshold`, no function of the catalogue fits the request. With `weights` (bias, then one per
    FEATURES) the score is the logistic combination of the request's evidence; without, its best cosine."""

    embedder: str
    threshold: float
    weights: list[float] | None = None
    features: list[str] | None = None  # the FEATURES the weights were fitted on (stored with them)
    source: str = ""

    def score(self, evidence: Evidence) -> float:
        if self.weights is None:
            return evidence.features[0]
        if len(self.weights) != len(FEATURES) + 1 or (self.features is not None and self.features != list(FEATURES)):
            raise ConfigError(f"the relevance rule of {self.embedder} was fitted on other evidence than "
                              f"{', '.join(FEATURES)}: refit it with `prefcall fit --relevance`")
        return self.weights[0] + float(np.dot(self.weights[1:], evidence.features))


class Evidence(BaseModel):
    """FEATURES of one request against a list of functions, and the function nearest it (largest cosine)."""

    closest: str
    features: list[float]

    @property
    def cosine(self) -> float:
        return self.features[0]


def function_text(name: str, description: str) -> str:
    return f"{humanise(name)}: {description}".strip()


def similarities(embedder: Embedder, request: str, functions: Sequence[Function]) -> dict[str, float]:
    """Cosine of the request with each function's "humanised name: description" (the embedder normalises)."""
    if not functions:
        return {}
    tools = TOOL_VECTORS.get(embedder, [function_text(f.name, f.description) for f in functions])
    query = np.asarray(embedder.embed([request]), dtype=np.float32)[0]
    return {f.name: float(v) for f, v in zip(functions, tools @ query)}


def _words(text: str) -> set[str]:
    return {stem(w) for w in tokenize(text)}


def _argument_texts(function: Function) -> list[str]:
    return [f"{humanise(name)}: {spec.get('description', '') if isinstance(spec, dict) else ''}".strip()
            for name, spec in function.properties.items()]


def evidence(embedder: Embedder, request: str, functions: Sequence[Function]) -> Evidence:
    """The request's FEATURES against `functions` (non-empty). The functions' texts are embedded once per
    embedder (TOOL_VECTORS); the request and its sentences in one batch."""
    parts = sentences(request)
    texts = [request, *(parts if len(parts) > 1 else [])]
    queries = np.asarray(embedder.embed(texts), dtype=np.float32)
    query = queries[0]
    whole = TOOL_VECTORS.get(embedder, [function_text(f.name, f.description) for f in functions])
    names = TOOL_VECTORS.get(embedder, [humanise(f.name) for f in functions])
    described = TOOL_VECTORS.get(embedder, [f.description or humanise(f.name) for f in functions])
    cosines = whole @ query
    nearest = int(np.argmax(cosines))
    per_function = [_argument_texts(f) for f in functions]
    flat = [text for texts_of in per_function for text in texts_of]
    argument_cosines = TOOL_VECTORS.get(embedder, flat) @ query if flat else np.zeros(0)  # one batch
    arguments, start = [], 0
    for texts_of in per_function:
        part = argument_cosines[start:start + len(texts_of)]
        arguments.append(float(np.max(part)) if len(part) else 0.0)
        start += len(texts_of)
    asked = _words(request)
    shares = []
    for function in functions:
        own, named = _words(f"{humanise(function.name)} {function.description}"), _words(humanise(function.name))
        shares.append((len(own & asked) / max(1, len(own)), len(named & asked) / max(1, len(named)),
                       float(len(own & asked))))
    features = [float(np.max(cosines)), float(np.max(whole @ queries.T)), float(np.max(names @ query)),
                float(np.max(described @ query)), max(arguments), arguments[nearest],
                max(s[0] for s in shares), max(s[1] for s in shares), max(s[2] for s in shares),
                shares[nearest][0], shares[nearest][1]]
    return Evidence(closest=functions[nearest].name, features=features)


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
    """The request's score is under the fitted threshold: the closest function, the score and the rule."""

    closest: str
    similarity: float  # the rule's score: the best cosine for a rule without weights
    rule: RelevanceRule

    @property
    def refused(self) -> bool:
        """The score is under the rule's threshold: no function fits."""
        return self.similarity < self.rule.threshold

    def describe(self) -> str:
        what = "relevance score" if self.rule.weights is not None else "similarity"
        sign = "<" if self.refused else ">="
        return (f"closest {self.closest}: {what} {self.similarity:.2f} {sign} {self.rule.threshold:.2f}, "
                f"{self.rule.embedder}")


def judged(embedder: Embedder | None, request: str, functions: Sequence[Function],
           scores: dict[str, float] | None = None) -> Unrelated | None:
    """The request's score under the embedder's fitted rule and the function closest to it, whether or not the
    score clears the threshold; None when there is no embedder, fitted rule, function or request text. `scores`
    reuses similarities already computed for these functions (a rule without weights)."""
    rule = ask_rule(embedder)
    if rule is None or embedder is None or not functions or not request.strip():
        return None
    if rule.weights is not None:
        found = evidence(embedder, request, functions)
        return Unrelated(closest=found.closest, similarity=rule.score(found), rule=rule)
    if scores is None or any(f.name not in scores for f in functions):
        scores = similarities(embedder, request, functions)
    best = max((f.name for f in functions), key=lambda name: scores[name])
    return Unrelated(closest=best, similarity=scores[best], rule=rule)


def unrelated(embedder: Embedder | None, request: str, functions: Sequence[Function],
              scores: dict[str, float] | None = None) -> Unrelated | None:
    """The request is not about any of `functions` (its score under the embedder's fitted rule, `judged`); None
    when it clears it, or when there is nothing to judge it by."""
    found = judged(embedder, request, functions, scores)
    return found if found is not None and found.refused else None
