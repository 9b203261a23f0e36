"""The `acebench` eval task: every category of the public format, decisions, missing / wrong parameters,
argument values against possible_answer, stored predictions (ours and ACEBench's own output), agent items
counted as not scorable here. Fixtures: tests/data/acebench (made-up items in the public format)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from prefcall.cli import main
from prefcall.engine.fake import FakeEngine
from prefcall.errors import ConfigError
from prefcall.evaluation.metrics.acebench import best_alternative, gold_alternatives, value_matches
from prefcall.evaluation.task import EvalItem, ScoredItem
from prefcall.evaluation.tasks import acebench

DATA = Path(__file__).parent / "data" / "acebench"

FUNCTIONS = [{"name": "book", "description": "Books a table.", "parameters": {"type": "object", "properties": {
    "restaurant": {"type": "string", "description": "Restaurant name."}, "time": {"type": "string"}}, "required": ["restaurant", "time"]}}]


def _item(category: str, gold: dict, profile: str | None = None) -> EvalItem:
    return EvalItem(id=f"{category}_0", input={"question": "user: Book me a table at Nopa", "functions": FUNCTIONS,
                                               "time": None, "profile": profile}, gold=gold, meta={"category": category})


def call(function: str, /, **arguments: Any) -> dict[str, Any]:
    return {"name": function, "arguments": arguments}


# -- format --------------------------------------------------------------------------------------
def test_parse_dialogue_reads_system_turns_and_their_calls() -> None:
    turns = acebench.parse_dialogue("user: I want a table\nsystem: Where?\nuser: Nopa\n"
                                    "system: [book(restaurant=\"Nopa\", time=\"7pm\")]\nsystem: Booked.\nuser: Thanks")
    assert [t.role for t in turns] == ["user", "assistant", "user", "assistant", "assistant", "user"]
    assert turns[3].calls[0].arguments == {"restaurant": "Nopa", "time": "7pm"} and turns[3].content == ""
    assert turns[4].content == "Booked."
    assert acebench.parse_dialogue("no speaker here")[0].content == "no speaker here"


def test_category_from_file_name_id_or_option() -> None:
    assert acebench.category_of_file(Path("data_normal_atom_list.json")) == "normal_atom_list"
    assert acebench.category_of("normal_multi_turn_user_adjust_3_1") == "normal_multi_turn_user_adjust"
    assert acebench.expected_decision("special_error_param") == "ask"
    assert acebench.expected_decision("special_irrelevant") == "refuse"
    assert acebench.expected_decision("normal_similar_api") == "call"
    with pytest.raises(ConfigError, match="unknown ACEBench category 'special_other'"):
        acebench.known_category("special_other")


def test_gold_by_category() -> None:
    assert acebench.gold_of("special_incomplete", {"f": ["a ", " b"]}) == {"decision": "ask", "missing": {"f": ["a", "b"]}}
    assert acebench.gold_of("special_error_param", {"p": ["x1"]}) == {"decision": "ask", "wrong": {"p": ["x1"]}}
    assert acebench.gold_of("special_irrelevant", "Due to ...") == {"decision": "refuse"}
    gold = acebench.gold_of("normal_single_turn_parallel_function", {"get_1": {"x": 1}, "get_2": {"x": 2}},
                            [{"name": "get"}])
    assert gold == {"decision": "call", "answers": [[call("get", x=1), call("get", x=2)]]}


# -- loading every category -----------------------------------------------------------------------
CATEGORIES = sorted(p.name[5:-5] for p in DATA.glob("data_*.json"))


def test_fixtures_cover_every_public_category() -> None:
    assert set(CATEGORIES) >= {*acebench.SPECIAL, *acebench.AGENT, "normal_single_turn_single_function",
                               "normal_single_turn_parallel_function", "normal_multi_turn_user_adjust",
                               "normal_multi_turn_user_switch", "normal_similar_api", "normal_preference"}


@pytest.mark.parametrize("category", CATEGORIES)
def test_loads_each_category(category: str) -> None:
    items = acebench.load_items(DATA / f"data_{category}.json")
    assert items and all(i.meta["category"] == category for i in items)
    if category.startswith("agent_"):
        assert all(i.skip and "executable environment" in i.skip for i in items)
        return
    assert all(i.error is None and i.gold["decision"] == acebench.expected_decision(category) for i in items)
    assert all(acebench.catalogue_of(i.input["functions"]).functions for i in items)


def test_folder_loads_every_file_and_category_option_overrides(tmp_path: Path) -> None:
    items = acebench.load_items(DATA)
    assert {i.meta["category"] for i in items} == set(CATEGORIES)
    renamed = tmp_path / "mine.jsonl"
    renamed.write_text((DATA / "data_special_error_param.json").read_text())
    items = acebench.load_items(renamed, DATA / "possible_answer" / "data_special_error_param.json",
                                category="special_error_param")
    assert [i.gold["wrong"] for i in items] == [{"tracking_number": ["AB12"]}, {"time": ["25:90"]}]
    with pytest.raises(ConfigError, match="no ACEBench answers"):
        acebench.load_items(renamed, category="normal_preference")


def test_unreadable_answer_is_one_error_item(tmp_path: Path) -> None:
    (tmp_path / "possible_answer").mkdir()
    data = tmp_path / "data_normal_similar_api.json"
    data.write_text((DATA / "data_normal_similar_api.json").read_text())
    (tmp_path / "possible_answer" / data.name).write_text(json.dumps({"id": "normal_similar_api_0", "ground_truth": "x"}))
    items = acebench.load_items(data)
    assert items[0].error and "possible answer unreadable" in items[0].error
    assert items[1].error == "possible answer unreadable: no possible answer for this id"


# -- value and call checks ------------------------------------------------------------------------
def test_value_matches_like_acebench() -> None:
    assert value_matches("Lisbon, Portugal", "lisbon")  # standardised gold contained in the prediction
    assert not value_matches("Porto", "Lisbon")
    assert value_matches("4", 4) and value_matches(4.0, 4) and not value_matches("four", 4)
    assert value_matches("true", True) and not value_matches(1, True)
    assert value_matches(["Hey Jude", "africa"], ["Hey Jude", "Africa"]) and not value_matches(["Africa"], ["Hey Jude", "Africa"])
    assert value_matches("it", ["it", "italian"])  # a list against a scalar: acceptable values
    assert value_matches({"a": 1, "b": "X"}, {"a": 1, "b": "x"}) and not value_matches({"a": 1}, {"a": 1, "b": 2})


def test_parallel_calls_pair_by_name_and_alternatives_take_the_best() -> None:
    gold = gold_alternatives({"get_weather_1": {"city": "Oslo"}, "get_weather_2": {"city": "Bergen"}}, ["get_weather"])
    both = best_alternative([call("get_weather", city="Bergen"), call("get_weather", city="Oslo")], gold)
    assert both == {"function_match": 1.0, "argument_accuracy": 1.0, "call_exact": 1.0}
    one = best_alternative([call("get_weather", city="Oslo")], gold)
    assert one == {"function_match": 0.0, "argument_accuracy": 0.5, "call_exact": 0.0}
    extra = best_alternative([call("get_weather", city="Oslo", metric=True), call("get_weather", city="Bergen")], gold)
    assert extra["argument_accuracy"] == 1.0 and extra["call_exact"] == 0.0  # an argument the gold lacks
    alternatives = gold_alternatives([{"t": {"text": "a"}}, {"t": {"text": "b"}}], ["t"])
    assert best_alternative([call("t", text="b")], alternatives)["call_exact"] == 1.0


# -- scoring with stored predictions, every category -----------------------------------------------
RIGHT = {
    "special_incomplete_0": {"decision": "ask", "question": "How many people, and what time?", "missing": ["party_size", "time"]},
    "special_incomplete_1": {"result": "Missing necessary parameters (target_language) for the api (translate_text)"},
    "special_error_param_0": {"result": "There is incorrect value (AB12) for the parameters (tracking_number) in the conversation history."},
    "special_error_param_1": {"decision": "ask", "question": "25:90 is not a valid time: which time did you mean?", "missing": []},
    "special_irrelevant_0": {"decision": "refuse"},
    "special_irrelevant_1": {"result": "Due to the limitations of the function, I cannot solve this problem."},
    "normal_single_turn_single_function_0": {"result": "[get_weather(city='Lisbon', metric=True)]"},
    "normal_single_turn_single_function_1": {"decision": "call", "calls": [call("book_table", restaurant="Nopa", party_size=4, time="19:30")]},
    "normal_single_turn_parallel_function_0": {"calls": [call("get_weather", city="Bergen"), call("get_weather", city="Oslo")]},
    "normal_single_turn_parallel_function_1": {"result": "[translate_text(text='thank you', target_language='fr'), get_weather(city='Paris')]"},
    "normal_multi_turn_user_adjust_0_0": {"decision": "call", "calls": ["book_table(restaurant=\"Chez Anna\", party_size=2, time=\"20:00\")"]},
    "normal_multi_turn_user_adjust_0_1": {"decision": "continue", "call": call("book_table", restaurant="Chez Anna", party_size=3, time="20:00")},
    "normal_multi_turn_user_switch_0_0": {"calls": [{"track_parcel": {"tracking_number": "QW12ER34TY"}}]},
    "normal_multi_turn_user_switch_0_1": {"calls": [call("get_weather", city="Leeds")]},
    "normal_similar_api_0": {"calls": [call("translate_text_b", file_path="/docs/cv.txt", target_language="de")]},
    "normal_similar_api_1": {"calls": [call("translate_text", text="'cheers'", target_language="it")]},
    "normal_preference_0": {"calls": [call("book_table", restaurant="Sakura", party_size=3, time="19:00")]},
    "normal_preference_1": {"calls": [call("get_weather", city="Porto", metric=True)]},
    "normal_atom_list_0": {"calls": [call("create_playlist", name="Road Trip", songs=["Hey Jude", "Africa"], public=False)]},
    "normal_atom_list_1": {"calls": [call("create_playlist", name="Focus", songs=["Clair de Lune"])]},
}


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], predictions: dict[str, Any], *args: str) -> dict[str, Any]:
    preds = tmp_path / "preds.jsonl"
    preds.write_text("\n".join(json.dumps({"id": k} | v) for k, v in predictions.items()))
    assert main(["eval", "acebench", "--data", str(DATA), "--predictions", str(preds), *args]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_every_category_scores_right_answers_as_right(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = run(tmp_path, capsys, RIGHT, "--out", str(tmp_path / "o"))
    metrics = summary["metrics"]
    assert summary["n"] == 22 and summary["n_scored"] == 20 and summary["not_scorable"] == 2
    assert summary["score_errors"] == 0
    assert metrics["decision_accuracy"] == 1.0
    assert metrics["missing_recall"] == 1.0 and metrics["wrong_value_recall"] == 1.0
    assert metrics["call_exact"] == 1.0 and metrics["argument_accuracy"] == 1.0
    assert set(metrics["by_category"]) == {c for c in CATEGORIES if not c.startswith("agent_")}
    assert metrics["by_category"]["special_irrelevant"]["expected"] == "refuse"
    assert summary["intervals"]["decision_accuracy"]["n"] == 20 and summary["intervals"]["decision_accuracy"]["lo"] > 0.8
    assert all(v["method"] != "none" for v in summary["intervals"].values())
    report = (tmp_path / "o" / "report.md").read_text()
    assert "## Not scorable here (2 items, left out of the metrics)" in report
    assert "agent_multi_step_0" in report and "executable environment" in report


def test_wrong_answers_score_wrong_per_category(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = dict(RIGHT) | {
        "special_incomplete_0": {"decision": "ask", "question": "What time?", "missing": ["time"]},  # half the names
        "special_error_param_0": {"decision": "call", "calls": [call("track_parcel", tracking_number="AB12")]},
        "special_irrelevant_0": {"decision": "call", "calls": [call("get_weather", city="kitchen")]},
        "normal_single_turn_single_function_1": {"calls": [call("book_table", restaurant="Nopa", party_size=2, time="19:30")]},
        "normal_single_turn_parallel_function_0": {"calls": [call("get_weather", city="Oslo")]},
        "normal_similar_api_0": {"calls": [call("translate_text", text="/docs/cv.txt", target_language="de")]},
        "normal_preference_0": {"decision": "ask", "question": "Which restaurant?"},
        "normal_atom_list_1": {"status": "parse_error", "raw": "create_playlist(", "calls": []},
    }
    del wrong["normal_preference_1"]  # missing from the file: status missing, wrong
    summary = run(tmp_path, capsys, wrong)
    m = summary["metrics"]
    by = m["by_category"]
    assert by["special_incomplete"]["missing_recall"] == pytest.approx(0.75)
    assert by["special_error_param"]["decision_accuracy"] == 0.5 and by["special_error_param"]["wrong_value_recall"] == 0.5
    assert by["special_irrelevant"]["decision_accuracy"] == 0.5
    assert by["normal_single_turn_single_function"]["call_exact"] == 0.5
    assert by["normal_single_turn_single_function"]["argument_accuracy"] == pytest.approx((1 + 2 / 3) / 2)
    assert by["normal_single_turn_parallel_function"]["argument_accuracy"] == pytest.approx((0.5 + 1) / 2)
    assert by["normal_similar_api"]["call_exact"] == 0.5  # the similar, wrong API
    assert by["normal_preference"]["decision_accuracy"] == 0.0  # one asked, one missing
    assert by["normal_atom_list"]["decision_accuracy"] == 0.5 and m["parse_error_rate"] == pytest.approx(2 / 20)
    assert m["confusion"]["refuse->call"] == 1 and m["confusion"]["call->ask"] == 1


def test_decision_only_predictions_skip_argument_scores() -> None:
    item = acebench.load_items(DATA / "data_normal_preference.json")[0]
    assert acebench.score(item, {"status": "ok", "decision": "continue"}) == {"decision_correct": 1.0}


def test_unreadable_stored_prediction_is_a_parse_error() -> None:
    assert acebench.prediction_from_record({"id": "x"})["status"] == "parse_error"
    assert acebench.from_acebench_text("I think so")["status"] == "parse_error"
    assert acebench.TASK.predictions_from_file(EvalItem(id="x", input={}), {"calls": [42]})["status"] == "parse_error"


def test_aggregate_by_category_and_confusion() -> None:
    def row(cat: str, gold: str, said: str, ok: float, status: str = "ok") -> ScoredItem:
        return ScoredItem(id=cat, input={}, gold={"decision": gold}, meta={"category": cat},
                          prediction={"status": status, "decision": said}, scores={"decision_correct": ok})

    metrics = acebench.aggregate([
        row("special_irrelevant", "refuse", "limitation", 1.0),
        row("special_irrelevant", "refuse", "continue", 0.0),
        row("normal_preference", "call", "call", 1.0),
        row("normal_preference", "call", "call", 0.0, "parse_error"),
    ])
    assert metrics["decision_accuracy"] == 0.5
    assert metrics["decision_accuracy_by_category"] == {"normal_preference": 0.5, "special_irrelevant": 0.5}
    assert metrics["confusion"] == {"call->call": 1, "call->parse_error": 1, "refuse->call": 1, "refuse->refuse": 1}
    lo, hi = metrics["decision_accuracy"].interval()  # a 95% interval around 2 of 4, inside [0, 1]
    assert 0.0 <= lo < 0.5 < hi <= 1.0
    assert acebench.aggregate([])["decision_accuracy"] == 0.0


# -- predict with a fake engine (no model) ----------------------------------------------------------
def test_predict_incomplete_names_the_missing_parameter() -> None:
    engine = FakeEngine(scorer=lambda p, c: -0.1 if c == " YES" else -3.0)
    engine.reply("Continue", when="Before calling a tool")
    engine.reply(json.dumps({"restaurant": "Nopa"}), when="fill in the arguments")
    item = _item("special_incomplete", {"decision": "ask", "missing": {"book": ["time"]}})
    prediction = acebench.predict(item, engine, "combined")
    assert prediction["decision"] == "ask" and prediction["missing"] == ["time"]
    assert prediction["tokens"]["prompt_tokens"] > 0 and "calls" not in prediction
    assert acebench.score(item, prediction) == {"decision_correct": 1.0, "missing_recall": 1.0}


def test_predict_preference_uses_the_profile_and_drafts_the_call() -> None:
    engine = FakeEngine(scorer=lambda p, c: -0.1 if c == " YES" else -3.0)
    engine.reply("Continue", when="Before calling a tool")
    engine.reply(json.dumps({"restaurant": "Nopa", "time": "7 PM"}), when="fill in the arguments")
    item = _item("normal_preference", {"decision": "call", "answers": [[call("book", restaurant="Nopa", time="7 PM")]]},
                 profile="{'dinner_time': '7 PM'}")
    prediction = acebench.predict(item, engine, "combined")
    assert "User profile: {'dinner_time': '7 PM'}" in engine.prompts[0]
    assert prediction["decision"] == "call" and prediction["calls"] == [call("book", restaurant="Nopa", time="7 PM")]
    assert acebench.score(item, prediction) == {"decision_correct": 1.0, "function_match": 1.0,
                                                "argument_accuracy": 1.0, "call_exact": 1.0}
    assert "calls" not in acebench.predict(item, engine, "combined", with_calls=False)


def test_clarify_is_evaluated_with_the_models_check_and_records_what_the_embedders_rule_alone_gave(
        monkeypatch) -> None:
    """As the MCP server's clarify: a check passed in decides relevance; the model says no, the rule kept it."""
    from prefcall.engine.fake import FakeEmbedder
    from prefcall.strategies import model_check, relevance

    def scorer(prompt: str, candidate: str) -> float:
        if model_check.QUESTIONS[2].question in prompt:
            return {"Yes": -3.0, "No": 0.0}[candidate]
        return -1.0

    engine = FakeEngine(scorer=scorer)
    engine.reply("Continue", when="Before calling a tool")
    engine.reply(json.dumps({"restaurant": "Nopa"}), when="fill in the arguments")
    monkeypatch.setattr(relevance, "ask_rule", lambda embedder: relevance.RelevanceRule(embedder=embedder.name,
                                                                                        threshold=-10.0))
    check = model_check.CheckRule(weights=[0.0, 0.0, 1.0], threshold=0.0, question=2)
    item = _item("special_irrelevant", {"decision": "refuse"})

    class Server:  # the server's pipeline: the model's fitted check, which reads no stage 1
        def check_for(self, dialogue, catalogue, profile=()):
            return check, None

    prediction = acebench.predict(item, engine, "combined", embedder=FakeEmbedder(), pipeline=Server(),
                                  with_calls=False)
    assert (prediction["decision"], prediction["decision_without_check"]) == ("refuse", "ask"), prediction
    assert "decision_without_check" not in acebench.predict(item, engine, "combined", embedder=FakeEmbedder(),
                                                            with_calls=False)


