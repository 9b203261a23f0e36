"""prefcall bench: statistics helpers, the JSON last-line contract, --quick/--only plumbing, every model
section's plumbing against a fake engine that takes time in proportion to tokens (milliseconds in total)."""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prefcall.bench import stats
from prefcall.bench.context import FALLBACK_ITEMS, BenchContext, WorkItem
from prefcall.bench.report import render_markdown, render_table, write_outputs
from prefcall.bench.retrieval import random_unit_vectors, synthesize_demonstrations
from prefcall.bench.runner import SECTIONS, Section, parse_only, run_bench, run_section
from prefcall.cli import build_parser, main
from prefcall.engine.base import Generation
from prefcall.engine.fake import FakeEmbedder, FakeEngine
from prefcall.errors import ValidationError

PROMPT_SECONDS_PER_TOKEN = 2e-5
GEN_SECONDS_PER_TOKEN = 1e-4


# -- statistics ---------------------------------------------------------------------------------------
def test_percentiles_interpolate_like_numpy() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0, 7.0]
    for q in (0, 25, 50, 90, 95, 100):
        assert math.isclose(stats.percentile(values, q), float(np.percentile(values, q)))
    assert stats.percentile([3.0], 95) == 3.0


def test_percentile_rejects_nothing_and_out_of_range() -> None:
    with pytest.raises(ValueError):
        stats.percentile([], 50)
    with pytest.raises(ValueError):
        stats.percentile([1.0], 101)


def test_summarize_scales_and_reports_p50_p95() -> None:
    s = stats.summarize([0.010, 0.020, 0.030, 0.040], scale=1000)
    assert s["n"] == 4 and s["p50"] == 25.0 and s["min"] == 10.0 and s["max"] == 40.0
    assert math.isclose(s["p95"], 38.5)
    assert stats.summarize([]) == {"n": 0}


def test_ratio_is_none_without_a_positive_denominator() -> None:
    assert stats.ratio(6, 2) == 3.0
    assert stats.ratio(1, 0) is None and stats.ratio(None, 2) is None and stats.ratio(1, None) is None


def test_overhead_ratio_divides_latency_by_raw_time_for_the_same_tokens() -> None:
    # 100 tokens at 200 tok/s + 10 tokens at 20 tok/s = 0.5 + 0.5 = 1 s of raw llama.cpp time.
    assert stats.raw_seconds(100, 10, 200.0, 20.0) == pytest.approx(1.0)
    assert stats.overhead_ratio(1.5, 100, 10, 200.0, 20.0) == 1.5
    with pytest.raises(ValueError):
        stats.raw_seconds(1, 1, 0.0, 1.0)


def test_targets_say_met_and_by_how_much() -> None:
    missed = stats.target("latency", 75.0, 50.0, unit="ms")
    assert missed["met"] is False and missed["factor_of_limit"] == 1.5
    met = stats.target("speed-up", 6.0, 5.0, higher_is_better=True)
    assert met["met"] is True
    assert stats.target("x", None, 1.0)["met"] is None


def test_rates_are_finite_and_positive_even_over_a_duration_the_clock_did_not_see() -> None:
    assert stats.rate(100, 2.0) == 50.0
    for seconds in (0.0, -1e-6, stats.CLOCK_RESOLUTION_S / 10):  # a clock that did not tick, or went back
        figure = stats.rate(16, seconds)
        assert math.isfinite(figure) and figure > 0
        assert figure == 16 / stats.CLOCK_RESOLUTION_S
    assert stats.rate(0, 0.0) == 0.0  # nothing counted: no throughput, still a figure
    assert stats.positive_seconds(0.0) == stats.CLOCK_RESOLUTION_S > 0
    with pytest.raises(ValueError):
        stats.rate(-1, 1.0)


