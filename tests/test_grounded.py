"""Grounded calling: values are spans of the request, preferences come from tags by rules, one call per function
unless values are coordinated, turns are split so only the user's words are sources."""

from __future__ import annotations

import json
import re

import pytest

from prefcall.engine.fake import BatchingFakeEngine, FakeEmbedder, FakeEngine, fake_tokenize
from prefcall.errors import ConfigError
from prefcall.schemas.model import Call, Catalogue, Function, Turn
from prefcall.strategies import grounded, relevance
from prefcall.strategies.grounding import fill
from prefcall.strategies.grounding.values import Source, argument_candidates, argument_kind, ungrounded_leaf
from prefcall.strategies.pipeline import Pipeline
from prefcall.strategies.pipeline_models import get_config
from prefcall.strategies.preferences import Draft, Preference, Provenance, apply_preferences

RESTAURANTS = Function(name="GetRestaurants", description="Find restaurants in a city.", parameters={
    "type": "object", "properties": {
        "city": {"type": "string", "description": "city of the restaurant"},
        "cuisine": {"type": "string", "description": "type of food"},
        "restaurant_name": {"type": "string", "description": "name of the restaurant"},
        "price_range": {"enum": ["cheap", "moderate", "expensive"]},
        "serves_alcohol": {"type": "boolean"},
        "party_size": {"type": "integer"}},
    "required": ["city"]})
HOTELS = Function(name="GetHotels", description="Find hotels in a city.", parameters={
    "type": "object", "properties": {"location": {"type": "string", "description": "city of the hotel"}},
    "required": ["location"]})
