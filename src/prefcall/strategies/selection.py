"""Standing-instruction selection (NLSI's "selection" subtask): which of a user's instructions apply here.

Steps, each a small function:
1. `DomainModel`: per catalogue function, the words that name its domain (from the function name and
   description), its parameter phrases and its enum values, each weighted by how few functions share it.
2. Domains of the dialogue: lexical evidence from the user's turns plus (with an embedder) cosine
   similarity between the dialogue and each function's "name: description" text.
3. Domain of each instruction: the same evidence on the instruction ("If I ask for Restaurants ..."),
   falling back to cosine similarity when no word names a domain.
4. Conditions: "If cuisine is Cantonese then ..." applies only when its condition's value words
   ("cantonese") occur in the dialogue or in an instruction already selected - this is also how chains
   work ("If I ask for Travel, then also look at Hotels" adds the Hotels domain when selected).
5. Overrides: an instruction whose value the user has just replaced (instruction: city Santa Clara;
   user: "restaurants in Sunnyvale") does not apply. Detected for locations ("in/around/near X"),
   enum values of the same parameter, and explicit "<parameter> is X" phrases.
6. Ranking: domain + condition decide membership; hybrid BM25 + embedding relevance orders within it.

No rule names a data set's domain: all domain vocabulary comes from the catalogue.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel

from prefcall.engine.base import Embedder
from prefcall.retrieval.hybrid import HybridIndex
from prefcall.retrieval.text import (
    NAME_VERBS,
    PROPER_NAME,
    RELATION_WORDS,
    STOP_WORDS,
    misspelt,
    normalise_word,
    split_identifier,
    stem,
    tokenize,
)
from prefcall.schemas.model import Catalogue, Turn, as_dialogue

# Words of request phrasing that a condition clause can contain without naming a value; a misspelling of one
# (one edit, 8 letters or more: "preferance") counts as the word (`generic`).
GENERIC_WORDS = frozenset(
    """ask asking look looking want wanting request requesting need needing prefer preferred preference
    go going come comes search searching seek seeking make making get getting one something
    place like would i'm im it's you're usually always favorite favourite choice type kind sure go-to
    check try trying find finding book booking option also then after called named about mood food""".split()
)
LOCATION_WORDS = frozenset({"city", "location", "area", "where", "origin", "destination"})
_COND_START_RE = re.compile(r"^\s*(?:if|when|whenever)\b(?P<cond>.+?)(?:,|\bthen\b)(?P<rest>.+)$", re.I | re.S)
_COND_TAIL_RE = re.compile(r"^(?P<rest>.+?)\b(?:if|when|whenever)\b(?P<cond>.+)$", re.I | re.S)
# A request verb before a domain word makes a clause a domain condition ("if I ask for Events").
_REQUEST_RE = re.compile(
    r"\b(?:ask|asking|request|requesting|look|looking|search|searching|want|need|get|getting|make|making|"
    r"inquir\w*|seek\w*|book\w*|find\w*|visit\w*|go|going|comes?)\b", re.I)
ALSO_RE = re.compile(r"\b(?:also|too|as well)\b", re.I)
_PLACE_RE = re.compile(r"\b(?:in|around|near)\s+(?:the\s+)?([A-Z][\w.'-]*(?:[ ,]+[A-Z][\w.'-]*)*)")
_CONNECTORS = r"(?:is|as|=|should be|to be|must be|called|named)"
# A proper name after a sentence's first word ("check out Baan Thai House & Wine Bar", "the Kabul Guest House").
_PROPER_NAME_RE = re.compile(r"(?<=\w )" + PROPER_NAME)
_NEXT_LOWER = re.compile(r" +([a-z][a-z'-]*)")  # the lowercase word right after a capitalised run, a space between
# One capitalised word with an English suffix of nationality adjectives: Brazilian, Japanese, Spanish, Korean, Mexican.
_NATIONALITY = re.compile(r"[A-Z][a-z]+(?:ian|ese|ish|ean|ican)")


@lru_cache(maxsize=4096)
def generic(word: str) -> bool:
    """A word of request phrasing (GENERIC_WORDS), or a misspelling of one."""
    return word in GENERIC_WORDS or misspelt(word, GENERIC_WORDS)


# ---------------------------------------------------------------------------- results
class ScoredInstruction(BaseModel):
    index: int  # position in the instruction list given
    text: str
    score: float  # higher = more applicable; selected ones have score >= threshold
    domains: list[str]  # catalogue functions the instruction is about
    domain_match: bool
    condition: str | None = None  # value words a conditional instruction needs
    condition_met: bool = True
    overridden_by: str | None = None  # what in the dialogue replaces this instruction's value
    via: str = "direct"  # "direct" | "chain" (selected because a selected instruction satisfied it)
    bm25: float = 0.0
    dense: float | None = None


class SelectionResult(BaseModel):
    selected: list[ScoredInstruction]
    ranking: list[ScoredInstruction]  # every instruction, best first
    dialogue_domains: list[str]

    @property
    def selected_texts(self) -> list[str]:
        return [s.text for s in self.selected]


@dataclass
class SelectionConfig:
    threshold: float = 1.0  # domain match (1) with its condition met; overrides subtract
    domain_margin: float = 0.08  # other functions within this cosine of the best also count as the dialogue's
    min_instruction_cosine: float = 0.25  # weakest cosine that still assigns an instruction a domain
    relevance_weight: float = 0.2  # share of the hybrid relevance in the ranking score
    use_overrides: bool = True
    use_chains: bool = True


# ---------------------------------------------------------------------------- domain vocabulary
@dataclass
class DomainModel:
    names: list[str]
    name_words: dict[str, set[str]]
    description_words: dict[str, set[str]]
    param_phrases: dict[str, dict[tuple[str, ...], str]]  # function -> phrase tokens -> parameter
    # function -> value tokens -> the parameters having that value (account_type and recipient_account_type share
    # "checking")
    enum_values: dict[str, dict[tuple[str, ...], tuple[str, ...]]]
    texts: list[str]
    weight: dict[Any, float] = field(default_factory=dict)  # word or phrase -> 1 / number of functions having it
    # The content words of the flags' names ("unisex" of is_unisex, "alcohol" of serves_alcohol): a condition that
    # names one ("if you want a unisex style") conditions on the flag's value, not on the request's domain.
    flag_words: set[str] = field(default_factory=set)

    @classmethod
    def build(cls, catalogue: Catalogue) -> DomainModel:
        names, name_words, desc_words, params, enums, texts = [], {}, {}, {}, {}, []
        flags: set[str] = set()
        for f in catalogue.functions:
            names.append(f.name)
            name_words[f.name] = {w for w in tokenize(f.name) if w not in NAME_VERBS}
            desc_words[f.name] = {w for w in tokenize(f.description) if not generic(w)}
            params[f.name] = {tuple(tokenize(p, drop_stop_words=False)): p for p in f.properties}
            enums[f.name] = {}
            for p, schema in f.properties.items():
                if schema.get("type") == "boolean" or (schema.get("enum") and {
                        str(v).lower() for v in schema["enum"]} <= {"true", "false"}):
                    flags |= {w for w in tokenize(p) if w not in RELATION_WORDS and not generic(w)}
                for v in schema.get("enum", []):
                    if str(v).lower() not in ("true", "false"):
                        key = tuple(tokenize(str(v), drop_stop_words=False))
                        enums[f.name][key] = (*enums[f.name].get(key, ()), p)
            texts.append(f"{split_identifier(f.name)}: {f.description}")
        # Only a flag's own words: never a word of a function's name or description ("music" of has_live_music
        # also names GetMusic), which says which request it is.
        flags -= {w for n in names for w in name_words[n] | desc_words[n]}
        model = cls(names, name_words, desc_words, params, enums, texts, flag_words=flags)
        counts: dict[Any, int] = {}
        for n in names:
            keys = name_words[n] | desc_words[n] | set(params[n]) | set(enums[n])
            for key in keys:
                counts[key] = counts.get(key, 0) + 1
        model.weight = {k: 1.0 / v for k, v in counts.items()}
        return model

    @property
    def vocabulary(self) -> set[str]:
        words: set[str] = set()
        for n in self.names:
            words |= self.name_words[n] | self.description_words[n]
            for phrase in self.param_phrases[n]:
                words |= set(phrase)
        return words

    def named(self, tokens: Sequence[str]) -> dict[str, float]:
        """Functions whose name (or a description word unique enough) occurs in the text."""
        present = _present(tokens)
        scores = {}
        for n in self.names:
            name, description = self._words_of(n, present)
            score = 3.0 * name + description
            if score >= 1.0:
                scores[n] = score
        return scores

    def first_named(self, names: Collection[str], tokens: Sequence[str]) -> list[str]:
        """Of `names`, the ones a word of their own name names first in the text (several when one word names
        them all): the request's object comes first ("looking for a restaurant that won't break the bank" is
        about restaurants, not banks). Empty when no name word occurs."""
        stems = [stem(t) for t in tokens]

        def first(n: str) -> int:
            own = {stem(w) for w in self.name_words.get(n, ())}
            return next((i for i, s in enumerate(stems) if s in own), len(stems))

        positions = {n: first(n) for n in names}
        earliest = min(positions.values(), default=len(stems))
        return [n for n in names if positions[n] == earliest < len(stems)]

    def chain_targets(self, tokens: Sequence[str], sources: Collection[str]) -> list[str]:
        """The functions a chain instruction's consequence names beside its own (`sources`): by a word of their
        name that is not a word of a source's name ("also check parking" names ReserveParking; in "Green Basket is
        also fine for grocery orders" the "orders" is OrderGroceries' own, not OrderFood's; "pickup in store"
        names no function, though a description mentions a store)."""
        own = {stem(w) for n in sources for w in self.name_words.get(n, ())}
        rest = [t for t in tokens if stem(t) not in own]
        present = _present(rest)
        return [n for n in self.named(rest) if n not in sources and self._words_of(n, present)[0] > 0]

    def _words_of(self, n: str, present: set[str]) -> tuple[float, float]:
        """(name words, description words that are not name words) of function n present (`_present`: the words
        and their stems), each weighted."""
        return (sum(self.weight[w] for w in self.name_words[n] if stem(w) in present),
                sum(self.weight[w] for w in self.description_words[n] - self.name_words[n] if stem(w) in present))

    def parts(self, tokens: Sequence[str]) -> dict[str, tuple[float, float, float]]:
        """Per function, the lexical evidence split by where the words come from: (name words, description words,
        parameter phrases and enum values), each word weighted by how few functions share it."""
        present = _present(tokens)
        text = " " + " ".join(tokens) + " "
        out = {}
        for n in self.names:
            name, description = self._words_of(n, present)
            parameters = sum(self.weight[p] for p in self.param_phrases[n] if p and f" {' '.join(p)} " in text)
            parameters += sum(self.weight[v] for v in self.enum_values[n] if v and f" {' '.join(v)} " in text)
            out[n] = (name, description, parameters)
        return out

    def _phrase_words(self, tokens: Sequence[str]) -> dict[int, set[str]]:
        """Token position -> the functions one of whose parameter phrases of several words covers it."""
        inside: dict[int, set[str]] = {}
        for n in self.names:
            for phrase in self.param_phrases[n]:
                if len(phrase) < 2:
                    continue
                for i in range(len(tokens) - len(phrase) + 1):
                    if tuple(tokens[i:i + len(phrase)]) == phrase:
                        for j in range(i, i + len(phrase)):
                            inside.setdefault(j, set()).add(n)
        return inside

    def evidence(self, tokens: Sequence[str]) -> dict[str, float]:
        """How strongly a text names each function's domain: name words count most, then parameters and values.
        A word inside another function's parameter phrase of several words names nothing of its own ("music" of
        "a place that has live music" is has_live_music's, not GetMusic's)."""
        inside = self._phrase_words(tokens)
        scores: dict[str, float] = {}
        for n in self.names:
            own = [t if not inside.get(i, {n}) - {n} else "|" for i, t in enumerate(tokens)]
            present = _present(own)
            text = " " + " ".join(own) + " "
            score = 3.0 * sum(self.weight[w] for w in self.name_words[n] if stem(w) in present)
            score += 0.5 * sum(self.weight[w] for w in self.description_words[n] if stem(w) in present)
            for phrase in self.param_phrases[n]:
                if phrase and f" {' '.join(phrase)} " in text:
                    score += (1.0 if len(phrase) > 1 else 0.5) * self.weight[phrase]
            for value in self.enum_values[n]:
                if value and f" {' '.join(value)} " in text:
                    score += 1.0 * self.weight[value]
            if score > 0:
                scores[n] = score
        return scores


def _present(tokens: Sequence[str]) -> set[str]:
    """The stems of a text's words (retrieval.text.stem): "remind" meets a function named "SetReminder"."""
    return {stem(t) for t in tokens}


