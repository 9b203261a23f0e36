"""The evaluation runner and CLI: resume, last-line JSON, report and plots, parse errors, --predictions."""

from __future__ import annotations

import argparse
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest

from prefcall.cli import main
from prefcall.engine.base import Prompt
from prefcall.engine.fake import FakeEngine
from prefcall.errors import ConfigError, EngineError
from prefcall.evaluation.plots import accuracy_by_bucket, tool_count_bucket
from prefcall.evaluation.runner import run_eval
from prefcall.evaluation.task import BaseTask, EvalContext, EvalItem, ScoredItem, Task
from prefcall.evaluation.tasks import get_task
from prefcall.evaluation.tasks import TASKS


class EchoTask(BaseTask):
    """A toy task: the engine must answer the gold word; a reply of ??? is a parse error."""

    name = "echo"
    primary_score = "accuracy"

    def __init__(self, n: int = 5) -> None:
        self.n = n
        self.predicted: list[str] = []

    def load(self, args: argparse.Namespace) -> list[EvalItem]:
        return [EvalItem(id=f"q{i}", input={"question": f"say w{i}"}, gold=f"w{i}", meta={"n_tools": i % 3})
                for i in range(self.n)]

    def predict(self, item: EvalItem, ctx: EvalContext) -> dict[str, Any]:
        self.predicted.append(item.id)
        generation = ctx.engine.generate(Prompt.chat(None, item.input["question"]))
        if generation.text == "???":
            return {"status": "parse_error", "raw": generation.text}
        if generation.text == "boom":
            raise EngineError("context overflow: shorten the prompt")
        return {"status": "ok", "answer": generation.text,
                "tokens": {"prompt_tokens": generation.usage.prompt_tokens, "completion_tokens": 1}}

    def score(self, item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
        ok = prediction.get("status") == "ok" and prediction.get("answer") == item.gold
        return {"accuracy": float(ok)}

    def plots(self, items: list[ScoredItem], out_dir: Path) -> list[Path]:
        return [accuracy_by_bucket(items, lambda i: tool_count_bucket(i.meta["n_tools"]), "accuracy",
                                   out_dir / "by_tools.png")]


def echo_engine() -> FakeEngine:
    engine = FakeEngine()
    for i in range(5):
        engine.reply(f"w{i}", when=f"say w{i}")
    engine.reply("???", when="say w3")  # rules are checked in order: w3 already matched above
    return engine


def namespace(**kw: Any) -> argparse.Namespace:
    base = {"limit": None, "out": None, "predictions": None, "config": None, "mode": None}
    return argparse.Namespace(**(base | kw))


def test_task_satisfies_protocol_and_registry_is_lazy():
    assert isinstance(EchoTask(), Task)
    assert set(TASKS) >= {"nlsi", "tags", "tools", "bfcl", "acebench", "dst"}
    assert get_task("tags").name == "tags"
    with pytest.raises(ConfigError, match="unknown eval task"):
        get_task("nope")


def test_last_stdout_line_is_json_and_outputs_written(tmp_path: Path):
    out, err = io.StringIO(), io.StringIO()
    engine = FakeEngine().reply("w0", when="say w0").reply("nope", when="say w1").reply("???", when="say w2")
    summary = run_eval(EchoTask(3), namespace(out=str(tmp_path)), engine=engine, stdout=out, stderr=err)
    last = json.loads(out.getvalue().strip().splitlines()[-1])
    assert last == json.loads(json.dumps(summary))
    assert last["task"] == "echo" and last["n"] == 3
    assert last["metrics"]["accuracy"] == pytest.approx(1 / 3)
    assert last["metrics"]["parse_error_rate"] == pytest.approx(1 / 3)
    assert "3/3 items" in err.getvalue() and "\r" in err.getvalue()
    report = (tmp_path / "report.md").read_text()
    assert "## Worst failures" in report and "parse_error" in report and "say w1" in report
    png = tmp_path / "by_tools.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines] == ["q0", "q1", "q2"]
    assert lines[0]["tokens"]["completion_tokens"] == 1
    assert math.isfinite(lines[0]["latency_s"]) and lines[0]["latency_s"] >= 0  # produced; its size is no test's
    assert lines[2]["prediction"]["status"] == "parse_error" and lines[2]["scores"]["accuracy"] == 0.0


def test_resume_skips_scored_items(tmp_path: Path):
    first = EchoTask(5)
    run_eval(first, namespace(out=str(tmp_path), limit=2), engine=echo_engine(), stdout=io.StringIO(),
             stderr=io.StringIO())
    assert first.predicted == ["q0", "q1"]
    second = EchoTask(5)
    err = io.StringIO()
    summary = run_eval(second, namespace(out=str(tmp_path)), engine=echo_engine(), stdout=io.StringIO(), stderr=err)
    assert second.predicted == ["q2", "q3", "q4"]  # q0, q1 came from results.jsonl
    assert summary["n"] == 5 and "resuming: 2 of 5" in err.getvalue()
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 5


def test_torn_last_line_is_predicted_again(tmp_path: Path):
    run_eval(EchoTask(2), namespace(out=str(tmp_path)), engine=echo_engine(), stdout=io.StringIO(), stderr=io.StringIO())
    results = tmp_path / "results.jsonl"
    results.write_text(results.read_text().splitlines()[0] + "\n" + '{"id": "q1", "inp')
    again = EchoTask(2)
    run_eval(again, namespace(out=str(tmp_path)), engine=echo_engine(), stdout=io.StringIO(), stderr=io.StringIO())
    assert again.predicted == ["q1"]


def test_item_engine_error_is_recorded_wrong_and_retried_on_resume(tmp_path: Path):
    engine = FakeEngine().reply("boom", when="say w0")
    summary = run_eval(EchoTask(1), namespace(out=str(tmp_path)), engine=engine, stdout=io.StringIO(),
                       stderr=io.StringIO())
    assert summary["metrics"]["accuracy"] == 0.0
    line = json.loads((tmp_path / "results.jsonl").read_text().splitlines()[0])
    assert line["prediction"]["status"] == "error" and "EngineError" in line["prediction"]["error"]
    retry = EchoTask(1)
    summary = run_eval(retry, namespace(out=str(tmp_path)), engine=FakeEngine().reply("w0", when="say w0"),
                       stdout=io.StringIO(), stderr=io.StringIO())
    assert retry.predicted == ["q0"] and summary["metrics"]["accuracy"] == 1.0


def test_config_error_stops_the_run(tmp_path: Path):
    class NoModel(EchoTask):
        def predict(self, item, ctx):
            raise ConfigError("model file not found: pass --model")

    with pytest.raises(ConfigError):
        run_eval(NoModel(2), namespace(out=str(tmp_path)), stdout=io.StringIO(), stderr=io.StringIO())
    assert (tmp_path / "results.jsonl").read_text() == ""


def test_engine_is_loaded_lazily_for_predictions(tmp_path: Path):
    preds = tmp_path / "preds.jsonl"
    preds.write_text("\n".join(json.dumps({"id": f"q{i}", "prediction": {"status": "ok", "answer": f"w{i}"}})
                               for i in range(2)))
    ctx_task = EchoTask(2)
    summary = run_eval(ctx_task, namespace(predictions=str(preds)), stdout=io.StringIO(), stderr=io.StringIO())
    assert ctx_task.predicted == [] and summary["metrics"]["accuracy"] == 1.0


# -- CLI, on tiny files ---------------------------------------------------------------------------------
TAGS = [
    {"instruction": "I like Thai food in Oakland.",
     "tagged": "[IN:GET_RESTAURANTS I like [SL:CUISINE Thai ] food in [SL:CITY Oakland ]. ]"},
    {"instruction": "My airline is Delta when I fly.",
     "tagged": "[IN:GET_FLIGHTS My airline is [SL:AIRLINES Delta ] when I fly. ]"},
]


def test_cli_tags_gold_against_gold_is_perfect(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    data = tmp_path / "tags.json"
    data.write_text(json.dumps(TAGS))
    assert main(["eval", "tags", "--data", str(data), "--predictions", str(data), "--out", str(tmp_path / "o")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["n"] == 2
    assert summary["metrics"]["span_f1"] == 1.0 and summary["metrics"]["action_accuracy"] == 1.0
    assert summary["metrics"]["validity_rate"] == 1.0
    assert (tmp_path / "o" / "tags_f1_by_slot.png").exists()


def test_cli_tags_scores_a_wrong_prediction(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    data = tmp_path / "tags.json"
    data.write_text(json.dumps(TAGS))
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"id": "0", "tagged": TAGS[0]["tagged"]}) + "\n"
                     + json.dumps({"id": "1", "tagged": "[IN:GET_FLIGHTS My airline is Delta"}) + "\n")
    main(["eval", "tags", "--data", str(data), "--predictions", str(preds)])
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]
    assert metrics["validity_rate"] == 0.5 and metrics["action_accuracy"] == 0.5
    # CUISINE 1, CITY 1, AIRLINES 0 (missed) -> macro 2/3
    assert metrics["span_f1"] == pytest.approx(2 / 3)


def test_cli_tags_with_fake_tagger_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    data = tmp_path / "tags.json"
    data.write_text(json.dumps(TAGS[:1]))
    fake = tmp_path / "fake.json"
    fake.write_text(json.dumps([{"text": TAGS[0]["tagged"]}]))
    examples = tmp_path / "examples.json"
    examples.write_text(json.dumps(TAGS[1:]))
    assert main(["eval", "tags", "--data", str(data), "--fake-engine", str(fake), "--examples", str(examples),
                 "--tag-mode", "text"]) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]
    assert metrics["span_f1"] == 1.0


