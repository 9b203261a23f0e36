"""Times and dates as units of a span argument (strategies/grounding/temporal.py) and the newest turn's value."""

from __future__ import annotations

import pytest

from prefcall.strategies.grounding.temporal import align, argument_kind, expressions, joined, newest_unit, outside
from prefcall.strategies.grounding.temporal import expression_spans
from prefcall.strategies.grounding.values import Source, argument_candidates


def _found(text: str, kind: str) -> list[str]:
    return [text[a:b] for a, b in expressions(text, kind)]  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "times", "dates"), [
    ("A table for 2 people at half past 11 in the morning.", ["half past 11 in the morning"], []),
    ("I would like a reservation at morning 11:15.", ["morning 11:15"], []),
    ("Please do it for one in the afternoon.", ["one in the afternoon"], []),
    ("You want a table for 2 people today at 1 pm.", ["1 pm"], ["today"]),
    ("at 11:30 am on the 4th of this month", ["11:30 am"], ["4th of this month"]),
    ("Set it for 12 o'clock in the afternoon next Wednesday", ["12 o'clock in the afternoon"], ["next Wednesday"]),
    ("Leaving Monday next week, around 7 p.m.", ["7 p.m."], ["Monday next week"]),
    ("May I book 5 tickets for May 5th, 2024 in the evening?", ["evening"], ["May 5th, 2024"]),
    ("on 2019-03-05 or 3/5 at noon", ["noon"], ["2019-03-05", "3/5"]),
    ("Is it free on the 14th? Or on the 2nd of May?", [], ["the 14th", "2nd of May"]),
    ("Find me a cheap Italian place in Oakland", [], []),
    ("Book me in at 18/8 Fine Men's Salons", [], []),  # a name, not a date
    ("Request an appointment at 20Th Salon And Barber.", [], []),  # an ordinal that opens a name
    ("Could we do the 3rd I think, or the 14th March?", [], ["the 3rd", "14th March"]),
    ("I am hungry and need a table for a month of Sundays", [], ["Sundays"]),
    ("Ferry tickets from Seattle to Friday Harbor on next Monday", [], ["next Monday"]),  # a weekday opens a name
    ("Can we do Friday March 3rd? Monday I am away.", [], ["Friday", "March 3rd", "Monday"]),
])
def test_whole_time_and_date_expressions_are_found(text, times, dates):
    assert _found(text, "time") == times
    assert _found(text, "date") == dates


def test_a_time_argument_takes_the_whole_expression_and_none_of_its_parts():
    source = Source("user", "I want to make a restaurant reservation at half past 11 in the morning.", "turn 0")
    pool = argument_candidates("time", {"type": "string", "description": "Time of the reservation"}, [source])
    texts = [c.text for c in align(pool.candidates, [source], "time")]
    assert texts[0] == "half past 11 in the morning"
    assert not {"the morning", "morning", "11 in the morning", "half past 11"} & set(texts)
    assert "restaurant reservation" not in texts  # words that hold no time are no time's value
    # "11:30 am": "am" is a function word, so the span generator alone never ends a value with it.
    offer = Source("user", "A table for 1 person today at 11:30 am?", "offer turn 1")
    pool = argument_candidates("time", {"type": "string"}, [offer])
    assert [c.text for c in align(pool.candidates, [offer], "time")][0] == "11:30 am"
    assert "11:30" not in [c.text for c in align(pool.candidates, [offer], "time")]


def test_a_date_is_no_time_and_a_time_no_date():
    source = Source("user", "I want to make a dinner reservation on March 5th.", "turn 0")
    time = argument_candidates("time", {"type": "string", "description": "Time of the reservation"}, [source])
    assert not {"March 5th", "March", "5th", "reservation on March 5th"} & {
        c.text for c in align(time.candidates, [source], "time")}
    date = argument_candidates("date", {"type": "string"}, [source])
    assert [c.text for c in align(date.candidates, [source], "date")][0] == "March 5th"
    evening = Source("user", "Book it for 7 pm tonight", "turn 0")
    date = argument_candidates("date", {"type": "string"}, [evening])
    texts = [c.text for c in align(date.candidates, [evening], "date")]
    assert texts[0] == "tonight" and "7 pm" not in texts  # tonight is a date and a time; 7 pm only a time
    time = argument_candidates("time", {"type": "string"}, [evening])
    assert [c.text for c in align(time.candidates, [evening], "time")][0] == "7 pm tonight"