def _words(text: str) -> list[str]:
    return tokenize(text, drop_stop_words=False)


def user_text(turns: list[Turn]) -> str:
    return "\n".join(t.content for t in turns if t.role == "user") or "\n".join(t.content for t in turns)


def _embed(embedder: Embedder | None, texts: list[str]) -> np.ndarray | None:
    """One embedding call for the dialogue, the instructions and the function texts together."""
    if embedder is None or not texts:
        return None
    return np.asarray(embedder.embed(texts), dtype=np.float32)


# ---------------------------------------------------------------------------- steps
def dialogue_domains(model: DomainModel, text: str, cosines: np.ndarray | None, config: SelectionConfig) -> list[str]:
    """Functions the dialogue is about: those named outright, else the best lexical/embedding match."""
    named = list(model.named(_words(text)))
    if named:
        return named
    evidence = model.evidence(_words(text))
    combined = {n: evidence.get(n, 0.0) for n in model.names}
    if cosines is not None:
        for i, n in enumerate(model.names):
            combined[n] += float(cosines[i])
    best = max(combined.values(), default=0.0)
    if best <= 0:
        return []
    return [n for n, s in combined.items() if s >= best - config.domain_margin]


def instruction_domains(model: DomainModel, text: str, cosines: np.ndarray | Callable[[], np.ndarray | None] | None,
                        config: SelectionConfig) -> list[str]:
    """The functions an instruction is about. `cosines` (the instruction's against each function's text) may be a
    callable, asked only where no word outside a name says it."""
    condition, _ = split_condition(text)
    if condition and _REQUEST_RE.search(condition):
        # "If I ask for Travel, then also look at Hotels" is a Travel instruction; Hotels is its chain target.
        named = model.named(_words(condition))
        by_name = model.first_named(named, _words(condition))
        if by_name:
            return by_name
        if named:
            best = max(named.values())
            return [n for n, s in named.items() if s >= best * 0.999]
        # "Try the Kabul Guest House if you are looking for Afghan cuisine": the clause that says what
        # the request is names its domain ("cuisine"); the value's own words ("House") say nothing of it.
        said = model.evidence(_words(condition))
        if said:
            best = max(said.values())
            return [n for n, s in said.items() if s >= best * 0.999]
    # The words of a name the instruction gives ("check out Baan Thai House & Wine Bar") say nothing of its request:
    # the other words first, then the embedder, and the name's words only where neither says anything.
    for words in (_words(outside_names(text)), None, _words(text)):
        if words is None:
            found = cosines() if callable(cosines) else cosines
            if found is not None and len(found) and float(found.max()) >= config.min_instruction_cosine:
                return [model.names[int(found.argmax())]]
            continue
        evidence = model.evidence(words)
        if evidence:
            best = max(evidence.values())
            return [n for n, s in evidence.items() if s >= best * 0.999]
    return []


