"""QwN clarify: the paper's prompt, each decision branch, evidence overriding the model, no repeated questions."""

from __future__ import annotations

import json
import math

import pytest

from prefcall.engine.fake import FakeEmbedder, FakeEngine
from prefcall.schemas.model import Call, Catalogue, Function, MissingArgument, Turn
from prefcall.schemas.render import grammar_schema
from prefcall.strategies.nlt import CONTENT_FREE_MESSAGES
from prefcall.strategies.qwn import (
    LIMITATION_TEXT,
    clarify,
    enum_violations,
    humanise,
    is_grounded,
    parse_decision,
    question_for,
)

FLIGHTS = Function(
    name="book_flight",
    description="Books a flight between two cities.",
    parameters={
        "type": "object",
        "properties": {
            "origin": {"type": "string", "description": "City the flight leaves from."},
            "destination": {"type": "string", "description": "City the flight goes to."},
            "departure_date": {"type": "string"},
            "cabin": {"type": "string", "enum": ["economy", "business"]},
        },
        "required": ["origin", "destination", "departure_date"],
    },
)
CATALOGUE = Catalogue(name="travel", functions=[FLIGHTS])


def _relevant(p_yes: float):
    def scorer(prompt: str, candidate: str) -> float:
        return math.log(p_yes if candidate == " YES" else 1 - p_yes) if "N/A" not in prompt else math.log(0.5)

    return scorer


# -- parsing and wording ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Question: What date do you want to fly?", ("question", "What date do you want to fly?")),
        ("question:When?\nmore", ("question", "When?")),
        ("Continue", ("continue", None)),
        ("continue.", ("continue", None)),
        (LIMITATION_TEXT, ("limitation", None)),
        ("Sorry, I cannot solve this problem.", ("limitation", None)),
        ("Which city?", ("question", "Which city?")),
        ("banana", (None, None)),
        ("", (None, None)),
    ],
)
def test_parse_decision(text: str, expected: tuple) -> None:
    assert parse_decision(text) == expected


def test_humanise_and_question_wording() -> None:
    assert humanise("departure_date") == "departure date"
    assert humanise("propertyID") == "property ID"
    assert question_for([MissingArgument(function="f", argument="departure_date")]) == (
        "What departure date would you like?"
    )
    assert question_for([MissingArgument(function="f", argument="origin", description="City the flight leaves from.")]) == (
        "What origin would you like? (City the flight leaves from.)"
    )
    two = question_for([MissingArgument(function="f", argument="origin"), MissingArgument(function="f", argument="startDate")])
    assert "the origin and the start date" in two


def test_grounding_of_values() -> None:
    text = "Book a flight from Boston to New York on 2024-05-01 for 2 people, darker theme please"
    assert is_grounded("Boston", {}, text)
    assert is_grounded("new york", {}, text)
    assert is_grounded("2024-05-01", {}, text)
    assert is_grounded(2, {}, text) and is_grounded(2.0, {}, text)
    assert not is_grounded(3, {}, text)
    assert is_grounded("Dark", {}, text)  # inflection
    assert not is_grounded("Chicago", {}, text)
    assert is_grounded(True, {}, text)
    assert not is_grounded("", {}, text) and not is_grounded(None, {}, text) and not is_grounded([], {}, text)
    schema = {"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a", "b"]}
    assert is_grounded({"a": "Boston", "b": "New York"}, schema, text)
    assert not is_grounded({"a": "Boston", "b": "Paris"}, schema, text)
    assert enum_violations({"x": ["a", "z"]}, {"properties": {"x": {"items": {"enum": ["a"]}}}}, "v") == ["v.x"]


def test_grammar_schema_maps_bfcl_types_and_drops_required_on_request() -> None:
    schema = {"type": "dict", "properties": {"x": {"type": "float", "default": 1}, "y": {"type": "tuple", "items": {"type": "any"}}}, "required": ["x"]}
    out = grammar_schema(schema, enforce_required=False)
    assert out == {
        "type": "object",
        "properties": {"x": {"type": "number"}, "y": {"type": "array", "maxItems": 8, "items": {}}},
        "additionalProperties": False,
    }
    assert grammar_schema(schema)["required"] == ["x"]


# -- the prompt ---------------------------------------------------------------------------------
def test_prompt_has_the_three_answers_tools_profile_and_asked_questions() -> None:
    engine = FakeEngine().reply("Continue")
    clarify(engine, "Fly me to Paris", CATALOGUE, instructions=["I always fly from Boston"],
            asked=["What date?"], policy="model")
    prompt = engine.prompts[0]
    assert "'Question: '" in prompt and "'Continue'" in prompt and LIMITATION_TEXT in prompt
    assert "book_flight" in prompt and "departure_date (required)" in prompt
    assert "I always fly from Boston" in prompt
    assert "do not ask them again" in prompt and "- What date?" in prompt
    assert prompt.rstrip().endswith("User: Fly me to Paris\n<|assistant|>".rstrip())


