"""The `bfcl` eval task: loading the shared files, BFCL AST matching, selection and call predictors."""

from __future__ import annotations

import json
import math

import pytest

from prefcall.engine.fake import FakeEngine
from prefcall.evaluation.task import EvalItem, ScoredItem
from prefcall.evaluation.tasks import bfcl
from prefcall.schemas.model import Call, Function

AREA = Function(
    name="calc_area",
    description="Area of a shape.",
    parameters={"type": "object", "properties": {"shape": {"type": "string"}, "size": {"type": "number"}, "unit": {"type": "string"}},
                "required": ["shape", "size"]},
)
GOLD = [{"calc_area": {"shape": ["Square", "sq"], "size": [5.0], "unit": ["", "m"]}}]
FUNCTIONS = [
    {"name": "calc_area", "description": "Area of a shape.", "parameters": {"type": "dict", "properties": {
        "shape": {"type": "string"}, "size": {"type": "float"}, "unit": {"type": "string"}}, "required": ["shape", "size"]}},
    {"name": "calc_volume", "description": "Volume of a solid.", "parameters": {"type": "dict", "properties": {
        "solid": {"type": "string"}}, "required": ["solid"]}},
]


def _item(gold_calls: list, category: str = "multiple") -> EvalItem:
    return EvalItem(id=f"{category}_0", input={"question": "Area of a 5 square?", "functions": FUNCTIONS},
                    gold={"functions": [n for c in gold_calls for n in c], "ground_truth": gold_calls},
                    meta={"category": category})


def test_standardise_string_like_bfcl() -> None:
    assert bfcl.standardise_string("New York, NY") == "newyorkny"
    assert bfcl.standardise_string("it's_a-b/c.d*e^f") == 'it"sabcdef'


@pytest.mark.parametrize(
    ("call", "match", "reason"),
    [
        (Call(name="calc_area", arguments={"shape": "square", "size": 5}), True, "match"),  # int for float, case
        (Call(name="calc_area", arguments={"shape": "S q", "size": 5.0, "unit": "m"}), True, "match"),
        (Call(name="calc_volume", arguments={"solid": "cube"}), False, "wrong function"),
        (Call(name="calc_area", arguments={"shape": "square"}), False, "missing required parameter size"),
        (Call(name="calc_area", arguments={"shape": "circle", "size": 5}), False, "wrong value for shape"),
        (Call(name="calc_area", arguments={"shape": "square", "size": 5, "colour": "red"}), False, "unexpected parameter"),
        (None, False, "no call made"),
    ],
)
def test_ast_match(call, match, reason) -> None:
    got, why = bfcl.ast_match(call, GOLD, AREA)
    assert got is match and why.startswith(reason)


def test_ast_match_optional_param_without_empty_option_is_missing() -> None:
    gold = [{"calc_area": {"shape": ["square"], "size": [5], "unit": ["m"]}}]
    assert bfcl.ast_match(Call(name="calc_area", arguments={"shape": "square", "size": 5}), gold, AREA) == (False, "missing parameter unit")


def test_ast_match_nested_values_and_booleans() -> None:
    assert bfcl.value_matches({"min": 3, "max": 4}, [{"min": [3], "max": [4]}])
    assert not bfcl.value_matches({"min": 3}, [{"min": [3], "max": [4]}])
    assert bfcl.value_matches([3, 4], [[3, 4]]) and not bfcl.value_matches([4, 3], [[3, 4]])
    assert not bfcl.value_matches(1, [True]) and bfcl.value_matches(True, ["", True])


def test_irrelevance_scores_a_missing_call_as_right() -> None:
    item = _item([], "irrelevance")
    assert bfcl.score(item, {"status": "ok", "call": None}) == {"ast_match": 1.0}
    assert bfcl.score(item, {"status": "ok", "call": {"name": "calc_area", "arguments": {}}}) == {"ast_match": 0.0}
    assert bfcl.score(item, {"status": "ok", "selected": []})["exact_set"] == 1.0
    assert bfcl.score(item, {"status": "error", "error": "overflow"}, "call") == {"ast_match": 0.0}


def test_selection_mode_prediction_and_score() -> None:
    engine = FakeEngine().reply("Thinking: area\ncalc_area - YES\ncalc_volume - NO\nAssessment finished.")
    prediction = bfcl.predict(_item(GOLD), engine, "generate")
    assert prediction["selected"] == ["calc_area"] and prediction["tokens"]["prompt_tokens"] > 0
    assert bfcl.score(_item(GOLD), prediction)["exact_set"] == 1.0


def test_call_mode_generates_name_then_grammar_constrained_arguments() -> None:
    engine = FakeEngine()
    engine.reply(json.dumps({"name": "calc_area"}), when="choose the one function")
    engine.reply(json.dumps({"shape": "square", "size": 5}), when="fill in the arguments")
    prediction = bfcl.predict(_item(GOLD), engine, "call")
    assert prediction["call"] == {"name": "calc_area", "arguments": {"shape": "square", "size": 5}}
    assert engine.calls[0]["json_schema"]["properties"]["name"]["enum"] == ["calc_area", "calc_volume"]
    args_schema = engine.calls[1]["json_schema"]
    assert args_schema["properties"]["size"] == {"type": "number"} and args_schema["required"] == ["shape", "size"]
    assert bfcl.score(_item(GOLD), prediction) == {"ast_match": 1.0}


def test_gated_call_mode_makes_no_call_when_nlt_selects_nothing() -> None:
    engine = FakeEngine(scorer=lambda p, c: math.log(0.1 if c == " YES" else 0.9))
    prediction = bfcl.predict(_item([], "irrelevance"), engine, "call", gate="score")
    assert prediction["call"] is None and all(c["kind"] == "score" for c in engine.calls)
    assert bfcl.score(_item([], "irrelevance"), prediction) == {"ast_match": 1.0}


def test_aggregate_call_mode() -> None:
    rows = [ScoredItem(id=str(i), input={}, prediction=p, scores=s) for i, (p, s) in enumerate([
        ({"status": "ok", "call": None}, {"ast_match": 1.0}),
        ({"status": "ok", "call": {"name": "f"}}, {"ast_match": 0.0}),
        ({"status": "parse_error"}, {"ast_match": 0.0}),
        ({"status": "ok", "call": {"name": "f"}}, {"ast_match": 1.0}),
    ])]
    metrics = bfcl.aggregate(rows)
    assert metrics["ast_accuracy"] == 0.5 and metrics["parse_error_rate"] == 0.25 and metrics["no_call_rate"] == 0.25


def test_loads_the_shared_bfcl_files(shared_data) -> None:
    multiple = bfcl.load_items(shared_data / "bfcl" / "BFCL_v4_multiple.json")
    assert len(multiple) == 200 and multiple[0].gold["functions"] == ["triangle_properties.get"]
    assert multiple[0].meta == {"category": "multiple", "n_functions": 2}
    irrelevance = bfcl.load_items(shared_data / "bfcl" / "BFCL_v4_irrelevance.json")
    assert len(irrelevance) == 240 and all(i.gold["functions"] == [] for i in irrelevance)
    catalogue = bfcl.catalogue_of(multiple[0].input["functions"])
    assert catalogue.names[0] == "triangle_properties.get"
