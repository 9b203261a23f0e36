"""Values the user gave that the argument's schema does not allow, found so that they are asked about by name.

An enum argument takes only its own values and every candidate of an argument is read in the schema's type, so a
value the user wrote that breaks the schema is no candidate: "a penthouse room" against a room of single, double or
suite, "555-CALL-NOW" against a phone number's `pattern`, "2.5 nights" against an integer. Left alone the argument
stays unset, and the answer is a call without it or a question that does not say what was wrong. After filling, an
argument left unset gets the user's own value when one is found here; the post-check then asks about it, naming
the problem ("'penthouse' is not one of the room options (single, double, suite)"). Found are:

- words next to the argument's own name words (those the function's name does not have: "event" is what GetEvents
  is about, so "a sporting event" says nothing of its event_type) in a user turn: just before them ("a penthouse room", "2.5 nights") or
  after them behind a linking word ("room type: penthouse", "phone number is 555-CALL-NOW"; a written code needs
  no linking word: "phone number 555-CALL-NOW");
- for a required argument with a `pattern`, a written code (a word with a digit or an "@") that the pattern
  rejects, when it is the only one in the user's turns;
- for an enum whose options are written codes of one shape (sizes 4x6, 5x7, 8x10), a written code of that shape
  that is none of them ("9x12"), when it is the only one.

The same written code, when the pattern accepts it, is the argument's value (`pattern_value`: "Call 555-0199"
against a phone pattern): a value of a set form is read from the request even where the filler's evidence for
it was too weak.

A found value the schema allows is not a misfit (it was a candidate and lost) and is left alone. Only the user's
turns are read, never an instruction; never a span another argument took, a value to avoid, a word that names the
function or another argument ("a hotel room" names the hotel, not a kind of room), or a function word.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Collection, Sequence
from typing import Any

from prefcall.retrieval.text import normalise_word, split_identifier, stem, tokenize
from prefcall.schemas.model import Function

from prefcall.strategies.grounding.values import (DETERMINERS, EDGE_WORDS, Candidate, Source, argument_kind,
                                                  normal_text, parse_number, words)

# Name words that say what kind of thing an argument is, not what it is about ("room type", "phone number").
GENERIC_NAME_WORDS = frozenset("type name id number value kind code category mode level option text string".split())
# Quantifiers: they count or pick a thing ("each note", "every room"), they never name a kind of it.
QUANTIFIERS = frozenset("each every all both either neither another other others few many several more most much such "
                        "same own per".split())
ARTICLES = frozenset({"a", "an"})
LINKERS = frozenset({"is", "was", "be", ":", "=", "as"})
MAX_VALUE_WORDS = 3
_CODE_RE = re.compile(r"(?=.*[0-9@])\S{3,}")
_HAS_WORD_RE = re.compile(r"[A-Za-z0-9]")


def _root(word: str) -> str:
    """One form for the forms of a word ("days" / "day", "rooms" / "room", "booking" / "book")."""
    root = stem(normalise_word(word.lower()))
    return root[:-1] if root.endswith("s") and len(root) > 3 else root


def cue_roots(name: str) -> set[str]:
    """The argument's name words that say what it is about: room_type -> {room}, number_of_nights -> {night}."""
    return {_root(w) for w in tokenize(split_identifier(name)) if w not in GENERIC_NAME_WORDS}


def named_roots(function: Function, argument: str) -> set[str]:
    """Words that name the function or its other arguments: never a value of this one."""
    text = f"{split_identifier(function.name)} {function.description or ''} " + " ".join(
        split_identifier(other) for other in function.properties if other != argument)
    return {_root(w) for w in tokenize(text)}


def _value_word(word: str, named: set[str]) -> bool:
    low = word.lower()
    return bool(_HAS_WORD_RE.search(word)) and low not in EDGE_WORDS | DETERMINERS | QUANTIFIERS \
        and _root(word) not in named


def _span(source: Source, tokens: list[tuple[str, int, int]], first: int, last: int) -> Candidate:
    start, end = tokens[first][1], tokens[last][2]
    return Candidate(source.text[start:end], source.text[start:end], source, start, end)


def _gap_breaks(text: str, left: tuple[str, int, int], right: tuple[str, int, int]) -> bool:
    """Punctuation other than a colon or an equals sign between two words: they are not one phrase."""
    gap = text[left[2]:right[1]].strip()
    return bool(gap) and gap not in (":", "=")


def cued(source: Source, cues: set[str], named: set[str], counted: bool = False) -> list[tuple[Candidate, Candidate]]:
    """Spans next to a cue word of the argument: the words right before it, or after it behind a linking word;
    each with the reading that keeps the cue word ("living" and "living room": a value may end in its cue).
    `counted`: the argument is a number, so "of" links too ("a rate of 0.1"; "notes of C major" is no enum value)."""
    tokens, text, out = words(source.text), source.text, []
    for i, (word, _, _) in enumerate(tokens):
        if _root(word) not in cues:
            continue
        # Before: "a penthouse room", "2.5 nights" (up to MAX_VALUE_WORDS value words, one phrase).
        first = i
        while first > 0 and i - first < MAX_VALUE_WORDS and _value_word(tokens[first - 1][0], named | cues) \
                and not _gap_breaks(text, tokens[first - 1], tokens[first]):
            first -= 1
        opened = first == 0 or tokens[first - 1][0].lower() in ARTICLES | DETERMINERS \
            or _gap_breaks(text, tokens[first - 1], tokens[first])
        if first < i and (opened or counted):
            # One noun phrase that an article opens: "(book) a penthouse room", never "(interested) in understanding
            # food" or "(a track) using notes"; a number needs none ("for 2.5 nights").
            out.append((_span(source, tokens, first, i - 1), _span(source, tokens, first, i)))
        # After: "room type: penthouse", "phone number is 555-CALL-NOW", "phone number 555-CALL-NOW".
        j = i + 1
        while j < len(tokens) and _root(tokens[j][0]) in cues | {_root(w) for w in GENERIC_NAME_WORDS}:
            j += 1
        linked = j < len(tokens) and text[tokens[j - 1][2]:tokens[j][1]].strip() in (":", "=")
        if j < len(tokens) and (tokens[j][0].lower() in LINKERS or (counted and tokens[j][0].lower() == "of")):
            linked, j = True, j + 1
        last = j
        while last < len(tokens) and last - j < MAX_VALUE_WORDS and _value_word(tokens[last][0], named | cues) \
                and (last == j or not _gap_breaks(text, tokens[last - 1], tokens[last])):
            last += 1
        if last > j and (linked or (last == j + 1 and _CODE_RE.fullmatch(tokens[j][0]))):
            out.append((_span(source, tokens, j, last - 1), _span(source, tokens, i, last - 1)))
    return out


