"""Class g: a value the user gave that the schema does not allow is found and asked about by name, never called,
dropped or replaced; a value of a set form that the pattern accepts is read from the request."""

from __future__ import annotations

import pytest

from prefcall.schemas.model import Function
from prefcall.strategies.grounding.misfit import find_misfit, pattern_value
from prefcall.strategies.grounding.values import Source, argument_kind

HOTEL = Function(name="BookHotel", description="Reserve a hotel room.", parameters={
    "type": "object", "properties": {
        "city": {"type": "string", "description": "city"},
        "nights": {"type": "integer", "description": "number of nights", "minimum": 1},
        "room": {"type": "string", "description": "room type", "enum": ["single", "double", "suite"]},
        "area": {"type": "string", "enum": ["living room", "bedroom"]}},
    "required": ["city"]})
EVENTS = Function(name="GetEvents", description="Find events.", parameters={
    "type": "object", "properties": {"event_type": {"enum": ["Music", "Sports"]}, "city": {"type": "string"}}})
CALL = Function(name="CallContact", description="Phone call.", parameters={
    "type": "object", "properties": {"phone_number": {"type": "string", "pattern": "^[0-9+() -]{7,}$"}},
    "required": ["phone_number"]})


def user(text: str) -> list[Source]:
    return [Source("user", text, "turn 0")]


def misfit(function: Function, argument: str, text: str, **kwargs) -> tuple[object, str] | None:
    found = find_misfit(function, argument, function.properties[argument], user(text), **kwargs)
    return None if found is None else (found[0].value, found[1])


@pytest.mark.parametrize("function, argument, text, value, problem", [
    (HOTEL, "room", "Book a penthouse room in Rome.", "penthouse", "not one of ['single', 'double', 'suite']"),
    (HOTEL, "room", "Book a room in Rome, room type: deluxe.", "deluxe", "not one of"),
    (HOTEL, "nights", "Book Rome for 2.5 nights.", 2.5, "not of type 'integer'"),
    (HOTEL, "nights", "Book Rome, nights: 0.", 0, "less than the minimum of 1"),
    (CALL, "phone_number", "Call 555-CALL-NOW please.", "555-CALL-NOW", "does not match"),
    (CALL, "phone_number", "My phone number is 555-CALL-NOW.", "555-CALL-NOW", "does not match"),
])
def test_a_value_the_user_wrote_that_breaks_the_schema_is_found(function, argument, text, value, problem):
    found = misfit(function, argument, text)
    assert found is not None and found[0] == value and problem in found[1], found


@pytest.mark.parametrize("function, argument, text", [
    (HOTEL, "room", "Book a double room in Rome."),  # allowed: it is a candidate, not a misfit
    (HOTEL, "room", "Book a hotel room in Rome."),  # "hotel" names the function, not a kind of room
    (HOTEL, "room", "Book a room in Rome."),  # nothing written for it
    (HOTEL, "area", "Keep the living room warm."),  # the value ends in its cue word
    (HOTEL, "nights", "Book a window for two nights."),  # a number word is read as candidates are
    (HOTEL, "nights", "Book Rome for 3 nights, or 2.5 nights."),  # a value it allows was written too
    (HOTEL, "room", "I am interested in understanding room prices."),  # no article opens a noun phrase
    (EVENTS, "event_type", "Find a sporting event in Denver."),  # "event" is what GetEvents is about
    (HOTEL, "city", "Book a room in Rome."),  # a plain string allows any text
    (CALL, "phone_number", "Call 555-CALL-NOW or 555-NOT-HOME."),  # two written codes: which is meant is unknown
])
def test_no_misfit_where_nothing_the_user_wrote_breaks_the_schema(function, argument, text):
    assert misfit(function, argument, text) is None


