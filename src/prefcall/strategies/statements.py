"""What a standing instruction states: a wish, a fact about the user, or a record of something the user did.

A user's stored profile holds more than wishes. Three kinds, told apart by the statement's form, never by one data
set's wording:
- **wish** ("If I fly, I want Delta", "My preferred stylist is Ana"): applied through its tags
  (`preferences.apply_preferences`); two unconditional wishes for one argument give one call per value;
- **fact** ("My home address is 12 Elm Street.", "Phone: 555-0101"): a property of the user about no function.
  After the wishes, it fills a *required* argument the request left open when its key names that argument (the
  key's words are among the argument's name and description words), one fact clearly best, its value valid for the
  argument's schema: the profile holds the value, so asking for it would be the wrong question. An optional
  argument is never filled from a fact (a phone number the function may take is not a wish to send it), nor one
  about another party or where something goes (the recipient's name, the destination city). A fact selected for
  the request is also tagged, as a wish is, but its value never adds a second call beside another instruction's
  (several facts the small model tags to one argument are not several wishes);
- **record** ("From my order history: ordered pad thai from Thai Garden.", "Last week I booked Ken."): something
  the user did once. It is evidence of past use, not a wish: it is never tagged as one, so it sets no value and
  adds no call, and several records that give one argument different values are never read as several wishes
  (one call per value). Where the request refers back to past use ("the same stylist as last time", "order it
  again"), the filler reads the latest record about the request's function for the arguments the request refers
  to: the one the words after "same" name ("the same kind of car": car_type), else the required ones it left
  open (`resolve_back_reference`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema

from prefcall.retrieval.text import tokenize
from prefcall.schemas.model import Catalogue, Function
from prefcall.strategies.grounding.values import STREET_ADDRESS, coerce_text
from prefcall.strategies.preferences import Draft, Preference, Provenance
from prefcall.strategies.selection import DomainModel, SelectionConfig, instruction_domains
from prefcall.tagging.tags import slot_value

Kind = Literal["wish", "fact", "record"]

# A record's cues: a statement placed in the past ("history", "last week", "two days ago", "previously").
_PAST_CUES = re.compile(
    r"\b(?:(?:my|our|order|purchase|booking|travel|search|viewing|listening|shopping) (?:\w+ )?history|"
    r"history:|last (?:time|week|month|year|night|weekend|summer|winter|spring|autumn|fall|trip|visit|order|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday)|"
    r"yesterday|ago|previously|in the past|used to|earlier this (?:week|month|year))\b", re.I)
# Irregular past tenses that open a statement ("Bought an iPhone", "I flew to Rome"); regular ones end in -ed.
_IRREGULAR_PAST = frozenset(
    """bought paid went saw took ate flew drove got had made sent sold rode chose gave met left spent wrote ran
    heard found brought kept came lost won sat slept spoke told wore built caught held did""".split())
# What follows a past verb and not a participle used as an adjective ("ordered *a* burger", "checked *out*").
_VERB_OBJECT_OPENERS = frozenset(
    """a an the my our some two three four five six seven eight nine ten at in on from to with for out up by into
    through via""".split())
# -ed words that open wishes, not records ("Preferred airline: Delta", "Needed for work").
_NOT_PAST = frozenset({"preferred", "needed", "red", "bed", "shed", "seed", "feed", "speed", "need", "based"})
# Words that make a statement a wish even in the past ("I always booked Ken"; "prefer", "want", "like").
_WISH_WORDS = frozenset(
    """prefer prefers want wants like likes love loves always usually normally favourite favorite default
    unless whenever please should""".split())
# A request that refers back to past use: records apply ("the same as last time", "again", "my usual").
_BACK_REFERENCE = re.compile(
    r"\b(?:again|last time|as before|same (?:\w+ )?as|the same|previous(?:ly)?|usual|repeat|re-?order|re-?book|"
    r"history|one more time|like before)\b", re.I)
# A fact's two forms: "My <key> is <value>" and "<Key>: <value>".
_MY_FACT = re.compile(r"^\s*(?:my|our)\s+(?P<key>[^,;:!?]{1,40}?)\s+(?:is|are)\s+(?P<value>[^;!?]+?)\s*[.!]?\s*$",
                      re.I)
_CARD_FACT = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z '-]{0,30}?)\s*:\s*(?P<value>[^;!?]+?)\s*[.!]?\s*$")
_MAX_KEY_WORDS = 4
# A fact without a key: a short first-person statement that holds one value of a form that says what it is ("I
# live at 12 Elm Street.", "Text me on 555-0142.", "Dana Reyes here."). The form gives the key: an email address,
# a phone number, a street address (a house number, then capitalised words ending in a street word), a person's
# name (two or three capitalised words, not after a preposition of place), a home town (capitalised words after
# "in" in a statement of where the user lives).
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_PHONE = re.compile(r"(?<![\w-])\+?\(?\d[\d ().-]{5,}\d(?![\w-])")
_ISO_DATE = re.compile(r"^\d{4}-\d{1,2}-\d{1,2}$")
_CAPITALISED = re.compile(r"\b[A-Z][a-z'’-]+(?:\s+[A-Z][a-z'’-]+){0,2}\b")
_PLACE_PREPOSITIONS = frozenset("in at to from near on of with for via by into around".split())
_FIRST_PERSON = frozenset("i i'm im me my mine myself we us our".split())
_I_FORMS = frozenset("i i'm i've i'd i'll".split())
_RESIDENCE = frozenset("live lives living based reside resides resident home".split())
_KEYLESS_MAX_WORDS = 12
_CONDITION = re.compile(r"\b(?:if|when|whenever|unless)\b", re.I)
# A key scoped to something ("my usual city for lodging", "my go-to spot in town") states a wish about it, and so
# does one that says the user prefers it ("my preferred stylist is Ana": a wish, one of several it may have).
_SCOPED_KEY = re.compile(r"\b(?:for|when|if|in|on|at|with|about|preferred|favou?rite|usual|go-to|default|regular|"
                         r"preference)\b", re.I)
# Key words that name no property on their own ("my home address": the address; "user name": the name).
_GENERIC = frozenset({"user", "home", "current", "main", "primary", "personal", "number", "info", "information",
                      "detail", "details", "own"})


def _opening_words(text: str) -> list[str]:
    after = text.split(":", 1)[1] if ":" in text[:60] else text  # "From my order history: ordered ..."
    words = re.findall(r"[a-z]+", after.lower())
    while words and words[0] in {"i", "we", "once", "recently", "also", "then"}:
        words = words[1:]
    return words


def _past_opening(text: str) -> bool:
    """The statement opens with a verb in the past tense: an irregular one ("Bought an iPhone"), or an -ed word
    followed by what a verb takes (an article, a number, a preposition, a name: "ordered a burger", "stayed at",
    "booked Ken"), not a participle before its noun ("covered spots", "furnished places")."""
    words = _opening_words(text)
    if not words:
        return False
    first = words[0]
    if first in _IRREGULAR_PAST:
        return True
    if not first.endswith("ed") or len(first) <= 4 or first in _NOT_PAST:
        return False
    after = re.search(rf"\b{first}\s+(\S+)", text, re.I)
    following = after.group(1) if after else ""
    return bool(following) and (following.lower() in _VERB_OBJECT_OPENERS or following[0].isupper()
                                or following[0].isdigit())


def kind_of(instruction: str) -> Kind:
    """Whether an instruction states a wish, a fact about the user or a record of past use (module docstring)."""
    if _PAST_CUES.search(instruction):
        return "record"
    words = set(re.findall(r"[a-z]+", instruction.lower()))
    if words & _WISH_WORDS or _CONDITION.search(instruction) or re.match(r"\s*for\b", instruction, re.I):
        return "wish"
    if _past_opening(instruction):
        return "record"
    if fact_of(instruction) is not None:
        return "fact"
    return "wish"


def refers_back(request: str) -> bool:
    """The request refers back to past use ("book the same stylist as last time", "order it again")."""
    return bool(_BACK_REFERENCE.search(request))


@dataclass(frozen=True)
class Fact:
    instruction: str
    key: str  # "home address"
    value: str  # "12 Elm Street"
    keyless: bool = False  # the key was read off the value's form ("I live at 12 Elm Street.": address)

    @property
    def key_words(self) -> set[str]:
        return set(tokenize(self.key)) - _GENERIC


def fact_of(instruction: str) -> Fact | None:
    """The key and value of a fact ("My home address is 12 Elm Street." -> home address, 12 Elm Street); None for
    anything else (a condition, a wish, a key of more than four words)."""
    for pattern in (_MY_FACT, _CARD_FACT):
        match = pattern.match(instruction)
        if match is None:
            continue
        key, value = match["key"].strip(), match["value"].strip().strip("\"'")
        if not value or len(key.split()) > _MAX_KEY_WORDS or _SCOPED_KEY.search(key) or _CONDITION.search(value):
            return None
        fact = Fact(instruction=instruction, key=key, value=value)
        return fact if fact.key_words else None
    return keyless_fact(instruction)


def _typed_values(text: str) -> list[tuple[str, str, int]]:
    """The values of a form that says what they are, as (key, value, start): emails, phone numbers, street
    addresses, people's names, home towns (module comment above `_EMAIL`)."""
    found: list[tuple[str, str, int]] = []
    taken: list[tuple[int, int]] = []

    def add(key: str, match: re.Match[str]) -> None:
        if any(match.start() < end and start < match.end() for start, end in taken):
            return
        taken.append((match.start(), match.end()))
        found.append((key, match.group(0).strip(" ,"), match.start()))

    for match in _EMAIL.finditer(text):
        add("email", match)
    for match in STREET_ADDRESS.finditer(text):
        add("address", match)
    for match in _PHONE.finditer(text):
        digits = re.sub(r"\D", "", match.group(0))
        if len(digits) >= 7 and not _ISO_DATE.match(match.group(0).strip()):
            add("phone", match)
    words = {w.lower() for w in re.findall(r"[A-Za-z'’]+", text)}
    for run in _CAPITALISED.finditer(text):
        start = run.start()
        first = run.group(0).split()[0]
        after = text[run.end():].split()
        before_here = bool(after) and after[0].strip(".,!").lower() == "here"
        # The statement's first word and "I'm" are capitalised anyway: the run starts after them, except for a name
        # that opens the statement before "here" ("Dana Reyes here.").
        if first.lower().replace("’", "'") in _I_FORMS or (not text[:start].strip() and not before_here):
            start += len(first)
        match = _CAPITALISED.match(text, start + len(text[start:]) - len(text[start:].lstrip()), run.end())
        if match is None:
            continue
        before = re.findall(r"[A-Za-z'’]+", text[:match.start()])
        previous = before[-1].lower() if before else ""
        if previous in _PLACE_PREPOSITIONS:
            if previous == "in" and words & _RESIDENCE:
                add("home city", match)
            continue
        if len(match.group(0).split()) >= 2:
            add("name", match)
    return found


