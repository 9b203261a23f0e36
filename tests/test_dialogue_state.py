"""The conversation's dialogue state (schemas.state): how a turn's calls update it, and how the pipeline carries it."""

from __future__ import annotations

from prefcall.schemas.model import Call, Turn
from prefcall.schemas.state import DialogueState, user_turn_index


def test_a_turn_adds_values_replaces_a_changed_one_and_keeps_the_rest():
    first = DialogueState().updated([Call(name="ReserveRestaurant", arguments={"date": "March 8th", "party_size": 2})],
                                    0, [{"function": "ReserveRestaurant", "argument": "date", "origin": "user",
                                         "source": "on the 8th"}])
    second = first.updated([Call(name="ReserveRestaurant", arguments={"restaurant": "P.f. Chang's", "party_size": 4,
                                                                      "time": None})], 1)
    held = second.functions["ReserveRestaurant"].arguments
    assert {k: (v.value, v.turn) for k, v in held.items()} == {
        "date": ("March 8th", 0), "party_size": (4, 1), "restaurant": ("P.f. Chang's", 1)}
    assert held["date"].source == "on the 8th" and "time" not in held  # an empty value sets nothing
    assert first.functions["ReserveRestaurant"].arguments["party_size"].value == 2  # `updated` returns a copy
    # The same value again keeps the turn (and source) that first set it.
    again = second.updated([Call(name="ReserveRestaurant", arguments={"date": "March 8th"})], 2)
    assert again.functions["ReserveRestaurant"].arguments["date"].turn == 0 and again.turn == 2


def test_one_entry_per_function_and_the_active_one_moves_only_with_a_call():
    state = DialogueState().updated([Call(name="ReserveRestaurant", arguments={"city": "Corte Madera"})], 0)
    state = state.updated([Call(name="GetRide", arguments={"destination": "P.f. Chang's"})], 1)
    assert state.active == "GetRide" and set(state.functions) == {"ReserveRestaurant", "GetRide"}
    assert [c.name for c in state.calls()] == ["GetRide", "ReserveRestaurant"]
    quiet = state.updated([], 2)  # a turn that calls nothing keeps the active function and every value
    assert quiet.active == "GetRide" and quiet.calls() == state.calls() and quiet.turn == 2


def test_the_state_of_a_dialogue_comes_from_the_calls_its_assistant_turns_carry():
    turns = [Turn(role="user", content="A table on the 8th"),
             Turn(role="assistant", content="Where?", calls=[Call(name="ReserveRestaurant",
                                                                  arguments={"date": "March 8th"})]),
             Turn(role="user", content="At P.f. Chang's"),
             Turn(role="assistant", content="For how many?", calls=[Call(name="ReserveRestaurant",
                                                                         arguments={"restaurant": "P.f. Chang's"})]),
             Turn(role="user", content="Two people")]
    state = DialogueState.from_turns(turns)
    held = state.functions["ReserveRestaurant"].arguments
    assert {k: (v.value, v.turn, v.origin) for k, v in held.items()} == {
        "date": ("March 8th", 0, "call"), "restaurant": ("P.f. Chang's", 1, "call")}
    assert state.turn == 1 and user_turn_index(turns) == 2
    assert DialogueState.from_turns(turns[:1]) == DialogueState()


