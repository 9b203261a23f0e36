"""select_tools_nlt's per-tool prompt (DecisionRule.prompt "per-tool"): the request first, then one tool alone, so
that a tool's answer and its content-free baseline do not depend on which other tools a list or a shortlist holds
(a large catalogue reaches the model as a shortlist that changes with every request)."""

from __future__ import annotations

import json
import math
import re

from prefcall.engine.fake import FakeEmbedder, FakeEngine
from prefcall.evaluation import fit_nlt
from prefcall.strategies import nlt
from prefcall.strategies.nlt_models import DecisionRule, ToolSpec

WEATHER = ToolSpec(name="get_weather", description="Gets the weather forecast for a city.")
EMAIL = ToolSpec(name="send_email", description="Sends an email to a contact.")
FERRY = ToolSpec(name="book_ferry", description="Books a ferry crossing, rain or shine.")
PER_TOOL = DecisionRule(model_weight=1.0, threshold=0.0, prompt="per-tool", source="test")
LISTING = DecisionRule(model_weight=1.0, threshold=0.0, source="test")


def asked_tool(prompt: str) -> str | None:
    """The tool a per-tool prompt asks about (None for a listing prompt)."""
    found = re.search(r"Tool: (\w+):", prompt)
    return found.group(1) if found else None


def weather_words(prompt: str, candidate: str) -> float:
    """A model swayed by every weather word anywhere in its prompt, and sure about the weather tool when asked
    about it alone: under the listing prompt a tool's answer moves with its neighbours' descriptions."""
    p = 0.2 + 0.05 * len(re.findall(r"rain|forecast|weather", prompt))
    p = 0.95 if asked_tool(prompt) == "get_weather" and "raining" in prompt else min(p, 0.9)
    return math.log(p if candidate == " YES" else 1 - p)


def test_each_tool_is_asked_alone_after_the_request():
    engine = FakeEngine(scorer=weather_words)
    result = nlt.select_tools(engine, "Is it raining in Paris?", [WEATHER, EMAIL], rule=PER_TOOL, calibrate=False)
    assert result.selected == ["get_weather"]
    asked = [c["prompt"] for c in engine.calls]
    assert sorted(asked_tool(p) for p in asked) == ["get_weather", "send_email"]
    for prompt in asked:  # the request comes before the tool, and no other tool is named
        assert prompt.index("Message: Is it raining") < prompt.index("Tool: ")
        others = {"get_weather", "send_email"} - {asked_tool(prompt)}
        assert not any(name in prompt for name in others)
        assert prompt.rstrip().endswith("Answer:")


def test_a_tools_answer_does_not_move_with_the_other_tools_listed():
    def raw(rule: DecisionRule, tools: list[ToolSpec]) -> float:
        result = nlt.select_tools(FakeEngine(scorer=weather_words), "Book me a crossing", tools, rule=rule,
                                  calibrate=False)
        return next(d.raw_logodds for d in result.decisions if d.name == "send_email")

    # the listing prompt's answer about send_email moves when a weather-worded neighbour joins the list
    assert raw(LISTING, [EMAIL, WEATHER]) != raw(LISTING, [EMAIL, FERRY])
    assert raw(PER_TOOL, [EMAIL, WEATHER]) == raw(PER_TOOL, [EMAIL, FERRY])


def test_per_tool_baselines_are_kept_per_tool_across_catalogues():
    engine = FakeEngine(scorer=weather_words)
    cache = nlt.ContentFreeCache()

    def content_free_asks() -> list[str | None]:
        return [asked_tool(c["prompt"]) for c in engine.calls if re.search(r"Message: (N/A|hello)?\n", c["prompt"])]

    first = nlt.select_tools(engine, "Is it raining?", [WEATHER, EMAIL], rule=PER_TOOL, cache=cache)
    assert first.calibration_cached is False and sorted(set(content_free_asks())) == ["get_weather", "send_email"]
    before = len(content_free_asks())
    second = nlt.select_tools(engine, "Is it raining?", [WEATHER, FERRY], rule=PER_TOOL, cache=cache)
    assert set(content_free_asks()[before:]) == {"book_ferry"}  # only the tool never calibrated is asked
    assert second.content_free["get_weather"] == first.content_free["get_weather"]
    # a listing rule's baselines belong to its own prompt: none is reused under the other
    listing = nlt.select_tools(engine, "Is it raining?", [WEATHER, EMAIL], rule=LISTING, cache=cache)
    assert listing.calibration_cached is False


