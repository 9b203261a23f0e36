"""The 16 functions the generated corpus (`evaluation/corpus.py`) is built over: their typed slots, with the values,
the ways a user asks for one and the facts a standing instruction states (authored for prefcall from scratch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Slot:
    """One argument: its schema, how a user says a value (`ask`, with {v}), how an instruction states it as a
    noun phrase (`fact`, with {v}) and the values (what is written, what the call holds)."""

    name: str
    type: str
    description: str
    values: tuple[tuple[str, Any], ...]
    ask: tuple[str, ...]
    fact: tuple[str, ...]
    enum: tuple[str, ...] = ()
    required: bool = False
    human: str = ""  # how the argument is called in words (default: the name with spaces)

    @property
    def words(self) -> str:
        return self.human or self.name.replace("_", " ")

    def schema(self) -> dict[str, Any]:
        return property_schema(self.type, self.description, self.enum)


def property_schema(type_: str, description: str, enum: tuple[str, ...] = ()) -> dict[str, Any]:
    """An argument's JSON schema as the generated catalogues write it (type, description, options if any)."""
    out: dict[str, Any] = {"type": type_, "description": description}
    if enum:
        out["enum"] = list(enum)
    return out


@dataclass(frozen=True)
class Domain:
    function: str
    description: str
    noun: str  # "fitness classes"
    activity: str  # "book a fitness class"
    openers: tuple[str, ...]  # a request's start
    slots: tuple[Slot, ...]
    chains: tuple[tuple[str, dict[str, str]], ...] = ()  # (other function, {its argument: this one's argument})

    def slot(self, name: str) -> Slot:
        return next(s for s in self.slots if s.name == name)


def _b(true_ask: str, false_ask: str, true_fact: str, false_fact: str) -> dict[str, Any]:
    """A boolean's phrasings: the value is in the words, so ask/fact carry no {v}."""
    return {"values": (("yes", True), ("no", False)), "ask": (true_ask, false_ask), "fact": (true_fact, false_fact)}


def _slot(name: str, type_: str, description: str, *, values=(), ask=(), fact=(), enum=(), required=False,
          human="", flag: dict[str, Any] | None = None) -> Slot:
    if flag is not None:
        return Slot(name, type_, description, flag["values"], flag["ask"], flag["fact"], required=required,
                    human=human)
    return Slot(name, type_, description, tuple(values), tuple(ask), tuple(fact), tuple(enum), required, human)


NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 8: "eight", 10: "ten"}


def _counts(*numbers: int) -> tuple[tuple[str, Any], ...]:
    """Each number written both ways: "3" and "three" (both mean 3)."""
    return tuple(pair for n in numbers for pair in ((str(n), n), (NUMBER_WORDS.get(n, str(n)), n)))


