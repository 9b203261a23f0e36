"""`prefcall bench --only served`: its plumbing with fake engines, and the client-overhead figure for real
(a local 250 ms stub on 127.0.0.1: the figures are produced and well-formed; their size is the bench's business)."""

from __future__ import annotations

import math

from prefcall.bench.context import BenchContext
from prefcall.bench.runner import SECTIONS, parse_only, run_section
from prefcall.engine.fake import CannedReply, FakeEngine

CALL = '{"name": "GetFlights", "arguments": {"city": "Boston"}}'


def fake_factory(settings):
    return FakeEngine(default=CannedReply(CALL), scorer={"GetFlights": -0.2})


def test_served_section_is_listed_and_selectable():
    assert "served" in SECTIONS and parse_only("served") == ["served"]


def test_served_section_runs_with_fakes_and_shows_no_client_side_serialisation():
    ctx = BenchContext(quick=True, reps=1, engine_factory=fake_factory, log=lambda line: None)
    section = run_section(SECTIONS["served"], ctx)
    assert section["status"] == "ok", section.get("reason")
    figures = section["figures"]
    assert set(figures["latency_ms"]) == {"generate_with_schema", "score_candidates"}
    assert set(figures["throughput"]["served"]) == {"1", "4", "16"}
    assert all(level["errors"] == 0 for level in figures["throughput"]["served"].values())
    stub = figures["client_overhead"]["levels"]
    # The speed-up is the bench's figure (its size moves with the machine's load): the test checks it is measured.
    # That no client-side lock serialises requests is tested by events, not by speed: see
    # tests/test_served_backends.py::test_no_process_wide_lock_requests_run_concurrently (a barrier of 4).
    speedup = stub["16"]["speedup_over_1_client"]
    assert stub["16"]["errors"] == 0 and isinstance(speedup, float) and math.isfinite(speedup) and speedup > 0
    target = section["targets"][0]
    assert target["met"] in (True, False) and math.isfinite(target["value"]) and target["value"] > 0