def test_rss_is_read_from_proc_and_none_where_there_is_no_such_process() -> None:
    if not Path("/proc/self/status").is_file():
        pytest.skip("no /proc on this system: rss_bytes returns None by design")
    rss = stats.rss_bytes()
    # Well-formed: whole bytes from VmRSS's kB. Its size is the bench's figure, not the test's.
    assert isinstance(rss, int) and rss > 0 and rss % 1024 == 0
    statm_pages = int(Path("/proc/self/statm").read_text().split()[1])  # the same resident set, in pages
    assert rss == pytest.approx(statm_pages * os.sysconf("SC_PAGE_SIZE"), rel=0.5)
    assert stats.rss_bytes(2**22 + 7) is None  # beyond pid_max: no such process


# -- a fake engine that costs time per token, so ratios are meaningful ---------------------------------
def fake_json(schema: dict[str, Any]) -> Any:
    """The smallest JSON value valid for the schemas the strategies use."""
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    if "anyOf" in schema:
        return fake_json(schema["anyOf"][0])
    kind = schema.get("type")
    if kind == "object":
        return {k: fake_json(schema["properties"][k]) for k in schema.get("required", [])}
    if kind == "array":
        item = schema.get("items", {})
        return [fake_json(item)] if schema.get("minItems") or "enum" in item or "anyOf" in item else []
    return {"string": "x", "integer": 1, "number": 1.0, "boolean": True}.get(kind, "x")


class TimedFakeEngine(FakeEngine):
    """FakeEngine whose calls take time in proportion to evaluated and generated tokens."""

    def generate(self, prompt: str, *, max_tokens: int = 256, stop=(), json_schema=None, top_logprobs: int = 0) -> Generation:
        text = json.dumps(fake_json(json_schema)) if json_schema else (
            "Thinking: the user wants a flight.\nGetFlights - YES\nGetHotels - NO\nAssessment finished.")
        self.reply(text)
        started = time.perf_counter()
        g = super().generate(prompt, max_tokens=max_tokens, stop=stop, json_schema=json_schema, top_logprobs=top_logprobs)
        time.sleep(g.usage.evaluated * PROMPT_SECONDS_PER_TOKEN + g.completion_tokens * GEN_SECONDS_PER_TOKEN)
        g.seconds = time.perf_counter() - started
        return g

    def score_candidates(self, prompt, candidates, **kwargs):
        scores = super().score_candidates(prompt, candidates, **kwargs)
        time.sleep(scores.usage.evaluated * PROMPT_SECONDS_PER_TOKEN)
        return scores


def fake_context(**overrides: Any) -> BenchContext:
    lines: list[str] = []
    options: dict[str, Any] = dict(quick=True, reps=1, engine_factory=lambda s: TimedFakeEngine(),
                                   embedder_factory=lambda s: FakeEmbedder(), items=list(FALLBACK_ITEMS),
                                   log=lines.append)
    options.update(overrides)
    return BenchContext(**options)


def assert_raw_figures_well_formed(raw: dict[str, Any], reps: int) -> None:
    """Every raw figure is produced: present, finite and positive (its size is the bench's business)."""
    for key in ("prompt_tps", "gen_tps", "grammar_gen_tps", "grammar_token_cost_ratio"):
        assert isinstance(raw[key], float) and math.isfinite(raw[key]) and raw[key] > 0, (key, raw[key])
    assert raw["prompt_tokens_per_run"] > 0
    assert len(raw["prompt_tps_runs"]) == reps and len(raw["gen_tps_runs"]) == reps
    assert all(math.isfinite(r) and r > 0 for r in raw["prompt_tps_runs"] + raw["gen_tps_runs"])


def test_limit_section_measures_raw_throughput_and_overheads_with_a_fake() -> None:
    ctx = fake_context()
    section = run_section(SECTIONS["limit"], ctx)
    assert section["status"] == "ok", section.get("reason")
    assert_raw_figures_well_formed(section["figures"]["raw"], reps=1)
    for name in ("parse_request", "select_tools_nlt", "clarify"):
        strategy = section["figures"]["strategies"][name]
        ratio = strategy["overhead_ratio_p50"]
        assert isinstance(ratio, float) and math.isfinite(ratio) and ratio > 0, (name, ratio)
        assert strategy["runs"][0]["evaluated"] > 0