def keyless_fact(instruction: str) -> Fact | None:
    """A fact written without a key ("I live at 12 Elm Street.", "Text me on 555-0142."): a short first-person
    statement, with no condition and no wish word, that holds exactly one value of a form that says what it is;
    the form is its key. None for anything else."""
    words = re.findall(r"[a-z'’]+", instruction.lower())
    if len(words) > _KEYLESS_MAX_WORDS or instruction.rstrip().endswith("?") or _CONDITION.search(instruction):
        return None
    if not (set(words) & _FIRST_PERSON or "here" in words) or set(words) & _WISH_WORDS:
        return None
    typed = _typed_values(instruction)
    if len(typed) != 1:
        return None
    key, value, _ = typed[0]
    return Fact(instruction=instruction, key=key, value=value, keyless=True)


@dataclass(frozen=True)
class Profile:
    """A user's instructions by kind, read once per request."""

    wishes: list[str]
    facts: list[Fact]
    records: list[str]


def read_profile(instructions: Sequence[str], catalogue: Catalogue) -> Profile:
    """The profile's wishes, facts and records. A "fact" whose key names a function of the catalogue ("Library
    books: paperback") is a wish about that function, not a property of the user, and is left to its tags. Stage 1
    reads only the wishes as evidence of what the user asks for (a record of a gym search makes no request a gym
    search)."""
    function_words = {w for f in catalogue.functions for w in tokenize(f.name)}
    wishes: list[str] = []
    facts: list[Fact] = []
    records: list[str] = []
    for instruction in instructions:
        kind = kind_of(instruction)
        fact = fact_of(instruction) if kind == "fact" else None
        # A fact whose key, or for a fact without a key whose words, name a function is a wish about it ("Send my
        # parcels from 12 Elm Street").
        named = fact is not None and (fact.key_words | (set(tokenize(instruction)) if fact.keyless else set())) \
            & function_words
        if kind == "record":
            records.append(instruction)
        elif fact is not None and not named:
            facts.append(fact)
        else:
            wishes.append(instruction)
    return Profile(wishes, facts, records)


