"""NLSI-style call strings: parsing, formatting (exact round trip on NLSI dev) and validation."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from prefcall.errors import ParseError, ValidationError
from prefcall.schemas.calls import format_call, format_calls, parse_call, parse_calls
from prefcall.schemas.validation import check_call, validate_call
from prefcall.schemas.model import Call, Catalogue, Function

SHARED = Path(os.environ.get("PREFCALL_SHARED_DATA") or Path(__file__).resolve().parents[1].parent / "shared" / "data")
needs_data = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared data folder missing: {SHARED}")


@needs_data
def test_round_trip_every_api_call_of_nlsi_dev():
    items = json.loads((SHARED / "nlsi" / "dev.json").read_text())
    strings = [s for item in items for s in item["api_calls"]]
    assert len(strings) > 400
    for text in strings:
        call = parse_call(text)
        assert format_call(call) == text
        assert all(isinstance(v, str) for v in call.arguments.values())


def test_parses_quotes_numbers_booleans_escapes_and_commas():
    call = parse_call("""Find(a='single', b=3, c=-2.5, d=True, e=False, f="say \\"hi\\", then (go)", g=None)""")
    assert call.arguments == {"a": "single", "b": 3, "c": -2.5, "d": True, "e": False, "f": 'say "hi", then (go)', "g": None}
    assert parse_call(format_call(call)) == call


def test_multiple_calls_in_one_string():
    text = 'GetRestaurants(city="San Fran", cuisine="Ethiopian"), GetHotels(location="SF"); GetWeather(city="LA")\nGetMusic()'
    calls = parse_calls(text)
    assert [c.name for c in calls] == ["GetRestaurants", "GetHotels", "GetWeather", "GetMusic"]
    assert format_calls(calls[:2]) == 'GetRestaurants(city="San Fran", cuisine="Ethiopian"), GetHotels(location="SF")'


def test_quote_between_letters_is_the_apostrophe_it_replaced():
    # NLSI test-split gold: the export turned apostrophes inside values into the value's own quote.
    call = parse_call('GetRideSharing(pickup_time="11 o"clock in the morning", name="Akiko"s", n="3")')
    assert call.arguments == {"pickup_time": "11 o'clock in the morning", "name": "Akiko's", "n": "3"}
    assert parse_call("F(name='Akiko's')").arguments == {"name": "Akiko's"}
    # a quote that is not between two letters still closes (or fails) as before
    assert parse_call('F(a="x", b="y")').arguments == {"a": "x", "b": "y"}
    with pytest.raises(ParseError):
        parse_call('F(a="say "hi" now")')


def test_lists_and_bare_words():
    call = parse_call("F(xs=[1, 'a,b', True], city=New York)")
    assert call.arguments == {"xs": [1, "a,b", True], "city": "New York"}


def test_quote_scalars_gives_nlsi_style():
    call = Call(name="GetSalons", arguments={"is_unisex": True, "rating": 4})
    assert format_call(call, quote_scalars=True) == 'GetSalons(is_unisex="True", rating="4")'
    assert format_call(call) == "GetSalons(is_unisex=True, rating=4)"


@pytest.mark.parametrize("text, fragment", [
    ('GetA(city="x"', "expected"),
    ('GetA(city="x)', "unterminated"),
    ("GetA city", r"expected '\('"),
    ('GetA(city="x", city="y")', "given twice"),
    ("(x=1)", "a name"),
])
def test_malformed_strings_raise_parse_error(text, fragment):
    with pytest.raises(ParseError, match=fragment):
        parse_calls(text)


def test_parse_call_wants_exactly_one():
    with pytest.raises(ParseError, match="exactly one"):
        parse_call("A(), B()")


CATALOGUE = Catalogue(name="t", functions=[
    Function(name="Book", parameters={
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "seats": {"type": "integer"},
            "price": {"type": "number"},
            "refundable": {"type": "boolean"},
            "klass": {"type": "string", "enum": ["Economy", "Business"]},
            "extras": {"type": "array", "items": {"type": "string", "enum": ["meal", "wifi"]}},
            "contact": {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]},
        },
        "required": ["city"],
    }),
])


def kinds(call: Call, **kw) -> list[tuple[str, str | None]]:
    return [(i.kind, i.argument) for i in validate_call(call, CATALOGUE, **kw)]


def test_valid_call_has_no_issues():
    call = Call(name="Book", arguments={"city": "Paris", "seats": 2, "price": 9.5, "refundable": False,
                                        "klass": "Economy", "extras": ["meal"], "contact": {"email": "a@b"}})
    assert validate_call(call, CATALOGUE) == []
    assert check_call(call, CATALOGUE) is call


def test_each_issue_kind_is_reported_precisely():
    assert kinds(Call(name="Fly", arguments={})) == [("unknown_function", None)]
    assert kinds(Call(name="Book", arguments={"city": "P", "colour": "red"})) == [("unknown_argument", "colour")]
    assert kinds(Call(name="Book", arguments={"city": ["P"]})) == [("wrong_type", "city")]
    assert kinds(Call(name="Book", arguments={"city": "P", "klass": "First"})) == [("not_in_enum", "klass")]
    assert kinds(Call(name="Book", arguments={})) == [("missing_required", "city")]
    assert kinds(Call(name="Book", arguments={"city": "P", "extras": ["meal", "spa"]})) == [("not_in_enum", "extras[1]")]
    assert kinds(Call(name="Book", arguments={"city": "P", "contact": {}})) == [("missing_required", "contact.email")]
    assert kinds(Call(name="Book", arguments={"city": "P", "seats": True})) == [("wrong_type", "seats")]


def test_lenient_mode_accepts_nlsi_strings_strict_does_not():
    call = Call(name="Book", arguments={"city": "P", "refundable": "True", "seats": "2", "klass": "economy"})
    assert validate_call(call, CATALOGUE) == []
    assert {i.argument for i in validate_call(call, CATALOGUE, strict=True)} == {"refundable", "seats", "klass"}
    assert kinds(Call(name="Book", arguments={"city": "P", "seats": "two"})) == [("wrong_type", "seats")]
    # A number for a string argument can be written as one (NLSI `star_rating=4`); strict mode wants the string.
    assert kinds(Call(name="Book", arguments={"city": 3})) == []
    assert kinds(Call(name="Book", arguments={"city": 3}), strict=True) == [("wrong_type", "city")]


def test_check_call_raises_with_every_message():
    with pytest.raises(ValidationError, match="unknown argument 'colour'.*missing required argument 'city'"):
        check_call(Call(name="Book", arguments={"colour": "red"}), CATALOGUE)


def test_one_lenient_rule_for_validation_and_repair():
    from prefcall.schemas.validation import coerce_value, errors

    boolean, integer, number = {"type": "boolean"}, {"type": "integer"}, {"type": "number"}
    cabin = {"type": "string", "enum": ["Economy", "Business"]}
    assert [coerce_value(v, boolean)[0] for v in ("True", " yes", "0", False)] == [True, True, False, False]
    assert coerce_value("3", integer) == (3, None) and coerce_value(3.0, integer) == (3, None)
    assert coerce_value("2.5", number) == (2.5, None) and coerce_value(4, {"type": "string"}) == ("4", None)
    assert coerce_value(" economy ", cabin) == ("Economy", None)
    for value, schema in (("2.5", integer), ("maybe", boolean), ("nan", number), ("First", cabin), (["a"], {"type": "string"})):
        fixed, problem = coerce_value(value, schema)
        assert fixed is None and problem, (value, schema)
    # What repair accepts is exactly what lenient validation accepts.
    for value, schema in (("True", boolean), ("3", integer), ("economy", cabin), ("2.5", integer), ("nan", number)):
        assert (errors(value, schema, strict=False) == []) == (coerce_value(value, schema)[1] is None)
    # BFCL's type names validate as the JSON Schema types they stand for.
    assert errors({"a": 1}, {"type": "dict"}, strict=True) == [] and errors("x", {"type": "any"}, strict=True) == []
    assert errors("x", {"type": "float"}, strict=True)