class FrozenClockEngine(TimedFakeEngine):
    """Every call reports a duration of 0 s: what a coarse or loaded clock does to a short call, and what left the
    raw generation rate out (the prompt's estimated time was as long as the whole call, so decoding got <= 0 s)."""

    def generate(self, prompt: str, **kwargs: Any) -> Generation:
        g = super().generate(prompt, **kwargs)
        g.seconds = 0.0
        return g


class PromptHeavyEngine(TimedFakeEngine):
    """A machine that slowed down between the prompt measurement and the generation runs: each generation call
    takes less time than its prompt alone took when measured, so `seconds - evaluated / prompt_tps` is negative."""

    def generate(self, prompt: str, **kwargs: Any) -> Generation:
        g = super().generate(prompt, **kwargs)
        g.seconds = 1.0 if kwargs.get("max_tokens") == 1 else 1e-4
        return g


@pytest.mark.parametrize("engine", [FrozenClockEngine, PromptHeavyEngine])
def test_the_raw_limit_produces_every_figure_when_a_call_takes_no_measurable_time(engine) -> None:
    from prefcall.bench.model import measure_raw

    for reps in (1, 3):
        raw = measure_raw(fake_context(engine_factory=lambda s: engine(), reps=reps))
        assert_raw_figures_well_formed(raw, reps)


def test_model_sections_run_end_to_end_against_a_fake() -> None:
    report = run_bench(fake_context(), ["prefix", "nlt", "fnctod", "grounded", "taps"])
    for name, section in report["sections"].items():
        assert section["status"] == "ok", (name, section.get("reason"))
    prefix = report["sections"]["prefix"]["figures"]["runs"][0]
    # The shipped config is measured, and the fake engine reuses the shared prefix: the warm request starts
    # from the cold one's KV state (its reused tokens include the catalogue listing the cold one evaluated).
    assert report["sections"]["prefix"]["figures"]["config"] == "full"
    assert prefix["warm"]["reused"] > 0 and prefix["warm"]["evaluated"] < prefix["warm"]["prompt_tokens"]
    nlt = report["sections"]["nlt"]["figures"]["modes"]
    assert set(nlt) == {"generate", "score", "score_model_forced", "structured"}
    assert nlt["score"]["tokens_out"]["p50"] == 0  # scoring generates nothing
    # The fake has no fitted rule: the default weighs the model, so the shipped and the forced runs both ask it.
    assert all(r["model_calls"] > 0 for r in nlt["score"]["runs"] + nlt["score_model_forced"]["runs"])
    assert report["sections"]["nlt"]["figures"]["score_over_model_forced"] is not None
    fnctod = report["sections"]["fnctod"]["figures"]["cold"]
    assert fnctod["one_stage"]["model_calls"] == 1 and fnctod["two_stage"]["model_calls"] >= 1
    grounded = report["sections"]["grounded"]
    # parse_request as the server runs it against one generation of the calls, warm, on the same requests.
    assert grounded["figures"]["config"] == "full" and grounded["figures"]["cold"]["one_stage"]["model_calls"] == 1
    runs = grounded["figures"]["variants"]["grounded"]["runs"]
    assert len(runs) == 1 and all(r["decision"] in ("call", "ask", "refuse") and "total" in r["steps"] for r in runs)
    # With the instructions' tags stored (tag_profile, or an earlier request), the timed request tags nothing.
    [steady] = grounded["figures"]["variants"]["grounded_stored"]["runs"]
    assert steady["model_calls"] < runs[0]["model_calls"], (steady, runs[0])
    assert steady["decision"] == runs[0]["decision"] and steady["calls"] == runs[0]["calls"]
    assert {t["name"] for t in grounded["targets"]} == {
        f"{name}: parse_request ({label}) / one-stage latency, {q}" for q in ("p50", "p95")
        for name, label in (("grounded", "tags made on the request's path"), ("grounded_stored", "tags stored"))}
    taps = report["sections"]["taps"]["figures"]
    assert all(taps["fired_flags"]) and not any(r["gate_fired"] for r in taps["runs"]["not_fired"])
    names = {t["name"] for t in report["targets"]}
    assert any(n.startswith("prefix:") for n in names) and any(n.startswith("nlt:") for n in names)