NLSI = [
    {"example_id": 1, "user_utterance": "User: Find me Thai food.",
     "all_standing_instructions": ["If I'm looking for Restaurants, my go-to city is San Fran."],
     "applicable_standing_instructions": ["If I'm looking for Restaurants, my go-to city is San Fran."],
     "api_calls": ['GetRestaurants(city="San Fran", cuisine="Thai")'], "example_type": "simple"},
    {"example_id": 2, "user_utterance": "User: Any concerts?", "all_standing_instructions": [],
     "applicable_standing_instructions": [], "api_calls": ['GetEvents(category="Music")'], "example_type": "override"},
]


def test_cli_nlsi_predictions_with_alias_and_parse_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    data = tmp_path / "nlsi.json"
    data.write_text(json.dumps(NLSI))
    locations = tmp_path / "locations.json"
    locations.write_text(json.dumps({"san fran": "sfo", "san francisco": "sfo"}))
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"id": "1", "calls": ['GetRestaurants(city="San Francisco", cuisine="thai")']}) + "\n"
                     + json.dumps({"id": "2", "prediction": {"status": "parse_error", "calls": [], "raw": "Get("}})
                     + "\n")
    out = tmp_path / "o"
    main(["eval", "nlsi", "--data", str(data), "--predictions", str(preds), "--locations", str(locations),
          "--out", str(out)])
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]
    assert metrics["exact_match"] == 0.5 and metrics["slot_f1"] == 0.5
    assert metrics["parse_error_rate"] == 0.5
    assert metrics["by_type"]["simple"]["exact_match"] == 1.0 and metrics["by_type"]["override"]["exact_match"] == 0.0
    report = (out / "report.md").read_text()
    assert "Items without a valid prediction" in report and "parse_error" in report
    assert (out / "nlsi_slot_f1_example_type.png").exists()


