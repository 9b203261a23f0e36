"""Retrieval scaling: BM25, dense and fused latency (p50/p95) with 1k, 10k and 100k demonstrations.

Demonstrations are synthesised by recombining NLSI-like templates (a request plus two standing
instructions). At 1k every document is embedded with the real embedder; at 10k and 100k the dense part
uses random unit vectors of the embedder's dimension, so that building the index stays affordable on two
cores (a matrix-vector product costs the same whatever the vectors hold). Queries always go through the
real embedder in the end-to-end figure.
"""

from __future__ import annotations

import gc
import random
import time
from typing import Any

import numpy as np

from prefcall.bench.context import BenchContext, all_instruction_texts
from prefcall.bench.stats import rss_bytes, summarize, target

SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (1_000,)
TOP_K = 20
EMBED_FOR_REAL_UP_TO = 1_000


def synthesize_demonstrations(n: int, utterances: list[str], instructions: list[str], seed: int = 0) -> list[str]:
    """n demonstration search texts: a request and two standing instructions, recombined at random."""
    if not utterances or not instructions:
        raise ValueError("need at least one utterance and one instruction to synthesise demonstrations")
    rng = random.Random(seed)
    return [f"{rng.choice(utterances)}\n{rng.choice(instructions)}\n{rng.choice(instructions)}" for _ in range(n)]


def random_unit_vectors(n: int, dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def _latencies(fn, queries: list[Any]) -> list[float]:
    out = []
    for q in queries:
        started = time.perf_counter()
        fn(q)
        out.append(time.perf_counter() - started)
    return out


def measure_size(ctx: BenchContext, n: int, utterances: list[str], instructions: list[str],
                 queries: list[str], query_vectors: np.ndarray, warmup: int) -> dict[str, Any]:
    from prefcall.retrieval.hybrid import HybridIndex, top_indices

    embedder = ctx.embedder()
    texts = synthesize_demonstrations(n, utterances, instructions, seed=n)
    gc.collect()
    rss_before = rss_bytes()
    started = time.perf_counter()
    real = n <= EMBED_FOR_REAL_UP_TO
    vectors = (np.asarray(embedder.embed(texts), dtype=np.float32) if real
               else random_unit_vectors(n, query_vectors.shape[1], seed=n))
    embed_seconds = time.perf_counter() - started
    started = time.perf_counter()
    index = HybridIndex(texts, embedder, vectors=vectors)
    index.dense.matrix()  # concatenate now, not inside the first query
    build_seconds = time.perf_counter() - started
    rss_after = rss_bytes()
    del vectors

    pairs = list(zip(queries, query_vectors))
    for q, v in pairs[:warmup]:  # first use of a term freezes its postings into arrays: a one-off cost
        index.search(q, TOP_K, query_vector=v)
    measured = pairs[warmup:]
    bm25 = _latencies(lambda p: top_indices(index.bm25.scores(p[0]), TOP_K), measured)
    dense = _latencies(lambda p: top_indices(index.dense.scores(p[1]), TOP_K), measured)
    fused = _latencies(lambda p: index.search(p[0], TOP_K, query_vector=p[1]), measured)
    end_to_end = _latencies(lambda p: index.search(p[0], TOP_K), measured)  # includes embedding the query
    result = {
        "documents": n, "dense_vectors": "embedded" if real else "random unit vectors",
        "embed_seconds": round(embed_seconds, 3), "build_seconds": round(build_seconds, 3),
        "rss_delta_mb": round((rss_after - rss_before) / 2**20, 1) if rss_before and rss_after else None,
        "latency_ms": {"bm25": summarize(bm25, scale=1000), "dense": summarize(dense, scale=1000),
                       "fused": summarize(fused, scale=1000), "fused_with_query_embedding": summarize(end_to_end, scale=1000)},
    }
    del index, texts
    gc.collect()
    return result


def section_retrieval(ctx: BenchContext) -> dict[str, Any]:
    sizes = QUICK_SIZES if ctx.quick else SIZES
    utterances = [item.utterance for item in ctx.items]
    instructions = all_instruction_texts()
    n_queries = 20 if ctx.quick else 100
    rng = random.Random(7)
    queries = [f"{rng.choice(utterances)} {rng.choice(instructions)}" for _ in range(n_queries)]
    warmup = 5 if ctx.quick else 20
    embedder = ctx.embedder()
    started = time.perf_counter()
    query_vectors = np.asarray(embedder.embed(queries), dtype=np.float32)
    embed_batch = time.perf_counter() - started
    single = _latencies(lambda q: embedder.embed([q]), queries[: min(20, len(queries))])
    figures: dict[str, Any] = {"embedder": embedder.name, "dim": int(query_vectors.shape[1]), "top_k": TOP_K,
                               "queries": n_queries - warmup, "warmup_queries": warmup,
                               "query_embedding_ms": summarize(single, scale=1000),
                               "query_embedding_batch_ms_per_query": round(embed_batch / n_queries * 1000, 3),
                               "sizes": {}}
    for n in sizes:
        ctx.log(f"bench: retrieval with {n} demonstrations ...")
        figures["sizes"][str(n)] = measure_size(ctx, n, utterances, instructions, queries, query_vectors, warmup)
    largest = figures["sizes"][str(sizes[-1])]["latency_ms"]
    targets = [target(f"retrieval: fused p95 at {sizes[-1]} (ms, query embedding included)",
                      largest["fused_with_query_embedding"].get("p95"), 50.0, unit="ms"),
               target(f"retrieval: fused p95 at {sizes[-1]} (ms, precomputed query vector)",
                      largest["fused"].get("p95"), 50.0, unit="ms")]
    headline = []
    for n, s in figures["sizes"].items():
        lat = s["latency_ms"]
        headline += [(f"{n}: bm25/dense/fused p95 ms",
                      f"{lat['bm25'].get('p95')}/{lat['dense'].get('p95')}/{lat['fused'].get('p95')}"),
                     (f"{n}: fused+embed p95 ms", lat["fused_with_query_embedding"].get("p95")),
                     (f"{n}: build s / MB", f"{s['build_seconds']} / {s['rss_delta_mb']}")]
    return {"figures": figures, "targets": targets, "headline": headline}
