"""NLT tool selection: prompt parts, tolerant parser, scoring mode with prefix reuse, structured baseline."""

from __future__ import annotations

import json
import math

import pytest

from prefcall.engine.fake import FakeEngine
from prefcall.errors import ValidationError
from prefcall.schemas.model import Catalogue, Function
from prefcall.strategies.nlt import (
    ToolSpec,
    as_tool_specs,
    calibrate_probability,
    parse_nlt_output,
    select_tools,
)

TOOLS = [
    {"name": "get_weather", "description": "Returns the weather forecast for a city."},
    {"name": "send_email", "description": "Sends an email to a contact."},
    {"name": "book_flight", "description": "Books a flight between two airports."},
]
NAMES = [t["name"] for t in TOOLS]


# -- tools input --------------------------------------------------------------------------------
def test_accepts_catalogue_dicts_and_tools_without_parameters() -> None:
    catalogue = Catalogue(name="c", functions=[Function(name="ping", description="Checks the service.")])
    assert [s.name for s in as_tool_specs(catalogue)] == ["ping"]
    assert as_tool_specs([{"name": "ping"}])[0] == ToolSpec(name="ping")


def test_duplicate_tool_names_are_rejected() -> None:
    with pytest.raises(ValidationError, match="duplicate tool name 'a'"):
        as_tool_specs([{"name": "a"}, {"name": "a", "description": "x"}])


def test_empty_tool_list_is_rejected() -> None:
    with pytest.raises(ValidationError):
        select_tools(FakeEngine(), "hi", [])


# -- generate mode ------------------------------------------------------------------------------
def test_prompt_has_the_five_parts_and_lists_every_tool() -> None:
    engine = FakeEngine().reply("Thinking: weather.\nget_weather - YES\nsend_email - NO\nbook_flight - NO\n")
    select_tools(engine, "Is it raining in Paris?", TOOLS, context="User is in France")
    prompt = engine.prompts[0]
    for part in ("You are a tool selection assistant", "Your task:", "Tools:", "Output format:", "Example"):
        assert part in prompt
    positions = [prompt.index(p) for p in ("You are a tool", "Your task:", "Tools:", "Output format:", "Example")]
    assert positions == sorted(positions)
    for tool in TOOLS:
        assert f"- {tool['name']}: use it when" in prompt
    assert prompt.index("Context: User is in France") < prompt.index("Message: Is it raining in Paris?")
    assert engine.calls[0]["stop"] == ["Assessment finished."]


def test_generate_mode_parses_decisions_and_reasoning() -> None:
    engine = FakeEngine().reply(
        "Thinking: The user asks about rain.\nget_weather - YES\nsend_email - NO\nbook_flight - NO\nAssessment finished."
    )
    result = select_tools(engine, "Is it raining in Paris?", TOOLS)
    assert result.status == "ok"
    assert result.selected == ["get_weather"]
    assert result.reasoning == "The user asks about rain."
    assert [d.selected for d in result.decisions] == [True, False, False]
    assert result.usage.completion_tokens > 0 and result.usage.calls == 1


def test_parser_tolerates_case_bullets_separators_and_spaces() -> None:
    text = (
        "**Thinking:** two tools\n"
        "- GET_WEATHER: yes\n"
        "2. `send_email` — No.\n"
        "*  book-flight   --   YES\n"
    )
    result = parse_nlt_output(text, NAMES)
    assert result.status == "ok"
    assert result.selected == ["get_weather", "book_flight"]
    assert result.reasoning == "two tools"


def test_parser_reports_missing_tools_as_partial() -> None:
    result = parse_nlt_output("Thinking: hm\nget_weather - YES\n", NAMES)
    assert result.status == "partial"
    assert result.missing == ["send_email", "book_flight"]
    assert result.selected == ["get_weather"]


def test_parser_reports_unknown_names_and_conflicting_duplicates() -> None:
    text = "get_weather - YES\nget_weather - NO\nget_weather - YES\ntranslate_text - YES\nsend_email - NO\nbook_flight - NO"
    result = parse_nlt_output(text, NAMES)
    assert result.unknown == ["translate_text"]
    assert result.conflicts == ["get_weather"]
    assert result.selected == ["get_weather"]  # the first decision stands
    assert result.status == "ok"


def test_unparseable_output_is_a_parse_error_not_an_empty_selection() -> None:
    result = select_tools(FakeEngine().reply("I think you should check the weather."), "rain?", TOOLS)
    assert result.status == "parse_error"
    assert result.missing == NAMES
    assert result.raw_text.startswith("I think you should check the weather.")


def test_all_no_is_a_valid_empty_selection() -> None:
    result = parse_nlt_output("Thinking: none\nget_weather - NO\nsend_email - NO\nbook_flight - NO", NAMES)
    assert result.status == "ok" and result.selected == []


def test_tool_names_containing_dashes() -> None:
    result = parse_nlt_output("my-tool - YES\nother - NO", ["my-tool", "other"])
    assert result.selected == ["my-tool"] and result.status == "ok"


