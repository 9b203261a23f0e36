"""The generated phrase corpus: requests whose values are lowercase common-noun phrases (failure class b).

Why (issue 27, class b): values such as "the guest bathroom", "a leaky faucet" or "oat milk latte" are
candidates like any name, but a small model's log-odds and the structure features weigh them unlike capitalised
names (no capital opens them, an article often does, they run over several words). A fitted combination of its
own for such values (`GroundingWeights.phrase`, `prefcall fit`) needs at least 300 right values of that case; the
NLSI dev file and the NLSI-style corpus hold about 180. These items supply the rest, over 15 functions none of
the shared data or the other generated corpora has, written in the corpus's instruction styles.

Items: the NLSI-style corpus's format and example types (evaluation.corpus: none, simple, multiple, override,
conditional, multi_value; no chains), built by the same `Builder` over these functions, with class
`b:lowercase-phrase` on items whose gold holds a lowercase value of several words. Split (read by `prefcall split
build`): three functions (FindRecipe, BookTutor, ReportLostItem) and the corpus's report styles (`colon`,
`default`, `usual`) are report-only; the rest is split half and half by a hash of the id.

Authored for prefcall from scratch: no template or value is taken from a shared data set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefcall.evaluation.corpus import CORPUS_DIR, KINDS, REPORT_STYLES, STYLES, TUNE_STYLES, Builder, Item, \
    _strings, domains_catalogue, draw_items, write_corpus
from prefcall.evaluation.corpus_domains import Domain, Slot, _b, _counts, _slot

SEED = 20261203
ITEMS_PER_FUNCTION = 36
REPORT_FUNCTIONS = ("FindRecipe", "BookTutor", "ReportLostItem")
__all__ = ["DOMAINS", "REPORT_FUNCTIONS", "REPORT_STYLES", "build", "build_items", "catalogue"]


def _v(*values: str) -> list[tuple[str, str]]:
    return [(v, v) for v in values]


def _enum(name: str, description: str, options: tuple[str, ...], ask: tuple[str, ...], fact: tuple[str, ...],
          human: str = "", required: bool = False) -> Slot:
    """A string argument whose values are its options, written as the options are."""
    return _slot(name, "string", description, enum=options, values=_v(*options), ask=ask, fact=fact, human=human,
                 required=required)


DOMAINS: tuple[Domain, ...] = (
    Domain("ScheduleCleaning", "Book a house cleaner for part of the home.", "house cleaning", "book a cleaner",
           ("Book a cleaner", "I need someone to clean", "can you schedule a cleaning"),
           (
               _slot("area", "string", "Which part of the home.",
                     values=_v("the guest bathroom", "the kitchen", "the upstairs hallway", "the basement"),
                     ask=("for {v}", "to do {v}"), fact=("{v}",), required=True),
               _slot("day", "string", "Day of the visit.", values=_v("Friday", "next Monday", "tomorrow morning"),
                     ask=("on {v}", "for {v}"), fact=("{v}",)),
               _slot("hours", "integer", "Hours of work.", values=_counts(2, 3, 4), ask=("for {v} hours",),
                     fact=("{v} hours",)),
               _slot("products", "string", "Cleaning products to use.",
                     values=_v("unscented products", "vinegar and baking soda", "the products under the sink"),
                     ask=("using {v}", "with {v}"), fact=("{v}",)),
               _enum("depth", "How thorough.", ("standard", "deep"), ("a {v} clean",), ("a {v} clean",)),
           )),
    Domain("OrderCoffee", "Order a drink from a coffee shop for pickup.", "coffee orders", "order coffee",
           ("Order me a coffee", "I want a drink from the cafe", "please get me a coffee"),
           (
               _slot("drink", "string", "The drink.",
                     values=_v("oat milk latte", "iced americano", "flat white", "green tea", "a hot chocolate"),
                     ask=("an {v}", "a cup of {v}", "for {v}"), fact=("{v}",), required=True),
               _enum("size", "Cup size.", ("small", "medium", "large"), ("a {v} one", "in {v}"), ("a {v} cup",)),
               _slot("extra", "string", "Anything added.",
                     values=_v("an extra shot", "caramel syrup", "whipped cream", "a splash of honey"),
                     ask=("with {v}",), fact=("{v}",)),
               _slot("pickup_point", "string", "Where to collect it.",
                     values=_v("the front counter", "the drive-through window", "the shop on Pine Street"),
                     ask=("to pick up at {v}", "from {v}"), fact=("pickup at {v}",), human="pickup point"),
           )),
    Domain("PlanRoute", "Plan a route to a destination.", "directions", "get directions",
           ("Plan a route", "how do I get", "give me directions"),
           (
               _slot("destination", "string", "Where to go.",
                     values=_v("the train station", "the farmers market", "my sister's house", "the north beach"),
                     ask=("to {v}",), fact=("{v}",), required=True),
               _enum("mode", "How to travel.", ("driving", "walking", "cycling"), ("by {v}", "{v}"),
                     ("{v} routes", "{v}"), human="travel mode"),
               _slot("avoid", "string", "What to avoid.",
                     values=_v("toll roads", "the highway", "steep hills", "the city center"),
                     ask=("avoiding {v}", "without {v}"), fact=("routes without {v}",)),
               _slot("stop", "string", "A stop on the way.",
                     values=_v("a gas station", "the bakery", "the post office"),
                     ask=("with a stop at {v}", "stopping at {v}"), fact=("a stop at {v}",)),
           )),
    Domain("ReportMaintenance", "Report a problem to the building's maintenance team.", "maintenance requests",
           "report a maintenance problem",
           ("Report a problem to maintenance", "something needs fixing", "please file a repair request"),
           (
               _slot("problem", "string", "What is wrong.",
                     values=_v("a leaky faucet", "the broken heater", "a clogged drain", "a flickering light"),
                     ask=("about {v}", "for {v}"), fact=("{v}",), required=True),
               _slot("location", "string", "Where in the flat.",
                     values=_v("the kitchen sink", "the main bathroom", "the laundry room", "the back porch"),
                     ask=("in {v}", "by {v}"), fact=("{v}",)),
               _enum("urgency", "How urgent.", ("low", "normal", "urgent"), ("marked {v}", "as {v}"),
                     ("{v} priority",)),
               _slot("entry_allowed", "boolean", "Staff may enter while nobody is home.",
                     flag=_b("and they can let themselves in", "but only when I'm home", "entry while I'm out",
                             "visits only when I'm home"), human="entry"),
           )),
    Domain("LogMeal", "Add a meal to a food diary.", "food diary entries", "log a meal",
           ("Log a meal", "add to my food diary", "please record what I ate"),
           (
               _slot("food", "string", "What was eaten.",
                     values=_v("a turkey sandwich", "greek yogurt with berries", "vegetable soup", "two boiled eggs"),
                     ask=("for {v}", "of {v}"), fact=("{v}",), required=True),
               _enum("meal", "Which meal.", ("breakfast", "lunch", "dinner", "snack"), ("as {v}", "for {v}"),
                     ("{v}",)),
               _slot("portion", "string", "How much.",
                     values=_v("a small bowl", "a large plate", "half a serving"), ask=("about {v}",),
                     fact=("{v}",)),
           )),
    Domain("RentStorage", "Rent a storage unit.", "storage units", "rent a storage unit",
           ("Rent me a storage unit", "I need some storage space", "find a storage unit"),
           (
               _slot("unit_size", "string", "Size of the unit.",
                     values=_v("a small locker", "a walk-in unit", "a garage-sized space"),
                     ask=("for {v}", "{v}"), fact=("{v}",), required=True, human="unit size"),
               _slot("area", "string", "Part of town.",
                     values=_v("the east side", "near the harbor", "downtown", "the industrial park"),
                     ask=("in {v}", "around {v}"), fact=("units in {v}", "{v}")),
               _slot("months", "integer", "Months of rental.", values=_counts(1, 3, 6), ask=("for {v} months",),
                     fact=("{v} months",)),
               _slot("climate_control", "boolean", "Climate-controlled.",
                     flag=_b("with climate control", "without climate control", "climate controlled units",
                             "plain units"), human="climate control"),
           )),
    Domain("SendGift", "Send a gift with a card.", "gifts", "send a gift",
           ("Send a gift", "I'd like to send a present", "please ship a gift"),
           (
               _slot("gift", "string", "What to send.",
                     values=_v("a fruit basket", "fresh flowers", "a box of chocolates", "scented candles"),
                     ask=("of {v}", "with {v}"), fact=("{v}",), required=True),
               _slot("recipient", "string", "Who receives it.",
                     values=_v("my grandmother", "the new neighbors", "my team at work", "Aunt Rosa"),
                     ask=("to {v}", "for {v}"), fact=("{v}",), required=True),
               _slot("card_message", "string", "What the card says.",
                     values=_v("happy birthday", "congratulations on the new job", "get well soon"),
                     ask=("with a card saying {v}", "and the card should say {v}"), fact=("a card saying {v}",),
                     human="card message"),
               _slot("gift_wrap", "boolean", "Wrap the gift.",
                     flag=_b("gift wrapped", "without wrapping", "gift wrapping", "no wrapping"), human="wrapping"),
           )),
    Domain("FindVolunteering", "Find a volunteer shift.", "volunteer shifts", "volunteer",
           ("Find me a volunteer shift", "I want to volunteer", "sign me up to help out"),
           (
               _slot("cause", "string", "Where to help.",
                     values=_v("the food bank", "the animal shelter", "the community garden", "a beach cleanup"),
                     ask=("at {v}", "with {v}"), fact=("{v}",), required=True),
               _slot("day", "string", "Day.", values=_v("Saturday", "this Sunday", "weekday evenings"),
                     ask=("on {v}",), fact=("{v}",)),
               _slot("hours", "integer", "Hours.", values=_counts(2, 3, 5), ask=("for {v} hours",),
                     fact=("{v} hour shifts",)),
               _enum("task", "Kind of work.", ("sorting", "driving", "teaching", "cleaning"), ("doing {v}",),
                     ("{v} tasks",)),
           )),
    Domain("BookCarWash", "Book a car wash.", "car washes", "wash the car",
           ("Book a car wash", "my car needs washing", "set up a wash for the car"),
           (
               _slot("package", "string", "Wash package.",
                     values=_v("the basic wash", "interior cleaning", "full detailing", "a quick rinse"),
                     ask=("for {v}", "with {v}"), fact=("{v}",), required=True),
               _slot("vehicle", "string", "Which vehicle.",
                     values=_v("my pickup truck", "the minivan", "the blue sedan"), ask=("for {v}",),
                     fact=("{v}",)),
               _slot("day", "string", "Day.", values=_v("Thursday", "tomorrow", "next weekend"),
                     ask=("on {v}", "for {v}"), fact=("{v}",)),
           )),
    Domain("RentTools", "Rent tools or equipment.", "tool rentals", "rent tools",
           ("Rent some equipment", "I need to rent a tool", "can you reserve a rental"),
           (
               _slot("tool", "string", "What to rent.",
                     values=_v("a pressure washer", "an extension ladder", "a tile saw", "camping gear"),
                     ask=("to get {v}", "for {v}"), fact=("{v}",), required=True),
               _slot("pickup_place", "string", "Where to collect it.",
                     values=_v("the hardware store", "the rental desk at the mall", "Miller Supply"),
                     ask=("from {v}", "to collect at {v}"), fact=("pickup at {v}",), human="pickup place"),
               _slot("days", "integer", "Days of rental.", values=_counts(1, 2, 5), ask=("for {v} days",),
                     fact=("{v} day rentals",)),
               _slot("delivery", "boolean", "Delivered to the home.",
                     flag=_b("delivered to my place", "for pickup", "home delivery", "store pickup")),
           )),
    Domain("WaterGarden", "Run the garden sprinklers.", "watering", "water the garden",
           ("Water the garden", "run the sprinklers", "turn on the watering"),
           (
               _slot("zone", "string", "Which part of the garden.",
                     values=_v("the front lawn", "the vegetable beds", "the rose bushes", "the back garden"),
                     ask=("for {v}", "on {v}"), fact=("{v}",), required=True),
               _slot("minutes", "integer", "How long.", values=_counts(10, 5, 8), ask=("for {v} minutes",),
                     fact=("{v} minutes",)),
               _slot("start", "string", "When to start.", values=_v("6 am", "sunset", "after dinner"),
                     ask=("at {v}", "starting {v}"), fact=("starting at {v}",), human="start time"),
           )),
    Domain("OrderPrintJob", "Send a document to a print shop.", "print jobs", "print something",
           ("Print something for me", "send a print job", "I need copies made"),
           (
               _slot("document", "string", "What to print.",
                     values=_v("the wedding invitations", "my resume", "the quarterly report", "concert flyers"),
                     ask=("of {v}",), fact=("{v}",), required=True),
               _slot("copies", "integer", "How many copies.", values=_counts(10, 2, 4), ask=("{v} copies",),
                     fact=("{v} copies",)),
               _slot("paper", "string", "Paper stock.",
                     values=_v("heavy card stock", "recycled paper", "glossy photo paper"),
                     ask=("on {v}",), fact=("{v}",)),
               _enum("finish", "Color or black and white.", ("color", "grayscale"), ("in {v}",),
                     ("{v} prints",)),
           )),
    Domain("FindRecipe", "Find a recipe.", "recipes", "look up a recipe",
           ("Find me a recipe", "what can I cook", "look up a recipe"),
           (
               _slot("dish", "string", "The dish.",
                     values=_v("chicken curry", "banana bread", "lentil soup", "a simple pasta salad"),
                     ask=("for {v}",), fact=("{v}",), required=True),
               _slot("avoid_ingredient", "string", "An ingredient to leave out.",
                     values=_v("peanuts", "dairy", "fresh cilantro"), ask=("without {v}", "with no {v}"),
                     fact=("recipes without {v}",), human="ingredient to avoid"),
               _slot("max_minutes", "integer", "Longest cooking time.", values=_counts(30, 10, 5),
                     ask=("under {v} minutes",), fact=("under {v} minutes",), human="cooking time"),
           )),
    Domain("BookTutor", "Book a tutoring session.", "tutoring", "book a tutor",
           ("Book a tutor", "I need a tutoring session", "find someone to tutor"),
           (
               _slot("subject", "string", "Subject.",
                     values=_v("algebra", "music theory", "essay writing", "organic chemistry"),
                     ask=("for {v}", "in {v}"), fact=("{v}",), required=True),
               _slot("student", "string", "Who is taught.",
                     values=_v("my son", "my daughter", "our youngest", "Jamal"), ask=("for {v}",),
                     fact=("{v}",)),
               _enum("setting", "Where the session happens.", ("online", "in person"), ("{v}",), ("{v} sessions",)),
               _slot("day", "string", "Day.", values=_v("Tuesday", "after school", "Sunday afternoon"),
                     ask=("on {v}",), fact=("{v}",)),
           )),
    Domain("ReportLostItem", "Report something lost to a lost-and-found office.", "lost item reports",
           "report a lost item",
           ("Report a lost item", "I lost something", "please file a lost property report"),
           (
               _slot("item", "string", "What was lost.",
                     values=_v("a black umbrella", "my reading glasses", "a blue backpack", "car keys"),
                     ask=("for {v}", "- {v}"), fact=("{v}",), required=True),
               _slot("place", "string", "Where it was lost.",
                     values=_v("the bus stop", "the second floor cafe", "the gym locker room", "Central Library"),
                     ask=("at {v}", "near {v}"), fact=("{v}",)),
               _slot("day", "string", "When.", values=_v("yesterday", "last Friday", "this morning"),
                     ask=("{v}",), fact=("{v}",)),
           )),
)


def build_items(seed: int = SEED, per_function: int = ITEMS_PER_FUNCTION) -> list[Item]:
    """`per_function` items per function (the corpus's kinds in turn; chains skipped: these functions chain to
    none), split as the module says."""
    items = draw_items(Builder(seed, DOMAINS), DOMAINS, KINDS, STYLES, TUNE_STYLES, REPORT_FUNCTIONS, per_function)
    for item in items:
        if item.example_type in ("none", "conditional"):
            item.style = "-"  # these kinds use no instruction style (conditions have their own)
        if any(" " in v and v == v.lower() for v in _strings(item.api_calls)):
            item.classes = sorted({*item.classes, "b:lowercase-phrase"})
    return items


def catalogue() -> dict[str, Any]:
    return domains_catalogue("phrase", "prefcall's generated phrase catalogue (prefcall.evaluation.corpus_phrase): 15 "
                             "everyday functions whose values are mostly lowercase common-noun phrases, none from "
                             "the shared data sets.", DOMAINS)


def build(out: Path = CORPUS_DIR) -> list[Path]:
    return write_corpus(out, "phrase_", catalogue(), build_items())
