"""NLT tool selection: prompt parts, tolerant parser, scoring mode with prefix reuse, structured baseline."""

from __future__ import annotations

import dataclasses

import json
import math
import re
from collections.abc import Callable

import pytest

from prefcall.engine.base import Scope, ScopedEngine
from prefcall.engine.fake import FakeEmbedder, FakeEngine
from prefcall.errors import ValidationError
from prefcall.schemas.model import Catalogue, Function
from prefcall.storage import fits
from prefcall.strategies import nlt
from prefcall.strategies.nlt import (
    CONTENT_FREE_MESSAGES,
    ContentFreeCache,
    calibrate_probability,
    fit_rule,
    lexical_scores,
    logit,
    parse_nlt_output,
    select_tools,
)
from prefcall.strategies.nlt_models import DecisionRule, ToolSpec, as_tool_specs

TOOLS = [
    {"name": "get_weather", "description": "Returns the weather forecast for a city."},
    {"name": "send_email", "description": "Sends an email to a contact."},
    {"name": "book_flight", "description": "Books a flight between two airports."},
]
NAMES = [t["name"] for t in TOOLS]


# -- tools input --------------------------------------------------------------------------------
def test_accepts_catalogue_dicts_and_tools_without_parameters() -> None:
    catalogue = Catalogue(name="c", functions=[Function(name="ping", description="Checks the service.")])
    assert [s.name for s in as_tool_specs(catalogue)] == ["ping"]
    assert as_tool_specs([{"name": "ping"}])[0] == ToolSpec(name="ping")


def test_duplicate_tool_names_are_rejected() -> None:
    with pytest.raises(ValidationError, match="duplicate tool name 'a'"):
        as_tool_specs([{"name": "a"}, {"name": "a", "description": "x"}])


def test_empty_tool_list_is_rejected() -> None:
    with pytest.raises(ValidationError):
        select_tools(FakeEngine(), "hi", [])


# -- generate mode ------------------------------------------------------------------------------
def test_prompt_has_the_five_parts_and_lists_every_tool() -> None:
    engine = FakeEngine().reply("Thinking: weather.\nget_weather - YES\nsend_email - NO\nbook_flight - NO\n")
    select_tools(engine, "Is it raining in Paris?", TOOLS, mode="generate", context="User is in France")
    prompt = engine.prompts[0]
    for part in ("You are a tool selection assistant", "Your task:", "Tools:", "Output format:", "Example"):
        assert part in prompt
    positions = [prompt.index(p) for p in ("You are a tool", "Your task:", "Tools:", "Output format:", "Example")]
    assert positions == sorted(positions)
    for tool in TOOLS:
        assert f"- {tool['name']}: use it when" in prompt
    assert prompt.index("Context: User is in France") < prompt.index("Message: Is it raining in Paris?")
    assert engine.calls[0]["stop"] == ["Assessment finished."]


def test_generate_mode_parses_decisions_and_reasoning() -> None:
    engine = FakeEngine().reply(
        "Thinking: The user asks about rain.\nget_weather - YES\nsend_email - NO\nbook_flight - NO\nAssessment finished."
    )
    result = select_tools(engine, "Is it raining in Paris?", TOOLS, mode="generate")
    assert result.status == "ok"
    assert result.selected == ["get_weather"]
    assert result.reasoning == "The user asks about rain."
    assert [d.selected for d in result.decisions] == [True, False, False]
    assert result.usage.completion_tokens > 0 and result.usage.calls == 1


def test_parser_tolerates_case_bullets_separators_and_spaces() -> None:
    text = (
        "**Thinking:** two tools\n"
        "- GET_WEATHER: yes\n"
        "2. `send_email` — No.\n"
        "*  book-flight   --   YES\n"
    )
    result = parse_nlt_output(text, NAMES)
    assert result.status == "ok"
    assert result.selected == ["get_weather", "book_flight"]
    assert result.reasoning == "two tools"


def test_parser_reports_missing_tools_as_partial() -> None:
    result = parse_nlt_output("Thinking: hm\nget_weather - YES\n", NAMES)
    assert result.status == "partial"
    assert result.missing == ["send_email", "book_flight"]
    assert result.selected == ["get_weather"]


def test_parser_reports_unknown_names_and_conflicting_duplicates() -> None:
    text = "get_weather - YES\nget_weather - NO\nget_weather - YES\ntranslate_text - YES\nsend_email - NO\nbook_flight - NO"
    result = parse_nlt_output(text, NAMES)
    assert result.unknown == ["translate_text"]
    assert result.conflicts == ["get_weather"]
    assert result.selected == ["get_weather"]  # the first decision stands
    assert result.status == "ok"