def outside_names(text: str) -> str:
    """`text` without the proper names it writes ("check out Baan Thai House & Wine Bar" -> "check out "): their
    words name no request."""
    return _PROPER_NAME_RE.sub(" ", text)


def split_condition(text: str) -> tuple[str | None, str]:
    """(condition clause, consequence) of "If X, Y" / "Y if X"; (None, text) when unconditional."""
    match = _COND_START_RE.match(text) or _COND_TAIL_RE.match(text)
    if not match:
        return None, text
    return match.group("cond"), match.group("rest")


def domain_condition(condition: str, model: DomainModel) -> bool:
    """"when requesting a Doctor", "if I ask for Events": the clause only says which request it is about, so
    values written inside it ("... a Doctor is Burlingame") are what the instruction asks for, not conditions."""
    return bool(_REQUEST_RE.search(condition)) and bool(model.named(_words(condition)))


# Where a condition's parts meet: "and", "with", a comma, and a relative pronoun ("a restaurant that serves Szechuan
# cuisine": the request, then a value it must have).
_SUBCLAUSE = re.compile(r"\b(?:and|with|that|which|who)\b|,")
_RELATIVE = frozenset({"that", "which", "who"})
_STATES = re.compile(r"\b(?:is|are)\b", re.I)


def slot_clause(condition: str, model: DomainModel) -> tuple[int, int] | None:
    """Where a domain condition goes on to condition on a value: "the cuisine is Gastrobar" of "When I inquire about
    Restaurants and the cuisine is Gastrobar", "a premium car" of "If I book a taxi in a premium car" ((start, end)
    in `condition`, to its end); None when every part of it only names the request."""
    cuts = [m.end() for m in _SUBCLAUSE.finditer(condition)]
    for start, end in zip(cuts, [*cuts[1:], len(condition)]):
        clause = condition[start:end]
        if _STATES.search(clause) and not _REQUEST_RE.search(clause) and condition_values(clause, model):
            return start + len(clause) - len(clause.lstrip()), len(condition)
    found = enum_condition(condition, model)
    return None if found is None else (found[0], len(condition))


