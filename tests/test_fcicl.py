"""FC-ICL demonstrations: SQLite persistence (storage.demos), hybrid retrieval with leave-one-out exclusion
and reranking (strategies.fcicl)."""

from __future__ import annotations

from prefcall.engine.fake import FakeEmbedder
from prefcall.schemas.model import Call
from prefcall.storage.demos import Demonstration, DemoStore, add_demonstration
from prefcall.strategies.fcicl import DemoQuery, DemoRetriever, HeuristicReranker, ScoredDemo, load_nlsi_demonstrations


def demo(i: str, dialogue: str, fn: str, **args) -> Demonstration:
    return Demonstration(id=i, dialogue=dialogue, instructions=[f"I like {fn}"], calls=[Call(name=fn, arguments=args)])


def seeded(path=None) -> DemoStore:
    store = DemoStore(path)
    store.add_many([
        demo("1", "User: find me a restaurant with Thai food", "GetRestaurants", cuisine="Thai"),
        demo("2", "User: find me a restaurant in Oakland", "GetRestaurants", city="Oakland"),
        demo("3", "User: any concerts in Boston this week", "GetEvents", city="Boston"),
        demo("4", "User: find me a restaurant with Thai food please", "GetRestaurants", cuisine="Thai"),
    ])
    return store


def test_store_persists_in_sqlite(tmp_path):
    path = tmp_path / "p.db"
    seeded(path)
    again = DemoStore(path)
    assert again.count() == 4 and again.get("3").calls[0].arguments == {"city": "Boston"}
    added = add_demonstration(again, "User: hi", ["x"], "nlsi", [Call(name="GetEvents")], source="host")
    assert added.id.startswith("host-") and again.count("nlsi") == 5


def test_retrieval_finds_similar_and_respects_exclude_ids():
    store = DemoRetriever(seeded(), FakeEmbedder())
    query = DemoQuery(dialogue="User: I want Thai food at a restaurant")
    ids = [s.demo.id for s in store.candidates(query, "nlsi", k=4)]
    assert ids[0] in {"1", "4"} and "3" in ids[-2:]
    excluded = [s.demo.id for s in store.candidates(query, "nlsi", k=4, exclude_ids={"1", "4"})]
    assert "1" not in excluded and "4" not in excluded
    assert store.candidates(query, "other-catalogue") == []


def test_reranker_prefers_predicted_function_and_diversity():
    pool = [ScoredDemo(demo=demo("a", "User: thai food restaurant", "GetRestaurants"), retrieval=1.0),
            ScoredDemo(demo=demo("b", "User: thai food restaurant", "GetRestaurants"), retrieval=0.99),
            ScoredDemo(demo=demo("c", "User: concerts tonight", "GetEvents"), retrieval=0.8),
            ScoredDemo(demo=demo("d", "User: weather", "GetWeather"), retrieval=0.3)]
    reranker = HeuristicReranker()
    plain = [s.demo.id for s in reranker.rerank(DemoQuery(dialogue="q"), pool, 2)]
    assert plain == ["a", "c"]  # "b" duplicates "a" word for word: diversity pushes it out
    events = [s.demo.id for s in reranker.rerank(DemoQuery(dialogue="q", functions=["GetEvents"]), pool, 1)]
    assert events == ["c"]


def test_an_added_demonstration_is_retrieved_without_rebuilding_by_hand():
    store = seeded()
    retriever = DemoRetriever(store, FakeEmbedder())
    query = DemoQuery(dialogue="User: book a dentist appointment")
    assert "5" not in [s.demo.id for s in retriever.candidates(query, "nlsi", k=5)]
    store.add(demo("5", "User: book me a dentist appointment", "GetDentists"))
    assert retriever.candidates(query, "nlsi", k=5)[0].demo.id == "5"


def test_nlsi_loader_keeps_duplicate_ids_apart_and_leave_one_out(shared_data):
    demos = load_nlsi_demonstrations(shared_data / "nlsi" / "dev.json")
    assert len(demos) == 403 and len({d.id for d in demos}) == 403
    store = DemoStore(None)
    store.add_many(demos)
    target = demos[0]
    hits = DemoRetriever(store).candidates(DemoQuery(dialogue=target.dialogue), "nlsi", k=5, exclude_ids={target.id})
    assert hits and all(h.demo.id.split("#")[0] != target.id for h in hits)
