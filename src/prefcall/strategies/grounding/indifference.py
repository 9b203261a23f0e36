"""The user does not mind an argument's value: the schema's don't-care value, where the schema has one.

"I need a one way flight on any airline", "I don't care what date", "The ticket class doesn't matter": the
argument is named by its head word (the last word of its name, "flight_class" -> "class"), and either a
quantifier of indifference comes right before that word ("any airline") or a phrase of indifference shares its
sentence with it, close by ("class doesn't matter"). The value is the schema's own don't-care value: an enum
option or the default (the JSON Schema `default` keyword, or "(default: X)" in the description, which is where
prefcall's importers keep it) that reads as one (DONT_CARE: "don't care" in any spelling, "any", "no
preference"). A default that is a real value (a date, "Economy") is not what the user asked for, and an argument
without a don't-care value is left to the filler, never given a made-up "any". Only an argument the filler left
unset gets it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from prefcall.retrieval.text import humanise, normalise_word, sentences

QUANTIFIERS = frozenset({"any", "whatever", "whichever", "either"})
PHRASES = ("doesn't matter", "does not matter", "don't care", "do not care", "dont care", "no preference",
           "not picky", "not important", "i'm flexible", "am flexible", "is fine either way")
GENERIC = frozenset({"name", "number", "type", "id", "of", "the", "a", "an"})
# Compared letters only ("don't care", "dont-care", "DontCare" are one value).
DONT_CARE = frozenset(re.sub(r"[^a-z]", "", v) for v in ("don't care", "any", "anything", "no preference", "either",
                                                         "whatever", "flexible"))
WINDOW = 6  # words either side of the head word a phrase may stand at
_DEFAULT = re.compile(r"\(default: ([^)]+)\)|^default: (.+)$")
_WORD = re.compile(r"[a-z']+")


def schema_default(spec: dict[str, Any]) -> Any | None:
    """The argument's default: the `default` keyword, else "(default: X)" in its description; None without."""
    if "default" in spec:
        return spec["default"]
    found = _DEFAULT.search(str(spec.get("description") or ""))
    return (found.group(1) or found.group(2)).strip() if found else None


def dont_care_value(spec: dict[str, Any]) -> Any | None:
    """The schema's don't-care value: an enum option, else the default, that reads as one; None without."""
    for option in [*(spec.get("enum") or []), schema_default(spec)]:
        if isinstance(option, str) and re.sub(r"[^a-z]", "", option.lower()) in DONT_CARE:
            return option
    return None


def head_word(argument: str) -> str | None:
    words = [normalise_word(w) for w in humanise(argument).lower().split() if w not in GENERIC]
    return words[-1] if words else None


def indifference(texts: Sequence[str], argument: str) -> str | None:
    """The sentence of `texts` in which the user says they do not mind `argument`, or None."""
    head = head_word(argument)
    if head is None:
        return None
    for text in texts:
        for sentence in sentences(text):
            words = _WORD.findall(sentence.lower())
            for i, word in enumerate(words):
                if normalise_word(word) != head:
                    continue
                if any(w in QUANTIFIERS for w in words[max(0, i - 2):i]):
                    return sentence
                near = " ".join(words[max(0, i - WINDOW):i + WINDOW + 1])
                if any(phrase in near for phrase in PHRASES):
                    return sentence
    return None
