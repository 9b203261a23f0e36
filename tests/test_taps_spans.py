"""The constrained (spans) TAPS tagger: n-gram enum, deterministic tag building, JSON demos, fake-engine runs."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import jsonschema
import pytest

from prefcall.engine.fake import FakeEmbedder, FakeEngine
from prefcall.errors import ParseError, ValidationError
from prefcall.evaluation.metrics.tags import read_tags, score_tags
from prefcall.schemas.model import Catalogue, Function
from prefcall.strategies.pipeline import Pipeline
from prefcall.strategies.pipeline_models import CONFIGS, get_config
from prefcall.strategies.taps_tagger import (
    TagExample,
    TagExamples,
    check_tagging,
    spans_schema,
    tag_instruction,
)
from prefcall.tagging.tags import build_span_tags, instruction_spans, tags_to_span_choice


def _props(*names: str) -> dict:
    return {"type": "object", "properties": {n: {"type": "string"} for n in names}}


CATALOGUE = Catalogue(name="t", functions=[
    Function(name="GetEvents", parameters=_props("city", "category")),
    Function(name="GetHotels", parameters=_props("location")),
    Function(name="GetTravel", parameters=_props("location")),
    Function(name="GetDoctors", parameters=_props("city")),
    Function(name="GetHouseStays", parameters=_props("where_to", "rating")),
])
DOCTOR = "Request a Doctor from Los Altos."
DOCTOR_GOLD = "[IN:GET_DOCTORS Request a Doctor from [SL:CITY Los Altos ]. ]"


def examples() -> TagExamples:
    return TagExamples([
        TagExample(instruction="I prefer hotels in Paris.", tagged="[IN:GET_HOTELS I prefer hotels in [SL:LOCATION Paris ]. ]"),
        TagExample(instruction="Events in Denver are my favourite.",
                   tagged="[IN:GET_EVENTS Events in [SL:CITY Denver ] are my favourite. ]"),
        TagExample(instruction="Unrelated banking note.", tagged="[IN:GET_BANKS Unrelated banking note. ]"),
    ], FakeEmbedder())


def answer(intent: str, slots: list[tuple[str, str]] = (), also: list[str] = ()) -> str:
    return json.dumps({"intent": intent, "slots": [{"slot": s, "value": v} for s, v in slots], "with": list(also)})


# -- n-grams ----------------------------------------------------------------------------------------
def test_ngrams_strip_edge_punctuation_keep_inner_and_respect_length():
    spans = instruction_spans("If in Sydney, NSW, pick a rating of 3.9 - two at least.", max_words=3)
    assert "Sydney" in spans and "Sydney, NSW" in spans and "3.9" in spans and "least" in spans
    assert not any(v.endswith((",", ".")) or v.startswith(("-", " ")) for v in spans)
    assert "- two" not in spans and "-" not in spans and "two at least" in spans
    assert all(len(v.split()) <= 3 for v in spans)
    assert spans["Sydney, NSW"] == [(6, 17)]


def test_quotes_are_edges_never_inside_a_value():
    spans = instruction_spans('search for "Cubs Vs Mariners" if "Baseball\\" x')
    assert "Cubs Vs Mariners" in spans and "Cubs" in spans and "Mariners" in spans
    assert not any('"' in v or "\\" in v for v in spans)


def test_repeated_ngrams_keep_every_occurrence():
    spans = instruction_spans("Boston to Boston.")
    assert spans["Boston"] == [(0, 6), (10, 16)]


# -- building ---------------------------------------------------------------------------------------
def test_built_tags_match_the_gold_format_and_validate():
    built = build_span_tags(DOCTOR, "GET_DOCTORS", [("CITY", "Los Altos")])
    assert built.tagged == DOCTOR_GOLD and built.dropped == []
    result = check_tagging(DOCTOR, built.tagged, CATALOGUE)
    assert result.status == "ok" and result.triples[0].value == "Los Altos"
    assert score_tags(read_tags(built.tagged), read_tags(DOCTOR_GOLD))["span_f1"] == 1.0


def test_duplicates_and_overlaps_are_dropped_and_listed():
    text = "If I ask for events in New York City, I like jazz."
    built = build_span_tags(text, "GET_EVENTS", [("CITY", "New York City"), ("CITY", "New York City"),
                                                 ("CATEGORY", "York"), ("CATEGORY", "jazz")])
    assert built.tagged == "[IN:GET_EVENTS If I ask for events in [SL:CITY New York City ], I like [SL:CATEGORY jazz ]. ]"
    assert len(built.dropped) == 2 and "duplicate" in built.dropped[0] and "overlaps" in built.dropped[1]
    assert check_tagging(text, built.tagged, CATALOGUE).status == "ok"


def test_a_repeated_value_takes_the_next_free_occurrence():
    built = build_span_tags("Boston to Boston.", "GET_TRAVEL", [("LOCATION", "Boston"), ("CITY", "Boston")])
    assert built.tagged == "[IN:GET_TRAVEL [SL:LOCATION Boston ] to [SL:CITY Boston ]. ]"


def test_value_that_is_not_a_span_raises():
    with pytest.raises(ParseError, match="not a span"):
        build_span_tags(DOCTOR, "GET_DOCTORS", [("CITY", "Los Angeles")])


def test_further_intents_bracket_the_word_naming_their_api():
    text = "If I'm looking for a HouseStay, also check Hotels."
    built = build_span_tags(text, "GET_EVENTS", [], ["GET_HOTELS", "GET_HOTELS", "GET_EVENTS"])
    assert built.tagged == "[IN:GET_EVENTS If I'm looking for a HouseStay, also check [IN:GET_HOTELS Hotels ]. ]"
    parsed = read_tags(built.tagged)
    assert parsed.valid and sorted(parsed.intents) == ["GET_EVENTS", "GET_HOTELS"]
    nested = build_span_tags(text, "GET_HOTELS", [], ["GET_HOUSE_STAYS"])
    assert "[IN:GET_HOUSE_STAYS HouseStay ]" in nested.tagged
    assert check_tagging(text, nested.tagged, CATALOGUE).status == "ok"


# -- demonstrations ---------------------------------------------------------------------------------
def test_gold_tags_become_json_choices_with_the_slot_owning_intent_first():
    nested = "[IN:GET_TRAVEL [IN:GET_EVENTS I prefer [SL:CATEGORY pop ] music ] when I request Travel. ]"
    assert tags_to_span_choice(nested, CATALOGUE) == {
        "intent": "GET_EVENTS", "slots": [{"slot": "CATEGORY", "value": "pop"}], "with": ["GET_TRAVEL"]}
    loose = "[IN:GET_HOUSESTAYS Stay in [SL: WHERE_TO Sydney, NSW ], rating [SL:RATING 3.9 ]. ]"
    assert tags_to_span_choice(loose, CATALOGUE)["slots"] == [
        {"slot": "WHERE_TO", "value": "Sydney, NSW"}, {"slot": "RATING", "value": "3.9"}]
    assert tags_to_span_choice("[IN:GET_BANKS x ]", CATALOGUE) is None
    assert tags_to_span_choice("[IN:GET_EVENTS open", CATALOGUE) is None


# -- schema -----------------------------------------------------------------------------------------
def test_schema_restricts_slots_per_intent_and_values_to_ngrams():
    schema = spans_schema("I like events in Boston.", CATALOGUE)
    jsonschema.validate(json.loads(answer("GET_EVENTS", [("CITY", "Boston")])), schema)
    jsonschema.validate(json.loads(answer("GET_EVENTS", [], ["GET_HOTELS"])), schema)
    for bad in (answer("GET_HOTELS", [("CITY", "Boston")]),  # CITY is not a GetHotels argument
                answer("GET_EVENTS", [("CITY", "Boston.")]),  # punctuation is not part of a span
                answer("GET_EVENTS", [("CITY", "Denver")]),
                answer("GET_BANKS")):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(json.loads(bad), schema)


# -- the tagger -------------------------------------------------------------------------------------
def test_spans_mode_builds_valid_tags_with_json_demos_and_schema():
    engine = FakeEngine().reply(answer("GET_EVENTS", [("CITY", "Boston")]))
    result = tag_instruction(engine, "I like events in Boston.", CATALOGUE, examples(), k=2, mode="spans")
    assert result.status == "ok" and result.mode == "spans"
    assert result.tagged == "[IN:GET_EVENTS I like events in [SL:CITY Boston ] . ]"
    assert result.triples[0].function == "GetEvents" and 0.0 <= result.least_confidence <= 1.0
    call = engine.calls[0]
    assert "Boston" in call["json_schema"]["$defs"]["span"]["enum"]
    assert '{"intent": "GET_EVENTS", "slots": [{"slot": "CITY", "value": "Denver"}], "with": []}' in call["prompt"]
    assert "GET_BANKS" not in call["prompt"].split("APIs and their arguments:")[1]  # demo of an unknown API skipped


@pytest.mark.parametrize("reply, reason", [
    (answer("GET_EVENTS", [("CITY", "Denver")]), "not a span"),
    (answer("GET_HOTELS", [("CITY", "Boston")]), "unknown slot"),
    (answer("GET_BANKS"), "unknown API"),
    ('{"intent": 3}', "no \"intent\""),
    ('{"intent": "GET_EVENTS", "slots": [{"slot": "CITY"}], "with": []}', "slots"),
])
def test_invalid_span_answers_are_reported_invalid(reply: str, reason: str):
    # The grammar rules these out; a backend that ignores the schema can still send them, so the tagger checks.
    result = tag_instruction(FakeEngine(enforce_schema=False).reply(reply), "I like events in Boston.", CATALOGUE, examples(), mode="spans")
    assert result.status == "invalid" and result.tagged is None and reason in " ".join(result.reasons)
    assert result.raw == reply


def test_truncated_json_is_invalid():
    engine = FakeEngine(enforce_schema=False).reply("{}")
    original = engine.generate
    engine.generate = lambda prompt, **kw: dataclasses.replace(original(prompt, **kw), text='{"intent": "GET_EV')
    result = tag_instruction(engine, "I like events in Boston.", CATALOGUE, mode="spans")
    assert result.status == "invalid" and "not complete JSON" in result.reasons[0]


def test_unknown_mode_and_empty_instruction():
    with pytest.raises(ValidationError, match="text, spans"):
        tag_instruction(FakeEngine(), "x", CATALOGUE, mode="words")
    assert tag_instruction(FakeEngine(), "  ", CATALOGUE, mode="spans").status == "invalid"


# -- wiring -----------------------------------------------------------------------------------------
def test_pipeline_passes_the_tag_mode_and_full_uses_spans():
    assert CONFIGS["fnctod-full"].tag_mode == "spans" and CONFIGS["taps"].tag_mode == "text"
    assert CONFIGS["full"].tag_mode == "structured"
    city = "If I'm looking for events, my go-to city is Boston."
    fake = FakeEngine()
    fake.reply(answer("GET_EVENTS", [("CITY", "Boston")]), when="answer in JSON")
    fake.reply('["GetEvents"]', when="Functions:\n")
    fake.reply('[{"city": "Boston"}]')
    fake.reply('[{"city": "Boston"}]')
    result = Pipeline(fake).parse("User: any concerts?", [city], CATALOGUE,
                                  get_config("ext-tag", tag_mode="spans"), applicable=[city])
    assert result.tags[0].status == "ok" and result.tags[0].mode == "spans"
    assert "[SL:CITY Boston ]" in result.tags[0].tagged


def test_eval_tags_cli_spans_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from prefcall.cli import main

    data = tmp_path / "tags.json"
    data.write_text(json.dumps([{"instruction": DOCTOR, "tagged": DOCTOR_GOLD}]))
    fake = tmp_path / "fake.json"
    fake.write_text(json.dumps([{"text": answer("GET_DOCTORS", [("CITY", "Los Altos")])}]))
    examples_file = tmp_path / "examples.json"
    examples_file.write_text(json.dumps([{"instruction": "I see doctors in Napa.",
                                          "tagged": "[IN:GET_DOCTORS I see doctors in [SL:CITY Napa ]. ]"}]))
    assert main(["eval", "tags", "--data", str(data), "--fake-engine", str(fake), "--examples", str(examples_file),
                 "--tag-mode", "spans", "--catalogue", "nlsi"]) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]
    assert metrics["span_f1"] == 1.0 and metrics["validity_rate"] == 1.0


def test_gold_dev_round_trips_through_the_span_builder(shared_data: Path):
    folder = shared_data
    from prefcall.evaluation.data import load_catalogue

    class Args:
        schema = None
        catalogue = "nlsi"

    catalogue = load_catalogue(Args(), "nlsi")
    rows = json.loads((folder / "taps" / "tags_dev.json").read_text())
    perfect = 0
    for row in rows:
        choice = tags_to_span_choice(row["tagged"], catalogue)
        try:
            built = build_span_tags(row["instruction"], choice["intent"],
                                    [(s["slot"], s["value"]) for s in choice["slots"]], choice["with"])
        except (ParseError, TypeError):  # gold spans longer than 6 words or not copied from the instruction
            continue
        result = check_tagging(row["instruction"], built.tagged, catalogue)
        scores = score_tags(read_tags(result.tagged or ""), read_tags(row["tagged"]))
        perfect += result.status == "ok" and scores["span_f1"] == 1.0 and scores["action_accuracy"] == 1.0
    assert perfect / len(rows) > 0.9  # the representation can express almost all of TAPS's gold


def test_schema_keys_sort_in_decision_order():
    # The llama.cpp engine builds grammars from the schema dumped with sorted keys: alphabetical = generation order.
    for branch in spans_schema("x y", CATALOGUE)["anyOf"]:
        assert sorted(branch["properties"]) == branch["required"] == ["intent", "slots", "with"]
        assert sorted(branch["properties"]["slots"]["items"]["properties"]) == ["slot", "value"]


def test_a_further_intent_is_marked_on_the_word_naming_its_api_whatever_the_verb_of_its_name():
    """The leading verb of an API name (Get, Find, Search ...) is not what the instruction names: "Rides" marks
    FIND_RIDES as "Hotels" marks GET_HOTELS, not the last free word."""
    from prefcall.tagging.tags import build_span_tags

    text = "If I book Flights, also look for Rides to the hotel"
    assert build_span_tags(text, "BOOK_FLIGHTS", [], also=["FIND_RIDES"]).tagged == (
        "[IN:BOOK_FLIGHTS If I book Flights, also look for [IN:FIND_RIDES Rides ] to the hotel ]")
    text = "When I ask for Events, also check Hotels nearby"
    assert build_span_tags(text, "GET_EVENTS", [], also=["GET_HOTELS"]).tagged == (
        "[IN:GET_EVENTS When I ask for Events, also check [IN:GET_HOTELS Hotels ] nearby ]")
