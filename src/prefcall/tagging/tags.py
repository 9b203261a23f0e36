"""TAPS structured tags: parse, validate, serialise, and turn into (function, slot, value) triples.

Format (TAPS, grill-lab/taps): the instruction's own words, with intents and slots bracketed in place:
    [IN:GET_EVENTS If I'm looking for Events, I'd like them to be in [SL:CITY New York ] . ]
Intents may nest (`[IN:GET_TRAVEL [IN:GET_EVENTS I prefer [SL:CATEGORY pop ] music ] when ... ]`: a slot
belongs to its innermost intent) and several may sit side by side. Closing brackets may touch words
("Barber Shop]", "]."), so the parser scans characters, not whitespace-split words.

Mapping to a catalogue: IN:GET_RENTAL_CARS <-> GetRentalCars (compared with case and underscores folded,
so the gold's IN:GET_RENTALCARS also maps), SL:PICKUP_LOCATION <-> pickup_location (same folding).
An invalid tagging is reported with reasons, never silently used.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from prefcall.errors import ParseError
from prefcall.retrieval.text import INITIALISM_END, NAME_VERBS, NEGATION
from prefcall.schemas.model import Call, Catalogue, Function

_OPEN_RE = re.compile(r"\[(IN|SL):([A-Za-z0-9_]+)")
_TRAILING_PUNCT = " .,;:!?\"'"


class TagNode(BaseModel):
    """An intent (IN) or slot (SL) bracket; children are plain-text pieces or nested nodes, in order."""

    kind: Literal["IN", "SL"]
    label: str
    children: list[TagNode | str] = Field(default_factory=list)

    def text(self) -> str:
        """The words inside the bracket, whitespace-normalised."""
        return " ".join(_plain(self.children).split())


class TagTree(BaseModel):
    """A whole tagged instruction: top-level text pieces and nodes, in order."""

    children: list[TagNode | str] = Field(default_factory=list)

    def text(self) -> str:
        return " ".join(_plain(self.children).split())

    def intents(self) -> list[TagNode]:
        return [n for n in self.walk() if n.kind == "IN"]

    def walk(self) -> list[TagNode]:
        out: list[TagNode] = []
        _walk(self.children, out)
        return out


class SlotFill(BaseModel):
    """One (function, slot, value) triple read from a tagged instruction."""

    function: str
    slot: str | None  # None: the intent names a function but fills no slot ("also check Hotels")
    value: Any = None
    span: str = ""


class TaggedInstruction(BaseModel):
    """An instruction with its (cached) tags; the pipeline accepts these in place of plain strings."""

    instruction: str
    tagged: str | None = None
    status: Literal["ok", "invalid", "untagged"] = "untagged"


def _plain(children: list[TagNode | str]) -> str:
    return " ".join(c if isinstance(c, str) else _plain(c.children) for c in children)


def _walk(children: list[TagNode | str], out: list[TagNode]) -> None:
    for child in children:
        if isinstance(child, TagNode):
            out.append(child)
            _walk(child.children, out)


# -- parsing ------------------------------------------------------------------------------
def parse_tags(tagged: str) -> TagTree:
    """Parse a tag string; unbalanced brackets or a bare '[' raise ParseError."""
    root: list[TagNode | str] = []
    stack: list[TagNode] = []
    buffer: list[str] = []
    position = 0

    def flush() -> None:
        if "".join(buffer).strip():
            target = stack[-1].children if stack else root
            target.append(" ".join("".join(buffer).split()))
        buffer.clear()

    while position < len(tagged):
        char = tagged[position]
        if char == "[":
            match = _OPEN_RE.match(tagged, position)
            if match is None:
                raise ParseError(f"'[' at character {position} does not open [IN:..] or [SL:..]: fix the tag string")
            flush()
            node = TagNode(kind=match.group(1), label=match.group(2).upper())
            (stack[-1].children if stack else root).append(node)
            stack.append(node)
            position = match.end()
            continue
        if char == "]":
            if not stack:
                raise ParseError(f"unbalanced brackets: ']' at character {position} closes nothing")
            flush()
            stack.pop()
            position += 1
            continue
        buffer.append(char)
        position += 1
    if stack:
        raise ParseError(f"unbalanced brackets: {len(stack)} bracket(s) left open ({stack[-1].kind}:{stack[-1].label})")
    flush()
    return TagTree(children=root)


def serialize_tags(tree: TagTree) -> str:
    """Canonical tag string: `[IN:X words [SL:Y span ] words ]`, single spaces."""
    return " ".join(_serialize(c) for c in tree.children)


def _serialize(item: TagNode | str) -> str:
    if isinstance(item, str):
        return item
    inner = " ".join(_serialize(c) for c in item.children)
    return f"[{item.kind}:{item.label} {inner} ]"


# -- catalogue mapping ----------------------------------------------------------------------
def _fold(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def intent_label(function_name: str) -> str:
    """GetRentalCars -> GET_RENTAL_CARS."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", function_name).upper()