def test_a_turns_errors_say_whether_a_value_was_lost_offered_missed_or_wrong():
    from prefcall.evaluation.metrics.dst import turn_errors

    gold = {"Restaurants_1": {"intent": "ReserveRestaurant", "slots": {
        "date": ["March 8th"], "restaurant_name": ["P.f. Chang's"], "time": ["12:00"], "city": ["Corte Madera"]}}}
    carried = {"Restaurants_1": {"slots": {"date": "March 8th"}}}
    predicted = {"Restaurants_1": {"intent": "ReserveRestaurant", "slots": {
        "restaurant_name": "P.f. Chang's", "city": "San Jose", "party_size": "2"}}}
    errors = turn_errors(predicted, gold, carried=carried, offered="Shall I book it for 12:00?",
                         said="A table on the 8th. At P.f. Chang's in Corte Madera.", intent_right=False)
    # date: held before, missing now; time: offered, not said; city: another value; party_size: not in the gold.
    assert errors == ["wrong intent", "value lost", "offer missed", "wrong value", "extra value"]
    right = {"Restaurants_1": {"intent": "ReserveRestaurant", "slots": {k: v[0] for k, v in
                                                                       gold["Restaurants_1"]["slots"].items()}}}
    assert turn_errors(right, gold, carried=carried, offered="", said="", intent_right=True) == []
    said_too = turn_errors({}, gold, carried={}, offered="Shall I book it for 12:00?", said="at 12:00",
                           intent_right=True)
    assert said_too == ["value missed"]  # the user wrote the offered value: a plain miss, not an offer missed


def test_turns_of_one_dialogue_are_resampled_together():
    from prefcall.evaluation.metrics.intervals import clustered_mean, proportion

    values = [1.0] * 10 + [0.0] * 10
    clustered = clustered_mean(values, ["a"] * 10 + ["b"] * 10)
    assert clustered == 0.5 and clustered.interval() == (0.0, 1.0)  # two dialogues say little
    independent = proportion(10, 20).interval()
    assert independent[0] > 0.25 and independent[1] < 0.75  # twenty independent turns would say more
    spread = clustered_mean(values, [str(i) for i in range(20)]).interval()
    assert spread[0] > 0.25 and spread[1] < 0.75


def _reserve():
    from prefcall.schemas.model import Catalogue, Function

    return Catalogue(name="dining", functions=[Function(
        name="ReserveRestaurant", description="Reserve a table at a restaurant.",
        parameters={"type": "object", "properties": {
            "restaurant_name": {"type": "string", "description": "name of the restaurant"},
            "date": {"type": "string", "description": "date of the reservation"},
            "party_size": {"type": "integer", "description": "number of people"}},
            "required": ["restaurant_name", "date"]})])


def _likes(**values):
    """The fake model: stage 1 likes ReserveRestaurant; for argument A it likes values[A] when the prompt offers
    it as a candidate (else null)."""
    import json
    import re

    def score(prompt: str, candidate: str) -> float:
        argument = re.search(r'\{"(\w+)": $', prompt)
        if argument is None:
            return -0.1 if candidate.strip() == "ReserveRestaurant" else -5.0
        wanted = values.get(argument.group(1))
        if wanted is None:
            return -0.1 if candidate == "null" else -12.0
        return -0.1 if candidate == json.dumps(wanted) else -12.0
    return score


def test_a_proposal_the_user_accepts_is_a_value_of_theirs_and_one_they_reject_is_not():
    from prefcall.engine.fake import FakeEmbedder, FakeEngine
    from prefcall.strategies.grounding.values import accepts
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.pipeline_models import get_config

    def parse(reply: str):
        turns = [Turn(role="user", content="Book a table at Chez Panisse"),
                 Turn(role="assistant", content="Please confirm: a table at Chez Panisse on March 8th."),
                 Turn(role="user", content=reply)]
        pipeline = Pipeline(FakeEngine(scorer=_likes(restaurant_name="Chez Panisse", date="March 8th")),
                            FakeEmbedder())
        return pipeline.parse(turns, [], _reserve(), get_config("full"))

    accepted = parse("Yes, that's great")
    assert accepted.calls[0].arguments == {"restaurant_name": "Chez Panisse", "date": "March 8th"}
    held = accepted.state.functions["ReserveRestaurant"].arguments
    assert (held["date"].origin, held["date"].turn) == ("offer", 1)
    assert held["restaurant_name"].origin == "user"
    for reply in ("No, not that day", "What is their address?"):  # rejected, or not answered
        result = parse(reply)
        assert "date" not in result.calls[0].arguments, reply
        assert result.decision == "ask" and [m.argument for m in result.missing] == ["date"]
    assert accepts("Sure, book it") and accepts("yes please") and not accepts("Sure, but on Friday")
    assert not accepts("Please find another one")


