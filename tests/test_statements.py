"""A profile's statements: wishes, facts about the user and records of past use (prefcall.strategies.statements).

A fact fills a required argument the request leaves open when its key names it; a record sets nothing and adds no
call unless the request refers back to past use. Unit tests of the rules, then the pipeline and parse_request
through MCP."""

from __future__ import annotations

import json
from pathlib import Path

from test_grounded import scorer
from test_server_support import make_server, travel_engine
from test_server_tools import Session, with_session

from prefcall.engine.fake import FakeEmbedder, FakeEngine
from prefcall.schemas.model import Catalogue, Function
from prefcall.strategies import statements
from prefcall.strategies.pipeline import Pipeline
from prefcall.strategies.pipeline_models import get_config
from prefcall.strategies.preferences import Draft, Provenance

RENT = Function(name="RentCar", description="Rent a car for a trip.", parameters={
    "type": "object", "properties": {
        "pickup_city": {"type": "string", "description": "City where the car is picked up"},
        "car_type": {"type": "string", "description": "Kind of car", "enum": ["compact", "SUV", "van"]},
        "driver_name": {"type": "string", "description": "Full name of the driver"},
        "driver_phone": {"type": "string", "description": "A phone number for the driver"},
        "seats": {"type": "integer", "description": "How many seats"}},
    "required": ["pickup_city", "driver_name"]})
BOOKS = Function(name="ReserveBook", description="Reserve a library book.", parameters={
    "type": "object", "properties": {"book_title": {"type": "string", "description": "title"}},
    "required": ["book_title"]})
CATALOGUE = Catalogue(name="trips", functions=[RENT, BOOKS])
PROFILE = ["My name is Dana Reyes.", "Home city: Denver", "My phone number is 555-0142.",
           "From my travel history: rented a van in Phoenix.", "Last week, I rented an SUV in Seattle."]


def test_statements_are_told_apart_by_their_form():
    wishes = ["If I ask for flights, my preferred airline is Delta.", "My preferred airline is Delta when I fly.",
              "My preferred stylist is Ana.", "My favourite cinema is the Roxy.",
              "I always book window seats.", "For pizza I like Luigi's.",
              "Request Media with a life history genre.", "Please default to economy for flights."]
    facts = ["My name is Dana Reyes.", "My home address is 12 Elm Street.", "Phone number: 555-0142",
             "My user home location is Chicago, IL."]
    records = ["From my order history: ordered pad thai from Thai Garden.", "Last Friday, I booked Ken.",
               "Ordered a burger from Joe's two days ago.", "Bought an iPhone 15 in black.",
               "I stayed at the Grand Hotel in Rome.", "Checked out purchases through the credit card."]
    assert [statements.kind_of(s) for s in wishes] == ["wish"] * len(wishes)
    assert [statements.kind_of(s) for s in facts] == ["fact"] * len(facts)
    assert [statements.kind_of(s) for s in records] == ["record"] * len(records)
    # A participle before its noun opens no record ("covered spots" is a kind of parking, not something done).
    assert [statements.kind_of(s) for s in ("Parking: covered spots.", "Apartments: furnished places.")] == [
        "fact", "fact"]


def test_a_request_refers_back_to_past_use_in_plain_words():
    assert statements.refers_back("Book the same stylist as last time")
    assert statements.refers_back("order it again please")
    assert not statements.refers_back("Rent a car in Austin for the weekend")


def test_a_fact_has_a_key_and_a_value_and_a_scoped_or_conditional_one_is_none():
    fact = statements.fact_of("My home address is 12 Elm Street.")
    assert (fact.key, fact.value, fact.key_words) == ("home address", "12 Elm Street", {"address"})
    assert statements.fact_of("Email: dana.r@example.com").value == "dana.r@example.com"
    assert statements.fact_of("My usual city for lodging is Chicago.") is None
    assert statements.fact_of("My preferred city is SFO when I ask.") is None
    # A "fact" keyed by a function's own words is a wish about that function, left to its tags.
    assert statements.facts_of(["Library books: paperback", "My name is Dana Reyes."], CATALOGUE) == [
        statements.fact_of("My name is Dana Reyes.")]


