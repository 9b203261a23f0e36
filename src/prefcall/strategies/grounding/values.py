"""Candidate values: what an argument may be set to, grounded in the text the caller sent.

A string argument without an enum is a span of a source: a user turn, an applicable standing instruction, or a
value of an earlier call in the dialogue. Enum arguments take one of their values, booleans true/false, numbers a
number written in a source (digits or number words, normalised to the schema's type). Whether an argument is
grounded or free is decided from its schema alone (`argument_kind`): arrays, objects and strings whose
description asks for a syntax (code, an expression, JSON, a URL pattern ...) are free, unless a `pattern` sets the
value's form (a postal code); everything else is grounded.

Spans are word n-grams (at most MAX_SPAN_WORDS words) that neither start nor end with a function word, trimmed
of surrounding punctuation; quoted strings are kept whole. A definite article or a possessive may open a span
when a content word follows it ("the airport", "my office", "the branch near school"): such common noun phrases
are values as they are written, and the structure weights learn when the article belongs to the value. Nothing
here knows a data set: the only vocabulary is English function words and number words.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from prefcall.retrieval.text import (INITIALISM_END, NUMBER_SCALES, NUMBER_WORDS, STOP_WORDS, humanise,
                                     normalise_word, number_from_words, stem, tokenize)

SourceKind = Literal["user", "instruction", "call", "profile"]
ArgumentKind = Literal["span", "enum", "boolean", "number", "free"]

MAX_SPAN_WORDS = 8
_EDGE = " \t\n,.;:!?\"'()[]{}<>"
_WORD_RE = re.compile(r"\S+")
_QUOTED_RE = re.compile(r"[\"“]([^\"”]{1,120})[\"”]")
# A street address: a house number, then up to three capitalised words ending in a street word ("12 Elm Street",
# "230 Mill Avenue", "4 Station Road"): one value, house number included.
STREET_WORDS = ("street st road rd avenue ave lane ln drive dr court ct close way boulevard blvd place pl square sq "
                "terrace crescent row parkway highway hill view gardens mews walk grove park alley").split()
STREET_ADDRESS = re.compile(r"\b\d{1,5}[A-Za-z]?,?\s+(?:[A-Z][\w'-]*\s+){0,3}(?:" + "|".join(
    w.capitalize() for w in STREET_WORDS) + r")\b")
# Words that open or close no value: function words, and the verbs and fillers requests are phrased with.
EDGE_WORDS = frozenset(STOP_WORDS | set(
    """want wants wanted need needs like likes would please i'm im i'd id i'll ill let let's lets can't cannot
    dont don't doesn't isn't aren't won't wont also really some any anything something one ones thing things
    get got find look looking search searching prefer preferred usually always often""".split()))
# Prepositions of place that STOP_WORDS does not hold: written lowercase they open the phrase around a value ("near
# the airport", "behind my office"), never the value; capitalised they may begin a name ("Near East Bakery").
PLACE_PREPOSITIONS = frozenset("""near nearby behind beside across outside inside opposite toward towards via along
    beneath beyond underneath""".split())
# Words that may open a span before a content word: "the airport", "my office" (never a span on their own).
DETERMINERS = frozenset("the my our your his her their this that".split())
_NUMBER_RE = re.compile(r"^[-+]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?$")
# A number as people write amounts: a currency sign before it ("$50", "€1,200.50"), a percent sign after it.
_AMOUNT_RE = re.compile(r"^(?P<sign>[-+]?)[$€£¥₹](?P<number>.+)$|^(?P<percent>.+)%$")
_POSSESSIVE_RE = re.compile(r"['’]s$")
_FREE_HINTS = re.compile(
    r"\b(python|syntax|expression|formula|equation|code|snippet|json|regex|regular expression|sql|query string|"
    r"url|uri|path|list of|array of|base64|hex)\b", re.I)
TRUE_WORDS = frozenset({"true", "yes", "1"})
FALSE_WORDS = frozenset({"false", "no", "0"})


@dataclass(frozen=True)
class Source:
    """A text values may come from, with where it came from (for provenance)."""

    kind: SourceKind
    text: str
    ref: str = ""  # e.g. the instruction text or "turn 2"
    # A user turn's: the questions the assistant's turn just before it asked ("Which restaurant would you like?"),
    # which the turn answers (evidence: the asked argument's cue).
    asked: str = ""


@dataclass(frozen=True)
class Candidate:
    """One possible value of one argument: the value in the schema's type and the text it was read from."""

    value: Any
    text: str  # the words as written ("" for booleans and unmatched enum values)
    source: Source | None = None
    start: int = -1  # character offsets in source.text
    end: int = -1

    @property
    def grounded(self) -> bool:
        return self.source is not None