DOMAINS: tuple[Domain, ...] = (
    Domain("BookFitnessClass", "Book a class at a gym or fitness studio.", "fitness classes", "book a fitness class",
           ("Book me a fitness class", "I'd like to sign up for a class", "can you get me into a class"),
           (
               _slot("class_type", "string", "Kind of class.", enum=("yoga", "pilates", "spin", "boxing"),
                     values=[(v, v) for v in ("yoga", "pilates", "spin", "boxing")], ask=("for {v}", "a {v} one"),
                     fact=("{v} classes", "{v}"), required=True, human="class type"),
               _slot("studio", "string", "Name of the studio or gym.",
                     values=[(v, v) for v in ("Core Motion", "Riverside Gym", "the Y downtown", "Pulse Studio")],
                     ask=("at {v}",), fact=("the {v} studio", "{v}")),
               _slot("day", "string", "Day of the class.",
                     values=[(v, v) for v in ("Monday", "Thursday", "Saturday morning", "tomorrow")],
                     ask=("on {v}", "for {v}"), fact=("{v}",)),
               _slot("level", "string", "Difficulty.", enum=("beginner", "intermediate", "advanced"),
                     values=[(v, v) for v in ("beginner", "intermediate", "advanced")],
                     ask=("at the {v} level",), fact=("the {v} level", "{v} level classes")),
           ),
           chains=(("ReserveParking", {"location": "studio", "day": "day"}),)),
    Domain("OrderGroceries", "Order groceries for delivery from a store.", "grocery orders", "order groceries",
           ("Order some groceries", "I need groceries delivered", "please put in a grocery order"),
           (
               _slot("item", "string", "What to buy.",
                     values=[(v, v) for v in ("oat milk", "bananas", "whole wheat bread", "eggs")],
                     ask=("for {v}", "including {v}"), fact=("{v}",), required=True),
               _slot("quantity", "integer", "How many units.", values=_counts(2, 3, 6), ask=("{v} of them",),
                     fact=("{v} units",)),
               _slot("store", "string", "Store to order from.",
                     values=[(v, v) for v in ("Fresh Fields", "the corner market", "Green Basket")],
                     ask=("from {v}",), fact=("{v}",)),
               _slot("delivery_window", "string", "When to deliver.", enum=("morning", "afternoon", "evening"),
                     values=[(v, v) for v in ("morning", "afternoon", "evening")], ask=("in the {v}",),
                     fact=("{v} delivery", "the {v}"), human="delivery window"),
               _slot("substitutions", "boolean", "Whether the shopper may substitute missing items.",
                     flag=_b("and substitutions are fine", "with no substitutions", "substitutions allowed",
                             "no substitutions")),
           )),
    Domain("RefillPrescription", "Refill a prescription at a pharmacy.", "prescription refills",
           "refill a prescription",
           ("Refill my prescription", "I need a refill", "please order a refill"),
           (
               _slot("medication", "string", "Name of the medicine.",
                     values=[(v, v) for v in ("lisinopril", "my inhaler", "metformin", "allergy pills")],
                     ask=("of {v}", "for {v}"), fact=("{v}",), required=True),
               _slot("pharmacy", "string", "Pharmacy to fill it at.",
                     values=[(v, v) for v in ("Bayside Pharmacy", "the drugstore on Elm", "MedPlus")],
                     ask=("at {v}",), fact=("{v}",)),
               _slot("supply_days", "integer", "Days of supply.", values=_counts(30, 90) + (("ninety", 90),),
                     ask=("a {v} day supply",), fact=("a {v} day supply",), human="supply"),
               _slot("delivery", "boolean", "Deliver instead of pick up.",
                     flag=_b("delivered to my home", "for pickup", "home delivery", "pickup in store")),
           )),
    Domain("ReserveParking", "Reserve a parking spot.", "parking", "reserve parking",
           ("Reserve a parking spot", "I need parking", "can you book me a parking space"),
           (
               _slot("location", "string", "Where to park.",
                     values=[(v, v) for v in ("the airport", "the train station", "my office", "Union Square")],
                     ask=("at {v}", "near {v}"), fact=("{v}",), required=True),
               _slot("hours", "integer", "How many hours.", values=_counts(2, 4, 8), ask=("for {v} hours",),
                     fact=("{v} hours",)),
               _slot("covered", "boolean", "A covered spot.",
                     flag=_b("with covered parking", "in an open lot", "covered spots", "open air spots")),
               _slot("day", "string", "Day of parking.",
                     values=[(v, v) for v in ("Friday", "next Tuesday", "this weekend")], ask=("on {v}", "for {v}"),
                     fact=("{v}",)),
           )),
    Domain("BookPetCare", "Book grooming, walking or boarding for a pet.", "pet care", "book pet care",
           ("Book pet care", "my dog needs a service booked", "set up an appointment for my pet"),
           (
               _slot("service", "string", "Service.", enum=("grooming", "walking", "boarding", "vet visit"),
                     values=[(v, v) for v in ("grooming", "walking", "boarding", "vet visit")],
                     ask=("for {v}",), fact=("{v}",), required=True),
               _slot("pet_name", "string", "The pet's name.",
                     values=[(v, v) for v in ("Biscuit", "Luna", "Mr. Whiskers")], ask=("for {v}",),
                     fact=("{v}",), human="pet name"),
               _slot("provider", "string", "Groomer, walker or clinic.",
                     values=[(v, v) for v in ("Happy Paws", "Dr. Ortiz", "the clinic on Main")],
                     ask=("with {v}",), fact=("{v}",)),
               _slot("day", "string", "Day.", values=[(v, v) for v in ("Wednesday", "Sunday afternoon", "tomorrow")],
                     ask=("on {v}",), fact=("{v}",)),
           )),
    Domain("TransferMoney", "Move money between bank accounts.", "money transfers", "transfer money",
           ("Transfer money", "send some money", "please make a transfer"),
           (
               _slot("recipient_name", "string", "Who receives it.",
                     values=[(v, v) for v in ("Priya", "my landlord", "Tom Becker")], ask=("to {v}",),
                     fact=("{v}",), required=True, human="recipient"),
               _slot("amount", "number", "Amount in dollars.",
                     values=(("$50", 50), ("200 dollars", 200), ("1,000 dollars", 1000), ("75", 75)),
                     ask=("for {v}",), fact=("{v}",), required=True),
               _slot("account_type", "string", "The account the money leaves.", enum=("checking", "savings"),
                     values=[(v, v) for v in ("checking", "savings")], ask=("from my {v} account",),
                     fact=("my {v} account",), human="account type"),
               _slot("recipient_account_type", "string", "The recipient's account.", enum=("checking", "savings"),
                     values=[(v, v) for v in ("checking", "savings")], ask=("into their {v} account",),
                     fact=("their {v} account",), human="recipient account type"),
           )),
    Domain("SearchApartments", "Search apartments for rent.", "apartments", "look for an apartment",
           ("Find me an apartment", "I'm looking for a place to rent", "search rentals"),
           (
               _slot("city", "string", "City.", values=[(v, v) for v in ("Portland", "Austin", "Brooklyn")],
                     ask=("in {v}",), fact=("{v}",), required=True),
               _slot("bedrooms", "integer", "Number of bedrooms.", values=_counts(1, 2, 3),
                     ask=("with {v} bedrooms",), fact=("{v} bedrooms",)),
               _slot("max_rent", "integer", "Highest monthly rent in dollars.",
                     values=(("2000", 2000), ("1500", 1500), ("2500", 2500)), ask=("under {v} a month",),
                     fact=("rent under {v}",), human="maximum rent"),
               _slot("pets_allowed", "boolean", "Pets allowed.",
                     flag=_b("that allows pets", "with no pets", "pet friendly places", "no pets"),
                     human="pets"),
               _slot("furnished", "boolean", "Comes furnished.",
                     flag=_b("furnished", "unfurnished", "furnished places", "unfurnished places")),
           )),
    Domain("SetReminder", "Set a reminder at a time.", "reminders", "set a reminder",
           ("Remind me", "set a reminder", "please add a reminder"),
           (
               _slot("text", "string", "What to be reminded of.",
                     values=[(v, v) for v in ("call my mother", "water the plants", "pay the phone bill")],
                     ask=("to {v}",), fact=("{v}",), required=True, human="reminder text"),
               _slot("time", "string", "When.", values=[(v, v) for v in ("7 pm", "noon", "8:30 tomorrow")],
                     ask=("at {v}",), fact=("{v}",), required=True),
               _slot("repeat", "string", "Repeat rule.", enum=("never", "daily", "weekly"),
                     values=[(v, v) for v in ("daily", "weekly")], ask=("{v}",), fact=("{v} reminders",)),
           )),
    Domain("OrderFood", "Order food from a restaurant for delivery.", "food delivery", "order food",
           ("Order food", "get me some takeout", "I want to order dinner"),
           (
               _slot("dish", "string", "What to eat.",
                     values=[(v, v) for v in ("pad thai", "a veggie burger", "margherita pizza", "ramen")],
                     ask=("{v}",), fact=("{v}",), required=True),
               _slot("restaurant", "string", "Restaurant.",
                     values=[(v, v) for v in ("Noodle Bar", "Luigi's", "the diner on 3rd")], ask=("from {v}",),
                     fact=("{v}",)),
               _slot("quantity", "integer", "How many portions.", values=_counts(1, 2, 4),
                     ask=("{v} orders of it",), fact=("{v} portions",)),
               _slot("contactless", "boolean", "Leave at the door.",
                     flag=_b("left at the door", "handed to me", "contactless delivery", "hand delivery")),
               _slot("tip_percent", "integer", "Tip in percent.", values=(("15", 15), ("20", 20), ("twenty", 20)),
                     ask=("with a {v} percent tip",), fact=("a {v} percent tip",), human="tip"),
           )),
    Domain("BookTaxi", "Book a taxi ride.", "taxi rides", "book a taxi",
           ("Book a taxi", "get me a cab", "I need a ride"),
           (
               _slot("pickup", "string", "Pickup place.",
                     values=[(v, v) for v in ("my hotel", "the office", "Pier 39", "home")],
                     ask=("from {v}",), fact=("{v}",), required=True, human="pickup place"),
               _slot("dropoff", "string", "Destination.",
                     values=[(v, v) for v in ("the airport", "the stadium", "Grand Central", "the hospital")],
                     ask=("to {v}",), fact=("{v}",), required=True, human="destination"),
               _slot("passengers", "integer", "Riders.", values=_counts(1, 2, 3, 5), ask=("for {v} people",),
                     fact=("{v} passengers",)),
               _slot("vehicle", "string", "Car size.", enum=("standard", "xl", "premium"),
                     values=[(v, v) for v in ("standard", "xl", "premium")], ask=("in a {v} car",),
                     fact=("{v} cars",)),
           )),
    Domain("ReserveBook", "Reserve a library book.", "library books", "reserve a library book",
           ("Reserve a book", "put a library book on hold", "I want to borrow a book"),
           (
               _slot("title", "string", "Book title.",
                     values=[(v, v) for v in ("The Silent Orchard", "Night Trains", "a cookbook")],
                     ask=("called {v}",), fact=("{v}",), required=True),
               _slot("branch", "string", "Library branch.",
                     values=[(v, v) for v in ("the Westside branch", "Central Library", "the branch near school")],
                     ask=("at {v}",), fact=("{v}",)),
               _slot("format", "string", "Format.", enum=("hardcover", "paperback", "ebook", "audiobook"),
                     values=[(v, v) for v in ("hardcover", "paperback", "ebook", "audiobook")],
                     ask=("as an {v}", "in {v}"), fact=("{v} editions", "{v}")),
           )),
    Domain("SetThermostat", "Set the thermostat of a room.", "the thermostat", "change the heating",
           ("Set the thermostat", "make it warmer", "adjust the temperature"),
           (
               _slot("room", "string", "Room.", enum=("living room", "bedroom", "kitchen", "office"),
                     values=[(v, v) for v in ("living room", "bedroom", "kitchen", "office")],
                     ask=("in the {v}",), fact=("the {v}",), required=True),
               _slot("temperature", "integer", "Degrees Fahrenheit.", values=(("68", 68), ("72", 72), ("seventy", 70)),
                     ask=("to {v} degrees",), fact=("{v} degrees",)),
               _slot("mode", "string", "Mode.", enum=("heat", "cool", "auto"),
                     values=[(v, v) for v in ("heat", "cool", "auto")], ask=("on {v}",), fact=("{v} mode",)),
           )),
    Domain("PlayMusic", "Play music on a speaker or device.", "music", "play music",
           ("Play some music", "put on some songs", "start playing"),
           (
               _slot("artist", "string", "Artist.", values=[(v, v) for v in ("Nina Simone", "Daft Punk", "Adele")],
                     ask=("by {v}",), fact=("{v}",)),
               _slot("device", "string", "Where to play.", enum=("kitchen speaker", "living room tv", "phone"),
                     values=[(v, v) for v in ("kitchen speaker", "living room tv", "phone")],
                     ask=("on the {v}",), fact=("the {v}",)),
               _slot("shuffle", "boolean", "Shuffle.",
                     flag=_b("on shuffle", "in order", "shuffle", "no shuffle")),
           )),
    Domain("BuyConcertTickets", "Buy tickets for a live concert.", "concert tickets", "buy concert tickets",
           ("Buy concert tickets", "get me tickets to a show", "I want to see a concert"),
           (
               _slot("artist", "string", "Performer.", values=[(v, v) for v in ("Nina Simone", "Daft Punk", "Adele")],
                     ask=("for {v}",), fact=("{v}",), required=True),
               _slot("city", "string", "City of the show.", values=[(v, v) for v in ("Denver", "Chicago", "Seattle")],
                     ask=("in {v}",), fact=("{v}",)),
               _slot("quantity", "integer", "Tickets.", values=_counts(2, 4), ask=("{v} tickets",),
                     fact=("{v} tickets",)),
               _slot("date", "string", "Date of the show.", values=[(v, v) for v in ("June 12", "this Saturday")],
                     ask=("on {v}",), fact=("{v}",)),
           ),
           chains=(("FindLodging", {"city": "city", "check_in": "date"}),)),
    Domain("BookFerry", "Book a ferry crossing.", "ferries", "book a ferry",
           ("Book a ferry", "I need ferry tickets", "get me on a ferry"),
           (
               _slot("origin", "string", "Departure port.", values=[(v, v) for v in ("Seattle", "Anacortes")],
                     ask=("from {v}",), fact=("{v}",), required=True),
               _slot("destination", "string", "Arrival port.",
                     values=[(v, v) for v in ("Victoria", "Friday Harbor", "Orcas Island")], ask=("to {v}",),
                     fact=("{v}",), required=True),
               _slot("date", "string", "Travel date.", values=[(v, v) for v in ("May 3", "next Monday")],
                     ask=("on {v}",), fact=("{v}",)),
               _slot("passengers", "integer", "Travellers.", values=_counts(1, 2, 4), ask=("for {v} people",),
                     fact=("{v} passengers",)),
               _slot("cabin", "string", "Seat class.", enum=("standard", "premium"),
                     values=[(v, v) for v in ("standard", "premium")], ask=("in {v} seating",),
                     fact=("{v} seating",)),
           ),
           chains=(("FindLodging", {"city": "destination", "check_in": "date"}),)),
    Domain("FindLodging", "Find a place to stay for a trip.", "lodging", "look for lodging",
           ("Find lodging", "I need a place to stay", "look for a room"),
           (
               _slot("city", "string", "City.", values=[(v, v) for v in ("Victoria", "Denver", "Chicago")],
                     ask=("in {v}",), fact=("{v}",), required=True),
               _slot("check_in", "string", "Arrival date.", values=[(v, v) for v in ("May 3", "Friday")],
                     ask=("from {v}",), fact=("{v}",), human="check-in date"),
               _slot("guests", "integer", "Guests.", values=_counts(2, 3), ask=("for {v} guests",),
                     fact=("{v} guests",)),
               _slot("breakfast", "boolean", "Breakfast included.",
                     flag=_b("with breakfast", "without breakfast", "breakfast included", "no breakfast")),
           )),
)
