"""Structural evidence that a candidate span is the value of an argument, without the language model.

Each (argument, candidate) pair gets a feature vector; a logistic model (weights in data/grounding.json, fitted
by `prefcall fit --structure` on the tuning split) turns it into a log-odds. The features:
- cue: the argument's own name words right before the span ("my preferred city is X") or right after it
  ("X as my city"), with only connective words between; 1 / (1 + words between); 0.5 for "my preferred <name
  words> ... is X" in one sentence. Words that also name the function count only in that last form;
- memory: the nearest value of the same argument among the demonstrations the caller may read (cosine of
  sentence embeddings) and whether the exact value was seen; a flag says whether any memory exists, so the
  model also learns what to do without it;
- description: cosine between the span and "argument words: description";
- format: date / time / number shape of the span against the argument's class (from its name, description and
  type), and a mismatch flag;
- shape: number of words, share of capitalised words, whether the span starts and ends at a chunk boundary or
  cuts a capitalised name, whether a joining word ("and", "of", "&") follows;
- domain: the span is only words of the function's name (it names the request's domain, not a value), or it is
  an enum value of another argument of the same function;
- source: user turn, standing instruction, earlier call, profile;
- determiner: the span opens with an article or a possessive ("the airport", "my office", "the Westside branch"),
  and whether the word after it is lowercase (a common noun phrase, whose article is part of how it is named);
- object: the span is what a word naming the request (a word of the function's name or description, not a verb
  any request opens with, "find", "get") acts on ("Refill my [allergy pills]", "Order two [pad thai]", "Add
  [oat milk] to ..."; never in a call a standing instruction chains to the request's), and whether the argument is
  required (the thing a request is about is an argument the call cannot go without): lowercase values that no
  capital or memory marks have a shape to go by.
Everything comes from the schema, the text and the demonstrations: no data set's vocabulary.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prefcall.engine.base import Embedder
from prefcall.retrieval.text import NUMBER_WORDS, normalise_word, split_identifier, stem, tokenize
from prefcall.schemas.model import Function

from prefcall.strategies.grounding.values import DETERMINERS, Candidate, clause_break, words

FEATURES = (
    "cue", "memory", "memory_sq", "memory_exact", "has_memory", "description", "context", "format", "format_mismatch",
    "n_words", "one_word", "capitals", "open_left", "close_right", "cuts_name", "joins_right", "domain_words",
    "other_enum", "sentence_initial", "from_user", "from_instruction", "from_call", "determiner", "determiner_common",
    "role", "object", "object_required",
)  # fmt: skip

CONNECTIVES = frozenset(
    """is are was be been to of the my a an as for at in on by with called named should must will would i'd
    i prefer preferred favourite favorite usually always go-to : = - which that it""".split())
JOINERS = frozenset({"and", "of", "&", "de", "la", "le", "vs", "vs.", "versus", "on", "at", "the"})
# Titles written with a full stop before a name ("Dr. Abazari Mina MD", "St. Louis"): the stop ends no sentence, and
# a span that ends on the title cuts the name it opens.
TITLES = frozenset({"Dr", "Mr", "Mrs", "Ms", "Mx", "Prof", "St", "Mt", "Ft", "Sr", "Jr", "Rev", "Capt", "Sgt", "Lt"})
MONTHS = ("january february march april may june july august september october november december "
          "jan feb mar apr jun jul aug sep sept oct nov dec").split()
DAYS = "monday tuesday wednesday thursday friday saturday sunday today tomorrow tonight weekend".split()
_DATE_RE = re.compile(r"\b(" + "|".join(MONTHS + DAYS) + r"|\d{1,2}(st|nd|rd|th)|\d{4}-\d{2}-\d{2}|"
                      r"\d{1,2}/\d{1,2}(/\d{2,4})?|next week|this week|next month)\b", re.I)
_TIME_RE = re.compile(r"\b(\d{1,2}(:\d{2})?\s*(am|pm|a\.m\.|p\.m\.)|\d{1,2}:\d{2}|o'?clock|noon|midnight|"
                      r"morning|afternoon|evening|night)\b", re.I)
_NUMBER_RE = re.compile(r"^\$?\d+(\.\d+)?%?$|^(one|two|three|four|five|six|seven|eight|nine|ten)$", re.I)
_DATE_ARG = re.compile(r"\b(date|day|dates|birthday|deadline)\b")
_TIME_ARG = re.compile(r"\b(time|hour)\b")
_NUMBER_ARG = re.compile(r"\b(number|count|size|amount|price|cost|rating|stars?|passengers|adults|children|"
                         r"rooms|beds|baths|tickets|seats|people|guests|stops|quantity|age|year|percent)\b")


def argument_words(name: str, schema: dict[str, Any]) -> str:
    """'pickup_city' -> 'pickup city', plus the description when there is one."""
    text = split_identifier(name).lower()
    description = str(schema.get("description") or "").strip()
    return f"{text}: {description}" if description else text


def argument_class(name: str, schema: dict[str, Any]) -> str:
    text = split_identifier(name).lower() + " " + str(schema.get("description") or "").lower()
    if schema.get("type") in ("integer", "number"):
        return "number"
    # A `format` says what the value is; only without one do the words decide ("time": "Time of day" is no date).
    if schema.get("format") in ("date", "date-time"):
        return "date"
    if schema.get("format") == "time":
        return "time"
    if _DATE_ARG.search(text):
        return "date"
    if _TIME_ARG.search(text):
        return "time"
    if _NUMBER_ARG.search(text):
        return "number"
    return "text"


def value_class(text: str) -> str:
    if _TIME_RE.search(text):
        return "time"
    if _DATE_RE.search(text):
        return "date"
    if _NUMBER_RE.match(text.strip()):
        return "number"
    return "text"


def value_classes(text: str) -> set[str]:
    """Every class the text's shape fits: a time on its date ("Saturday morning", "8:30 tomorrow") is a time and a
    date, and fits an argument of either."""
    found = {k for k, pattern in (("time", _TIME_RE), ("date", _DATE_RE)) if pattern.search(text)}
    return found or {value_class(text)}


def normal(text: Any) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", str(text).lower()))


# ---------------------------------------------------------------------------- value memory
@dataclass
class ValueMemory:
    """Values each argument took in demonstrations: {(function, argument): [(value, demo id)]}."""

    values: dict[tuple[str, str], list[tuple[str, str]]] = field(default_factory=dict)
    _vectors: dict[tuple[str, str], tuple[int, list[str], np.ndarray]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, function: str, argument: str, value: Any, demo_id: str) -> None:
        if isinstance(value, bool) or value is None or isinstance(value, (dict, list)):
            return
        self.values.setdefault((function, argument), []).append((str(value), demo_id))
        self._vectors.pop((function, argument), None)

    def has(self, function: str, argument: str, exclude: frozenset[str] = frozenset()) -> bool:
        return any(d not in exclude for _, d in self.values.get((function, argument), ()))

    def vectors(self, function: str, argument: str, embedder: Embedder) -> tuple[list[str], list[str], np.ndarray]:
        """(values, demo ids, unit vectors), one row per stored value; each distinct value is embedded once."""
        key = (function, argument)
        entries = self.values.get(key, [])
        with self._lock:
            cached = self._vectors.get(key)
        if cached is None or cached[0] != len(entries):
            unique = list(dict.fromkeys(v for v, _ in entries))
            matrix = np.asarray(embedder.embed(unique), dtype=np.float32) if unique else np.zeros((0, 1), np.float32)
            cached = (len(entries), unique, matrix)
            with self._lock:
                self._vectors[key] = cached
        _, unique, matrix = cached
        index = {t: i for i, t in enumerate(unique)}
        return [v for v, _ in entries], [d for _, d in entries], matrix[[index[v] for v, _ in entries]]


# ---------------------------------------------------------------------------- features
# Words that open a noun phrase naming what a preference is about: "my preferred city ... is X".
OWNERS = frozenset("my your our preferred usual favourite favorite go-to desired default regular".split())
COPULAS = frozenset({"is", "are", "=", ":", "be"})
_ARTICLES = frozenset({"a", "an", "the"})
# Capitalised words a number may precede without being part of a name: calendar and clock words ("5 March", "7 PM").
_NOT_NAMES = frozenset([*MONTHS, *DAYS, "am", "pm", "a.m", "p.m"])  # read with its edge stops stripped


def _cue(candidate: Candidate, name_words: set[str], function_words: frozenset[str] = frozenset()) -> float:
    """Argument name words just before the span (over connectives) or just after it; and "my preferred <name
    words> <anything in the sentence> is <span>" ("My preferred city for a Dentist is Napa": the city). Words
    that also name the function (doctor in GetDoctors' doctor_name) are a cue only in that second form: "a Dentist
    is Napa" is about the request, not the dentist's name. A clause break (a comma, a full stop) between the words
    and the span ends the cue: in "If you're after Izakaya cuisine, Meiko Sushi is a good restaurant", "cuisine"
    heads the phrase before the comma and says nothing of "Meiko Sushi"."""
    if candidate.source is None or candidate.start < 0:
        return 0.0
    text = candidate.source.text
    tokens = [(w.lower(), s, e) for w, s, e in words(text)]
    first = next((i for i, t in enumerate(tokens) if t[1] >= candidate.start), None)
    last = max((i for i, t in enumerate(tokens) if t[2] <= candidate.end), default=None)
    if first is None or last is None:
        return 0.0
    own = name_words - function_words or name_words
    best, between = 0.0, 0
    for i in range(first - 1, max(-1, first - 8), -1):
        word = tokens[i][0]
        if clause_break(text, tokens[i], tokens[i + 1][1]):
            break
        if word in own:
            best = max(best, 1.0 / (1 + between))
            continue
        if word not in CONNECTIVES and not word.startswith("prefer"):
            break
        between += 1
    best = max(best, _owned_cue(candidate.source.text, tokens, first, name_words))
    between = 0
    if tokens[last][0].endswith(("'s", "’s")):
        return best  # "the restaurant's name": the name after a possessive is the possessor's, not the span's
    for i in range(last + 1, min(len(tokens), last + 6)):
        word = tokens[i][0]
        if clause_break(text, tokens[i - 1], tokens[i][1]):
            break
        if word in own:
            return max(best, 0.8 / (1 + between))
        if word not in CONNECTIVES:
            break
        between += 1
    return best


# What a request is for, said as a clause after the verb that names the function ("Remind me to call my mother",
# "a reminder to water the plants", "note that the gate code changed"): a content argument takes that clause. An
# argument is one where its name or description says it holds the request's content, or its description asks what.
CONTENT_WORDS = frozenset({"text", "message", "content", "body", "note", "memo", "task"})
_CONTENT_ASKS = re.compile(r"^\s*what\b", re.I)
_PERSONS = frozenset({"me", "us", "him", "her", "them", "you"})
_CLAUSE_OPENERS = frozenset({"to", "that", "about", "saying", ":"})


def content_argument(argument: str, schema: dict[str, Any]) -> bool:
    """Does `argument` hold what the request is for (a reminder's text, a message's body)?"""
    if argument_class(argument, schema) != "text" or schema.get("enum"):
        return False
    description = str(schema.get("description") or "")
    named = set(split_identifier(argument).lower().split()) | set(tokenize(description))
    return bool(named & CONTENT_WORDS) or bool(_CONTENT_ASKS.search(description))


def _content_cue(candidate: Candidate, verbs: set[str]) -> float:
    """1.0 for a span that opens the clause after a word naming the request ("remind", "reminder" of SetReminder:
    `verbs` holds their stems, retrieval.text.stem), over a person ("me") and an opener ("to", "that"): "Remind me
    to [call my mother]". A span that stops right before what its clause acts on (a determiner, an article or a
    person next: "Add a task to [call] the landlord") has not said what the request is for: no cue."""
    if candidate.source is None or candidate.start < 0 or not verbs:
        return 0.0
    tokens = [w.lower() for w, s, _ in words(candidate.source.text[:candidate.start])]
    if not tokens or tokens[-1] not in _CLAUSE_OPENERS:
        return 0.0
    rest = candidate.source.text[candidate.end:]
    after = words(rest)
    if after and after[0][0].lower() in _CLAUSE_GOES_ON and not any(m in rest[:after[0][1]] for m in ",.;:!?"):
        return 0.0
    i = len(tokens) - 2
    while i >= 0 and (tokens[i] in _PERSONS or tokens[i] in _ARTICLES):
        i -= 1
    return 1.0 if i >= 0 and len(tokens[i]) >= 4 and stem(normalise_word(tokens[i])) in verbs else 0.0


# Nouns that name an attribute whose value is the word before them ("the premium level" of level: premium; "economy
# class", "turbo mode"): English words for a kind or a degree, no catalogue's vocabulary. `_head_cue` leaves them.
ATTRIBUTE_NOUNS = frozenset("""type kind class level mode tier category size style grade color colour flavor flavour
    option plan speed priority quality format genre sort variety model version""".split())

# Nouns that name a label, whose value is the label itself ("Giants Vs Diamondbacks" of event_name): a phrase ending
# in one ("the right name", "a reference number") says that a value is wanted and is none. `_head_cue` leaves them.
LABEL_NOUNS = frozenset("name title number id code label".split())


_LINKS = CONNECTIVES | JOINERS  # words that link two phrases: no modifier of a head noun


def _head_cue(tokens: list[str], head: str) -> float:
    """1.0 for a lowercase phrase that ends in the argument's head noun (the last word of its name) after words that
    say which one ("the living room" of room, "the train station" of pickup_station): the noun is part of how a
    common thing is named, so the cue goes to the whole phrase, not to the word before the noun ("living").
    A name ("Union Square station"), a kind of something else ("checking account" of account_type: its head is
    "type"), the value of an attribute noun ("the premium level" of level: ATTRIBUTE_NOUNS) and a phrase that asks
    for a label ("the right name" of event_name: LABEL_NOUNS) are not such phrases, nor is one that runs over a
    connective ("vacuum in the living room")."""
    if len(tokens) < 2 or not head or normalise_word(tokens[-1].lower()) != head:
        return 0.0
    modifiers = tokens[1:-1] if tokens[0].lower() in _OPENS_OBJECT else tokens[:-1]
    if not modifiers or any(w[:1].isupper() or w.lower() in _LINKS or w[:1].isdigit()
                            for w in modifiers):
        return 0.0
    return 1.0


# The cue a span gets from the question its turn answers: "Which restaurant would you like?" / "Andes Cafe".
ASKED_CUE = 1.0


def _asked_cue(candidate: Candidate, name_words: set[str]) -> float:
    """ASKED_CUE for a span of a user turn whose preceding assistant question names the argument (a word of its
    name: "Which restaurant ...?" for restaurant_name, "What time?" for time); the answer to a question is what was
    asked for. 0 elsewhere."""
    if candidate.source is None or not candidate.source.asked:
        return 0.0
    return ASKED_CUE if _asked_words(candidate.source.asked) & name_words else 0.0


@functools.lru_cache(maxsize=256)
def _asked_words(questions: str) -> frozenset[str]:
    """The words of a turn's questions, read once for all its candidates; stop words dropped: "of" asks for no
    number_of_seats."""
    return frozenset(tokenize(questions))


def _owned_cue(text: str, tokens: list[tuple[str, int, int]], first: int, name_words: set[str],
               reach: int = 12) -> float:
    """0.5 when the span follows a copula ("is", ":") whose sentence, within `reach` words, opens with an owner
    word directly followed by the argument's name words ("my preferred restaurant name when I ask ... is 1760")."""
    i = first - 1
    while i >= 0 and tokens[i][0] in _ARTICLES:
        i -= 1
    if i < 0 or tokens[i][0] not in COPULAS:
        return 0.0
    for j in range(i - 1, max(-1, i - reach), -1):
        if any(mark in text[tokens[j][2]:tokens[j + 1][1]] for mark in ".;!?"):
            return 0.0  # another sentence
        if tokens[j][0] in OWNERS:
            k = j + 1
            while k < i and tokens[k][0] in OWNERS:
                k += 1
            if k < i and tokens[k][0] in name_words:
                return 0.5
    return 0.0