def enum_condition(clause: str, model: DomainModel) -> tuple[int, int] | None:
    """Where a clause that names a request goes on to one of the values its functions' parameters enumerate ("If I
    book a taxi in a premium car", "a fitness class at the advanced level"): the first such value's (start, end) in
    `clause`, or None. A value is one only where no word of it names a request or a parameter (the catalogue's
    vocabulary: "music" of "If I ask for Music"), it is not part of a longer capitalised name ("France" of
    "France Rocks Festival") and it is not what the clause states ("Sports" of "My preferred category when I request
    Events is Sports": the instruction's own value)."""
    found: list[tuple[int, int]] = []
    vocabulary = model.vocabulary
    for name in model.named(_words(clause)):
        for value in model.enum_values[name]:
            words = [w for w in value if w not in STOP_WORDS]
            if not words or any(w in vocabulary or generic(w) for w in words):
                continue
            pattern = r"[\s-]+".join(re.escape(w) for w in value)
            for match in re.finditer(rf"\b{pattern}s?\b", clause, re.I):
                if not _inside_name(clause, match.start(), match.end()) \
                        and not _PREDICATE.search(clause[:match.start()]):
                    found.append((match.start(), match.end()))
    return min(found) if found else None


_PREDICATE = re.compile(r"\b(?:is|are)\s+(?:(?:a|an|the)\s+)?$", re.I)


