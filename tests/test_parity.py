"""evaluation/parity.py without a model: the score tap and its noise, the noise between two engines, what an
answer is made of, and per-tool times (the real comparison runs in tests/test_served_answers.py)."""

from __future__ import annotations

import pytest

from prefcall.engine.base import Prompt
from prefcall.engine.fake import FakeEngine
from prefcall.evaluation.parity import (
    CaseRun,
    ParityCase,
    ScoreTap,
    answer_of,
    parity_cases,
    score_noise,
    smallest_gap,
    tool_seconds,
)


def test_the_tap_records_every_scoring_and_moves_scores_by_at_most_its_noise_the_same_way_each_time():
    engine = FakeEngine(scorer={"Paris": -1.0, "London": -3.0})
    prompt = Prompt.chat("system", "Where to?", prefix="City:")
    plain = ScoreTap(engine)
    assert plain.score_candidates(prompt, ["Paris", "London"]).logprobs == [-1.0, -3.0]
    assert len(plain.calls) == 1 and plain.calls[0][1] == ("Paris", "London")
    shaken = ScoreTap(engine, noise=0.15, seed=1)
    first = shaken.score_candidates(prompt, ["Paris", "London"]).logprobs
    assert first == ScoreTap(engine, noise=0.15, seed=1).score_candidates(prompt, ["Paris", "London"]).logprobs
    assert first != ScoreTap(engine, noise=0.15, seed=2).score_candidates(prompt, ["Paris", "London"]).logprobs
    assert all(abs(a - b) <= 0.15 for a, b in zip(first, [-1.0, -3.0]))
    assert shaken.info == engine.info and shaken.n_ctx == engine.n_ctx  # everything else is the engine's


def test_noise_between_engines_and_the_smallest_gap():
    a = [("p", ("x", "y"), (-1.0, -2.0)), ("q", ("z",), (-5.0,))]
    b = [("p", ("x", "y"), (-1.1, -2.0)), ("q", ("z",), (-7.5,)), ("r", ("w",), (-1.0,))]
    noise = score_noise(a, b)
    assert noise.compared == 3 and noise.worst == pytest.approx(2.5) and noise.median == pytest.approx(0.1)
    assert noise.outliers == (("z", -5.0, -7.5),)  # more than 1 nat apart, listed
    assert smallest_gap(a) == pytest.approx(1.0) and smallest_gap([("q", ("z",), (-5.0,))]) is None


def test_an_answer_is_what_a_user_sees_and_times_are_per_tool():
    parsed = answer_of("parse_request", {"decision": "call", "trace": {"x": 1}, "calls": [
        {"name": "B", "arguments": {"b": 1, "a": 2}}, {"name": "A", "arguments": {}}],
        "missing": [{"function": "B", "argument": "c"}]})
    assert parsed == {"decision": "call", "calls": ['A({})', 'B({"a": 2, "b": 1})'], "missing": ["B.c"]}
    assert answer_of("select_tools_nlt", {"selected": ["b", "a"], "status": "ok", "decisions": [1]}) == \
        {"selected": ["a", "b"], "status": "ok"}
    with pytest.raises(ValueError):
        answer_of("list_catalogues", {})
    runs = {str(i): CaseRun(ParityCase(str(i), "parse_request", "travel"), seconds=float(i)) for i in range(1, 5)}
    assert tool_seconds(runs) == {"parse_request": {"n": 4, "p50": 3.0, "p95": 4.0}}


def test_the_cases_cover_every_tool_and_decision_kind():
    catalogues, cases = parity_cases()
    assert {"travel", "assistant"} <= set(catalogues) and len(cases) >= 20
    assert {c.tool for c in cases} == {"parse_request", "select_tools_nlt", "clarify", "tag_profile"}
    assert len({c.id for c in cases}) == len(cases)
