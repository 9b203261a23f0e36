"""Large catalogues: a shortlist (strategies/shortlist.py) keeps every model-scored prompt inside the context.

With default settings, no request on a catalogue of up to 1000 tools with descriptions of up to 60 tokens raises
ContextOverflowError in select_tools_nlt's score mode, parse_request or clarify (through the MCP protocol); the
fake engine refuses a prompt its context cannot hold, as llama.cpp does, so these tests fail without the shortlist.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
from test_server_support import RuleEngine, make_server
from test_server_tools import Session, with_session

from prefcall.engine.fake import FakeEmbedder, FakeEngine
from prefcall.errors import ContextOverflowError, ValidationError
from prefcall.schemas.model import Catalogue, Function
from prefcall.strategies import nlt, qwn
from prefcall.strategies.nlt_models import DecisionRule, NltUsage, ToolSpec
from prefcall.strategies.pipeline import Pipeline
from prefcall.strategies.pipeline_models import get_config
from prefcall.strategies.shortlist import SHORTLIST_SIZE, recall_at, shortlist, shortlist_catalogue

DATA = Path(__file__).parent / "data" / "catalogue200"
TOPICS = ["invoice", "weather", "parking", "thermostat", "playlist", "parcel", "recipe", "mortgage", "dentist",
          "ferry", "printer", "vaccine", "telescope", "karaoke", "greenhouse", "lighthouse"]


def big_tools(n: int = 1000) -> list[dict]:
    """n tools, each a distinct topic word pair, with a description of 60 words."""
    tools = []
    for i in range(n):
        topic = f"{TOPICS[i % len(TOPICS)]} {TOPICS[(i // len(TOPICS)) % len(TOPICS)]}"
        words = (f"Handles {topic} requests number {i} for the customer account " * 8).split()[:60]
        tools.append({"name": f"tool_{i:04d}", "description": " ".join(words),
                      "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}},
                                      "required": ["query"]}})
    if n <= 737:
        return tools
    tools[737] = {"name": "book_ferry_crossing",
                  "description": "Books a ferry crossing between two harbours for a date and a number of passengers.",
                  "inputSchema": {"type": "object", "properties": {"harbour": {"type": "string"}},
                                  "required": ["harbour"]}}
    return tools


def catalogue_of(tools: list[dict]) -> Catalogue:
    return Catalogue(name="big", functions=[Function(name=t["name"], description=t["description"],
                                                     parameters=t["inputSchema"]) for t in tools])


def yes_for(name: str):
    """A model that says YES to `name`'s line only."""
    def scorer(prompt: str, candidate: str) -> float:
        p = 0.9 if prompt.endswith(f"{name} -") else 0.1
        return math.log(p if candidate == " YES" else 1 - p)
    return scorer


# -- the shortlist itself ---------------------------------------------------------------------------------------
def test_a_small_list_that_fits_is_left_whole_without_retrieval():
    items = ["a", "b", "c"]
    kept, report = shortlist(items, ["x", "y", "z"], "query", None, size=5, fits=lambda kept: True)
    assert kept == items and not report.applied and report.ranked == []


def test_a_large_list_keeps_the_best_matches_in_their_own_order_and_trims_to_the_context():
    texts = [f"tool about {w} number {i}" for i, w in enumerate(["apples", "pears", "plums", "figs"] * 10)]
    texts[7], texts[21], texts[33] = "tool about ferry tickets", "tool about ferries", "tool about a ferry timetable"
    kept, report = shortlist(list(range(40)), texts, "ferry tickets to the island", None, size=3)
    assert report.applied and sorted(kept) == kept  # catalogue order: a stable prompt prefix
    assert 7 in kept and report.ranked[0] == "7" and len(kept) == 3
    trimmed, report = shortlist(list(range(40)), texts, "ferry tickets to the island", None, size=3,
                                fits=lambda kept: len(kept) <= 1)
    assert trimmed == [7] and report.trimmed == 2
    assert "1 of 40 tools" in report.describe() and "2 more left out" in report.describe()