def test_a_fact_written_without_a_key_takes_its_key_from_the_form_of_its_one_value():
    cases = {
        "Reach me any time at +1 (303) 555-0142.": ("phone", "+1 (303) 555-0142"),
        "I'm Dana Reyes.": ("name", "Dana Reyes"),
        "Omar Haddad here.": ("name", "Omar Haddad"),
        "Post for me goes to dana@example.org": ("email", "dana@example.org"),
        "We live at 48 Harbor Road.": ("address", "48 Harbor Road"),
        "I reside in Salt Lake City.": ("home city", "Salt Lake City"),
    }
    for text, (key, value) in cases.items():
        fact = statements.fact_of(text)
        assert fact is not None and (fact.key, fact.value, fact.keyless) == (key, value, True), text
        assert statements.kind_of(text) == "fact", text
    # A keyed fact keeps its key.
    assert not statements.fact_of("My phone number is 555-0142.").keyless
    not_facts = [
        "Meet Dana Reyes at 12 Elm Street.",  # no first person, and two values
        "I'm at 12 Elm Street, or reach me at 555-0142.",  # two values: which one the statement is about is unclear
        "If I rent a car, call me on 555-0142.",  # a condition: a wish
        "I like the cafe at 5 Main Street.",  # a wish word
        "I was born on 1990-05-02.",  # a date is not a phone number
        "I'm in a hurry most mornings.",  # no value of a set form
        "Going to Leeds?",  # a question
    ]
    assert [statements.fact_of(t) for t in not_facts] == [None] * len(not_facts)
    assert statements.kind_of("I flew to Rome with Dana Reyes last week.") == "record"


def test_a_fact_without_a_key_fills_the_required_argument_its_value_s_form_names():
    profile = ["Everyone knows me as Dana Reyes.", "Text me on 555-0142.", "I reside in Denver.",
               "Send my books from 12 Elm Street."]
    facts = statements.facts_of(profile, CATALOGUE)
    # Words that name a function ("books": ReserveBook) make the statement a wish about it, not a fact.
    assert [f.instruction for f in facts] == profile[:3]
    assert statements.fact_for("driver_name", RENT.properties["driver_name"], facts)[1] == "Dana Reyes"
    assert statements.fact_for("driver_phone", RENT.properties["driver_phone"], facts)[1] == "555-0142"
    assert statements.fact_for("pickup_city", RENT.properties["pickup_city"], facts)[1] == "Denver"
    draft = Draft(name="RentCar")
    draft.set("pickup_city", ["Austin"], Provenance(argument="pickup_city", value="Austin", origin="user"))
    statements.fill_from_facts([draft], facts, CATALOGUE)
    # The required name is filled; the city the user wrote stays; the optional phone stays out.
    assert draft.values == {"pickup_city": ["Austin"], "driver_name": ["Dana Reyes"]}


def test_a_facts_tag_takes_the_whole_value_the_fact_states_not_a_piece_of_it():
    from prefcall.strategies.preferences import Preference

    facts = statements.facts_of(["I live at 7 Birch Lane.", "My name is Dana Reyes."], CATALOGUE)
    pieces = [Preference(instruction="I live at 7 Birch Lane.", function="RentCar",
                         actions={"pickup_city": ["Birch Lane"], "seats": [7]}),
              Preference(instruction="If I rent a car, pick it up at Birch Lane.", function="RentCar",
                         actions={"pickup_city": ["Birch Lane"]})]
    whole = statements.whole_fact_values(pieces, facts, CATALOGUE)
    # The fact's value replaces its piece; a value that is no piece (a number) and a wish's value stay.
    assert [p.actions for p in whole] == [{"pickup_city": ["7 Birch Lane"], "seats": [7]},
                                          {"pickup_city": ["Birch Lane"]}]
    # A piece must be whole words of the fact's value ("Lan" is no piece of "7 Birch Lane").
    partial = Preference(instruction="I live at 7 Birch Lane.", function="RentCar", actions={"pickup_city": ["Lan"]})
    assert statements.whole_fact_values([partial], facts, CATALOGUE)[0].actions == {"pickup_city": ["Lan"]}


def test_stage_one_reads_only_wishes_as_evidence_of_what_the_user_asks_for():
    profile = [*PROFILE, "If I rent a car, I want an SUV.", "Library books: paperback"]
    assert statements.wishes_of(profile, CATALOGUE) == ["If I rent a car, I want an SUV.", "Library books: paperback"]