_OPENS_OBJECT = DETERMINERS | _ARTICLES
_CLAUSE_GOES_ON = _OPENS_OBJECT | _PERSONS  # a content clause stopped before one of these has more to say


# The prepositions that mark where a movement starts and where it ends, and the words that name those two roles
# in argument names (English, not one catalogue's wording): "from Seattle" is an origin's or a pickup's value, "to
# Victoria" a destination's or a drop-off's.
ROLE_PREPOSITIONS = {"from": "source", "to": "goal", "into": "goal", "towards": "goal", "toward": "goal"}
ROLE_WORDS = {
    "source": frozenset("origin source from departure depart departing pickup pick start starting leaving".split()),
    "goal": frozenset("destination to dropoff drop arrival arrive arriving target recipient".split()),
}


def argument_role(name: str) -> str | None:
    """"source" or "goal" for an argument whose name says which end of a movement it holds ("origin_city",
    "dropoff", "where_to"); None for others and for one that names both."""
    tokens = set(split_identifier(name).lower().split())
    roles = [role for role, names in ROLE_WORDS.items() if tokens & names]
    return roles[0] if len(roles) == 1 else None


def _role(candidate: Candidate, tokens: list[tuple[str, int, int]], own: str | None, others: set[str]) -> float:
    """+1 when the preposition before the span (over a determiner) marks the role the argument's name says, -1 when
    it marks a role that another argument of the function holds and this one does not; 0 otherwise."""
    before = [w.lower() for w, _, end in tokens if end <= candidate.start]
    if before and before[-1] in DETERMINERS:
        before = before[:-1]
    role = ROLE_PREPOSITIONS.get(before[-1]) if before else None
    if role is None:
        return 0.0
    if role == own:
        return 1.0
    return -1.0 if role in others else 0.0


