"""Large lists asked page by page (DecisionRule.pages; strategies.shortlist.pages and paged): the catalogue is cut
once into pages of similar tools, and the model is asked about the pages that hold the tools retrieval ranks best
for the request, each page listed as a small list is. A page is the same for every request, so a tool is asked
about beside the same neighbours, and the page's prompt prefix and content-free calibration are reused; a shortlist
of the best-ranked tools changes its listing with every request."""

from __future__ import annotations

import math

from prefcall.engine.fake import FakeEmbedder, FakeEngine
from prefcall.strategies import nlt
from prefcall.strategies.nlt_models import DecisionRule, ToolSpec
from prefcall.strategies.relevance import function_text
from prefcall.strategies.shortlist import pages, paged

TOPICS = ["ferry harbour crossing", "thermostat heating room", "invoice billing payment", "parcel courier delivery",
          "playlist music song", "dentist appointment teeth"]
PAGED = DecisionRule(model_weight=1.0, threshold=0.0, pages=8, page_seeds=2, source="test")


def catalogue(n: int = 60) -> list[ToolSpec]:
    """n tools over six topics, the topics interleaved in catalogue order."""
    return [ToolSpec(name=f"{TOPICS[i % 6].split()[0]}_tool_{i:03d}",
                     description=f"Handles {TOPICS[i % 6]} requests, variant {i}.") for i in range(n)]


def texts(specs: list[ToolSpec]) -> list[str]:
    return [function_text(s.name, s.description) for s in specs]


def yes_for(word: str):
    """A model that says YES to the tool lines naming `word`."""
    def scorer(prompt: str, candidate: str) -> float:
        p = 0.9 if prompt.rsplit("\n", 1)[-1].startswith(word) else 0.1
        return math.log(p if candidate == " YES" else 1 - p)
    return scorer


def test_pages_cover_every_tool_once_and_gather_similar_tools():
    specs = catalogue()
    cut = pages(texts(specs), FakeEmbedder(), 10)
    assert sorted(i for page in cut for i in page) == list(range(60))
    assert all(len(page) <= 10 and page == sorted(page) for page in cut)
    # the interleaved topics come apart: each page holds one topic
    assert all(len({specs[i].name.split("_")[0] for i in page}) == 1 for page in cut)
    assert cut == pages(texts(specs), FakeEmbedder(), 10)  # the same cut every time


def test_a_request_is_asked_about_the_pages_of_its_best_tools_each_listed_alone():
    specs = catalogue()
    engine = FakeEngine(scorer=yes_for("ferry"))
    result = nlt.select_tools(engine, "book a ferry harbour crossing", specs, rule=PAGED, embedder=FakeEmbedder(),
                              calibrate=False)
    assert result.shortlist is not None and 1 <= result.shortlist.pages <= 2
    assert result.selected and all(name.startswith("ferry") for name in result.selected)
    asked = {d.name for d in result.decisions if d.shortlisted}
    cut = pages(texts(specs), FakeEmbedder(), 8)
    page_sets = [{specs[i].name for i in page} for page in cut]
    assert any(asked == a | b for a in page_sets for b in page_sets)  # whole pages, nothing else
    for call in engine.calls:  # every prompt lists one page, whole
        listed = {s.name for s in specs if f"- {s.name}:" in call["prompt"]}
        assert listed in page_sets


def test_two_requests_on_the_same_page_share_its_prompt_and_calibration():
    specs = catalogue()
    engine = FakeEngine(scorer=yes_for("ferry"))
    cache = nlt.ContentFreeCache()
    first = nlt.select_tools(engine, "book a ferry harbour crossing", specs, rule=PAGED, embedder=FakeEmbedder(),
                             cache=cache)
    second = nlt.select_tools(engine, "a ferry crossing from the harbour, please", specs, rule=PAGED,
                              embedder=FakeEmbedder(), cache=cache)
    assert first.calibration_cached is False and second.calibration_cached is True
    assert set(second.content_free) <= set(first.content_free)


def test_a_page_whose_prompt_does_not_fit_falls_back_to_the_shortlist():
    specs = catalogue()
    found = paged(specs, texts(specs), "ferry crossing", FakeEmbedder(), 8, 2, fits=lambda page: len(page) < 3)
    assert found is None
    engine = FakeEngine(scorer=yes_for("ferry"), n_ctx=700)
    result = nlt.select_tools(engine, "book a ferry harbour crossing", specs, rule=PAGED.model_copy(
        update={"pages": 40}), embedder=FakeEmbedder(), calibrate=False)
    assert result.shortlist is not None and result.shortlist.pages == 0 and result.shortlist.applied


def test_a_list_that_is_listed_whole_is_never_paged():
    specs = catalogue(20)
    engine = FakeEngine(scorer=yes_for("ferry"))
    result = nlt.select_tools(engine, "book a ferry harbour crossing", specs, rule=PAGED, embedder=FakeEmbedder(),
                              calibrate=False)
    assert result.shortlist is not None and not result.shortlist.applied and result.shortlist.pages == 0