def test_a_stored_rule_keeps_its_prompt_and_an_old_one_reads_as_the_listing():
    entry = {**PER_TOOL.model_dump(), "exact_set_in_sample": 0.9}
    assert DecisionRule.from_entry(json.loads(json.dumps(entry))).prompt == "per-tool"
    old = {k: v for k, v in LISTING.model_dump().items() if k != "prompt"}
    assert DecisionRule.from_entry(old).prompt == "listing"


def test_a_large_list_under_the_per_tool_prompt_asks_only_the_shortlist_each_tool_alone():
    tools = [ToolSpec(name=f"tool_{i:03d}", description=f"Handles request kind {i} for the account.")
             for i in range(200)] + [WEATHER]
    engine = FakeEngine(scorer=weather_words)
    result = nlt.select_tools(engine, "Is it raining? The weather forecast for Paris", tools, rule=PER_TOOL,
                              embedder=FakeEmbedder(),
                              calibrate=False, shortlist_size=8)
    assert result.shortlist is not None and result.shortlist.applied and len(result.shortlist.kept) == 8
    assert {asked_tool(c["prompt"]) for c in engine.calls} == set(result.shortlist.kept)
    assert result.selected == ["get_weather"]


def test_the_fit_collects_under_the_prompt_it_is_given():
    items = fit_nlt.nlt_tune_items(("nlt",))[:3]
    engine = FakeEngine()
    fit_nlt.collect(engine, FakeEmbedder(), items, prompting="per-tool")
    assert engine.calls and all(asked_tool(c["prompt"]) for c in engine.calls)
    listing = FakeEngine()
    fit_nlt.collect(listing, FakeEmbedder(), items)
    assert listing.calls and not any(asked_tool(c["prompt"]) for c in listing.calls)


def test_a_subset_keeps_every_kth_tune_item_of_each_set():
    whole = fit_nlt.nlt_tune_items(("nlt", "nlt2"))
    part = fit_nlt.nlt_tune_items(("nlt", "nlt2"), subset=5)
    assert [f for f, _ in part] == ["tests/data/nlt/dev.jsonl"] * 5 + ["tests/data/nlt2/items.jsonl"] * 5
    assert {(f, i.id) for f, i in part} <= {(f, i.id) for f, i in whole}
    assert len({i.id for f, i in part if f.endswith("nlt2/items.jsonl")}) == 5


def test_a_large_lists_own_rule_asks_under_its_own_prompt_and_a_small_list_under_the_listing():
    rule = LISTING.model_copy(update={"large": PER_TOOL})
    tools = [ToolSpec(name=f"tool_{i:03d}", description=f"Handles request kind {i} for the account.")
             for i in range(60)] + [WEATHER]
    engine = FakeEngine(scorer=weather_words)
    nlt.select_tools(engine, "Is it raining? The weather forecast", tools, rule=rule, embedder=FakeEmbedder(),
                     calibrate=False)
    assert engine.calls and all(asked_tool(c["prompt"]) for c in engine.calls)
    small = FakeEngine(scorer=weather_words)
    nlt.select_tools(small, "Is it raining? The weather forecast", tools[-10:], rule=rule, calibrate=False)
    assert small.calls and not any(asked_tool(c["prompt"]) for c in small.calls)
    large = fit_nlt.fit_large_rule(LISTING, [({"get_weather": (2.0, 1.0, 0.5), "tool_000": (-2.0, 0.0, 0.1)},
                                              {"get_weather"}, 50)], prompting="per-tool")[0].large
    assert large is not None and large.prompt == "per-tool"