def test_a_state_sent_back_keeps_the_offer_the_user_is_answering():
    from prefcall.engine.fake import FakeEmbedder, FakeEngine
    from prefcall.strategies.pipeline import Pipeline, with_state
    from prefcall.strategies.pipeline_models import get_config

    offer = Turn(role="assistant", content="Please confirm: a table at Chez Panisse on March 8th.")
    state = DialogueState().updated([Call(name="ReserveRestaurant", arguments={"restaurant_name": "Chez Panisse"})], 0)
    turns = with_state([offer, Turn(role="user", content="Yes, that's great")], state)
    assert [t.role for t in turns] == ["assistant", "user"] and turns[0].calls == state.calls()
    pipeline = Pipeline(FakeEngine(scorer=_likes(restaurant_name="Chez Panisse", date="March 8th")), FakeEmbedder())
    result = pipeline.parse([offer, Turn(role="user", content="Yes, that's great")], [], _reserve(),
                            get_config("full"), state=state)
    held = result.state.functions["ReserveRestaurant"].arguments
    assert (held["date"].value, held["date"].origin, held["date"].turn) == ("March 8th", "offer", 1)
    assert (held["restaurant_name"].value, held["restaurant_name"].turn) == ("Chez Panisse", 0)


def test_an_argument_the_user_does_not_mind_takes_its_schema_default():
    from prefcall.engine.fake import FakeEmbedder, FakeEngine
    from prefcall.schemas.model import Catalogue, Function
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.pipeline_models import get_config

    flights = Catalogue(name="air", functions=[Function(
        name="SearchFlights", description="Search one way flights.", parameters={"type": "object", "properties": {
            "destination": {"type": "string", "description": "arrival city"},
            "airlines": {"type": "string", "description": "airline (default: dontcare)"},
            "seating_class": {"type": "string", "enum": ["Economy", "Business", "any"], "description": "cabin class"},
            "date": {"type": "string", "description": "departure date (default: 2019-03-01)"},
            "refundable": {"type": "string", "enum": ["True", "False"], "description": "refundable (default: dontcare)"}},
            "required": ["destination"]})])

    def parse(text: str):
        def score(prompt: str, candidate: str) -> float:
            if '{"' not in prompt[-40:]:
                return -0.1 if candidate.strip() == "SearchFlights" else -5.0
            return -0.1 if candidate in ('"Boston"', "null") and ('"destination": ' in prompt[-20:]) == (
                candidate == '"Boston"') else -12.0
        return Pipeline(FakeEngine(scorer=score), FakeEmbedder()).parse(f"User: {text}", [], flights,
                                                                        get_config("full"))

    any_airline = parse("A flight to Boston on any airline. I don't care about the class or if it's refundable, "
                        "or what date.")
    # "dontcare" is no refundable option, and the date's default is a date, not what the user asked for.
    assert any_airline.calls[0].arguments == {"destination": "Boston", "airlines": "dontcare", "seating_class": "any"}
    said = {p["argument"]: p for p in any_airline.provenance}
    assert said["airlines"]["origin"] == "user" and "any airline" in said["airlines"]["source"]
    assert parse("A flight to Boston with Delta").calls[0].arguments == {"destination": "Boston"}
    # The date's default is a date, not "any": the user's indifference leaves it unset.
    assert parse("A flight to Boston, I don't care what date.").calls[0].arguments == {"destination": "Boston"}


