"""The real embedded model through the pipeline (few and small: SmolLM2-135M on CPU)."""

from __future__ import annotations

import jsonschema
import pytest

from prefcall.schemas.registry import builtin_catalogue
from prefcall.schemas.render import arguments_schema
from prefcall.strategies.pipeline import Pipeline
from prefcall.strategies.pipeline_models import get_config
from prefcall.strategies.taps_tagger import check_tagging, tag_instruction


@pytest.mark.model
def test_full_pipeline_calls_validate_against_the_catalogue(real_engine, real_embedder):
    catalogue = builtin_catalogue("nlsi")
    result = Pipeline(real_engine, real_embedder).parse(
        "User: I'm looking for a spot to grab some grub. I definitely want Ethiopian food.",
        ["If I'm looking for Restaurants, my go-to city is San Fran.", "If I ask for Banks, my preferred account type is checking"],
        catalogue, get_config("full", use_demos=False, gate_threshold=1.0),
    )
    assert result.status == "ok" and result.decision == "call" and result.calls
    said = "I'm looking for a spot to grab some grub. I definitely want Ethiopian food. " + \
        "If I'm looking for Restaurants, my go-to city is San Fran."
    for call in result.calls:
        function = catalogue.function(call.name)
        assert function is not None
        jsonschema.validate(call.arguments, arguments_schema(function, enforce_required=False))
        for value in call.arguments.values():  # grounded: every string value was written by the user
            assert not isinstance(value, str) or value.lower() in said.lower() or \
                value in str(function.properties), value
    assert result.trace.model_calls >= 2 and result.trace.prompt_tokens > 0
    # The behaviour, not only the shape: the restaurant function, its city from the applicable instruction (the
    # banking one does not apply). The embedded model leaves cuisine unset here (a known miss, not asserted).
    assert [c.name for c in result.calls] == ["GetRestaurants"]
    assert result.calls[0].arguments.get("city") == "San Fran"
    assert result.instructions_used == ["If I'm looking for Restaurants, my go-to city is San Fran."]


@pytest.mark.model
def test_free_text_tagging_reports_what_independent_validation_says(real_engine):
    catalogue = builtin_catalogue("nlsi")
    instruction = "If I ask for Restaurants, my preferred city is Oakland."
    result = tag_instruction(real_engine, instruction, catalogue, k=3)
    # The tagger's verdict must be the validator's verdict on the model's raw text, never a silent pass.
    independent = check_tagging(instruction, result.raw, catalogue)
    assert result.status == independent.status and result.reasons == independent.reasons
    assert (result.tagged is not None) == (result.status == "ok") and result.completion_tokens > 0


@pytest.mark.model
def test_constrained_span_tagging_is_valid_by_construction(real_engine):
    catalogue = builtin_catalogue("nlsi")
    instruction = "If I ask for Restaurants, my preferred city is Oakland."
    result = tag_instruction(real_engine, instruction, catalogue, k=3, mode="spans")
    # Labels and spans come from a grammar over the catalogue and the instruction's own words.
    assert result.status == "ok", result.reasons
    assert check_tagging(instruction, result.tagged, catalogue).status == "ok"
    assert {t.function for t in result.triples} <= set(catalogue.names) and result.triples


@pytest.mark.model
def test_a_restarted_pipeline_reads_the_stage_one_calibration_from_disk(real_engine, real_embedder, tmp_path):
    catalogue = builtin_catalogue("nlsi")
    config = get_config("full", use_demos=False)
    dialogue = "User: Find me a dentist in San Jose."
    first = Pipeline(real_engine, real_embedder, data_dir=tmp_path).parse(dialogue, [], catalogue, config)
    # An easy request the embedded model gets right: the comparison below is of a real answer, not of two empties.
    assert first.decision == "call" and [(c.name, c.arguments) for c in first.calls] == [
        ("GetDentists", {"city": "San Jose"})]
    assert "calibrate_selection" in first.trace.timings
    assert len(list((tmp_path / "calibrations").glob("*.json"))) == 1
    restarted = Pipeline(real_engine, real_embedder, data_dir=tmp_path).parse(dialogue, [], catalogue, config)
    assert "calibrate_selection" not in restarted.trace.timings  # no content-free prompts after a restart
    assert restarted.functions == first.functions and restarted.calls == first.calls


def _tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"name": name, "description": description,
            "inputSchema": {"type": "object", "properties": properties, "required": required}}


@pytest.mark.model
def test_a_new_user_s_request_goes_to_the_function_it_names_not_to_the_one_the_profile_speaks_of(
        real_engine, real_embedder):
    # A user's instructions are about some of their tools; they ask for all of them. Stage 1 fitted on NLSI alone
    # (every profile built around the request's function) sent this reminder to send_email, with "call" as its
    # recipient; the profile dropout of `prefcall fit --selection` keeps the profile from deciding.
    from prefcall.schemas.importers import import_catalogue

    text = {"type": "string"}
    catalogue = import_catalogue([
        _tool("send_email", "Send an email to a recipient.", {"to": {**text, "description": "recipient"},
                                                              "subject": {**text, "description": "subject line"}},
              ["to", "subject"]),
        _tool("create_event", "Create a calendar event.", {"title": {**text, "description": "event title"},
                                                           "date": {**text, "format": "date"}}, ["title", "date"]),
        _tool("set_reminder", "Set a reminder for the user.",
              {"text": {**text, "description": "what to remind about"},
               "time": {**text, "description": "when to remind", "format": "time"}}, ["text", "time"])], name="office")
    profile = ["Always send emails to my manager with the subject 'Status update' unless I say otherwise."]
    result = Pipeline(real_engine, real_embedder).parse("User: Remind me to call my mother.", profile, catalogue,
                                                        get_config("full", use_demos=False))
    assert result.decision == "ask" and [c.name for c in result.calls] == ["set_reminder"]
    assert [m.argument for m in result.missing] == ["time"] and result.instructions_used == []


@pytest.mark.model
def test_an_instruction_whose_condition_names_the_request_in_another_form_applies(real_engine, real_embedder):
    # "When ordering food": order_food's own word, written in another form, says which request it is about.
    from prefcall.schemas.importers import import_catalogue

    text = {"type": "string"}
    catalogue = import_catalogue([
        _tool("book_ride", "Book a ride to a destination.", {"destination": {**text, "description": "where to go"}},
              ["destination"]),
        _tool("order_food", "Order food for delivery from a restaurant.",
              {"restaurant": {**text, "description": "restaurant name"},
               "dish": {**text, "description": "dish to order"}}, ["restaurant", "dish"])], name="errands")
    instruction = "When ordering food, I usually get it from Golden Dragon."
    result = Pipeline(real_engine, real_embedder).parse("User: Order two pad thai.", [instruction], catalogue,
                                                        get_config("full", use_demos=False))
    assert [c.name for c in result.calls] == ["order_food"] and result.instructions_used == [instruction]
    assert result.calls[0].arguments.get("restaurant") == "Golden Dragon"
