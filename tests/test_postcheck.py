"""Post-checks: repair or drop invalid calls, and ask for a missing required argument."""

from __future__ import annotations

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
