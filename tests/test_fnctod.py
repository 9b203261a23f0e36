"""FnCTOD two-stage calling with a fake engine: prompts, grammars (schemas), parsing, multi-turn context."""

from __future__ import annotations

import json

import jsonschema

from prefcall.engine.fake import FakeEngine, render_fake
from prefcall.schemas.model import Call, Catalogue, Function, Turn, render_dialogue
from prefcall.storage.demos import Demonstration
from prefcall.strategies.fnctod import (
    CallingContext,
    arguments_schema,
    one_stage,
    one_stage_schema,
    select_functions,
    selection_schema,
    two_stage,
)

CATALOGUE = Catalogue(name="t", functions=[
    Function(name="GetRestaurants", description="finding restaurants", parameters={"type": "object", "properties": {
        "city": {"type": "string"}, "cuisine": {"type": "string"}, "serves_alcohol": {"type": "boolean"},
        "price_range": {"type": "string", "enum": ["cheap", "moderate"]}}}),
    Function(name="GetHotels", description="booking hotels", parameters={"type": "object", "properties": {
        "location": {"type": "string"}}}),
    Function(name="GetWeather", description="weather", parameters={"type": "object", "properties": {
        "city": {"type": "string"}}}),
])
CTX = CallingContext(dialogue="User: Thai food in Oakland please", instructions=["Also look at hotels when I eat out."])


def test_schemas_forbid_unknown_names_arguments_and_enum_values():
    sel = selection_schema(CATALOGUE)
    jsonschema.validate(["GetHotels"], sel)
    for bad in (["GetFlights"], []):
        assert not jsonschema.Draft202012Validator(sel).is_valid(bad)
    args = arguments_schema(CATALOGUE.function("GetRestaurants"))
    jsonschema.validate([{"city": "Oakland"}, {"city": "Berkeley"}], args)
    for bad in ([{"town": "Oakland"}], [{"price_range": "free"}], [{"serves_alcohol": "yes"}]):
        assert not jsonschema.Draft202012Validator(args).is_valid(bad)
    one = one_stage_schema(CATALOGUE)
    jsonschema.validate([{"name": "GetHotels", "arguments": {"location": "Oakland"}}], one)
    assert not jsonschema.Draft202012Validator(one).is_valid([{"name": "GetHotels", "arguments": {"city": "x"}}])


def test_stage_one_lists_concise_descriptions_and_dedupes():
    engine = FakeEngine().reply('["GetRestaurants", "GetHotels", "GetRestaurants"]')
    out = select_functions(engine, CATALOGUE, CTX)
    assert out.value == ["GetRestaurants", "GetHotels"] and out.error is None
    prompt = engine.prompts[0]
    assert "GetHotels - booking hotels" in prompt and "price_range" not in prompt  # no full specs in stage 1
    assert engine.calls[0]["json_schema"]["items"]["enum"] == CATALOGUE.names


def test_two_stage_prompts_hold_only_the_chosen_spec_and_request_last():
    engine = FakeEngine()
    engine.reply('["GetRestaurants", "GetHotels"]', when="Functions:\nGetRestaurants - ")
    engine.reply('[{"city": "Oakland", "cuisine": "Thai"}]', when="Calls for GetRestaurants:")
    engine.reply('[{"location": "Oakland"}]', when="Calls for GetHotels:")
    result = two_stage(engine, CATALOGUE, CTX)
    assert result.calls == [Call(name="GetRestaurants", arguments={"city": "Oakland", "cuisine": "Thai"}),
                            Call(name="GetHotels", arguments={"location": "Oakland"})]
    restaurant_prompt = engine.prompts[1]
    assert "price_range" in restaurant_prompt and "GetHotels" not in restaurant_prompt.split("<|user|>")[0]
    assert restaurant_prompt.index("Function:") < restaurant_prompt.index("Thai food in Oakland")  # stable part first
    assert len(result.call_generations) == 2 and result.errors == []


def test_several_calls_for_one_function_and_demos_in_prompt():
    demo = Demonstration(id="d1", dialogue="User: sushi in Napa", instructions=["I like cheap places"],
                         calls=[Call(name="GetRestaurants", arguments={"cuisine": "Sushi", "serves_alcohol": "True"})])
    ctx = CTX.model_copy(update={"demos": [demo]})
    engine = FakeEngine().reply('[{"cuisine": "Thai"}, {"cuisine": "Lao"}]')
    result = two_stage(engine, CATALOGUE, ctx, functions=["GetRestaurants"])
    assert [c.arguments["cuisine"] for c in result.calls] == ["Thai", "Lao"]
    assert 'Calls for GetRestaurants: [{"cuisine": "Sushi", "serves_alcohol": true}]' in engine.prompts[0]
    assert engine.prompts[0].index("sushi in Napa") < engine.prompts[0].index("Thai food in Oakland")


def test_truncated_output_is_an_explicit_parse_error():
    engine = FakeEngine().reply('["GetHotels"]')
    engine.reply('[{"location": "Oak', when="Calls for GetHotels:")
    engine.generate = _truncating(engine.generate)
    result = two_stage(engine, CATALOGUE, CTX)
    assert result.calls == [] and result.errors and "arguments:GetHotels" in result.errors[0]
    assert result.stages[-1].raw == '[{"location": "Oak'


def _truncating(generate):
    def wrapper(prompt, **kwargs):
        if "Calls for GetHotels:" in render_fake(prompt):  # a grammar-less backend: the raw text comes back
            kwargs = {**kwargs, "json_schema": None}
        return generate(prompt, **kwargs)
    return wrapper


def test_multi_turn_keeps_earlier_calls_in_context():
    turns = [Turn(role="user", content="Find Thai food in Oakland"),
             Turn(role="assistant", content="Here are some.", calls=[Call(name="GetRestaurants", arguments={"city": "Oakland"})]),
             Turn(role="user", content="Make it cheap")]
    engine = FakeEngine().reply('[{"city": "Oakland", "price_range": "cheap"}]')
    ctx = CallingContext(dialogue=render_dialogue(turns))
    two_stage(engine, CATALOGUE, ctx, functions=["GetRestaurants"])
    assert 'Assistant called: GetRestaurants(city="Oakland")' in engine.prompts[0]


def test_one_stage_all_specs_in_one_prompt():
    engine = FakeEngine().reply(json.dumps([{"name": "GetWeather", "arguments": {"city": "Oakland"}}]))
    result = one_stage(engine, CATALOGUE, CTX)
    assert result.calls == [Call(name="GetWeather", arguments={"city": "Oakland"})] and result.functions == ["GetWeather"]
    assert "price_range" in engine.prompts[0] and "location" in engine.prompts[0]
    assert len(engine.prompts) == 1
