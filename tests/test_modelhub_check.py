"""`prefcall model check` with an injected FakeEngine: capabilities, smoke scoring, verdict, the JSON line."""

from __future__ import annotations

import json

import pytest

from prefcall.cli import main
from prefcall.config import Settings
from prefcall.engine.base import EngineInfo
from prefcall.engine.fake import CannedReply, FakeEmbedder, FakeEngine
from prefcall.engine.gguf_meta import read_gguf_info
from prefcall.modelhub import check as check_module
from prefcall.modelhub.check import CheckReport, check_capabilities, render, run_check
from prefcall.modelhub.smoke import (
    CaseOutcome,
    builtin_suite,
    score_clarify,
    score_parse,
    score_selection,
    value_matches,
)
from prefcall.modelhub.system import recommend_n_ctx, recommend_n_gpu_layers
from prefcall.modelhub.testing import write_gguf

NLT_ANSWERS = {
    "What's the weather like in Berlin today?": ["get_weather"],
    "Email Anna that I'll be ten minutes late to the meeting.": ["send_email"],
    "Set a timer for 10 minutes.": ["set_timer"],
    "Put lunch with Sam on my calendar for Friday at noon, and email Sam to let him know.": [
        "send_email", "create_calendar_event"],
    "Play some jazz while I cook.": ["play_music"],
    "Thanks, that's all for now.": [],
}
TOOLS = ["get_weather", "send_email", "create_calendar_event", "set_timer", "play_music", "search_web"]


def capable_engine() -> FakeEngine:
    """Answers the capability probes and the NLT cases right; everything else gets an empty reply."""
    replies = [
        CannedReply('{"city": "Lisbon", "nights": 3}', when="Lisbon", logprob=-0.2, top=[("{", -0.1), ('"', -3.0)]),
    ]
    capitals = {"Paris": -0.3, "London": -4.0, "Banana": -9.0}

    def scorer(prompt: str, candidate: str) -> float:
        # select_tools' score mode (the MCP tool's default): YES/NO after each tool's line
        tool = next((t for t in TOOLS if prompt.rstrip().endswith(f"{t} -")), None)
        if tool is None or candidate.strip() not in ("YES", "NO"):
            return capitals.get(candidate.strip(), -5.0)
        chosen = next((c for m, c in NLT_ANSWERS.items() if f"Message: {m}" in prompt), None)
        if chosen is None:
            return -0.7  # a content-free message: no lean either way
        return -0.1 if (candidate.strip() == "YES") == (tool in chosen) else -6.0

    return FakeEngine(replies=replies, scorer=scorer)


def test_the_builtin_suite_has_about_twenty_cases_of_each_kind():
    suite = builtin_suite()
    kinds = [c.kind for c in suite.cases]
    assert 18 <= len(kinds) <= 24 and len({c.id for c in suite.cases}) == len(kinds)
    assert kinds.count("parse_request") >= 7 and kinds.count("select_tools") >= 5 and kinds.count("clarify") >= 5
    assert suite.select(["clarify"]) == tuple(c for c in suite.cases if c.kind == "clarify")
    assert [c.id for c in suite.select(["nlt-timer"])] == ["nlt-timer"]


def test_scoring_is_lenient_but_truthful():
    assert value_matches("American", "American Airlines") and value_matches("7pm", "7 PM")
    assert value_matches(4, "4") and value_matches(3, 3.0) and not value_matches(4, 5)
    assert not value_matches("Delta", None) and not value_matches("Delta", "  ") and not value_matches("Rome", "Paris") and not value_matches("Rome", "Jerome")
    assert not value_matches("San Francisco", "San") and value_matches("2025-03-14", "2025-03-14T09:00")
    expect = {"decision": "call", "calls": [{"name": "BookFlight", "arguments": {"origin": "Boston", "airline": "Delta"}}]}
    ok = {"decision": "call", "calls": [{"name": "BookFlight", "arguments": {"origin": "boston", "airline": "Delta Air Lines",
                                                                             "seat_class": "economy"}}]}
    assert score_parse(expect, ok)[0]  # extra arguments are fine
    missing = {"decision": "call", "calls": [{"name": "BookFlight", "arguments": {"origin": "Boston"}}]}
    passed, detail = score_parse(expect, missing)
    assert not passed and "airline=None" in detail
    extra_call = {"decision": "call", "calls": ok["calls"] + [{"name": "BookHotel", "arguments": {}}]}
    assert "unexpected call BookHotel" in score_parse(expect, extra_call)[1]
    assert not score_parse(expect, {"decision": "ask", "calls": []})[0]
    assert score_parse({"decision": "refuse"}, {"decision": "refuse", "calls": []})[0]
    assert score_selection({"selected": ["a", "b"]}, {"selected": ["b", "a"]})[0]
    passed, detail = score_selection({"selected": ["a"]}, {"selected": ["a", "c"], "status": "partial"})
    assert not passed and "extra c" in detail and "partial" in detail
    assert score_clarify({"decision": "question"}, {"decision": "question", "status": "ok"})[0]
    assert not score_clarify({"decision": "continue"}, {"decision": "continue", "status": "parse_error"})[0]