def test_a_failing_section_is_reported_and_the_next_still_runs() -> None:
    def boom(ctx: BenchContext) -> dict[str, Any]:
        raise RuntimeError("engine fell over")

    ctx = fake_context()
    failed = run_section(Section("boom", "Boom", boom), ctx)
    assert failed["status"] == "error" and failed["reason"] == "RuntimeError: engine fell over"
    assert run_section(Section("fine", "Fine", lambda ctx: {"headline": []}), ctx)["status"] == "ok"


# -- sections, --only and --quick ---------------------------------------------------------------------
def test_only_keeps_the_bench_order_and_rejects_unknown_names() -> None:
    assert parse_only("retrieval,limit") == ["limit", "retrieval"]
    assert parse_only(None) == list(SECTIONS)
    with pytest.raises(ValidationError, match="use some of"):
        parse_only("limit,warp-speed")


def test_synthesised_demonstrations_recombine_templates_deterministically() -> None:
    texts = synthesize_demonstrations(50, ["find a flight", "book a hotel"], ["I fly Delta", "I like 4 stars"], seed=3)
    assert len(texts) == 50 and texts == synthesize_demonstrations(50, ["find a flight", "book a hotel"],
                                                                   ["I fly Delta", "I like 4 stars"], seed=3)
    assert all(len(t.split("\n")) == 3 for t in texts)
    vectors = random_unit_vectors(10, 384)
    assert vectors.shape == (10, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def bench_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bench", *argv])


def test_quick_retrieval_prints_a_table_and_ends_stdout_with_one_json_object(capsys, tmp_path) -> None:
    from prefcall.commands.bench import run_bench_command

    args = bench_args("--quick", "--only", "retrieval", "--out", str(tmp_path / "out"))
    code = run_bench_command(args, context_overrides={"embedder_factory": lambda s: FakeEmbedder(),
                                                      "items": list(FALLBACK_ITEMS), "log": lambda line: None})
    captured = capsys.readouterr()
    assert code == 0
    last = captured.out.strip().splitlines()[-1]
    report = json.loads(last)
    assert report["meta"]["quick"] is True and report["meta"]["reps"] == 1
    assert list(report["sections"]) == ["retrieval"]
    sizes = report["sections"]["retrieval"]["figures"]["sizes"]
    assert list(sizes) == ["1000"]  # --quick: 1k only
    assert sizes["1000"]["latency_ms"]["fused"]["p95"] >= sizes["1000"]["latency_ms"]["fused"]["p50"] > 0
    assert "retrieval" in captured.err and "target" in captured.err  # the table went to stderr
    written = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"bench.json", "bench.md", "retrieval.png"} <= written
    assert json.loads((tmp_path / "out" / "bench.json").read_text())["sections"].keys() == report["sections"].keys()


def test_unknown_section_is_a_one_line_error_from_the_cli(capsys) -> None:
    assert main(["bench", "--only", "nope"]) == 2
    assert "unknown bench section" in capsys.readouterr().err


def test_markdown_and_table_show_skipped_sections_and_missed_targets() -> None:
    report = {"meta": {"commit": "abc", "load_average_start": [1.0, 1.0, 1.0]},
              "sections": {"server": {"status": "skipped", "reason": "skipped: module prefcall.server.app is missing"},
                           "prefix": {"status": "ok", "headline": [["latency ratio x", 2.5]]}},
              "targets": [stats.target("prefix: cold/warm latency", 2.5, 3.0, higher_is_better=True, unit="x")]}
    table = render_table(report)
    assert "skipped: module prefcall.server.app is missing" in table and "MISSED" in table
    markdown = render_markdown(report, "prefcall bench")
    assert "| prefix | latency ratio x | 2.5 |" in markdown and "| NO |" in markdown


def test_plots_are_written_for_the_sections_present(tmp_path) -> None:
    report = run_bench(fake_context(), ["nlt", "fnctod"])
    written = {p.name for p in write_outputs(report, tmp_path)}
    assert {"bench.json", "bench.md", "comparisons.png"} <= written