# -- score mode ---------------------------------------------------------------------------------
def _scorer(prompt: str, candidate: str) -> float:
    # YES is likely only for get_weather when the message mentions rain.
    yes = "Message: Is it raining" in prompt and prompt.endswith("get_weather -")
    if candidate == " YES":
        return math.log(0.9) if yes else math.log(0.2)
    return math.log(0.1) if yes else math.log(0.8)


def test_score_mode_forces_each_tool_line_and_reads_yes_probability() -> None:
    engine = FakeEngine(scorer=_scorer)
    result = select_tools(engine, "Is it raining in Paris?", TOOLS, mode="score")
    assert result.status == "ok" and result.selected == ["get_weather"]
    probs = {d.name: d.probability for d in result.decisions}
    assert probs["get_weather"] == pytest.approx(0.9)
    assert probs["send_email"] == pytest.approx(0.2)
    assert len(engine.calls) == 3
    for call, name in zip(engine.calls, NAMES):
        assert call["kind"] == "score" and call["candidates"] == [" YES", " NO"]
        assert call["prompt"].endswith(f"\n{name} -")


def test_score_mode_reuses_the_shared_prefix() -> None:
    engine = FakeEngine(scorer=_scorer)
    result = select_tools(engine, "Is it raining in Paris?", TOOLS, mode="score")
    first = engine.count_tokens(engine.calls[0]["prompt"])
    assert result.usage.prompt_tokens == sum(engine.count_tokens(c["prompt"]) for c in engine.calls)
    # After the first call only the per-tool tail is evaluated.
    assert result.usage.evaluated <= first + 2 * 3
    assert result.usage.reused >= 2 * (first - 3)


def test_threshold_is_configurable() -> None:
    result = select_tools(FakeEngine(scorer=_scorer), "Is it raining?", TOOLS, mode="score", threshold=0.15)
    assert result.selected == NAMES
    with pytest.raises(ValidationError):
        select_tools(FakeEngine(scorer=_scorer), "x", TOOLS, mode="score", threshold=1.5)


def test_calibration_divides_by_the_content_free_prior() -> None:
    assert calibrate_probability(0.6, 0.6) == pytest.approx(0.5)
    assert calibrate_probability(0.9, 0.5) == pytest.approx(0.9)
    # Model says YES 80% for everything, 90% for this message: calibrated P(YES) > 0.5 only here.
    def biased(prompt: str, candidate: str) -> float:
        p = 0.8 if "Message: N/A" in prompt else (0.9 if prompt.endswith("get_weather -") else 0.8)
        return math.log(p if candidate == " YES" else 1 - p)

    engine = FakeEngine(scorer=biased)
    plain = select_tools(engine, "Is it raining?", TOOLS, mode="score")
    assert plain.selected == NAMES
    calibrated = select_tools(FakeEngine(scorer=biased), "Is it raining?", TOOLS, mode="score", calibrate=True)
    assert calibrated.selected == ["get_weather"]
    assert calibrated.content_free == {n: pytest.approx(0.8) for n in NAMES}
    assert calibrated.usage.calls == 6


# -- structured baseline ------------------------------------------------------------------------
def test_structured_mode_uses_a_name_enum_grammar_and_json_definitions() -> None:
    tools = TOOLS + [{"name": "ping", "description": "Health check."}]
    engine = FakeEngine().reply(json.dumps({"tools": ["book_flight", "get_weather"]}))
    result = select_tools(engine, "Fly me to Rome and tell me the weather", tools, mode="structured")
    assert result.status == "ok"
    assert result.selected == ["get_weather", "book_flight"]
    schema = engine.calls[0]["json_schema"]
    assert schema["properties"]["tools"]["items"]["enum"] == [t["name"] for t in tools]
    assert schema["required"] == ["tools"]
    assert '"name": "ping"' in engine.prompts[0] and '"parameters"' in engine.prompts[0]


def test_structured_mode_bad_json_is_a_parse_error() -> None:
    class Truncating(FakeEngine):
        def generate(self, prompt, **kwargs):  # type: ignore[override]
            gen = super().generate(prompt, **{**kwargs, "json_schema": None})
            return gen

    result = select_tools(Truncating().reply('{"tools": ["get_wea'), "x", TOOLS, mode="structured")
    assert result.status == "parse_error" and result.selected == []


def test_generate_mode_repairs_copied_example_names_by_forcing_the_first_tool() -> None:
    engine = FakeEngine()
    engine.reply(" Rain question.\nweather_lookup - YES\nsend_email - NO\n")  # copies the example's names
    engine.reply(" YES\nsend_email - NO\nbook_flight - NO\n")
    result = select_tools(engine, "Is it raining?", TOOLS)
    assert result.repaired and result.status == "ok"
    assert result.selected == ["get_weather"]
    assert engine.prompts[1].endswith("Thinking: Rain question.\nget_weather -")
    assert result.usage.calls == 2


def test_repair_that_still_fails_stays_a_parse_error() -> None:
    engine = FakeEngine().reply("blah").reply("blah again")
    result = select_tools(engine, "Is it raining?", TOOLS)
    assert result.status == "parse_error" and result.repaired and result.selected == []