def test_a_time_argument_with_no_date_argument_beside_it_takes_the_date_the_time_is_on():
    """A reminder's "when" is "8:30 tomorrow", not "8:30": where the function has no date argument, the date beside
    a time is part of its one value. With a date argument beside it, the time stays a time."""
    text = "Remind me to pay the phone bill at 8:30 tomorrow, and call mom at 7 pm on Friday; tomorrow at noon too."
    assert [text[a:b] for a, b in joined(text, "time")] == ["8:30 tomorrow", "7 pm on Friday", "tomorrow at noon"]
    source = Source("user", "Remind me to pay the phone bill at 8:30 tomorrow.", "turn 0")
    pool = argument_candidates("time", {"type": "string", "description": "When."}, [source])
    assert [c.text for c in align(pool.candidates, [source], "time", dated=True)][0] == "8:30 tomorrow"
    assert [c.text for c in align(pool.candidates, [source], "time")][0] == "8:30"
    assert _chosen(source, {"time": {"type": "string", "description": "When."}})["time"] == ["8:30 tomorrow"]
    split = _chosen(source, {"time": {"type": "string", "description": "When."}, "date": {"type": "string"}})
    assert split.get("time") == ["8:30"]


def _chosen(source: Source, properties: dict) -> dict:
    """What the filler sets from `source` for a function of these arguments, with a fake model that prefers any
    value to null."""
    from prefcall.engine.fake import FakeEngine
    from prefcall.schemas.model import Function
    from prefcall.strategies.grounded import load_weights
    from prefcall.strategies.grounding.evidence import FeatureContext
    from prefcall.strategies.grounding.fill import fill_arguments

    function = Function(name="Book", description="Book it.", parameters={"type": "object", "properties": properties})
    engine = FakeEngine(scorer=lambda prompt, candidate: 0.0 if candidate != "null" else -9.0)
    filled = fill_arguments(engine, function, [source], "User: " + source.text,
                            FeatureContext(function, None, sources_text=source.text), load_weights("m"))
    return {c.argument: c.texts for c in filled.choices}


def test_a_date_argument_with_no_time_argument_beside_it_takes_the_time_of_that_day():
    """A class's "day" is "Saturday morning", not "Saturday", where the function has no time argument; with one
    beside it, the date stays a date."""
    text = "Book a yoga class on Saturday morning, or Friday at 7 pm."
    assert [text[a:b] for a, b in joined(text, "date")] == ["Saturday morning", "Friday at 7 pm"]
    source = Source("user", "can you get me into a boxing class on saturday morning.", "turn 0")
    assert _chosen(source, {"day": {"type": "string", "description": "Day of the class."}})["day"] == \
        ["saturday morning"]
    split = _chosen(source, {"day": {"type": "string", "description": "Day of the class."},
                             "time": {"type": "string", "description": "Time of the class."}})
    assert split.get("day") == ["saturday"] and split.get("time") == ["morning"]


def test_which_arguments_hold_a_time_or_a_date():
    assert argument_kind("time", {"type": "string"}) == "time"
    assert argument_kind("departure_date", {"type": "string"}) == "date"
    assert argument_kind("check_in", {"type": "string", "description": "Check-in day"}) == "date"
    assert argument_kind("start", {"type": "string", "format": "date-time"}) is None
    assert argument_kind("date_time", {"type": "string"}) is None  # both: a value that joins the two
    assert argument_kind("restaurant_name", {"type": "string"}) is None
    # a `format` says what the value is, whatever its description's words ("Time of day" is no date)
    assert argument_kind("time", {"type": "string", "format": "time", "description": "Time of day"}) == "time"
    assert argument_kind("when", {"type": "string", "format": "date", "description": "Time of the visit"}) == "date"


def test_a_date_and_a_time_written_together_go_to_their_own_arguments():
    source = Source("user", "Book a vet visit for Mochi at 3 pm on March 14, 2027.", "turn 0")
    split = _chosen(source, {"date": {"type": "string", "format": "date", "description": "Day of the visit"},
                             "time": {"type": "string", "format": "time", "description": "Time of day"}})
    assert split.get("date") == ["March 14, 2027"] and split.get("time") == ["3 pm"]