# -- branches -----------------------------------------------------------------------------------
def test_model_policy_is_the_paper_alone() -> None:
    for reply, decision in [("Question: Which date?", "question"), ("Continue", "continue"), (LIMITATION_TEXT, "limitation")]:
        result = clarify(FakeEngine().reply(reply), "Fly me to Paris", CATALOGUE, policy="model")
        assert result.decision == decision and result.status == "ok"
        assert result.model_said == reply
    bad = clarify(FakeEngine().reply("banana"), "Fly me to Paris", CATALOGUE, policy="model")
    assert bad.status == "parse_error"


def test_missing_required_arguments_override_a_model_continue() -> None:
    engine = FakeEngine(scorer=_relevant(0.9))
    engine.reply("Continue", when="Before calling a tool")
    engine.reply(json.dumps({"origin": "Boston", "destination": "Paris"}), when="fill in the arguments")
    result = clarify(engine, "Fly me from Boston to Paris", CATALOGUE)
    assert result.decision == "question"
    assert result.model_decision == "continue"
    assert [m.argument for m in result.missing_arguments] == ["departure_date"]
    assert result.question == "What departure date would you like?"
    assert result.relevant == ["book_flight"]
    assert any("rule 2" in e for e in result.evidence)


def test_hallucinated_values_count_as_missing() -> None:
    engine = FakeEngine(scorer=_relevant(0.9))
    engine.reply("Continue", when="Before calling a tool")
    engine.reply(json.dumps({"origin": "Boston", "destination": "Paris", "departure_date": "2024-01-01"}),
                 when="fill in the arguments")
    result = clarify(engine, "Fly me from Boston to Paris", CATALOGUE)
    assert result.decision == "question"
    assert result.missing_arguments[0].reason == "not_stated"


def test_complete_draft_means_continue_even_if_the_model_asks() -> None:
    engine = FakeEngine(scorer=_relevant(0.9))
    engine.reply("Question: Are you sure?", when="Before calling a tool")
    engine.reply(json.dumps({"origin": "Boston", "destination": "Paris", "departure_date": "May 3"}),
                 when="fill in the arguments")
    result = clarify(engine, "Fly me from Boston to Paris on May 3", CATALOGUE)
    assert result.decision == "continue" and result.question is None
    assert result.draft == Call(name="book_flight", arguments={"origin": "Boston", "destination": "Paris", "departure_date": "May 3"})


def test_profile_instructions_supply_arguments() -> None:
    engine = FakeEngine(scorer=_relevant(0.9))
    engine.reply("Continue", when="Before calling a tool")
    engine.reply(json.dumps({"origin": "Boston", "destination": "Paris", "departure_date": "May 3"}),
                 when="fill in the arguments")
    result = clarify(engine, "Fly me to Paris on May 3", CATALOGUE, instructions=["I always fly from Boston"])
    assert result.decision == "continue"


def test_no_relevant_function_means_limitation_even_if_the_model_continues() -> None:
    engine = FakeEngine(scorer=_relevant(0.1)).reply("Continue")
    result = clarify(engine, "What is the capital of Peru?", CATALOGUE)
    assert result.decision == "limitation"
    assert result.relevant == []
    assert not any(c["kind"] == "generate" and "fill in the arguments" in c["prompt"] for c in engine.calls)


def _cosine_rule(monkeypatch, threshold: float) -> None:
    """A fitted relevance rule for the fake embedder: its best cosine against `threshold`."""
    from prefcall.strategies import relevance

    monkeypatch.setattr(relevance, "ask_rule", lambda embedder: relevance.RelevanceRule(
        embedder=embedder.name, threshold=threshold) if embedder is not None else None)


def test_embedder_relevance_by_its_fitted_rule_instead_of_nlt_scoring(monkeypatch) -> None:
    _cosine_rule(monkeypatch, 0.3)
    engine = FakeEngine().reply("Continue", when="Before calling a tool")
    engine.reply(json.dumps({}), when="fill in the arguments")
    result = clarify(engine, "Bake a chocolate cake", CATALOGUE, embedder=FakeEmbedder())
    assert result.decision == "limitation" and result.relevant == []
    assert not any(c["kind"] == "score" for c in engine.calls)
    assert not any(c["kind"] == "generate" and "fill in the arguments" in c["prompt"] for c in engine.calls)
    assert any(note.startswith("relevance (closest book_flight: similarity") and "< 0.30, fake-hash-128" in note
               for note in result.evidence)
    # the rule judges the request against the whole catalogue: once it clears, every function is a candidate
    cleared = clarify(engine, "Book a flight to Paris", CATALOGUE, embedder=FakeEmbedder())
    assert cleared.relevant == ["book_flight"] and cleared.decision == "question"