def facts_of(instructions: Sequence[str], catalogue: Catalogue) -> list[Fact]:
    """The profile's facts (`read_profile`)."""
    return read_profile(instructions, catalogue).facts


def wishes_of(instructions: Sequence[str], catalogue: Catalogue) -> list[str]:
    """The instructions that are wishes: neither records of past use nor facts about the user (`read_profile`)."""
    return read_profile(instructions, catalogue).wishes


# An argument about another party or where something goes ("recipient_name", "City the parcel goes to"): a fact
# about the user is not its value (the user's name is not the recipient's, their home city not the destination).
# The role nouns count in the argument's name or description; the verbs ("receives", "goes") only in its name,
# as a description's verb may be the user's own ("how the user receives notifications").
_OTHER_PARTY = frozenset(tokenize("recipient receiver destination payee beneficiary addressee invitee dropoff"))
_OTHER_PARTY_VERBS = frozenset(tokenize("receive receives receiving goes going arrive arrival arriving drop target"))


def _argument_words(name: str, schema: dict[str, Any]) -> set[str]:
    return set(tokenize(name)) | set(tokenize(str(schema.get("description") or "")))


def about_the_user(argument: str, schema: dict[str, Any]) -> bool:
    """Whether a fact about the user can be this argument's value: not where it names another party or where
    something goes."""
    return not (_argument_words(argument, schema) & _OTHER_PARTY or set(tokenize(argument)) & _OTHER_PARTY_VERBS)


