import inspect
import json
import math
import threading

import numpy as np
import pytest

from prefcall.engine.base import (
    CandidateScores,
    ChatMessage,
    Embedder,
    Engine,
    Generation,
    Prompt,
    PromptUsage,
    Scope,
    ScopedEngine,
    TokenLogprob,
    schema_key_order,
)
from prefcall.engine.fake import BatchingFakeEngine, CannedReplyError, FakeEmbedder, FakeEngine, check_canned_json
from prefcall.errors import CancelledError


def ask(text: str, system: str = "S") -> Prompt:
    return Prompt.chat(system, text)


def test_fake_engine_satisfies_the_engine_contract():
    assert isinstance(FakeEngine(), Engine)
    assert isinstance(ScopedEngine(FakeEngine(), Scope("u")), Engine)
    assert isinstance(FakeEmbedder(), Embedder)
    # isinstance on a Protocol checks only that the names exist: the contract is also each method's parameters
    # (names and kinds; the fake's defaults too), which strategies pass by keyword.
    for cls in (FakeEngine, ScopedEngine):
        for name in ("count_tokens", "prompt_tokens", "generate", "score_candidates"):
            wanted = list(inspect.signature(getattr(Engine, name)).parameters.values())
            got = {p.name: p for p in inspect.signature(getattr(cls, name)).parameters.values()}
            for parameter in wanted:
                assert parameter.name in got, (cls.__name__, name, parameter.name)
                assert got[parameter.name].kind == parameter.kind, (cls.__name__, name, parameter.name)
                if cls is FakeEngine:  # the fake defaults as a real engine does (ScopedEngine fills in its own scope)
                    assert got[parameter.name].default == parameter.default, (name, parameter.name)
    engine = FakeEngine()
    assert isinstance(engine.info.model_name, str) and engine.count_tokens("a b") > 0


def test_rules_match_prompt_substrings_before_the_queue():
    engine = FakeEngine().reply("queued").reply("ruled", when="weather")
    assert engine.generate(ask("what is the weather")).text == "ruled"
    assert engine.generate(ask("hello")).text == "queued"
    assert engine.generate(ask("hello")).text == ""  # queue empty -> default
    assert [p.split("<|user|>\n")[1].splitlines()[0] for p in engine.prompts] == ["what is the weather", "hello", "hello"]


def test_fake_json_mode_rejects_invalid_canned_json():
    engine = FakeEngine().reply("not json")
    with pytest.raises(CannedReplyError, match="not JSON"):
        engine.generate(ask("p"), json_schema={"type": "object"})


def test_fake_json_mode_rejects_json_the_schema_forbids():
    schema = {"type": "object", "properties": {"city": {"enum": ["Paris"]}}, "additionalProperties": False}
    with pytest.raises(CannedReplyError, match="validate"):
        FakeEngine().reply('{"city": "Rome"}').generate(ask("p"), json_schema=schema)
    with pytest.raises(CannedReplyError, match="validate"):
        FakeEngine().reply('{"town": "Paris"}').generate(ask("p"), json_schema=schema)


def test_fake_json_mode_rejects_keys_out_of_grammar_order():
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
              "required": ["name", "arguments"]}
    ok = FakeEngine().reply('{"name": "f", "arguments": {}}').generate(ask("p"), json_schema=schema)
    assert json.loads(ok.text)["name"] == "f"
    with pytest.raises(CannedReplyError, match="order"):
        FakeEngine().reply('{"arguments": {}, "name": "f"}').generate(ask("p"), json_schema=schema)


def test_key_order_puts_required_properties_first_like_llama_cpp():
    schema = {"properties": {"a": {}, "b": {}, "c": {}}, "required": ["c"]}
    assert schema_key_order(schema) == ["c", "a", "b"]
    check_canned_json('{"c": 1, "b": 2}', schema)
    with pytest.raises(CannedReplyError):
        check_canned_json('{"a": 1, "c": 2}', schema)


def test_key_order_is_checked_inside_anyof_refs_and_arrays():
    schema = {"$defs": {"call": {"type": "object", "properties": {"name": {"const": "f"}, "args": {"type": "object"}},
                                 "required": ["name", "args"]}},
              "type": "array", "items": {"anyOf": [{"$ref": "#/$defs/call"}]}}
    check_canned_json('[{"name": "f", "args": {}}]', schema)
    with pytest.raises(CannedReplyError, match=r"\$\[0\]"):
        check_canned_json('[{"args": {}, "name": "f"}]', schema)


def test_fake_logprobs_and_stop():
    engine = FakeEngine().reply("Continue now. Extra", logprob=-0.5)
    result = engine.generate(ask("p"), stop=[" Extra"])
    assert result.text == "Continue now."
    assert all(t.logprob == -0.5 for t in result.tokens)
    assert math.isclose(result.least_confidence, 1 - math.exp(-0.5))


def test_fake_usage_reuses_a_prefix_within_a_scope_and_only_shared_messages_across_scopes():
    engine = FakeEngine()
    system = "catalogue " * 20
    first = engine.generate(Prompt.chat(system, "alice secret request one"), scope=Scope("alice"))
    second = engine.generate(Prompt.chat(system, "alice secret request two"), scope=Scope("alice"))
    bob = engine.generate(Prompt.chat(system, "alice secret request three"), scope=Scope("bob"))
    assert first.usage.reused == 0
    assert second.usage.reused > bob.usage.reused > 0
    assert bob.usage.reused <= engine.prompt_tokens(Prompt((ChatMessage("system", system),)))