def _shape(candidate: Candidate) -> dict[str, float]:
    if candidate.source is None or candidate.start < 0:
        return {"open_left": 1.0, "close_right": 1.0, "cuts_name": 0.0, "joins_right": 0.0}
    text = candidate.source.text
    left = text[:candidate.start].rstrip()
    right = text[candidate.end:].lstrip()
    lw = left.split()[-1] if left.split() else ""
    rw = right.split()[0] if right.split() else ""
    l_punct = not lw or lw[-1] in ",.;:!?\"(" or lw.lower() in CONNECTIVES
    r_punct = not rw or text[candidate.end:candidate.end + 1] in ",.;:!?\")" or rw[0] in ",.;:!?"
    last = candidate.text.split()[-1] if candidate.text.split() else ""
    if last in TITLES and right[:1] == "." and right[1:].lstrip()[:1].isupper() and right[1:2].isspace():
        rw, r_punct = right[1:].split()[0], False  # "Dr" of "Dr. Abazari": the name goes on after the title's stop
    capital = candidate.text[:1].isupper()
    before_left = left[: len(left) - len(lw)].rstrip()
    # "Find Italian ...": the first word of a sentence is capitalised as such, not as part of a name
    sentence_start = not before_left or before_left[-1] in ".!?:\n"
    l_cap = (bool(lw) and lw[0].isupper() and not (lw[-1] in ",.;:!?") and lw.lower() not in CONNECTIVES
             and not sentence_start)
    r_cap = bool(rw) and rw[0].isupper() and not r_punct
    # An ampersand between capitalised words is inside one name ("Baan Thai House & Wine Bar", "Chili's Grill &
    # Bar"): a span that stops at it, or starts after it, cuts the name.
    if lw == "&":
        before = before_left.split()
        l_cap = bool(before) and before[-1][:1].isupper() and before[-1][-1] not in ",.;:!?"
    if rw == "&":
        after = right[1:].split()
        r_cap = bool(after) and after[0][:1].isupper()
    # A determiner after the span opens the phrase it goes on with ("pay [the phone bill]", "call [my mother]"):
    # the span stops before its object, not at a boundary.
    close = r_punct or (rw.lower() in CONNECTIVES and rw.lower() not in _OPENS_OBJECT)
    # A number right before a capitalised word that is no calendar or clock word opens a name ("1512 Barber Shop",
    # "18/8 Fine Men's Salons"): the number alone cuts it, as a capitalised piece does.
    opens_name = last[:1].isdigit() and r_cap and rw.lower().strip(",.") not in _NOT_NAMES
    return {"open_left": float(l_punct), "close_right": float(close),
            "cuts_name": float(capital and (l_cap or r_cap) or opens_name),
            "joins_right": float(rw.lower().strip(",.") in JOINERS)}