@pytest.mark.parametrize("name", ["data_special_incomplete", "data_special_irrelevant", "data_normal_preference"])
def test_loads_the_shared_acebench_files(shared_data, name: str) -> None:
    items = acebench.load_items(shared_data / "acebench" / f"{name}.json")
    assert len(items) == 50 and all(i.error is None for i in items)
    assert {i.gold["decision"] for i in items} == {
        "data_special_incomplete": {"ask"}, "data_special_irrelevant": {"refuse"}, "data_normal_preference": {"call"}}[name]
    assert all(acebench.catalogue_of(i.input["functions"]).functions for i in items)


def test_the_retrieval_baselines_run_on_the_same_requests_beside_the_answers_function_set(monkeypatch) -> None:
    # issue 32: special_irrelevant (no function: right where nothing is selected), special_incomplete and the
    # normal categories (the gold functions); special_error_param names no function and gets none
    import argparse

    from prefcall.engine.fake import FakeEmbedder
    from prefcall.evaluation.task import EvalContext
    from prefcall.evaluation.tasks import tools
    from prefcall.strategies.nlt_models import DecisionRule

    monkeypatch.setattr(tools, "baseline_rule", lambda embedder: DecisionRule(
        model_weight=0.0, embedding_weight=1.0, threshold=0.99, source="a threshold nothing passes"))
    engine = FakeEngine(scorer=lambda p, c: -0.1 if c == " YES" else -3.0)
    engine.reply("Continue", when="Before calling a tool")
    engine.reply(json.dumps({"restaurant": "Nopa"}), when="fill in the arguments")
    ctx = EvalContext(argparse.Namespace(no_calls=True), engine=engine, embedder=FakeEmbedder())

    def scored(category: str, gold: dict) -> dict:
        item = _item(category, gold)
        return acebench.TASK.score(item, acebench.TASK.predict(item, ctx))

    incomplete = scored("special_incomplete", {"decision": "ask", "missing": {"book": ["time"]}})
    assert incomplete["function_set"] == 1.0  # the question is about book, the gold function
    assert incomplete["baseline/embedder_threshold"] == 0.0 and "baseline/embedder_topk_oracle" in incomplete
    irrelevant = scored("special_irrelevant", {"decision": "refuse"})
    assert irrelevant["baseline/embedder_threshold"] == 1.0  # it selects nothing, as a refusal should
    assert irrelevant["function_set"] == irrelevant["decision_correct"]
    assert "function_set" not in scored("special_error_param", {"decision": "ask", "wrong": {"time": ["25pm"]}})
    rows = [ScoredItem(id=str(n), input={}, gold={}, prediction={}, scores=s)
            for n, s in enumerate([incomplete, irrelevant])]
    assert acebench.aggregate(rows)["baselines"]["embedder_threshold"]["n"] == 2


