"""NLT and QwN end to end on the real embedded model: one tiny example each (kept fast)."""

from __future__ import annotations

import pytest

from prefcall.schemas.model import Catalogue, Function
from prefcall.strategies.nlt import ContentFreeCache, select_tools
from prefcall.strategies.qwn import clarify

TOOLS = [
    {"name": "get_weather", "description": "Returns the weather forecast for a city."},
    {"name": "send_email", "description": "Sends an email to a contact."},
]


@pytest.mark.model
def test_structured_mode_always_parses_and_generate_mode_reports_its_state_truthfully(real_engine) -> None:
    names = {"get_weather", "send_email"}
    structured = select_tools(real_engine, "What is the weather in Paris tomorrow?", TOOLS, mode="structured")
    # The grammar admits only {"tools": [names]}: a parse error here is a broken grammar, not a weak model.
    assert structured.status == "ok" and {d.name for d in structured.decisions} == names
    assert set(structured.selected) <= names and structured.usage.completion_tokens > 0

    generate = select_tools(real_engine, "What is the weather in Paris tomorrow?", TOOLS, mode="generate")
    decided = {d.name for d in generate.decisions}
    expected = "parse_error" if not decided else "partial" if generate.missing else "ok"
    assert generate.status == expected, generate.raw_text
    assert decided | set(generate.missing) == names and not decided & set(generate.missing)
    assert set(generate.selected) == {d.name for d in generate.decisions if d.selected}
    assert generate.usage.prompt_tokens > 0 and generate.usage.completion_tokens > 0


@pytest.mark.model
def test_score_mode_reuses_the_prompt_prefix(real_engine) -> None:
    cache = ContentFreeCache()
    # The embedded model's fitted rule gives its YES/NO no weight, so it is not asked unless forced to.
    unasked = select_tools(real_engine, "What is the weather in Paris tomorrow?", TOOLS, mode="score", cache=cache)
    assert unasked.usage.calls == 0 and "model" not in unasked.evidence and unasked.content_free is None
    result = select_tools(real_engine, "What is the weather in Paris tomorrow?", TOOLS, mode="score", cache=cache,
                          all_evidence=True)
    assert result.status == "ok" and len(result.decisions) == 2
    assert all(0.0 <= d.probability <= 1.0 for d in result.decisions)
    # 2 tools, plus 2 tools for each of the 3 content-free requests; most tokens come from the KV cache.
    assert result.usage.calls == 2 + 2 * 3 and result.calibration_cached is False
    assert result.usage.reused > result.usage.evaluated
    again = select_tools(real_engine, "Email Bob", TOOLS, mode="score", cache=cache, all_evidence=True)
    assert again.usage.calls == 2 and again.calibration_cached is True


@pytest.mark.model
def test_demo_hotel_request_selects_only_the_hotel_tool(real_engine) -> None:
    """The demo's select_tools_nlt step: before calibration SmolLM2 said YES (>= 0.986) to all three tools."""
    tools = [{"name": "GetFlights", "description": "Search flights to a destination city, optionally on a given airline."},
             {"name": "GetHotels", "description": "Search hotels in a city."},
             {"name": "GetRestaurants", "description": "Search restaurants in a city by cuisine."}]
    result = select_tools(real_engine, "Book me a hotel in Paris", tools)
    assert result.mode == "score" and result.status == "ok"
    assert result.selected == ["GetHotels"], result.decisions
    assert select_tools(real_engine, "thanks, bye!", tools).selected == []


@pytest.mark.model
def test_clarify_asks_for_a_missing_required_argument(real_engine) -> None:
    catalogue = Catalogue(name="w", functions=[Function(
        name="get_weather", description="Returns the weather forecast for a city.",
        parameters={"type": "object", "properties": {"city": {"type": "string", "description": "The city."}},
                    "required": ["city"]})])
    result = clarify(real_engine, "What will the weather be like tomorrow?", catalogue, check_relevance=False)
    assert result.status == "ok"
    assert result.model_said is not None and result.draft is not None
    assert result.decision == "question" and result.missing_arguments[0].argument == "city"