def _first_right_run(tmp_path: Path, rows: list[dict]) -> Path:
    """`eval nlsi --out` over two NLSI rows with stored predictions: the first item right, the second empty."""
    data = tmp_path / "nlsi.json"
    data.write_text(json.dumps(rows))
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"id": "1", "calls": ['GetRestaurants(city="San Fran", cuisine="Thai")']}) + "\n"
                     + json.dumps({"id": "2", "calls": []}) + "\n")
    out = tmp_path / "run"
    main(["eval", "nlsi", "--data", str(data), "--predictions", str(preds), "--out", str(out)])
    return out


def test_cli_nlsi_breaks_the_corpus_down_by_failure_class_and_phrasing_style(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]):
    out = _first_right_run(tmp_path, [dict(NLSI[0], classes=["b:common-noun", "a:similar-arguments"], style="if-ask"),
                                      dict(NLSI[1], classes=[], style="usually")])
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]
    # an item counts in each of its classes; one with none in "none"
    assert {k: (v["n"], v["exact_match"]) for k, v in metrics["by_class"].items()} == {
        "a:similar-arguments": (1, 1.0), "b:common-noun": (1, 1.0), "none": (1, 0.0)}
    assert {k: v["exact_match"] for k, v in metrics["by_style"].items()} == {"if-ask": 1.0, "usually": 0.0}
    assert main(["eval", "report", str(out), "--breakdown", "by_class"]) == 0
    assert "b:common-noun" in capsys.readouterr().out