def _inside_name(text: str, start: int, end: int) -> bool:
    """Does text[start:end], written capitalised, continue a capitalised word before or after it?"""
    if not text[start:start + 1].isupper():
        return False
    before = re.search(r"([A-Za-z][\w'.-]*)\s+$", text[:start])
    after = re.match(r"\s+([A-Za-z][\w'.-]*)", text[end:])
    return any(m is not None and m.group(1)[0].isupper() and m.group(1) != "I" for m in (before, after))


def condition_values(condition: str, model: DomainModel) -> list[str]:
    """Value words of a condition: what remains after domain vocabulary and request phrasing are removed."""
    enum_words = {w for n in model.names for v in model.enum_values[n] for w in v}
    # The verbs of the functions' own names say which request it is ("Whenever I transfer money" for TransferMoney,
    # "When I reserve parking" for ReserveParking), never a value the request must have.
    name_verbs = {w for n in model.names for w in tokenize(n) if w in NAME_VERBS}
    ignore = (model.vocabulary - enum_words - model.flag_words) | STOP_WORDS | name_verbs
    # A function's own name words say which request it is in any form they take ("When ordering food" for
    # order_food, "Whenever I booked a ride" for book_ride), as they do written as the name writes them.
    name_stems = {stem(w) for n in model.names for w in tokenize(n)} - {stem(w) for w in enum_words | model.flag_words}
    values: list[str] = []
    parts = _SUBCLAUSE.split(condition)
    delimiters = [""] + [m.group(0).lower() for m in _SUBCLAUSE.finditer(condition)]
    for clause, opened_by in zip(parts, delimiters):
        if _REQUEST_RE.search(clause) and model.named(_words(clause)):
            # "If I ask for Restaurants": a domain condition, checked by the domain step; the value it goes on to
            # ("If I book a taxi in a premium car") is a condition
            found = enum_condition(clause, model)
            if found is not None:
                values += [w for w in tokenize(clause[found[0]:found[1]]) if not generic(w)]
            continue
        found = [w for w in tokenize(clause) if w not in ignore and stem(w) not in name_stems and not generic(w)]
        if opened_by in _RELATIVE:
            # A relative clause conditions on what the catalogue can check or the user names: an enum value, a
            # flag's word, a written name ("that serves Szechuan cuisine"); an idiom ("a restaurant that won't break
            # the bank") is no value to look for.
            named = set(tokenize(" ".join(re.findall(r"\b[A-Z][\w'-]*", clause))))
            found = [w for w in found if w in enum_words or w in model.flag_words or w in named]
        values += found
    return values