@dataclass
class ArgumentCandidates:
    name: str
    schema: dict[str, Any]
    kind: ArgumentKind
    candidates: list[Candidate] = field(default_factory=list)


def argument_kind(schema: dict[str, Any]) -> ArgumentKind:
    """How an argument's value is found, from its schema alone."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if "enum" in schema and schema["enum"]:
        return "enum"
    if kind == "boolean":
        return "boolean"
    if kind in ("integer", "number"):
        return "number"
    if kind in ("array", "object") or ("properties" in schema and kind is None):
        return "free"
    if schema.get("pattern"):
        return "span"  # a value of a set form ("a postal code", "a phone number") is read from the request
    if _FREE_HINTS.search(str(schema.get("description") or "")) or schema.get("format") in ("uri", "regex"):
        return "free"
    return "span"


def words(text: str) -> list[tuple[str, int, int]]:
    """(word, start, end) with surrounding punctuation trimmed from each word's offsets."""
    out = []
    for match in _WORD_RE.finditer(text):
        raw = match.group()
        left = len(raw) - len(raw.lstrip(_EDGE))
        right = len(raw.rstrip(_EDGE))
        if right > left:
            out.append((raw[left:right], match.start() + left, match.start() + right))
    return out


def _edge_word(word: str) -> bool:
    """Words a value never starts or ends with: function words, lowercase prepositions of place and bare
    punctuation ("&", "-"). A function word written in capitals ("Portland, OR", "the US") is an abbreviation,
    not the word."""
    bare = word.strip(_EDGE)
    if len(bare) > 1 and bare.isalpha() and bare.isupper():
        return False
    return bare.lower() in EDGE_WORDS or bare in PLACE_PREPOSITIONS or not re.search(r"[A-Za-z0-9]", word)


def spans(source: Source, max_words: int = MAX_SPAN_WORDS) -> list[Candidate]:
    """Word n-grams of a source that could be a value (first distinct occurrence of each text)."""
    text = source.text
    tokens = words(text)
    if source.kind == "call":  # "destination city: Boston": only the value is a value, the name is a cue
        offset = text.find(": ") + 2 if ": " in text else 0
        tokens = [t for t in tokens if t[1] >= offset]
    seen: dict[str, Candidate] = {}
    for match in _QUOTED_RE.finditer(text):
        inner = match.group(1).strip(_EDGE)
        if inner:
            start = match.start(1) + match.group(1).index(inner)
            seen.setdefault(inner, Candidate(inner, inner, source, start, start + len(inner)))
    for i, (first, start, _) in enumerate(tokens):
        if _edge_word(first) and not _opens_noun_phrase(text, tokens, i) and not _opens_name(text, tokens, i):
            continue
        for j in range(i, min(len(tokens), i + max_words)):
            last, _, end = tokens[j]
            if j > i and _breaks(text, tokens[j - 1], tokens[j][1]):
                break  # a span never crosses a sentence end or a line
            if _edge_word(last):
                continue
            value = text[start:end].strip(_EDGE)
            if INITIALISM_END.search(value) and text[start + len(value):start + len(value) + 1] == ".":
                value += "."  # "Nguyen, M.D." at a sentence's end: the stop is the initialism's own
            if value and '"' not in value and re.search(r"[A-Za-z0-9]", value):
                seen.setdefault(value, Candidate(value, value, source, start, start + len(value)))
                owner = _POSSESSIVE_RE.sub("", value)  # "Bob's": the name is Bob; "Bob's" stays a candidate too
                if owner != value and re.search(r"[A-Za-z0-9]", owner):
                    seen.setdefault(owner, Candidate(owner, owner, source, start, start + len(owner)))
    return list(seen.values())