def test_nlsi_gold_against_gold_on_shared_data(shared_data: Path, capsys: pytest.CaptureFixture[str]):
    data = shared_data / "nlsi" / "dev.json"
    main(["eval", "nlsi", "--data", str(data), "--predictions", str(data), "--split", "all"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # Every item, the repeated example_id 3478 twice with its own prediction each (keyed by id and position).
    assert summary["n"] == 403 and summary["n_scored"] == 403
    assert summary["metrics"]["exact_match"] == 1.0 and summary["metrics"]["slot_f1"] == 1.0
    assert summary["split"]["part"] == "all"
    main(["eval", "nlsi", "--data", str(data), "--predictions", str(data)])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["split"] == {"part": "report", "sources": {"nlsi/dev.json": 130}, "unsplit": [], "note": ""}
    assert summary["n"] == 130


def test_tags_gold_against_gold_on_shared_data(shared_data: Path, capsys: pytest.CaptureFixture[str]):
    data = shared_data / "taps" / "tags_dev.json"
    main(["eval", "tags", "--data", str(data), "--predictions", str(data)])
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]
    assert metrics["span_f1"] == 1.0 and metrics["validity_rate"] == 1.0 and metrics["action_accuracy"] == 1.0


def test_dst_gold_against_gold_on_shared_data(shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from prefcall.evaluation.tasks.dst import TASK as DST

    data = shared_data / "sgd" / "dev_dialogues_001.json"
    items = DST.load(namespace(data=str(data), dialogues=10, sgd_schema=None))
    preds = tmp_path / "gold.jsonl"
    preds.write_text("\n".join(json.dumps({"id": i.id, "calls": i.gold["calls"]}) for i in items))
    main(["eval", "dst", "--data", str(data), "--dialogues", "10", "--predictions", str(preds), "--split", "all"])
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]
    assert metrics["joint_goal_accuracy"] == 1.0 and metrics["intent_accuracy"] == 1.0
    # predicting nothing keeps only what the history set: JGA drops, intents of active turns are missed
    preds.write_text("\n".join(json.dumps({"id": i.id, "calls": []}) for i in items))
    main(["eval", "dst", "--data", str(data), "--dialogues", "10", "--predictions", str(preds), "--split", "all"])
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]
    assert metrics["joint_goal_accuracy"] < 1.0 and metrics["intent_accuracy"] < 1.0


def test_dst_history_carries_gold_calls(shared_data: Path):
    from prefcall.evaluation.tasks.dst import TASK as DST

    items = DST.load(namespace(data=str(shared_data / "sgd" / "dev_dialogues_001.json"), dialogues=1,
                               sgd_schema=None))
    second = items[1]
    assert second.input["dialogue"][1]["role"] == "assistant"
    assert second.input["dialogue"][1]["calls"][0]["name"] == "ReserveRestaurant"
    assert second.meta["carried"]["Restaurants_2"]["slots"]["number_of_seats"] == "2"


def test_unexpected_exception_is_recorded_with_its_location(tmp_path: Path):
    class Buggy(EchoTask):
        def predict(self, item, ctx):
            raise KeyError("prefix cache")

    summary = run_eval(Buggy(2), namespace(out=str(tmp_path)), stdout=io.StringIO(), stderr=io.StringIO())
    assert summary["n"] == 2 and summary["metrics"]["accuracy"] == 0.0
    line = json.loads((tmp_path / "results.jsonl").read_text().splitlines()[0])
    assert line["prediction"]["status"] == "error" and line["prediction"]["error"].startswith("KeyError at ")


