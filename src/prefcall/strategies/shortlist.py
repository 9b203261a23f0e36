"""A shortlist for large catalogues: only the tools a request could be about reach the model's prompt.

MCP hosts that connect several servers list 50 to 1000 tools; every model-scored step (NLT's YES/NO in score mode,
stage 1 of parse_request, clarify's decision prompt) lists the tools it decides between in one prompt, which then
outgrows the context and costs time in proportion to the catalogue. Here the tools are ranked against the request
by `retrieval.hybrid.HybridIndex` (BM25 over "name: description" fused with the embedder's cosine, reciprocal-rank
fusion; BM25 alone without an embedder), and the best `size` of them are kept, in catalogue order, so that two
requests with the same shortlist share the prompt's prefix (and its content-free calibration, which is cached per
listing). A catalogue no larger than `size` whose prompt fits is left as it is: no retrieval, the same prompt as
without a shortlist.

The kept list is then trimmed, worst-ranked first, until the step's prompt fits the model's context with
`reserve` tokens to spare (`fits`). Only when a single tool does not fit does the engine's ContextOverflowError
reach the caller: then the request itself is too long.

A catalogue of up to `WHOLE_UP_TO` tools is listed whole (every catalogue the shipped fits were made on has at
most 30). The shortlist's size and the fusion's dense weight are fitted per embedder by `prefcall fit --shortlist`
(data/shortlist.json; evaluation/fit_shortlist.py: the smallest size whose recall@k on the tune requests ranked
against the committed 200-tool catalogue is within 0.01 of the best); a caller's size (PREFCALL_SHORTLIST_SIZE)
overrides it. `prefcall bench --only catalogue` reports recall@k and latency at 10, 50 and 200 tools.

A shortlist's listing changes with every request. A model's NLT rule can instead ask page by page (`paged`): the
catalogue is cut once into pages of similar tools (`pages`), and the pages that hold the best-ranked tools are
asked, each listed on its own (`paged`); the pages' size and number are fitted for the embedder by recall (`prefcall
fit --shortlist`) or for the model on its own answers (`prefcall fit --nlt --large-lists --paged --pages`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import lru_cache
from importlib import resources
from typing import TypeVar

import numpy as np
from pydantic import BaseModel

from prefcall.engine.base import Embedder, Engine, Prompt
from prefcall.retrieval.hybrid import HybridIndex
from prefcall.retrieval.vectors import TOOL_VECTORS
from prefcall.schemas.model import Catalogue, Function
from prefcall.strategies.relevance import function_text

# A catalogue of up to this many tools is listed whole when its prompt fits: every catalogue the shipped fits were
# fitted on (NLSI 17, SGD 30, the corpus 16 functions) is, so their figures do not move.
WHOLE_UP_TO = 32
# Without a fitted rule for the embedder: the shortlist's size and the fusion's weight of the dense ranking.
SHORTLIST_SIZE = 32
DENSE_WEIGHT = 0.5
# Without a fitted rule for the embedder: pages of this many tools, those of this many best-ranked tools asked.
PAGE_SIZE = 10
PAGE_SEEDS = 4
RULES_FILE = "shortlist.json"
# Tokens a prompt must leave free in the context: the candidates scored after it and a short answer.
CONTEXT_RESERVE = 256

T = TypeVar("T")


class Shortlist(BaseModel):
    """Which tools reached the model: `kept` in catalogue order, `ranked` best first (empty when no retrieval
    ran), `total` the catalogue's size, `trimmed` how many the context budget took off the `size` best."""

    kept: list[str]
    ranked: list[str] = []
    total: int
    size: int
    trimmed: int = 0
    pages: int = 0  # asked page by page (`paged`): how many pages of similar tools; 0: one shortlist

    @property
    def applied(self) -> bool:
        return len(self.kept) < self.total

    def describe(self) -> str:
        if not self.applied:
            return f"all {self.total} tools"
        if self.pages:
            return (f"{len(self.kept)} of {self.total} tools on {self.pages} page(s) of similar tools (pages of "
                    f"{self.size}), those of the {len(self.ranked)} best retrieved")
        trimmed = f", {self.trimmed} more left out to fit the context" if self.trimmed else ""
        return f"{len(self.kept)} of {self.total} tools shortlisted by retrieval (size {self.size}{trimmed})"


