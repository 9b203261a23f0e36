import json
import math

import numpy as np
import pytest

from prefcall.engine.base import CandidateScores, ChatMessage, Embedder, Engine, Generation, PromptUsage, TokenLogprob
from prefcall.engine.fake import FakeEmbedder, FakeEngine


def test_fake_engine_satisfies_the_engine_contract():
    assert isinstance(FakeEngine(), Engine)
    assert isinstance(FakeEmbedder(), Embedder)


def test_rules_match_prompt_substrings_before_the_queue():
    engine = FakeEngine().reply("queued").reply("ruled", when="weather")
    assert engine.generate("what is the weather").text == "ruled"
    assert engine.generate("hello").text == "queued"
    assert engine.generate("hello").text == ""  # queue empty -> default
    assert engine.prompts == ["what is the weather", "hello", "hello"]


def test_fake_json_mode_rejects_invalid_canned_json():
    engine = FakeEngine().reply("not json")
    with pytest.raises(json.JSONDecodeError):
        engine.generate("p", json_schema={"type": "object"})


def test_fake_logprobs_and_stop():
    engine = FakeEngine().reply("Continue now. Extra", logprob=-0.5)
    result = engine.generate("p", stop=[" Extra"])
    assert result.text == "Continue now."
    assert all(t.logprob == -0.5 for t in result.tokens)
    assert math.isclose(result.least_confidence, 1 - math.exp(-0.5))


def test_fake_usage_reports_reused_prefix():
    engine = FakeEngine()
    first = engine.generate("system catalogue request one")
    second = engine.generate("system catalogue request two")
    assert first.usage.reused == 0
    assert second.usage.reused == 3 and second.usage.evaluated == 1


def test_candidate_scores_probabilities_and_best():
    engine = FakeEngine(scorer={"YES": -0.1, "NO": -2.5})
    scores = engine.score_candidates("Tool -", [" YES", " NO"])
    assert scores.best() == " YES"
    probs = scores.probabilities()
    assert math.isclose(sum(probs), 1.0) and probs[0] > 0.9


def test_generation_measures():
    gen = Generation("ab", [TokenLogprob("a", -0.2), TokenLogprob("b", -0.4)], PromptUsage(3, 3, 0), "stop")
    assert math.isclose(gen.mean_logprob, -0.3)
    assert math.isclose(gen.least_confidence, 1 - math.exp(-0.3))
    assert Generation("", [], PromptUsage(), "stop").least_confidence == 1.0


def test_fake_embedder_is_normalised_and_word_sensitive():
    vectors = FakeEmbedder().embed(["book a flight", "book a flight please", "weather in Paris"])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]


def test_fake_chat_format_marks_roles():
    text = FakeEngine().format_chat([ChatMessage("system", "S"), ChatMessage("user", "U")])
    assert text.index("<|system|>") < text.index("<|user|>") < text.index("<|assistant|>")


def test_candidate_scores_dataclass():
    scores = CandidateScores(["a", "b"], [-3.0, -1.0], [1, 1])
    assert scores.best() == "b"