def find_place(text: str, model: DomainModel | None = None) -> str | None:
    """A capitalised place after in/around/near that is not a catalogue word or enum value ("in General Practitioner")
    nor an adjective of nationality before a noun ("interested in Brazilian food", "in Italian restaurants")."""
    known = model.vocabulary | {w for n in model.names for v in model.enum_values[n] for w in v} if model else set()
    for match in _PLACE_RE.finditer(text):
        words = set(tokenize(match.group(1)))
        if _NATIONALITY.fullmatch(match.group(1)) and _NEXT_LOWER.match(text, match.end(1)):
            continue
        if words and not words <= known:
            return match.group(1).strip(" ,.")
    return None


def user_sets(phrase: tuple[str, ...], dialogue: str) -> bool:
    """Does the dialogue state this parameter: "<param> is X", "X as the <param>", "<domain> called X"?"""
    words = " ".join(w for w in _words(dialogue) if w != "s")  # "dentist's name" -> "dentist name"
    pattern = r"\s+".join(phrase)
    if re.search(rf"\b{pattern}\s+{_CONNECTORS}\s+\w", words) or re.search(rf"\bas\s+(?:the\s+)?{pattern}\b", words):
        return True
    # "dentist_name": "the dentist is called X" or "one named X" states a name parameter.
    if phrase[-1] == "name":
        return bool(re.search(r"\b(?:called|named)\s+[A-Z0-9]", dialogue))
    return False


