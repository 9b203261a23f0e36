"""`prefcall fit --shortlist`: the shortlist size for large catalogues, per embedder (strategies/shortlist.py).

Every tune request of the frozen split that names a function of the committed 200-tool catalogue
(tests/data/catalogue200) is ranked against all 200 tools, as a large catalogue's shortlist ranks them: the
catalogue's own requests (tests/data/nlt2's ide, home and telecom items on the tune side), the corpus's tune items
and, with ../shared/data, NLSI dev's tune items (their first gold call's function). The fitted size is the smallest
k whose recall@k (the share of the requests' gold tools among the first k) is within `TOLERANCE` of the best
recall any size of the grid reaches, and the fusion's dense weight is the one that reaches it with the smallest k
(then the higher recall there); the report parts are not read. Both depend on the embedder (it ranks), not on the
language model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from prefcall.engine.base import Embedder
from prefcall.errors import ConfigError
from prefcall.evaluation import splits
from prefcall.evaluation.data import checkout_file
from prefcall.evaluation.metrics.calls import calls_from_any
from prefcall.schemas.model import Catalogue, Function
from prefcall.strategies.relevance import function_text
from prefcall.strategies.shortlist import DENSE_WEIGHT, rank, recall_at

CATALOGUE = "tests/data/catalogue200/catalogue.json"
REQUESTS = "tests/data/catalogue200/requests.jsonl"
NLT2 = "tests/data/nlt2/items.jsonl"
GRID = (4, 6, 8, 10, 12, 16, 20, 24, 32)
DENSE_WEIGHTS = (0.5, 0.7, 0.85, 1.0)
TOLERANCE = 0.01


class Request(BaseModel):
    source: str
    id: str
    text: str
    gold: list[str]


# Pages (strategies.shortlist.paged): the page sizes and the numbers of best-ranked tools whose pages are asked.
PAGE_SIZES = (8, 10, 12, 16)
PAGE_SEEDS = (1, 2, 3, 4)


class PageFit(BaseModel):
    """How a large list is cut into pages and how many pages a request is asked about: the geometry asking the
    fewest tools on average whose recall (the share of the requests' gold tools on the pages asked) is within the
    tolerance of the shortlist's recall at its fitted size."""

    size: int
    seeds: int
    recall: float
    asked: float  # tools asked about per request, on average
    grid: dict[str, dict[str, float]]  # "size/seeds" -> {"recall", "asked"}


class ShortlistFit(BaseModel):
    embedder: str
    size: int
    dense_weight: float
    recall: dict[int, float]  # recall@k on the tune requests, per size of the grid, at the fitted dense weight
    by_weight: dict[float, dict[int, float]]
    per_source: dict[str, dict[int, float]]
    requests: dict[str, int]
    tolerance: float = TOLERANCE
    pages: PageFit | None = None  # with an embedder (pages are cut by its cosine)


def load_catalogue() -> Catalogue:
    return load()[0]


def load() -> tuple[Catalogue, dict[str, str], list[dict[str, Any]]]:
    """tests/data/catalogue200: the catalogue, each tool's block (its domain) and the requests."""
    raw = json.loads(checkout_file(CATALOGUE).read_text(encoding="utf-8"))
    catalogue = Catalogue(name=raw["name"], description=raw["description"],
                          functions=[Function.model_validate(f) for f in raw["functions"]])
    requests = [json.loads(line) for line in checkout_file(REQUESTS).read_text(encoding="utf-8").splitlines()
                if line.strip()]
    return catalogue, raw["blocks"], requests


def sized(catalogue: Catalogue, blocks: dict[str, str], block: str, n: int) -> Catalogue:
    """A request's N-tool catalogue: its block, then the first n - len(block) others, in catalogue order."""
    own = [f for f in catalogue.functions if blocks[f.name] == block]
    others = [f for f in catalogue.functions if blocks[f.name] != block][: max(0, n - len(own))]
    return catalogue.model_copy(update={"name": f"{catalogue.name}-{block}-{n}", "functions": own + others})


def split_side(request_id: str, part: str) -> bool:
    """Whether a catalogue200 request (an nlt2 item) is on this part of the frozen split."""
    found = splits.source_of(checkout_file(NLT2))
    if found is None:
        raise ConfigError(f"{NLT2} is not a source of the split file: rebuild it with `prefcall split build`")
    return request_id in found[1].part(part)


def tune_requests(catalogue: Catalogue, sources: Sequence[str] = ("catalogue200", "corpus", "nlsi"),
                  part: str = "tune") -> list[Request]:
    """The requests of one part of the frozen split (`part`: tune, what the fit reads; report, what the bench
    reports) that name a function of the catalogue, per source, in file order."""
    from prefcall.evaluation import fit

    names = set(catalogue.names)
    out: list[Request] = []
    if "catalogue200" in sources:
        found = splits.source_of(checkout_file(NLT2))
        if found is None:
            raise ConfigError(f"{NLT2} is not a source of the split file: rebuild it with `prefcall split build`")
        keep = found[1].part(part)
        for line in checkout_file(REQUESTS).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row["id"] in keep and row["expected"]:
                text = " ".join(m["content"] for m in row["messages"][-3:] if m["role"] == "user")
                out.append(Request(source="catalogue200", id=row["id"], text=text, gold=list(row["expected"])))
    for source in (s for s in ("corpus", "nlsi") if s in sources):
        try:
            items = fit.tune_items([source], part=part)
        except (ConfigError, OSError):
            if source == "nlsi":  # ../shared/data absent: fit on what the repository has
                continue
            raise
        for item in items:
            calls = calls_from_any(item.gold)
            if calls and calls[0].name in names:
                text = "\n".join(line.split(":", 1)[1].strip() for line in item.dialogue.splitlines()
                                 if line.startswith("User:")) or item.dialogue
                out.append(Request(source=source, id=item.id, text=text, gold=[calls[0].name]))
    return out


def recall_curve(catalogue: Catalogue, requests: Sequence[Request], embedder: Embedder | None,
                 grid: Sequence[int] = GRID, dense_weight: float = DENSE_WEIGHT) -> tuple[dict[int, float],
                                                                                       dict[str, dict[int, float]]]:
    """Mean recall@k over the requests, pooled and per source."""
    texts = [function_text(f.name, f.description) for f in catalogue.functions]
    hits: dict[str, dict[int, list[float]]] = {}
    for request in requests:
        order = [catalogue.functions[i].name for i in rank(texts, request.text, embedder, dense_weight)]
        for k in grid:
            hits.setdefault(request.source, {}).setdefault(k, []).append(recall_at(order, request.gold, k))
    per_source = {s: {k: round(sum(v) / len(v), 4) for k, v in by_k.items()} for s, by_k in hits.items()}
    pooled = {k: round(sum(sum(by_k[k]) for by_k in hits.values()) / max(1, len(requests)), 4) for k in grid}
    return pooled, per_source


def page_curve(catalogue: Catalogue, requests: Sequence[Request], embedder: Embedder, dense_weight: float,
               sizes: Sequence[int] = PAGE_SIZES, seeds: Sequence[int] = PAGE_SEEDS
               ) -> dict[tuple[int, int], tuple[float, float]]:
    """(page size, seeds) -> (mean recall of the pages asked, mean tools asked) over the requests, as
    strategies.shortlist.paged asks them: each request ranked once, the catalogue cut once per page size."""
    from prefcall.strategies.shortlist import pages, pages_holding

    names = catalogue.names
    texts = [function_text(f.name, f.description) for f in catalogue.functions]
    orders = [rank(texts, request.text, embedder, dense_weight) for request in requests]
    out: dict[tuple[int, int], tuple[float, float]] = {}
    for size in sizes:
        partition = pages(texts, embedder, size)
        for seed in seeds:
            recall, asked = [], []
            for request, order in zip(requests, orders):
                kept = [names[i] for k in pages_holding(order, partition, seed) for i in partition[k]]
                recall.append(recall_at(kept, request.gold, len(kept)))
                asked.append(len(kept))
            out[(size, seed)] = (round(sum(recall) / len(recall), 4), round(sum(asked) / len(asked), 2))
    return out


def fit_pages(curve: dict[tuple[int, int], tuple[float, float]], floor: float) -> PageFit:
    """The geometry asking the fewest tools whose recall reaches `floor` (ties: the higher recall, then the smaller
    page); the best recall where none does."""
    reaching = [key for key, (recall, _) in curve.items() if recall >= floor] or \
        [max(curve, key=lambda key: curve[key][0])]
    size, seeds = min(reaching, key=lambda key: (curve[key][1], -curve[key][0], key[0]))
    return PageFit(size=size, seeds=seeds, recall=curve[(size, seeds)][0], asked=curve[(size, seeds)][1],
                   grid={f"{k[0]}/{k[1]}": {"recall": r, "asked": a} for k, (r, a) in curve.items()})


def fit_size(curves: dict[float, dict[int, float]], tolerance: float = TOLERANCE) -> tuple[float, int]:
    """(dense weight, size): the smallest size whose recall, at some weight, is within `tolerance` of the best any
    weight and size reach; among weights reaching it there, the higher recall, then the lower weight."""
    best = max(r for curve in curves.values() for r in curve.values())
    size = min(k for curve in curves.values() for k, r in curve.items() if r >= best - tolerance)
    weight = max((w for w, curve in curves.items() if curve.get(size, 0.0) >= best - tolerance),
                 key=lambda w: (curves[w][size], -w))
    return weight, size


def fit(embedder: Embedder | None, sources: Sequence[str] = ("catalogue200", "corpus", "nlsi")) -> ShortlistFit:
    catalogue = load_catalogue()
    requests = tune_requests(catalogue, sources)
    if not requests:
        raise ConfigError("no tune request names a function of tests/data/catalogue200: run from a source checkout")
    weights = DENSE_WEIGHTS if embedder is not None else (0.0,)
    curves = {w: recall_curve(catalogue, requests, embedder, dense_weight=w) for w in weights}
    weight, size = fit_size({w: pooled for w, (pooled, _) in curves.items()})
    counts: dict[str, int] = {}
    for request in requests:
        counts[request.source] = counts.get(request.source, 0) + 1
    pages = fit_pages(page_curve(catalogue, requests, embedder, weight), curves[weight][0][size] - TOLERANCE) \
        if embedder is not None else None
    return ShortlistFit(embedder=embedder.name if embedder is not None else "bm25", size=size, dense_weight=weight,
                        recall=curves[weight][0], by_weight={w: pooled for w, (pooled, _) in curves.items()},
                        per_source=curves[weight][1], requests=counts, pages=pages)


def rules_file(base: dict[str, Any], fitted: ShortlistFit, note: dict[str, Any]) -> dict[str, Any]:
    """shortlist.json with this embedder's size (other embedders' entries kept)."""
    out = dict(base)
    out[fitted.embedder] = {"size": fitted.size, "dense_weight": fitted.dense_weight,
                            "recall_tune": {str(k): v for k, v in fitted.recall.items()},
                            **({"pages": fitted.pages.model_dump()} if fitted.pages is not None else {}),
                            "tolerance": fitted.tolerance, "requests": fitted.requests, "source": note}
    return out


def write(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