def test_unparseable_output_is_a_parse_error_not_an_empty_selection() -> None:
    result = select_tools(FakeEngine().reply("I think you should check the weather."), "rain?", TOOLS, mode="generate")
    assert result.status == "parse_error"
    assert result.missing == NAMES
    assert result.raw_text.startswith("I think you should check the weather.")


def test_all_no_is_a_valid_empty_selection() -> None:
    result = parse_nlt_output("Thinking: none\nget_weather - NO\nsend_email - NO\nbook_flight - NO", NAMES)
    assert result.status == "ok" and result.selected == []


def test_tool_names_containing_dashes() -> None:
    result = parse_nlt_output("my-tool - YES\nother - NO", ["my-tool", "other"])
    assert result.selected == ["my-tool"] and result.status == "ok"


# -- score mode ---------------------------------------------------------------------------------
def _scorer(prompt: str, candidate: str) -> float:
    # YES is likely only for get_weather when the message mentions rain.
    yes = "Message: Is it raining" in prompt and prompt.endswith("get_weather -")
    if candidate == " YES":
        return math.log(0.9) if yes else math.log(0.2)
    return math.log(0.1) if yes else math.log(0.8)


def test_score_mode_forces_each_tool_line_and_reads_yes_probability() -> None:
    engine = FakeEngine(scorer=_scorer)
    result = select_tools(engine, "Is it raining in Paris?", TOOLS, mode="score", calibrate=False)
    assert result.status == "ok" and result.selected == ["get_weather"]
    probs = {d.name: d.probability for d in result.decisions}
    assert probs["get_weather"] == pytest.approx(0.9)
    assert probs["send_email"] == pytest.approx(0.2)
    assert {d.name: d.raw_logodds for d in result.decisions}["get_weather"] == pytest.approx(math.log(9))
    assert len(engine.calls) == 3
    for call, name in zip(engine.calls, NAMES):
        assert call["kind"] == "score" and call["candidates"] == [" YES", " NO"]
        assert call["prompt"].endswith(f"\n{name} -")


def test_score_is_the_default_mode_and_calibrated() -> None:
    engine = FakeEngine(scorer=_scorer)
    result = select_tools(engine, "Is it raining in Paris?", TOOLS)
    assert result.mode == "score" and set(result.content_free) == set(NAMES)  # one prior per tool
    assert all(math.isfinite(v) for v in result.content_free.values())
    # 3 tools for the message, then 3 tools for each of the 3 content-free requests.
    assert result.usage.calls == 3 + 3 * len(CONTENT_FREE_MESSAGES)
    content_free = [c["prompt"] for c in engine.calls[3:]]
    for message in CONTENT_FREE_MESSAGES:
        assert sum(f"Message: {message}\n" in p for p in content_free) == 3


def test_score_mode_reuses_the_shared_prefix() -> None:
    engine = FakeEngine(scorer=_scorer)
    result = select_tools(engine, "Is it raining in Paris?", TOOLS, mode="score", calibrate=False)
    first = engine.count_tokens(engine.calls[0]["prompt"])
    assert result.usage.prompt_tokens == sum(engine.count_tokens(c["prompt"]) for c in engine.calls)
    # After the first call only the per-tool tail is evaluated.
    assert result.usage.evaluated <= first + 2 * 3
    assert result.usage.reused >= 2 * (first - 3)


def test_threshold_is_configurable() -> None:
    result = select_tools(FakeEngine(scorer=_scorer), "Is it raining?", TOOLS, mode="score", threshold=0.15,
                          calibrate=False)
    assert result.selected == NAMES and result.threshold == pytest.approx(0.15)
    with pytest.raises(ValidationError):
        select_tools(FakeEngine(scorer=_scorer), "x", TOOLS, mode="score", threshold=1.5)


def _yes_scorer(p_yes: dict[str, float], default: float) -> Callable[[str, str], float]:
    """P(YES) per tool for the real message (`Message: <text>` with a key of p_yes in it), `default` otherwise."""
    def score(prompt: str, candidate: str) -> float:
        tool = prompt.rsplit("\n", 1)[-1].removesuffix(" -")
        message = prompt.split("Message: ", 1)[1].split("\n", 1)[0]
        p = p_yes.get(tool, default) if message not in CONTENT_FREE_MESSAGES else default
        return math.log(p if candidate == " YES" else 1 - p)
    return score