# "Seattle versus Minnesota", "Giants vs Marlins", "the Dodgers versus the Diamondbacks": the names a "versus"
# joins are one name, a match's (English usage), never two values.
_NAME_RUN = r"[A-Z][\w'&-]*(?:\s+[A-Z][\w'&-]*)*"
_VERSUS_RE = re.compile(rf"(?<![\w'&-]){_NAME_RUN}\s+(?i:vs\.?|versus|v\.)\s+(?:the\s+)?{_NAME_RUN}")


@functools.lru_cache(maxsize=256)
def _matches(text: str) -> tuple[tuple[int, int], ...]:
    """Where `text` writes a match's name; every span argument's every candidate asks of the same sources."""
    return tuple(m.span() for m in _VERSUS_RE.finditer(text))


def cuts_match(candidate: Candidate) -> bool:
    """The span is a part of a match's name ("Seattle" of "Seattle versus Minnesota") or runs past it."""
    if candidate.source is None or candidate.source.kind == "call":
        return False
    return any(candidate.start < end and start < candidate.end and (candidate.start, candidate.end) != (start, end)
               for start, end in _matches(candidate.source.text))


# An initial or a title that a stop and a capitalised word continue ("J. Mcdonald", "Dr. Lawrence", "St. Louis"): a
# span that ends on it cuts a name.
_CUT_NAME_RE = re.compile(r"\.\s+[A-Z]")
_TITLE_OR_INITIAL = re.compile(r"(?<![\w.'-])(?:[A-Z]|Dr|Mr|Mrs|Ms|Mt|St|Prof)$")


def cuts_name(candidate: Candidate) -> bool:
    """The span ends on a title or an initial whose name goes on after its stop: "dentist called Dr" and "Dr.
    Lawrence J" of "Dr. Lawrence J. Mcdonald"."""
    if candidate.source is None or candidate.source.kind == "call":
        return False
    return bool(_TITLE_OR_INITIAL.search(candidate.text)) and bool(
        _CUT_NAME_RE.match(candidate.source.text, candidate.end))


def _opens_noun_phrase(text: str, tokens: list[tuple[str, int, int]], i: int) -> bool:
    """A determiner ("the", "my") directly followed, in the same sentence, by a word that may open a value."""
    return (tokens[i][0].lower() in DETERMINERS and i + 1 < len(tokens) and not _edge_word(tokens[i + 1][0])
            and not _breaks(text, tokens[i], tokens[i + 1][1]))


def _opens_name(text: str, tokens: list[tuple[str, int, int]], i: int) -> bool:
    """A function word written capitalised inside a sentence, before a capitalised word, is a name's first word: "my
    go-to is A J Dental Lab", "dinner at The Cheesecake Factory", "the stylist name About Time Barber Shop". The
    pronoun "I" is capitalised wherever it stands, so it opens none."""
    word = tokens[i][0]
    pronoun = word == "I" or word.lower().startswith(("i'", "i’"))
    return (word[:1].isupper() and not pronoun and 0 < i < len(tokens) - 1 and tokens[i + 1][0] != "I"
            and not _breaks(text, tokens[i - 1], tokens[i][1]) and tokens[i + 1][0][:1].isupper()
            and not _breaks(text, tokens[i], tokens[i + 1][1]))


_ABBREVIATION_RE = re.compile(r"^([A-Z][a-z]{0,2}|[A-Za-z](\.[A-Za-z])+)$")  # Dr. St. Mr. M.D. U.S.


def clause_break(text: str, previous: tuple[str, int, int], next_start: int) -> bool:
    """Does the gap after `previous` end a clause: a sentence's end (`_breaks`) or a comma?"""
    return _breaks(text, previous, next_start) or "," in text[previous[2]:next_start]


def _breaks(text: str, previous: tuple[str, int, int], next_start: int) -> bool:
    """Does the gap after `previous` end a sentence or a line?"""
    word, _, end = previous
    gap = text[end:next_start]
    if "\n" in gap:
        return True
    closing = gap.strip()[:1]
    return closing in (".", "!", "?", ";") and not (closing == "." and _ABBREVIATION_RE.match(word))


