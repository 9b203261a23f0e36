"""One malformed record is one error row: scoring runs per item inside the error handling, the report lists
the rows it could not score, the metrics leave them out and say so; every figure carries a 95% interval."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import pytest

from prefcall.cli import main
from prefcall.errors import ParseError
from prefcall.evaluation.runner import run_eval
from prefcall.evaluation.task import BaseTask, EvalContext, EvalItem, ScoredItem

DATA = Path(__file__).parent / "data" / "nlsi" / "malformed.json"


def last_json(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_nlsi_malformed_gold_and_record_are_one_error_row_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    preds = tmp_path / "preds.jsonl"
    preds.write_text("\n".join(json.dumps(r) for r in [
        {"id": "ok-1", "calls": ['GetRestaurants(city="Oakland", cuisine="Thai")']},
        # the gold's o"clock / Akiko"s are read as apostrophes, so the right answer matches
        {"id": "apostrophe-2", "calls": [{"name": "GetRideSharing", "arguments": {
            "destination": "Akiko's place", "pickup_time": "11 o'clock in the morning"}}]},
        {"id": "broken-gold-3", "calls": ['GetEvents(city="Berlin", category="Music")']},
        {"id": "ok-5", "calls": ['GetDentists(city="Menlo Park")']},
    ]))
    out = tmp_path / "o"
    assert main(["eval", "nlsi", "--data", str(DATA), "--predictions", str(preds), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["n"] == 5 and summary["n_scored"] == 3 and summary["score_errors"] == 2
    rows = {row["id"]: row["error"] for row in summary["error_rows"]}
    assert "gold call 'GetEvents(city=\"Berlin, category=Music'" in rows["broken-gold-3"]
    assert "unterminated" in rows["broken-gold-3"]
    assert rows["no-utterance-4"].startswith("unreadable record: record 3 is not an NLSI example")
    # the three readable items are scored; the two error rows are neither zeros nor ones
    assert summary["metrics"]["exact_match"] == pytest.approx(2 / 3)
    assert summary["intervals"]["exact_match"]["n"] == 3
    assert "2 of 5 items could not be scored" in captured.err
    report = (out / "report.md").read_text()
    assert "## Items that could not be scored (2, left out of the metrics)" in report
    assert "| broken-gold-3 | scoring failed: ParseError: gold call" in report
    assert "items: 5 (3 scored, 2 could not be scored, 0 not scorable here)" in report
    lines = {json.loads(x)["id"]: json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()}
    assert lines["broken-gold-3"]["error"] and lines["broken-gold-3"]["scores"] == {}
    assert lines["apostrophe-2"]["scores"]["exact_match"] == 1.0
    metrics_json = json.loads((out / "metrics.json").read_text())
    assert metrics_json["score_errors"] == 2
    slot_f1 = metrics_json["intervals"]["slot_f1"]  # an interval around the figure, from the 3 scored items only
    assert 0.0 <= slot_f1["lo"] <= slot_f1["value"] <= slot_f1["hi"] <= 1.0 and slot_f1["n"] == 3


def test_nlsi_gold_against_gold_scores_the_apostrophe_item(capsys: pytest.CaptureFixture[str]):
    main(["eval", "nlsi", "--data", str(DATA), "--predictions", str(DATA)])
    summary = last_json(capsys)
    assert summary["n_scored"] == 3 and summary["metrics"]["exact_match"] == 1.0


class Flaky(BaseTask):
    """Scoring raises for item b until `fixed`; records which items were predicted."""

    name = "flaky"

    def __init__(self, fixed: bool = False) -> None:
        self.fixed = fixed
        self.predicted: list[str] = []

    def load(self, args: argparse.Namespace) -> list[EvalItem]:
        return [EvalItem(id=x, input={}, gold=x) for x in "abc"]

    def predict(self, item: EvalItem, ctx: EvalContext) -> dict[str, Any]:
        self.predicted.append(item.id)
        return {"status": "ok", "answer": item.id}

    def score(self, item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
        if item.id == "b" and not self.fixed:
            raise KeyError("gold field")
        return {"accuracy": float(prediction.get("status") == "ok" and prediction.get("answer") == item.gold)}


def namespace(**kw: Any) -> argparse.Namespace:
    return argparse.Namespace(**({"limit": None, "out": None, "predictions": None, "config": None, "mode": None} | kw))


def test_scoring_failure_is_an_error_row_and_is_rescored_without_predicting_on_resume(tmp_path: Path):
    first = Flaky()
    summary = run_eval(first, namespace(out=str(tmp_path)), stdout=io.StringIO(), stderr=io.StringIO())
    assert first.predicted == ["a", "b", "c"]
    assert summary["score_errors"] == 1 and summary["metrics"]["accuracy"] == 1.0
    assert summary["error_rows"][0]["error"].startswith("scoring failed: KeyError at ")
    again = Flaky(fixed=True)
    summary = run_eval(again, namespace(out=str(tmp_path)), stdout=io.StringIO(), stderr=io.StringIO())
    assert again.predicted == []  # b's stored prediction was scored again, no model call
    assert summary["score_errors"] == 0 and summary["n_scored"] == 3


def test_unreadable_prediction_record_is_a_flagged_parse_error(tmp_path: Path):
    class Strict(Flaky):
        def predictions_from_file(self, item: EvalItem, record: dict[str, Any]) -> dict[str, Any]:
            if record.get("bad"):
                raise ParseError("cannot read calls")
            return {"status": "ok", "answer": record["answer"]}

    preds = tmp_path / "p.jsonl"
    preds.write_text("\n".join(json.dumps(r) for r in [{"id": "a", "answer": "a"}, {"id": "b", "bad": 1},
                                                        {"id": "c", "answer": "c"}]))
    summary = run_eval(Strict(fixed=True), namespace(predictions=str(preds)), stdout=io.StringIO(), stderr=io.StringIO())
    assert summary["metrics"]["accuracy"] == pytest.approx(2 / 3) and summary["metrics"]["parse_error_rate"] > 0
    assert summary["score_errors"] == 0


def test_every_figure_of_every_task_report_has_an_interval(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """The default aggregate, NLSI, tools: no float figure without n and an interval."""
    summary = run_eval(Flaky(fixed=True), namespace(), stdout=io.StringIO(), stderr=io.StringIO())
    assert {v["method"] for v in summary["intervals"].values()} == {"wilson"}
    main(["eval", "nlsi", "--data", str(DATA), "--predictions", str(DATA)])
    intervals = last_json(capsys)["intervals"]
    assert intervals and all(v["method"] != "none" and v["lo"] is not None for v in intervals.values())
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([
        {"id": 1, "text": "weather?", "tools": [{"name": "w", "description": "weather"}], "expected": ["w"]},
        {"id": 2, "text": "hi", "tools": [{"name": "w", "description": "weather"}], "expected": []}]))
    preds = tmp_path / "p.jsonl"
    preds.write_text(json.dumps({"id": "1", "selected": ["w"]}) + "\n" + json.dumps({"id": "2", "selected": ["w"]}))
    main(["eval", "tools", "--data", str(tools), "--predictions", str(preds), "--out", str(tmp_path / "o")])
    intervals = last_json(capsys)["intervals"]
    assert all(v["method"] != "none" for v in intervals.values())
    assert intervals["per_tool/w/precision"]["value"] == 0.5
    report = (tmp_path / "o" / "report.md").read_text()
    assert "| exact_set_accuracy | 0.5000 [0.0945, 0.9055] | 2 |" in report


def test_scored_item_status_of_an_error_row():
    row = ScoredItem(id="x", input={}, prediction={"status": "ok"}, error="scoring failed: boom")
    assert row.status == "score_error"


# -- DST: one --schema FILE for the catalogue and the gold-name mapping ----------------------------------
SGD = Path(__file__).parent / "data" / "sgd"


def dst_namespace(**kw: Any) -> argparse.Namespace:
    return namespace(**({"data": str(SGD / "dialogues_trains.json"), "dialogues": None, "schema": None,
                         "sgd_schema": None, "catalogue": None} | kw))


def test_dst_schema_option_sets_catalogue_and_gold_mapping(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from prefcall.evaluation.tasks.dst import TASK as DST

    args = dst_namespace(schema=str(SGD / "schema_trains.json"))
    items = DST.load(args)
    assert [c["name"] for c in items[1].gold["calls"]] == ["FindTrains"]
    assert [f.name for f in DST.catalogue(args).functions] == ["FindTrains"]  # the same file
    preds = tmp_path / "gold.jsonl"
    preds.write_text("\n".join(json.dumps({"id": i.id, "calls": i.gold["calls"]}) for i in items))
    assert main(["eval", "dst", "--data", str(SGD / "dialogues_trains.json"), "--schema",
                 str(SGD / "schema_trains.json"), "--predictions", str(preds)]) == 0
    summary = last_json(capsys)
    assert summary["metrics"]["joint_goal_accuracy"] == 1.0 and summary["metrics"]["slot_f1"] == 1.0


def test_dst_gold_name_missing_from_the_schema_is_an_error_not_a_zero(tmp_path: Path):
    from prefcall.errors import ConfigError
    from prefcall.evaluation.tasks.dst import TASK as DST

    schema = json.loads((SGD / "schema_trains.json").read_text())
    renamed = tmp_path / "renamed_service.json"
    renamed.write_text(json.dumps([schema[0] | {"service_name": "Trains_1"}]))
    with pytest.raises(ConfigError, match=r"gold service 'Trains_9' \(dialogue t_001 turn 0\) is not in the SGD "
                                          r"schema .*renamed_service.json; pass the schema of this split"):
        DST.load(dst_namespace(schema=str(renamed)))
    other_intent = tmp_path / "other_intent.json"
    other_intent.write_text(json.dumps([schema[0] | {"intents": [schema[0]["intents"][0] | {"name": "BuyTickets"}]}]))
    with pytest.raises(ConfigError, match="gold intent 'FindTrains' of service 'Trains_9'"):
        DST.load(dst_namespace(schema=str(other_intent)))
    fewer_slots = tmp_path / "fewer_slots.json"
    intent = schema[0]["intents"][0] | {"optional_slots": {}}
    fewer_slots.write_text(json.dumps([schema[0] | {"slots": schema[0]["slots"][:2], "intents": [intent]}]))
    with pytest.raises(ConfigError, match="gold slot 'seat_class' of service 'Trains_9' .*turn 2"):
        DST.load(dst_namespace(schema=str(fewer_slots)))
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "function": {"name": "f", "parameters": {}}}]))
    with pytest.raises(ConfigError, match="is not an SGD schema"):
        DST.load(dst_namespace(schema=str(tools)))


def test_dst_without_schema_needs_one_beside_the_data_and_rejects_catalogue(capsys: pytest.CaptureFixture[str]):
    from prefcall.errors import ConfigError
    from prefcall.evaluation.tasks.dst import TASK as DST

    # tests/data/sgd has no schema.json: no silent fallback to another split's schema
    with pytest.raises(ConfigError, match=r"no SGD schema beside .*dialogues_trains.json \(looked for schema.json\); "
                                          "pass the schema of this split with --schema FILE"):
        DST.load(dst_namespace())
    with pytest.raises(ConfigError, match="not --catalogue"):
        DST.load(dst_namespace(schema=str(SGD / "schema_trains.json"), catalogue="sgd"))
    assert main(["eval", "dst", "--data", str(SGD / "dialogues_trains.json"), "--predictions",
                 str(SGD / "dialogues_trains.json")]) == 2
    assert "no SGD schema beside" in capsys.readouterr().err


def test_dst_default_schema_is_the_splits_own(tmp_path: Path):
    from prefcall.evaluation.tasks.dst import TASK as DST, default_schemas

    assert [p.name for p in default_schemas(Path("x/test_dialogues_001.json"))] == ["test_schema.json", "schema.json"]
    data = tmp_path / "test_dialogues_001.json"
    data.write_text((SGD / "dialogues_trains.json").read_text())
    (tmp_path / "dev_schema.json").write_text("[]")  # another split's schema is never picked up
    (tmp_path / "test_schema.json").write_text((SGD / "schema_trains.json").read_text())
    args = dst_namespace(data=str(data))
    assert len(DST.load(args)) == 2 and [f.name for f in DST.catalogue(args).functions] == ["FindTrains"]


def test_dst_sgd_schema_is_a_deprecated_alias(capsys: pytest.CaptureFixture[str]):
    from prefcall.errors import ConfigError
    from prefcall.evaluation.tasks.dst import TASK as DST

    items = DST.load(dst_namespace(sgd_schema=str(SGD / "schema_trains.json")))
    assert len(items) == 2 and "--sgd-schema is deprecated" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="differ"):
        DST.load(dst_namespace(sgd_schema=str(SGD / "schema_trains.json"), schema="/elsewhere.json"))


# -- every task scores stored predictions (no model), with an interval on every figure ------------------
def _bfcl(tmp: Path) -> list[str]:
    (tmp / "possible_answer").mkdir()
    function = {"name": "area", "description": "Area of a circle.", "parameters": {"type": "dict", "properties": {
        "radius": {"type": "integer", "description": "Radius."}}, "required": ["radius"]}}
    data = tmp / "BFCL_v4_simple_python.json"
    data.write_text("\n".join(json.dumps({"id": f"simple_python_{i}", "question": [[{"role": "user", "content": f"r={i}"}]],
                                          "function": [function]}) for i in range(3)))
    (tmp / "possible_answer" / data.name).write_text("\n".join(
        json.dumps({"id": f"simple_python_{i}", "ground_truth": [{"area": {"radius": [i]}}]}) for i in range(3)))
    preds = tmp / "p.jsonl"
    preds.write_text("\n".join(json.dumps({"id": f"simple_python_{i}", "status": "ok",
                                           "call": {"name": "area", "arguments": {"radius": min(i, 1)}}}) for i in range(3)))
    return ["bfcl", "--data", str(data), "--mode", "call", "--predictions", str(preds)]


def _tags(tmp: Path) -> list[str]:
    data = tmp / "tags.json"
    data.write_text(json.dumps([{"instruction": "I like Thai food.", "tagged": "[IN:GET_RESTAURANTS I like [SL:CUISINE Thai ] food. ]"},
                                {"instruction": "I fly Delta.", "tagged": "[IN:GET_FLIGHTS I fly [SL:AIRLINES Delta ]. ]"}]))
    return ["tags", "--data", str(data), "--predictions", str(data)]


def _dst(tmp: Path) -> list[str]:
    from prefcall.evaluation.tasks.dst import TASK as DST

    items = DST.load(dst_namespace(schema=str(SGD / "schema_trains.json")))
    preds = tmp / "p.jsonl"
    preds.write_text("\n".join(json.dumps({"id": i.id, "calls": i.gold["calls"][:1] if n else []})
                               for n, i in enumerate(items)))
    return ["dst", "--data", str(SGD / "dialogues_trains.json"), "--schema", str(SGD / "schema_trains.json"),
            "--predictions", str(preds)]


def _acebench(tmp: Path) -> list[str]:
    preds = tmp / "p.jsonl"
    preds.write_text(json.dumps({"id": "special_irrelevant_0", "decision": "refuse"}))
    data = Path(__file__).parent / "data" / "acebench" / "data_special_irrelevant.json"
    return ["acebench", "--data", str(data), "--predictions", str(preds)]


def _nlsi(tmp: Path) -> list[str]:
    return ["nlsi", "--data", str(DATA), "--predictions", str(DATA)]


@pytest.mark.parametrize("build", [_nlsi, _tags, _bfcl, _dst, _acebench], ids=lambda f: f.__name__[1:])
def test_every_task_scores_stored_predictions_with_intervals(build, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["eval", *build(tmp_path), "--out", str(tmp_path / "out")]) == 0
    summary = last_json(capsys)
    assert summary["n_scored"] > 0 and summary["intervals"]
    assert all(v["method"] in ("wilson", "bootstrap") for v in summary["intervals"].values()), summary["intervals"]
    assert "[95% interval]" in (tmp_path / "out" / "report.md").read_text()


def test_dst_predicted_history_replays_the_models_own_calls_and_state(tmp_path: Path):
    from prefcall.engine.fake import FakeEmbedder, FakeEngine
    from prefcall.evaluation.tasks.dst import TASK as DST
    from prefcall.evaluation.tasks.dst import with_history

    turns = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "calls": [{"name": "G"}]},
             {"role": "user", "content": "c"}]
    assert with_history(turns, [[{"name": "P", "arguments": {}}]])[1]["calls"] == [{"name": "P", "arguments": {}}]
    assert turns[1]["calls"] == [{"name": "G"}]  # the item's own (gold) history is left as it was

    # A model that always calls FindTrains and is sure that the request gives none of its values (so sure that even
    # "from Leeds to York", which the structure alone would read, stays unset): its own calls carry no values.
    def scorer(prompt: str, candidate: str) -> float:
        if candidate.strip() in ("FindTrains", "None"):
            return -0.1 if candidate.strip() == "FindTrains" else -9.0
        return -0.1 if candidate == "null" else -30.0

    def run(history: str, out: Path) -> list[dict[str, Any]]:
        args = dst_namespace(schema=str(SGD / "schema_trains.json"), config="full", history=history, out=str(out),
                             function_selection=None)
        run_eval(DST, args, engine=FakeEngine(scorer=scorer), embedder=FakeEmbedder(), stdout=io.StringIO(),
                 stderr=io.StringIO())
        return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]

    oracle = run("oracle", tmp_path / "oracle")
    predicted = run("predicted", tmp_path / "predicted")
    first, second = predicted
    calls = first["prediction"]["calls"]
    assert [c["name"] for c in calls] == ["FindTrains"]
    assert first["prediction"]["state"]["active"] == "FindTrains" and first["prediction"]["state"]["turn"] == 0
    # The scored state is the one parse_request returned. Predicted history: the model's own turn-1 call (no
    # values) is all turn 2 carries; oracle history: the gold turn-1 call's values, carried from turn 0.
    assert second["prediction"]["state"]["functions"]["FindTrains"]["arguments"] == {}
    carried = oracle[1]["prediction"]["state"]["functions"]["FindTrains"]["arguments"]
    gold = DST.load(dst_namespace(schema=str(SGD / "schema_trains.json")))[1].meta["carried"]
    service = next(iter(gold))
    assert {k: v["value"] for k, v in carried.items()} == gold[service]["slots"]
    assert all(v["turn"] == 0 and v["origin"] == "call" for v in carried.values())
    assert oracle[1]["scores"]["slot_recall"] > second["scores"]["slot_recall"]  # the carried values are scored
    again = run("predicted", tmp_path / "predicted")  # resumed: nothing to predict, history read back
    assert [r["prediction"] for r in again] == [r["prediction"] for r in predicted]