def slot_label(argument: str) -> str:
    """pickup_location -> PICKUP_LOCATION."""
    return argument.upper()


def function_for_intent(label: str, catalogue: Catalogue) -> Function | None:
    folded = _fold(label)
    return next((f for f in catalogue.functions if _fold(f.name) == folded), None)


def argument_for_slot(label: str, function: Function) -> str | None:
    folded = _fold(label)
    return next((name for name in function.properties if _fold(name) == folded), None)


# -- validation -----------------------------------------------------------------------------
def validate_tags(tagged: str, instruction: str, catalogue: Catalogue) -> list[str]:
    """Reasons the tagging is unusable; empty when valid."""
    try:
        tree = parse_tags(tagged)
    except ParseError as exc:
        return [str(exc)]
    reasons = _token_reasons(tree, instruction)
    if not tree.intents():
        reasons.append("no intent: wrap the instruction in [IN:<API> ... ]")
    reasons += _structure_reasons(tree.children, None, catalogue)
    return reasons


def _token_reasons(tree: TagTree, instruction: str) -> list[str]:
    # Compare with all whitespace removed: tags may add or drop spaces around brackets, never characters.
    want, got = "".join(instruction.split()), "".join(tree.text().split())
    if want == got:
        return []
    cut = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
    if len(got) < len(want) and want.startswith(got[:cut]):
        return [f"token dropped or changed near {want[max(0, cut - 10):cut + 10]!r}: keep every word of the instruction"]
    return [f"text differs from the instruction near {got[max(0, cut - 10):cut + 10]!r}: keep every word, add none"]


def _structure_reasons(children: list[TagNode | str], intent: Function | None, catalogue: Catalogue) -> list[str]:
    reasons: list[str] = []
    for child in children:
        if isinstance(child, str):
            continue
        if child.kind == "IN":
            function = function_for_intent(child.label, catalogue)
            if function is None:
                reasons.append(f"unknown API IN:{child.label}: use one of the catalogue's intents")
            reasons += _structure_reasons(child.children, function, catalogue)
            continue
        if intent is None:
            reasons.append(f"slot SL:{child.label} outside any intent: put slots inside [IN:..]")
        elif argument_for_slot(child.label, intent) is None:
            reasons.append(f"unknown slot SL:{child.label} for {intent.name}")
        if any(isinstance(c, TagNode) for c in child.children):
            reasons.append(f"slot SL:{child.label} contains a bracket: slots hold plain text")
        if not child.text().strip(_TRAILING_PUNCT):
            reasons.append(f"slot SL:{child.label} is empty")
    return reasons


# -- conversion -----------------------------------------------------------------------------
def tags_to_triples(tree: TagTree, catalogue: Catalogue) -> list[SlotFill]:
    """(function, slot, value) per slot, in order; intents without slots give one (function, None) entry."""
    out: list[SlotFill] = []
    _collect(tree.children, None, catalogue, out)
    return out


def _collect(children: list[TagNode | str], intent: Function | None, catalogue: Catalogue, out: list[SlotFill]) -> None:
    for child in children:
        if isinstance(child, str):
            continue
        if child.kind == "IN":
            function = function_for_intent(child.label, catalogue)
            before = len(out)
            _collect(child.children, function, catalogue, out)
            own = [f for f in out[before:] if function is not None and f.function == function.name]
            if function is not None and not own:
                out.insert(before, SlotFill(function=function.name, slot=None))
            continue
        if intent is None:
            continue
        argument = argument_for_slot(child.label, intent)
        if argument is not None:
            span = child.text().strip(_TRAILING_PUNCT)
            out.append(SlotFill(function=intent.name, slot=argument, value=slot_value(span, intent.properties[argument]), span=span))