class ShortlistRule(BaseModel):
    """How large catalogues are shortlisted with one embedder (fitted by `prefcall fit --shortlist`)."""

    size: int = SHORTLIST_SIZE
    dense_weight: float = DENSE_WEIGHT
    page_size: int = PAGE_SIZE
    page_seeds: int = PAGE_SEEDS
    source: str = "default (no shortlist fitted for this embedder)"


@lru_cache(maxsize=1)
def _packaged_rules() -> dict[str, dict]:
    text = resources.files("prefcall").joinpath("data", RULES_FILE).read_text(encoding="utf-8")
    return {k: v for k, v in json.loads(text).items() if not k.startswith("_")}


def rule_for(embedder: Embedder | None, size: int | None = None) -> ShortlistRule:
    """The rule fitted for this embedder (BM25 alone without one), with the caller's size when given."""
    found = _packaged_rules().get(embedder.name) if embedder is not None else None
    pages = (found.get("pages") or {}) if found else {}
    rule = ShortlistRule.model_validate(
        {k: found[k] for k in ("size", "dense_weight") if k in found}
        | {f"page_{k}": pages[k] for k in ("size", "seeds") if k in pages}
        | {"source": f"fitted for {embedder.name}: {found.get('source', {}).get('command', '')}"}) \
        if found and embedder is not None else ShortlistRule()
    return rule.model_copy(update={"size": size}) if size is not None else rule


def rank(texts: Sequence[str], query: str, embedder: Embedder | None,
         dense_weight: float = DENSE_WEIGHT) -> list[int]:
    """Indices of `texts`, best match for `query` first: the hybrid index's fused order, then (for tools no
    method ranked: no shared word and outside the dense pool) catalogue order."""
    vectors = TOOL_VECTORS.get(embedder, list(texts)) if embedder is not None and texts else None
    index = HybridIndex(texts, embedder, vectors=vectors, pool=max(100, 4 * SHORTLIST_SIZE),
                        dense_weight=dense_weight)
    ranked = [hit.index for hit in index.search(query, k=len(texts))] if query.strip() else []
    seen = set(ranked)
    return ranked + [i for i in range(len(texts)) if i not in seen]


def shortlist(items: Sequence[T], texts: Sequence[str], query: str, embedder: Embedder | None, size: int | None,
              fits: Callable[[list[T]], bool] | None = None, names: Sequence[str] | None = None) -> tuple[list[T], Shortlist]:
    """The items to show the model, in their own order, and what was done. `texts` describe the items (same
    order); `fits(kept)` says whether the step's prompt with those items fits the context; `size` None: the size
    fitted for the embedder."""
    rule = rule_for(embedder, size)
    size = rule.size
    labels = list(names) if names is not None else [str(i) for i in range(len(items))]
    everything = list(items)
    if len(everything) <= max(size, WHOLE_UP_TO) and (fits is None or fits(everything)):
        return everything, Shortlist(kept=labels, total=len(everything), size=size)
    order = rank(texts, query, embedder, rule.dense_weight)
    best = order[:max(1, size)]

    def keep(n: int) -> list[int]:
        return sorted(best[:n])

    n = len(best)
    if fits is not None and not fits([everything[i] for i in keep(n)]):
        low, high = 1, n - 1  # the largest n whose prompt fits; 1 when none does (the engine then says why)
        while low < high:
            middle = (low + high + 1) // 2
            if fits([everything[i] for i in keep(middle)]):
                low = middle
            else:
                high = middle - 1
        n = low
    kept = keep(n)
    return [everything[i] for i in kept], Shortlist(kept=[labels[i] for i in kept],
                                                    ranked=[labels[i] for i in best[:n]], total=len(everything),
                                                    size=size, trimmed=len(best) - n)