# -- parse_request with the profile as standing instructions ------------------------------------------------
def test_a_profile_becomes_one_standing_instruction_per_fact() -> None:
    text = ("{'basic_features': {'UserEmail': 'jo@example.com', 'HomeLocation': 'Austin, TX'}, "
            "'user_history': {'shopping': ['Chose Express Delivery', 'Set theme to Dark.']}}. ")
    assert acebench.profile_instructions(text) == [
        "My user email is jo@example.com.", "My home location is Austin, TX.",
        "From my shopping history: Chose Express Delivery.", "From my shopping history: Set theme to Dark."]
    assert acebench.profile_instructions({"DinnerTime": "7 PM"}) == ["My dinner time is 7 PM."]
    assert acebench.profile_instructions("likes jazz") == ["User profile: likes jazz"]  # unreadable: kept whole
    assert acebench.profile_instructions("") == []


def test_parse_request_answers_with_the_profile_as_the_users_instructions(monkeypatch) -> None:
    import argparse

    from prefcall.engine.fake import FakeEmbedder
    from prefcall.evaluation.task import EvalContext
    from prefcall.evaluation.tasks.bfcl import BfclTask
    from prefcall.schemas.model import Call, MissingArgument
    from prefcall.strategies.pipeline_models import ParseResult

    seen: list[tuple[list[str], str, bool]] = []

    class Pipeline:  # what the eval hands parse_request, and what it makes of each kind of answer
        def parse(self, dialogue, instructions, catalogue, config):
            seen.append((list(instructions), config.name, config.allow_refuse))
            if "Nopa" in dialogue[-1].content:
                return ParseResult(decision="call", calls=[Call(name="book", arguments={
                    "restaurant": "Nopa", "time": "7 PM"})], functions=["book"], instructions_used=instructions[:1])
            return ParseResult(decision="ask", question="What time?", functions=["book"],
                               missing=[MissingArgument(function="book", argument="time")])

    monkeypatch.setattr(BfclTask, "pipeline", staticmethod(lambda ctx: Pipeline()))
    ctx = EvalContext(argparse.Namespace(tool="parse_request", config=None), engine=FakeEngine(),
                      embedder=FakeEmbedder())
    item = _item("normal_preference", {"decision": "call", "answers": [[call("book", restaurant="Nopa", time="7 PM")]]},
                 profile="{'basic_features': {'DinnerTime': '7 PM'}}")
    prediction = acebench.TASK.predict(item, ctx)
    assert seen == [(["My dinner time is 7 PM."], "full", True)]  # the shipped config, refusals allowed
    assert prediction["decision"] == "call" and prediction["calls"] == [call("book", restaurant="Nopa", time="7 PM")]
    assert prediction["instructions_used"] == ["My dinner time is 7 PM."] and prediction["instructions"] == 1
    scores = acebench.TASK.score(item, prediction)
    assert (scores["decision_correct"], scores["call_exact"], scores["argument_accuracy"]) == (1.0, 1.0, 1.0)
    incomplete = EvalItem(id="special_incomplete_0", input={**item.input, "question": "user: Book me a table"},
                          gold={"decision": "ask", "missing": {"book": ["time"]}},
                          meta={"category": "special_incomplete"})
    asked = acebench.TASK.predict(incomplete, ctx)
    assert (asked["decision"], asked["missing"], asked["calls"]) == ("ask", ["time"], [])
    assert acebench.TASK.score(incomplete, asked)["missing_recall"] == 1.0
    assert acebench.TASK.score(item, asked)["decision_correct"] == 0.0  # an ask where a call was due is wrong
    for option in ("no_calls", "embedder_relevance"):  # clarify's options are refused, not ignored
        with pytest.raises(ConfigError, match="is clarify's"):
            acebench.TASK.predict(item, EvalContext(argparse.Namespace(tool="parse_request", **{option: True}),
                                                    engine=FakeEngine(), embedder=FakeEmbedder()))