def slot_value(span: str, spec: dict[str, Any]) -> Any:
    """A span as the argument's value: booleans become True unless a negation says the flag is off ("no
    shuffle"), enum spans snap to the enum's spelling."""
    if spec.get("type") == "boolean":
        return not NEGATION.search(span)  # a tagged boolean slot names the flag ("serves alcohol", "no shuffle")
    for option in spec.get("enum") or []:
        if str(option).lower() == span.lower():
            return option
    for option in spec.get("enum") or []:
        if str(option).lower() in span.lower() or span.lower() in str(option).lower():
            return option
    return span


def tags_to_calls(tree: TagTree, catalogue: Catalogue) -> list[Call]:
    """One call per intent with its slots; a slot given two values in one intent gives one call per value."""
    calls: list[Call] = []
    by_function: dict[str, list[SlotFill]] = {}
    for fill in tags_to_triples(tree, catalogue):
        by_function.setdefault(fill.function, []).append(fill)
    for function, fills in by_function.items():
        values: dict[str, list[Any]] = {}
        for fill in fills:
            if fill.slot is not None and fill.value not in values.setdefault(fill.slot, []):
                values[fill.slot].append(fill.value)
        count = max((len(v) for v in values.values()), default=1)
        # Repeated slots vary per call; single-valued slots are shared by all of them.
        calls += [Call(name=function, arguments={s: v[min(i, len(v) - 1)] for s, v in values.items()}) for i in range(count)]
    return calls


# -- span-built tags (the constrained tagger) -----------------------------------------------
# A small model cannot copy an instruction word for word while inserting brackets, so the constrained tagger
# only picks labels and spans (grammar-constrained to the instruction's own n-grams) and the tag string is
# built here, deterministically, in the gold format: `[IN:X ... [SL:Y span ]. ]`.
_SPAN_EDGE = ".,;:!?\"'()[]{}"
MAX_SPAN_WORDS = 6


class SpanTags(BaseModel):
    """The tag string built from chosen spans, and what had to be left out (with why)."""

    tagged: str
    dropped: list[str] = Field(default_factory=list)


def instruction_spans(instruction: str, max_words: int = MAX_SPAN_WORDS) -> dict[str, list[tuple[int, int]]]:
    """Every contiguous run of 1..max_words words, edge punctuation stripped ("Oakland." -> "Oakland",
    "Sydney, NSW," -> "Sydney, NSW"), mapped to its character offsets; insertion order = first appearance."""
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", instruction)]
    # A span never starts or ends at a bare symbol ("-", "&"): "- two" or "Salon &" are not values.
    has_word = [any(c.isalnum() for c in instruction[s:e]) for s, e in words]
    out: dict[str, list[tuple[int, int]]] = {}
    for i in range(len(words)):
        for j in range(i, min(len(words), i + max_words)):
            if not (has_word[i] and has_word[j]):
                continue
            start, end = _strip_edges(instruction, words[i][0], words[j][1])
            # A run must start and end inside its first and last word: "- two" or "two -" are not spans.
            if start >= end or start >= words[i][1] or end <= words[j][0]:
                continue
            if '"' in instruction[start:end] or "\\" in instruction[start:end]:
                continue  # llama.cpp rejects the grammar literal of an enum string holding a quote or backslash
            occurrences = out.setdefault(instruction[start:end], [])
            if (start, end) not in occurrences:
                occurrences.append((start, end))
    return out


def _strip_edges(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start] in _SPAN_EDGE:
        start += 1
    while end > start and text[end - 1] in _SPAN_EDGE:
        end -= 1
    if text[end:end + 1] == "." and INITIALISM_END.search(text[start:end]):
        end += 1  # "Sandra Makela, M.D." at the instruction's end: the stop is the initialism's
    return start, end


def _overlaps(span: tuple[int, int], placed: list[tuple[int, int, str]]) -> bool:
    return any(span[0] < e and s < span[1] for s, e, _ in placed)