def test_up_to_32_tools_are_listed_whole_unless_their_prompt_does_not_fit():
    items = list(range(30))
    texts = [f"tool {i}" for i in items]
    kept, report = shortlist(items, texts, "tool 3", None, size=4)
    assert kept == items and not report.applied
    kept, report = shortlist(items, texts, "tool 3", None, size=4, fits=lambda kept: len(kept) <= 10)
    assert report.applied and len(kept) == 4 and 3 in kept


def test_recall_at_k_counts_the_gold_tools_in_the_first_k():
    assert recall_at(["a", "b", "c"], ["b", "d"], 2) == 0.5
    assert recall_at(["a"], [], 1) == 1.0


def test_the_ranking_finds_the_one_fitting_tool_among_a_thousand():
    embedder = FakeEmbedder()
    catalogue = catalogue_of(big_tools(200))
    listed, report = shortlist_catalogue(catalogue, "Books a ferry crossing between two harbours", embedder, 8)
    assert report.applied and len(listed.functions) == 8 and "book_ferry_crossing" not in listed.names  # 737 > 200
    catalogue = catalogue_of(big_tools())
    listed, report = shortlist_catalogue(catalogue, "I need a ferry crossing to the other harbour", embedder, 8)
    assert "book_ferry_crossing" in listed.names and report.ranked[0] == "book_ferry_crossing"


# -- NLT --------------------------------------------------------------------------------------------------------
def test_score_mode_on_a_thousand_tools_asks_the_model_only_about_the_shortlist():
    engine = FakeEngine(scorer=yes_for("book_ferry_crossing"))
    specs = [ToolSpec(name=t["name"], description=t["description"]) for t in big_tools()]
    rule = DecisionRule(model_weight=1.0, threshold=0.0, source="test")
    result = nlt.select_tools(engine, "Book me a ferry crossing for two", specs, rule=rule, calibrate=False)
    assert result.selected == ["book_ferry_crossing"]
    assert result.shortlist is not None and result.shortlist.applied and len(result.shortlist.kept) <= SHORTLIST_SIZE
    asked = [d for d in result.decisions if d.shortlisted]
    assert len(asked) == len(result.shortlist.kept) and all(d.model_logodds is None for d in result.decisions
                                                            if not d.shortlisted)
    with pytest.raises(ContextOverflowError):  # the check can fail: the whole list does not fit the context
        nlt.tool_yes_logodds(engine, specs, "Book me a ferry crossing", None, NltUsage())


def test_a_shortlist_never_selects_a_tool_the_model_was_not_asked_about():
    engine = FakeEngine(scorer=yes_for("nothing"))
    specs = [ToolSpec(name=t["name"], description=t["description"]) for t in big_tools(100)]
    lexical_only = DecisionRule(model_weight=1.0, lexical_weight=10.0, threshold=-100.0, source="test")
    result = nlt.select_tools(engine, "weather invoice", specs, rule=lexical_only, calibrate=False, shortlist_size=4)
    assert sorted(result.selected) == sorted(result.shortlist.kept)


def test_generate_and_structured_modes_refuse_a_list_their_prompt_cannot_hold_in_one_line():
    engine = FakeEngine()
    specs = [ToolSpec(name=t["name"], description=t["description"]) for t in big_tools(150)]
    for mode in ("generate", "structured"):
        with pytest.raises(ValidationError, match=f"{mode} mode lists all 150 tools") as caught:
            nlt.select_tools(engine, "Book me a ferry", specs, mode=mode)
        assert "\n" not in str(caught.value) and "use score mode" in str(caught.value)


# -- parse_request and clarify ----------------------------------------------------------------------------------
def test_stage_one_lists_a_shortlist_and_chains_still_reach_the_whole_catalogue():
    tools = big_tools(300)
    tools[5] = {"name": "GetHotels", "description": "Find a hotel to stay in a city.",
                "inputSchema": {"type": "object", "properties": {"location": {"type": "string"}}}}
    tools[250] = {"name": "GetFlights", "description": "Find flights to a city.",
                  "inputSchema": {"type": "object", "properties": {"destination": {"type": "string"}}}}
    catalogue = catalogue_of(tools)
    engine = FakeEngine(scorer=lambda prompt, candidate: 0.0 if candidate.strip() == "GetFlights" else -5.0)
    pipeline = Pipeline(engine, FakeEmbedder())
    config = get_config("full").model_copy(update={"shortlist_size": 16})
    result = pipeline.parse("User: I need flights to Boston", ["If I ask for flights, also look at hotels."],
                            catalogue, config)
    assert result.functions[:1] == ["GetFlights"]
    assert "GetHotels" in result.functions  # chained although the shortlist for "flights to Boston" may lack it
    assert any(note.startswith("stage 1: ") and "of 300 tools shortlisted" in note for note in result.notes)
    listed = [p for p in engine.prompts if "Function:" in p]
    assert listed and all(p.count("tool_") <= 16 for p in listed)