def override_reason(instruction: str, domains: list[str], dialogue: str, model: DomainModel) -> str | None:
    """Why the user's own words replace this instruction's value, or None."""
    dialogue_words = set(_words(dialogue))
    _, consequence = split_condition(instruction)
    ins_words = _words(consequence)
    # Locations: the instruction sets a city/location, the user names a different place.
    place = find_place(dialogue, model)
    if place and (LOCATION_WORDS & set(ins_words) or find_place(consequence, model)):
        value_words = [w for w in tokenize(consequence)
                       if w not in model.vocabulary | LOCATION_WORDS and not generic(w)]
        if value_words and not any(w in dialogue_words for w in value_words):
            return f"location {place!r}"
    for n in domains:
        # Enum values: the instruction picks one value of a parameter, the user another of the same one. A value
        # that several parameters share ("checking" for the sender's and the recipient's account) does not say which
        # one either side sets: the filler and the preferences decide that per argument, so it overrides nothing here.
        text = " " + " ".join(ins_words) + " "
        dtext = " " + " ".join(_words(dialogue)) + " "
        for value, params in model.enum_values[n].items():
            if len(params) != 1 or f" {' '.join(value)} " not in text:
                continue
            for other, other_params in model.enum_values[n].items():
                if other_params == params and other != value and f" {' '.join(other)} " in dtext \
                        and f" {' '.join(value)} " not in dtext:
                    return f"{params[0]} {' '.join(other)!r}"
        # The user states a parameter the instruction also sets ("the dentist's name is X", "SFO as the city").
        for phrase, param in model.param_phrases[n].items():
            if not phrase or f" {' '.join(phrase)} " not in text:
                continue
            if user_sets(phrase, dialogue):
                values = [w for w in tokenize(consequence) if w not in model.vocabulary and not generic(w)]
                if values and not all(w in dialogue_words for w in values):
                    return f"{param} stated by the user"
    return None


# ---------------------------------------------------------------------------- the selector
def select_instructions(
    dialogue: str | list[Turn] | list[dict[str, Any]],
    instructions: Sequence[str],
    catalogue: Catalogue,
    embedder: Embedder | None = None,
    *,
    config: SelectionConfig | None = None,
    domains: Sequence[str] | None = None,
) -> SelectionResult:
    """The instructions that apply to this dialogue (thresholded) and the full ranking with scores. `domains`:
    the functions the request is for when the caller already knows them (stage 1 chose one), in place of the
    dialogue's own domain words."""
    config = config or SelectionConfig()
    turns = as_dialogue(dialogue)
    text = user_text(turns)
    model = DomainModel.build(catalogue)
    instructions = list(instructions)
    if not instructions:
        return SelectionResult(selected=[], ranking=[], dialogue_domains=[])

    vectors = _embed(embedder, [text, *instructions, *model.texts])
    cos = None
    if vectors is not None:
        cos = vectors[: len(instructions) + 1] @ vectors[len(instructions) + 1 :].T
    active = set(domains) if domains is not None else \
        set(dialogue_domains(model, text, cos[0] if cos is not None else None, config))
    ins_domains = [
        instruction_domains(model, ins, cos[i + 1] if cos is not None else None, config)
        for i, ins in enumerate(instructions)
    ]
    relevance = _relevance(text, instructions, embedder, vectors)
    if not active and domains is None:
        # Nothing in the request names a domain ("a spot to grab some grub"): the profile itself is evidence;
        # take the domain of the instruction most similar to the request.
        best = max(range(len(instructions)), key=lambda i: relevance[i][0])
        if relevance[best][0] > 0:
            active = set(ins_domains[best])

    conditions = [split_condition(ins) for ins in instructions]
    needs = [condition_values(c, model) if c else [] for c, _ in conditions]
    overrides = [
        override_reason(ins, ins_domains[i], text, model) if config.use_overrides else None
        for i, ins in enumerate(instructions)
    ]

    selected: dict[int, str] = {}
    context_words = set(tokenize(text))
    words_of = [set(tokenize(ins)) for ins in instructions]
    changed = True
    while changed:  # fixpoint: selected instructions can satisfy conditions and add domains (chains)
        changed = False
        for i, ins in enumerate(instructions):
            if i in selected or overrides[i]:
                continue
            own_context = context_words | _selected_words(words_of, selected, exclude=i)
            if needs[i] and not _condition_met(needs[i], own_context, model):
                continue
            if not set(ins_domains[i]) & active:
                # "Book the Kabul Guest House if the cuisine is Afghan": the value words of a
                # name can point elsewhere (a house), but a condition that a selected instruction's value meets
                # ("my cuisine is Afghan") chains it to that instruction's function.
                via = _value_chain(needs[i], words_of, selected, ins_domains, model) & active
                if not via:
                    continue
                ins_domains[i] = sorted(set(ins_domains[i]) | via)
            met_by_dialogue = not needs[i] or _condition_met(needs[i], context_words, model)
            selected[i] = "direct" if met_by_dialogue else "chain"
            changed = True
            if config.use_chains and ALSO_RE.search(conditions[i][1]):
                # "then also look at Hotels": a domain the consequence names becomes active too.
                active |= set(model.named(_words(conditions[i][1])))
        if not config.use_chains:
            break

    context_all = context_words | _selected_words(words_of, selected, exclude=-1)
    ranking = []
    for i, ins in enumerate(instructions):
        domain_match = bool(set(ins_domains[i]) & active)
        condition_met = not needs[i] or _condition_met(needs[i], context_all, model)
        score = (1.0 if domain_match else 0.0) + config.relevance_weight * relevance[i][0]
        if not condition_met:
            score -= 0.5
        if overrides[i]:
            score -= 0.5
        if i in selected:
            score = max(score, config.threshold)
        else:
            score = min(score, config.threshold - 1e-6)
        ranking.append(
            ScoredInstruction(
                index=i, text=ins, score=round(score, 6), domains=ins_domains[i], domain_match=domain_match,
                condition=" ".join(needs[i]) or None, condition_met=condition_met, overridden_by=overrides[i],
                via=selected.get(i, "direct"), bm25=relevance[i][1], dense=relevance[i][2],
            )
        )
    ranking.sort(key=lambda s: (-s.score, s.index))
    chosen = [s for s in ranking if s.index in selected]
    return SelectionResult(selected=chosen, ranking=ranking, dialogue_domains=sorted(active))