def test_dst_wrong_function_this_turn_is_a_wrong_intent(shared_data: Path):
    from prefcall.evaluation.tasks.dst import TASK as DST

    items = DST.load(namespace(data=str(shared_data / "sgd" / "dev_dialogues_001.json"), dialogues=1,
                               sgd_schema=None))
    second = items[1]  # gold: ReserveRestaurant continues, with location and restaurant_name added
    wrong = DST.score(second, {"status": "ok", "calls": [{"name": "SearchRoundtripFlights", "arguments": {}}]})
    assert wrong["intent_accuracy"] == 0.0
    silent = DST.score(second, {"status": "ok", "calls": []})
    # No call this turn: no intent is credited (the carried one was the harness's, not the model's), new slots missed.
    assert silent["intent_accuracy"] == 0.0 and silent["joint_goal_accuracy"] == 0.0
    right = DST.score(second, {"status": "ok", "calls": second.gold["calls"]})
    assert right["joint_goal_accuracy"] == 1.0 and right["intent_accuracy"] == 1.0


def test_dst_a_wrong_service_carried_from_an_earlier_turn_stays_a_false_positive(shared_data: Path):
    """Predicted history: a service the dialogue never uses, set by an earlier wrong call, is scored in later
    turns (its slots are false positives); a service of the dialogue that this turn's gold does not list is not."""
    from prefcall.evaluation.tasks.dst import TASK as DST

    items = DST.load(namespace(data=str(shared_data / "sgd" / "dev_dialogues_001.json"), dialogues=1,
                               sgd_schema=None))
    second = items[1]
    wrong = {"Flights_3": {"intent": "SearchRoundtripFlights", "slots": {"origin_city": "Paris"}}}
    scored = DST.score(second, {"status": "ok", "calls": second.gold["calls"], "carried": wrong})
    clean = DST.score(second, {"status": "ok", "calls": second.gold["calls"], "carried": {}})
    assert "Flights_3" not in second.input["services"]
    assert scored["n_pred"] == clean["n_pred"] + 1 and scored["slot_precision"] < clean["slot_precision"]
    own = {second.input["services"][0]: {"intent": "x", "slots": {}}, "Unlisted_1": {"intent": "y", "slots": {}}}
    assert DST.score(second, {"status": "ok", "calls": second.gold["calls"], "carried": own})["slot_precision"] == 1.0