def parse_number(word: str) -> int | float | None:
    w = word.lower().strip(_EDGE)
    if (written := number_from_words(w)) is not None:  # "ninety", "twenty-five"
        return written
    amount = _AMOUNT_RE.match(w)
    if amount:
        w = amount["sign"] + amount["number"] if amount["number"] else amount["percent"]
    if _NUMBER_RE.match(w):
        number = float(w.replace(",", ""))
        return int(number) if number.is_integer() and "." not in w else number
    return None


def numbers(source: Source, integer: bool) -> list[Candidate]:
    """Every number of the text: digits, amounts, and numbers written out in words, several words read as one
    ("twenty five", "two hundred and fifty", "a hundred": one candidate for the whole)."""
    out = []
    tokens = words(source.text)
    i = 0
    while i < len(tokens):
        run = _number_run(source.text, tokens, i)
        if run > i + 1:
            start, end = tokens[i][1], tokens[run - 1][2]
            value: int | float | None = number_from_words(source.text[start:end])
            word = source.text[start:end]
        else:
            word, start, end = tokens[i]
            value = parse_number(word)
            run = i + 1
        pronoun = run == i + 1 and _pronoun_one(tokens, i)
        i = run
        if value is None or (integer and isinstance(value, float)) or pronoun:
            continue
        out.append(Candidate(value, word, source, start, end))
    return out


# Words after which "one" stands for a thing named before ("this one", "the one", "a boxing one"), not a count,
# and words that may follow it ("the blue one, please").
_POINTING = frozenset("a an the this that which another each every any no some".split())
_POLITE = frozenset("please thanks thank".split())


def _pronoun_one(tokens: list[tuple[str, int, int]], i: int) -> bool:
    """Is the word at `i` the pronoun "one" ("a boxing one at Pulse", "the blue one, please", "that one")? It is
    when a determiner stands right before it, or one word before an adjective before it, and no noun follows it
    that it would count ("a one hour slot", "the one ticket" keep their number)."""
    if tokens[i][0].lower() != "one":
        return False
    before = [w.lower() for w, _, _ in tokens[max(0, i - 2):i]]
    pointed = bool(before) and (before[-1] in _POINTING or (len(before) == 2 and before[0] in _POINTING
                                                             and before[1] not in NUMBER_WORDS))
    following = tokens[i + 1][0].lower() if i + 1 < len(tokens) else ""
    return pointed and (not following or following in STOP_WORDS or following in _POLITE)


_NUMBER_STARTS = frozenset(NUMBER_WORDS) | frozenset(NUMBER_SCALES) | {"a", "an"}


def _number_run(text: str, tokens: list[tuple[str, int, int]], i: int) -> int:
    """The end (exclusive) of the longest run of words from `i` that reads as one number written out ("twenty
    five", "a hundred and ten"); `i` when none longer than one word starts there. The words stay in one clause:
    no punctuation between them."""
    if tokens[i][0].lower().split("-")[0] not in _NUMBER_STARTS:  # no written-out number starts with another word
        return i
    best = i
    for j in range(i + 1, min(len(tokens), i + 6) + 1):
        if j > i + 1 and text[tokens[j - 2][2]:tokens[j - 1][1]].strip():
            break
        if number_from_words(text[tokens[i][1]:tokens[j - 1][2]]) is not None:
            best = j
    return best if best > i + 1 else i


