"""The generated misfit corpus: requests whose values break the schema, beside requests whose values fit it.

Why (failure class g of issue 27): a value the user gave that the schema does not allow (an integer argument given
"2.5", a count past its `maximum`, an option the enum does not have, a code its `pattern` rejects, a date that does
not exist, a time past midnight) must make `ask`, with a question that names the problem; it is never called,
dropped or replaced. A value written in words that a `format` can take ("March 14, 2027", "3 pm") is normalised
and called. No shared file has such items (NLSI, SGD and the corpus have no `pattern`, range or `format`), so these
are generated, over ten functions none of the shared data or the other generated corpora has (authored for
prefcall from scratch), each with typed and constrained arguments.

Items: `example_id`, `user_utterance` ("User: ..."), `api_calls` (the call the request asks for, with the values
it gives that fit; an item whose value breaks the schema leaves that argument out), `function`, `style`,
`expect` ("call" or "ask"), `kind` (`valid`, or the problem: `enum`, `range`, `type`, `pattern`, `date`, `time`)
and, for a misfit, `argument` (the one whose value breaks the schema) and `written` (the user's words for it).
Styles (how the request is framed): `plain` ("Book a campsite at Pine Lake for 3 nights."), `polite` ("Could you
book ...? Thanks."), `labelled` ("Campsite booking. Park: Pine Lake. Nights: 3."). Split (read by `prefcall split
build`): three functions (RequestMovingQuote, ScheduleWindowCleaning, RenewLibraryCard) and the `labelled` style
are report-only; the rest is split half and half by a hash of the id. Read by `prefcall eval misfit`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefcall.evaluation.corpus import CORPUS_DIR, draw_items, function_entry, render_call, write_corpus

SEED = 20261130
ITEMS_PER_FUNCTION = 20
REPORT_FUNCTIONS = ("RequestMovingQuote", "ScheduleWindowCleaning", "RenewLibraryCard")
TUNE_STYLES = ("plain", "polite")
REPORT_STYLES = ("labelled",)
STYLES = TUNE_STYLES + REPORT_STYLES


@dataclass(frozen=True)
class Arg:
    """One argument: its schema, the values a user writes that fit (written, called) and that break it
    (written, problem kind), and how a request gives it (`say`, with {v}) and how a labelled request names it."""

    name: str
    schema: dict[str, Any]
    good: tuple[tuple[str, Any], ...]
    bad: tuple[tuple[str, str], ...] = ()
    say: str = "{v}"
    label: str = ""
    required: bool = True


@dataclass(frozen=True)
class Domain:
    function: str
    description: str
    asks: tuple[str, ...]  # the request's verb phrase ("book a campsite")
    label: str  # a labelled request's heading ("Campsite booking")
    args: tuple[Arg, ...]


def _s(type_: str, description: str, **more: Any) -> dict[str, Any]:
    return {"type": type_, "description": description, **more}


DATE = _s("string", "Day of the visit", format="date")
TIME = _s("string", "Time of day", format="time")

DOMAINS: tuple[Domain, ...] = (
    Domain("BookVetAppointment", "Book a visit to the vet for a pet.", ("book a vet visit", "get my pet seen by a vet"),
           "Vet visit", (
               Arg("pet_name", _s("string", "Name of the pet"), (("Biscuit", "Biscuit"), ("Mochi", "Mochi")),
                   say="for {v}", label="Pet"),
               Arg("date", DATE, (("March 14, 2027", "2027-03-14"), ("June 2, 2027", "2027-06-02")),
                   (("February 30, 2027", "date"), ("April 31, 2027", "date")), say="on {v}", label="Date"),
               Arg("time", TIME, (("3 pm", "15:00:00"), ("9:30 am", "09:30:00")), (("25:30", "time"),),
                   say="at {v}", label="Time", required=False))),
    Domain("RegisterCourse", "Register the student for a university course.", ("register me for a course",
                                                                               "sign me up for a course"),
           "Course registration", (
               Arg("course_code", _s("string", "Course code: three capital letters and three digits",
                                     pattern="^[A-Z]{3}[0-9]{3}$"), (("BIO101", "BIO101"), ("HIS210", "HIS210")),
                   (("BIO-1O1X", "pattern"), ("HISTORY2", "pattern")), say="{v}", label="Course"),
               Arg("credits", _s("integer", "Credits to take it for", minimum=1, maximum=6),
                   (("3", 3), ("4", 4)), (("9", "range"), ("2.5", "type")), say="for {v} credits", label="Credits",
                   required=False))),
    Domain("OrderPrints", "Order photo prints.", ("order photo prints", "print my photos"), "Print order", (
        Arg("size", _s("string", "Print size", enum=["4x6", "5x7", "8x10"]), (("4x6", "4x6"), ("8x10", "8x10")),
            (("9x12", "enum"), ("3x3", "enum")), say="in {v}", label="Size"),
        Arg("copies", _s("integer", "Number of copies", minimum=1, maximum=100), (("20", 20), ("5", 5)),
            (("250", "range"), ("0", "range")), say="{v} copies", label="Copies"))),
    Domain("BookCampsite", "Reserve a campsite in a park.", ("book a campsite", "reserve a campsite"),
           "Campsite booking", (
               Arg("park", _s("string", "Name of the park"), (("Pine Lake", "Pine Lake"), ("Red Rock", "Red Rock")),
                   say="at {v}", label="Park"),
               Arg("nights", _s("integer", "Number of nights", minimum=1, maximum=14), (("3", 3), ("7", 7)),
                   (("21", "range"), ("2.5", "type")), say="for {v} nights", label="Nights"),
               Arg("tent_size", _s("string", "Size of the tent pitch", enum=["small", "medium", "large"]),
                   (("medium", "medium"), ("large", "large")), (("huge", "enum"),), say="with a {v} tent pitch",
                   label="Tent pitch", required=False))),
    Domain("SetWaterHeater", "Set the water heater's temperature.", ("set the water heater", "turn the water heater"),
           "Water heater", (
               Arg("temperature", _s("integer", "Water temperature in degrees Celsius", minimum=40, maximum=75),
                   (("55", 55), ("60", 60)), (("95", "range"), ("20", "range")), say="to {v} degrees",
                   label="Temperature"),
               Arg("schedule", _s("string", "When it heats", enum=["always", "mornings", "evenings"]),
                   (("mornings", "mornings"), ("evenings", "evenings")), (("weekends", "enum"),),
                   say="for {v}", label="Schedule", required=False))),
    Domain("SendFax", "Send a fax.", ("send a fax", "fax a document"), "Fax", (
        Arg("fax_number", _s("string", "Fax number, digits only", pattern="^[0-9 +-]{7,15}$"),
            (("555-0187", "555-0187"), ("555-0143", "555-0143")), (("555-FAX-NOW", "pattern"),
                                                                   ("555-01X7", "pattern")),
            say="to {v}", label="Fax number"),
        Arg("pages", _s("integer", "Number of pages", minimum=1, maximum=50), (("4", 4), ("12", 12)),
            (("80", "range"),), say="with {v} pages", label="Pages", required=False))),
    Domain("ReserveBowlingLane", "Reserve a bowling lane.", ("reserve a bowling lane", "book a bowling lane"),
           "Bowling lane", (
               Arg("date", _s("string", "Day of the game", format="date"),
                   (("May 8, 2027", "2027-05-08"), ("July 19, 2027", "2027-07-19")),
                   (("June 31, 2027", "date"), ("February 29, 2027", "date")), say="on {v}", label="Date"),
               Arg("players", _s("integer", "Number of players", minimum=1, maximum=8), (("4", 4), ("6", 6)),
                   (("12", "range"), ("3.5", "type")), say="for {v} players", label="Players"))),
    Domain("RequestMovingQuote", "Ask a moving company for a quote.", ("get a moving quote",
                                                                      "request a quote for my move"),
           "Moving quote", (
               Arg("rooms", _s("integer", "Rooms to move", minimum=1, maximum=12), (("3", 3), ("5", 5)),
                   (("40", "range"), ("4.5", "type")), say="for {v} rooms", label="Rooms"),
               Arg("move_date", _s("string", "Day of the move", format="date"),
                   (("August 3, 2027", "2027-08-03"), ("October 12, 2027", "2027-10-12")),
                   (("September 31, 2027", "date"),), say="on {v}", label="Move date"),
               Arg("zip_code", _s("string", "ZIP code of the new home: five digits", pattern="^[0-9]{5}$"),
                   (("94110", "94110"), ("10025", "10025")), (("9411O", "pattern"), ("ABCDE", "pattern")),
                   say="to ZIP {v}", label="ZIP", required=False))),
    Domain("ScheduleWindowCleaning", "Schedule a window cleaning.", ("schedule a window cleaning",
                                                                    "book a window cleaner"),
           "Window cleaning", (
               Arg("time", _s("string", "Time the cleaner arrives", format="time"),
                   (("10 am", "10:00:00"), ("2:30 pm", "14:30:00")), (("27:00", "time"), ("13:75", "time")),
                   say="at {v}", label="Time"),
               Arg("windows", _s("integer", "Number of windows", minimum=1, maximum=60), (("12", 12), ("20", 20)),
                   (("150", "range"),), say="for {v} windows", label="Windows", required=False))),
    Domain("RenewLibraryCard", "Renew a library card.", ("renew my library card", "extend my library card"),
           "Card renewal", (
               Arg("card_number", _s("string", "Library card number: eight digits", pattern="^[0-9]{8}$"),
                   (("20481937", "20481937"), ("55510422", "55510422")), (("2048-19", "pattern"),
                                                                         ("CARD1234", "pattern")),
                   say="number {v}", label="Card number"),
               Arg("branch", _s("string", "Branch it is renewed at", enum=["central", "north", "east"]),
                   (("central", "central"), ("north", "north")), (("south", "enum"),), say="at the {v} branch",
                   label="Branch", required=False))),
)


@dataclass
class Item:
    example_id: str
    user_utterance: str
    api_calls: list[str]
    function: str
    style: str
    expect: str
    kind: str
    argument: str = ""
    written: str = ""
    classes: list[str] = field(default_factory=list)


class Builder:
    def __init__(self, seed: int = SEED) -> None:
        self.rng = random.Random(seed)

    def make(self, domain: Domain, kind: str, style: str) -> Item | None:
        rng = self.rng
        wrong = [a for a in domain.args if a.bad] if kind == "misfit" else []
        if kind == "misfit" and not wrong:
            return None
        broken = rng.choice(wrong) if wrong else None
        given = [a for a in domain.args if a.required or a is broken or rng.random() < 0.5]
        values: dict[str, tuple[str, Any]] = {}
        problem = ""
        for arg in given:
            if arg is broken:
                written, problem = rng.choice(arg.bad)
                values[arg.name] = (written, None)
            else:
                values[arg.name] = rng.choice(arg.good)
        text = _frame(domain, given, values, style, rng)
        called = {a.name: values[a.name][1] for a in given if a is not broken}
        return Item("", f"User: {text}", [render_call(domain.function, called)], domain.function, style,
                    "ask" if broken else "call", problem or "valid", broken.name if broken else "",
                    values[broken.name][0] if broken else "", ["g:schema"] if broken else [])


def _frame(domain: Domain, given: list[Arg], values: dict[str, tuple[str, Any]], style: str,
           rng: random.Random) -> str:
    if style == "labelled":
        return f"{domain.label}. " + " ".join(f"{a.label}: {values[a.name][0]}." for a in given)
    phrase = " ".join(a.say.format(v=values[a.name][0]) for a in given)
    ask = rng.choice(domain.asks)
    if style == "polite":
        return f"Could you {ask} {phrase}? Thanks."
    return f"{ask[0].upper()}{ask[1:]} {phrase}."


def build_items(seed: int = SEED, per_function: int = ITEMS_PER_FUNCTION) -> list[Item]:
    """`per_function` items per function, valid and misfit in turn (half are valid: a rule that asks about every
    value must not look good); a report-only function draws among all styles, the others among the tune styles
    but on every fourth item (which may draw the report style)."""
    return draw_items(Builder(seed), DOMAINS, ("misfit", "valid"), STYLES, TUNE_STYLES, REPORT_FUNCTIONS,
                      per_function, mixed_every=4)  # the first item (attempt 1) is valid


def catalogue() -> dict[str, Any]:
    functions = [function_entry(d.function, d.description, {a.name: a.schema for a in d.args},
                                [a.name for a in d.args if a.required]) for d in DOMAINS]
    return {"name": "misfit", "description": "prefcall's generated misfit catalogue (prefcall.evaluation."
            "corpus_misfit): ten functions whose arguments carry types, ranges, patterns, options and formats, "
            "none from the shared data sets.", "functions": functions}


def build(out: Path = CORPUS_DIR) -> list[Path]:
    return write_corpus(out, "misfit_", catalogue(), build_items())