def test_calibration_subtracts_the_content_free_log_odds() -> None:
    assert calibrate_probability(0.6, 0.6) == pytest.approx(0.5)
    assert calibrate_probability(0.9, 0.5) == pytest.approx(0.9)
    # The model says YES at 0.98 for every tool whatever the message (SmolLM2's bias), 0.995 for the weather
    # tool on this message: uncalibrated, all three pass; calibrated, only the weather tool rose above its baseline.
    scorer = _yes_scorer({"get_weather": 0.995}, 0.98)
    plain = select_tools(FakeEngine(scorer=scorer), "Is it raining?", TOOLS, calibrate=False)
    assert plain.selected == NAMES
    calibrated = select_tools(FakeEngine(scorer=scorer), "Is it raining?", TOOLS, rule=DecisionRule())
    assert calibrated.selected == ["get_weather"]
    assert calibrated.content_free == {n: pytest.approx(logit(0.98)) for n in NAMES}
    weather = {d.name: d for d in calibrated.decisions}["get_weather"]
    assert weather.model_logodds == pytest.approx(logit(0.995) - logit(0.98))
    assert weather.probability == pytest.approx(calibrate_probability(0.995, 0.98))


def test_no_tool_is_a_real_outcome() -> None:
    result = select_tools(FakeEngine(scorer=_yes_scorer({}, 0.98)), "thanks, bye", TOOLS, rule=DecisionRule())
    assert result.status == "ok" and result.selected == [] and len(result.decisions) == 3
    assert all(not d.selected and d.probability == pytest.approx(0.5) for d in result.decisions)


def test_content_free_baseline_is_computed_once_per_engine_catalogue_and_context() -> None:
    cache = ContentFreeCache()
    engine = FakeEngine(scorer=_yes_scorer({"get_weather": 0.9}, 0.5))
    first = select_tools(engine, "Is it raining?", TOOLS, cache=cache)
    again = select_tools(engine, "Send an email", TOOLS, cache=cache)
    assert first.calibration_cached is False and again.calibration_cached is True
    assert again.usage.calls == 3 and again.content_free == first.content_free
    # A ScopedEngine on the same model shares the baseline; another catalogue, context or engine does not.
    scoped = select_tools(ScopedEngine(engine, Scope(user="u")), "x", TOOLS, cache=cache)
    assert scoped.calibration_cached is True
    assert select_tools(engine, "x", TOOLS[:2], cache=cache).calibration_cached is False
    assert select_tools(engine, "x", TOOLS, context="In a bank", cache=cache).calibration_cached is False
    other = FakeEngine(scorer=_yes_scorer({}, 0.7))
    assert select_tools(other, "x", TOOLS, cache=cache).content_free == {n: pytest.approx(logit(0.7)) for n in NAMES}


def test_lexical_prior_and_rule_weights() -> None:
    hotel_tools = [
        {"name": "GetFlights", "description": "Search flights to a destination city, optionally on a given airline."},
        {"name": "GetHotels", "description": "Search hotels in a city."},
        {"name": "GetRestaurants", "description": "Search restaurants in a city by cuisine."},
    ]
    lexical = lexical_scores(as_tool_specs(hotel_tools), "Book me a hotel in Paris")
    assert lexical["GetHotels"] > 0 and lexical["GetFlights"] == lexical["GetRestaurants"] == 0
    # A model with no signal (same log-odds for everything) and a rule that leans on the lexical prior.
    rule = DecisionRule(model_weight=1.0, lexical_weight=1.0, threshold=0.5)
    result = select_tools(FakeEngine(scorer=_yes_scorer({}, 0.9)), "Book me a hotel in Paris", hotel_tools, rule=rule)
    assert result.selected == ["GetHotels"] and result.rule == rule
    hotel = {d.name: d for d in result.decisions}["GetHotels"]
    assert hotel.score == pytest.approx(hotel.lexical) and hotel.probability == pytest.approx(1 / (1 + math.exp(-hotel.score)))


def test_history_reaches_the_prompt_and_the_lexical_prior() -> None:
    specs = as_tool_specs(TOOLS)
    history = [("user", "I need to tell Bob."), ("assistant", "Shall I send an email to Bob?")]
    assert lexical_scores(specs, "yes please")["send_email"] == 0
    assert lexical_scores(specs, "yes please", history)["send_email"] > 0
    engine = FakeEngine(scorer=_scorer)
    select_tools(engine, "yes please", TOOLS, history=history, calibrate=False)
    assert "Conversation so far:\nuser: I need to tell Bob.\nassistant: Shall I send" in engine.prompts[0]
    assert engine.prompts[0].index("Conversation so far") < engine.prompts[0].index("Message: yes please")


