"""Post-checks: repair or drop invalid calls, and ask for a missing required argument."""

from __future__ import annotations

import datetime as dt

from prefcall.schemas.model import Call, Catalogue, Function
from prefcall.strategies.postcheck import post_check

CATALOGUE = Catalogue(name="t", functions=[
    Function(name="GetDentists", parameters={"type": "object", "properties": {
        "city": {"type": "string"}, "offers_cosmetic_services": {"type": "boolean"}}}),
    Function(name="BookFlight", parameters={"type": "object", "properties": {
        "departure_date": {"type": "string"}, "seating_class": {"type": "string", "enum": ["Economy", "Business"]},
        "passengers": {"type": "integer"}}, "required": ["departure_date"]}),
])


def test_repairs_names_enums_booleans_and_numbers():
    result = post_check([
        Call(name="GetDenists", arguments={"City": "Oakland", "offers_cosmetic_services": "True"}),
        Call(name="BookFlight", arguments={"departure_date": "May 3", "seating_class": "business", "passengers": "2"}),
    ], CATALOGUE)
    assert result.decision == "call"
    assert result.calls == [
        Call(name="GetDentists", arguments={"city": "Oakland", "offers_cosmetic_services": True}),
        Call(name="BookFlight", arguments={"departure_date": "May 3", "seating_class": "Business", "passengers": 2}),
    ]
    assert any(n.action == "repaired" and "GetDentists" in n.reason for n in result.notes)


def test_drops_unknown_function_argument_and_bad_enum_with_reasons():
    result = post_check([
        Call(name="OrderPizza", arguments={}),
        Call(name="GetDentists", arguments={"colour": "red", "city": "Oakland"}),
        Call(name="BookFlight", arguments={"departure_date": "May 3", "seating_class": "Cargo"}),
    ], CATALOGUE)
    assert [c.name for c in result.calls] == ["GetDentists", "BookFlight"]
    reasons = " ".join(n.reason for n in result.notes if n.action == "dropped")
    assert "unknown function 'OrderPizza'" in reasons and "unknown argument 'colour'" in reasons and "Cargo" in reasons


def test_missing_required_argument_asks_in_user_words():
    result = post_check([Call(name="BookFlight", arguments={"seating_class": "Economy"})], CATALOGUE)
    assert result.decision == "ask"
    assert result.missing[0].argument == "departure_date"
    assert "departure date" in result.question and "flight" in result.question


def test_duplicates_removed_and_nothing_left_is_refuse():
    assert len(post_check([Call(name="GetDentists")] * 2, CATALOGUE).calls) == 1
    assert post_check([Call(name="Nope")], CATALOGUE).decision == "refuse"


LIMITS = Catalogue(name="limits", functions=[
    Function(name="BookTable", description="Book a restaurant table.", parameters={"type": "object", "properties": {
        "restaurant": {"type": "string"},
        "party_size": {"type": "integer", "minimum": 1, "maximum": 20, "description": "how many people"},
        "date": {"type": "string", "format": "date"}, "time": {"type": "string", "format": "time"},
        "phone": {"type": "string", "pattern": "^[0-9+() -]{7,}$"}},
        "required": ["restaurant", "party_size"]}),
])
TODAY = dt.date(2026, 11, 25)


def test_a_value_the_schema_does_not_allow_is_asked_about_naming_the_problem():
    result = post_check([Call(name="BookTable", arguments={"restaurant": "Nopa", "party_size": 45})], LIMITS, TODAY)
    assert result.decision == "ask" and result.calls == [Call(name="BookTable", arguments={"restaurant": "Nopa"})]
    [missing] = result.missing
    assert (missing.argument, missing.reason) == ("party_size", "invalid")
    assert missing.problem == "45 is more than party size allows (at most 20)"
    assert result.question.startswith("45 is more than party size allows (at most 20). What party size would you")


def test_a_phone_number_with_letters_and_a_date_that_does_not_exist_are_asked_about_too():
    result = post_check([Call(name="BookTable", arguments={
        "restaurant": "Nopa", "party_size": 2, "phone": "555-CALL-NOW", "date": "February 30"})], LIMITS, TODAY)
    assert result.decision == "ask"
    assert {m.argument: m.problem for m in result.missing} == {
        "phone": "'555-CALL-NOW' is not in the form phone takes", "date": "February 30 is not a date that exists"}
    assert result.calls[0].arguments == {"restaurant": "Nopa", "party_size": 2}  # never called with a guess


def test_dates_and_times_in_words_are_written_in_the_schemas_format():
    result = post_check([Call(name="BookTable", arguments={
        "restaurant": "Nopa", "party_size": "4", "date": "tomorrow", "time": "7 pm"})], LIMITS, TODAY)
    assert result.decision == "call" and result.calls[0].arguments == {
        "restaurant": "Nopa", "party_size": 4, "date": "2026-11-26", "time": "19:00:00"}


def test_a_value_outside_an_enum_is_asked_about_with_the_options():
    result = post_check([Call(name="BookFlight", arguments={"departure_date": "May 3", "seating_class": "Cargo"})],
                        CATALOGUE)
    assert result.decision == "ask"
    assert result.missing[0].problem == "'Cargo' is not one of the seating class options (Economy, Business)"


def test_numbers_written_as_words_are_numbers_and_other_words_are_asked_about():
    result = post_check([Call(name="BookTable", arguments={"restaurant": "Nopa", "party_size": "five"})], LIMITS, TODAY)
    assert result.decision == "call" and result.calls[0].arguments == {"restaurant": "Nopa", "party_size": 5}
    result = post_check([Call(name="BookTable", arguments={"restaurant": "Nopa", "party_size": "many"})], LIMITS, TODAY)
    assert result.decision == "ask" and result.missing[0].problem == "'many' is not a whole number"