def test_same_function_pairs_pick_two_different_requests_for_one_function() -> None:
    items = [WorkItem("User: a", [], [], "GetFlights"), WorkItem("User: b", [], [], "GetHotels"),
             WorkItem("User: c", [], [], "GetFlights")]
    ctx = fake_context(items=items)
    assert ctx.same_function_pairs() == [(items[0], items[2])]


def test_the_server_section_finds_the_process_it_spawned() -> None:
    import os
    import subprocess
    import sys

    from prefcall.bench.server import child_pids, free_port, serve_command

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "bench-marker-serve"])
    try:
        deadline = time.monotonic() + 60
        while child.pid not in child_pids(os.getpid(), "bench-marker-serve") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child_pids(os.getpid(), "bench-marker-serve") == [child.pid]
        if Path(f"/proc/{child.pid}/status").is_file():  # where /proc exists, the live child's RSS is read
            rss = stats.rss_bytes(child.pid)
            assert isinstance(rss, int) and rss > 0 and rss % 1024 == 0
    finally:
        child.terminate()
        child.wait(timeout=60)
    assert stats.rss_bytes(child.pid) is None  # reaped: no such process any more
    assert 0 < free_port() < 65536
    assert serve_command(["--threads", "2"], "--transport", "http")[-5:] == ["serve", "--threads", "2", "--transport", "http"]


def test_the_catalogue_section_measures_10_50_and_200_tools_with_the_shortlist_against_a_fake(monkeypatch) -> None:
    from prefcall.strategies import nlt

    calls = []
    select = nlt.select_tools
    monkeypatch.setattr(nlt, "select_tools", lambda *a, **k: calls.append(k["rule"]) or select(*a, **k))
    report = run_bench(fake_context(engine_factory=lambda s: FakeEngine()), ["catalogue"])
    section = report["sections"]["catalogue"]
    assert section["status"] == "ok", section.get("reason")
    sizes = section["figures"]["sizes"]
    assert set(sizes) == {10, 50, 200} and all(sizes[n]["nlt"]["n"] == 12 for n in sizes)
    # The fake has no fitted rule, so the model is asked: 10 tools whole, 200 shortlisted to the default size.
    assert sizes[10]["nlt"]["shortlisted"]["p50"] == 10 and sizes[200]["nlt"]["shortlisted"]["p50"] <= 32
    # A shipped rule that asks the model is the forced rule: its answers are reported for both, not run twice.
    assert section["figures"]["rule"]["model_weight"] > 0
    assert len(calls) == 12 * 3 and all(sizes[n]["nlt_model_forced"] == sizes[n]["nlt"] for n in sizes)
    assert section["figures"]["recall_at_k_200"] and all(0 <= r <= 1 for r in section["figures"]["recall_at_k_200"].values())
    assert {t["name"] for t in section["targets"]} >= {"catalogue: stage1 p50 at 200 tools / at 10",
                                                       "catalogue: nlt accuracy drop from 10 to 200 tools"}
    # the report part of the frozen split (what no fit read) is given apart
    reported = section["figures"]["report_requests"]
    assert 0 < reported < 12 and all(sizes[n]["nlt"]["report_part"]["n"] == reported for n in sizes)
    assert "nlt_accuracy_drop_10_to_200_report_part" in section["figures"]


