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
def test_generate_and_structured_modes_give_valid_states(real_engine) -> None:
    for mode in ("generate", "structured"):
        result = select_tools(real_engine, "What is the weather in Paris tomorrow?", TOOLS, mode=mode)
        assert result.status in ("ok", "partial", "parse_error")
        assert set(result.selected) <= {"get_weather", "send_email"}
        assert result.usage.prompt_tokens > 0
        if result.status != "parse_error":
            assert result.usage.completion_tokens > 0


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