def test_only_the_users_own_words_are_read_and_never_a_span_another_argument_took():
    text = "Book a penthouse room in Rome."
    assert find_misfit(HOTEL, "room", HOTEL.properties["room"], [Source("instruction", text, text)]) is None
    source = user(text)
    start = text.index("penthouse")
    taken = [(source[0], start, start + len("penthouse"))]
    assert find_misfit(HOTEL, "room", HOTEL.properties["room"], source, taken=taken) is None
    assert find_misfit(HOTEL, "room", HOTEL.properties["room"], source, avoid={"penthouse"}) is None


def test_the_only_written_code_a_pattern_accepts_is_the_value_of_a_required_argument():
    schema = CALL.properties["phone_number"]
    found = pattern_value(CALL, "phone_number", schema, user("Call 555-0199 please."))
    assert found is not None and (found.value, found.text) == ("555-0199", "555-0199")
    assert pattern_value(CALL, "phone_number", schema, user("Call 555-0199 or 555-0100.")) is None
    assert pattern_value(CALL, "phone_number", schema, user("Call 555-CALL-NOW.")) is None  # a misfit, asked about
    optional = Function(name="CallContact", description="Phone call.", parameters={
        "type": "object", "properties": {"phone_number": schema}})
    assert pattern_value(optional, "phone_number", schema, user("Call 555-0199 please.")) is None


def test_a_string_with_a_pattern_is_read_from_the_request_even_when_its_description_says_code():
    assert argument_kind({"type": "string", "description": "postal code"}) == "free"
    assert argument_kind({"type": "string", "description": "postal code", "pattern": "^[0-9]{5}$"}) == "span"


PRINTS = Function(name="OrderPrints", description="Order photo prints.", parameters={
    "type": "object", "properties": {
        "size": {"type": "string", "description": "Print size", "enum": ["4x6", "5x7", "8x10"]},
        "finish": {"type": "string", "enum": ["gloss", "matte"]},
        "copies": {"type": "integer", "minimum": 1}},
    "required": ["size"]})


def test_a_code_shaped_like_every_option_of_an_enum_but_none_of_them_is_a_misfit():
    found = misfit(PRINTS, "size", "Print my photos in 9x12, 20 copies.")
    assert found is not None and found[0] == "9x12" and "not one of" in found[1]
    assert misfit(PRINTS, "size", "Print my photos in 5x7, 20 copies.") is None  # an option: a candidate
    assert misfit(PRINTS, "size", "Print 9x12 or 3x3 photos.") is None  # two of that shape: which is meant is unknown
    assert misfit(PRINTS, "size", "Print my photos, order 20-B.") is None  # another shape
    assert misfit(PRINTS, "finish", "Print my photos in satin.") is None  # plain words have no telling shape


def test_a_code_the_user_wrote_is_never_replaced_by_an_option_the_model_guesses():
    """The model likes "5x7" for "3x3" (an option nobody wrote) and its fit weighs its odds enough to take it (the
    1.5B model's enum combination): the user's code is asked about by name instead; an option the user wrote is
    still called."""
    import json

    from prefcall.engine.fake import FakeEngine
    from prefcall.strategies.grounded import load_weights
    from prefcall.strategies.grounding.evidence import FeatureContext
    from prefcall.strategies.grounding.fill import fill_arguments

    def score(prompt: str, candidate: str) -> float:
        return -0.1 if candidate == json.dumps("5x7") else -12.0

    def filled(text: str):
        return fill_arguments(FakeEngine(scorer=score), PRINTS, user(text), "User: " + text,
                              FeatureContext(PRINTS, None, sources_text=text),
                              load_weights("m", fitted={"enum": [2.159, 0.463, -1.5]}))

    guessed = filled("Print my photos in 3x3, 20 copies.")
    assert guessed.misfits.get("size", "").startswith("'3x3' is not one of")
    assert [c.values for c in guessed.choices if c.argument == "size"] == [["3x3"]]
    assert [c.values for c in filled("Print my photos in 5x7, 20 copies.").choices if c.argument == "size"] == [["5x7"]]
