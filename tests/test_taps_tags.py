"""TAPS tag strings: parser, serialiser, validation against a catalogue, conversion to calls."""

from __future__ import annotations

import json

import pytest

from prefcall.errors import ParseError
from prefcall.schemas.model import Call, Catalogue, Function
from prefcall.tagging.tags import (
    function_for_intent,
    intent_label,
    parse_tags,
    serialize_tags,
    tags_to_calls,
    tags_to_triples,
    validate_tags,
)

CATALOGUE = Catalogue(name="t", functions=[
    Function(name="GetEvents", description="events", parameters={"type": "object", "properties": {
        "city": {"type": "string"}, "event_type": {"type": "string", "enum": ["Music", "Sports"]}}}),
    Function(name="GetRestaurants", description="restaurants", parameters={"type": "object", "properties": {
        "city": {"type": "string"}, "cuisine": {"type": "string"}, "serves_alcohol": {"type": "boolean"}}}),
    Function(name="GetRentalCars", description="cars", parameters={"type": "object", "properties": {
        "pickup_location": {"type": "string"}}}),
])


def test_parse_nested_and_attached_brackets():
    tree = parse_tags("[IN:GET_EVENTS If I'm looking for Events, I'd like them in [SL:CITY New York]. ]")
    (intent,) = tree.children
    assert intent.kind == "IN" and intent.label == "GET_EVENTS"
    slot = [c for c in intent.children if not isinstance(c, str)][0]
    assert (slot.kind, slot.label, slot.text()) == ("SL", "CITY", "New York")
    assert tree.text() == "If I'm looking for Events, I'd like them in New York ."


def test_serialise_round_trip_is_stable():
    text = "[IN:GET_EVENTS Check out both Events and [IN:GET_RESTAURANTS Restaurants ]. ]"
    once = serialize_tags(parse_tags(text))
    assert serialize_tags(parse_tags(once)) == once
    assert once == "[IN:GET_EVENTS Check out both Events and [IN:GET_RESTAURANTS Restaurants ] . ]"


@pytest.mark.parametrize("bad", ["[IN:GET_EVENTS Request [SL:CITY Boston ]", "[IN:GET_EVENTS x ] ]", "[SL: CITY x ]"])
def test_unbalanced_or_malformed_raise(bad):
    with pytest.raises(ParseError):
        parse_tags(bad)


def test_mapping_folds_case_and_underscores():
    assert intent_label("GetRentalCars") == "GET_RENTAL_CARS"
    assert function_for_intent("GET_RENTALCARS", CATALOGUE).name == "GetRentalCars"
    assert function_for_intent("GET_FLIGHTS", CATALOGUE) is None


def test_valid_tagging_has_no_reasons():
    instruction = "Request Sports events in Boston."
    assert validate_tags("[IN:GET_EVENTS Request [SL:EVENT_TYPE Sports ] events in [SL:CITY Boston ]. ]", instruction, CATALOGUE) == []


@pytest.mark.parametrize("tagged, expected", [
    ("[IN:GET_EVENTS Request events in [SL:CITY Boston ]. ]", "token dropped"),  # "Sports" lost
    ("[IN:GET_EVENTS Request Sports events in [SL:CITY Boston ] please. ]", "text differs"),  # word added
    ("[IN:GET_FLIGHTS Request Sports events in [SL:CITY Boston ]. ]", "unknown API"),
    ("[IN:GET_EVENTS Request Sports events in [SL:CUISINE Boston ]. ]", "unknown slot"),
    ("Request Sports events in [SL:CITY Boston ].", "outside any intent"),
    ("[IN:GET_EVENTS Request Sports events in [SL:CITY Boston . ]", "unbalanced"),
])
def test_validation_failures_name_the_problem(tagged, expected):
    reasons = validate_tags(tagged, "Request Sports events in Boston.", CATALOGUE)
    assert reasons and expected in " ".join(reasons)


def test_triples_boolean_enum_and_nested_intent():
    tree = parse_tags("[IN:GET_RESTAURANTS I like [SL:CUISINE Thai ] places that [SL:SERVES_ALCOHOL serve alcohol ], "
                      "and [IN:GET_EVENTS [SL:EVENT_TYPE music ] events ] too. ]")
    triples = [(t.function, t.slot, t.value) for t in tags_to_triples(tree, CATALOGUE)]
    assert ("GetRestaurants", "cuisine", "Thai") in triples
    assert ("GetRestaurants", "serves_alcohol", True) in triples
    assert ("GetEvents", "event_type", "Music") in triples  # snapped to the enum spelling


def test_intent_without_slots_gives_a_bare_call_and_repeated_slot_gives_two_calls():
    tree = parse_tags("[IN:GET_RESTAURANTS I like [SL:CUISINE Thai ] or [SL:CUISINE Sushi ] in [SL:CITY Oakland ], "
                      "also check [IN:GET_EVENTS events ]. ]")
    calls = tags_to_calls(tree, CATALOGUE)
    assert Call(name="GetRestaurants", arguments={"cuisine": "Thai", "city": "Oakland"}) in calls
    assert Call(name="GetRestaurants", arguments={"cuisine": "Sushi", "city": "Oakland"}) in calls
    assert Call(name="GetEvents", arguments={}) in calls



def test_gold_train_tags_mostly_validate_against_nlsi_schema(shared_data):
    schema = json.loads((shared_data / "nlsi" / "schema.json").read_text())
    catalogue = Catalogue(name="nlsi", functions=[Function(**f) for f in schema["functions"]])
    rows = json.loads((shared_data / "taps" / "tags_train.json").read_text())
    invalid = [r for r in rows if validate_tags(r["tagged"], r["instruction"], catalogue)]
    # The gold itself has a few defects (SL:SALON_NAME is no NLSI argument, a missing ']', edited words).
    assert len(invalid) < 0.1 * len(rows)


def test_a_slot_may_end_on_an_initialisms_stop_at_the_instructions_end():
    from prefcall.tagging.tags import build_span_tags

    text = "If type is Gynecologist then look for doctor name as Sandra Makela, M.D."
    tags = build_span_tags(text, "GET_DOCTORS", [("DOCTOR_NAME", "Sandra Makela, M.D.")])
    assert "[SL:DOCTOR_NAME Sandra Makela, M.D. ]" in tags.tagged and not tags.dropped