def fact_for(argument: str, schema: dict[str, Any], facts: Sequence[Fact]) -> tuple[Fact, Any] | None:
    """The one fact whose key best names `argument` (share of the key's words among the argument's name and
    description words; a tie gives none) with its value valid for the schema; None when no fact names it."""
    if not about_the_user(argument, schema):
        return None
    words = _argument_words(argument, schema)
    scored = []
    for fact in facts:
        shared = fact.key_words & words
        if shared:
            scored.append((len(shared) / len(fact.key_words), fact))
    if not scored:
        return None
    scored.sort(key=lambda s: -s[0])
    if len(scored) > 1 and scored[1][0] == scored[0][0] and scored[1][1].value != scored[0][1].value:
        return None
    fact = scored[0][1]
    value = slot_value(fact.value, schema) if schema.get("enum") else coerce_text(fact.value, schema)
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        return None
    except jsonschema.SchemaError:
        return None
    return fact, value


def fill_from_facts(drafts: list[Draft], facts: Sequence[Fact], catalogue: Catalogue) -> list[str]:
    """Set each draft's required arguments that nothing set from the fact that names them; the instructions used."""
    used: list[str] = []
    if not facts:
        return used
    for draft in drafts:
        function: Function | None = catalogue.function(draft.name)
        if function is None:
            continue
        for argument in function.required:
            schema = function.properties.get(argument)
            if argument in draft.values or not isinstance(schema, dict):
                continue
            found = fact_for(argument, schema, facts)
            if found is None:
                continue
            fact, value = found
            draft.set(argument, [value], Provenance(argument=argument, value=value, origin="instruction",
                                                    instruction=fact.instruction, source=fact.value))
            if fact.instruction not in used:
                used.append(fact.instruction)
    return used


def whole_fact_values(preferences: Sequence[Preference], facts: Sequence[Fact], catalogue: Catalogue
                      ) -> list[Preference]:
    """A fact's tags with its whole value: where the tagger read a piece of a fact's value ("Birch Lane" of "7
    Birch Lane"), the argument takes the value the fact states, when the schema allows it. A fact holds one value,
    so a piece of it is never what the user stated."""
    by_instruction = {f.instruction: f for f in facts}
    out: list[Preference] = []
    for preference in preferences:
        fact = by_instruction.get(preference.instruction)
        function = catalogue.function(preference.function)
        if fact is None or function is None:
            out.append(preference)
            continue
        actions = {}
        for argument, values in preference.actions.items():
            schema = function.properties.get(argument)
            actions[argument] = [_whole(value, fact, schema) for value in values]
        out.append(preference.model_copy(update={"actions": actions}))
    return out