# Verbs any request may open with, whatever its function: they name no function's request ("Find a place in
# Oakland where I can get [a glass of wine]" is no object of GetRestaurants), nor its domain.
GENERIC_VERBS = frozenset({"get", "find", "search", "book", "make", "check"})
_GENERIC_STEMS = frozenset(stem(v) for v in GENERIC_VERBS)


@dataclass
class FeatureContext:
    """Per-request state: the function, its argument texts and the memory to consult."""

    function: Function
    embedder: Embedder | None
    memory: ValueMemory | None = None
    exclude: frozenset[str] = frozenset()  # demonstration ids not to consult (the item itself in evaluation)
    sources_text: str = ""  # all source text, for evidence that is not about one span (booleans)
    # False for a call a standing instruction chains to the request's ("If I search flights, also look at hotels"):
    # the request's words name the other function, so nothing they act on is this call's value (`object`).
    named: bool = True
    _vectors: dict[str, np.ndarray] = field(default_factory=dict)  # per-request embedding cache

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of texts, each embedded once per request (arguments share candidates)."""
        assert self.embedder is not None
        missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if missing:
            for text, vector in zip(missing, np.asarray(self.embedder.embed(missing), dtype=np.float32)):
                self._vectors[text] = vector
        return np.stack([self._vectors[t] for t in texts])
    _domain: set[str] = field(default_factory=set)
    _enums: dict[str, set[str]] = field(default_factory=dict)
    _function_words: frozenset[str] = frozenset()

    def name_words(self, argument: str) -> tuple[set[str], frozenset[str]]:
        """The argument's name words (with and without a plural "s") and the function's own name words."""
        words_ = set(split_identifier(argument).lower().split())
        words_ |= {w + "s" for w in words_} | {w[:-1] for w in words_ if w.endswith("s")}
        return words_, self._function_words

    def cue(self, argument: str, candidate: Candidate) -> float:
        """The `cue` feature of one candidate as a value of `argument`."""
        return _cue(candidate, *self.name_words(argument))

    def another_options(self, argument: str, text: str) -> bool:
        """Is `text` one of the options another argument of the function enumerates ("Dermatologist" of a doctor's
        type, not a doctor's name)?"""
        return any(normal(text) in values for a, values in self._enums.items() if a != argument)

    def request_stems(self) -> frozenset[str]:
        """Stems of the words that name the request: the function's name and description words; none for a call
        the request does not name (`named`)."""
        return self._request if self.named else frozenset()

    def __post_init__(self) -> None:
        self._request = frozenset(stem(w) for w in tokenize(f"{split_identifier(self.function.name)} "
                                                           f"{self.function.description or ''}"))
        self._domain = set(tokenize(self.function.name)) - GENERIC_VERBS
        self._function_words = frozenset(self._domain | {w + "s" for w in self._domain})
        self._enums = {a: {normal(v) for v in s.get("enum") or [] if v is not None}
                       for a, s in self.function.properties.items()}


def features(ctx: FeatureContext, argument: str, schema: dict[str, Any],
             candidates: Sequence[Candidate]) -> np.ndarray:
    """One row of FEATURES per candidate (grounded spans; other candidates get source-free defaults)."""
    if not candidates:
        return np.zeros((0, len(FEATURES)), dtype=np.float32)
    name_words, function_words = ctx.name_words(argument)
    klass = argument_class(argument, schema)
    texts = [c.text or str(c.value) for c in candidates]
    description = context = memory = None
    has_memory = 0.0
    memory_exact = [0.0] * len(candidates)
    if ctx.embedder is not None:
        contexts = [_left_context(c) + t for c, t in zip(candidates, texts)]
        vectors = ctx.embed([argument_words(argument, schema), *texts, *contexts])
        arg_vec, cand_vecs, ctx_vecs = vectors[0], vectors[1:1 + len(texts)], vectors[1 + len(texts):]
        description, context = cand_vecs @ arg_vec, ctx_vecs @ arg_vec
        if ctx.memory is not None and ctx.memory.has(ctx.function.name, argument, ctx.exclude):
            values, ids, matrix = ctx.memory.vectors(ctx.function.name, argument, ctx.embedder)
            keep = [i for i, d in enumerate(ids) if d not in ctx.exclude]
            if keep:
                has_memory = 1.0
                sims = cand_vecs @ matrix[keep].T
                memory = sims.max(axis=1)
                seen = {normal(values[i]) for i in keep}
                memory_exact = [float(normal(t) in seen) for t in texts]
    # a content argument's clause follows a word of the function's name or of the argument's description
    verbs = {stem(w) for w in (set(tokenize(ctx.function.name)) | set(tokenize(str(schema.get("description") or "")))
                               - CONTENT_WORDS)} if content_argument(argument, schema) else set()
    own_role = argument_role(argument)
    # the head noun of the argument's name ("room" of room, "station" of pickup_station), unless the function's
    # name holds it (the thing the request is about: "the hotel" of BookHotel's hotel is no value)
    head = normalise_word((split_identifier(argument).lower().split() or [""])[-1])
    head = "" if head in function_words or head in ATTRIBUTE_NOUNS or head in LABEL_NOUNS else head
    required = argument in ctx.function.required
    request = ctx.request_stems()
    # a flag holds no end of a movement: "from Kyoto House" is no role of OrderTakeout's pickup (true or false)
    other_roles = {r for a, sch in ctx.function.properties.items()
                   if a != argument and sch.get("type") != "boolean" and (r := argument_role(a))} - {own_role}
    source_words: dict[int, list[tuple[str, int, int]]] = {}
    rows = []
    for i, (c, t) in enumerate(zip(candidates, texts)):
        # an ampersand joins the words of a name and is none of them: "Baan Thai House & Wine Bar" has five words,
        # all capitalised (a dash stays a word: it as often separates a label from its value, "Books - always X")
        tokens = [w for w, _, _ in words(t) if w != "&"]
        if c.source is not None and c.start >= 0 and id(c.source) not in source_words:
            source_words[id(c.source)] = words(c.source.text)
        role = 0.0 if c.source is None or c.start < 0 else _role(c, source_words[id(c.source)], own_role, other_roles)
        n = max(1, len(tokens))
        classes = value_classes(t)
        kind = c.source.kind if c.source is not None else ""
        m = float(memory[i]) if memory is not None else 0.0
        row = {
            "cue": max(_cue(c, name_words, function_words), _asked_cue(c, name_words), _content_cue(c, verbs),
                       _head_cue(tokens, head) if klass == "text" and c.source is not None else 0.0),
            "memory": m, "memory_sq": m * m, "memory_exact": memory_exact[i], "has_memory": has_memory,
            "description": float(description[i]) if description is not None else 0.0,
            "context": float(context[i]) if context is not None else 0.0,
            "format": float(klass != "text" and klass in classes),
            "format_mismatch": float("text" not in classes and klass not in classes),
            "n_words": float(n), "one_word": float(n == 1),
            "capitals": sum(w[:1].isupper() for w in tokens) / n,
            **_shape(c),
            "domain_words": float(bool(tokens) and set(tokenize(t)) <= ctx._domain and bool(ctx._domain)),
            "other_enum": float(ctx.another_options(argument, t)),
            "sentence_initial": _sentence_initial(c),
            "from_user": float(kind == "user"), "from_instruction": float(kind in ("instruction", "profile")),
            "from_call": float(kind == "call"),
            **_determiner(tokens),
            "role": role,
            **_request_object(c, source_words.get(id(c.source)), request, required),
        }
        rows.append([row[f] for f in FEATURES])
    return np.asarray(rows, dtype=np.float32)


# Words between a request word and what it acts on: articles, possessives, counts, the person it is for, "of".
_OBJECT_GAP = DETERMINERS | _ARTICLES | frozenset({"me", "us", "some", "any", "of", "another"})
# Words after which a request word stands where a verb does: "Please order ...", "I want to order ...", "Can you
# order ...", "... and order ...".
_BEFORE_VERB = frozenset({"please", "to", "you", "and", "then", "also", "just"})


def _is_gap(word: str) -> bool:
    return word in _OBJECT_GAP or word in NUMBER_WORDS or word.replace(",", "").isdigit()


def _request_object(candidate: Candidate, tokens: list[tuple[str, int, int]] | None, request: frozenset[str],
                    required: bool) -> dict[str, float]:
    """`object`: the span is what a word naming the request acts on: the words before it end in such a word, over
    `_OBJECT_GAP` words ("Refill my [allergy pills]", "Order two [pad thai]") or directly where the word stands as
    a verb, first in its sentence or after `_BEFORE_VERB` ("Add [oat milk] to ..."); a word that only modifies the
    next one ("a parking [space]") acts on nothing, nor does a verb any request opens with (GENERIC_VERBS: "get
    [a glass of wine]" of GetRestaurants). `object_required`: the same for a required argument. A span holding a
    request word itself (GENERIC_VERBS too: "Reserve a [book]" of ReserveBook) is the request's own name, never
    what it acts on."""
    none = {"object": 0.0, "object_required": 0.0}
    if candidate.source is None or candidate.start < 0 or not tokens or not request:
        return none
    inside = [w.lower() for w, s, e in tokens if s >= candidate.start and e <= candidate.end]
    if not inside or any(stem(normalise_word(w)) in request for w in inside if not _is_gap(w)):
        return none
    text = candidate.source.text
    before = [(w.lower(), s, e) for w, s, e in tokens if e <= candidate.start]
    i = len(before) - 1
    while i >= 0 and _is_gap(before[i][0]):
        i -= 1
    if i < 0 or len(before) - 1 - i > 3 or any(m in text[before[i][2]:candidate.start] for m in ",.;:!?"):
        return none
    acting = stem(normalise_word(before[i][0]))
    if acting not in request or acting in _GENERIC_STEMS:
        return none
    verb = i == 0 or any(m in text[before[i - 1][2]:before[i][1]] for m in ",.;:!?") or before[i - 1][0] in _BEFORE_VERB
    acts = verb or i < len(before) - 1
    return {"object": float(acts), "object_required": float(acts and required)}


def _determiner(tokens: list[str]) -> dict[str, float]:
    opens = len(tokens) > 1 and tokens[0].lower() in DETERMINERS
    return {"determiner": float(opens), "determiner_common": float(opens and tokens[1][:1].islower())}


def _sentence_initial(candidate: Candidate) -> float:
    """The span starts a sentence: its capital letter may be only the sentence's."""
    if candidate.source is None or candidate.start < 0:
        return 0.0
    before = candidate.source.text[:candidate.start].rstrip()
    return float(not before or before[-1] in ".!?:\n")


def _left_context(candidate: Candidate, n_words: int = 3) -> str:
    if candidate.source is None or candidate.start < 0:
        return ""
    before = candidate.source.text[:candidate.start].split()[-n_words:]
    return (" ".join(before) + " ") if before else ""


# ---------------------------------------------------------------------------- the logistic model
@dataclass(frozen=True)
class Weights:
    """Standardised logistic weights over FEATURES: logit = ((x - mean) / scale) . weights + bias."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float

    def logits(self, rows: np.ndarray) -> np.ndarray:
        if len(rows) == 0:
            return np.zeros(0, dtype=np.float32)
        z = (rows - np.asarray(self.mean, np.float32)) / np.asarray(self.scale, np.float32)
        return z @ np.asarray(self.weights, np.float32) + np.float32(self.bias)


def fit_logistic(rows: np.ndarray, labels: np.ndarray, *, l2: float = 1e-2, iterations: int = 4000,
                 step: float = 0.5) -> Weights:
    """Plain gradient-descent logistic regression with positives up-weighted (few spans are values)."""
    mean = rows.mean(axis=0)
    scale = rows.std(axis=0) + 1e-6
    z = (rows - mean) / scale
    w = np.zeros(z.shape[1])
    b = 0.0
    positives = max(1.0, float(labels.sum()))
    weight = np.where(labels == 1, math.sqrt((len(labels) - positives) / positives), 1.0)
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(z @ w + b)))
        g = (p - labels) * weight
        w -= step * (z.T @ g / len(labels) + l2 * w)
        b -= step * float(g.mean())
    return Weights(tuple(map(float, mean)), tuple(map(float, scale)), tuple(map(float, w)), float(b))