def codes(source: Source) -> list[Candidate]:
    """Written codes of a source: words with a digit or an "@" ("555-CALL-NOW", "bob@mail", "A12-B")."""
    return [Candidate(word, word, source, start, end) for word, start, end in words(source.text)
            if _CODE_RE.fullmatch(word)]


def shape(text: str) -> str:
    """A written code's shape: runs of digits, capitals and small letters as one mark each ("8x10" -> "9a9")."""
    return re.sub(r"[0-9]+", "9", re.sub(r"[a-z]+", "a", re.sub(r"[A-Z]+", "A", text)))


def shaped(source: Source, options: Sequence[Any]) -> list[Candidate]:
    """Written codes of a source that have the one shape every option of an enum has, and are none of them: "9x12"
    where the sizes are 4x6, 5x7 and 8x10. Only options written with a digit or an "@" have a shape that says what
    they are (a plain word's shape is any word's)."""
    shapes = {shape(str(o)) for o in options}
    if len(shapes) != 1 or not all(_CODE_RE.fullmatch(str(o)) for o in options):
        return []
    allowed = {normal_text(str(o)) for o in options}
    return [c for c in codes(source) if shape(c.text) in shapes and normal_text(c.text) not in allowed]


def find_misfit(function: Function, argument: str, schema: dict[str, Any], sources: Sequence[Source], *,
                taken: Collection[tuple[Source | None, int, int]] = (), avoid: Collection[str] = (),
                today: dt.date | None = None) -> tuple[Candidate, str] | None:
    """(the user's value for `argument`, what the schema says of it) when the user wrote a value for it that the
    schema does not allow; None otherwise (see the module docstring)."""
    from prefcall.strategies.postcheck import repair_value  # the post-check's own rules decide what is allowed

    kind = argument_kind(schema)
    if kind in ("boolean", "free"):
        return None  # a flag is named, not written; a free value is written by the model and checked as written
    user = [s for s in sources if s.kind == "user"]
    # A name word that the function's name has too names what the function is about ("a sporting event" for
    # GetEvents' event_type), not this argument.
    cues = cue_roots(argument) - {_root(w) for w in tokenize(split_identifier(function.name))}
    named = named_roots(function, argument)
    found = [pair for s in user for pair in cued(s, cues, named, kind == "number")] if cues else []
    if not found and schema.get("pattern") and argument in function.required:
        written = [c for s in user for c in codes(s)]
        found = [(written[0], written[0])] if len(written) == 1 else []
    if not found and kind == "enum":
        alike = [c for s in user for c in shaped(s, schema.get("enum") or [])]
        found = [(alike[0], alike[0])] if len(alike) == 1 else []
    misfits = []
    for candidate, with_cue in found:
        if normal_text(candidate.text) in avoid or any(
                s is candidate.source and candidate.start < e and st < candidate.end for s, st, e in taken):
            continue
        value: Any = candidate.value
        if kind == "number":
            # "a window seat" is no count of seats, and "$200,000" or "3%" is a number as written: only a number
            # read the way candidates are read can break a number's schema ("2.5 nights" for a whole number).
            value = parse_number(candidate.text) if " " not in candidate.text else None
            if value is None:
                continue
        _, problem = repair_value(value, schema, today)
        if not problem or (with_cue is not candidate and not repair_value(with_cue.value, schema, today)[1]):
            return None  # the user also wrote a value the schema allows ("rate of 200 ... rate of 0.1"): no misfit
        misfits.append((Candidate(value, candidate.text, candidate.source, candidate.start, candidate.end), problem))
    return misfits[0] if misfits else None


def pattern_value(function: Function, argument: str, schema: dict[str, Any], sources: Sequence[Source], *,
                  taken: Collection[tuple[Source | None, int, int]] = (), avoid: Collection[str] = ()) -> Candidate | None:
    """The only written code of the user's turns, when `argument` is required, has a `pattern` and the pattern
    accepts it: "555-0199" for a phone number that "Call 555-0199 please" left unset."""
    from prefcall.strategies.postcheck import repair_value

    if not schema.get("pattern") or argument not in function.required or argument_kind(schema) != "span":
        return None
    written = [c for s in sources if s.kind == "user" for c in codes(s)]
    if len(written) != 1 or normal_text(written[0].text) in avoid or any(
            s is written[0].source and written[0].start < e and st < written[0].end for s, st, e in taken):
        return None
    return None if repair_value(written[0].value, schema)[1] else written[0]