def pages(texts: Sequence[str], embedder: Embedder, size: int) -> list[list[int]]:
    """The catalogue cut into pages of at most `size` similar tools, the same for every request: the first tool on
    no page yet opens the next one with the `size - 1` tools on no page most similar to it (the embedder's cosine
    of their texts, ties in catalogue order); each page in catalogue order, the pages in the order they opened."""
    vectors = np.asarray(TOOL_VECTORS.get(embedder, list(texts)), dtype=np.float32)
    left = list(range(len(texts)))
    out: list[list[int]] = []
    while left:
        similarity = vectors[left] @ vectors[left[0]]
        page = sorted(left[i] for i in np.argsort(-similarity, kind="stable")[:max(1, size)])
        out.append(page)
        taken = set(page)
        left = [i for i in left if i not in taken]
    return out


def pages_holding(order: Sequence[int], partition: Sequence[Sequence[int]], seeds: int) -> list[int]:
    """The pages of `partition` (indices into it) that hold the first `seeds` items of `order`, best first."""
    page_of = {i: k for k, page in enumerate(partition) for i in page}
    chosen: list[int] = []
    for i in order[:max(1, seeds)]:
        if page_of[i] not in chosen:
            chosen.append(page_of[i])
    return chosen


def paged(items: Sequence[T], texts: Sequence[str], query: str, embedder: Embedder, size: int | None = None,
          seeds: int | None = None, fits: Callable[[list[T]], bool] | None = None, names: Sequence[str] | None = None,
          dense_weight: float | None = None) -> tuple[list[list[T]], Shortlist] | None:
    """A large list asked page by page: the pages (`pages`, of `size` tools) that hold the `seeds` tools retrieval
    ranks best for the request (`rank`), best first (`size` or `seeds` None: as fitted for the embedder,
    ShortlistRule). Every page is the same for every request, so its prompt's prefix and its content-free
    calibration are reused, and a tool is asked about beside the same neighbours whatever the request. None when a
    page's prompt does not fit (`fits`): the caller shortlists instead."""
    labels = list(names) if names is not None else [str(i) for i in range(len(items))]
    rule = rule_for(embedder)
    size, seeds = rule.page_size if size is None else size, rule.page_seeds if seeds is None else seeds
    order = rank(texts, query, embedder, rule.dense_weight if dense_weight is None else dense_weight)
    partition = pages(texts, embedder, size)
    chosen = pages_holding(order, partition, seeds)
    groups = [[items[i] for i in partition[k]] for k in chosen]
    if fits is not None and not all(fits(group) for group in groups):
        return None
    kept = sorted(i for k in chosen for i in partition[k])
    return groups, Shortlist(kept=[labels[i] for i in kept], ranked=[labels[i] for i in order[:max(1, seeds)]],
                             total=len(items), size=size, pages=len(chosen))


def fits_context(engine: Engine, reserve: int = CONTEXT_RESERVE) -> Callable[[Prompt], bool]:
    """Whether a prompt leaves `reserve` tokens of the engine's context free."""
    n_ctx = engine.info.n_ctx

    def check(prompt: Prompt) -> bool:
        return engine.prompt_tokens(prompt) + reserve <= n_ctx

    return check


def shortlist_catalogue(catalogue: Catalogue, query: str, embedder: Embedder | None, size: int | None,
                        fits: Callable[[Catalogue], bool] | None = None) -> tuple[Catalogue, Shortlist]:
    """The catalogue with only its shortlisted functions (same name and description, functions in their order)."""
    def sub(functions: list[Function]) -> Catalogue:
        return catalogue.model_copy(update={"functions": functions})

    kept, report = shortlist(catalogue.functions, [function_text(f.name, f.description) for f in catalogue.functions],
                             query, embedder, size, (lambda fs: fits(sub(fs))) if fits is not None else None,
                             names=catalogue.names)
    return (catalogue if not report.applied else sub(kept)), report


def recall_at(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    """Share of the gold tools among the first k ranked (1.0 when there is no gold tool)."""
    if not gold:
        return 1.0
    top = set(ranked[:k])
    return float(np.mean([g in top for g in gold]))