def test_cancelled_calls_raise_a_typed_error():
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(CancelledError, match="cancelled"):
        FakeEngine().generate(ask("p"), cancel=cancel)
    with pytest.raises(CancelledError):
        ScopedEngine(FakeEngine(), Scope("u"), cancel).score_candidates(ask("p"), [" a"])


def test_scoped_engine_passes_its_scope():
    fake = FakeEngine()
    ScopedEngine(fake, Scope("carol", "public")).generate(ask("p"))
    assert fake.calls[-1]["scope"] == Scope("carol", "public")


def test_candidate_scores_probabilities_and_best():
    engine = FakeEngine(scorer={"YES": -0.1, "NO": -2.5})
    scores = engine.score_candidates(ask("Tool -"), [" YES", " NO"])
    assert scores.best() == " YES"
    probs = scores.probabilities()
    assert math.isclose(sum(probs), 1.0) and probs[0] > 0.9


def test_generation_measures_ignore_forced_tokens():
    gen = Generation("ab", [TokenLogprob("a", -0.2), TokenLogprob("b", -0.4)], PromptUsage(3, 3, 0), "stop")
    assert math.isclose(gen.mean_logprob, -0.3)
    assert math.isclose(gen.least_confidence, 1 - math.exp(-0.3))
    forced = Generation("a{", [TokenLogprob("a", -0.2), TokenLogprob("{", 0.0, forced=True)], PromptUsage(), "stop")
    assert math.isclose(forced.least_confidence, 1 - math.exp(-0.2))
    assert Generation("", [], PromptUsage(), "stop").least_confidence == 1.0


def test_prompt_validation():
    with pytest.raises(ValueError, match="role"):
        Prompt((ChatMessage("tool", "x"),))
    with pytest.raises(ValueError, match="shared"):
        Prompt((ChatMessage("user", "x"),), shared=2)
    p = Prompt.chat("sys", "user", prefix="A:")
    assert p.shared == 1 and p.continued(" b").prefix == "A: b"


def test_fake_embedder_is_normalised_and_word_sensitive():
    vectors = FakeEmbedder().embed(["book a flight", "book a flight please", "weather in Paris"])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]


def test_candidate_scores_dataclass():
    scores = CandidateScores(["a", "b"], [-3.0, -1.0], [1, 1])
    assert scores.best() == "b"


GRAMMAR_CASES = [
    ({"type": "object", "properties": {"city": {"type": "string"}}}, True),
    ({"type": "object", "properties": {"a\nb": {"type": "string"}, "c\\d": {"type": "integer"}}}, True),
    ({"type": "object", "properties": {"e": {"enum": ["x", 1, None, "caf\u00e9"]}}}, True),
    ({"type": "object", "properties": {'say "hi"': {"type": "string"}}}, False),
    ({"type": "object", "properties": {"e": {"enum": ['a "b"']}}}, False),
    ({"type": "object", "properties": {"e": {"const": {"k": 'quote " inside'}}}}, False),
]


@pytest.mark.parametrize(("schema", "compiles"), GRAMMAR_CASES)
def test_the_fakes_grammar_check_agrees_with_llama_cpp(schema, compiles) -> None:
    """The fake engine's pure-Python `check_grammar` refuses what llama.cpp's converter and parser refuse
    (checked here against llama.cpp itself, which needs no model for this)."""
    from prefcall.engine.grammar import check_grammar
    from prefcall.errors import GrammarError
    from prefcall.schemas.render import grammar_schema

    cleaned = {"type": "array", "items": grammar_schema(schema), "minItems": 1, "maxItems": 2}
    for check in (check_grammar, FakeEngine().check_grammar):
        if compiles:
            check(cleaned)
        else:
            with pytest.raises(GrammarError):
                check(cleaned)


def test_heal_boundary_moves_the_prefixs_trailing_spaces_onto_the_candidates():
    from prefcall.engine.base import Prompt, heal_boundary

    prompt = Prompt.chat("s", "u", prefix='{"city": ')
    healed, texts = heal_boundary(prompt, ['"Paris"', "null"])
    assert healed.prefix == '{"city":' and texts == [' "Paris"', " null"]
    assert healed.messages == prompt.messages
    same, untouched = heal_boundary(Prompt.chat("s", "u", prefix="Function:"), [" GetBuses"])
    assert same.prefix == "Function:" and untouched == [" GetBuses"]


def test_batch_scoring_passes_scope_and_cancellation_and_falls_back_one_by_one():
    from prefcall.engine.base import score_batch
    from prefcall.engine.cancel import bind_cancel, cancel_bound

    requests = [(ask("p one"), [" a", " b"]), (ask("p two"), [" c"])]
    batcher = BatchingFakeEngine()
    scored = ScopedEngine(batcher, Scope("carol", "public")).score_batch(requests, heal_end=True)
    assert [s.candidates for s in scored] == [[" a", " b"], [" c"]]
    assert batcher.batches[-1]["scope"] == Scope("carol", "public") and batcher.batches[-1]["heal_end"]
    gone = threading.Event()
    gone.set()
    with bind_cancel(gone), pytest.raises(CancelledError):  # the server's ambient cancellation reaches the batch
        score_batch(cancel_bound(batcher), requests)
    plain = FakeEngine()  # an engine without batch scoring: one score_candidates call per prompt, same scores
    one_by_one = score_batch(ScopedEngine(plain, Scope("dan")), requests, heal_end=True)
    assert [s.logprobs for s in one_by_one] == [s.logprobs for s in scored]
    assert [c["scope"] for c in plain.calls] == [Scope("dan")] * 2 and all(c["heal_end"] for c in plain.calls)