def test_the_newest_turn_gives_its_one_time_and_an_accepted_offer_belongs_to_it():
    turns = [Source("user", "A table at 7 pm please", "turn 0"),
             Source("user", "You want a table today at 1 pm?", "offer turn 1"),
             Source("user", "Yes, that is correct.", "turn 2")]
    assert newest_unit(turns, "time").text == "1 pm"
    assert newest_unit(turns, "date").text == "today"
    # A request that opens the dialogue: its one time is the filler's to weigh ("not cooking today"), not set here.
    assert newest_unit(turns[:1], "time") is None
    assert newest_unit([*turns[:1], Source("user", "At 8 pm then", "turn 2")], "time").text == "8 pm"
    # Two times in the newest turn: which one is the argument's is not for this rule to say.
    assert newest_unit([Source("user", "between 6 pm and 8 pm", "turn 0")], "time") is None
    # An offer of an earlier turn, not the one the newest turn answers, is not the newest turn's.
    old = [Source("user", "Today at 1 pm?", "offer turn 1"), Source("user", "ok", "turn 2"),
           Source("user", "and the address?", "turn 4")]
    assert newest_unit(old, "time") is None
    assert newest_unit([Source("instruction", "I like to eat at 7 pm", "if I book")], "time") is None


@pytest.mark.parametrize(("text", "kind", "kept", "dropped"), [
    # A name the model may take for an event's time: words that hold no time are no candidates.
    ("Request the event Tash Sultana when requesting Events.", "time", [], ["Tash Sultana", "the event Tash"]),
    # A number that opens a name is no date, and neither is the name.
    ("Can you book an appointment at 18/8 Fine Men's Salons in Palo Alto?", "date", [],
     ["18/8", "18/8 Fine Men's Salons", "Palo Alto"]),
    ("Request an appointment at 20Th Salon And Barber.", "date", [], ["20Th", "20Th Salon"]),
    # Clock and calendar words the grammar leaves to the filler stay.
    ("Let's meet around lunch, or on Christmas Eve.", "date", ["Christmas Eve"], []),
    ("Let's meet around lunch, or on Christmas Eve.", "time", ["lunch"], []),
])
def test_spans_that_hold_no_time_or_date_are_no_candidates(text, kind, kept, dropped):
    source = Source("user", text, "turn 0")
    pool = argument_candidates(kind, {"type": "string"}, [source])
    texts = [c.text for c in align(pool.candidates, [source], kind)]
    assert set(kept) <= set(texts), texts
    assert not set(dropped) & set(texts), texts


def test_a_calls_value_stays_whatever_its_words():
    from prefcall.strategies.grounding.values import Candidate

    call = Source("call", "the usual slot", "GetEvents")
    kept = align([Candidate("the usual slot", "the usual slot", call, 0, 14)], [call], "time")
    assert [c.text for c in kept] == ["the usual slot"]


def test_an_argument_that_holds_no_time_or_date_leaves_them_to_the_one_that_does():
    """"I like next Monday for ferries": "Monday" is the date's, never the origin's; "this weekend for parking" is
    no location. A name that opens with a weekday stays whole, and a call's value stays whatever its words."""
    instruction = Source("instruction", "I like next Monday for ferries.", "i")
    pool = argument_candidates("origin", {"type": "string"}, [instruction])
    texts = {c.text for c in outside(pool.candidates, expression_spans([instruction], {"date"}))}
    assert texts and not any("Monday" in t for t in texts)
    assert any("Monday" in c.text for c in pool.candidates)  # they were candidates before
    parking = Source("instruction", "I like this weekend for parking.", "i")
    pool = argument_candidates("location", {"type": "string"}, [parking])
    kept = {c.text for c in outside(pool.candidates, expression_spans([parking], {"date"}))}
    assert not {"this weekend for parking", "weekend"} & kept
    harbor = Source("user", "Book a ferry to Friday Harbor for two", "turn 0")
    pool = argument_candidates("destination", {"type": "string"}, [harbor])
    assert "Friday Harbor" in {c.text for c in outside(pool.candidates, expression_spans([harbor], {"date"}))}
    date = argument_candidates("date", {"type": "string"}, [harbor])
    assert not any("Friday" in c.text for c in align(date.candidates, [harbor], "date"))
    call = Source("call", "Monday Night Club", "call 0")
    pool = argument_candidates("venue", {"type": "string"}, [call])
    kept_call = outside(pool.candidates, expression_spans([call], {"date"}))
    assert [c.text for c in kept_call] == [c.text for c in pool.candidates]
