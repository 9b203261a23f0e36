"""Hybrid BM25 + dense retrieval, with the hashed bag-of-words FakeEmbedder."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from prefcall.engine.fake import FakeEmbedder
from prefcall.errors import ValidationError
from prefcall.retrieval.hybrid import BM25Index, HybridIndex, top_indices
from prefcall.retrieval.text import tokenize

DOCS = [
    "Find a restaurant serving Ethiopian food in San Francisco",
    "Book a flight with Delta from New York to Seattle",
    "Reserve a hotel room in Paris for two nights",
    "Play some jazz music on the living room speaker",
    "Check my savings account balance at the bank",
    "Buy tickets for the Mariners vs Rangers baseball game",
]


def test_tokenize_splits_identifiers_folds_plurals_and_drops_function_words():
    assert tokenize("GetRestaurants for the movies") == ["get", "restaurant", "movie"]
    assert tokenize("departure_date buses class cities news") == ["departure", "date", "bus", "class", "city", "news"]
    assert tokenize("I'm NOT flying") == ["not", "flying"]


class LuceneIdfOkapi(BM25Okapi):
    """rank-bm25's Okapi BM25 with Lucene's non-negative idf, the one deliberate difference of our index."""

    def _calc_idf(self, nd: dict[str, int]) -> None:
        self.idf = {word: math.log(1.0 + (self.corpus_size - freq + 0.5) / (freq + 0.5)) for word, freq in nd.items()}


def test_bm25_scores_equal_rank_bm25_as_reference_oracle():
    """rank-bm25 (a test dependency only) is the reference: same k1, b, length normalisation and scores."""
    corpus = DOCS + ["Find a cheap hotel near the airport in Seattle", "Jazz concerts in Paris this weekend",
                     "Restaurant with outdoor seating and jazz music", "Book a table for two at a Thai restaurant"]
    index = BM25Index()
    index.add(corpus)
    reference = LuceneIdfOkapi([tokenize(d) for d in corpus])
    for query in ["ethiopian restaurant", "flight to seattle", "room", "jazz in paris", "thai restaurant table",
                  "nothing matches zzz"]:
        terms = list(dict.fromkeys(tokenize(query)))  # ours scores each query term once
        np.testing.assert_allclose(index.scores(query), reference.get_scores(terms), rtol=1e-5, atol=1e-6)
    stock = BM25Okapi([tokenize(d) for d in corpus])  # rank-bm25's own idf: the same ranking on this corpus
    assert int(np.argmax(index.scores("flight to seattle"))) == int(np.argmax(stock.get_scores(tokenize("flight to seattle"))))


def test_bm25_only_returns_only_documents_sharing_a_term():
    index = HybridIndex(DOCS, embedder=None)
    hits = index.search("Ethiopian restaurant", k=5)
    assert [h.index for h in hits] == [0]
    assert hits[0].bm25 > 0 and hits[0].dense is None
    assert index.search("zzz unknown words", k=5) == []


def test_hybrid_ranks_relevant_document_first_and_reports_both_scores():
    index = HybridIndex(DOCS, FakeEmbedder())
    hits = index.search("flight to Seattle with Delta", k=3)
    assert hits[0].index == 1
    assert hits[0].dense is not None and hits[0].dense > 0.3
    assert hits[0].bm25 > 0
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_dense_side_finds_documents_without_term_overlap_under_bm25_cutoff():
    embedder = FakeEmbedder()
    index = HybridIndex(DOCS, embedder)
    # Query vector that equals document 3's vector: only the dense list can find it.
    vector = embedder.embed([DOCS[3]])[0]
    hits = index.search("qqq", k=2, query_vector=vector)
    assert hits[0].index == 3 and hits[0].bm25 == 0.0


@pytest.mark.parametrize("fusion", ["rrf", "weighted"])
def test_both_fusions_agree_on_a_clear_winner(fusion):
    index = HybridIndex(DOCS, FakeEmbedder(), fusion=fusion)
    assert index.search("hotel room in Paris", k=1)[0].index == 2


def test_weighted_fusion_with_dense_weight_zero_is_bm25_order():
    index = HybridIndex(DOCS, FakeEmbedder(), fusion="weighted", dense_weight=0.0)
    bm25_only = HybridIndex(DOCS, None)
    query = "room in the bank"
    assert [h.index for h in index.search(query, k=2)] == [h.index for h in bm25_only.search(query, k=2)]


def test_add_appends_and_returns_indices_and_search_sees_new_docs():
    index = HybridIndex(DOCS[:2], FakeEmbedder())
    assert index.add(DOCS[2:4]) == [2, 3]
    assert len(index) == 4 and index.texts[3] == DOCS[3]
    assert index.search("jazz music speaker", k=1)[0].index == 3


def test_restrict_to_limits_candidates():
    index = HybridIndex(DOCS, FakeEmbedder())
    hits = index.search("flight Delta", k=3, restrict_to=[0, 2, 4])
    assert {h.index for h in hits} <= {0, 2, 4}


def test_precomputed_vectors_are_used_and_checked():
    embedder = FakeEmbedder()
    vectors = embedder.embed(DOCS)
    embedder.calls = 0
    index = HybridIndex(DOCS, embedder, vectors=vectors)
    assert embedder.calls == 0
    with pytest.raises(ValidationError, match="vectors"):
        index.add(["one more"], vectors=np.zeros((2, 128), np.float32))
    assert len(index) == len(DOCS)  # the failed add left the index unchanged
    with pytest.raises(ValidationError, match="dimension"):
        index.add(["one more"], vectors=np.zeros((1, 7), np.float32))


def test_bad_options_raise_named_errors():
    with pytest.raises(ValidationError, match="fusion"):
        HybridIndex(DOCS, None, fusion="max")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="dense_weight"):
        HybridIndex(DOCS, None, dense_weight=2.0)


def test_empty_index_and_k_zero():
    assert HybridIndex([], FakeEmbedder()).search("anything", k=3) == []
    assert HybridIndex(DOCS, FakeEmbedder()).search("flight", k=0) == []


def test_top_indices_is_sorted_with_index_tiebreak():
    scores = np.array([0.5, 0.9, 0.5, 0.1, 0.9], dtype=np.float32)
    assert top_indices(scores, 3).tolist() == [1, 4, 0]
    assert top_indices(scores, 10).tolist() == [1, 4, 0, 2, 3]


def test_concurrent_add_and_search_are_safe():
    index = HybridIndex(DOCS, FakeEmbedder())
    errors: list[Exception] = []

    def writer():
        try:
            for i in range(50):
                index.add([f"extra document number {i} about trains"])
        except Exception as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    def reader():
        try:
            for _ in range(50):
                index.search("trains document", k=5)
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(index) == len(DOCS) + 50


def test_scales_to_many_documents_with_correct_results():
    rng = np.random.default_rng(0)
    vocabulary = [f"w{i}" for i in range(2000)]
    texts = [" ".join(rng.choice(vocabulary, 12)) for _ in range(5000)]
    texts[4321] = "unique needle phrase w1 w2"
    index = HybridIndex(texts, FakeEmbedder(dim=64))
    assert index.search("unique needle phrase", k=3)[0].index == 4321


def test_idf_read_at_a_reference_size_does_not_grow_with_the_collection():
    from prefcall.retrieval.hybrid import BM25Index

    def score(n: int, reference: int | None) -> float:
        index = BM25Index(idf_documents=reference)
        # one document in ten holds the word, whatever the collection's size
        index.add([("ferry crossing" if i % 10 == 0 else f"parking permit {i}") for i in range(n)])
        return float(index.scores("ferry")[0])

    assert score(200, None) > 1.1 * score(10, None)  # plain BM25: the same share weighs more in a larger collection
    assert abs(score(200, 10) - score(10, 10)) < 1e-5 and score(10, 10) == score(10, None)