def normal_text(text: str) -> str:
    """Case and punctuation folded: how two written values are compared."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


# Words that make an argument the start of a movement: where a trip, a transfer or a route leaves from.
_ORIGIN_WORDS = frozenset("origin from departure depart departing source leave leaves leaving start starting".split())


def origin_like(name: str, schema: dict[str, Any]) -> bool:
    """The argument names where something leaves from ("origin_city", "departure airport", "city to fly from")."""
    return bool(_ORIGIN_WORDS.intersection(tokenize(f"{name} {schema.get('description') or ''}",
                                                    drop_stop_words=False)))


def enum_candidates(schema: dict[str, Any], sources: Sequence[Source]) -> list[Candidate]:
    """Every enum value; those written in a source carry where (case, plural and punctuation folded), else where
    a form derived from it is written ("a sporting event" writes Sports, "a musical" Music: `_derived_match`)."""
    out = []
    for option in schema.get("enum") or []:
        if option is None:
            continue
        key = normal_text(str(option))
        found = None
        if key:
            pattern = re.compile(r"\b" + r"\W*".join(map(re.escape, key.split())) + r"(?:e?s)?\b", re.I)
            for source in sources:
                match = pattern.search(source.text)
                if match:
                    found = Candidate(option, match.group(), source, match.start(), match.end())
                    break
            for source in sources if found is None else ():
                if (span := _derived_match(key.split(), source.text)) is not None:
                    found = Candidate(option, source.text[span[0]:span[1]], source, *span)
                    break
        out.append(found or Candidate(option, ""))
    return out


def word_root(word: str) -> str:
    """The word's stem, an adverb's without its "-ly" ("moderately" -> "moderate"; not "only", "family")."""
    word = normalise_word(word.lower())
    if word.endswith("ly") and len(word) >= 7:
        word = word[:-2]
    return stem(word)


def _derived_match(option_words: list[str], text: str) -> tuple[int, int] | None:
    """Where the text writes the option's words in derived forms: each word shares its root with the option's
    word and is at least as long ("sporting" for "sports", "musical" for "music", "moderately" for "moderate").
    A shorter form is not the value ("check my balance" does not write "checking"), and a word of three letters
    or fewer never matches by root."""
    tokens = words(text)
    n = len(option_words)
    roots = [word_root(w) for w in option_words]
    for i in range(len(tokens) - n + 1):
        window = tokens[i:i + n]
        if all(len(option) > 3 and len(word) >= len(option) and word_root(word) == root
               for (word, _, _), option, root in zip(window, option_words, roots)):
            return window[0][1], window[-1][2]
    return None


def boolean_candidates() -> list[Candidate]:
    return [Candidate(True, ""), Candidate(False, "")]


def coerce_text(value: str, schema: dict[str, Any]) -> Any:
    """A grounded text in the schema's type ("two" -> 2 for an integer); the text itself for strings."""
    kind = argument_kind(schema)
    if kind == "number":
        number = parse_number(value)
        return number if number is not None else value
    if kind == "boolean":
        low = value.strip().lower()
        return True if low in TRUE_WORDS else False if low in FALSE_WORDS else value
    return value


def argument_candidates(name: str, schema: dict[str, Any], sources: Sequence[Source]) -> ArgumentCandidates:
    """Every value this argument could take from these sources. An earlier call's value is carried over only to
    an argument of the same name (its destination city is not the next call's origin)."""
    sources = [s for s in sources if s.kind != "call" or s.ref.rsplit(".", 1)[-1] == name]
    kind = argument_kind(schema)
    out = ArgumentCandidates(name=name, schema=schema, kind=kind)
    if kind == "enum":
        counted = _counted_numbers(name, sources)
        out.candidates = [replace(counted[int(c.value)], value=c.value)
                          if not c.grounded and re.fullmatch(r"\d+", str(c.value)) and int(c.value) in counted else c
                          for c in enum_candidates(schema, sources)]
    elif kind == "boolean":
        out.candidates = boolean_candidates()
    elif kind == "number":
        integer = schema.get("type") == "integer"
        out.candidates = [c for s in sources for c in numbers(s, integer)]
    elif kind == "span":
        seen: set[str] = set()
        for source in sources:
            for candidate in spans(source):
                if candidate.text not in seen:
                    seen.add(candidate.text)
                    out.candidates.append(candidate)
    if kind in ("number", "enum"):  # an unnamed offered number is no candidate (an enum option stays, unwritten)
        kept = []
        for candidate in out.candidates:
            if not _unnamed_offer_number(candidate, name):
                kept.append(candidate)
            elif kind == "enum":
                kept.append(Candidate(candidate.value, ""))
        out.candidates = kept
    return out


# Nouns that count people or their places. An argument whose name counts them (number_of_seats, party_size,
# passengers) takes an offered number that any of them follows: "a table for 2 people" gives number_of_seats 2.
PERSON_NOUNS = frozenset(stem(w) for w in (
    "people person persons guest guests adult adults passenger passengers traveler travelers traveller travellers "
    "seat seats ticket tickets diner diners").split())