def test_clarify_lists_a_shortlist_and_says_so():
    engine = RuleEngine()
    result = qwn.clarify(engine, "User: Book a ferry crossing to the island harbour", catalogue_of(big_tools()),
                         embedder=FakeEmbedder())
    assert result.shortlist is not None and result.shortlist.applied
    assert all(p.count("- tool_") <= SHORTLIST_SIZE for p in engine.prompts)


def test_a_thousand_tools_through_mcp_never_overflow_the_context(tmp_path: Path):
    tools = big_tools()
    engine = RuleEngine()
    engine.scorer = yes_for("book_ferry_crossing")

    async def body(session: Session):
        await session.ok("import_catalogue", {"name": "big", "tools": tools})
        await session.ok("create_profile", {"user_id": "alice"})
        message = "Book me a ferry crossing to the harbour"
        nlt_result = await session.ok("select_tools_nlt", {"message": message, "catalogue": "big"})
        assert nlt_result["status"] == "ok" and "of 1000 tools shortlisted" in (nlt_result["shortlist"] or "")
        parsed = await session.ok("parse_request", {"user_id": "alice", "catalogue": "big",
                                                    "dialogue": [{"role": "user", "content": message}]})
        assert parsed["decision"] in ("call", "ask", "refuse")
        assert any("of 1000 tools shortlisted" in note for note in parsed["notes"])
        clarified = await session.ok("clarify", {"catalogue": "big",
                                                 "dialogue": [{"role": "user", "content": message}]})
        assert "of 1000 tools shortlisted" in (clarified["shortlist"] or "")

    with_session(make_server(tmp_path, engine=engine), body)


# -- the committed 200-tool catalogue ---------------------------------------------------------------------------
def test_the_200_tool_catalogue_is_what_its_build_writes():
    spec = importlib.util.spec_from_file_location("catalogue200_build", DATA / "build.py")
    build = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(build)
    catalogue, requests = build.build()
    assert build.render(catalogue, requests) == ((DATA / "catalogue.json").read_text(encoding="utf-8"),
                                                 (DATA / "requests.jsonl").read_text(encoding="utf-8")), \
        "tests/data/catalogue200 is stale: run python tests/data/catalogue200/build.py"
    shipped = json.loads((DATA / "catalogue.json").read_text(encoding="utf-8"))
    assert len(shipped["functions"]) == 200 and len({f["name"] for f in shipped["functions"]}) == 200
    assert [f["name"] for f in shipped["functions"][:10]] == [n for n, b in shipped["blocks"].items() if b == "ide"]


# -- calibration under shortlists that change per request -------------------------------------------------------
def test_nlt_calibrates_each_shortlisted_tool_once_across_requests():
    engine = FakeEngine(scorer=yes_for("book_ferry_crossing"))
    specs = [ToolSpec(name=t["name"], description=t["description"]) for t in big_tools()]
    rule = DecisionRule(model_weight=1.0, threshold=0.0, source="test")
    cache = nlt.ContentFreeCache()

    def content_free_asks() -> int:
        return sum(1 for c in engine.calls if "Message: N/A" in c["prompt"] or "Message: hello" in c["prompt"])

    first = nlt.select_tools(engine, "Book me a ferry crossing", specs, rule=rule, cache=cache, shortlist_size=8)
    asked_first = content_free_asks()
    assert asked_first == 2 * 8 and first.calibration_cached is False  # "N/A" and "hello" (the empty message is
    # "Message: " and matches neither) for each of the 8 tools
    again = nlt.select_tools(engine, "Book me a ferry crossing please", specs, rule=rule, cache=cache,
                             shortlist_size=8)
    assert set(again.shortlist.kept) == set(first.shortlist.kept)
    assert content_free_asks() == asked_first and again.calibration_cached is True
    other = nlt.select_tools(engine, "weather thermostat invoice", specs, rule=rule, cache=cache, shortlist_size=8)
    new_tools = set(other.shortlist.kept) - set(first.shortlist.kept)
    assert content_free_asks() == asked_first + 2 * len(new_tools)
    assert other.content_free == {n: first.content_free[n] for n in other.shortlist.kept
                                  if n in first.content_free} | {n: other.content_free[n] for n in new_tools}