def test_a_number_the_assistant_wrote_is_an_arguments_only_where_the_argument_is_named_after_it():
    from prefcall.strategies.grounding.values import Source, argument_candidates

    offer = Source("user", "I found 4 flights, one with 1 layover, for 2 passengers and 0 checked bags.",
                   "offer turn 1")
    passengers = argument_candidates("passengers", {"type": "integer"}, [offer])
    assert [c.value for c in passengers.candidates] == [2]  # not the 4 flights or the 1 layover
    bags = argument_candidates("number_checked_bags", {"type": "string", "enum": ["0", "1", "2"]}, [offer])
    assert [(c.value, c.grounded) for c in bags.candidates] == [("0", True), ("1", False), ("2", False)]
    said = Source("user", "I found 4 flights", "turn 0")  # the user's own words: every number stays a candidate
    assert [c.value for c in argument_candidates("passengers", {"type": "integer"}, [said]).candidates] == [4]
    # An argument that counts people takes the number a noun counting people follows, whatever its own words.
    table = Source("user", "A table for 2 people at 7 pm with a menu of 3 courses?", "offer turn 1")
    for name in ("number_of_seats", "party_size"):
        assert [c.value for c in argument_candidates(name, {"type": "integer"}, [table]).candidates] == [2]
    assert [c.value for c in argument_candidates("number_of_courses", {"type": "integer"}, [table]).candidates] == [3]
    assert argument_candidates("number_of_rooms", {"type": "integer"}, [table]).candidates == []
    # "for 2" with nothing after it that it counts is a party; "for 2 nights" and "for 3 pm" are not.
    for text, seats in (("A reservation for 2 at Kittea Cat today?", [2]), ("A table next Friday for 4?", [4]),
                        ("A room for 2 nights?", []), ("Booking for 3 pm, right?", [])):
        bare = Source("user", text, "offer turn 1")
        assert [c.value for c in argument_candidates("number_of_seats", {"type": "integer"}, [bare]).candidates] \
            == seats, text
        assert argument_candidates("number_of_rooms", {"type": "integer"}, [bare]).candidates == []


def _dining_and_events():
    """The dining catalogue with FindEvents beside it, and a fake stage 1 that always prefers FindEvents, by a
    little (the new turn alone would leave the conversation's function)."""
    from prefcall.schemas.model import Catalogue, Function

    events = Function(name="FindEvents", description="Find concerts and games in a city.",
                      parameters={"type": "object", "properties": {"city": {"type": "string"}}})

    def score(prompt: str, candidate: str) -> float:
        return {"FindEvents": -0.5, "ReserveRestaurant": -1.0}.get(candidate.strip(), -12.0)

    return Catalogue(name="mixed", functions=[*_reserve().functions, events]), score


def test_with_the_state_sent_back_the_conversations_function_stays_unless_the_new_turn_names_another():
    from prefcall.engine.fake import FakeEmbedder, FakeEngine
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.pipeline_models import get_config

    catalogue, score = _dining_and_events()
    state = DialogueState().updated([Call(name="ReserveRestaurant", arguments={"restaurant_name": "Chez Panisse"})], 0)
    pipeline = Pipeline(FakeEngine(scorer=score), FakeEmbedder())
    kept = pipeline.parse("Yes, please", [], catalogue, get_config("full"), state=state)
    assert kept.functions == ["ReserveRestaurant"] and kept.state.active == "ReserveRestaurant"
    assert any("kept ReserveRestaurant" in n for n in kept.notes)
    moved = pipeline.parse("Now find me some concerts", [], catalogue, get_config("full"), state=state)
    assert moved.functions[0] == "FindEvents" and moved.state.active == "FindEvents"
    assert set(moved.state.functions) == {"ReserveRestaurant", "FindEvents"}


