"""The QwN auto-interaction loop with a simulated user, and its G1/G2/Re/Steps metrics."""

from __future__ import annotations

import json

import pytest

from prefcall.engine.fake import FakeEmbedder, FakeEngine
from prefcall.evaluation.qwn_interact import (
    CANNOT_HELP,
    Episode,
    SimulatedUser,
    calls_match,
    interact,
    interaction_metrics,
)
from prefcall.schemas.model import Call, Catalogue, Function

WEATHER = Function(
    name="get_weather",
    description="Weather forecast for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string", "description": "The city."}}, "required": ["city"]},
)
CATALOGUE = Catalogue(name="w", functions=[WEATHER])
EXPECTED = [Call(name="get_weather", arguments={"city": "Oslo"})]


def _engine(draft_before: str, draft_after: str, first: tuple[str, str] | None = None) -> FakeEngine:
    engine = FakeEngine()
    if first:  # (reply, when): checked before the others
        engine.reply(first[0], when=first[1])
    engine.reply("Continue", when="Before calling a tool")
    # The draft prompt changes once the user's answer is in the dialogue.
    engine.reply(draft_after, when="User: Oslo")
    engine.reply(draft_before, when="fill in the arguments")
    return engine


def test_simulated_user_answers_only_a_matching_question_once() -> None:
    user = SimulatedUser("Which city do you want the weather for?", "Oslo", FakeEmbedder(), threshold=0.5)
    assert user.respond("What is your favourite colour?") == (CANNOT_HELP, False)
    assert user.respond("Which city do you want the weather for?") == ("Oslo", True)
    assert user.respond("Which city do you want the weather for?") == (CANNOT_HELP, False)


def test_episode_asks_the_expected_question_then_calls_correctly() -> None:
    engine = _engine(json.dumps({}), json.dumps({"city": "Oslo"}))
    episode = interact(
        engine, "What's the weather like?", CATALOGUE, expected_question="What city would you like?",
        answer="Oslo", expected_calls=EXPECTED, embedder=FakeEmbedder(), threshold=0.5, check_relevance=False,
    )
    assert episode.g1 and episode.g2
    assert episode.redundant == 0 and episode.steps == 2
    assert episode.final_decision == "continue"
    assert [t.content for t in episode.transcript][1:] == ["What city would you like? (The city.)", "Oslo"]


def test_unexpected_question_is_redundant_and_not_repeated() -> None:
    # After the user could not help, a draft that must name the required city names a wrong one.
    engine = _engine(json.dumps({}), json.dumps({"city": "Oslo"}), first=(json.dumps({"city": "Bergen"}),
                                                                          f"User: {CANNOT_HELP}"))
    episode = interact(
        engine, "What's the weather like?", CATALOGUE, expected_question="Do you want Celsius or Fahrenheit units?",
        answer="Celsius", expected_calls=EXPECTED, embedder=FakeEmbedder(), threshold=0.9, check_relevance=False,
    )
    assert not episode.g1 and not episode.g2
    assert episode.redundant == 1
    assert episode.steps == 2  # the second round does not ask the same question again: it continues
    assert episode.transcript[-1].content == CANNOT_HELP


def test_limitation_ends_the_episode_without_calls() -> None:
    engine = FakeEngine().reply("Due to the limitation of toolset, I cannot solve the question")
    episode = interact(
        engine, "Sing a song", CATALOGUE, expected_question="x", answer="y", expected_calls=[],
        embedder=FakeEmbedder(), policy="model",
    )
    assert episode.final_decision == "limitation" and episode.steps == 1 and episode.calls == []
    assert not episode.g2  # G2 counts only calls made after continuing


def test_call_maker_replaces_the_draft() -> None:
    engine = FakeEngine().reply("Continue")
    episode = interact(
        engine, "Weather in Oslo", CATALOGUE, expected_question="x", answer="y", expected_calls=EXPECTED,
        embedder=FakeEmbedder(), policy="model", call_maker=lambda turns: [Call(name="get_weather", arguments={"city": "oslo "})],
    )
    assert episode.g2 and not episode.g1 and episode.redundant == 0


def test_calls_match_normalises_case_spaces_and_order() -> None:
    a = [Call(name="f", arguments={"x": "New York", "n": 2.0}), Call(name="g")]
    b = [Call(name="g"), Call(name="f", arguments={"n": 2, "x": " new  york"})]
    assert calls_match(a, b)
    assert not calls_match(a, b[:1])
    assert calls_match([], [])


def test_interaction_metrics_hand_computed() -> None:
    episodes = [
        Episode(g1=True, g2=True, redundant=0, steps=2),
        Episode(g1=False, g2=False, redundant=2, steps=3),
        Episode(g1=True, g2=False, redundant=1, steps=1),
    ]
    metrics = interaction_metrics(episodes)
    assert metrics["G1"] == pytest.approx(2 / 3)
    assert metrics["G2"] == pytest.approx(1 / 3)
    assert metrics["Re"] == pytest.approx(1.0)
    assert metrics["Steps"] == pytest.approx(2.0)
    assert interaction_metrics([]) == {"G1": 0.0, "G2": 0.0, "Re": 0.0, "Steps": 0.0, "episodes": 0}