def test_a_fact_fills_the_required_argument_its_key_names_once_valid_and_unambiguous():
    facts = statements.facts_of(PROFILE, CATALOGUE)
    found = statements.fact_for("driver_name", RENT.properties["driver_name"], facts)
    assert found == (statements.fact_of("My name is Dana Reyes."), "Dana Reyes")
    assert statements.fact_for("pickup_city", RENT.properties["pickup_city"], facts)[1] == "Denver"
    # Two facts that name the argument equally well and differ: none is taken (the user is asked).
    two = statements.facts_of(["My home city is Denver.", "My current city is Boulder."], CATALOGUE)
    assert statements.fact_for("pickup_city", RENT.properties["pickup_city"], two) is None
    # Nor for an argument about another party or where something goes.
    assert statements.fact_for("recipient_name", {"type": "string", "description": "Who receives it"}, facts) is None
    assert statements.fact_for("destination_city", {"type": "string", "description": "City it goes to"}, facts) is None
    # A verb in the description may be the user's own: "how the user receives notifications" is theirs to fill.
    phone = {"type": "string", "description": "Phone number the user receives texts on"}
    assert statements.fact_for("notify_phone", phone, facts)[1] == "555-0142"
    # A value the schema does not allow is not taken.
    seats = statements.facts_of(["My seats number is many."], CATALOGUE)
    assert statements.fact_for("seats", RENT.properties["seats"], seats) is None
    assert statements.fact_for("seats", RENT.properties["seats"],
                               statements.facts_of(["My seats count is four."], CATALOGUE))[1] == 4

    draft = Draft(name="RentCar")
    draft.set("pickup_city", ["Austin"], Provenance(argument="pickup_city", value="Austin", origin="user"))
    used = statements.fill_from_facts([draft], facts, CATALOGUE)
    # The user's city stays; the name is required and open; the phone is optional and stays out.
    assert draft.values == {"pickup_city": ["Austin"], "driver_name": ["Dana Reyes"]}
    assert used == ["My name is Dana Reyes."] and draft.provenance["driver_name"].origin == "instruction"


def _parse(request: str, **overrides):
    engine = FakeEngine(scorer=scorer("RentCar", pickup_city="Austin"))
    return Pipeline(engine, FakeEmbedder()).parse(request, PROFILE, CATALOGUE, get_config("full", **overrides),
                                                  applicable=list(PROFILE))


def test_the_pipeline_takes_a_required_value_from_the_profile_and_leaves_records_out():
    result = _parse("User: Rent a car in Austin.")
    assert result.decision == "call", result.notes
    assert [c.arguments for c in result.calls] == [{"pickup_city": "Austin", "driver_name": "Dana Reyes"}]
    [named] = [p for p in result.provenance if p["argument"] == "driver_name"]
    assert (named["value"], named["origin"], named["instruction"]) == (
        "Dana Reyes", "instruction", "My name is Dana Reyes.")
    assert "My name is Dana Reyes." in result.instructions_used
    assert not any("history" in i or "Last week" in i for i in result.instructions_used)
    assert any("a record of past use" in n for n in result.notes)

    without = _parse("User: Rent a car in Austin.", profile_statements=False)
    assert without.decision == "ask" and [m.argument for m in without.missing] == ["driver_name"]


def test_a_request_that_refers_back_takes_what_it_names_from_the_latest_record_about_its_function():
    engine = FakeEngine(scorer=scorer("RentCar", pickup_city="Austin", car_type="SUV"))

    def parse(request: str):
        return Pipeline(engine, FakeEmbedder()).parse(request, PROFILE, CATALOGUE, get_config("full"),
                                                      applicable=list(PROFILE))
    result = parse("User: Rent the same kind of car as last time in Austin.")
    assert [c.arguments for c in result.calls] == [{"pickup_city": "Austin", "car_type": "SUV",
                                                    "driver_name": "Dana Reyes"}], result.notes
    latest = "Last week, I rented an SUV in Seattle."
    [kind] = [p for p in result.provenance if p["argument"] == "car_type"]
    assert (kind["origin"], kind["instruction"]) == ("instruction", latest) and latest in result.instructions_used
    # Without a back reference no record is read: the car type stays open (it is optional).
    plain = parse("User: Rent a car in Austin.")
    assert [c.arguments for c in plain.calls] == [{"pickup_city": "Austin", "driver_name": "Dana Reyes"}]


def test_the_record_a_request_refers_back_to_is_found_by_what_it_is_about_not_only_by_its_words():
    # "registered" names no function by its words; the embedder (here: the caller's functions_of) says which.
    records = ["Not long ago I registered for the jazz night.", "Not long ago I rented a van in Phoenix."]
    read = {records[0]: {"book_title": ("the jazz night", "the jazz night")},
            records[1]: {"book_title": ("a van", "a van")}}
    draft = Draft(name="ReserveBook")

    def about(record: str) -> list[str]:
        return ["ReserveBook"] if "registered" in record else ["RentCar"]
    used = statements.resolve_back_reference([draft], records, "User: Reserve the same one as last time.", CATALOGUE,
                                             lambda function, record, about: read[record], about)
    assert used == [records[0]] and draft.values == {"book_title": ["the jazz night"]}
    # By words alone neither record is about ReserveBook: the latest record is read.
    draft = Draft(name="ReserveBook")
    used = statements.resolve_back_reference([draft], records, "User: Reserve the same one as last time.", CATALOGUE,
                                             lambda function, record, about: read[record])
    assert used == [records[1]]


