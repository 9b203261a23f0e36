"""The `acebench` eval task: formats, decision accuracy, missing-parameter recall, argument accuracy."""

from __future__ import annotations

import json

import pytest

from prefcall.engine.fake import FakeEngine
from prefcall.evaluation.task import EvalItem, ScoredItem
from prefcall.evaluation.tasks import acebench

FUNCTIONS = [{"name": "book", "description": "Books a table.", "parameters": {"type": "object", "properties": {
    "restaurant": {"type": "string", "description": "Restaurant name."}, "time": {"type": "string"}}, "required": ["restaurant", "time"]}}]


def _item(category: str, gold: dict, profile: str | None = None) -> EvalItem:
    return EvalItem(id=f"{category}_0", input={"question": "user: Book me a table at Nopa", "functions": FUNCTIONS,
                                               "time": None, "profile": profile}, gold=gold, meta={"category": category})


def test_parse_dialogue() -> None:
    turns = acebench.parse_dialogue("user: I want a table\nassistant: Where?\nuser: Nopa")
    assert [(t.role, t.content) for t in turns] == [("user", "I want a table"), ("assistant", "Where?"), ("user", "Nopa")]
    assert acebench.parse_dialogue("no speaker here")[0].content == "no speaker here"


def test_gold_by_category_strips_names() -> None:
    assert acebench.gold_of("special_incomplete", {"f": ["a ", " b"]}) == {"decision": "question", "missing": {"f": ["a", "b"]}}
    assert acebench.gold_of("special_irrelevant", "Due to ...") == {"decision": "limitation"}
    assert acebench.gold_of("normal_preference", {"f": {"x": 1}})["decision"] == "continue"


def test_missing_recall_hand_computed() -> None:
    assert acebench.missing_recall(["time"], {"book": ["time", "restaurant"]}) == 0.5
    assert acebench.missing_recall([], {"book": ["time"]}) == 0.0
    assert acebench.missing_recall(["x"], {}) == 1.0  # nothing to find


def test_argument_scores_hand_computed() -> None:
    gold = {"book": {"restaurant": "Nopa", "time": "7 PM"}}
    assert acebench.argument_scores({"name": "book", "arguments": {"restaurant": "nopa", "time": "8pm"}}, gold) == {
        "function_match": 1.0, "argument_accuracy": 0.5}
    assert acebench.argument_scores(None, gold) == {"function_match": 0.0, "argument_accuracy": 0.0}
    assert acebench.argument_scores({"name": "other", "arguments": {}}, gold)["function_match"] == 0.0
    assert acebench.argument_scores(None, {}) == {"function_match": 1.0, "argument_accuracy": 1.0}


def test_score_decisions_and_parse_errors() -> None:
    incomplete = _item("special_incomplete", {"decision": "question", "missing": {"book": ["time"]}})
    assert acebench.score(incomplete, {"status": "ok", "decision": "question", "missing": ["time"]}) == {
        "decision_correct": 1.0, "missing_recall": 1.0}
    assert acebench.score(incomplete, {"status": "ok", "decision": "continue", "missing": ["time"]}) == {
        "decision_correct": 0.0, "missing_recall": 0.0}
    assert acebench.score(incomplete, {"status": "parse_error", "decision": "question", "missing": ["time"]}) == {
        "decision_correct": 0.0, "missing_recall": 0.0}
    irrelevant = _item("special_irrelevant", {"decision": "limitation"})
    assert acebench.score(irrelevant, {"status": "ok", "decision": "limitation"}) == {"decision_correct": 1.0}


def test_predict_incomplete_names_the_missing_parameter() -> None:
    engine = FakeEngine(scorer=lambda p, c: -0.1 if c == " YES" else -3.0)
    engine.reply("Continue", when="Before calling a tool")
    engine.reply(json.dumps({"restaurant": "Nopa"}), when="fill in the arguments")
    item = _item("special_incomplete", {"decision": "question", "missing": {"book": ["time"]}})
    prediction = acebench.predict(item, engine, "combined")
    assert prediction["decision"] == "question" and prediction["missing"] == ["time"]
    assert prediction["tokens"]["prompt_tokens"] > 0
    assert acebench.score(item, prediction) == {"decision_correct": 1.0, "missing_recall": 1.0}


def test_predict_preference_uses_the_profile_and_drafts_the_call() -> None:
    engine = FakeEngine(scorer=lambda p, c: -0.1 if c == " YES" else -3.0)
    engine.reply("Continue", when="Before calling a tool")
    engine.reply(json.dumps({"restaurant": "Nopa", "time": "7 PM"}), when="fill in the arguments")
    item = _item("normal_preference", {"decision": "continue", "calls": {"book": {"restaurant": "Nopa", "time": "7 PM"}}},
                 profile="{'dinner_time': '7 PM'}")
    prediction = acebench.predict(item, engine, "combined", with_calls=True)
    assert "User profile: {'dinner_time': '7 PM'}" in engine.prompts[0]
    assert prediction["decision"] == "continue"
    assert acebench.score(item, prediction) == {"decision_correct": 1.0, "function_match": 1.0, "argument_accuracy": 1.0}


def test_aggregate_by_category_and_confusion() -> None:
    def row(cat: str, gold: str, said: str, ok: float, status: str = "ok") -> ScoredItem:
        return ScoredItem(id=cat, input={}, gold={"decision": gold}, meta={"category": cat},
                          prediction={"status": status, "decision": said}, scores={"decision_correct": ok})

    metrics = acebench.aggregate([
        row("special_irrelevant", "limitation", "limitation", 1.0),
        row("special_irrelevant", "limitation", "continue", 0.0),
        row("normal_preference", "continue", "continue", 1.0),
        row("normal_preference", "continue", "continue", 0.0, "parse_error"),
    ])
    assert metrics["decision_accuracy"] == 0.5
    assert metrics["decision_accuracy_by_category"] == {"normal_preference": 0.5, "special_irrelevant": 0.5}
    assert metrics["confusion"] == {"continue->continue": 1, "continue->parse_error": 1, "limitation->continue": 1,
                                    "limitation->limitation": 1}
    assert acebench.aggregate([]) == {"n": 0, "decision_accuracy": 0.0}


@pytest.mark.parametrize("name", ["data_special_incomplete", "data_special_irrelevant", "data_normal_preference"])
def test_loads_the_shared_acebench_files(shared_data, name: str) -> None:
    items = acebench.load_items(shared_data / "acebench" / f"{name}.json")
    assert len(items) == 50
    assert {i.gold["decision"] for i in items} == {
        "data_special_incomplete": {"question"}, "data_special_irrelevant": {"limitation"}, "data_normal_preference": {"continue"}}[name]
    assert all(acebench.catalogue_of(i.input["functions"]).functions for i in items)