TRAVEL = Function(name="GetTravel", description="Find attractions to visit.", parameters={
    "type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]})
CATALOGUE = Catalogue(name="food", functions=[RESTAURANTS, HOTELS, TRAVEL])


def scorer(function: str, miss: float = -12.0, **values: object):
    """The fake model: stage 1 likes `function`; for argument A it likes values[A] (a list: each of them), else null.
    It is sure: e^-12 for what it does not like (with closing quotes healed, a real model's right values sit a
    median 6 nats above null; see src/prefcall/data/grounding.json)."""
    def score(prompt: str, candidate: str) -> float:
        argument = re.search(r'\{"(\w+)": $', prompt)
        if argument is None:
            return -0.1 if candidate.strip() == function else -5.0
        wanted = values.get(argument.group(1))
        if wanted is None:
            return -0.1 if candidate == "null" else miss
        wanted = wanted if isinstance(wanted, list) else [wanted]
        return -0.1 if candidate in [json.dumps(w) for w in wanted] else miss
    return score


def parse(engine: FakeEngine, dialogue, instructions=(), **overrides):
    return Pipeline(engine, FakeEmbedder()).parse(dialogue, list(instructions), CATALOGUE,
                                                  get_config("full", **overrides), applicable=list(instructions))


def test_kinds_come_from_the_schema():
    properties = RESTAURANTS.properties
    assert [argument_kind(properties[a]) for a in ("city", "price_range", "serves_alcohol", "party_size")] == [
        "span", "enum", "boolean", "number"]
    assert argument_kind({"type": "string", "description": "a Python expression"}) == "free"
    pool = argument_candidates("party_size", properties["party_size"], [Source("user", "a table for 4 people")])
    assert [c.value for c in pool.candidates] == [4]


def test_a_value_the_model_prefers_but_nobody_wrote_is_never_produced():
    # The model "wants" Dallas; Dallas is not a span of the request, so it cannot be chosen.
    engine = FakeEngine(scorer=scorer("GetRestaurants", city="Dallas", cuisine="Thai"))
    result = parse(engine, "User: Thai food in Oakland please")
    assert result.status == "ok" and result.functions == ["GetRestaurants"]
    assert result.calls and result.calls[0].arguments.get("city") != "Dallas"
    for value in result.calls[0].arguments.values():
        assert str(value) in "Thai food in Oakland please"


def test_values_are_scored_with_their_closing_quote_healed_and_stage_one_names_exactly():
    # Argument values end in a closing quote that byte-pair models write together with what follows (`",`):
    # the filler asks the engine to count those tokens too; stage 1's names are scored as written.
    engine = FakeEngine(scorer=scorer("GetRestaurants", city="Oakland", cuisine="Thai"))
    result = parse(engine, "User: Thai food in Oakland please")
    assert result.calls and result.calls[0].arguments.get("city") == "Oakland"
    scored = [c for c in engine.calls if c["kind"] == "score"]
    values = [c for c in scored if c["prompt"].rstrip().endswith(":")
              and re.search(r'\{"\w+": $', c["prompt"])]
    assert values and all(c["heal_end"] for c in values)
    assert any(not c["heal_end"] for c in scored)  # stage 1 (function names)
    # The trace counts the single-token decodes the scoring cost (the bench's raw baseline needs them): at least
    # those of the values, at most those of every scoring call (calibration prompts are not the request's).
    def decodes(calls):
        return sum(max(0, max(1, len(fake_tokenize(c))) - 1) for call in calls for c in call["candidates"])
    assert 0 < decodes(values) <= result.trace.decoded <= decodes(scored)


def test_coordinated_values_make_one_call_each_and_single_values_one_call():
    engine = FakeEngine(scorer=scorer("GetRestaurants", city="Boston", cuisine=["Italian", "Mexican"]))
    result = parse(engine, "User: Italian or Mexican restaurants in Boston")
    assert sorted(c.arguments["cuisine"] for c in result.calls) == ["Italian", "Mexican"]
    assert all(c.arguments["city"] == "Boston" for c in result.calls) and result.decision == "call"
    single = parse(FakeEngine(scorer=scorer("GetRestaurants", city="Boston", cuisine="Italian")),
                   "User: I want Italian restaurants in Boston")
    assert single.calls == [Call(name="GetRestaurants", arguments={"city": "Boston", "cuisine": "Italian"})]


def test_a_bare_comma_joins_a_second_value_only_when_it_passes_on_its_own():
    # "Toronto or Ottawa": the model prefers Ottawa to null, so it is a second value (a second call). "Toronto,
    # Canada": it prefers Canada to null just as much, but a comma alone also joins a place to its region.
    def score(prompt: str, candidate: str) -> float:
        argument = re.search(r'\{"(\w+)": $', prompt)
        if argument is None:
            return -0.1 if candidate.strip() == "GetRestaurants" else -5.0
        if argument.group(1) != "city":
            return -0.1 if candidate == "null" else -12.0
        return {'"Toronto"': -0.1, '"Canada"': -5.0, '"Ottawa"': -5.0, "null": -8.0}.get(candidate, -12.0)

    both = parse(FakeEngine(scorer=score), "User: Find restaurants in Toronto or Ottawa")
    assert sorted(c.arguments["city"] for c in both.calls) == ["Ottawa", "Toronto"]
    region = parse(FakeEngine(scorer=score), "User: Find restaurants in Toronto, Canada")
    assert region.calls == [Call(name="GetRestaurants", arguments={"city": "Toronto"})]


def test_only_the_users_turns_are_sources():
    engine = FakeEngine(scorer=scorer("GetRestaurants", city=["Paris", "Oakland"]))
    result = parse(engine, "User: find me a restaurant\nAgent: In Paris or somewhere else?\nUser: In Oakland")
    assert result.calls[0].arguments["city"] == "Oakland"  # "Paris" was only the assistant's word
    assert grounded.split_turns("User: a\nAgent: b\nUser: c")[1] == Turn(role="assistant", content="b")


def test_missing_required_argument_asks_with_the_question_and_an_instruction_fills_it():
    engine = FakeEngine(scorer=scorer("GetRestaurants", cuisine="Thai", city="San Fran"))
    asked = parse(engine, "User: I want Thai food")
    assert asked.decision == "ask" and asked.missing[0].argument == "city" and "city" in asked.question
    instruction = "If I'm looking for restaurants, my go-to city is San Fran."
    filled = parse(engine, "User: I want Thai food", [instruction])
    assert filled.decision == "call" and filled.calls[0].arguments == {"city": "San Fran", "cuisine": "Thai"}
    assert {"function": "GetRestaurants", "argument": "city", "value": "San Fran", "origin": "instruction",
            "instruction": instruction} in filled.provenance
    assert filled.tags[0].mode == "structured" and "[SL:CITY San Fran ]" in filled.tags[0].tagged


def test_preferences_conditions_chains_and_the_dialogue_wins():
    steak = Preference(instruction="If cuisine is Steakhouse then look for restaurant name as Alexander's",
                       function="GetRestaurants", conditions={"cuisine": "Steakhouse"},
                       actions={"restaurant_name": ["Alexander's"]})
    city = Preference(instruction="My city for restaurants is Oakland", function="GetRestaurants",
                      actions={"city": ["Oakland"]})
    chain = Preference(instruction="If I ask for Restaurants, then also look at Hotels", function="GetRestaurants",
                       also={"GetHotels": {}})
    user = Draft(name="GetRestaurants")
    user.set("cuisine", ["Steakhouse"], Provenance(argument="cuisine", value="Steakhouse", origin="user"))
    user.set("city", ["Berkeley"], Provenance(argument="city", value="Berkeley", origin="user"))
    applied = apply_preferences([user], [steak, city, chain], CATALOGUE)
    calls = [c for d in applied.drafts for c in d.calls()]
    assert calls[0].arguments == {"cuisine": "Steakhouse", "city": "Berkeley", "restaurant_name": "Alexander's"}
    assert [d.name for d in applied.drafts] == ["GetRestaurants", "GetHotels"]
    assert "the user stated city" in applied.skipped[city.instruction]
    thai = Draft(name="GetRestaurants")
    thai.set("cuisine", ["Thai"], Provenance(argument="cuisine", value="Thai", origin="user"))
    assert "contradicted" in apply_preferences([thai], [steak], CATALOGUE).skipped[steak.instruction]


def test_a_condition_takes_the_value_another_instruction_put_on_the_wrong_argument():
    # "my usual kind is moderate" tagged as the cuisine; "if the price range is moderate, ..." names the argument
    # whose options hold it: the value moves there and the condition holds.
    kind = Preference(instruction="For restaurants my usual kind is moderate", function="GetRestaurants",
                      actions={"cuisine": ["moderate"]})
    chain = Preference(instruction="Look for Chez Panisse if the price range is moderate", function="GetRestaurants",
                       conditions={"price_range": "moderate"}, actions={"restaurant_name": ["Chez Panisse"]})
    applied = apply_preferences([Draft(name="GetRestaurants")], [kind, chain], CATALOGUE)
    draft = applied.drafts[0]
    assert draft.values == {"price_range": ["moderate"], "restaurant_name": ["Chez Panisse"]}
    assert draft.provenance["price_range"].instruction == kind.instruction
    assert applied.used == [kind.instruction, chain.instruction]
    # The user's own word stays where the dialogue put it, and the condition is not met.
    stated = Draft(name="GetRestaurants")
    stated.set("cuisine", ["moderate"], Provenance(argument="cuisine", value="moderate", origin="user"))
    applied = apply_preferences([stated], [chain], CATALOGUE)
    assert applied.drafts[0].values == {"cuisine": ["moderate"]} and "not met" in applied.skipped[chain.instruction]
    # A value that is not one of the condition argument's options does not move.
    odd = Preference(instruction="For restaurants my usual kind is Thai", function="GetRestaurants",
                     actions={"cuisine": ["Thai"]})
    thai = Preference(instruction="Look for Lers Ros if the price range is Thai", function="GetRestaurants",
                      conditions={"price_range": "Thai"}, actions={"restaurant_name": ["Lers Ros"]})
    assert apply_preferences([Draft(name="GetRestaurants")], [odd, thai], CATALOGUE).drafts[0].values == {
        "cuisine": ["Thai"]}


def test_a_value_the_user_probably_gave_beats_an_instruction_for_that_argument():
    name = Preference(instruction="My usual restaurant is Chez Panisse", function="GetRestaurants",
                      actions={"restaurant_name": ["Chez Panisse"], "cuisine": ["French"]})
    draft = Draft(name="GetRestaurants")
    draft.heard["restaurant_name"] = Provenance(argument="restaurant_name", value="Nopa", origin="user",
                                                source="Nopa")
    applied = apply_preferences([draft], [name], CATALOGUE)
    assert applied.drafts[0].values == {"restaurant_name": ["Nopa"], "cuisine": ["French"]}
    assert applied.drafts[0].provenance["restaurant_name"].origin == "user"
    # Where the user's probable value is the instruction's own, the instruction sets it.
    same = Draft(name="GetRestaurants")
    same.heard["restaurant_name"] = Provenance(argument="restaurant_name", value="chez panisse", origin="user")
    applied = apply_preferences([same], [name], CATALOGUE)
    assert applied.drafts[0].provenance["restaurant_name"].instruction == name.instruction


def test_only_a_probable_value_of_the_user_is_heard():
    result = fill.FillResult(function="GetRestaurants", unset=[
        fill.Choice(argument="restaurant_name", values=["Nopa"], texts=["Nopa"], sources=["user:0"], probability=0.4),
        fill.Choice(argument="cuisine", values=["Thai"], texts=["Thai"], sources=["user:0"], probability=0.2),
        fill.Choice(argument="city", values=["Oakland"], texts=["Oakland"], sources=["instruction:x"],
                    probability=0.9)])
    assert set(grounded.draft_from_fill(result).heard) == {"restaurant_name"}


def test_instructions_are_selected_again_for_the_function_stage_one_chose():
    # The request's words point to travel ("visit"); stage 1 (the model alone here) reads it as a meal: the
    # restaurant instruction applies, the travel one does not.
    instructions = ["If I ask for Restaurants, my preferred cuisine is Thai",
                    "If I ask for Travel, my preferred location is Napa"]
    engine = FakeEngine(scorer=scorer("GetRestaurants", city="Oakland", cuisine="Thai", location="Napa"))
    result = Pipeline(engine, FakeEmbedder()).parse("User: Somewhere to visit for dinner in Oakland?", instructions,
                                                    CATALOGUE, get_config("full", function_selection="score"))
    assert result.functions == ["GetRestaurants"]
    assert result.instructions_used == instructions[:1]
    assert result.calls == [Call(name="GetRestaurants", arguments={"city": "Oakland", "cuisine": "Thai"})]
    assert any("selected again for GetRestaurants" in n for n in result.notes)


def test_no_function_fits_is_a_refusal_and_tags_are_keyed_by_catalogue_mode_and_model():
    # The model finds "None" likely for this request only (a constant preference would be calibrated away).
    engine = FakeEngine(scorer=lambda p, c: -0.1 if (c.strip() == "None") == ("weather" in p) else -5.0)
    result = parse(engine, "User: what's the weather like?", allow_refuse=True)
    assert result.decision == "refuse" and result.calls == []
    why = [n for n in result.notes if n.startswith("refuse: the request is not about the catalogue")]
    assert len(why) == 1 and "above every function; the closest function" in why[0], result.notes
    other = Catalogue(name="food2", functions=[RESTAURANTS])
    text = "My city for restaurants is Oakland"
    keys = {grounded.tag_key(text, CATALOGUE, "structured", "m"), grounded.tag_key(text, other, "structured", "m"),
            grounded.tag_key(text, CATALOGUE, "spans", "m"), grounded.tag_key(text, CATALOGUE, "structured", "n")}
    assert len(keys) == 4


def test_an_abbreviation_a_comma_ties_to_a_value_stays_with_it():
    engine = FakeEngine(scorer=scorer("GetRestaurants", city="Oakland", restaurant_name="Jay Bansal"))
    region = parse(engine, "User: Find restaurants in Oakland, CA for tonight.")
    assert region.calls[0].arguments["city"] == "Oakland, CA"
    credential = parse(engine, "User: Book Jay Bansal, MD if it is in Oakland.")
    assert credential.calls[0].arguments["restaurant_name"] == "Jay Bansal, MD"
    two = parse(engine, "User: Book Jay Bansal, M.D., MPH if it is in Oakland.")
    assert two.calls[0].arguments["restaurant_name"] == "Jay Bansal, M.D., MPH"
    # A word after the comma is not an abbreviation of the name.
    plain = parse(engine, "User: Find restaurants in Oakland, California.")
    assert plain.calls[0].arguments["city"] == "Oakland"


def test_a_name_keeps_the_branch_a_spaced_dash_adds():
    engine = FakeEngine(scorer=scorer("GetRestaurants", city="Oakland", restaurant_name="Golden Lotus"))
    branch = parse(engine, "User: Book Golden Lotus - Lake Merritt for tonight in Oakland.")
    assert branch.calls[0].arguments["restaurant_name"] == "Golden Lotus - Lake Merritt"
    # A clause after the dash is no branch, nor are capitalised words after a one-word name (a lone place name).
    clause = parse(engine, "User: Book Golden Lotus - it is in Oakland.")
    assert clause.calls[0].arguments["restaurant_name"] == "Golden Lotus"
    engine = FakeEngine(scorer=scorer("GetRestaurants", city="Oakland", restaurant_name="Nopa"))
    single = parse(engine, "User: Book Nopa - Lake Merritt is too far, in Oakland.")
    assert single.calls[0].arguments["restaurant_name"] == "Nopa"


def test_a_phone_number_or_postal_code_is_written_with_digits():
    dentists = Function(name="GetDentists", description="Find a dentist.", parameters={
        "type": "object", "properties": {
            "city": {"type": "string"}, "dentist_name": {"type": "string"},
            "phone_number": {"type": "string", "description": "the dentist's phone"},
            "zip_code": {"type": "string"}}, "required": ["city"]})
    catalogue = Catalogue(name="dental", functions=[dentists])
    engine = FakeEngine(scorer=scorer("GetDentists", city="Sunnyvale", dentist_name="Chen Jiangkai",
                                      phone_number=["Andrei Simel", "408-555-0199"], zip_code=["Simel", "94086"]))

    def arguments(text: str) -> dict:
        return Pipeline(engine, FakeEmbedder()).parse(text, [], catalogue, get_config("full"),
                                                      applicable=[]).calls[0].arguments

    named = arguments("User: A dentist in Sunnyvale named Chen Jiangkai, not Andrei Simel.")
    assert named == {"city": "Sunnyvale", "dentist_name": "Chen Jiangkai"}
    numbered = arguments("User: A dentist in Sunnyvale, Chen Jiangkai at 408-555-0199, zip 94086.")
    assert numbered["phone_number"] == "408-555-0199" and numbered["zip_code"] == "94086"
    assert fill._digits_only("UA 123") and fill._digits_only("555-CALL-NOW") and fill._digits_only("SW1A 1AA")
    assert not fill._digits_only("Flight 123") and not fill._digits_only("ABC-DEFG")
    assert fill._written_in_digits("phone_number") and fill._written_in_digits("accountNumber")
    assert not fill._written_in_digits("number_of_tickets") and not fill._written_in_digits("city")
    assert fill._a_count("number_of_tickets") and fill._a_count("ticketCount") and not fill._a_count("phone_number")


def test_a_count_written_as_a_string_takes_only_numbers():
    events = Function(name="GetEvents", description="Find events.", parameters={"type": "object", "properties": {
        "event_name": {"type": "string"}, "number_of_tickets": {"type": "string"}}})
    catalogue = Catalogue(name="events", functions=[events])
    engine = FakeEngine(scorer=scorer("GetEvents", event_name="Vivian Green", number_of_tickets=["Tash Sultana", "two"]))

    def arguments(text: str) -> dict:
        return Pipeline(engine, FakeEmbedder()).parse(text, [], catalogue, get_config("full"),
                                                      applicable=[]).calls[0].arguments

    assert arguments("User: Vivian Green, not Tash Sultana.") == {"event_name": "Vivian Green"}
    assert arguments("User: two tickets for Vivian Green.")["number_of_tickets"] == "two"


def test_a_span_that_ends_on_an_initial_or_a_title_the_name_goes_on_after_is_no_value():
    from prefcall.strategies.grounding.values import Candidate, cuts_name

    text = "Book Dr. Lawrence J. Mcdonald in St. Louis. Ask for Jay. Thanks"
    source = Source("user", text)

    def cut(span: str) -> bool:
        start = text.index(span)
        return cuts_name(Candidate(span, span, source, start, start + len(span)))

    assert cut("Dr. Lawrence J") and cut("Book Dr") and cut("in St")
    assert not cut("Dr. Lawrence J. Mcdonald") and not cut("St. Louis") and not cut("Jay")
    engine = FakeEngine(scorer=scorer("GetRestaurants", city="Oakland", restaurant_name=["Chez J", "Chez J. Paul"]))
    result = parse(engine, "User: A table at Chez J. Paul in Oakland.")
    assert result.calls[0].arguments["restaurant_name"] == "Chez J. Paul"


def test_the_argument_s_own_name_is_never_its_value():
    engine = FakeEngine(scorer=scorer("GetRestaurants", city="Oakland", cuisine=["cuisine", "Thai"],
                                      restaurant_name="restaurant name"))
    result = parse(engine, "User: Any cuisine will do, Thai maybe, in Oakland; the restaurant name is up to you.")
    assert result.calls[0].arguments == {"city": "Oakland", "cuisine": "Thai"}
    # A possessive and "of" join the name's words: "the restaurant's name", "the name of the restaurant".
    for said, text in (("restaurant's name", "try Nopa for the restaurant's name"),
                       ("name of the restaurant", "the name of the restaurant is Nopa")):
        engine = FakeEngine(scorer=scorer("GetRestaurants", city="Oakland", restaurant_name=[said, "Nopa"]))
        named = parse(engine, f"User: In Oakland, {text}.")
        assert named.calls[0].arguments == {"city": "Oakland", "restaurant_name": "Nopa"}, text


def test_a_number_written_as_a_count_of_something_else_is_not_a_value_in_another_unit():
    """"two orders of it" counts orders: no tip in percent, even where the model likes it there; "a twenty percent
    tip" and "four hours" keep their own units."""
    food = Function(name="OrderFood", description="Order food for delivery.", parameters={
        "type": "object", "properties": {
            "dish": {"type": "string", "description": "What to eat."},
            "quantity": {"type": "integer", "description": "How many portions."},
            "tip_percent": {"type": "integer", "description": "Tip in percent."}}, "required": ["dish"]})
    catalogue = Catalogue(name="food", functions=[food])
    base = scorer("OrderFood", dish="pad thai", quantity=2, tip_percent=[2, 20])

    def likes_tips(prompt: str, candidate: str) -> float:  # the model would rather tip 2% than order two
        return base(prompt, candidate) + (3.0 if prompt.endswith('{"tip_percent": ') and candidate == "2" else 0.0)

    engine = FakeEngine(scorer=likes_tips)

    def arguments(text: str) -> dict:
        result = Pipeline(engine, FakeEmbedder()).parse(text, [], catalogue, get_config("full"), applicable=[])
        return result.calls[0].arguments

    assert arguments("User: get me pad thai, two orders of it.") == {"dish": "pad thai", "quantity": 2}
    assert arguments("User: get me pad thai with a 20 percent tip.")["tip_percent"] == 20
    assert fill.unit_of("tip_percent") == "percent" and fill.unit_of("hours") == "hour"
    assert fill.unit_of("supply_days") == "day" and fill.unit_of("quantity") is None


def test_a_flag_nobody_mentioned_stays_unset_even_when_the_model_likes_true():
    engine = FakeEngine(scorer=scorer("GetRestaurants", city="Oakland", serves_alcohol=True))
    plain = parse(engine, "User: Find restaurants in Oakland")
    assert plain.calls == [Call(name="GetRestaurants", arguments={"city": "Oakland"})]
    said = parse(engine, "User: Find restaurants in Oakland that serve alcohol")
    assert said.calls[0].arguments.get("serves_alcohol") is True


def test_a_value_naming_another_function_is_not_a_chain_and_domain_conditions_are_not_slot_conditions():
    music = Function(name="GetMusic", description="Play music.", parameters={
        "type": "object", "properties": {"song": {"type": "string"}}})
    events = Function(name="GetEvents", description="Find events in a city.", parameters={
        "type": "object", "properties": {"city": {"type": "string", "description": "city of the event"},
                                         "event_type": {"type": "string", "description": "type of event"}}})
    catalogue = Catalogue(name="fun", functions=[events, music, RESTAURANTS])
    engine = FakeEngine(scorer=scorer("GetEvents", event_type="Music", city="Burlingame"))
    grounder = grounded.Grounder(engine, FakeEmbedder(), grounded.load_weights("m"))
    tag = grounded.tag_structured(grounder, "If I ask for Events, my preferred event type is Music", catalogue)
    assert tag.status == "ok" and "IN:GET_MUSIC" not in tag.tagged and "[SL:EVENT_TYPE Music ]" in tag.tagged
    preference = grounded.preference_of(tag, catalogue)
    assert preference.actions == {"event_type": ["Music"]} and not preference.also and not preference.conditions
    # "when requesting Events" only names the request: the city inside it is what the user asks for.
    tag = grounded.tag_structured(grounder, "State that your preferred city when requesting Events is Burlingame.",
                                  catalogue)
    preference = grounded.preference_of(tag, catalogue)
    assert preference.actions == {"city": ["Burlingame"]} and not preference.conditions


def test_the_words_of_a_name_an_instruction_gives_name_no_request_and_no_chain():
    """"check out Golden Lotus Hotel": "Hotel" is the restaurant's name, not the hotel request, so the
    instruction is a restaurant's (the other words say so) and its consequence is a value, not a chain."""
    engine = FakeEngine(scorer=scorer("GetRestaurants", restaurant_name="Golden Lotus Hotel"))
    grounder = grounded.Grounder(engine, FakeEmbedder(), grounded.load_weights("m"))
    text = "If you're in the mood for a Thai restaurant, check out Golden Lotus Hotel."
    tag = grounded.tag_structured(grounder, text, CATALOGUE)
    assert tag.status == "ok" and tag.tagged.startswith("[IN:GET_RESTAURANTS ") and "GET_HOTELS" not in tag.tagged
    assert grounded.preference_of(tag, CATALOGUE).actions == {"restaurant_name": ["Golden Lotus Hotel"]}
    # Where the model takes no value, the name's words still name no chained request.
    unsure = grounded.Grounder(FakeEngine(scorer=scorer("GetRestaurants")), FakeEmbedder(), grounded.load_weights("m"))
    assert "GET_HOTELS" not in grounded.tag_structured(unsure, text, CATALOGUE).tagged


def test_an_instruction_keeps_its_best_value_when_none_clears_the_bar(monkeypatch):
    # The model prefers null for every argument, mildly: no value clears 0.5, so the best one is kept only when its
    # probability reaches the instruction floor.
    engine = FakeEngine(scorer=scorer("GetRestaurants", miss=-6.0))
    grounder = grounded.Grounder(engine, FakeEmbedder(), grounded.load_weights("m"))
    text = "When I search for restaurants, I like Italian food."
    filled = grounder.fill(RESTAURANTS, [Source("instruction", text, text)], text)
    assert filled.choices == [] and filled.runner_up is not None
    monkeypatch.setattr(grounded, "INSTRUCTION_FLOOR", 1.0)
    assert "[SL:" not in grounded.tag_structured(grounder, text, CATALOGUE).tagged
    monkeypatch.setattr(grounded, "INSTRUCTION_FLOOR", 0.0)
    tagged = grounded.tag_structured(grounder, text, CATALOGUE).tagged
    # A tag is a span: the most probable unset value that has words in the instruction (not an enum's own value).
    best = next(u for u in filled.unset if u.texts[0])
    assert best.texts[0] in text and f"[SL:{best.argument.upper()} {best.texts[0]} ]" in tagged


def test_an_instruction_is_read_as_the_request_and_a_flag_it_sets_is_tagged_on_the_words_naming_it():
    engine = FakeEngine(scorer=scorer("GetRestaurants", serves_alcohol=True))
    grounder = grounded.Grounder(engine, FakeEmbedder(), grounded.load_weights("m"))
    text = "If I'm looking for a restaurant, I'd prefer one that serves alcohol."
    tag = grounded.tag_structured(grounder, text, CATALOGUE)
    # A boolean has no span of its own; without the words that name it the tag would drop the preference.
    assert tag.status == "ok" and "[SL:SERVES_ALCOHOL serves alcohol ]" in tag.tagged
    assert grounded.preference_of(tag, CATALOGUE).actions == {"serves_alcohol": [True]}
    # The model reads the instruction as the request's text, never an empty request beside it.
    prompts = [c["prompt"] for c in engine.calls if c["kind"] == "score" and '{"serves_alcohol": ' in c["prompt"]]
    assert prompts and all("User: " + text in p and "Standing instructions" not in p for p in prompts)
    unsaid = grounded.tag_structured(grounder, "When I look for restaurants, I like Italian food.", CATALOGUE)
    assert "SERVES_ALCOHOL" not in unsaid.tagged  # a flag nothing names stays unset, whatever the model likes


@pytest.mark.embedder
def test_an_instruction_that_names_no_function_gets_the_closest_by_meaning(real_embedder):
    engine = FakeEngine(scorer=scorer("GetRestaurants", cuisine="Sushi"))
    tag = grounded.tag_structured(grounded.Grounder(engine, real_embedder, grounded.load_weights("m")),
                                  "If I'm looking for a place to eat, I'd like to have some Sushi.", CATALOGUE)
    assert tag.status == "ok" and tag.tagged.startswith("[IN:GET_RESTAURANTS") and "[SL:CUISINE Sushi ]" in tag.tagged
    alone = grounded.tag_structured(grounded.Grounder(engine, None, grounded.load_weights("m")),
                                    "If I'm looking for a place to eat, I'd like to have some Sushi.", CATALOGUE)
    assert alone.status == "invalid"  # without an embedder only the function's words can name it


def test_a_conditional_instruction_takes_a_value_from_its_consequence_at_the_instruction_floor(monkeypatch):
    # The model is sure of the condition's cuisine and prefers null for everything else: the consequence would
    # state nothing, though a conditional instruction exists to say what follows from its condition.
    engine = FakeEngine(scorer=scorer("GetRestaurants", cuisine="Southern"))
    grounder = grounded.Grounder(engine, FakeEmbedder(), grounded.load_weights("m"))
    text = "If cuisine is Southern, then Bennigan's is the place to go."
    monkeypatch.setattr(grounded, "INSTRUCTION_FLOOR", 1.0)
    bare = grounded.preference_of(grounded.tag_structured(grounder, text, CATALOGUE), CATALOGUE)
    assert bare.conditions == {"cuisine": "Southern"} and bare.actions == {}
    monkeypatch.setattr(grounded, "INSTRUCTION_FLOOR", 0.0)
    tag = grounded.tag_structured(grounder, text, CATALOGUE)
    preference = grounded.preference_of(tag, CATALOGUE)
    assert preference.conditions == {"cuisine": "Southern"}
    [(argument, values)] = preference.actions.items()
    assert values[0] in "then Bennigan's is the place to go"  # a span of the consequence, as an action
    chained = "If I ask for Restaurants, then also look at Hotels."
    filled = grounder.fill(RESTAURANTS, [Source("instruction", chained, chained)], chained)
    assert any(c.texts == ["Hotels"] for c in filled.unset)  # there is a span to take, yet it is not a value:
    assert grounded._consequence_value(filled, [], chained, "also look at Hotels", grounded.DomainModel.build(CATALOGUE),
                                       "GetRestaurants") == []  # the consequence names another request (a chain)


def test_an_empty_fill_is_not_a_refusal_only_relevance_evidence_refuses():
    """Issue 27 (5): a request the catalogue serves is call or ask even when the model fills nothing; a refusal
    needs relevance evidence (the fake embedder has no fitted threshold, so none here). The old rule, which
    refused when the request named no function and filled no required argument, is the `refuse_unfilled`
    ablation."""
    engine = FakeEngine(scorer=scorer("GetHotels"))
    unfilled = parse(engine, "User: find a city in a country", allow_refuse=True)
    assert unfilled.decision == "ask" and unfilled.missing and unfilled.question
    assert not any("names none of them" in n for n in unfilled.notes)
    ablation = parse(engine, "User: find a city in a country", allow_refuse=True, refuse_unfilled=True)
    assert ablation.decision == "refuse" and ablation.calls == [] and ablation.question is None
    assert any("names none of them" in n for n in ablation.notes)
    named = parse(engine, "User: I need a hotel", allow_refuse=True, refuse_unfilled=True)  # names it: asks
    assert named.decision == "ask" and named.missing[0].argument == "location"
    hosted = parse(engine, "User: what is the capital of France?")  # no refusals allowed (NLSI): still asks
    assert hosted.decision == "ask"


def test_a_sentences_first_word_does_not_make_the_next_word_part_of_a_name():
    from prefcall.strategies.grounding.evidence import FEATURES, FeatureContext, features

    text = "Find Italian food near Rome"
    pool = argument_candidates("cuisine", RESTAURANTS.properties["cuisine"], [Source("user", text, "turn 0")])
    rows = features(FeatureContext(RESTAURANTS, None), "cuisine", RESTAURANTS.properties["cuisine"], pool.candidates)
    cut = dict(zip([c.text for c in pool.candidates], rows[:, FEATURES.index("cuts_name")]))
    assert cut["Italian"] == 0.0  # "Find" is capitalised because it starts the sentence
    inside = argument_candidates("cuisine", RESTAURANTS.properties["cuisine"],
                                 [Source("user", "Book at Casa Italian Kitchen", "turn 0")])
    rows = features(FeatureContext(RESTAURANTS, None), "cuisine", RESTAURANTS.properties["cuisine"], inside.candidates)
    cut = dict(zip([c.text for c in inside.candidates], rows[:, FEATURES.index("cuts_name")]))
    assert cut["Italian"] == 1.0  # inside "Casa Italian Kitchen" it cuts a name


def test_a_number_that_opens_a_capitalised_name_alone_cuts_the_name():
    """"I prefer 1512 Barber Shop": the number is the name's first word, so "1512" alone cuts the name (a phone
    number or a count must not take it), as a capitalised piece does; before a calendar or clock word ("5 March",
    "7 PM") or a lowercase word ("4 people") a number opens no name."""
    from prefcall.strategies.grounding.evidence import FEATURES, FeatureContext, features

    def cut(text: str, span: str) -> float:
        start = text.index(span)
        candidate = fill.Candidate(span, span, Source("user", text, text), start, start + len(span))
        row = features(FeatureContext(RESTAURANTS, None), "restaurant_name",
                       RESTAURANTS.properties["restaurant_name"], [candidate])
        return float(row[0, FEATURES.index("cuts_name")])

    assert cut("I prefer to go to 1512 Barber Shop when I get a salon treatment.", "1512") == 1.0
    assert cut("I prefer to go to 1512 Barber Shop when I get a salon treatment.", "1512 Barber Shop") == 0.0
    assert cut("a table on 5 March", "5") == 0.0
    assert cut("a table at 7 PM", "7") == 0.0
    assert cut("a table for 4 people", "4") == 0.0


def test_a_titles_full_stop_ends_no_sentence_and_a_span_ending_on_the_title_cuts_the_name():
    from prefcall.strategies.grounding.evidence import FEATURES, FeatureContext, features

    text = "I'd like a table, and specifically Dr. Abazari Mina MD as the host."
    pool = argument_candidates("restaurant_name", RESTAURANTS.properties["restaurant_name"],
                               [Source("user", text, "turn 0")])
    rows = features(FeatureContext(RESTAURANTS, None), "restaurant_name", RESTAURANTS.properties["restaurant_name"],
                    pool.candidates)
    shape = {c.text: (r[FEATURES.index("close_right")], r[FEATURES.index("cuts_name")])
             for c, r in zip(pool.candidates, rows)}
    assert shape["Dr"] == (0.0, 1.0)  # the stop after "Dr" is the title's: the name goes on
    assert shape["Dr. Abazari Mina MD"] == (1.0, 0.0)
    # A stop after a word that is no title still ends the sentence.
    ended = argument_candidates("restaurant_name", RESTAURANTS.properties["restaurant_name"],
                                [Source("user", "Book Nopa. Tomorrow works.", "turn 0")])
    rows = features(FeatureContext(RESTAURANTS, None), "restaurant_name", RESTAURANTS.properties["restaurant_name"],
                    ended.candidates)
    assert dict(zip([c.text for c in ended.candidates], rows[:, FEATURES.index("close_right")]))["Nopa"] == 1.0


@pytest.mark.embedder
def test_a_request_no_function_is_about_is_refused_whatever_the_filler_found(real_embedder, monkeypatch):
    # Stage 1 picks calculate_time and the request says "time" (a word of its name); the request's similarity to
    # the function's text decides, for an ask and for a call alike. The threshold is set between the two requests'
    # similarities here (the shipped one is fitted: data/relevance.json).
    timing = Function(name="calculate_time", description="Calculates the time taken to cover a distance at a "
                      "certain speed.", parameters={"type": "object", "properties": {
                          "distance": {"type": "number"}, "speed": {"type": "number"}},
                          "required": ["distance", "speed"]})
    catalogue = Catalogue(name="physics", functions=[timing])
    off, on = "What's the time right now?", "How much time will it take to cover 30 km at 15 km/h?"
    near = relevance.similarities(real_embedder, on, [timing])["calculate_time"]
    far = relevance.similarities(real_embedder, off, [timing])["calculate_time"]
    assert far < near
    assert relevance.ask_rule(FakeEmbedder()) is None  # an embedder without a fitted threshold: answers stand
    fitted = relevance.ask_rule(real_embedder)
    monkeypatch.setattr(relevance, "ask_rule",
                        lambda embedder: fitted.model_copy(update={"threshold": round((far + near) / 2, 3), "weights": None}))

    def parse(text: str, **filled):
        pipeline = Pipeline(FakeEngine(scorer=scorer("calculate_time", **filled)), real_embedder)
        return pipeline.parse(f"User: {text}", [], catalogue, get_config("full", allow_refuse=True))

    for found in ({}, {"distance": "30"}):  # nothing filled (an ask) or a value the filler took (a call or ask)
        off_topic = parse(off, **found)
        assert off_topic.decision == "refuse" and off_topic.question is None and off_topic.missing == []
        assert any("not about them" in n and "all-MiniLM-L6-v2" in n for n in off_topic.notes)
        assert "ask_relevance" in off_topic.trace.timings
    assert parse(on).decision == "ask"  # it fits and gives no values the fake filler takes: ask
    ablation = Pipeline(FakeEngine(scorer=scorer("calculate_time")), real_embedder).parse(
        f"User: {off}", [], catalogue, get_config("full", allow_refuse=True, ask_relevance=False))
    assert ablation.decision == "ask"


@pytest.mark.embedder
def test_the_shipped_rule_weighs_more_than_the_best_cosine(real_embedder):
    # "Who won the football match yesterday?" is as near the weather function's text as the cosine-only rule
    # (0.12) allowed; the fitted rule also reads that the request uses none of the function's words and is far
    # from its description and arguments, and refuses it. A real weather request stays, however it is worded.
    weather = Function(name="get_current_weather", description="Get the current weather in a given location",
                       parameters={"type": "object", "properties": {
                           "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["location"]})
    rule = relevance.ask_rule(real_embedder)
    assert rule is not None and rule.weights is not None
    off = "Who won the football match yesterday?"
    assert relevance.similarities(real_embedder, off, [weather])["get_current_weather"] >= 0.12
    found = relevance.unrelated(real_embedder, off, [weather])
    assert found is not None and found.closest == "get_current_weather" and "relevance score" in found.describe()
    for on in ("What are the current weather conditions in Tel Aviv?", "Is it raining in Oslo right now?"):
        assert relevance.unrelated(real_embedder, on, [weather]) is None, on
    stale = rule.model_copy(update={"features": ["cosine"]})
    with pytest.raises(ConfigError, match="refit it with `prefcall fit --relevance`"):
        stale.score(relevance.evidence(real_embedder, off, [weather]))


@pytest.mark.embedder
def test_a_request_worded_far_from_its_function_is_not_refused_by_the_shipped_threshold(real_embedder, monkeypatch):
    flights = Function(name="book_flight", description="Books a flight between two cities.", parameters={
        "type": "object", "properties": {"origin": {"type": "string", "description": "departure city"},
                                         "destination": {"type": "string", "description": "arrival city"}},
        "required": ["origin", "destination"]})
    catalogue = Catalogue(name="air", functions=[flights])
    base = scorer("book_flight", destination="Paris")

    def sure(prompt: str, candidate: str) -> float:  # the model names the function for this request only
        if candidate.strip() == "book_flight" and "Paris" not in prompt:
            return -3.0  # content-free calibration prompts: stage 1's evidence is the request's, not the name's
        return base(prompt, candidate)

    pipeline = Pipeline(FakeEngine(scorer=sure), real_embedder)
    text = "User: Get me to Paris tomorrow"
    far = relevance.similarities(real_embedder, text[6:], [flights])["book_flight"]
    assert far < 0.37  # under the threshold fitted on BFCL alone before; the broad fit keeps it
    assert relevance.unrelated(real_embedder, text[6:], [flights]) is None
    result = pipeline.parse(text, [], catalogue, get_config("full", allow_refuse=True))
    assert result.decision == "ask" and [m.argument for m in result.missing] == ["origin"]
    # The older scope reads only asks that fill no required argument: this one fills one, so even a high
    # threshold leaves it alone there.
    fitted = relevance.ask_rule(real_embedder)
    monkeypatch.setattr(relevance, "ask_rule", lambda embedder: fitted.model_copy(update={"threshold": 0.6, "weights": None}))
    old = pipeline.parse(text, [], catalogue, get_config("full", allow_refuse=True, relevance_scope="unfilled_asks"))
    assert old.decision == "ask"
    assert pipeline.parse(text, [], catalogue, get_config("full", allow_refuse=True)).decision == "refuse"


def test_two_unconditional_instructions_for_one_argument_give_one_call_per_value():
    """"My city is Oakland" and "Berkeley works too": two wishes, two calls, each value with its instruction; a
    conditional instruction never adds a second value, and the user's own value still wins over both."""
    oakland = Preference(instruction="My city for restaurants is Oakland", function="GetRestaurants",
                         actions={"city": ["Oakland"]})
    berkeley = Preference(instruction="Berkeley works too for restaurants", function="GetRestaurants",
                          actions={"city": ["Berkeley"]})
    thai = Preference(instruction="I like Thai food", function="GetRestaurants", actions={"cuisine": ["Thai"]})
    draft = Draft(name="GetRestaurants")
    draft.set("party_size", [2], Provenance(argument="party_size", value=2, origin="user"))
    applied = apply_preferences([draft], [oakland, berkeley, thai], CATALOGUE)
    calls = [c.arguments for d in applied.drafts for c in d.calls()]
    assert calls == [{"party_size": 2, "city": "Oakland", "cuisine": "Thai"},
                     {"party_size": 2, "city": "Berkeley", "cuisine": "Thai"}]
    assert [d.provenance["city"].instruction for d in applied.drafts] == [oakland.instruction, berkeley.instruction]
    assert applied.used == [oakland.instruction, berkeley.instruction, thai.instruction]

    steak = Preference(instruction="If cuisine is Thai then the city is Alameda", function="GetRestaurants",
                       conditions={"cuisine": "Thai"}, actions={"city": ["Alameda"]})
    applied = apply_preferences([Draft(name="GetRestaurants")], [oakland, thai, steak], CATALOGUE)
    assert [c.arguments["city"] for d in applied.drafts for c in d.calls()] == ["Oakland"]

    stated = Draft(name="GetRestaurants")
    stated.set("city", ["Fremont"], Provenance(argument="city", value="Fremont", origin="user"))
    applied = apply_preferences([stated], [oakland, berkeley], CATALOGUE)
    assert [c.arguments for d in applied.drafts for c in d.calls()] == [{"city": "Fremont"}]


def test_an_instruction_whose_condition_cannot_be_checked_yields_to_every_other_one():
    """"If you're after seafood, Akiko's is the place" with no tagged value in its condition: it cannot be checked,
    so it comes after the others and adds no second value beside theirs (given first or last)."""
    from prefcall.strategies.preferences import preference_from_tags
    from prefcall.tagging.tags import parse_tags

    seafood = Preference(instruction="When I search for Restaurants, my preferred cuisine is seafood.",
                         function="GetRestaurants", actions={"cuisine": ["seafood"]})
    text = "If you're after seafood, Sushi is the place to go."
    unchecked = preference_from_tags(text, parse_tags(f"[IN:GET_RESTAURANTS If you're after seafood, "
                                                      f"[SL:CUISINE Sushi ] is the place to go. ]"), CATALOGUE)
    assert unchecked is not None and unchecked.unchecked_condition and not unchecked.conditions
    for order in ([unchecked, seafood], [seafood, unchecked]):
        applied = apply_preferences([Draft(name="GetRestaurants")], order, CATALOGUE)
        assert [c.arguments for d in applied.drafts for c in d.calls()] == [{"cuisine": "seafood"}]
    alone = apply_preferences([Draft(name="GetRestaurants")], [unchecked], CATALOGUE)
    assert [c.arguments for d in alone.drafts for c in d.calls()] == [{"cuisine": "Sushi"}]
    plain = preference_from_tags("I like [SL:CUISINE Sushi ]", parse_tags(
        "[IN:GET_RESTAURANTS I like [SL:CUISINE Sushi ] ]"), CATALOGUE)
    assert plain is not None and not plain.unchecked_condition
    # A clause that names the request in other words is no condition: two such wishes are two calls.
    visit = preference_from_tags("When I visit attractions, I want Oakland.", parse_tags(
        "[IN:GET_TRAVEL When I visit attractions, I want [SL:LOCATION Oakland ] . ]"), CATALOGUE)
    berkeley = Preference(instruction="Berkeley is also fine for attractions", function="GetTravel",
                          actions={"location": ["Berkeley"]})
    assert visit is not None and not visit.unchecked_condition
    applied = apply_preferences([Draft(name="GetTravel")], [visit, berkeley], CATALOGUE)
    assert [c.arguments["location"] for d in applied.drafts for c in d.calls()] == ["Oakland", "Berkeley"]


def test_values_joined_by_and_are_one_value_alternatives_two():
    """"pizza and pasta" names one cuisine (the span covering both is the value); "pizza or pasta" two calls."""
    joined = parse(FakeEngine(scorer=scorer("GetRestaurants", city="Boston", cuisine=["pizza", "pasta"])),
                   "User: somewhere with pizza and pasta in Boston")
    assert joined.calls == [Call(name="GetRestaurants", arguments={"city": "Boston", "cuisine": "pizza and pasta"})]
    either = parse(FakeEngine(scorer=scorer("GetRestaurants", city="Boston", cuisine=["pizza", "pasta"])),
                   "User: somewhere with pizza or pasta in Boston")
    assert sorted(c.arguments["cuisine"] for c in either.calls) == ["pasta", "pizza"]


def test_an_enum_value_written_in_a_derived_form_is_written():
    """"a sporting event" writes Sports, "a musical" Music; a shorter form ("check") does not write "checking"."""
    from prefcall.strategies.grounding.values import enum_candidates

    sources = [Source("user", "Find me a sporting event or a musical, and check my balance")]
    found = {c.value: c.text for c in enum_candidates({"enum": ["Music", "Sports", "checking"]}, sources)}
    assert found == {"Music": "musical", "Sports": "sporting", "checking": ""}
    exact = enum_candidates({"enum": ["Sports"]}, [Source("user", "sports tonight, not sporting goods")])
    assert exact[0].text == "sports" and exact[0].start == 0
    priced = {c.value: c.text for c in enum_candidates({"enum": ["inexpensive", "moderate", "expensive"]},
                                                       [Source("user", "somewhere moderately priced")])}
    assert priced == {"inexpensive": "", "moderate": "moderately", "expensive": ""}
    cheap = {c.value: c.text for c in enum_candidates({"enum": ["inexpensive", "expensive"]},
                                                      [Source("user", "a place to eat inexpensively")])}
    assert cheap == {"inexpensive": "inexpensively", "expensive": ""}


def test_the_argument_an_instruction_names_is_cued_even_across_a_clause():
    """"My preferred city for a Dentist is Napa": the owner words ("my preferred") name the city, so the span gets
    the city's cue; "Dentist" just before "is" names the request (GetDentists), not the dentist's name."""
    from prefcall.strategies.grounding.evidence import FeatureContext, features, FEATURES

    dentists = Function(name="GetDentists", description="Find a dentist.", parameters={
        "type": "object", "properties": {"city": {"type": "string"}, "dentist_name": {"type": "string"}}})
    text = "My preferred city for a Dentist is Napa."
    start = text.index("Napa")
    napa = fill.Candidate("Napa", "Napa", Source("instruction", text, text), start, start + 4)
    ctx = FeatureContext(function=dentists, embedder=None)
    cue = FEATURES.index("cue")
    city = features(ctx, "city", dentists.properties["city"], [napa])[0, cue]
    name = features(ctx, "dentist_name", dentists.properties["dentist_name"], [napa])[0, cue]
    assert city > 0 and name == 0
    # The argument's own words still cue directly; another sentence's owner words do not.
    other = "Find a dentist. My preferred city: Napa."
    start = other.index("Napa")
    direct = fill.Candidate("Napa", "Napa", Source("instruction", other, other), start, start + 4)
    assert features(ctx, "city", dentists.properties["city"], [direct])[0, cue] > 0
    far = "My preferred city is near. A Dentist is Napa."
    start = far.index("Napa")
    cut = fill.Candidate("Napa", "Napa", Source("instruction", far, far), start, start + 4)
    assert features(ctx, "city", dentists.properties["city"], [cut])[0, cue] == 0


def test_an_arguments_word_cues_no_span_across_a_clause_break():
    """"If you're after Izakaya cuisine, Meiko Sushi is a good restaurant": "cuisine" heads the phrase before the
    comma; it cues "Izakaya" (just before it) and not "Meiko Sushi" (after the comma). Without a break it does."""
    from prefcall.strategies.grounding.evidence import FeatureContext, features, FEATURES

    restaurants = Function(name="GetRestaurants", description="Find a restaurant.", parameters={
        "type": "object", "properties": {"cuisine": {"type": "string"}, "restaurant_name": {"type": "string"}}})
    ctx = FeatureContext(function=restaurants, embedder=None)
    cue = FEATURES.index("cue")

    def cued(text: str, span: str) -> float:
        start = text.index(span)
        candidate = fill.Candidate(span, span, Source("instruction", text, text), start, start + len(span))
        return float(features(ctx, "cuisine", restaurants.properties["cuisine"], [candidate])[0, cue])

    text = "If you're after Izakaya cuisine, Meiko Sushi is a good restaurant to try."
    assert cued(text, "Izakaya") > 0
    assert cued(text, "Meiko Sushi") == 0
    assert cued("Thai. Cuisine matters; Meiko Sushi", "Meiko Sushi") == 0  # a full stop or semicolon breaks too
    assert cued("my preferred cuisine is Thai", "Thai") > 0
    assert cued("my preferred cuisine: Thai", "Thai") > 0  # a colon introduces the value, it breaks nothing
    assert cued("Thai, cuisine", "Thai") == 0 and cued("Thai cuisine", "Thai") > 0

def test_an_enum_value_written_after_its_arguments_name_goes_to_that_argument():
    """"my preferred event type is Music": the string argument `category` would take any span, but the instruction
    names event_type, whose enum holds Music."""
    events = Function(name="GetEvents", description="Find events.", parameters={"type": "object", "properties": {
        "category": {"type": "string"}, "event_type": {"enum": ["Music", "Sports"]}}})
    engine = FakeEngine(scorer=scorer("GetEvents", category="Music", event_type="Music"))  # both sure
    text = "If I ask for Events, my preferred event type is Music"
    filled = fill.fill_arguments(engine, events, [Source("instruction", text, text)], text,
                                 fill.FeatureContext(function=events, embedder=FakeEmbedder()),
                                 grounded.load_weights())
    assert {c.argument: c.values for c in filled.choices} == {"event_type": ["Music"]}


def test_a_span_that_is_probably_some_arguments_value_goes_to_the_most_probable_one():
    """The model reads "Walnut Creek" as a city, an address or a restaurant's name, none alone past 0.5; the three
    readings exclude each other and add up to a value: the city's. A span that is probably no value stays out."""
    places = Function(name="FindPlaces", description="Find places.", parameters={"type": "object", "properties": {
        "city": {"type": "string"}, "street_address": {"type": "string"}, "restaurant_name": {"type": "string"}}})
    text = "a spot in Walnut Creek"

    def fill_with(pooled: bool, null: float = -0.6):
        def score(prompt: str, candidate: str) -> float:
            argument = re.search(r'\{"(\w+)": $', prompt)
            odds = {"city": -0.9, "street_address": -1.4, "restaurant_name": -2.2}.get(
                argument.group(1) if argument else "")
            if odds is None:
                return -0.1
            return odds if candidate == '"Walnut Creek"' else null if candidate == "null" else -9.0

        weights = grounded.load_weights().model_copy(update={"span": (0.0, 1.0, 0.0), "pooled_spans": pooled})
        return fill.fill_arguments(FakeEngine(scorer=score), places, [Source("user", text, "turn 1")], text,
                                   fill.FeatureContext(function=places, embedder=FakeEmbedder()), weights)

    alone = fill_with(False)
    assert alone.choices == [] and 0.3 < alone.considered["city"] < 0.5
    pooled = fill_with(True)
    assert [(c.argument, c.values) for c in pooled.choices] == [("city", ["Walnut Creek"])]
    assert fill_with(True, null=0.5).choices == []  # 0.2 + 0.13 + 0.06: probably no value


def test_a_pooled_or_left_over_name_keeps_the_credential_written_after_it():
    """"Jay Bansal, MD": the abbreviation a comma ties to a name is part of it, whichever way the name is taken:
    pooled over the arguments that might hold it, or left unset for an instruction's reading to take."""
    people = Function(name="FindDoctors", description="Find doctors.", parameters={"type": "object", "properties": {
        "doctor_name": {"type": "string"}, "city": {"type": "string"}, "street_address": {"type": "string"}}})
    text = "a visit to Jay Bansal, MD"

    def fill_with(pooled: bool):
        def score(prompt: str, candidate: str) -> float:
            argument = re.search(r'\{"(\w+)": $', prompt)
            odds = {"doctor_name": -0.9, "city": -1.4, "street_address": -2.2}.get(argument.group(1) if argument else "")
            if odds is None:
                return -0.1
            return odds if candidate == '"Jay Bansal"' else -0.6 if candidate == "null" else -9.0

        weights = grounded.load_weights().model_copy(update={"span": (0.0, 1.0, 0.0), "pooled_spans": pooled})
        return fill.fill_arguments(FakeEngine(scorer=score), people, [Source("user", text, "turn 1")], text,
                                   fill.FeatureContext(function=people, embedder=FakeEmbedder()), weights)

    assert [(c.argument, c.values) for c in fill_with(True).choices] == [("doctor_name", ["Jay Bansal, MD"])]
    alone = fill_with(False)
    assert alone.choices == [] and alone.runner_up.values == ["Jay Bansal, MD"]
    assert alone.unset[0].values == ["Jay Bansal, MD"]


def test_a_flag_is_named_by_its_thing_not_by_its_relation_verb():
    """serves_alcohol: "serves freshwater fish" names no alcohol, so the flag stays unset even for a model that
    says yes to it; "serves alcohol" sets it."""
    yes = scorer("GetRestaurants", city="Fremont", cuisine="freshwater fish", serves_alcohol=True)
    fish = parse(FakeEngine(scorer=yes), "User: a restaurant in Fremont that serves freshwater fish")
    assert fish.calls and "serves_alcohol" not in fish.calls[0].arguments
    drinks = parse(FakeEngine(scorer=yes), "User: a restaurant in Fremont that serves alcohol")
    assert drinks.calls and drinks.calls[0].arguments.get("serves_alcohol") is True


def test_a_function_word_of_a_flags_name_names_no_flag():
    """good_for_kids: the "for" of "If I ask for Travel" says nothing about children; "kids" does."""
    from prefcall.strategies.grounding.fill import flag_mention

    assert flag_mention("good_for_kids", "If I ask for Travel, then also look at Hotels") is None
    assert flag_mention("good_for_kids", "I'd like my travel to be suitable for kids") == "kids"
    assert flag_mention("has_live_music", "somewhere that has live music") == "has live music"


def test_an_instruction_that_turns_a_flag_off_is_tagged_with_its_negation_and_sets_false():
    """"I prefer no shuffle", "unfurnished places": a False preference is a tag on the negated words (a tag is a
    span; without one the preference was lost, and "no pets" even read as a request for pet care)."""
    music = Function(name="PlayMusic", description="Play music.", parameters={
        "type": "object", "properties": {"artist": {"type": "string"}, "shuffle": {"type": "boolean"}}})
    flats = Function(name="SearchApartments", description="Search apartments for rent.", parameters={
        "type": "object", "properties": {"city": {"type": "string"}, "furnished": {"type": "boolean"},
                                         "pets_allowed": {"type": "boolean"}}})
    catalogue = Catalogue(name="home", functions=[music, flats])
    for function, text, argument, words in [
            ("PlayMusic", "If I ask for Music, I prefer no shuffle.", "shuffle", "no shuffle"),
            ("SearchApartments", "When I look for an apartment, I want unfurnished places.", "furnished", "unfurnished"),
            ("SearchApartments", "I prefer no pets when I look for an apartment.", "pets_allowed", "no pets")]:
        engine = FakeEngine(scorer=scorer(function, **{argument: False}))
        grounder = grounded.Grounder(engine, FakeEmbedder(), grounded.load_weights("m"))
        tag = grounded.tag_structured(grounder, text, catalogue)
        assert f"[SL:{argument.upper()} {words} ]" in tag.tagged, tag.tagged
        assert grounded.preference_of(tag, catalogue).actions == {argument: [False]}
    engine = FakeEngine(scorer=scorer("SearchApartments", pets_allowed=True))
    grounder = grounded.Grounder(engine, FakeEmbedder(), grounded.load_weights("m"))
    tag = grounded.tag_structured(grounder, "When I look for an apartment, I want pet friendly places.", catalogue)
    assert grounded.preference_of(tag, catalogue).actions == {"pets_allowed": [True]}  # "pet" names pets


def test_a_flag_is_named_by_a_form_of_its_word_and_a_negating_prefix_turns_it_off():
    assert fill.flag_mention("delivery", "a refill of metformin delivered to my home") == "delivered"
    assert fill.flag_mention("pets_allowed", "a flat that allows pets") == "allows pets"
    assert fill.flag_mention("is_kid_friendly", "a kidney specialist") is None  # a longer word is no form of it
    assert fill.flag_mention("furnished", "an unfurnished flat", negated=True) == "unfurnished"
    assert fill.flag_mention("breakfast", "a room without breakfast, please", negated=True) == "without breakfast"
    assert fill.flag_mention("breakfast", "a room with breakfast", negated=True) is None
    assert fill.flag_value("furnished", "unfurnished") is False and fill.flag_value("furnished", "furnished")
    assert fill.flag_value("university_housing", "university") is True  # a prefix negates the flag's word only
    yes = scorer("GetRestaurants", city="Fremont", serves_alcohol=False)
    dry = parse(FakeEngine(scorer=yes), "User: a restaurant in Fremont that is non-alcoholic")
    assert dry.calls and dry.calls[0].arguments.get("serves_alcohol") is False


def test_a_value_goes_to_the_argument_whose_name_the_text_writes_before_it_most_fully():
    """account_type and recipient_account_type share their options: "my preferred recipient account type is
    savings" sets recipient_account_type, "my preferred account type is checking" sets account_type, whichever
    argument the model likes more."""
    kinds = {"enum": ["checking", "savings"]}
    transfer = Function(name="TransferMoney", description="Move money between bank accounts.", parameters={
        "type": "object", "properties": {"recipient_name": {"type": "string"}, "account_type": kinds,
                                         "recipient_account_type": kinds}})
    catalogue = Catalogue(name="bank", functions=[transfer])
    both = scorer("TransferMoney", account_type=["checking", "savings"],
                  recipient_account_type=["checking", "savings"])
    grounder = grounded.Grounder(FakeEngine(scorer=both), FakeEmbedder(), grounded.load_weights("m"))
    for text, argument, value in [
            ("If I ask for Money Transfers, my preferred recipient account type is savings.",
             "recipient_account_type", "savings"),
            ("If I ask for Money Transfers, my preferred account type is checking.", "account_type", "checking")]:
        tag = grounded.tag_structured(grounder, text, catalogue)
        assert grounded.preference_of(tag, catalogue).actions == {argument: [value]}, tag.tagged
    filled = grounder.fill(transfer, [Source("user", "Send Ana 5 dollars; recipient account type: savings", "u")],
                           "User: Send Ana 5 dollars; recipient account type: savings")
    assert {c.argument: c.values for c in filled.choices}.get("recipient_account_type") == ["savings"]
    assert "account_type" not in {c.argument for c in filled.choices}
    # A function word of a name names nothing: "in Denver" is no check-in date.
    lodging = Function(name="FindLodging", description="Find a place to stay.", parameters={
        "type": "object", "properties": {"city": {"type": "string"}, "check_in": {"type": "string"}}})
    from prefcall.strategies.grounding.evidence import FeatureContext

    source = Source("user", "I need a place to stay in Denver for 3 guests", "u")
    pools = {n: argument_candidates(n, lodging.properties[n], [source]) for n in lodging.properties}
    assert fill._span_owners(pools, FeatureContext(lodging, None)) == {}
    source = Source("user", "I need a place to stay; check in Denver", "u")  # "check" is its content word
    pools = {n: argument_candidates(n, lodging.properties[n], [source]) for n in lodging.properties}
    assert set(fill._span_owners(pools, FeatureContext(lodging, None)).values()) == {"check_in"}
    # A word that names the function names no argument: "my preferred city for a Dentist is Sunnyvale".
    dentists = Function(name="GetDentists", description="Find a dentist.", parameters={
        "type": "object", "properties": {"city": {"type": "string"}, "dentist_name": {"type": "string"}}})
    source = Source("instruction", "State that your preferred city for a Dentist is Sunnyvale.", "i")
    pools = {n: argument_candidates(n, dentists.properties[n], [source]) for n in dentists.properties}
    assert "dentist_name" not in fill._span_owners(pools, FeatureContext(dentists, None)).values()
    # The name must be in the value's clause: "recipient account type, savings" names nothing.
    source = Source("user", "recipient account type, savings", "u")
    pools = {n: argument_candidates(n, transfer.properties[n], [source]) for n in transfer.properties}
    assert fill._span_owners(pools, FeatureContext(transfer, None)) == {}


def test_from_and_into_give_a_pair_of_arguments_their_values_and_an_instruction_takes_the_open_twin():
    """"from my checking account into their savings account": the account the money leaves is checking, whatever
    the model likes; an instruction for the argument the user already gave sets its open twin instead."""
    kinds = {"enum": ["checking", "savings"]}
    transfer = Function(name="TransferMoney", description="Move money between bank accounts.", parameters={
        "type": "object", "properties": {
            "recipient_name": {"type": "string"},
            "account_type": {**kinds, "description": "The account the money leaves."},
            "recipient_account_type": {**kinds, "description": "The recipient's account."}}})
    swapped = scorer("TransferMoney", recipient_name="Priya", account_type="savings",
                     recipient_account_type="checking")
    grounder = grounded.Grounder(FakeEngine(scorer=swapped), FakeEmbedder(), grounded.load_weights("m"))
    text = "Transfer 75 dollars to Priya from my checking account into their savings account"
    filled = grounder.fill(transfer, [Source("user", text, "u")], "User: " + text)
    values = {c.argument: c.values for c in filled.choices}
    assert values["account_type"] == ["checking"] and values["recipient_account_type"] == ["savings"]
    draft = Draft(name="TransferMoney")
    draft.set("recipient_account_type", ["checking"], Provenance(argument="recipient_account_type",
                                                                 value="checking", origin="user"))
    wish = Preference(instruction="When I transfer money, I want my savings account.", function="TransferMoney",
                      actions={"recipient_account_type": ["savings"]})
    catalogue = Catalogue(name="bank", functions=[transfer])
    applied = apply_preferences([draft], [wish], catalogue)
    assert applied.drafts[0].values == {"recipient_account_type": ["checking"], "account_type": ["savings"]}
    same = apply_preferences([draft], [wish.model_copy(update={"actions": {"recipient_account_type": ["checking"]}})],
                             catalogue)
    assert same.drafts[0].values == {"recipient_account_type": ["checking"]}  # the same value: nothing to move


def test_a_value_written_twice_fills_both_arguments_of_a_pair():
    """"into their checking account from my checking account": each mention is one account's, so both are
    checking; the first mention alone (the recipient's, after "into") would leave the sender's account to the
    profile."""
    kinds = {"enum": ["checking", "savings"]}
    transfer = Function(name="TransferMoney", description="Move money between bank accounts.", parameters={
        "type": "object", "properties": {
            "account_type": {**kinds, "description": "The account the money leaves."},
            "recipient_account_type": {**kinds, "description": "The recipient's account."}}})
    both = scorer("TransferMoney", account_type="checking", recipient_account_type="checking")
    grounder = grounded.Grounder(FakeEngine(scorer=both), FakeEmbedder(), grounded.load_weights("m"))
    text = "Send 200 dollars into their checking account from my checking account"
    filled = grounder.fill(transfer, [Source("user", text, "u")], "User: " + text)
    spans = {c.argument: (c.values, c.texts) for c in filled.choices}
    assert spans == {"account_type": (["checking"], ["checking"]),
                     "recipient_account_type": (["checking"], ["checking"])}
    once = "Send 200 dollars into their checking account"
    filled = grounder.fill(transfer, [Source("user", once, "u")], "User: " + once)
    assert [c.argument for c in filled.choices] == ["recipient_account_type"]


def test_an_instruction_about_another_kind_of_the_request_gives_none_of_its_values():
    """"Search for Sushi restaurants that serve alcohol": about Sushi restaurants. A request for a Diner takes none
    of its values; a request that names no cuisine takes them all; "I like Sushi" is no kind of request."""
    from prefcall.strategies.preferences import preference_from_tags
    from prefcall.tagging.tags import parse_tags

    text = "Search for Sushi restaurants that serve alcohol."
    sushi = preference_from_tags(text, parse_tags("[IN:GET_RESTAURANTS Search for [SL:CUISINE Sushi ] restaurants "
                                                  "that [SL:SERVES_ALCOHOL serve alcohol ] . ]"), CATALOGUE)
    assert sushi is not None and sushi.kinds == {"cuisine": "Sushi"}
    diner = Draft(name="GetRestaurants")
    diner.set("cuisine", ["Diner"], Provenance(argument="cuisine", value="Diner", origin="user"))
    applied = apply_preferences([diner], [sushi], CATALOGUE)
    assert [c.arguments for d in applied.drafts for c in d.calls()] == [{"cuisine": "Diner"}]
    assert text in applied.skipped
    open_request = apply_preferences([Draft(name="GetRestaurants")], [sushi], CATALOGUE)
    assert [c.arguments for d in open_request.drafts for c in d.calls()] == [{"cuisine": "Sushi",
                                                                              "serves_alcohol": True}]
    plain = preference_from_tags("I like Sushi with alcohol", parse_tags(
        "[IN:GET_RESTAURANTS I like [SL:CUISINE Sushi ] with [SL:SERVES_ALCOHOL alcohol ] ]"), CATALOGUE)
    assert plain is not None and plain.kinds == {}
    applied = apply_preferences([diner], [plain], CATALOGUE)
    assert [c.arguments for d in applied.drafts for c in d.calls()] == [{"cuisine": "Diner", "serves_alcohol": True}]


DISTANCE = Function(name="euclidean_distance", description="Distance between two points.", parameters={
    "type": "object", "properties": {
        "pointA": {"type": "array", "items": {"type": "integer"}, "description": "Coordinates of point A."},
        "pointB": {"type": "array", "items": {"type": "integer"}, "description": "Coordinates of point B."},
        "rounding": {"type": "integer", "description": "Decimals to round to."}},
    "required": ["pointA", "pointB"]})


def parse_distance(engine: FakeEngine, request: str):
    return Pipeline(engine, FakeEmbedder()).parse(f"User: {request}", [], Catalogue(name="geometry", functions=[DISTANCE]),
                                                  get_config("full"))


def test_a_free_argument_is_written_under_its_grammar_and_kept_only_when_every_part_is_in_the_request():
    engine = FakeEngine(scorer=scorer("euclidean_distance"))
    engine.reply("[3, 4]", when='{"pointA":').reply("[5, 6]", when='{"pointB":')
    result = parse_distance(engine, "How far is A(3,4) from B(1,2)?")
    assert result.calls[0].arguments == {"pointA": [3, 4]}  # [5, 6] is written nowhere in the request
    assert result.decision == "ask" and [m.argument for m in result.missing] == ["pointB"]
    assert "unset euclidean_distance.pointB: the model's value was not kept (5 is in no source)" in result.notes
    grammars = [c["json_schema"] for c in engine.calls if c["kind"] == "generate"]
    assert grammars == [{"anyOf": [{"type": "array", "items": {"type": "integer"}, "maxItems": 8},
                                   {"type": "null"}]}] * 2  # one decode per free argument, null allowed

    engine = FakeEngine(scorer=scorer("euclidean_distance"))
    engine.reply("[3, 4]", when='{"pointA":').reply("[1, 2]", when='{"pointB":')
    result = parse_distance(engine, "How far is A(3,4) from B(1,2)?")
    assert result.decision == "call" and result.calls[0].arguments == {"pointA": [3, 4], "pointB": [1, 2]}


def test_a_free_argument_the_model_leaves_null_or_cuts_is_asked_for(monkeypatch):
    monkeypatch.setattr(fill, "FREE_MAX_TOKENS", 3)
    engine = FakeEngine(scorer=scorer("euclidean_distance"))
    engine.reply("null", when='{"pointA":').reply("[1, 1, 1, 1]", when='{"pointB":')  # 4 tokens: cut
    result = parse_distance(engine, "How far apart are my two points 1 and 1?")
    assert result.decision == "ask" and [m.argument for m in result.missing] == ["pointA", "pointB"]


def test_a_written_value_is_grounded_leaf_by_leaf():
    sources = [Source("user", "John scored {'math':90, 'science':75}; the points are 46.603354,1.8883340 and two")]
    free_dict = {"type": "object"}
    assert ungrounded_leaf({"math": 90, "science": 75}, free_dict, sources) is None
    assert ungrounded_leaf({"math": 90, "art": 75}, free_dict, sources) == "'art'"  # a free-form key is data
    assert ungrounded_leaf({"math": 91}, free_dict, sources) == "91"
    assert ungrounded_leaf([46.603354, 1.888334, 2], {"type": "array"}, sources) is None
    assert ungrounded_leaf([1200000], {"type": "array"}, [Source("user", "revenue of $1,200,000")]) is None
    assert ungrounded_leaf([], {"type": "array"}, sources) == "[]"
    typed = {"type": "object", "properties": {"subject": {"type": "string"},
                                              "level": {"enum": ["low", "high"]}}}
    assert ungrounded_leaf({"subject": "math", "level": "high"}, typed, sources) is None  # schema's own words
    assert ungrounded_leaf({"subject": "history"}, typed, sources) == "'history'"


def test_the_tagger_never_writes_a_free_value():
    engine = FakeEngine(scorer=scorer("euclidean_distance"))
    grounder = grounded.Grounder(engine, FakeEmbedder(), grounded.load_weights())
    grounded.tag_structured(grounder, "For distances I always round to 2 decimals.",
                            Catalogue(name="geometry", functions=[DISTANCE]))
    assert not [c for c in engine.calls if c["kind"] == "generate"]


def test_common_noun_phrases_with_their_article_or_possessive_are_candidates():
    # Class b: "the airport", "my office" are values as written; an article alone, or one before a function word
    # or across a sentence end, is not a span.
    from prefcall.strategies.grounding.evidence import FEATURES, FeatureContext, features

    schema = {"type": "string", "description": "where to go"}
    text = "i need a ride from my office to the airport. The Westside branch is closed, take the"
    pool = argument_candidates("destination", schema, [Source("user", text, "turn 0")])
    texts = [c.text for c in pool.candidates]
    for value in ("my office", "office", "the airport", "airport", "The Westside branch", "Westside branch"):
        assert value in texts
    assert not {"the", "my", "the airport. The", "take the"} & set(texts)
    assert not any(t.lower().startswith(("a ", "to ")) for t in texts)  # only definite articles and possessives
    function = Function(name="BookRide", description="Book a ride.", parameters={
        "type": "object", "properties": {"destination": schema}})
    rows = dict(zip(texts, features(FeatureContext(function, None), "destination", schema, pool.candidates)))
    opens, common = FEATURES.index("determiner"), FEATURES.index("determiner_common")
    assert (rows["the airport"][opens], rows["the airport"][common]) == (1.0, 1.0)
    assert (rows["The Westside branch"][opens], rows["The Westside branch"][common]) == (1.0, 0.0)
    assert (rows["airport"][opens], rows["airport"][common]) == (0.0, 0.0)


def test_amounts_with_a_currency_or_percent_sign_and_possessive_names_are_candidates():
    # Class b: "$50" is the number 50 for a number argument, "Bob's" offers the name Bob (and itself).
    text = "Send $50 and 15% of €1,200.50 to Bob's savings account, not $ or %."
    source = [Source("user", text, "turn 0")]
    amounts = argument_candidates("amount", {"type": "number"}, source).candidates
    assert [(c.value, c.text) for c in amounts] == [(50, "$50"), (15, "15%"), (1200.5, "€1,200.50")]
    assert all(text[c.start:c.end] == c.text for c in amounts)
    whole = argument_candidates("count", {"type": "integer"}, source).candidates
    assert [c.value for c in whole] == [50, 15]  # 1200.50 is not an integer
    names = {c.text: c for c in argument_candidates("recipient_name", {"type": "string"}, source).candidates}
    assert {"Bob", "Bob's", "Bob's savings account"} <= set(names)
    assert text[names["Bob"].start:names["Bob"].end] == "Bob"
    assert "Bob savings account" not in names  # only a possessive that ends the span is cut
    assert ungrounded_leaf(50, {"type": "number"}, source) is None


def test_a_chained_call_never_takes_the_place_the_first_call_leaves_from():
    # Class c: "If I search flights, also look at hotels" after a flight from Boston to Miami: the hotel is in Miami.
    # The fake model likes both cities for the hotel; only where the flight leaves from tells them apart.
    flights = Function(name="GetFlights", description="Search flights between two cities.", parameters={
        "type": "object", "properties": {
            "origin_city": {"type": "string", "description": "city to fly from"},
            "destination_city": {"type": "string", "description": "city to fly to"}},
        "required": ["destination_city"]})
    catalogue = Catalogue(name="trips", functions=[flights, HOTELS])
    engine = FakeEngine(scorer=scorer("GetFlights", origin_city="Boston", destination_city="Miami",
                                      location=["Boston", "Miami"]))
    chain = "If I search flights, also look at hotels."

    def run(dialogue, instructions=(chain,)):
        return Pipeline(engine, FakeEmbedder()).parse(dialogue, list(instructions), catalogue, get_config("full"),
                                                      applicable=list(instructions))

    result = run("Find me a flight from Boston to Miami.")
    assert result.functions == ["GetFlights", "GetHotels"]
    assert [c.arguments for c in result.calls] == [{"origin_city": "Boston", "destination_city": "Miami"},
                                                   {"location": "Miami"}]
    # Nothing but the origin fits the hotel: it asks where, it does not book the city the user leaves.
    alone = run("Find me a flight from Boston.")
    hotel = next(c for c in alone.calls if c.name == "GetHotels")
    assert "location" not in hotel.arguments and alone.decision == "ask" and "location" in alone.question
    # The first call keeps its own origin, and a hotel asked for in its own right takes any city.
    direct = Pipeline(FakeEngine(scorer=scorer("GetHotels", location="Boston")), FakeEmbedder()).parse(
        "A hotel in Boston, please.", [], catalogue, get_config("full"))
    assert [c.arguments for c in direct.calls] == [{"location": "Boston"}]


def test_all_arguments_of_a_function_are_scored_in_one_batch_with_the_answers_of_one_by_one():
    text = "User: a cheap Thai place in Oakland that serves alcohol, for 4 people"
    like = scorer("GetRestaurants", city="Oakland", cuisine="Thai", price_range="cheap", serves_alcohol=True,
                  party_size=4)
    sources = [Source("user", text.split(": ", 1)[1], "turn 1")]
    weights = grounded.load_weights()

    def fill_with(engine):
        return fill.fill_arguments(engine, RESTAURANTS, sources, text,
                                   fill.FeatureContext(function=RESTAURANTS, embedder=FakeEmbedder()), weights)

    batching = BatchingFakeEngine(scorer=like)
    together, alone = fill_with(batching), fill_with(FakeEngine(scorer=like))
    assert len(batching.batches) == 1  # one batch for the function, not one model call per argument
    asked = {json.loads(prefix.strip().rstrip(":").lstrip("{")) for prefix in batching.batches[0]["prefixes"]}
    assert {"city", "cuisine", "price_range"} <= asked
    assert [(c.argument, c.values) for c in together.choices] == [(c.argument, c.values) for c in alone.choices]
    assert {(c.argument, tuple(c.values)) for c in together.choices} >= {("city", ("Oakland",)), ("cuisine", ("Thai",))}
    assert together.model_calls == alone.model_calls == len(batching.batches[0]["prefixes"])


def test_the_answer_to_the_assistants_question_is_cued_for_the_argument_it_asked_for():
    from prefcall.strategies.grounding.evidence import ASKED_CUE, FEATURES, FeatureContext, features

    turns = [Turn(role="user", content="I want to book a table"),
             Turn(role="assistant", content="Sure. Which restaurant would you like? And where?"),
             Turn(role="user", content="Andes Cafe, in San Mateo.")]
    reply = next(s for s in grounded.user_sources(turns) if s.ref == "turn 2")
    assert reply.asked == "Which restaurant would you like? And where?"  # its questions, not "Sure."
    assert grounded.user_sources(turns)[0].asked == ""  # the opening request answers nothing
    function = Function(name="ReserveRestaurant", description="Reserve a table", parameters={
        "type": "object", "properties": {"restaurant_name": {"type": "string"}, "location": {"type": "string"}}})
    ctx = FeatureContext(function, None)
    span = next(c for c in argument_candidates("restaurant_name", {"type": "string"}, [reply]).candidates
                if c.text == "Andes Cafe")
    cue = FEATURES.index("cue")
    assert features(ctx, "restaurant_name", {"type": "string"}, [span])[0][cue] == ASKED_CUE
    assert features(ctx, "location", {"type": "string"}, [span])[0][cue] == 0.0  # "where" names no argument
    unasked = Source("user", reply.text, "turn 2")
    assert features(ctx, "restaurant_name", {"type": "string"}, [
        next(c for c in argument_candidates("restaurant_name", {"type": "string"}, [unasked]).candidates
             if c.text == "Andes Cafe")])[0][cue] == 0.0


def test_an_unwritten_default_is_no_value_and_a_written_one_is():
    flights = Function(name="SearchFlights", description="Find flights.", parameters={
        "type": "object", "properties": {
            "destination": {"type": "string"},
            "flight_class": {"type": "string", "description": "Fare class (default: Economy)",
                             "enum": ["Economy", "Business"]}}})
    catalogue = Catalogue(name="air", functions=[flights])
    # Sure enough of the default (e^-40 for the rest) that the combination would set it, written or not.
    engine = FakeEngine(scorer=scorer("SearchFlights", miss=-40.0, destination="Denver", flight_class="Economy"))

    def run(text: str):
        return Pipeline(engine, FakeEmbedder()).parse(text, [], catalogue, get_config("full")).calls[0].arguments

    assert run("User: find me a flight to Denver") == {"destination": "Denver"}  # the model's taste for the default
    assert run("User: find me an economy flight to Denver") == {"destination": "Denver", "flight_class": "Economy"}


def test_a_number_written_out_in_several_words_is_one_candidate():
    """Class b: "a ninety day supply" is 90, "twenty five dollars" 25 (one candidate, not 20 and 5), "two hundred
    and fifty" 250; words that make no number together ("seven one") stay apart."""
    from prefcall.retrieval.text import number_from_words
    from prefcall.schemas.validation import coerce

    def values(text: str) -> list[object]:
        return [c.value for c in argument_candidates("amount", {"type": "integer"},
                                                     [Source("user", text, "u")]).candidates]

    assert values("a ninety day supply") == [90]
    assert values("send twenty five dollars, thanks") == [25]
    assert values("for two hundred and fifty dollars") == [250]
    assert values("a hundred bucks") == [100]
    assert values("pick seven one") == [7, 1]
    assert [number_from_words(t) for t in ("twenty-five", "fifteen hundred", "a couple", "one two")] == [
        25, 1500, None, None]
    assert coerce("twenty-five", {"type": "integer"}) == 25 and coerce("a couple", {"type": "integer"}) == "a couple"


def test_the_pronoun_one_is_no_number():
    """"a boxing one at Pulse Studio" and "the blue one, please" point at a thing named before: no count of one for
    a chained call's hours. "a table for one", "the one ticket" and "one please" are counts."""
    def values(text: str) -> list[object]:
        return [c.value for c in argument_candidates("hours", {"type": "integer"},
                                                     [Source("user", text, "u")]).candidates]

    assert values("Book me a fitness class a boxing one at Pulse Studio on Thursday, thanks.") == []
    assert values("the blue one, please") == [] and values("I want a spin one.") == []
    assert values("a table for one at 7") == [1, 7]
    assert values("the one ticket") == [1] and values("one please") == [1] and values("a one hour slot") == [1]


def test_a_capitalised_article_inside_a_sentence_opens_a_name():
    """"A J Dental Lab" and "The Cheesecake Factory" are candidates whole; a sentence's first "A" and a lowercase
    "a" before a capitalised word open none."""
    from prefcall.strategies.grounding.values import spans

    def starting(text: str) -> list[str]:
        return [c.text for c in spans(Source("user", text, "u")) if c.text.split()[0].lower() in ("a", "the")]

    assert "A J Dental Lab" in starting("If I'm looking for a dentist, my go-to is A J Dental Lab.")
    assert "The Cheesecake Factory" in starting("dinner at The Cheesecake Factory please")
    assert starting("A table for two at Nopa.") == [] and starting("I want a Thai place") == []


def test_a_capitalised_function_word_inside_a_sentence_opens_a_name():
    """"About Time Barber Shop" is a candidate whole, as a capitalised article's name is; the pronoun "I", a
    sentence's first word and a lowercase "about" open none. A function word written in capitals is an
    abbreviation, so "Portland, OR" is a candidate too."""
    from prefcall.strategies.grounding.values import spans

    def texts(text: str) -> list[str]:
        return [c.text for c in spans(Source("user", text, "u"))]

    assert "About Time Barber Shop" in texts("Look for the stylist name About Time Barber Shop if you want it.")
    assert "About Time Barber Shop" in texts("my preferred stylist name be About Time Barber Shop when I visit")
    assert not any(t.startswith("About") for t in texts("About Time Barber Shop is my salon."))
    assert not any(t.startswith("about") for t in texts("tell me about Time Square"))
    assert not any(t.startswith("I ") for t in texts("Then I Want to book Nopa"))
    assert "Portland, OR" in texts("I want to stay in Portland, OR next week")


def test_an_ampersand_between_capitalised_words_is_inside_one_name():
    """"Baan Thai House & Wine Bar": a span that stops at the "&" or starts after it cuts the name; the symbol is
    no word of the whole (five words, all capitalised), so structure ranks the whole above its pieces."""
    from prefcall.strategies.grounding.evidence import FEATURES, FeatureContext, features

    text = "If you're in the mood for Thai food, check out Baan Thai House & Wine Bar."

    def row(span: str) -> dict[str, float]:
        start = text.index(span)
        candidate = fill.Candidate(span, span, Source("instruction", text, text), start, start + len(span))
        values = features(FeatureContext(RESTAURANTS, None), "restaurant_name",
                          RESTAURANTS.properties["restaurant_name"], [candidate])[0]
        return dict(zip(FEATURES, map(float, values)))

    assert row("Baan Thai House")["cuts_name"] == 1.0 and row("Wine Bar")["cuts_name"] == 1.0
    whole = row("Baan Thai House & Wine Bar")
    assert whole["cuts_name"] == 0.0 and whole["n_words"] == 5.0 and whole["capitals"] == 1.0
    # between lowercase words an ampersand joins nothing capitalised: "rock & roll" cuts no name
    lower = "I like rock & roll music"
    start = lower.index("roll")
    candidate = fill.Candidate("roll", "roll", Source("user", lower, lower), start, start + 4)
    values = features(FeatureContext(RESTAURANTS, None), "cuisine", RESTAURANTS.properties["cuisine"], [candidate])
    assert float(values[0, FEATURES.index("cuts_name")]) == 0.0


def test_a_flag_word_inside_a_proper_name_does_not_name_the_flag():
    """"Family & Cosmetic Dentistry" is a dentist's name: it says nothing of offers_cosmetic_services; "provides
    cosmetic services" and a title-cased "Live Music" still name their flags."""
    assert fill.flag_mention("offers_cosmetic_services", "Request Andrei Simel from Family & Cosmetic Dentistry.") \
        is None
    assert fill.flag_mention("offers_cosmetic_services", "I want the one called Cosmetic Dentistry Antioch Ca.") is None
    assert fill.flag_mention("offers_cosmetic_services", "a dentist that provides cosmetic services") == \
        "cosmetic services"
    assert fill.flag_mention("has_live_music", "Request Restaurants with Live Music") == "Live Music"


def test_a_consequence_that_comes_first_takes_its_own_value_not_the_conditions(monkeypatch):
    # "Y if X": the condition's value lies after the consequence; it must not count as the consequence's value,
    # or the name the instruction exists to state is lost.
    engine = FakeEngine(scorer=scorer("GetRestaurants", cuisine="Southern"))
    grounder = grounded.Grounder(engine, FakeEmbedder(), grounded.load_weights("m"))
    monkeypatch.setattr(grounded, "INSTRUCTION_FLOOR", 0.0)
    text = "Look for the restaurant Golden Grill if you want Southern cuisine."
    preference = grounded.preference_of(grounded.tag_structured(grounder, text, CATALOGUE), CATALOGUE)
    assert preference.conditions == {"cuisine": "Southern"}
    [(argument, values)] = preference.actions.items()
    assert values[0] in "Look for the restaurant Golden Grill"


def test_a_model_fitted_to_read_unnamed_flags_sets_one_true_and_never_false(monkeypatch):
    """weights.unnamed_flag: a flag the text does not name ("for both men and women" of is_unisex) is asked of
    the model; its true passes by the model's odds over null, its false never does; without the weights the
    flag stays unset whatever the model likes."""
    load = grounded.load_weights
    likes_true = FakeEngine(scorer=scorer("GetRestaurants", city="Oakland", serves_alcohol=True))
    likes_false = FakeEngine(scorer=scorer("GetRestaurants", city="Oakland", serves_alcohol=False))
    request = "User: Find a place in Oakland where I can get a glass of wine"
    assert "serves_alcohol" not in parse(likes_true, request).calls[0].arguments
    monkeypatch.setattr(grounded, "load_weights",
                        lambda *a, **k: load(*a, **k).model_copy(update={"unnamed_flag": (1.0, -3.0)}))
    assert parse(likes_true, request).calls[0].arguments == {"city": "Oakland", "serves_alcohol": True}
    assert parse(likes_false, request).calls[0].arguments == {"city": "Oakland"}
    unsure = FakeEngine(scorer=scorer("GetRestaurants", miss=-2.0, city="Oakland"))  # true 1.9 nats under null
    assert "serves_alcohol" not in parse(unsure, request).calls[0].arguments


@pytest.mark.parametrize(("text", "tags"), [
    ("When I inquire about Restaurants and the cuisine is Gastrobar, I want to find ones that serve alcohol.",
     "[IN:GET_RESTAURANTS When I inquire about Restaurants and the cuisine is [SL:CUISINE Gastrobar ] , I want to "
     "find ones that [SL:SERVES_ALCOHOL serve alcohol ] . ]"),
    ("If I ask for Restaurants and cuisine is curry then look for serves alcohol",
     "[IN:GET_RESTAURANTS If I ask for Restaurants and cuisine is [SL:CUISINE curry ] then look for "
     "[SL:SERVES_ALCOHOL serves alcohol ] ]"),
])
def test_a_request_clause_that_goes_on_to_a_value_is_a_condition_on_that_value(text, tags):
    """"When I ask for Restaurants and the cuisine is X, ...": the clause names the request, then conditions on a
    cuisine; the cuisine is checked against the call, never set by the instruction."""
    from prefcall.strategies.preferences import preference_from_tags
    from prefcall.tagging.tags import parse_tags

    preference = preference_from_tags(text, parse_tags(tags), CATALOGUE)
    assert preference is not None and set(preference.conditions) == {"cuisine"}
    assert preference.actions == {"serves_alcohol": [True]}
    snacks = Draft(name="GetRestaurants")
    snacks.set("cuisine", ["snacks"], Provenance(argument="cuisine", value="snacks", origin="user"))
    applied = apply_preferences([snacks], [preference], CATALOGUE)
    assert [c.arguments for d in applied.drafts for c in d.calls()] == [{"cuisine": "snacks"}]
    assert "contradicted" in applied.skipped[text]
    # A request clause that goes on with what is asked for, not with a value it checks, is no condition.
    with_kind = preference_from_tags("When I ask for Restaurants with Italian food, I like Oakland.", parse_tags(
        "[IN:GET_RESTAURANTS When I ask for Restaurants with [SL:CUISINE Italian ] food, I like [SL:CITY Oakland ] . ]"),
        CATALOGUE)
    assert with_kind is not None and not with_kind.conditions
    assert with_kind.actions == {"cuisine": ["Italian"], "city": ["Oakland"]}


def test_names_a_versus_joins_are_one_match_and_no_part_of_it_is_another_value():
    events = Function(name="GetEvents", description="Find events.", parameters={
        "type": "object", "properties": {"city": {"type": "string", "description": "city of the event"},
                                         "event_name": {"type": "string", "description": "name of the event"}}})
    catalogue = Catalogue(name="events", functions=[events])
    # The model takes the first team for the city; the match is one name, so no part of it is a city.
    engine = FakeEngine(scorer=scorer("GetEvents", city="Seattle", event_name="Seattle versus Minnesota"))
    result = Pipeline(engine, FakeEmbedder()).parse(
        "User: When is it on? Make sure it's Seattle versus Minnesota.", [], catalogue, get_config("full"))
    assert [c.arguments for c in result.calls] == [{"event_name": "Seattle versus Minnesota"}]
    elsewhere = Pipeline(engine, FakeEmbedder()).parse(
        "User: Any events in Seattle? I like the Giants vs Marlins games.", [], catalogue, get_config("full"))
    assert elsewhere.calls[0].arguments.get("city") == "Seattle"  # a name outside the match stays a value
    from prefcall.strategies.grounding.values import Candidate, cuts_match

    source = Source("instruction", "Check to see if it's the Dodgers versus the Diamondbacks.")
    parts = [Candidate(t, t, source, source.text.index(t), source.text.index(t) + len(t))
             for t in ("Dodgers", "Diamondbacks", "Dodgers versus the Diamondbacks")]
    assert [cuts_match(c) for c in parts] == [True, True, False]


def test_an_initialism_keeps_its_stop_at_a_sentence_end():
    from prefcall.strategies.grounding.values import spans

    texts = [c.text for c in spans(Source("user", "I'm trying to book a check-up with Doctor John Nguyen, M.D."))]
    assert "John Nguyen, M.D." in texts and "John Nguyen, M.D" not in texts
    assert "Oakland" in [c.text for c in spans(Source("user", "Find restaurants in Oakland."))]  # a plain stop goes


def test_an_instruction_whose_words_fit_two_functions_is_tagged_for_the_one_the_request_is_for():
    """"When the request is in standard seating" fits a ferry's cabin and a taxi's vehicle alike (both enumerate
    "standard"): for a ferry request it is the ferry's, and its passengers go to the ferry call."""
    seats = {"type": "string", "enum": ["standard", "premium"]}
    ferry = Function(name="BookFerry", description="Book a ferry crossing.", parameters={
        "type": "object", "properties": {"destination": {"type": "string", "description": "Arrival port."},
                                         "passengers": {"type": "integer"}, "cabin": seats},
        "required": ["destination"]})
    taxi = Function(name="BookTaxi", description="Book a taxi ride.", parameters={
        "type": "object", "properties": {"dropoff": {"type": "string"}, "passengers": {"type": "integer"},
                                         "vehicle": {"type": "string", "enum": ["standard", "xl", "premium"]}}})
    catalogue = Catalogue(name="rides", functions=[taxi, ferry])
    text = "When the request is in standard seating, use 4 passengers."
    grounder = grounded.Grounder(FakeEngine(scorer=scorer("BookFerry", passengers=4, cabin="standard",
                                                          vehicle="standard")), FakeEmbedder(),
                                 grounded.load_weights("m"))
    assert grounded.tag_structured(grounder, text, catalogue).tagged.startswith("[IN:BOOK_TAXI ")
    assert grounded.tag_structured(grounder, text, catalogue, prefer=["BookFerry"]).tagged.startswith(
        "[IN:BOOK_FERRY ")
    engine = FakeEngine(scorer=scorer("BookFerry", destination="Victoria", cabin="standard", passengers=4,
                                      vehicle="standard"))
    result = Pipeline(engine, FakeEmbedder()).parse("User: Book a ferry to Victoria in standard seating.", [text],
                                                    catalogue, get_config("full"), applicable=[text])
    assert [(c.name, c.arguments.get("passengers")) for c in result.calls] == [("BookFerry", 4)]


def test_a_content_argument_takes_the_clause_after_the_word_that_names_the_request():
    """"Remind me to call my mother" against SetReminder(text, time): the clause after "Remind me to" is the text
    (it reaches the model's shortlist), the time is still missing, so the answer asks for it (class e)."""
    from prefcall.strategies.grounding.evidence import FEATURES, FeatureContext, content_argument, features

    reminder = Function(name="SetReminder", description="Set a reminder at a time.", parameters={
        "type": "object", "properties": {"text": {"type": "string", "description": "What to be reminded of."},
                                         "time": {"type": "string", "description": "When."}},
        "required": ["text", "time"]})
    assert content_argument("text", reminder.properties["text"])
    assert not content_argument("time", reminder.properties["time"])
    assert content_argument("body", {"type": "string"}) and not content_argument("city", {"type": "string"})
    request = "Remind me to call my mother"
    pool = argument_candidates("text", reminder.properties["text"], [Source("user", request)])
    ctx = FeatureContext(function=reminder, embedder=None)
    cue = dict(zip([c.text for c in pool.candidates],
                   features(ctx, "text", reminder.properties["text"], pool.candidates)[:, FEATURES.index("cue")]))
    assert cue["call my mother"] == 1.0 and cue["my mother"] == 0.0
    engine = FakeEngine(scorer=scorer("SetReminder", text="call my mother"))
    result = Pipeline(engine, FakeEmbedder()).parse(f"User: {request}", [], Catalogue(name="r", functions=[reminder]),
                                                    get_config("full"))
    assert result.decision == "ask" and [m.argument for m in result.missing] == ["time"]
    assert result.calls[0].arguments == {"text": "call my mother"}


def test_a_required_argument_still_unset_takes_its_best_written_value_at_the_floor_an_optional_one_does_not():
    """Without a value memory a new value scores low ("near the train station"): a required argument takes its most
    probable free value from the floor up (the API cannot be called without it; the alternative is asking), an
    optional argument still needs 0.5, and a value under the floor is still asked for."""
    parking = Function(name="ReserveParking", description="Reserve a parking spot.", parameters={
        "type": "object", "properties": {"location": {"type": "string", "description": "Where to park."},
                                         "day": {"type": "string", "description": "Day of parking."}},
        "required": ["location"]})
    text = "a spot near the train station"

    def fill_with(floor: float | None, odds: float = -1.0, function: Function = parking):
        def score(prompt: str, candidate: str) -> float:
            if re.search(r'\{"(\w+)": $', prompt) is None:
                return -0.1
            return odds if candidate == '"the train station"' else 0.0 if candidate == "null" else -9.0

        weights = grounded.load_weights().model_copy(update={"span": (0.0, 1.0, 0.0), "required_floor": floor})
        result = fill.fill_arguments(FakeEngine(scorer=score), function, [Source("user", text, "turn 1")], text,
                                     fill.FeatureContext(function=function, embedder=FakeEmbedder()), weights)
        return [(c.argument, c.values) for c in result.choices]

    assert fill_with(None) == []  # p = sigmoid(-1) = 0.27 < 0.5
    assert fill_with(0.2) == [("location", ["the train station"])]
    assert fill_with(0.2, odds=-3.0) == []  # 0.05 < 0.2: asked for
    optional = parking.model_copy(update={"parameters": {**parking.parameters, "required": []}})
    assert fill_with(0.2, function=optional) == []


def test_a_span_with_no_capitalised_word_is_scored_by_the_phrase_combination_where_the_weights_have_one():
    """A small model's log-odds of a common noun phrase ("the train station") run lower than a name's: a fitted
    phrase combination scores the spans with no capitalised word, and a name ("Union Station") keeps the span
    combination."""
    parking = Function(name="ReserveParking", description="Reserve a parking spot.", parameters={
        "type": "object", "properties": {"location": {"type": "string", "description": "Where to park."}}})

    def fill_with(text: str, value: str, phrase: tuple[float, ...] | None):
        def score(prompt: str, candidate: str) -> float:
            if re.search(r'\{"(\w+)": $', prompt) is None:
                return -0.1
            return -1.0 if candidate == json.dumps(value) else 0.0 if candidate == "null" else -9.0

        weights = grounded.load_weights().model_copy(update={"span": (0.0, 1.0, 0.0), "phrase": phrase})
        result = fill.fill_arguments(FakeEngine(scorer=score), parking, [Source("user", text, "turn 1")], text,
                                     fill.FeatureContext(function=parking, embedder=FakeEmbedder()), weights)
        return [(c.argument, c.values) for c in result.choices]

    common = ("a spot near the train station", "the train station")
    name = ("a spot near Union Station", "Union Station")
    assert fill_with(*common, None) == []  # p = sigmoid(-1) = 0.27 under the span combination
    assert fill_with(*common, (0.0, 1.0, 2.0)) == [("location", ["the train station"])]  # sigmoid(1) = 0.73
    assert fill_with(*name, (0.0, 1.0, 2.0)) == []  # a name: the span combination, 0.27
    assert fill_with(*name, (0.0, 1.0, 2.0, 0.0)) == []
    with pytest.raises(ValueError, match="combination"):
        fill.GroundingWeights(structure=grounded.load_weights().structure, phrase=(1.0, 0.5))
    assert grounded.load_weights("m", fitted={"phrase": [0.5, 1.0, 0.5, 0.2]}).phrase == (0.5, 1.0, 0.5, 0.2)


def test_a_standing_instruction_sets_only_what_it_states_the_required_floor_and_proposals_are_for_requests():
    """A request cannot be called without its required arguments, so the floor (and the model's proposal) take
    one's best written value; an instruction read alone states a preference for the arguments it names. "If I ask
    for Taxi Rides, my preferred passengers is five" names no pickup, and "Taxi Rides" is never one (it was called
    as the pickup of every taxi the user booked)."""
    taxi = Function(name="BookTaxi", description="Book a taxi ride.", parameters={
        "type": "object", "properties": {"pickup": {"type": "string", "description": "Where the ride starts."},
                                         "passengers": {"type": "integer", "description": "How many ride."}},
        "required": ["pickup"]})
    catalogue = Catalogue(name="taxi", functions=[taxi])
    text = "If I ask for Taxi Rides, my preferred passengers is five."

    def score(prompt: str, candidate: str) -> float:
        argument = re.search(r'\{"(\w+)": $', prompt)
        if argument is None:
            return -0.1 if candidate.strip() == "BookTaxi" else -5.0
        if argument.group(1) == "passengers":
            return -0.1 if candidate == "5" else -12.0
        return -1.0 if candidate == '"Taxi Rides"' else 0.0 if candidate == "null" else -12.0

    weights = grounded.load_weights().model_copy(update={"span": (0.0, 1.0, 0.0), "required_floor": 0.1,
                                                         "propose": True})
    grounder = grounded.Grounder(FakeEngine(scorer=score), FakeEmbedder(), weights)
    as_request = grounder.fill(taxi, [Source("user", text, "turn 1")], text)
    assert as_request.arguments == {"passengers": [5], "pickup": ["Taxi Rides"]}  # p = 0.27: over the floor
    tag = grounded.tag_structured(grounder, text, catalogue)
    assert tag.status == "ok" and "SL:PASSENGERS" in tag.tagged and "SL:PICKUP" not in tag.tagged
    assert grounded.preference_of(tag, catalogue).actions == {"passengers": ["five"]}


def test_a_span_that_stops_before_a_determiner_does_not_close_its_phrase():
    """"pay" of "a reminder to pay the phone bill at noon" stops before its object: no boundary on its right;
    "pay the phone bill" ends before "at", a boundary, and a name before "for" closes too."""
    from prefcall.strategies.grounding.evidence import FEATURES, FeatureContext, features
    from prefcall.strategies.grounding.values import spans

    reminder = Function(name="SetReminder", description="Set a reminder.", parameters={
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    text = "Please add a reminder to pay the phone bill at noon, or call my mother for Nopa."
    pool = {c.text: c for c in spans(Source("user", text, "turn 1"))}
    names = ["pay", "pay the phone bill", "call", "call my mother", "mother"]
    rows = features(FeatureContext(function=reminder, embedder=FakeEmbedder()), "text", {"type": "string"},
                    [pool[n] for n in names])
    close = FEATURES.index("close_right")
    assert [float(r[close]) for r in rows] == [0.0, 1.0, 0.0, 1.0, 1.0]


def test_a_preposition_that_marks_where_a_movement_starts_or_ends_is_evidence_for_that_end():
    """"from Pier 39 to the airport": "from" marks the pickup's value, "to" the drop-off's; a preposition marks
    nothing for an argument whose function has no argument of that role, and nothing in a reminder."""
    from prefcall.strategies.grounding.evidence import FEATURES, FeatureContext, argument_role, features
    from prefcall.strategies.grounding.values import spans

    taxi = Function(name="BookTaxi", description="Book a taxi ride.", parameters={
        "type": "object", "properties": {"pickup": {"type": "string"}, "dropoff": {"type": "string"},
                                         "vehicle": {"type": "string"}}})
    pool = {c.text: c for c in spans(Source("user", "Get me a cab from Pier 39 to the airport in an XL", "turn 0"))}
    role = FEATURES.index("role")

    def roles(argument: str, function: Function = taxi) -> list[float]:
        rows = features(FeatureContext(function=function, embedder=FakeEmbedder()), argument, {"type": "string"},
                        [pool[n] for n in ("Pier 39", "the airport", "airport", "XL")])
        return [float(r[role]) for r in rows]

    assert roles("pickup") == [1.0, -1.0, -1.0, 0.0]
    assert roles("dropoff") == [-1.0, 1.0, 1.0, 0.0]
    assert roles("vehicle") == [-1.0, -1.0, -1.0, 0.0]  # each end is another argument's
    reminder = Function(name="SetReminder", description="Set a reminder.", parameters={
        "type": "object", "properties": {"text": {"type": "string"}}})
    assert roles("text", reminder) == [0.0, 0.0, 0.0, 0.0]
    assert [argument_role(a) for a in ("origin_city", "where_to", "pickup_time", "city", "from_to")] == [
        "source", "goal", "source", None, None]
    # a flag named like an end ("pickup": pick up instead of delivery) holds no place: "from Kyoto House" stays
    # open to the restaurant
    takeout = Function(name="OrderTakeout", description="Order takeout food from a restaurant.", parameters={
        "type": "object", "properties": {"restaurant": {"type": "string"}, "pickup": {"type": "boolean"}}})
    assert roles("restaurant", takeout) == [0.0, 0.0, 0.0, 0.0]


def test_what_a_word_naming_the_request_acts_on_is_evidence_for_a_lowercase_value():
    """"Refill my allergy pills" / "Order two pad thai" / "Add oat milk to ...": the span a word of the function's
    name or description acts on (over a possessive or a count, or directly where the word stands as a verb) is the
    thing the request is about, for a required argument most of all; a piece of it is not, nor is the request's
    own name, nor what a request word only modifies ("a parking space")."""
    from prefcall.strategies.grounding.evidence import FEATURES, FeatureContext, features
    from prefcall.strategies.grounding.values import spans

    refill = Function(name="refill_prescription", description="Refill a prescription at a pharmacy.", parameters={
        "type": "object", "properties": {"medication": {"type": "string"}, "pharmacy": {"type": "string"}},
        "required": ["medication"]})
    marks = [FEATURES.index(f) for f in ("object", "object_required")]

    def marked(argument: str, text: str, names: tuple[str, ...], function: Function = refill,
               named: bool = True) -> list[list[float]]:
        pool = {c.text: c for c in spans(Source("user", text, "turn 0"))}
        rows = features(FeatureContext(function=function, embedder=FakeEmbedder(), named=named), argument,
                        {"type": "string"}, [pool[n] for n in names])
        return [[float(r[i]) for i in marks] for r in rows]

    assert marked("medication", "Refill my allergy pills.", ("allergy pills", "my allergy pills", "pills")) == [
        [1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]
    assert marked("pharmacy", "Refill my allergy pills.", ("allergy pills",)) == [[1.0, 0.0]]  # optional
    assert marked("medication", "Please refill my metformin prescription.",
                  ("metformin", "my metformin prescription")) == [[1.0, 1.0], [0.0, 0.0]]
    order = Function(name="order_food", description="Order food for delivery.", parameters={
        "type": "object", "properties": {"dish": {"type": "string"}}, "required": ["dish"]})
    assert marked("dish", "Order two pad thai.", ("pad thai", "thai"), order) == [[1.0, 1.0], [0.0, 0.0]]
    assert marked("dish", "Can you order ramen for me?", ("ramen",), order) == [[1.0, 1.0]]  # a verb: no gap needed
    # A sentence break between the word and the span, or a word of its own in between, breaks the link.
    assert marked("dish", "I want to order. Pad thai please.", ("Pad thai",), order) == [[0.0, 0.0]]
    assert marked("dish", "Order food from Thai Palace.", ("Thai Palace",), order) == [[0.0, 0.0]]
    parking = Function(name="ReserveParking", description="Reserve a parking spot.", parameters={
        "type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]})
    assert marked("location", "Reserve a parking space near the airport.", ("space", "the airport"),
                  parking) == [[0.0, 0.0], [0.0, 0.0]]
    # A verb any request opens with names no function's request: "get" of GetRestaurants acts on no value.
    restaurants = Function(name="GetRestaurants", description="Find restaurants in a city.", parameters={
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    assert marked("city", "Find a place in Oakland where I can get a glass of wine.", ("place", "glass of wine"),
                  restaurants) == [[0.0, 0.0], [0.0, 0.0]]
    # ... but such a word written as a noun is still the request's own name: "Reserve a book" names ReserveBook.
    reserve = Function(name="ReserveBook", description="Reserve a library book.", parameters={
        "type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]})
    assert marked("title", "Reserve a book called Night Trains.", ("book", "Night Trains"), reserve) == [
        [0.0, 0.0], [0.0, 0.0]]
    # A call a standing instruction chains to the request's is not what the request names: nothing is its object.
    assert marked("medication", "Refill my allergy pills.", ("allergy pills",), named=False) == [[0.0, 0.0]]


def test_a_number_right_after_a_capitalised_word_is_that_names_not_a_count():
    """"from Pier 39 to Grand Central for 1 people": 39 is the pier's number, never the passengers' count, and
    "Pier" alone cuts the name; "May 5" is a date and "Anna 3 people" counts people."""
    from prefcall.strategies.grounding.fill import _cuts_numbered_name, _numbered_names
    from prefcall.strategies.grounding.values import Candidate

    taxi = Function(name="BookTaxi", description="Book a taxi ride.", parameters={
        "type": "object", "properties": {"pickup": {"type": "string"}, "passengers": {"type": "integer"}},
        "required": ["pickup"]})
    engine = FakeEngine(scorer=scorer("BookTaxi", pickup=["Pier", "Pier 39"], passengers=[39, 1]))
    result = Pipeline(engine, FakeEmbedder()).parse("User: Get me a cab from Pier 39 to Grand Central for 1 people.",
                                                    [], Catalogue(name="taxi", functions=[taxi]), get_config("full"))
    assert result.calls[0].arguments == {"pickup": "Pier 39", "passengers": 1}

    def cut(text: str, span: str, whole: bool = False) -> bool:
        source = Source("user", text, "turn 0")
        start = text.index(span)
        candidate = Candidate(span, span, source, start, start + len(span))
        return _cuts_numbered_name(candidate, _numbered_names([source]), whole)

    assert cut("a cab from Pier 39, thanks", "Pier", whole=True) and not cut("a cab from Pier 39", "Pier 39", True)
    assert not cut("Book it on May 5 please", "5") and not cut("a table for Anna 3 people", "3")
    assert not cut("Pier 39 please", "39")  # a sentence's first word is capitalised as such


def test_a_street_address_keeps_its_house_number():
    """"to 9 Pine Road": the address is one value; "Pine Road" alone cuts it, even where the model likes it."""
    from prefcall.strategies.grounding.fill import _cuts_numbered_name, _numbered_names
    from prefcall.strategies.grounding.values import Candidate

    meal = Function(name="OrderMeal", description="Order a meal for delivery.", parameters={
        "type": "object", "properties": {"dish": {"type": "string"},
                                         "delivery_address": {"type": "string", "description": "Where it goes"}},
        "required": ["delivery_address"]})
    engine = FakeEngine(scorer=scorer("OrderMeal", dish="ramen", delivery_address=["Pine Road", "9 Pine Road"]))
    result = Pipeline(engine, FakeEmbedder()).parse("User: Get me ramen to 9 Pine Road please.", [],
                                                    Catalogue(name="meals", functions=[meal]), get_config("full"))
    assert result.calls[0].arguments == {"dish": "ramen", "delivery_address": "9 Pine Road"}
    text = "Deliver to 230 Mill Avenue, thanks"
    source = Source("user", text, "turn 0")
    found = _numbered_names([source])[id(source)]
    assert [text[a:b] for a, b in found] == ["230 Mill Avenue"]
    piece = Candidate("Mill Avenue", "Mill Avenue", source, text.index("Mill"), text.index("Mill") + 11)
    assert _cuts_numbered_name(piece, {id(source): found}, whole=True)


def test_a_span_that_another_argument_enumerates_is_that_arguments():
    """"I'm in need of a Dermatologist": an option of the doctor's type, never the doctor's name, even where the
    model likes it there."""
    doctors = Function(name="GetDoctors", description="Find a doctor.", parameters={
        "type": "object", "properties": {
            "doctor_name": {"type": "string"}, "city": {"type": "string"},
            "type": {"type": "string", "enum": ["Dermatologist", "Gynecologist", "General Practitioner"]}},
        "required": ["city"]})
    engine = FakeEngine(scorer=scorer("GetDoctors", doctor_name="Dermatologist", city="Sonoma",
                                      type="Dermatologist"))
    result = Pipeline(engine, FakeEmbedder()).parse("User: I'm in Sonoma and in need of a Dermatologist.", [],
                                                    Catalogue(name="doctors", functions=[doctors]), get_config("full"))
    assert result.calls[0].arguments == {"city": "Sonoma", "type": "Dermatologist"}


def test_a_span_made_of_another_arguments_name_says_which_argument_and_is_no_value():
    """"events in the city": "the city" names GetEvents' city argument; it is no value of the event's address,
    even where the model likes it there. A span with a word of its own is still a value ("the city hall")."""
    events = Function(name="GetEvents", description="Find events.", parameters={
        "type": "object", "properties": {
            "city": {"type": "string"}, "address_of_location": {"type": "string"}},
        "required": ["city"]})
    catalogue = Catalogue(name="events", functions=[events])
    engine = FakeEngine(scorer=scorer("GetEvents", city="Oakland", address_of_location="the city"))
    result = Pipeline(engine, FakeEmbedder()).parse("User: Any concerts in Oakland? Somewhere in the city.", [],
                                                    catalogue, get_config("full"))
    assert result.calls[0].arguments == {"city": "Oakland"}
    engine = FakeEngine(scorer=scorer("GetEvents", city="Oakland", address_of_location="the city hall"))
    result = Pipeline(engine, FakeEmbedder()).parse("User: Any concerts in Oakland? Somewhere at the city hall.", [],
                                                    catalogue, get_config("full"))
    assert result.calls[0].arguments.get("address_of_location") == "the city hall"


FOOD = Function(name="OrderFood", description="Order food for delivery.", parameters={
    "type": "object", "properties": {
        "dish": {"type": "string", "description": "the dish to order"},
        "restaurant": {"type": "string", "description": "the restaurant to order from"}},
    "required": ["dish"]})


@pytest.mark.parametrize("propose", [False, True])
def test_the_model_proposes_a_span_that_structure_left_out_of_its_top(propose, monkeypatch):
    # Structure sees words ("thai" alone, "the diner": common nouns look like any argument's value); the model
    # reads the sentence and writes "pad thai" after the dish's key. With proposals on, the span it writes is
    # scored beside structure's best and can be chosen; without them it is never scored (here structure's top is
    # its best one alone, so that "pad thai" is outside it whatever the fake embedder ranks second).
    from prefcall.strategies.grounding.evidence import FeatureContext

    monkeypatch.setattr(fill, "TOP_K", 1)
    text = "i want to order dinner pad thai from the diner on 3rd."
    engine = FakeEngine(scorer=scorer("OrderFood", dish="pad thai"))  # and null for the restaurant
    engine.reply(' "Pad Thai", "restaurant": "the diner on 3rd"}', when='{"dish":')
    weights = grounded.load_weights().model_copy(update={"propose": propose, "span": (0.5, 1.0, -3.0)})
    filled = fill.fill_arguments(engine, FOOD, [Source("user", text)], "User: " + text,
                                 FeatureContext(FOOD, FakeEmbedder()), weights)
    scored = [json.loads(c) for call in engine.calls if call["kind"] == "score" and '{"dish": ' in call["prompt"]
              for c in call["candidates"] if c != "null"]
    generated = [call for call in engine.calls if call["kind"] == "generate" and '{"dish":' in call["prompt"]]
    dish = [c.values for c in filled.choices if c.argument == "dish"]
    if propose:
        # one short generation, its value matched to the candidate as written ("pad thai", not the model's case)
        assert len(generated) == 1 and "pad thai" in scored and dish == [["pad thai"]]
        # an optional argument left unset is what most requests mean: the model is not asked to propose for it
        assert not [c for c in engine.calls if c["kind"] == "generate" and '{"restaurant":' in c["prompt"]]
    else:
        assert not generated and "pad thai" not in scored and dish != [["pad thai"]]


def test_a_proposal_is_only_ever_one_of_the_candidates():
    # The model writes a dish nobody asked for: no candidate is that text, so nothing joins the scored ones.
    from prefcall.strategies.grounding.evidence import FeatureContext

    text = "i want to order dinner pad thai from the diner on 3rd."
    engine = FakeEngine(scorer=scorer("OrderFood", dish="green curry"))
    engine.reply(' "green curry"}', when='{"dish":')
    weights = grounded.load_weights().model_copy(update={"propose": True})
    filled = fill.fill_arguments(engine, FOOD, [Source("user", text)], "User: " + text,
                                 FeatureContext(FOOD, FakeEmbedder()), weights)
    scored = [json.loads(c) for call in engine.calls if call["kind"] == "score" and '{"dish": ' in call["prompt"]
              for c in call["candidates"] if c != "null"]
    assert "green curry" not in scored and len(scored) <= fill.TOP_K
    assert all(v in text for c in filled.choices for v in c.values)


TAXI = Function(name="BookTaxi", description="Book a taxi ride.", parameters={
    "type": "object", "properties": {
        "pickup": {"type": "string", "description": "where the ride starts"},
        "dropoff": {"type": "string", "description": "where the ride ends"},
        "level": {"type": "string", "description": "the service level"}},
    "required": ["pickup", "dropoff"]})


def test_a_common_noun_phrase_keeps_its_definite_determiner_where_the_phrase_ends():
    # The model likes the bare nouns; the user named "the office" and "the hospital" (a common noun is named with
    # its article). "the premium level" keeps "premium": a modifier of the noun after it, not a phrase's end; a
    # capitalised name is as written.
    from prefcall.strategies.grounding.evidence import FeatureContext

    text = "get me a cab from the office to the hospital, at the premium level please."
    engine = FakeEngine(scorer=scorer("BookTaxi", pickup="office", dropoff="hospital", level="premium"))
    filled = fill.fill_arguments(engine, TAXI, [Source("user", text)], "User: " + text,
                                 FeatureContext(TAXI, FakeEmbedder()), grounded.load_weights())
    values = {c.argument: c.values for c in filled.choices}
    assert values == {"pickup": ["the office"], "dropoff": ["the hospital"], "level": ["premium"]}
    text = "get me a cab from the Grand Hotel to my office."
    engine = FakeEngine(scorer=scorer("BookTaxi", pickup="Grand Hotel", dropoff="office"))
    filled = fill.fill_arguments(engine, TAXI, [Source("user", text)], "User: " + text,
                                 FeatureContext(TAXI, FakeEmbedder()), grounded.load_weights())
    assert {c.argument: c.values for c in filled.choices} == {"pickup": ["Grand Hotel"], "dropoff": ["my office"]}


def test_a_lowercase_preposition_of_place_opens_no_value_but_a_name_may_begin_with_one():
    schema = {"type": "string", "description": "where to park"}
    texts = [c.text for c in argument_candidates(
        "location", schema, [Source("user", "a parking spot near the train station, or Near East Bakery")]).candidates]
    assert "the train station" in texts and "Near East Bakery" in texts
    assert not [t for t in texts if t.split()[0] == "near" or t.split()[-1] == "near"]


def test_recorded_rows_say_whether_a_request_or_a_standing_instruction_was_filled():
    """`prefcall fit` fits the required-argument rules on a request's fills only: an instruction's fill has none."""
    engine = FakeEngine(scorer=scorer("GetRestaurants", restaurant_name="Golden Lotus"))
    rows: list = []
    grounder = grounded.Grounder(engine, FakeEmbedder(), grounded.load_weights("m"), record=rows.append)
    source = [Source("user", "Book Golden Lotus tonight.", "turn 0")]
    grounder.fill(RESTAURANTS, source, "User: Book Golden Lotus tonight.")
    asked = len(rows)
    grounder.fill(RESTAURANTS, source, "User: Book Golden Lotus tonight.", request=False)
    assert 0 < asked < len(rows)
    assert all(r.request for r in rows[:asked]) and not any(r.request for r in rows[asked:])


def test_a_required_span_the_model_puts_far_above_every_other_span_is_taken_at_the_fitted_lead():
    """The model may score a new common noun phrase at null's odds yet far above the sentence's other spans:
    with a fitted lead the required argument takes it instead of asking; without one, or where the lead is not
    reached, it is asked for."""
    parking = Function(name="ReserveParking", description="Reserve a parking space.", parameters={
        "type": "object", "properties": {"location": {"type": "string", "description": "Where to park"}},
        "required": ["location"]})
    text = "Can you book me a parking space at the airport please."

    def score(prompt: str, candidate: str) -> float:
        if candidate == "null":
            return -1.0
        return -1.0 if candidate == json.dumps("the airport") else -9.0  # at null's odds, 8 nats above the rest

    def location(lead: float | None) -> list[str] | None:
        weights = grounded.load_weights("m").model_copy(update={"required_floor": 0.3, "required_lead": lead})
        features = grounded.FeatureContext(parking, None, sources_text=text)
        filled = fill.fill_arguments(FakeEngine(scorer=score), parking, [Source("user", text, "turn 0")],
                                     "User: " + text, features, weights)
        return next((c.texts for c in filled.choices if c.argument == "location"), None)

    assert location(None) is None  # under the floor: asked for
    assert location(4.0) == ["the airport"]
    assert location(12.0) is None  # the lead not reached


def test_a_content_clause_runs_to_what_it_acts_on():
    """"Add a task to call the landlord": the clause after the request word is "call the landlord"; its verb alone
    stops before what it acts on (the clause's cue stays with the whole clause; "task" two words before still cues
    it as any name word does), and so does "call" before "him"; a verb that ends its clause ("to stretch.") or
    stops before a comma keeps the clause's cue."""
    from prefcall.strategies.grounding.evidence import FEATURES, FeatureContext, features

    task = Function(name="CreateTask", description="Add a task to the to-do list.", parameters={
        "type": "object", "properties": {"task": {"type": "string", "description": "What to do."}},
        "required": ["task"]})

    def cues(request: str, names: list[str]) -> list[float]:
        pool = {c.text: c for c in argument_candidates("task", task.properties["task"],
                                                      [Source("user", request)]).candidates}
        rows = features(FeatureContext(function=task, embedder=None), "task", task.properties["task"],
                        [pool[n] for n in names])
        return [float(r[FEATURES.index("cue")]) for r in rows]

    assert cues("Add a task to call the landlord.", ["call", "call the landlord"]) == [0.5, 1.0]
    assert cues("Add a task to call him tonight.", ["call", "call him"]) == [0.5, 1.0]
    assert cues("Add a task to stretch.", ["stretch"]) == [1.0]
    assert cues("Add a task to stretch, the usual.", ["stretch"]) == [1.0]


def test_a_common_phrase_that_ends_in_the_arguments_head_noun_is_cued_whole():
    """"the living room" of a vacuum's room: the phrase is how a room is named, so the cue goes to it whole and not
    only to "living" before the name word; a name ("Union Square station"), a phrase over a connective ("vacuum in
    the living room"), a kind of something else ("checking account" of account_type) and a phrase that asks for a
    label ("the right name" of event_name) get no such cue."""
    from prefcall.strategies.grounding.evidence import FEATURES, FeatureContext, features

    vacuum = Function(name="StartVacuum", description="Start the robot vacuum.", parameters={
        "type": "object", "properties": {"room": {"type": "string", "description": "Room to clean."},
                                         "pickup_station": {"type": "string"}, "account_type": {"type": "string"},
                                         "level": {"type": "string"}, "event_name": {"type": "string"}},
        "required": ["room"]})

    def cues(argument: str, request: str, names: list[str]) -> list[float]:
        schema = vacuum.properties[argument]
        pool = {c.text: c for c in argument_candidates(argument, schema, [Source("user", request)]).candidates}
        rows = features(FeatureContext(function=vacuum, embedder=None), argument, schema, [pool[n] for n in names])
        return [round(float(r[FEATURES.index("cue")]), 2) for r in rows]

    assert cues("room", "Run the vacuum in the living room on turbo.",
                ["the living room", "living room", "living", "vacuum in the living room"]) == [1.0, 1.0, 0.8, 0.0]
    assert cues("pickup_station", "Meet me at the train station.", ["the train station"]) == [1.0]
    assert cues("pickup_station", "Meet me at Union Square station.", ["Union Square station"]) == [0.0]
    assert cues("account_type", "Pay it from my checking account.", ["my checking account"]) == [0.0]
    assert cues("level", "Clean it at the premium level.", ["the premium level"]) == [0.0]
    # a label noun's value is the label: "the right name" asks for an event's name and is none
    assert cues("event_name", "Dates for the Giants Vs Diamondbacks event? Get the right name for it.",
                ["the right name"]) == [0.0]