def test_packaged_rules_are_valid_and_chosen_by_the_model_files_hash(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path) -> None:
    rules = nlt._packaged_rules()
    assert rules and all(re.fullmatch(r"(gguf-sha256:[0-9a-f]{64}|\*|baseline)(\|[\w.-]+)?", key) for key in rules)
    assert all(rule["model_weight"] == 0.0 for key, rule in rules.items() if key.startswith("*|"))
    for key, rule in rules.items():
        parsed = DecisionRule(**{k: v for k, v in rule.items() if k in DecisionRule.model_fields})
        assert parsed.model_weight >= 0 and parsed.lexical_weight >= 0, key
        assert "dev" in parsed.source or "tune parts" in parsed.source, key  # fitted on tuning items only
    model, twin = tmp_path / "m.gguf", tmp_path / "twin.gguf"
    model.write_bytes(b"GGUF one quantisation")
    twin.write_bytes(b"GGUF another quantisation")  # the same GGUF general.name, another file

    class FileEngine(FakeEngine):
        def __init__(self, path) -> None:
            super().__init__()
            self.path = path

        @property
        def info(self):
            return dataclasses.replace(super().info, model_path=str(self.path))

    fingerprint = fits.file_fingerprint(model)
    monkeypatch.setattr(nlt, "_packaged_rules", lambda: {fingerprint: {
        "model": "m.gguf", "model_weight": 0.5, "lexical_weight": 2.0, "threshold": 1.0, "source": "dev fit"}})
    assert nlt.rule_for(FileEngine(model)) == DecisionRule(model_weight=0.5, lexical_weight=2.0, threshold=1.0,
                                                           source="dev fit")
    assert nlt.rule_for(FileEngine(twin)) == DecisionRule()  # same name, not the fitted file: the default
    assert nlt.rule_for(FakeEngine()) == DecisionRule()
    assert nlt.rule_for(FakeEngine(), calibrated=False).model_weight == 1.0


def test_fit_rule_finds_the_separating_weights_and_threshold() -> None:
    # The model's log-odds are noise; the lexical score separates gold from the rest (and "no tool" items).
    examples = [
        ({"a": (2.0, 3.0, None), "b": (-1.0, 0.0, None)}, {"a"}),
        ({"a": (-2.0, 0.0, None), "b": (1.5, 2.5, None)}, {"b"}),
        ({"a": (2.5, 0.0, None), "b": (0.5, 0.5, None)}, set()),
        ({"a": (-1.0, 4.0, None), "b": (2.0, 2.0, None)}, {"a", "b"}),
    ]
    rule, accuracy = fit_rule(examples, source="dev")
    assert accuracy == 1.0 and rule.model_weight == 0.0 and rule.lexical_weight > 0 and rule.embedding_weight == 0
    assert 0.5 * rule.lexical_weight < rule.threshold < 2.0 * rule.lexical_weight
    with pytest.raises(ValidationError):
        fit_rule([])


def test_fit_rule_weighs_the_embedders_cosine_when_it_separates_and_the_model_only_when_asked() -> None:
    # Lexical overlap is noise here; the cosine separates; the model was never asked (None): weight 0.
    examples = [
        ({"a": (None, 1.0, 0.62), "b": (None, 2.0, 0.18)}, {"a"}),
        ({"a": (None, 2.0, 0.21), "b": (None, 0.0, 0.55)}, {"b"}),
        ({"a": (None, 3.0, 0.25), "b": (None, 3.0, 0.12)}, set()),
        ({"a": (None, 0.0, 0.48), "b": (None, 1.0, 0.51)}, {"a", "b"}),
    ]
    rule, accuracy = fit_rule(examples, source="dev")
    assert accuracy == 1.0 and rule.model_weight == 0.0 and rule.embedding_weight > 0
    assert rule.evidence == ["embedding"] or rule.evidence == ["lexical", "embedding"]
    assert all((rule.score(None, ev[n][1], ev[n][2]) > rule.threshold) == (n in gold)
               for ev, gold in examples for n in ev)


# -- structured baseline ------------------------------------------------------------------------
def test_structured_mode_uses_a_name_enum_grammar_and_json_definitions() -> None:
    tools = TOOLS + [{"name": "ping", "description": "Health check."}]
    engine = FakeEngine().reply(json.dumps({"tools": ["book_flight", "get_weather"]}))
    result = select_tools(engine, "Fly me to Rome and tell me the weather", tools, mode="structured")
    assert result.status == "ok"
    assert result.selected == ["get_weather", "book_flight"]
    schema = engine.calls[0]["json_schema"]
    assert schema["properties"]["tools"]["items"]["enum"] == [t["name"] for t in tools]
    assert schema["required"] == ["tools"]
    assert '"name": "ping"' in engine.prompts[0] and '"parameters"' in engine.prompts[0]


