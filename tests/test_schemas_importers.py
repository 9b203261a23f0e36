"""Catalogue importers: one real example of each data-set format, inline OpenAI and MCP tools, validation."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from prefcall.errors import ValidationError
from prefcall.schemas.importers import detect_format, export_catalogue, import_catalogue

SHARED = Path(os.environ.get("PREFCALL_SHARED_DATA") or Path(__file__).resolve().parents[1].parent / "shared" / "data")
needs_data = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared data folder missing: {SHARED}")

OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer"},
                    "filters": {"type": "object", "properties": {"rain": {"type": "boolean"}}},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["city"],
            },
        },
    }
]
MCP_TOOLS = {
    "tools": [
        {
            "name": "book_table",
            "title": "Book a table",
            "description": "Reserve a restaurant table",
            "inputSchema": {
                "type": "object",
                "properties": {"party": {"$ref": "#/$defs/Party"}, "time": {"type": "string"}},
                "required": ["time"],
                "$defs": {"Party": {"type": "object", "properties": {"size": {"type": "integer"}}}},
            },
        }
    ]
}


def test_openai_tools_and_bare_functions():
    catalogue = import_catalogue(OPENAI_TOOLS, name="weather")
    assert detect_format(OPENAI_TOOLS) == "openai"
    function = catalogue.function("get_weather")
    assert function.required == ["city"] and function.properties["unit"]["enum"] == ["celsius", "fahrenheit"]
    bare = import_catalogue([OPENAI_TOOLS[0]["function"]], name="bare")
    assert bare.functions == catalogue.functions
    wrapped = import_catalogue({"tools": OPENAI_TOOLS}, name="wrapped")
    assert wrapped.functions == catalogue.functions


def test_mcp_tools_list_with_wrapper_and_refs_inlined():
    assert detect_format(MCP_TOOLS) == "mcp"
    catalogue = import_catalogue(MCP_TOOLS, name="mcp")
    function = catalogue.function("book_table")
    assert function.properties["party"] == {"type": "object", "properties": {"size": {"type": "integer"}}}
    assert "$defs" not in function.parameters
    assert import_catalogue(MCP_TOOLS["tools"], name="x").functions == catalogue.functions


@needs_data
def test_bfcl_first_line_maps_dict_dialect():
    line = (SHARED / "bfcl" / "BFCL_v4_simple_python.json").read_text().splitlines()[0]
    assert detect_format(json.loads(line)) == "bfcl"
    catalogue = import_catalogue(line, name="bfcl")
    function = catalogue.function("calculate_triangle_area")
    assert function.parameters["type"] == "object"
    assert function.properties["base"]["type"] == "integer"
    assert function.required == ["base", "height"]


def test_bfcl_float_tuple_any_types():
    doc = {
        "name": "f",
        "description": "d",
        "parameters": {
            "type": "dict",
            "properties": {
                "x": {"type": "float"},
                "pair": {"type": "tuple", "items": {"type": "integer"}},
                "anything": {"type": "any"},
                "opts": {"type": "dict", "properties": {"flag": {"type": "boolean"}}},
            },
            "required": ["x"],
        },
    }
    function = import_catalogue([doc], name="b").function("f")
    assert function.properties["x"] == {"type": "number"}
    assert function.properties["pair"] == {"type": "array", "items": {"type": "integer"}}
    assert "type" not in function.properties["anything"]
    assert function.properties["opts"]["type"] == "object"


@needs_data
def test_bfcl_json_lines_file_keeps_one_copy_of_repeated_functions(tmp_path):
    lines = (SHARED / "bfcl" / "BFCL_v4_simple_python.json").read_text().splitlines()[:5]
    path = tmp_path / "few.jsonl"
    path.write_text("\n".join(lines + lines[:1]) + "\n")
    catalogue = import_catalogue(path)
    assert catalogue.name == "few" and len(catalogue.functions) == 5


@needs_data
def test_sgd_schema_one_function_per_intent():
    catalogue = import_catalogue(SHARED / "sgd" / "dev_schema.json", name="sgd")
    services = json.loads((SHARED / "sgd" / "dev_schema.json").read_text())
    assert len(catalogue.functions) == sum(len(s["intents"]) for s in services)
    add_alarm = catalogue.function("AddAlarm")
    assert add_alarm.required == ["new_alarm_time"]
    assert "new_alarm_name" in add_alarm.properties
    assert "default: New alarm" in add_alarm.properties["new_alarm_name"]["description"]
    transfer = catalogue.function("TransferMoney")
    assert transfer.properties["account_type"]["enum"] == ["checking", "savings"]
    # Intent names shared by two services are qualified with the service.
    assert {"Hotels_1_ReserveHotel", "Hotels_4_ReserveHotel"} <= set(catalogue.names)


@needs_data
def test_nlsi_schema():
    catalogue = import_catalogue(SHARED / "nlsi" / "schema.json", name="nlsi")
    assert len(catalogue.functions) == 17
    assert catalogue.function("GetRestaurants").properties["has_live_music"]["type"] == "boolean"


def test_export_round_trips():
    catalogue = import_catalogue(OPENAI_TOOLS, name="weather", description="demo")
    again = import_catalogue(export_catalogue(catalogue))
    assert again == catalogue


def test_unknown_type_names_the_field():
    tools = [
        {"name": f"f{i}", "parameters": {"type": "object", "properties": {}}} for i in range(3)
    ] + [{"name": "f3", "parameters": {"type": "object", "properties": {"when": {"type": "datetime"}}}}]
    with pytest.raises(ValidationError) as error:
        import_catalogue(tools, name="bad")
    assert str(error.value).startswith("functions[3].parameters.properties.when.type: unknown type 'datetime'")
    assert "string/integer/number/boolean/array/object" in str(error.value)


def test_nested_unknown_type_and_bad_required_are_reported():
    nested = [{"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"type": "array", "items": {"type": "date"}}}}}]
    with pytest.raises(ValidationError, match=r"functions\[0\].parameters.properties.a.items.type"):
        import_catalogue(nested, name="n")
    required = [{"name": "f", "parameters": {"type": "object", "properties": {}, "required": ["ghost"]}}]
    with pytest.raises(ValidationError, match="required: 'ghost'"):
        import_catalogue(required, name="r")


def test_malformed_json_reports_line_and_column():
    with pytest.raises(ValidationError, match=r"line 3, column \d+"):
        import_catalogue('[\n {"name": "f",\n  "parameters": }\n]')


def test_duplicate_function_names_are_rejected():
    tools = [{"name": "f", "description": "one"}, {"name": "f", "description": "two"}]
    with pytest.raises(ValidationError, match=r"functions\[1\].name: duplicate function name 'f'"):
        import_catalogue(tools, name="dup")


def test_unrecognised_format_and_missing_name():
    with pytest.raises(ValidationError, match="unrecognised format"):
        import_catalogue([{"foo": 1}])
    with pytest.raises(ValidationError, match="no functions"):
        import_catalogue([])
    with pytest.raises(ValidationError, match=r"functions\[0\].name"):
        import_catalogue([{"type": "function", "function": {"description": "nameless"}}])


def test_unresolvable_ref_is_an_error():
    tools = [{"name": "f", "inputSchema": {"type": "object", "properties": {"x": {"$ref": "#/$defs/Missing"}}}}]
    with pytest.raises(ValidationError, match=r"\$ref"):
        import_catalogue(tools, name="r")