def test_eval_report_tabulates_runs_with_intervals_commit_and_command(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]):
    out = _first_right_run(tmp_path, NLSI)
    capsys.readouterr()
    assert main(["eval", "report", str(out), "--breakdown", "by_type"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| task | model | config | items | n |")
    row = table[2]
    assert "| nlsi |" in row and "exact_match 0.500 [" in row and "all items (not a split source)" in row
    assert "--out DIR" in row and str(out) not in row and "`prefcall eval nlsi" in row
    assert any(line.startswith("| nlsi, type simple |") and "exact_match 1.000" in line for line in table)
    assert main(["eval", "report", str(tmp_path / "missing")]) == 2
    assert "no metrics.json" in capsys.readouterr().err


def test_eval_report_shows_every_tasks_headline_metrics():
    """Each task's headline names metrics its aggregate really writes (a wrong name shows as '-')."""
    from prefcall.evaluation import table
    from prefcall.evaluation.tasks import tools

    scored = [ScoredItem(id="1", input={}, gold=["a"], prediction={"selected": ["a"], "status": "ok"}, status="ok",
                         scores={"exact_set": 1.0, "tp": 1.0, "fp": 0.0, "fn": 0.0}),
              ScoredItem(id="2", input={}, gold=[], prediction={"selected": [], "status": "ok"}, status="ok",
                         scores={"exact_set": 1.0, "tp": 0.0, "fp": 0.0, "fn": 0.0})]
    metrics = tools.aggregate(scored)
    for task in ("nlt", "tools"):
        assert all(key in metrics for key in table.HEADLINE[task]), task
    from prefcall.evaluation.tasks import bfcl

    relevant = ScoredItem(id="3", input={}, gold={}, prediction={"status": "ok", "decision": "call"}, status="ok",
                          scores={"ast_match": 1.0, "selection": 1.0, "no_call": 0.0})
    assert all(key in bfcl.aggregate([relevant]) for key in table.HEADLINE["bfcl"])


def test_nlsi_scores_its_function_selection_beside_the_retrieval_baselines():
    # issue 32: the function-selection part of `eval nlsi` (the functions the answer calls against the gold calls')
    # with BM25 and embedder top-k (oracles) and the embedder with its fitted threshold on the same request
    from prefcall.evaluation.tasks.nlsi import NlsiTask
    from prefcall.strategies.nlt_models import DecisionRule

    task = NlsiTask()
    task._aliases = {}
    item = NlsiTask._item(NLSI[0], "1")
    evidence = {"tools": {"GetRestaurants": [2.0, 0.7], "GetEvents": [0.0, 0.6]}, "threshold_rule": DecisionRule(
        model_weight=0.0, embedding_weight=1.0, threshold=0.5).model_dump()}
    right = {"status": "ok", "calls": ['GetRestaurants(city="San Fran", cuisine="Thai")'],
             "baseline_evidence": evidence}
    scores = task.score(item, right)
    assert scores["function_set"] == 1.0 and scores["baseline/bm25_topk_oracle"] == 1.0
    assert scores["baseline/embedder_threshold"] == 0.0  # both functions pass its threshold: not the gold set
    wrong = task.score(item, right | {"calls": ['GetEvents(city="San Fran")']})
    assert wrong["function_set"] == 0.0
    assert task.score(item, {"status": "parse_error", "calls": [], "baseline_evidence": evidence})["function_set"] == 0.0
    rows = [ScoredItem(id=str(n), input={}, gold=item.gold, meta=item.meta, prediction=p, scores=s)
            for n, (p, s) in enumerate([(right, scores), (right, wrong)])]
    baselines = task.aggregate(rows)["baselines"]
    assert baselines["bm25_topk_oracle"]["n"] == 2 and baselines["bm25_topk_oracle"]["rule_exact_set_accuracy"] == 0.5


def test_dst_scores_a_turns_function_selection_beside_the_retrieval_baselines(shared_data: Path):
    # issue 32: the function-selection part of `eval dst`, this turn's called functions against its gold calls'
    from prefcall.evaluation.tasks.dst import TASK as DST
    from prefcall.strategies.nlt_models import DecisionRule

    items = DST.load(namespace(data=str(shared_data / "sgd" / "dev_dialogues_001.json"), dialogues=1,
                               sgd_schema=None))
    second = items[1]
    gold = second.gold["calls"][0]["name"]
    evidence = {"tools": {gold: [3.0, 0.8], "SearchRoundtripFlights": [0.0, 0.2]}, "threshold_rule": DecisionRule(
        model_weight=0.0, embedding_weight=1.0, threshold=0.5).model_dump()}
    right = DST.score(second, {"status": "ok", "calls": second.gold["calls"], "baseline_evidence": evidence})
    assert right["function_set"] == 1.0 and right["baseline/embedder_threshold"] == 1.0
    assert right["baseline/bm25_topk_oracle"] == 1.0
    wrong = DST.score(second, {"status": "ok", "calls": [{"name": "SearchRoundtripFlights", "arguments": {}}],
                               "baseline_evidence": evidence})
    assert wrong["function_set"] == 0.0 and wrong["baseline/embedder_threshold"] == 1.0
    rows = [ScoredItem(id=str(n), input={}, gold=second.gold, meta=second.meta, prediction={}, scores=s)
            for n, s in enumerate([right, wrong])]
    assert DST.aggregate(rows)["baselines"]["embedder_threshold"]["rule_exact_set_accuracy"] == 0.5


def test_dst_baseline_intervals_resample_whole_dialogues():
    from prefcall.evaluation.tasks.dst import TASK as DST

    # two dialogues of four turns each, all right in one and all wrong in the other: turn-level resampling would
    # give a narrow interval around 0.5, resampling whole dialogues cannot tell 0 from 1
    rows = [ScoredItem(id=f"{d}:{t}", input={}, gold={}, meta={"dialogue_id": d}, prediction={},
                       scores={"function_set": float(d == "a"), "baseline/embedder_threshold": float(d == "a")})
            for d in ("a", "b") for t in range(4)]
    clustered = DST.aggregate(rows)["baselines"]["embedder_threshold"]["exact_set_accuracy"]
    assert clustered == 0.5 and clustered.method != "none" and tuple(clustered.interval()) == (0.0, 1.0)