def _whole(value: Any, fact: Fact, schema: Any) -> Any:
    if not isinstance(value, str) or not isinstance(schema, dict) or schema.get("enum"):
        return value
    piece, whole = value.strip().lower(), fact.value.lower()
    if not piece or piece == whole or not re.search(rf"(?<!\w){re.escape(piece)}(?!\w)", whole):
        return value
    candidate = coerce_text(fact.value, schema)
    try:
        jsonschema.validate(candidate, schema)
    except (jsonschema.ValidationError, jsonschema.SchemaError):
        return value
    return candidate


# "the same kind of car as last time", "the same place again": the words after "same" name what is referred to.
_SAME = re.compile(r"\bsame\s+((?:[a-z-]+\s+){0,3}?[a-z-]+)\s+(?:as|again|like|from)\b", re.I)
_BACK_WORDS = frozenset({"same", "last", "time", "again", "before", "previous", "usual"})
MAX_RECORDS_READ = 3  # records read when none is about the function by its words (latest first)


def referred_arguments(request: str, function: Function, draft: Draft) -> list[str]:
    """The arguments a back reference asks to take from a record: the open one the words after "same" name, else
    the required ones the request left open (a value read off the back reference's own words counts as open)."""
    return named_arguments(request, function, draft) or _required_open(function, draft)


def _required_open(function: Function, draft: Draft) -> list[str]:
    return [a for a in function.required if a in _opened(function, draft)]


def named_arguments(request: str, function: Function, draft: Draft) -> list[str]:
    """The open arguments the words after "same" name ("the same kind of car": car_type); none where they name
    none ("the same person")."""
    match = _SAME.search(request)
    if not match:
        return []
    opened = _opened(function, draft)
    named = set(tokenize(match.group(1))) - {"kind", "type", "one"}
    return [a for a in opened if named & set(tokenize(a))] or \
        [a for a in opened if named & _argument_words(a, function.properties[a])]  # its name, else its words


def _opened(function: Function, draft: Draft) -> list[str]:
    def is_open(argument: str) -> bool:
        if argument not in draft.values:
            return True
        source = draft.provenance[argument].source if argument in draft.provenance else ""
        return draft.provenance[argument].origin == "user" and bool(set(tokenize(source, drop_stop_words=False))
                                                                    & _BACK_WORDS)
    return [a for a in function.properties if is_open(a)]


def resolve_back_reference(drafts: list[Draft], records: Sequence[str], request: str, catalogue: Catalogue,
                           read: Callable[[Function, str, bool], dict[str, tuple[Any, str]]],
                           functions_of: Callable[[str], list[str]] | None = None) -> list[str]:
    """Set the arguments a request that refers back to past use names from the latest record about its function
    (`read`: the filler on the record's text, argument -> (value, the words it was read from), told whether the
    record is about the function and the request names the arguments it takes, so that those take the record's
    most probable value as a request's do; `functions_of`: the functions a record is about, by default its words
    alone, `selection.instruction_domains`, asked once per record and only where a draft reads records); the
    records used."""
    used: list[str] = []
    if not records or not refers_back(request):
        return used
    if functions_of is None:
        model = DomainModel.build(catalogue)

        def by_words(record: str) -> list[str]:
            return instruction_domains(model, record, None, SelectionConfig())
        functions_of = by_words
    about_each: dict[str, list[str]] = {}  # each record's functions, asked once and only where a draft reads it
    for draft in drafts:
        function = catalogue.function(draft.name)
        if function is None:
            continue
        named = named_arguments(request, function, draft)
        targets = named or _required_open(function, draft)  # referred_arguments, with what the request names kept
        if not targets:
            continue
        # Read as a request is only where the record is about the function and the request names what it takes
        # from it ("the same event"): "the same person" names no argument, and the floor would fill the record's
        # other values into the required arguments left open (its city as the sender's address).
        surely = bool(named)
        for record in records:
            if record not in about_each:
                about_each[record] = functions_of(record)
        about = [r for r in records if function.name in about_each[r]]
        for record in reversed(about or list(records)[-MAX_RECORDS_READ:]):
            found = {a: v for a, v in read(function, record, bool(about) and surely).items() if a in targets}
            if not found:
                continue
            for argument, (value, source) in found.items():
                draft.set(argument, [value], Provenance(argument=argument, value=value, origin="instruction",
                                                        instruction=record, source=source))
            used.append(record)
            break
    return used