def build_span_tags(instruction: str, intent: str, slots: list[tuple[str, str]], also: list[str] = (),
                    max_words: int = MAX_SPAN_WORDS) -> SpanTags:
    """`[IN:INTENT ... ]` around the whole instruction with `[SL:SLOT span ]` inserted at each chosen span
    and `[IN:OTHER word ]` at the mention of each further intent. A value that is not a span of the
    instruction raises ParseError; duplicates and spans overlapping an earlier one are dropped and listed."""
    spans = instruction_spans(instruction, max_words)
    placed: list[tuple[int, int, str]] = []  # (start, end, opening bracket)
    dropped: list[str] = []
    seen: set[tuple[str, str]] = set()
    for slot, value in slots:
        if value not in spans:
            raise ParseError(f"slot {slot} value {value!r} is not a span of the instruction: pick words from it")
        if (slot, value) in seen:
            dropped.append(f"duplicate {slot}={value!r}")
            continue
        seen.add((slot, value))
        free = next((o for o in spans[value] if not _overlaps(o, placed)), None)
        if free is None:
            dropped.append(f"{slot}={value!r} overlaps an earlier span")
            continue
        placed.append((*free, f"[SL:{slot} "))
    for other in dict.fromkeys(a for a in also if a != intent):
        mention = _mention(instruction, other, placed)
        if mention is None:
            dropped.append(f"IN:{other}: no free word to mark")
            continue
        placed.append((*mention, f"[IN:{other} "))
    body, cursor = [], 0
    for start, end, opening in sorted(placed):
        body += [instruction[cursor:start], opening, instruction[start:end], " ]"]
        cursor = end
    body.append(instruction[cursor:])
    return SpanTags(tagged=f"[IN:{intent} {''.join(body).strip()} ]", dropped=dropped)


def _mention(instruction: str, intent: str, placed: list[tuple[int, int, str]]) -> tuple[int, int] | None:
    """The last free word naming the intent's API ("Hotels" for GET_HOTELS, "HouseStay" for GET_HOUSE_STAYS,
    "Rides" for FIND_RIDES: the leading verb of an API name is dropped), else the last free word: a further
    intent needs some words to bracket."""
    words = intent.split("_")
    noun = _fold("".join(words[1:] if len(words) > 1 and words[0].lower() in NAME_VERBS else words))
    words = [_strip_edges(instruction, m.start(), m.end()) for m in re.finditer(r"\S+", instruction)]
    free = [w for w in words if w[0] < w[1] and not _overlaps(w, placed)]

    def names_api(word: tuple[int, int]) -> bool:
        folded = _fold(instruction[word[0]:word[1]])
        return len(folded) >= 3 and (folded == noun or noun.startswith(folded) or folded.startswith(noun))

    named = [w for w in free if names_api(w)]
    return (named or free or [None])[-1]


def tags_to_span_choice(tagged: str, catalogue: Catalogue) -> dict[str, Any] | None:
    """A gold tag string as the constrained tagger's JSON answer (for few-shot demonstrations):
    {"intent", "slots": [{"slot", "value"}], "with"}; the intent owning most slots is the main one.
    None when unparsable or no intent maps to the catalogue."""
    try:
        tree = parse_tags(re.sub(r"\[(IN|SL):\s+", r"[\1:", tagged))  # TAPS gold has a few `[SL: CITY`
    except ParseError:
        return None
    owned: list[tuple[Function, list[tuple[str, str]]]] = []
    _own(tree.children, None, catalogue, owned)
    if not owned:
        return None
    main = max(owned, key=lambda pair: len(pair[1]))  # max keeps the first of equals: the outermost intent
    also = [intent_label(f.name) for f, _ in owned if f.name != main[0].name]
    return {"intent": intent_label(main[0].name),
            "slots": [{"slot": s, "value": v} for s, v in dict.fromkeys(main[1])],
            "with": list(dict.fromkeys(also))}


def _own(children: list[TagNode | str], current: list[tuple[str, str]] | None, catalogue: Catalogue,
         owned: list[tuple[Function, list[tuple[str, str]]]]) -> None:
    for child in children:
        if isinstance(child, str):
            continue
        if child.kind == "IN":
            function = function_for_intent(child.label, catalogue)
            if function is None:
                _own(child.children, None, catalogue, owned)
                continue
            entry = next((e for e in owned if e[0].name == function.name), None)
            if entry is None:
                entry = (function, [])
                owned.append(entry)
            _own(child.children, entry[1], catalogue, owned)
            continue
        function = next((f for f, slots in owned if slots is current), None)
        argument = argument_for_slot(child.label, function) if function is not None else None
        value = child.text().strip(_TRAILING_PUNCT)
        if argument is not None and value and current is not None:
            current.append((slot_label(argument), value))