def test_a_word_two_functions_share_does_not_move_the_conversation_and_a_word_of_one_does():
    from prefcall.engine.fake import FakeEmbedder, FakeEngine
    from prefcall.schemas.model import Catalogue, Function
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.pipeline_models import get_config

    def function(name: str, description: str) -> Function:
        return Function(name=name, description=description,
                        parameters={"type": "object", "properties": {"city": {"type": "string"}}})

    catalogue = Catalogue(name="trips", functions=[
        function("ReserveRestaurant", "Make a table reservation at a restaurant"),
        function("FindRestaurants", "Find restaurants by location"),
        function("SearchOnewayFlight", "Search for one-way flights"),
        function("SearchRoundtripFlights", "Search for round-trip flights")])
    prefers = {"FindRestaurants": -0.5, "SearchRoundtripFlights": -0.5}  # stage 1 leans to these, by a little

    def score(prompt: str, candidate: str) -> float:
        return prefers.get(candidate.strip(), -1.0 if candidate.strip() in catalogue.names else -12.0)

    pipeline = Pipeline(FakeEngine(scorer=score), FakeEmbedder())
    reserving = DialogueState().updated([Call(name="ReserveRestaurant", arguments={"city": "San Jose"})], 0)
    kept = pipeline.parse("Please find restaurants in San Jose. Can you try Sino?", [], catalogue,
                          get_config("full"), state=reserving)
    assert kept.functions[0] == "ReserveRestaurant" and kept.state.active == "ReserveRestaurant"
    one_way = DialogueState().updated([Call(name="SearchOnewayFlight", arguments={"city": "Denver"})], 0)
    moved = pipeline.parse("Actually, make it a round trip.", [], catalogue, get_config("full"), state=one_way)
    assert moved.functions[0] == "SearchRoundtripFlights" and moved.state.active == "SearchRoundtripFlights"
    stays = pipeline.parse("How long is the flight?", [], catalogue, get_config("full"), state=one_way)
    assert stays.functions[0] == "SearchOnewayFlight"
    # Accepting a proposal takes its words as the turn's: "a table" names the booking, not the search.
    prefers["ReserveRestaurant"] = -0.3
    finding = [Turn(role="user", content="Find restaurants in San Jose"),
               Turn(role="assistant", content="Sino is a nice one. Shall I book you a table there?",
                    calls=[Call(name="FindRestaurants", arguments={"city": "San Jose"})]),
               Turn(role="user", content="Yes, please.")]
    booked = pipeline.parse(finding, [], catalogue, get_config("full"))
    assert booked.functions[0] == "ReserveRestaurant" and booked.state.active == "ReserveRestaurant"
    finding[-1] = Turn(role="user", content="No, what else is there?")
    assert pipeline.parse(finding, [], catalogue, get_config("full")).functions[0] == "FindRestaurants"


def test_a_value_the_user_says_in_a_later_turn_replaces_the_one_an_earlier_turn_gave():
    import json
    import re

    from prefcall.engine.fake import FakeEmbedder, FakeEngine
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.pipeline_models import get_config

    likes = {"Chez Panisse": -0.1, "Nopa": -0.3}  # both restaurants are likely names; the date is unknown

    def score(prompt: str, candidate: str) -> float:
        argument = re.search(r'\{"(\w+)": $', prompt)
        if argument is None:
            return -0.1 if candidate.strip() == "ReserveRestaurant" else -5.0
        if argument.group(1) == "restaurant_name":
            return {json.dumps(k): v for k, v in likes.items()}.get(candidate, -12.0)
        return -0.1 if candidate == "null" else -12.0

    turns = [Turn(role="user", content="Book a table at Chez Panisse"),
             Turn(role="assistant", content="For which date?",
                  calls=[Call(name="ReserveRestaurant", arguments={"restaurant_name": "Chez Panisse"})]),
             Turn(role="user", content="Actually, make it Nopa, on March 8th")]
    result = Pipeline(FakeEngine(scorer=score), FakeEmbedder()).parse(turns, [], _reserve(), get_config("full"))
    assert result.calls[0].arguments == {"restaurant_name": "Nopa", "date": "March 8th"}
    held = result.state.functions["ReserveRestaurant"].arguments
    assert (held["restaurant_name"].value, held["restaurant_name"].turn) == ("Nopa", 1)
    # Named first in the opening turn and again in the newest one, a value counts as said last: it wins over a
    # more probable one of the opening turn alone.
    likes.update({"Chez Panisse": -0.3, "Nopa": -0.1})
    again = [Turn(role="user", content="Book a table at Chez Panisse or else at Nopa"), turns[1],
             Turn(role="user", content="Chez Panisse is fine, on March 8th")]
    kept = Pipeline(FakeEngine(scorer=score), FakeEmbedder()).parse(again, [], _reserve(), get_config("full"))
    assert kept.calls[0].arguments["restaurant_name"] == "Chez Panisse"