PERSON_COUNTS = PERSON_NOUNS | {stem("party"), stem("group")}


def _counted_words(name: str) -> set[str]:
    """Stems of the words a count of this argument's things is followed by: its name words, and for an argument that
    counts people, the nouns that count them."""
    named = {stem(w) for w in tokenize(humanise(name))}
    return named | PERSON_NOUNS if named & PERSON_COUNTS else named


def _counted_numbers(name: str, sources: Sequence[Source]) -> dict[int, Candidate]:
    """Number words that count the argument's things, by value, the first of each: "zero bags" gives 0 for
    number_checked_bags, "two people" 2 for number_of_seats (a numeric enum option written that way). A number
    word elsewhere ("one way") counts nothing."""
    counted, found = _counted_words(name), {}
    for source in sources:
        tokens = words(source.text)
        for i, (word, start, end) in enumerate(tokens):
            value = NUMBER_WORDS.get(word.lower())  # a numeral is `enum_candidates`' match
            if value is None or value in found:
                continue
            if counted & {stem(normalise_word(w.lower())) for w, _, _ in tokens[i + 1:i + 3]}:
                found[value] = Candidate(value, word, source, start, end)
    return found


def _unnamed_offer_number(candidate: Candidate, name: str) -> bool:
    """A number in an assistant's proposal is this argument's only when a word of the argument's name follows it
    ("for 1 passenger", "0 checked bags"), or, for an argument that counts people, a noun that counts them ("for 2
    people") or nothing ("a table for 2 at Sino": `_bare_party`): "4 flights" and "1 layover" count other
    things."""
    if candidate.source is None or not is_offer(candidate.source.ref) or parse_number(candidate.text) is None:
        return False
    text = candidate.source.text
    after = _TOKEN_RE.findall(text[candidate.end:].lower())[:3]
    named = _counted_words(name)
    if named & PERSON_NOUNS and _bare_party(text, candidate.start, candidate.end):
        return False
    return not any(stem(normalise_word(w)) in named for w in after)


def _bare_party(text: str, start: int, end: int) -> bool:
    """"for 2" with no noun after it ("a table for 2 at Sino", "a reservation for 4?"): the number of people. A
    word other than a function word after it ("for 2 nights", "for 7 pm") counts something else."""
    rest = text[end:]
    if not _FOR_RE.search(text[:start]):
        return False
    if not rest.strip() or rest.lstrip()[0] in ".?!,;":
        return True
    following = _TOKEN_RE.findall(rest.lower())[:1]
    return bool(following) and rest[:1].isspace() and following[0] in STOP_WORDS


_TOKEN_RE = re.compile(r"[^\W_]+")
_FOR_RE = re.compile(r"(?<![^\W_])for[\W_]*$", re.I)  # "for" is the last word before the number
_NUMERAL_RE = re.compile(r"[-+]?\d+(?:\.\d+)?")
_GROUPED_RE = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")  # 1,200,000 (but "3,4" is two numbers)


def ungrounded_leaf(value: Any, schema: dict[str, Any], sources: Sequence[Source]) -> str | None:
    """The first part of a generated value that no source wrote (None when every part is grounded).

    For free arguments (arrays, objects, syntax strings) the model writes the value; this keeps the rule that a
    value comes from the request: every string leaf's words, every number and every key of a free-form object
    must occur in a source (enum values, booleans and a schema's own property names are the schema's). An empty
    value ("", [], {}) gives nothing and counts as ungrounded."""
    words_seen = {t.lower() for s in sources for t in _TOKEN_RE.findall(s.text)}
    numbers_seen = [float(m) for s in sources for m in _NUMERAL_RE.findall(s.text)]
    numbers_seen += [float(m.replace(",", "")) for s in sources for m in _GROUPED_RE.findall(s.text)]
    numbers_seen += [float(n) for s in sources for w, _, _ in words(s.text) if (n := parse_number(w)) is not None]

    def number_ok(x: float) -> bool:
        return any(abs(x - n) <= 1e-9 * max(1.0, abs(n)) for n in numbers_seen)

    def text_ok(text: str) -> bool:
        tokens = [t.lower() for t in _TOKEN_RE.findall(text)]
        return bool(tokens) and all(t in words_seen or (_NUMERAL_RE.fullmatch(t) and number_ok(float(t)))
                                    for t in tokens)

    def check(node: Any, spec: Any) -> str | None:
        spec = spec if isinstance(spec, dict) else {}
        if spec.get("enum") or isinstance(node, bool) or node is None:
            return None
        if isinstance(node, (int, float)):
            return None if number_ok(float(node)) else repr(node)
        if isinstance(node, str):
            return None if text_ok(node) else repr(node)
        if isinstance(node, dict):
            if not node:
                return "{}"
            properties = spec.get("properties") or {}
            for key, item in node.items():
                if key not in properties and not text_ok(key):
                    return repr(key)
                if (problem := check(item, properties.get(key) or spec.get("additionalProperties"))):
                    return problem
            return None
        if isinstance(node, list):
            if not node:
                return "[]"
            return next((p for item in node if (p := check(item, spec.get("items")))), None)
        return repr(node)

    return check(value, schema)