def test_stage_one_calibrates_each_shortlisted_function_once_across_requests():
    catalogue = catalogue_of(big_tools(300))
    engine = FakeEngine(scorer=lambda prompt, candidate: -1.0)
    pipeline = Pipeline(engine, FakeEmbedder())
    config = get_config("full").model_copy(update={"shortlist_size": 6})

    def content_free_candidates() -> int:
        return sum(len(c["candidates"]) for c in engine.calls if c["kind"] == "score"
                   and ("User: N/A" in c["prompt"] or "User: [MASK]" in c["prompt"]))

    def listed(stage) -> set[str]:
        return set(json.loads(stage.raw)) - {"None"}

    first = pipeline.stage_one("User: weather invoice", catalogue, config)
    counted = content_free_candidates()
    assert counted == 2 * 6 and len(listed(first)) == 6
    second = pipeline.stage_one("User: invoice", catalogue, config)
    new = listed(second) - listed(first)
    assert new and listed(second) & listed(first)  # a shortlist of its own that shares functions with the first
    assert content_free_candidates() == counted + 2 * len(new)  # only the functions never listed before


# -- the fitted size --------------------------------------------------------------------------------------------
def test_the_fitted_size_is_the_smallest_within_the_tolerance_of_the_best():
    from prefcall.evaluation.fit_shortlist import fit_size

    curves = {0.5: {4: 0.80, 8: 0.90, 16: 0.95, 32: 0.99}, 1.0: {4: 0.85, 8: 0.97, 16: 0.985, 32: 0.99}}
    assert fit_size(curves, tolerance=0.01) == (1.0, 16)
    assert fit_size(curves, tolerance=0.03) == (1.0, 8)


def test_the_shipped_shortlist_rule_is_fitted_for_the_embedder_and_names_its_command():
    from importlib import resources

    from prefcall.strategies.shortlist import rule_for

    shipped = json.loads(resources.files("prefcall").joinpath("data", "shortlist.json").read_text(encoding="utf-8"))
    entry = shipped["all-MiniLM-L6-v2"]
    assert entry["source"]["command"].startswith("prefcall fit --shortlist")
    assert 4 <= entry["size"] <= 32 and entry["recall_tune"][str(entry["size"])] >= 0.95

    class Named(FakeEmbedder):
        @property
        def name(self) -> str:
            return "all-MiniLM-L6-v2"

    assert rule_for(Named()).size == entry["size"] and rule_for(Named(), 5).size == 5
    # the page geometry fitted with it: no more tools asked than four shortlists, recall near the shortlist's
    pages = entry["pages"]
    assert (rule_for(Named()).page_size, rule_for(Named()).page_seeds) == (pages["size"], pages["seeds"])
    assert pages["asked"] <= 4 * entry["size"] and pages["recall"] >= entry["recall_tune"][str(entry["size"])] - 0.05
    assert rule_for(FakeEmbedder()).size == SHORTLIST_SIZE  # no fit for this embedder: the default


def test_the_setting_sets_the_shortlist_size_through_mcp(tmp_path: Path):
    engine = RuleEngine()
    engine.scorer = yes_for("book_ferry_crossing")

    async def body(session: Session):
        result = await session.ok("select_tools_nlt", {"message": "Book me a ferry crossing", "tools": big_tools(100)})
        assert (result["shortlist"] or "").startswith("5 of 100 tools")
        assert sum(d["shortlisted"] for d in result["decisions"]) == 5

    with_session(make_server(tmp_path, engine=engine, settings={"shortlist_size": 5}), body)