def test_capabilities_pass_and_fail_with_reasons(tmp_path):
    good = check_capabilities(capable_engine(), None)
    assert [(c.name, c.passed) for c in good] == [
        ("chat_template", True), ("json_grammar", True), ("logprobs", True), ("candidate_scoring", True)]
    assert "Lisbon" in good[1].detail
    bad = FakeEngine(enforce_schema=False, replies=[CannedReply('{"city": 5}', when="Lisbon")], scorer={"Paris": -9.0, "Banana": -1.0})
    no_template = read_gguf_info(write_gguf(tmp_path / "m.gguf", chat_template=None))
    results = {c.name: c for c in check_capabilities(bad, no_template)}
    assert not results["chat_template"].passed and "no tokenizer.chat_template" in results["chat_template"].detail
    assert not results["json_grammar"].passed and "missing nights" in results["json_grammar"].detail
    assert not results["logprobs"].passed and "alternatives" in results["logprobs"].detail
    assert not results["candidate_scoring"].passed and "best 'Banana'" in results["candidate_scoring"].detail


def test_run_check_with_a_fake_engine_reports_every_case(settings):
    report = run_check(settings, reference="fake", engine=capable_engine(), embedder=FakeEmbedder())
    assert len(report.cases) == len(builtin_suite().cases)
    nlt = [c for c in report.cases if c.case.kind == "select_tools"]
    assert nlt and all(c.passed for c in nlt), [c.detail for c in nlt if not c.passed]
    assert all(c.got["evidence"] for c in nlt)  # score mode, as the MCP tool answers: it says what decided
    # The fake's replies are unusable for clarify: those count as failures with a reason, never crash the check.
    others = [c for c in report.cases if c.case.kind != "select_tools"]
    assert all(c.detail for c in others if not c.passed) and not all(c.passed for c in others)
    verdict, why = report.verdict
    assert verdict == "not recommended" and "<" in why
    data = report.as_json()
    assert data["cases"] == len(report.cases) and data["by_kind"]["select_tools"] == f"{len(nlt)}/{len(nlt)}"
    assert data["capabilities"] == {"chat_template": True, "json_grammar": True, "logprobs": True,
                                    "candidate_scoring": True}
    assert data["recommended_n_gpu_layers"] == 0 and data["n_gpu_layers_offloaded"] is None
    screen = render(report)
    assert "verdict: NOT RECOMMENDED" in screen and "good >= 80%" in screen
    assert len(screen.splitlines()) <= 50  # one screen


def test_verdict_thresholds():
    from prefcall.modelhub.check import Capability
    from prefcall.modelhub.smoke import SmokeCase

    def report(passed: int, total: int = 10, capable: bool = True) -> CheckReport:
        r = CheckReport("x", "x", "x", None, "cpu", 0, 0, 4096, 1, 1.0, 0)
        r.capabilities = [Capability(n, capable, "") for n in check_module.REQUIRED]
        case = SmokeCase("c", "clarify", "travel", {})
        r.cases = [CaseOutcome(case, i < passed, "") for i in range(total)]
        return r

    assert report(8).verdict[0] == "good" and report(7).verdict[0] == "usable"
    assert report(5).verdict[0] == "usable" and report(4).verdict[0] == "not recommended"
    assert report(10, capable=False).verdict[0] == "not recommended"


def test_recommendations(tmp_path):
    info = read_gguf_info(write_gguf(tmp_path / "m.gguf", context_length=32768, block_count=24))
    assert recommend_n_ctx(info, 16 * 2**30).value == 8192
    small = read_gguf_info(write_gguf(tmp_path / "s.gguf", context_length=2048))
    assert recommend_n_ctx(small, 16 * 2**30).value == 2048  # never beyond the trained context
    assert recommend_n_gpu_layers(info, "cpu", None, 8192).value == 0
    assert recommend_n_gpu_layers(info, "cuda", 8 * 2**30, 8192).value == -1
    assert recommend_n_gpu_layers(info, "cuda", None, 8192).value == -1
    big = read_gguf_info(write_gguf(tmp_path / "b.gguf", block_count=32))
    object.__setattr__(big, "size", 6 * 2**30)
    partial = recommend_n_gpu_layers(big, "cuda", 4 * 2**30, 4096)
    assert 0 < partial.value < 32 and "of 32 layers" in partial.reason


def test_check_command_ends_with_one_json_line(monkeypatch, capsys):
    import prefcall.engine as engine_module

    monkeypatch.setattr(engine_module, "load_engine", lambda settings: capable_engine())
    monkeypatch.setattr(engine_module, "load_embedder", lambda settings: FakeEmbedder())
    assert main(["model", "check", "--only", "select_tools", "--threads", "1"]) == 0
    captured = capsys.readouterr()
    last = json.loads(captured.out.strip().splitlines()[-1])
    assert last["cases"] == 6 and last["passed"] == 6 and last["verdict"] == "good" and last["threads"] == 1
    assert "checking capabilities" in captured.err


def test_info_reports_backend_and_offloaded_layers():
    from prefcall.commands.engine import info_report

    cpu = info_report(EngineInfo("<fake>", "m", "cpu", 4096, 0))
    assert cpu["backend"] == "cpu" and cpu["n_gpu_layers_offloaded"] == 0
    gpu = info_report(EngineInfo("<fake>", "m", "cuda", 4096, -1, extra={"n_gpu_layers_offloaded": 29}))
    assert gpu["backend"] == "cuda" and gpu["n_gpu_layers_offloaded"] == 29
    unknown = info_report(EngineInfo("<fake>", "m", "metal", 4096, -1))
    assert unknown["n_gpu_layers_offloaded"] is None  # not guessed


@pytest.fixture
def settings(tmp_path):
    return Settings(data_dir=tmp_path / "data", n_threads=1)