def test_a_record_is_read_as_a_request_only_for_the_argument_the_request_names():
    record = "Last week, I rented a van in Phoenix."
    asked = []

    def read(function, text, surely):
        asked.append(surely)
        return {"pickup_city": ("Phoenix", "Phoenix"), "car_type": ("van", "van")}
    for request in ("User: Rent the same kind of car as last time.", "User: Rent the same one as last time."):
        statements.resolve_back_reference([Draft(name="RentCar")], [record], request, CATALOGUE, read,
                                          lambda text: ["RentCar"])
    # "the same kind of car" names car_type: the record is read as a request; "the same one" names nothing.
    assert asked == [True, False]


def test_the_words_after_same_name_the_argument_else_the_required_ones_left_open():
    draft = Draft(name="RentCar")
    assert statements.referred_arguments("the same kind of car as last time", RENT, draft) == ["car_type"]
    assert statements.referred_arguments("the same place as before", RENT, draft) == ["pickup_city", "driver_name"]
    draft.set("pickup_city", ["Austin"], Provenance(argument="pickup_city", value="Austin", origin="user",
                                                    source="Austin"))
    assert statements.referred_arguments("book it again", RENT, draft) == ["driver_name"]


def test_parse_request_fills_the_drivers_name_from_the_stored_profile_through_mcp(tmp_path: Path) -> None:
    tools = [{"name": f.name, "description": f.description, "inputSchema": f.parameters} for f in CATALOGUE.functions]
    engine = travel_engine()
    engine.scorer = scorer("RentCar", pickup_city="Austin")

    async def body(session: Session):
        await session.ok("import_catalogue", {"name": "trips", "tools": tools, "replace": True})
        for text in PROFILE:
            await session.ok("add_instruction", {"user_id": "dana", "text": text})
        result = await session.ok("parse_request", {"user_id": "dana", "dialogue": "Rent a car in Austin",
                                                    "catalogue": "trips", "config": "full"})
        assert result["decision"] == "call", json.dumps(result)
        assert result["calls"] == [{"name": "RentCar", "arguments": {"pickup_city": "Austin",
                                                                     "driver_name": "Dana Reyes"}}]

    with_session(make_server(tmp_path, engine=engine), body)


def test_the_nlsi_style_corpus_and_nlsi_hold_wishes_only_so_these_rules_leave_their_answers_as_they_were(
        shared_data: Path):
    from prefcall.evaluation import corpus
    from prefcall.schemas.importers import import_catalogue
    from prefcall.schemas.registry import builtin_catalogue

    for items, catalogue in [
            (json.loads((corpus.CORPUS_DIR / "items.json").read_text(encoding="utf-8")),
             import_catalogue(corpus.CORPUS_DIR / "catalogue.json")),
            (json.loads((shared_data / "nlsi" / "dev.json").read_text(encoding="utf-8")), builtin_catalogue("nlsi"))]:
        instructions = sorted({s for i in items for s in i["all_standing_instructions"]})
        # No record and no fact (the fact-shaped ones are keyed by a function's words: wishes about it), so stage 1
        # reads every one as before, none is left out, and none fills an argument as a fact.
        assert statements.wishes_of(instructions, catalogue) == instructions
        assert not any(statements.kind_of(s) == "record" for s in instructions)


def test_facts_tagged_to_one_argument_never_give_one_call_per_value_as_two_wishes_do():
    from prefcall.strategies.preferences import Preference, apply_preferences

    home = Preference(instruction="My home city is Denver.", function="RentCar", actions={"pickup_city": ["Denver"]})
    work = Preference(instruction="My work city is Boulder.", function="RentCar",
                      actions={"pickup_city": ["Boulder"]})
    facts = {home.instruction, work.instruction}
    applied = apply_preferences([Draft(name="RentCar")], [home, work], CATALOGUE, facts=facts)
    assert [c.arguments for d in applied.drafts for c in d.calls()] == [{"pickup_city": "Denver"}]
    # The same two values as wishes are two calls.
    applied = apply_preferences([Draft(name="RentCar")], [home, work], CATALOGUE)
    assert [c.arguments["pickup_city"] for d in applied.drafts for c in d.calls()] == ["Denver", "Boulder"]
    assert {f.instruction for f in statements.facts_of(["My home city is Denver.", "My work city is Boulder."],
                                                       CATALOGUE)} == facts