def test_structured_mode_bad_json_is_a_parse_error() -> None:
    class Truncating(FakeEngine):
        def generate(self, prompt, **kwargs):  # type: ignore[override]
            gen = super().generate(prompt, **{**kwargs, "json_schema": None})
            return gen

    result = select_tools(Truncating().reply('{"tools": ["get_wea'), "x", TOOLS, mode="structured")
    assert result.status == "parse_error" and result.selected == []


def test_generate_mode_repairs_copied_example_names_by_forcing_the_first_tool() -> None:
    engine = FakeEngine()
    engine.reply(" Rain question.\nweather_lookup - YES\nsend_email - NO\n")  # copies the example's names
    engine.reply(" YES\nsend_email - NO\nbook_flight - NO\n")
    result = select_tools(engine, "Is it raining?", TOOLS, mode="generate")
    assert result.repaired and result.status == "ok"
    assert result.selected == ["get_weather"]
    assert engine.prompts[1].endswith("Thinking: Rain question.\nget_weather -")
    assert result.usage.calls == 2


def test_repair_that_still_fails_stays_a_parse_error() -> None:
    engine = FakeEngine().reply("blah").reply("blah again")
    result = select_tools(engine, "Is it raining?", TOOLS, mode="generate")
    assert result.status == "parse_error" and result.repaired and result.selected == []


def test_a_rule_without_model_weight_never_calls_the_model_and_says_what_decided() -> None:
    engine = FakeEngine()
    rule = DecisionRule(model_weight=0.0, lexical_weight=0.25, embedding_weight=8.0, threshold=2.0, source="t")
    tools = [{"name": "track_order", "description": "Track the shipping status of an order."},
             {"name": "start_return", "description": "Return an item for a refund."}]
    result = select_tools(engine, "where is my order", tools, rule=rule, embedder=FakeEmbedder())
    assert engine.calls == [] and result.usage.calls == 0 and result.content_free is None
    assert result.evidence == ["lexical", "embedding"]
    assert all(d.cosine is not None and d.model_logodds is None for d in result.decisions)
    forced = select_tools(engine, "where is my order", tools, rule=rule, embedder=FakeEmbedder(), all_evidence=True)
    assert engine.calls and all(d.model_logodds is not None for d in forced.decisions)
    assert forced.selected == result.selected  # the evidence recorded, the decision the rule's
    with pytest.raises(ValidationError, match="embedder"):
        select_tools(engine, "where is my order", tools, rule=rule)


def test_a_sentence_cosine_rule_scores_each_tool_by_the_requests_best_sentence() -> None:
    # "Track my order. Also, start a return for the shoes.": each tool is matched by one sentence; the whole
    # request's vector is a blend of both.
    embedder = FakeEmbedder()
    specs = as_tool_specs([{"name": "track_order", "description": "Track the shipping status of an order."},
                           {"name": "start_return", "description": "Return an item for a refund."}])
    message = "Track my order please. Also, start a return for the shoes."
    best = nlt.embedding_scores(embedder, specs, message, by_sentence=True)
    parts = [nlt.embedding_scores(embedder, specs, part) for part in ("Track my order please.",
                                                                       "Also, start a return for the shoes.")]
    for spec in specs:
        assert best[spec.name] == pytest.approx(max(p[spec.name] for p in parts), abs=1e-6)
    one = "Track my order please."  # one sentence: the same cosine either way
    assert nlt.embedding_scores(embedder, specs, one, by_sentence=True) == nlt.embedding_scores(embedder, specs, one)
    rule = DecisionRule(model_weight=0.0, embedding_weight=1.0, threshold=-1.0, sentence_cosine=True, source="t")
    result = select_tools(FakeEngine(), message, [{"name": s.name, "description": s.description} for s in specs],
                          rule=rule, embedder=embedder)
    assert {d.name: d.cosine for d in result.decisions} == pytest.approx(best)


def test_an_embedding_rule_for_any_model_is_found_by_the_embedders_name(monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = FakeEmbedder()
    monkeypatch.setattr(nlt, "_packaged_rules", lambda: {f"*|{embedder.name}": {
        "model_weight": 0.0, "lexical_weight": 0.25, "embedding_weight": 8.0, "threshold": 2.0, "source": "any"}})
    assert nlt.rule_for(FakeEngine(), embedder=embedder).embedding_weight == 8.0
    assert nlt.rule_for(FakeEngine()) == DecisionRule()  # without the embedder the rule cannot apply