def test_the_catalogue_section_decides_the_same_answers_without_the_large_list_terms(monkeypatch) -> None:
    from prefcall.strategies import nlt
    from prefcall.strategies.nlt_models import DecisionRule

    # a rule whose terms refuse every tool of a large list: without them, the same answers select some
    strict = DecisionRule(model_weight=1.0, threshold=-5.0, size_slope=100.0, margin=None, source="t")
    monkeypatch.setattr(nlt, "rule_for", lambda engine, calibrated=True, embedder=None: strict)
    asked = []
    select = nlt.select_tools
    monkeypatch.setattr(nlt, "select_tools", lambda *a, **k: asked.append(1) or select(*a, **k))
    report = run_bench(fake_context(engine_factory=lambda s: FakeEngine()), ["catalogue"])
    figures = report["sections"]["catalogue"]["figures"]
    assert len(asked) == 12 * 3  # no model call of its own
    bare, shipped = figures["sizes"][200]["nlt_without_large_list_terms"], figures["sizes"][200]["nlt"]
    assert bare["n"] == shipped["n"] == 12 and bare["accuracy"] != shipped["accuracy"]
    assert figures["sizes"][10]["nlt_without_large_list_terms"]["accuracy"] == figures["sizes"][10]["nlt"]["accuracy"]
    assert "nlt_without_large_list_terms_accuracy_drop_10_to_200_report_part" in figures


def test_a_rule_of_its_own_for_large_lists_is_benched_beside_the_model_asked_at_every_size(monkeypatch) -> None:
    from prefcall.strategies import nlt
    from prefcall.strategies.nlt_models import DecisionRule

    own = DecisionRule(model_weight=0.0, lexical_weight=0.25, embedding_weight=4.0, threshold=1.0, source="large")
    shipped = DecisionRule(model_weight=1.0, threshold=0.0, large=own, source="t")
    monkeypatch.setattr(nlt, "rule_for", lambda engine, calibrated=True, embedder=None: shipped)
    rules = []
    select = nlt.select_tools
    monkeypatch.setattr(nlt, "select_tools", lambda *a, **k: rules.append(k["rule"]) or select(*a, **k))
    report = run_bench(fake_context(engine_factory=lambda s: FakeEngine()), ["catalogue"])
    sizes = report["sections"]["catalogue"]["figures"]["sizes"]
    # ten tools: the shipped rule asks the model, and the forced rule is that run; past ten both run
    assert len(rules) == 12 + 12 * 2 * 2 and all(r.large is None for r in rules if r is not shipped)
    assert sizes[200]["nlt"]["evaluated"]["p50"] == 0 and sizes[200]["nlt_model_forced"]["evaluated"]["p50"] > 0
    assert sizes[10]["nlt_model_forced"] == sizes[10]["nlt"]
    # without the large-list rule: the forced run's answers decided by the ten-tool weights (the forced rule here)
    assert sizes[200]["nlt_without_large_list_terms"]["accuracy"] == sizes[200]["nlt_model_forced"]["accuracy"]


def test_the_catalogue_section_runs_one_part_of_the_split_when_asked() -> None:
    from prefcall.evaluation import fit_shortlist

    report = run_bench(fake_context(engine_factory=lambda s: FakeEngine(), quick=False, split="report"),
                       ["catalogue"])
    section = report["sections"]["catalogue"]
    assert section["status"] == "ok", section.get("reason")
    every = fit_shortlist.load()[2]
    on_report = [r for r in every if fit_shortlist.split_side(r["id"], "report")]
    figures = section["figures"]
    assert figures["split"] == "report" and figures["requests"] == figures["report_requests"] == len(on_report)
    assert 0 < len(on_report) < len(every) and figures["sizes"][10]["nlt"]["n"] == len(on_report)


def test_the_dialogue_section_runs_a_conversation_with_the_state_and_with_the_dialogue_resent() -> None:
    report = run_bench(fake_context(), ["dialogue"])
    section = report["sections"]["dialogue"]
    assert section["status"] == "ok", section.get("reason")
    figures = section["figures"]
    resend, state = figures["resend"]["runs"], figures["state"]["runs"]
    assert len(resend) == len(state) >= 2 and [r["turn"] for r in state] == list(range(len(state)))
    # Later turns send the new turn and the state, not the conversation so far: smaller prompts.
    later = [(r["prompt_tokens"], s["prompt_tokens"]) for r, s in zip(resend, state) if r["turn"] > 0]
    assert later and all(s < r for r, s in later), later
    assert 0.0 <= figures["same_calls"] <= figures["same_functions"] <= 1.0
    assert [t["name"] for t in section["targets"]] == ["later turns: state / re-sent dialogue latency, p50"]