def _condition_met(values: list[str], words: set[str], model: DomainModel) -> bool:
    hits = sum(1 for v in values if v in words)
    return hits >= max(1, math.ceil(len(values) / 2)) and not _contradicted(values, words, model)


def _contradicted(values: list[str], words: set[str], model: DomainModel) -> bool:
    """The words state another value of a parameter whose value the condition names, and not the condition's ("When
    the request is in standard seating" against "in premium seating"): the other words they share ("seating") do
    not meet it."""
    needed = set(values)
    for name in model.names:
        for value, params in model.enum_values[name].items():
            own = {w for w in value if w not in STOP_WORDS}
            if not own or not own <= needed or own <= words:
                continue
            for other, other_params in model.enum_values[name].items():
                rest = {w for w in other if w not in STOP_WORDS}
                if other != value and other_params == params and rest and rest <= words and not rest <= own:
                    return True
    return False


def _value_chain(needs: list[str], words_of: list[set[str]], selected: dict[int, str],
                 ins_domains: list[list[str]], model: DomainModel) -> set[str]:
    """The functions of the selected instructions whose words alone (`words_of`, per instruction) meet a
    condition's value words."""
    if not needs:
        return set()
    return {d for j in selected if _condition_met(needs, words_of[j], model) for d in ins_domains[j]}


def _selected_words(words_of: list[set[str]], selected: dict[int, str], *, exclude: int) -> set[str]:
    words: set[str] = set()
    for j in selected:
        if j != exclude:
            words |= words_of[j]
    return words


def _relevance(
    query: str, instructions: list[str], embedder: Embedder | None, vectors: np.ndarray | None
) -> list[tuple[float, float, float | None]]:
    """(fused 0..1, bm25, cosine) per instruction from the hybrid index, for ordering."""
    n = len(instructions)
    if vectors is not None:
        index = HybridIndex(instructions, embedder, fusion="weighted", vectors=vectors[1 : n + 1])
        found = index.search(query, k=n, query_vector=vectors[0])
    else:
        found = HybridIndex(instructions, None, fusion="weighted").search(query, k=n)
    hits = {h.index: h for h in found}
    out = []
    for i in range(n):
        hit = hits.get(i)
        out.append((hit.score, hit.bm25, hit.dense) if hit else (0.0, 0.0, None))
    return out