# An assistant turn whose proposal the user's next turn accepts is a source of the user's (`offer_sources`): its ref
# starts with OFFER. Acceptance: a word of ACCEPT among the reply's first words, and no word of REJECT anywhere
# in it ("No, make it 7 pm", "Sure, but not Friday" accept nothing).
OFFER = "offer"
ACCEPT = frozenset("yes yeah yep yup sure ok okay correct great perfect works sounds confirm confirmed absolutely "
                   "exactly definitely agreed excellent".split())
REJECT = frozenset("no nope not don't dont never instead rather actually change different other else wrong "
                   "without except but".split())
_REPLY_WORDS = re.compile(r"[a-z']+")


_QUESTION_RE = re.compile(r"[^.!?]*\?")


def questions(text: str) -> str:
    """The sentences of an assistant's turn that ask something ("Which restaurant? At what time?"), joined."""
    return " ".join(q.strip() for q in _QUESTION_RE.findall(text))


def accepts(reply: str, lead: int = 4) -> bool:
    """The user's reply accepts what the assistant proposed: an acceptance word among its first `lead` words and
    no rejection word in it."""
    words = _REPLY_WORDS.findall(reply.lower())
    return bool(words) and any(w in ACCEPT for w in words[:lead]) and not any(w in REJECT for w in words)


def accepted_offers(turns: Sequence[Any]) -> list[int]:
    """Indices of the assistant turns whose next turn is the user accepting them ("Please confirm: a table for 2
    on March 8th" / "Yes, that's great"). A proposal the user rejects or does not answer is not one."""
    return [index for index, (said, reply) in enumerate(zip(turns, list(turns)[1:]))
            if said.role == "assistant" and said.content.strip() and reply.role == "user" and accepts(reply.content)]


def offer_sources(turns: Sequence[Any]) -> list[Source]:
    """The accepted offers (`accepted_offers`) as sources of the user's values (kind "user", ref "offer turn N")."""
    return [Source("user", turns[index].content, ref=f"{OFFER} turn {index}") for index in accepted_offers(turns)]


def is_offer(ref: str) -> bool:
    return ref.startswith(f"{OFFER} ")


_TURN_REF = re.compile(rf"^(?:{OFFER} )?turn (\d+)$")


def turn_of(source: Source | None) -> int | None:
    """Where a source stands in the dialogue: the index of its turn for a user turn or an accepted offer, -1 for an
    earlier call (what the conversation held before its turns were read again), None for sources outside the
    dialogue (standing instructions, profiles)."""
    if source is None:
        return None
    if source.kind == "call":
        return -1
    match = _TURN_REF.match(source.ref) if source.kind == "user" else None
    return int(match.group(1)) if match else None


def call_sources(calls: Iterable[Any]) -> list[Source]:
    """Earlier calls' argument values as sources (`name=value`, so the parameter name is a cue)."""
    out = []
    for call in calls:
        for key, value in (getattr(call, "arguments", None) or {}).items():
            if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                out.append(Source("call", f"{key.replace('_', ' ')}: {value}", ref=f"{call.name}.{key}"))
    return out
