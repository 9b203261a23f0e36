"""The generated profile corpus: requests whose user keeps a profile of facts and records, not only wishes.

Why: a user's stored profile holds facts about them ("My home address is 12 Elm Street.") and records of what they
did ("From my order history: ordered pad thai from Luigi's."), beside standing wishes. Two failure classes come from
that (strategies.statements): a required argument the profile holds is asked for instead of filled from the fact
that names it, and records that give one argument different values are read as several wishes (one call per
value). No shared file has items for them, so these are generated, over ten functions none of the shared data or
the NLSI-style corpus has (authored for prefcall from scratch).

Items are NLSI-format (example_id, user_utterance, all_standing_instructions, applicable_standing_instructions,
api_calls, example_type) plus `function`, `style` and `classes`. Every profile holds the user's five facts and one
to three records (of the request's function and others'). Example types:
- `fact`: the request leaves a required personal argument (the driver's name, the delivery address) to the
  profile; the call takes the fact that names it. The records of the same function give other values: they set
  nothing;
- `user_wins`: the request states that argument itself (a different address); the user's words win;
- `back_reference`: the request asks for the same value as last time ("the same stylist as last time"); the one
  record of that function gives it;
- `optional`: the function's optional argument a fact could fill (a contact phone) stays out: a fact fills only
  what the function requires.
Styles (how facts and records are written): `my` ("My phone number is 555-0142." / "From my order history:
..."), `card` ("Phone number: 555-0142" / "Last week, I ..."), `plain` ("You can reach me at 555-0142." /
"Ordered ... three days ago."). Split (read by `prefcall split build`): three functions (SendParcel,
SubscribeNewsletter, FindGym) and the `plain` style are report-only; the rest is split half and half by a hash of
the id.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefcall.evaluation.corpus import CORPUS_DIR, Item, draw_items, dumps, function_entry, render_call, write_corpus
from prefcall.evaluation.corpus_domains import property_schema

SEED = 20261129
ITEMS_PER_FUNCTION = 24
REPORT_FUNCTIONS = ("SendParcel", "SubscribeNewsletter", "FindGym")
TUNE_STYLES = ("my", "card")
REPORT_STYLES = ("plain",)
STYLES = TUNE_STYLES + REPORT_STYLES
KINDS = ("fact", "fact", "user_wins", "back_reference", "fact", "optional")

# The user's facts: key -> (values, the plain style's phrasings).
FACTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "name": (("Dana Reyes", "Omar Haddad", "Lena Fischer", "Priya Nair", "Tomas Ortega", "Grace Kim"),
             ("I'm {v}.", "Call me {v}.")),
    "home address": (("12 Elm Street", "48 Harbor Road", "7 Birch Lane", "230 Mill Avenue", "15 Quarry Close"),
                     ("I live at {v}.",)),
    "phone number": (("555-0142", "555-0198", "555-0117", "555-0163", "555-0181"),
                     ("You can reach me at {v}.", "Call me on {v}.")),
    "email": (("dana.r@example.com", "omar.h@example.org", "lena.f@example.net", "p.nair@example.com"),
              ("Write to me at {v}.",)),
    "home city": (("Denver", "Leeds", "Porto", "Osaka", "Halifax"), ("I live in {v}.",)),
}
# A second tuning set for facts written without a key (`prose`, its own file: profile_prose_items.json): the user's
# facts and records in other words than any style above, so that a rule reading keyless facts is tuned here and
# reported on the held-out `plain` style of the main file.
PROSE_SEED = 20261201
PROSE_PER_FUNCTION = 8
PROSE_STYLES = ("prose",)
PROSE: dict[str, tuple[str, ...]] = {
    "name": ("{v} here.", "Everyone calls me {v}."),
    "home address": ("I'm at {v}.", "Deliveries reach me at {v}."),
    "phone number": ("Text me on {v}.", "Ring me at {v} anytime."),
    "email": ("Emails reach me at {v}.", "I read mail at {v}."),
    "home city": ("I'm based in {v}.", "Home for me is in {v}."),
}
RECORD_WHEN = ("week", "month", "Friday", "weekend")
AGO = ("two days ago", "three weeks ago", "a month ago")


@dataclass(frozen=True)
class Arg:
    name: str
    type: str
    description: str
    values: tuple[Any, ...] = ()
    ask: tuple[str, ...] = ()  # how a request gives it ({v})
    required: bool = False
    fact: str = ""  # the profile fact that holds it ("home address")
    enum: tuple[str, ...] = ()

    def schema(self) -> dict[str, Any]:
        return property_schema(self.type, self.description, self.enum)


@dataclass(frozen=True)
class Domain:
    function: str
    description: str
    kind: str  # the history's kind ("order")
    opener: tuple[str, ...]
    args: tuple[Arg, ...]
    record: str  # what the user did, with {argument} fields ("ordered {dish} from {restaurant}")
    back: str  # the argument a back reference asks for
    back_ask: str  # how ("the same {noun} as last time")

    def arg(self, name: str) -> Arg:
        return next(a for a in self.args if a.name == name)


def _a(name, type_, description, values=(), ask=(), *, required=False, fact="", enum=()) -> Arg:
    return Arg(name, type_, description, tuple(values), tuple(ask), required, fact, tuple(enum))


DOMAINS: tuple[Domain, ...] = (
    Domain("OrderMeal", "Order a meal for delivery from a restaurant.", "order", ("Order", "Get me", "I'd like"), (
        _a("dish", "string", "The dish to order", ("pad thai", "veggie burrito", "margherita pizza", "ramen"),
           ("{v}",), required=True),
        _a("restaurant", "string", "The restaurant that cooks it", ("Luigi's", "Thai Garden", "Casa Verde",
                                                                    "Noodle Bar"), ("from {v}",), required=True),
        _a("delivery_address", "string", "Where the meal is delivered", ("9 Pine Road", "3 Canal Street"),
           ("to {v}",), required=True, fact="home address"),
        _a("tip", "integer", "Tip for the courier in dollars", (3, 5), ("with a {v} dollar tip",))),
        "ordered {dish} from {restaurant}", "restaurant", "from the same restaurant as last time"),
    Domain("RentCar", "Rent a car for a trip.", "travel", ("Rent", "I need to rent", "Book me"), (
        _a("car_type", "string", "Kind of car", ("compact", "SUV", "van"), ("a {v}",), required=True,
           enum=("compact", "SUV", "van")),
        _a("pickup_city", "string", "City where the car is picked up", ("Boston", "Phoenix", "Austin", "Seattle"),
           ("in {v}",), required=True),
        _a("days", "integer", "How many days", (2, 3, 5), ("for {v} days",)),
        _a("driver_name", "string", "Full name of the driver", ("Sam Ito", "Jo March"), ("for driver {v}",),
           required=True, fact="name")),
        "rented a {car_type} in {pickup_city}", "car_type", "the same kind of car as last time"),
    Domain("BookHaircut", "Book a haircut appointment at a salon.", "appointment",
           ("Book a haircut", "Get me a haircut", "Schedule a haircut"), (
        _a("salon", "string", "Name of the salon", ("Style Studio", "Cut Above", "The Barber Room"), ("at {v}",),
           required=True),
        _a("day", "string", "Day of the appointment", ("Friday", "Monday", "tomorrow"), ("on {v}",),
           required=True),
        _a("stylist", "string", "The stylist to see", ("Maria", "Ken", "Aisha"), ("with {v}",)),
        _a("customer_phone", "string", "Phone number the salon calls to confirm", ("555-0100", "555-0111"),
           ("and call {v} to confirm",), required=True, fact="phone number")),
        "saw {stylist} at {salon}", "stylist", "with the same stylist as last time"),
    Domain("SendParcel", "Send a parcel by courier.", "shipping",
           ("Send a parcel", "Ship a package", "Post a parcel"), (
        _a("recipient_name", "string", "Who receives the parcel", ("Ana Silva", "Ben Cole", "Mia Park"),
           ("to {v}",), required=True),
        _a("destination_city", "string", "City the parcel goes to", ("Lisbon", "Toronto", "Cork"), ("in {v}",),
           required=True),
        _a("sender_address", "string", "The sender's address, for returns", ("5 Oak Court", "61 Dock Street"),
           ("from {v}",), required=True, fact="home address"),
        _a("express", "boolean", "Whether it goes by express", (True,), ("by express",))),
        "sent a parcel to {recipient_name} in {destination_city}", "recipient_name", "to the same person as last time"),
    Domain("RegisterEvent", "Register for a public event.", "event", ("Register me for", "Sign me up for"), (
        _a("event", "string", "The event's title", ("the robotics fair", "the jazz night", "the book swap"),
           ("{v}",), required=True),
        _a("attendee_name", "string", "Name of the person attending", ("Kai Berg", "Noor Ali"), ("as {v}",),
           required=True, fact="name"),
        _a("attendee_email", "string", "Email for the ticket", ("kai@example.net", "noor@example.org"),
           ("with the email {v}",), required=True, fact="email"),
        _a("tickets", "integer", "How many tickets", (2, 3), ("for {v} people",))),
        "registered for {event}", "event", "the same event as last time"),
    Domain("BookTable", "Reserve a table at a restaurant.", "booking", ("Reserve", "Book", "Get us"), (
        _a("restaurant", "string", "The restaurant", ("Casa Verde", "Blue Fin", "Olive Tree"),
           ("a table at {v}",), required=True),
        _a("time", "string", "Time of the booking", ("7 pm", "8:30 pm", "noon"), ("at {v}",), required=True),
        _a("party_size", "integer", "How many people", (2, 4, 6), ("for {v}",)),
        _a("contact_phone", "string", "A phone number for the booking", ("555-0122", "555-0133"),
           ("and use {v} as the contact",), required=True, fact="phone number")),
        "booked a table at {restaurant} for {party_size}", "restaurant", "a table at the same place as last time"),
    Domain("ScheduleRepair", "Schedule a technician to repair an appliance.", "service",
           ("Schedule", "Book", "Arrange"), (
        _a("appliance", "string", "The appliance to repair", ("the dishwasher", "the boiler", "the fridge"),
           ("a repair of {v}",), required=True),
        _a("day", "string", "Day of the visit", ("Tuesday", "Thursday", "tomorrow"), ("on {v}",), required=True),
        _a("home_address", "string", "Address of the home to visit", ("20 Lake View", "4 Station Road"),
           ("at {v}",), required=True, fact="home address"),
        _a("urgent", "boolean", "Whether the repair is urgent", (True,), ("as urgent",))),
        "had {appliance} repaired", "appliance", "a repair of the same appliance as last time"),
    Domain("SubscribeNewsletter", "Subscribe to a newsletter.", "subscription", ("Subscribe me to", "Sign me up to"), (
        _a("topic", "string", "The newsletter's topic", ("gardening", "local news", "chess"),
           ("the {v} newsletter",), required=True),
        _a("email", "string", "Email address it is sent to", ("me2@example.com", "box@example.org"),
           ("at {v}",), required=True, fact="email"),
        _a("frequency", "string", "How often", ("daily", "weekly"), ("{v}",), enum=("daily", "weekly"))),
        "subscribed to the {topic} newsletter", "topic", "the same newsletter as last time"),
    Domain("FindGym", "Find a gym that offers an activity.", "search", ("Find", "Look for", "Search for"), (
        _a("activity", "string", "The activity wanted", ("yoga", "climbing", "swimming"), ("a gym for {v}",),
           required=True),
        _a("city", "string", "City to search in", ("Austin", "Glasgow", "Lyon"), ("in {v}",), required=True,
           fact="home city"),
        _a("open_late", "boolean", "Open after 10 pm", (True,), ("open late",))),
        "looked for {activity} gyms in {city}", "activity", "a gym for the same activity as last time"),
    Domain("RequestRide", "Request a ride to a destination.", "ride", ("Get me", "Request", "Call"), (
        _a("destination", "string", "Where the ride goes", ("the airport", "the train station", "City Hall"),
           ("a ride to {v}",), required=True),
        _a("pickup", "string", "Where the ride starts", ("the office", "the mall"), ("from {v}",), required=True),
        _a("seats", "integer", "Seats needed", (2, 3), ("with {v} seats",)),
        _a("rider_phone", "string", "A phone number the driver may call", ("555-0155",), ("and call {v}",),
           fact="phone number")),
        "rode to {destination} from {pickup}", "destination", "a ride to the same place as last time"),
)


class Builder:
    def __init__(self, seed: int = SEED) -> None:
        self.rng = random.Random(seed)

    def profile(self) -> dict[str, str]:
        return {key: self.rng.choice(values) for key, (values, _) in FACTS.items()}

    def fact(self, key: str, value: str, style: str) -> str:
        if style == "my":
            return f"My {key} is {value}."
        if style == "card":
            return f"{key[0].upper()}{key[1:]}: {value}"
        if style == "prose":
            return self.rng.choice(PROSE[key]).format(v=value)
        return self.rng.choice(FACTS[key][1]).format(v=value)

    def record(self, domain: Domain, values: dict[str, Any], style: str) -> str:
        entry = domain.record.format(**values)
        if style == "my":
            return f"From my {domain.kind} history: {entry}."
        if style == "card":
            return f"Last {self.rng.choice(RECORD_WHEN)}, I {entry}."
        if style == "prose":
            return f"Not long ago I {entry}."
        return f"{entry[0].upper()}{entry[1:]} {self.rng.choice(AGO)}."

    def record_values(self, domain: Domain, avoid: dict[str, Any]) -> dict[str, Any]:
        """Values for a record's fields, each unlike the request's own."""
        out = {}
        for arg in domain.args:
            if "{" + arg.name + "}" in domain.record:
                choices = [v for v in arg.values if v != avoid.get(arg.name)] or list(arg.values)
                out[arg.name] = self.rng.choice(choices)
        return out

    def make(self, domain: Domain, kind: str, style: str) -> Item | None:
        rng = self.rng
        profile = self.profile()
        personal = [a for a in domain.args if a.fact and a.required]
        optional_personal = [a for a in domain.args if a.fact and not a.required]
        if kind == "optional" and not optional_personal:
            kind = "fact"
        if not personal and kind != "back_reference":
            kind = "optional"  # nothing required is personal: the optional personal argument stays out
        args: dict[str, Any] = {}
        clauses: list[str] = []
        for arg in domain.args:
            if arg.fact or not arg.required:
                continue
            args[arg.name] = rng.choice(arg.values)
        extra = [a for a in domain.args if not a.required and not a.fact]
        if extra and rng.random() < 0.5:
            arg = rng.choice(extra)
            args[arg.name] = rng.choice(arg.values)
        records = [self.record_values(domain, args)]
        applicable: list[str] = []
        if kind == "back_reference":
            args[domain.back] = records[0][domain.back]
        elif kind != "optional" and rng.random() < 0.5:
            records.append(self.record_values(domain, args | records[0]))  # two records, two other values
        for arg in personal:
            if kind == "user_wins" and arg is personal[0]:
                args[arg.name] = rng.choice(arg.values)
            else:
                args[arg.name] = profile[arg.fact]
        for arg in domain.args:
            if arg.name in args and (not arg.fact or (kind == "user_wins" and arg is personal[0])):
                if kind == "back_reference" and arg.name == domain.back:
                    clauses.append(domain.back_ask)
                elif arg.type == "boolean":
                    clauses.append(arg.ask[0])
                else:
                    clauses.append(arg.ask[0].format(v=args[arg.name]))
        facts = [self.fact(key, value, style) for key, value in profile.items()]
        mine = [self.record(domain, r, style) for r in records]
        others = []
        for other in rng.sample([d for d in DOMAINS if d is not domain], rng.choice((1, 2))):
            others.append(self.record(other, self.record_values(other, {}), style))
        # The applicable facts are the profile's own texts. A style with several phrasings draws one per text, so
        # the draw made here before the texts were reused is still made: every other item keeps its bytes.
        written = dict(zip(profile, facts))
        applicable = []
        for a in personal:
            if not (kind == "user_wins" and a is personal[0]):
                self.fact(a.fact, profile[a.fact], style)
                applicable.append(written[a.fact])
        if kind == "back_reference":
            applicable.append(mine[0])
        everything = facts + mine + others
        rng.shuffle(everything)
        text = " ".join([rng.choice(domain.opener), *clauses]).strip()
        text = text[0].upper() + text[1:] + rng.choice((".", " please.", ", thanks."))
        classes = ["p:profile-fact"] + (["r:records"] if len(mine) > 1 or kind != "back_reference" else [])
        if kind == "back_reference":
            classes.append("r:back-reference")
        return Item("", f"User: {text}", everything, applicable, [render_call(domain.function, args)], kind,
                    domain.function, style, sorted(set(classes)))


def build_items(seed: int = SEED, per_function: int = ITEMS_PER_FUNCTION) -> list[Item]:
    return draw_items(Builder(seed), DOMAINS, KINDS, STYLES, TUNE_STYLES, REPORT_FUNCTIONS, per_function)


def build_prose_items(seed: int = PROSE_SEED, per_function: int = PROSE_PER_FUNCTION) -> list[Item]:
    """The `prose` items (facts without a key, module comment at PROSE): ids "<function>-prose-NN"."""
    items = draw_items(Builder(seed), DOMAINS, KINDS, PROSE_STYLES, PROSE_STYLES, REPORT_FUNCTIONS, per_function)
    for item in items:
        function, number = item.example_id.rsplit("-", 1)
        item.example_id = f"{function}-prose-{number}"
    return items


def catalogue() -> dict[str, Any]:
    functions = [function_entry(d.function, d.description, {a.name: a.schema() for a in d.args},
                                [a.name for a in d.args if a.required]) for d in DOMAINS]
    return {"name": "corpus-profile", "description": "prefcall's generated profile corpus "
            "(prefcall.evaluation.corpus_profile): ten everyday functions whose required arguments a user's "
            "profile of facts holds, none from the shared data sets.", "functions": functions}


def build(out: Path = CORPUS_DIR) -> list[Path]:
    paths = write_corpus(out, "profile_", catalogue(), build_items())
    prose = out / "profile_prose_items.json"
    prose.write_text(dumps([item.__dict__ for item in build_prose_items()]), encoding="utf-8")
    return [*paths, prose]
