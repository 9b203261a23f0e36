"""NLT and QwN end to end on the real embedded model: one tiny example each (kept fast)."""

from __future__ import annotations

import pytest

from prefcall.schemas.model import Catalogue, Function
from prefcall.strategies.nlt import select_tools
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
    result = select_tools(real_engine, "What is the weather in Paris tomorrow?", TOOLS, mode="score", calibrate=True)
    assert result.status == "ok" and len(result.decisions) == 2
    assert all(0.0 <= d.probability <= 1.0 for d in result.decisions)
    # Four scoring calls (2 tools, plus the content-free pass); all but the first mostly reuse the KV cache.
    assert result.usage.calls == 4
    assert result.usage.reused > result.usage.evaluated


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