def test_an_embedder_without_a_fitted_rule_refuses_nothing() -> None:
    # as in parse_request: a swapped-in embedder nobody fitted a rule for never turns an answer into a refusal
    engine = FakeEngine().reply("Continue", when="Before calling a tool")
    engine.reply(json.dumps({}), when="fill in the arguments")
    result = clarify(engine, "Bake a chocolate cake", CATALOGUE, embedder=FakeEmbedder())
    assert result.decision == "question" and result.relevant == ["book_flight"]
    assert any("fake-hash-128 has no fitted relevance rule" in note for note in result.evidence)
    # a caller's threshold is a cosine cut per function, with or without a rule
    cut = clarify(engine, "Bake a chocolate cake", CATALOGUE, embedder=FakeEmbedder(), relevance_threshold=0.3)
    assert cut.decision == "limitation" and any("cosine cut 0.30" in note for note in cut.evidence)


def test_caller_draft_calls_and_enum_errors() -> None:
    engine = FakeEngine().reply("Continue")
    draft = Call(name="book_flight", arguments={"origin": "Boston", "destination": "Paris", "departure_date": "May 3", "cabin": "first"})
    result = clarify(engine, "Boston to Paris May 3 in first class", CATALOGUE, draft_calls=[draft])
    assert result.decision == "question"
    assert result.missing_arguments[0].argument == "cabin" and result.missing_arguments[0].reason == "invalid"
    assert len(engine.calls) == 1  # only the decision prompt: the caller's draft replaces ours


def test_no_repeated_question_once_asked() -> None:
    engine = FakeEngine().reply("Question: What departure date would you like?")
    draft = Call(name="book_flight", arguments={"origin": "Boston", "destination": "Paris"})
    dialogue = [
        Turn(role="user", content="Fly me from Boston to Paris"),
        Turn(role="assistant", content="What departure date would you like?"),
        Turn(role="user", content="Sorry, I cannot help with that."),
    ]
    result = clarify(engine, dialogue, CATALOGUE, draft_calls=[draft])
    assert result.decision == "continue"
    assert any("rule 3" in e for e in result.evidence)
    # The paper-only policy also refuses to repeat the model's own earlier question.
    model_only = clarify(FakeEngine().reply("Question: What departure date would you like?"), dialogue, CATALOGUE,
                         policy="model")
    assert model_only.decision == "continue"


def test_failed_draft_falls_back_to_the_model() -> None:
    engine = FakeEngine(scorer=_relevant(0.9), enforce_schema=False)  # a backend that ignores the schema
    engine.reply("Question: When do you want to fly?", when="Before calling a tool")
    engine.reply("[1]", when="fill in the arguments")  # valid JSON, but not an arguments object
    result = clarify(engine, "Fly me to Paris", CATALOGUE)
    assert result.decision == "question" and result.question == "When do you want to fly?"
    assert any("draft call failed" in e for e in result.evidence)


def test_evidence_policy_without_evidence_is_a_parse_error() -> None:
    engine = FakeEngine(scorer=_relevant(0.9), enforce_schema=False).reply("[1]", when="fill in the arguments")
    result = clarify(engine, "Fly me to Paris", CATALOGUE, policy="evidence")
    assert result.status == "parse_error" and result.model_said is None


def test_usage_sums_every_model_call() -> None:
    engine = FakeEngine(scorer=_relevant(0.9))
    engine.reply("Continue", when="Before calling a tool")
    engine.reply(json.dumps({"origin": "Boston"}), when="fill in the arguments")
    result = clarify(engine, "Fly me from Boston", CATALOGUE)
    # decision, score, one per content-free request ("", "N/A", "hello"), draft
    assert result.usage.calls == len(engine.calls) == 1 + 1 + len(CONTENT_FREE_MESSAGES) + 1
    assert result.usage.completion_tokens > 0


def test_grammar_schema_caps_free_strings_but_not_enums() -> None:
    out = grammar_schema({"type": "object", "properties": {"s": {"type": "string"}, "e": {"type": "string", "enum": ["a"]}}})
    assert out["properties"]["s"]["maxLength"] == 80
    assert "maxLength" not in out["properties"]["e"]


