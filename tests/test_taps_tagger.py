"""The TAPS tagger with a fake engine: prompt contents, validation of its output, few-shot retrieval."""

from __future__ import annotations

from prefcall.engine.fake import FakeEmbedder, FakeEngine
from prefcall.schemas.model import Catalogue, Function
from prefcall.strategies.taps_tagger import TagExample, TagExamples, check_tagging, tag_instruction

CATALOGUE = Catalogue(name="t", functions=[
    Function(name="GetEvents", parameters={"type": "object", "properties": {"city": {"type": "string"}}}),
    Function(name="GetHotels", parameters={"type": "object", "properties": {"location": {"type": "string"}}}),
])
INSTRUCTION = "I like events in Boston."


def examples() -> TagExamples:
    return TagExamples([
        TagExample(instruction="I prefer hotels in Paris.", tagged="[IN:GET_HOTELS I prefer hotels in [SL:LOCATION Paris ]. ]"),
        TagExample(instruction="Events in Denver are my favourite.", tagged="[IN:GET_EVENTS Events in [SL:CITY Denver ] are my favourite. ]"),
        TagExample(instruction="Unrelated banking note.", tagged="[IN:GET_BANKS Unrelated banking note. ]"),
    ], FakeEmbedder())


def test_valid_output_is_ok_with_triples_and_prompt_lists_catalogue_labels():
    engine = FakeEngine().reply("[IN:GET_EVENTS I like events in [SL:CITY Boston ]. ]")
    result = tag_instruction(engine, INSTRUCTION, CATALOGUE, examples(), k=2)
    assert result.status == "ok" and result.reasons == []
    assert [(t.function, t.slot, t.value) for t in result.triples] == [("GetEvents", "city", "Boston")]
    prompt = engine.prompts[0]
    assert "IN:GET_HOTELS: SL:LOCATION" in prompt and prompt.endswith(f"<|user|>\n{INSTRUCTION}\n<|assistant|>\n")
    assert "Events in Denver" in prompt  # nearest example retrieved
    assert engine.calls[0]["stop"] == ["\n"]


def test_invalid_outputs_are_explicit_failures():
    cases = {
        "[IN:GET_EVENTS I like events in [SL:CITY Boston ]": "unbalanced",
        "[IN:GET_EVENTS I like in [SL:CITY Boston ]. ]": "token dropped",
        "[IN:GET_FLIGHTS I like events in [SL:CITY Boston ]. ]": "unknown API",
        "[IN:GET_EVENTS I like events in [SL:LOCATION Boston ]. ]": "unknown slot",
        "I like events in [SL:CITY Boston ].": "outside any intent",
    }
    for output, reason in cases.items():
        result = tag_instruction(FakeEngine().reply(output), INSTRUCTION, CATALOGUE, examples())
        assert result.status == "invalid" and result.tagged is None, output
        assert reason in " ".join(result.reasons), (output, result.reasons)
        assert result.raw == output


def test_nearest_skips_the_identical_instruction_and_puts_closest_last():
    ex = examples()
    shots = ex.nearest("Events in Denver are my favourite.", 2)
    assert all(s.instruction != "Events in Denver are my favourite." for s in shots)
    shots = ex.nearest("hotels in Paris please", 2)
    assert shots[-1].instruction == "I prefer hotels in Paris."


def test_builtin_examples_are_used_without_a_tagged_set():
    engine = FakeEngine().reply("[IN:GET_EVENTS I like events in [SL:CITY Boston ]. ]")
    assert tag_instruction(engine, INSTRUCTION, CATALOGUE).status == "ok"
    assert "[IN:GET_RESTAURANTS" in engine.prompts[0]


def test_check_tagging_of_cached_tags():
    assert check_tagging(INSTRUCTION, "[IN:GET_EVENTS I like events in [SL:CITY Boston ]. ]", CATALOGUE).status == "ok"
    bad = check_tagging(INSTRUCTION, "[IN:GET_EVENTS I like events in [SL:CITY Boston ]", CATALOGUE)
    assert bad.status == "invalid" and "left open" in bad.reasons[0]
