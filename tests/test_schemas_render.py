"""Prompt renderings and grammar schemas: the schemas accept exactly the calls the catalogue allows."""

from __future__ import annotations

import jsonschema
import pytest

from prefcall.schemas.model import Catalogue, Function
from prefcall.schemas.registry import builtin_catalogue
from prefcall.schemas.render import (
    arguments_schema,
    call_schema,
    calls_schema,
    render_catalogue_spec,
    render_function_spec,
    render_listing,
)

CATALOGUE = Catalogue(name="t", functions=[
    Function(name="GetFlights", description="finding and booking flights", parameters={
        "type": "object",
        "properties": {
            "airlines": {"type": "string", "enum": ["Delta Airlines", "United Airlines"], "description": "carrier"},
            "passengers": {"type": "integer"},
            "stops": {"type": "array", "items": {"type": "string"}},
            "when": {"type": "string", "format": "date", "pattern": "^[0-9-]+$"},
        },
        "required": ["passengers"],
    }),
    Function(name="GetHotels", description="booking hotels", parameters={
        "type": "object", "properties": {"has_wifi": {"type": "boolean"}},
    }),
])


def test_listing_is_one_line_per_function():
    assert render_listing(CATALOGUE) == "GetFlights - finding and booking flights\nGetHotels - booking hotels"


def test_function_spec_shows_types_required_enums_descriptions():
    spec = render_function_spec(CATALOGUE.functions[0])
    assert spec.splitlines()[0] == "Function: GetFlights"
    assert '- airlines (string): carrier One of: "Delta Airlines", "United Airlines".' in spec
    assert "- passengers (integer, required)" in spec
    assert "- stops (array of string)" in spec
    assert render_catalogue_spec(CATALOGUE).count("Function:") == 2


def test_call_schema_ties_arguments_to_the_chosen_function():
    schema = call_schema(CATALOGUE)
    ok = {"name": "GetFlights", "arguments": {"airlines": "Delta Airlines", "passengers": 2}}
    jsonschema.validate(ok, schema)
    bad = [
        {"name": "GetHotels", "arguments": {"passengers": 2}},  # another function's argument
        {"name": "GetFlights", "arguments": {"airlines": "KLM", "passengers": 1}},  # outside the enum
        {"name": "GetFlights", "arguments": {}},  # required missing
        {"name": "GetTrains", "arguments": {}},  # unknown function
    ]
    for call in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(call, schema)


def test_schemas_use_only_grammar_friendly_keywords():
    allowed = {"type", "properties", "required", "additionalProperties", "enum", "const", "anyOf", "items",
               "minItems", "maxItems", "maxLength"}

    def keywords(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key != "properties":
                    yield key
                    yield from keywords(value)
                else:
                    for sub in value.values():
                        yield from keywords(sub)
        elif isinstance(node, list):
            for item in node:
                yield from keywords(item)

    for catalogue in (CATALOGUE, builtin_catalogue("nlsi"), builtin_catalogue("sgd")):
        assert set(keywords(calls_schema(catalogue, max_items=3))) <= allowed


def test_calls_schema_and_relaxed_required():
    schema = calls_schema(CATALOGUE, min_items=1)
    jsonschema.validate([{"name": "GetHotels", "arguments": {"has_wifi": True}}], schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([], schema)
    relaxed = call_schema(CATALOGUE, enforce_required=False)
    jsonschema.validate({"name": "GetFlights", "arguments": {}}, relaxed)


def test_function_scoped_schema():
    args = arguments_schema(CATALOGUE.functions[1])
    assert args == {"type": "object", "properties": {"has_wifi": {"type": "boolean"}}, "additionalProperties": False}


def test_single_function_catalogue_has_no_anyof():
    one = Catalogue(name="one", functions=[CATALOGUE.functions[1]])
    assert call_schema(one)["properties"]["name"] == {"const": "GetHotels"}


def test_llama_cpp_converts_the_builtin_schemas():
    grammar = pytest.importorskip("llama_cpp.llama_grammar", reason="llama-cpp-python not installed")
    for catalogue in (CATALOGUE, builtin_catalogue("nlsi"), builtin_catalogue("sgd")):
        import json

        for schema in (call_schema(catalogue), calls_schema(catalogue), arguments_schema(catalogue.functions[0])):
            assert grammar.LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False) is not None


def test_grammar_schemas_of_an_imported_mcp_tool_list_accept_real_calls_and_reject_invented_arguments():
    from test_server_support import TRAVEL_TOOLS

    from prefcall.schemas.importers import import_catalogue

    catalogue = import_catalogue(TRAVEL_TOOLS, name="travel")
    flights = arguments_schema(catalogue.function("GetFlights"))
    jsonschema.Draft202012Validator.check_schema(flights)
    jsonschema.validate({"destination_city": "Boston", "airlines": "Delta"}, flights)
    for bad in ({"airlines": "Delta"}, {"destination_city": "Boston", "seat": "12A"}, {"destination_city": "x" * 81}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, flights)  # required missing, an argument the tool lacks, an unbounded string
    relaxed = arguments_schema(catalogue.function("GetFlights"), enforce_required=False)
    jsonschema.validate({"airlines": "Delta"}, relaxed)