@pytest.mark.embedder
def test_after_the_draft_an_ask_for_a_function_the_request_is_not_about_is_a_limitation(real_embedder,
                                                                                        monkeypatch) -> None:
    # "the freezing point of water" clears the low pre-draft cut for a boiling-point function (cosine 0.40), and
    # the draft fills nothing: asking for a substance and a pressure would be the wrong question. The mechanism
    # is tested at a threshold of 0.44 (the shipped one is fitted, data/relevance.json, and lies below 0.40 today).
    from prefcall.strategies import relevance

    fitted = relevance.ask_rule(real_embedder)
    monkeypatch.setattr(relevance, "ask_rule", lambda embedder: fitted.model_copy(update={"threshold": 0.44, "weights": None}))
    boiling = Function(name="calculate_boiling_point", description="Calculates the boiling point of a substance at "
                       "a given pressure.", parameters={"type": "object", "properties": {
                           "substance": {"type": "string"}, "pressure": {"type": "number"}},
                           "required": ["substance", "pressure"]})
    physics = Catalogue(name="physics", functions=[boiling])

    def ask(text: str, catalogue: Catalogue, draft: dict, **kwargs):
        engine = FakeEngine().reply("Question: What distance?", when="Before calling a tool")
        engine.reply(json.dumps(draft), when="fill in the arguments")
        return clarify(engine, text, catalogue, embedder=real_embedder, **kwargs)

    # before the draft, the same rule judges the request against every function: refused there already
    before = ask("What is the freezing point of water?", physics, {})
    assert before.decision == "limitation" and before.relevant == [] and before.draft is None
    # a caller's low cosine cut before the draft lets it through; the rule after the draft still turns it down
    off_topic = ask("What is the freezing point of water?", physics, {}, relevance_threshold=0.3)
    assert off_topic.relevant == ["calculate_boiling_point"]  # the pre-draft cut alone lets it through
    assert off_topic.decision == "limitation" and off_topic.question is None
    assert any("relevance after the draft" in note and "all-MiniLM-L6-v2" in note for note in off_topic.evidence)
    about = ask("What is the boiling point at this pressure?", physics, {})  # fits but gives no values
    assert about.decision == "question" and {m.argument for m in about.missing_arguments} == {"substance", "pressure"}
    assert ask("What is the freezing point of water?", physics, {}, check_relevance=False).decision == "question"
    # A required value from the user's words keeps the question (the rule only judges asks that fill nothing).
    water = ask("What is the freezing point of water?", physics, {"substance": "water"}, relevance_threshold=0.3)
    assert water.decision == "question" and [m.argument for m in water.missing_arguments] == ["pressure"]
    # Worded far from "Books a flight between two cities" (under the fitted threshold) but names the destination.
    paris = ask("I want to fly to Paris", CATALOGUE, {"destination": "Paris"}, relevance_threshold=0.3)
    assert paris.decision == "question" and "origin" in {m.argument for m in paris.missing_arguments}


@pytest.mark.embedder
def test_clarify_refuses_by_the_rule_parse_request_refuses_by(real_embedder) -> None:
    # the shipped fitted rule (data/relevance.json), not a cosine cut of its own: a request worded far from the
    # function's text that still names a value is kept; one about something else is a limitation before any draft
    def ask(text: str):
        engine = FakeEngine().reply("Continue", when="Before calling a tool")
        engine.reply(json.dumps({"destination": "Paris"}), when="fill in the arguments")
        return clarify(engine, text, CATALOGUE, embedder=real_embedder), engine

    kept, _ = ask("I want to fly to Paris")
    assert kept.decision == "question" and kept.relevant == ["book_flight"]
    assert any("relevance score" in note and ">= " in note for note in kept.evidence)
    refused, engine = ask("Bake a chocolate cake")
    assert refused.decision == "limitation" and refused.draft is None
    assert not any(c["kind"] == "generate" and "fill in the arguments" in c["prompt"] for c in engine.calls)


def test_a_draft_cut_by_its_budget_is_drafted_once_more_with_a_larger_one() -> None:
    # a large schema's nested lists run past the first budget: the cut JSON would leave clarify no draft to read
    # (a parse failure); the second try has three times the budget, and a short draft never pays for it
    from prefcall.strategies.qwn_draft import draft_arguments

    long_draft = {"origin": "Boston", "destination": "Paris", "departure_date": "May 3", "cabin": "economy"}
    text = json.dumps(long_draft, indent=2)  # the fake engine counts whitespace-attached pieces as tokens
    engine = FakeEngine().reply(text, when="fill in the arguments")
    result = draft_arguments(engine, "Fly me from Boston to Paris on May 3", FLIGHTS, max_tokens=5)  # 11 tokens
    drafts = [c for c in engine.calls if c["kind"] == "generate"]
    assert result.call is not None and result.call.arguments["destination"] == "Paris"
    assert len(drafts) == 2
    short = FakeEngine().reply(json.dumps({"destination": "Paris"}), when="fill in the arguments")
    assert draft_arguments(short, "Fly me to Paris", FLIGHTS, max_tokens=5, keep_required=False).call is not None
    assert len([c for c in short.calls if c["kind"] == "generate"]) == 1
    cut = FakeEngine().reply(text, when="fill in the arguments")
    assert draft_arguments(cut, "Fly me from Boston to Paris on May 3", FLIGHTS, max_tokens=3).status == "parse_error"
