"""Temporal expressions as units: the whole "half past 11 in the morning", never "the morning" or "11 in the".

People write times and dates in many shapes ("1 pm", "11:30 am", "morning 11:15", "one in the afternoon",
"12 o'clock", "March 2nd", "the 4th of this month", "next Wednesday", "today"). A span generator that cuts text at
function words cannot produce some of them ("am" and "one" are function words) and ranks their parts against
them. `expressions` finds the maximal time and date expressions of a text with a small English grammar (clock
times, hours with am/pm or o'clock, half/quarter past, parts of the day; month days, ordinals of a month,
weekdays with next/this, today and tomorrow, numeric dates); `align` makes a time or date argument's candidates
respect them: each expression is a candidate, and a span that cuts one or runs past it with other words is not.

The grammar is English time and date vocabulary only; no data set's wording. Of the spans it finds no expression
in, those written in numbers and clock or calendar words stay candidates; a span of other words holds no time or
date ("Tash Sultana" is no event's time), and neither does a number that is part of a name ("20Th Salon").
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Any, Literal

from prefcall.strategies.grounding.evidence import argument_class
from prefcall.strategies.grounding.values import Candidate, Source, is_offer, turn_of

Kind = Literal["time", "date"]

_NUM_WORD = r"(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_HOUR = rf"(?:\d{{1,2}}|{_NUM_WORD})"
_AMPM = r"(?:a\.?\s?m\b\.?|p\.?\s?m\b\.?)"
_PART = r"(?:morning|afternoon|evening|night|noon)"
_CLOCK = (rf"(?:\d{{1,2}}:\d{{2}}(?:\s*{_AMPM})?|{_HOUR}\s*{_AMPM}|{_HOUR}\s+o\W?\s?clock"
          rf"|(?:half|quarter)\s+(?:past|to)\s+{_HOUR}|noon|midday|midnight)")
# A clock time with a part of the day on either side ("morning 11:15", "one in the afternoon", "7 pm tonight"),
# or a part of the day alone ("in the evening" and "the evening" give "evening"; "this evening" stays whole).
_TIME = re.compile(
    rf"\b(?:(?:{_PART})\s+)?(?:{_CLOCK})(?:\s+(?:in\s+the\s+{_PART}|at\s+night|tonight))?(?!\w)"
    rf"|\b{_HOUR}\s+in\s+the\s+{_PART}\b"
    rf"|\b(?:this\s+)?(?:morning|afternoon|evening|tonight)\b", re.I)

_MONTH = (r"(?:january|february|march|april|may|june|july|august|september|october|november|december"
          r"|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)\.?")
_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?"
_ORD_WORD = (r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth"
             r"|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|twenty-\w+|thirtieth"
             r"|thirty-first)")
_NTH = r"(?:\d{1,2}(?:st|nd|rd|th))"
_ORDINAL = rf"(?:{_NTH}|{_ORD_WORD})"
_DAY = rf"(?:{_ORDINAL}|\d{{1,2}})"
_DATE = re.compile(
    rf"\b(?:{_MONTH}\s+{_DAY}(?:,?\s+\d{{4}})?(?!\w)"                       # March 2nd, March 2, 2024
    rf"|{_ORDINAL}\s+of\s+(?:{_MONTH}|this\s+month|next\s+month)(?!\w)"  # 4th of this month
    rf"|{_ORDINAL}\s+{_MONTH}(?!\w)"                                      # 14th March
    rf"|(?:the\s+)?{_NTH}(?!\w)(?!\s+of\b)(?!(?-i:\s+[A-Z][a-z]))"            # the 14th; not "20Th Salon", a name
    rf"|(?:next|this|coming|last)\s+(?:{_WEEKDAY}|week(?:end)?|month)(?!\w)"  # next Wednesday, this weekend
    rf"|{_WEEKDAY}(?:\s+(?:next|this)\s+week)?(?:\s+the\s+{_ORDINAL})?(?!\w)"  # Wednesday next week
    rf"|day\s+after\s+tomorrow|today|tomorrow|tonight"
    rf"|\d{{4}}-\d{{2}}-\d{{2}}|\d{{1,2}}/\d{{1,2}}(?:/\d{{2,4}})?(?!(?-i:\s+[A-Z])))(?!\w)", re.I)  # not "18/8 Fine"

_PATTERNS: dict[Kind, re.Pattern[str]] = {"time": _TIME, "date": _DATE}
_DATE_WORDS = re.compile(r"date|day")
_TIME_WORDS = re.compile(r"time|hour")


_ABBREVIATED = re.compile(r"[ap]\.\s?m\.$", re.I)

# The words a time or date is written with besides numbers: English clock and calendar vocabulary (the grammar's,
# and words it leaves to the filler: "around lunch", "Christmas Eve", "later this week"). A span of a time or date
# argument made of other words ("Tash Sultana", "restaurant reservation") holds no time or date.
CALENDAR_WORDS = frozenset("""a an the at on in of by for to from around about before after until till this next
    last coming early late later soon now asap today tomorrow tonight yesterday day days week weeks weekend weekends
    month months year years morning mornings afternoon afternoons evening evenings night nights noon midnight midday
    am pm a m p o clock half quarter past dawn dusk sunrise sunset lunch lunchtime dinner dinnertime breakfast
    eve christmas easter thanksgiving halloween new s holiday holidays st nd rd th
    one two three four five six seven eight nine ten eleven twelve fifteen twenty thirty forty fifty""".split()) | {
    w for pattern in (_MONTH, _WEEKDAY, _ORD_WORD) for w in re.findall(r"[a-z]{2,}", pattern)}
_LINKS = frozenset("a an the at on in of by for to from around about before after until till this next last coming "
                   "s st nd rd th o m p".split())  # calendar words that hold no time or date alone
_WORD = re.compile(r"\d[\w:/.-]*|[a-z]+", re.I)
_NAME_AFTER = re.compile(r"\s+([A-Z][a-z][\w'&-]*)")


def calendar_written(text: str) -> bool:
    """Every word of `text` is a number or a clock or calendar word, and one of them is more than a link ("at")."""
    words = _WORD.findall(text)
    return (all(w[0].isdigit() or w.lower() in CALENDAR_WORDS for w in words)
            and any(w[0].isdigit() or w.lower() not in _LINKS for w in words))


def _in_name(candidate: Candidate) -> bool:
    """A span that ends on a number followed by a capitalised word that is no calendar word ("18/8" of "18/8 Fine
    Men's Salons", "20Th" of "20Th Salon And Barber"): the number is part of a name; so is a weekday or month that
    opens one ("Friday" of "Friday Harbor": `_names_on`)."""
    words = _WORD.findall(candidate.text)
    if candidate.source is None or not words:
        return False
    if not words[-1][0].isdigit():  # "Friday" of "Friday Harbor"
        return _names_on(candidate.source.text, candidate.end - len(words[-1]), candidate.end)
    after = _NAME_AFTER.match(candidate.source.text, candidate.end)
    return after is not None and after.group(1).lower() not in CALENDAR_WORDS


_CALENDAR_NAME = re.compile(rf"(?:{_WEEKDAY}|{_MONTH})", re.I)


def _names_on(text: str, start: int, end: int) -> bool:
    """A weekday or month written with a capital and followed by a capitalised word that is no calendar word opens a
    name ("Friday Harbor", "March Street"); "Friday March 3" and "Monday I" are dates."""
    written = text[start:end]
    if not written[:1].isupper() or not _CALENDAR_NAME.fullmatch(written):
        return False
    after = _NAME_AFTER.match(text, end)
    return after is not None and after.group(1).lower() not in CALENDAR_WORDS


def expressions(text: str, kind: Kind) -> list[tuple[int, int]]:
    """(start, end) of each maximal `kind` expression of `text`, left to right, none overlapping (a sentence's
    full stop after "1 pm" is not part of it; the one of "p.m." is)."""
    out = []
    for match in _PATTERNS[kind].finditer(text):
        start, end = match.start(), match.end()
        if text[start:end].endswith(".") and not _ABBREVIATED.search(text[start:end]):
            end -= 1
        if _names_on(text, start, end):
            continue
        if text[start:end].strip():
            out.append((start, end))
    return out


def argument_kind(name: str, schema: dict[str, Any]) -> Kind | None:
    """"time" or "date" for an argument that holds one of them alone (its name, description or format say so);
    None for others, and for one that holds both (a date-time), whose value joins the two."""
    if schema.get("format") == "date-time" or (_DATE_WORDS.search(name.lower()) and _TIME_WORDS.search(name.lower())):
        return None
    klass = argument_class(name, schema)
    return klass if klass in ("time", "date") else None


# What may stand between a time and the date it is on ("8:30 tomorrow", "7 pm on Friday", "tomorrow at noon").
_TIME_THEN_DATE = re.compile(r"\s*,?\s*(?:on\s+)?", re.I)
_DATE_THEN_TIME = re.compile(r"\s*,?\s*(?:at\s+)?", re.I)


def joined(text: str, kind: Kind) -> list[tuple[int, int]]:
    """The `kind` expressions of `text`, each joined with an expression of the other kind written right beside it:
    a time with its date ("8:30 tomorrow", "7 pm on Friday", "tomorrow at noon"), a date with its time ("Saturday
    morning", "Friday at 7 pm"). The one value of a function whose argument of that kind is its only temporal one
    (a reminder's "when", a class's "day")."""
    other: Kind = "date" if kind == "time" else "time"
    partners = expressions(text, other)
    out = []
    for start, end in expressions(text, kind):
        after = next(((s, e) for s, e in partners if s >= end and _after(kind).fullmatch(text[end:s])), None)
        before = next(((s, e) for s, e in partners if e <= start and _after(other).fullmatch(text[e:start])), None)
        out.append((before[0] if before else start, after[1] if after else end))
    return out


def _after(kind: Kind) -> re.Pattern[str]:
    """What may stand between an expression of `kind` and the other kind's after it."""
    return _TIME_THEN_DATE if kind == "time" else _DATE_THEN_TIME


def align(candidates: Sequence[Candidate], sources: Sequence[Source], kind: Kind, *,
          dated: bool = False) -> list[Candidate]:
    """A time or date argument's candidates with its sources' `kind` expressions as units: every expression is a
    candidate (first, so that a tie keeps it), and a span of the same source that overlaps an expression without
    being it ("the morning" of "half past 11 in the morning", "reservation at morning 11:15") is dropped. A span
    that overlaps an expression of the other kind and none of its own is dropped too: "March 5th" is no time, and
    "7 pm" no date. Of the spans that touch no expression, those written in numbers and clock or calendar words
    stay ("around lunch", "Christmas Eve"), unless the number is part of a name ("18/8 Fine Men's Salons"); the
    others hold no time or date and go ("Tash Sultana"). A call's values stay as they are. `dated`: an argument
    that is the function's only temporal one takes a time with the date beside it, or a date with its time, as one
    unit (`joined`)."""
    other: Kind = "date" if kind == "time" else "time"
    find = (lambda text: joined(text, kind)) if dated else (lambda text: expressions(text, kind))
    found = {id(s): find(s.text) for s in sources if s.kind != "call"}  # a call's value is whole
    foreign = {id(s): expressions(s.text, other) for s in sources if s.kind != "call"}
    units: list[Candidate] = []
    seen: set[tuple[int, int, int]] = set()
    for source in sources:
        for start, end in found.get(id(source), []):
            text = source.text[start:end]
            key = (id(source), start, end)
            if key not in seen:
                seen.add(key)
                units.append(Candidate(text, text, source, start, end))
    kept = []
    for candidate in candidates:
        if candidate.source is None:
            kept.append(candidate)
            continue
        spans = found.get(id(candidate.source), [])
        if (id(candidate.source), candidate.start, candidate.end) in seen:
            continue  # the unit itself, already first
        if any(candidate.start < end and start < candidate.end for start, end in spans):
            continue
        if any(candidate.start < end and start < candidate.end for start, end in foreign.get(id(candidate.source), [])):
            continue  # a part of the other kind's expression, touching none of this kind's
        if candidate.source.kind != "call" and (not calendar_written(candidate.text) or _in_name(candidate)):
            continue  # words that hold no time or date, or a number of a name
        kept.append(candidate)
    texts = {c.text for c in units}
    return units + [c for c in kept if c.text not in texts]


def expression_spans(sources: Sequence[Source], kinds: Collection[Kind]) -> dict[int, list[tuple[int, int]]]:
    """(start, end) of every `kinds` expression, per source (`id`); a call's values are whole and hold none."""
    return {id(s): [e for kind in kinds for e in expressions(s.text, kind)] for s in sources if s.kind != "call"}


def outside(candidates: Sequence[Candidate], found: dict[int, list[tuple[int, int]]]) -> list[Candidate]:
    """The candidates of an argument that holds no time or date, without the spans that overlap an expression in
    `found` (`expression_spans` of the kinds the function has an argument for): "Monday" of "I like next Monday for
    ferries" is the date's, never the origin's; "this weekend for parking" is no location."""
    return [c for c in candidates if c.source is None
            or not any(c.start < end and start < c.end for start, end in found.get(id(c.source), []))]


def newest_unit(sources: Sequence[Source], kind: Kind) -> Candidate | None:
    """The one `kind` expression of the dialogue's newest turn (the last user turn, with the assistant's proposal it
    accepts) when that turn answers the assistant: the time or date the user is giving now. None when that turn has
    none or several (which is which is then the filler's to weigh), and for a request that opens the dialogue (its
    "today" may say when the user is asking, not what for; the filler weighs it)."""
    turns = {id(s): t for s in sources if (t := turn_of(s)) is not None and t >= 0}
    if not turns or max(turns.values()) == 0:
        return None
    newest = max(turns.values())
    units = {}
    for source in sources:
        turn = turns.get(id(source))
        if turn is None or turn < newest - 1 or (turn < newest and not is_offer(source.ref)):
            continue
        for start, end in expressions(source.text, kind):
            units.setdefault(source.text[start:end].lower(), Candidate(source.text[start:end], source.text[start:end],
                                                                       source, start, end))
    return next(iter(units.values())) if len(units) == 1 else None