def test_re_sending_the_dialogue_keeps_the_conversations_function_as_sending_the_state_does():
    from prefcall.engine.fake import FakeEmbedder, FakeEngine
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.pipeline_models import get_config

    catalogue, score = _dining_and_events()
    earlier = [Turn(role="user", content="Book a table at Chez Panisse"),
               Turn(role="assistant", content="Please confirm: a table at Chez Panisse.",
                    calls=[Call(name="ReserveRestaurant", arguments={"restaurant_name": "Chez Panisse"})])]
    pipeline = Pipeline(FakeEngine(scorer=score), FakeEmbedder())
    resent = pipeline.parse([*earlier, Turn(role="user", content="Is it expensive?")], [], catalogue,
                            get_config("full"))
    sent = pipeline.parse("Is it expensive?", [], catalogue, get_config("full"),
                          state=DialogueState.from_turns(earlier))
    assert resent.functions[0] == sent.functions[0] == "ReserveRestaurant"
    assert resent.state.active == sent.state.active == "ReserveRestaurant"
    moved = pipeline.parse([*earlier, Turn(role="user", content="Now find me some concerts")], [], catalogue,
                           get_config("full"))
    assert moved.functions[0] == "FindEvents"


def test_the_time_or_date_of_the_newest_turn_is_the_arguments_even_where_the_model_prefers_none():
    from prefcall.engine.fake import FakeEmbedder, FakeEngine
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.pipeline_models import get_config

    said = Turn(role="user", content="Book a table at Chez Panisse on March 5th")
    offer = Turn(role="assistant", content="So a table at Chez Panisse next Tuesday at 6:30 pm?",
                 calls=[Call(name="ReserveRestaurant",
                             arguments={"restaurant_name": "Chez Panisse", "date": "March 5th"})])
    pipeline = Pipeline(FakeEngine(scorer=_likes(restaurant_name="Chez Panisse")), FakeEmbedder())
    accepted = pipeline.parse([said, offer, Turn(role="user", content="Yes, that's right.")], [], _reserve(),
                              get_config("full"))
    assert accepted.calls[0].arguments["date"] == "next Tuesday"  # the model likes no date: the turn gives one
    held = accepted.state.functions["ReserveRestaurant"].arguments["date"]
    assert (held.value, held.origin, held.turn) == ("next Tuesday", "offer", 1)
    # Not accepted, the offer's date is nobody's: the date the user gave stays.
    refused = pipeline.parse([said, offer, Turn(role="user", content="No, what else is there?")], [], _reserve(),
                             get_config("full"))
    assert refused.state.functions["ReserveRestaurant"].arguments["date"].value == "March 5th"
    # The newest turn with two dates does not say which: the model's choice (none here) and the state decide.
    two = pipeline.parse([said, offer.model_copy(update={"content": "Tuesday or Friday?"}),
                          Turn(role="user", content="Yes, Tuesday or Friday")], [], _reserve(), get_config("full"))
    assert two.state.functions["ReserveRestaurant"].arguments["date"].value == "March 5th"


def test_a_number_word_is_a_numeric_options_only_where_it_counts_the_arguments_things():
    from prefcall.strategies.grounding.values import Source, argument_candidates

    def written(name: str, text: str) -> dict[str, str]:
        options = {"type": "string", "enum": ["0", "1", "2", "3"]}
        return {c.value: c.text for c in argument_candidates(name, options, [Source("user", text, "turn 0")]).candidates
                if c.text}

    assert written("number_checked_bags", "I have zero bags to check in") == {"0": "zero"}
    assert written("passengers", "one way flights for two people, please") == {"2": "two"}  # "one way" counts none
    assert written("number_of_seats", "a table for three") == {}  # "three" followed by nothing it counts
    assert written("passengers", "2 tickets") == {"2": "2"}  # a written numeral is the option, as before
