"""Tokenisation shared by BM25 and the rule-based matchers: lower-case words with light normalisation.

Light on purpose: a real stemmer would merge words that mean different things in API slots
("booking" vs "book" is fine, "events" vs "event" too, but "news" vs "new" is not), so we only
split identifiers, fold plurals and drop a short list of function words.
"""

from __future__ import annotations

import re

_CAMEL_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD_RE = re.compile(r"[a-z0-9]+")

# Function words that carry no retrieval signal; kept short so that preference words ("not", "no") survive.
STOP_WORDS = frozenset(
    """a an the and or of to in on at for from by with as is are was were be been being it its this that these
    those i me my mine we our you your he she they them their if then so do does did am can could would should
    will shall may might must have has had there here what which who whom when where how about into up out
    just also too very s t m ll re ve d""".split()
)

# Verbs that prefix API names (GetRestaurants, FindBus, ReserveHotel, lookupUser): they say nothing about the domain.
# Numbers written as words ("a three bedroom flat", "for five"): what a number's words mean.
NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50,
    "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "thousand": 1000, "single": 1,
    "couple": 2, "pair": 2,
}  # fmt: skip
# Words that multiply what came before them in a number written out ("two hundred", "three thousand").
NUMBER_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}
# Number words that only stand alone ("a couple of nights"), never a part of a longer number.
_ALONE = frozenset({"single", "couple", "pair"})


def number_from_words(text: str) -> int | None:
    """A whole number written out in words: "ninety", "twenty-five", "two hundred and fifty", "a hundred",
    "fifteen hundred"; None for anything else (a word that is not part of a number, "seven one", a bare "and")."""
    parts = [w for w in re.split(r"[\s-]+", text.strip().lower()) if w]
    if not parts or parts[-1] == "and" or (len(parts) > 1 and _ALONE.intersection(parts)):
        return None
    total = current = 0
    last: str | None = None  # what the word before was: "unit" (1-19), "tens" (20-90), "scale", "a"
    scale = 0  # the last scale word's size: a smaller or equal one may not follow it alone
    for i, word in enumerate(parts):
        if word == "and" and last == "scale":
            continue
        if word in ("a", "an") and i == 0 and len(parts) > 1 and parts[1] in NUMBER_SCALES:
            current, last = 1, "a"
        elif word in NUMBER_SCALES:
            size = NUMBER_SCALES[word]
            if last not in ("unit", "tens", "a") and not (last == "scale" and size > scale) and len(parts) > 1:
                return None
            current = max(current, 1) * size
            if size >= 1000:
                total, current = total + current, 0
            last, scale = "scale", size
        elif word in NUMBER_WORDS:
            value = NUMBER_WORDS[word]
            tens = value >= 20 and value % 10 == 0
            if not (last in (None, "scale") or (last == "tens" and value < 10 and not tens)):
                return None
            current += value
            last = "tens" if tens else "unit"
        else:
            return None
    return total + current if last is not None else None


NAME_VERBS = frozenset(
    "get find search lookup look reserve book buy make add check play rent schedule transfer request".split()
)

# Plural endings that must not be cut: "bus" -> "bu", "class" -> "clas", "this" -> "thi".
_KEEP_ENDINGS = ("ss", "us", "is", "os", "as", "ys")
# "-ies" words whose singular ends in "ie", not "y" (movies -> movie, but cities -> city).
_IE_PLURALS = frozenset({"movies", "cookies", "calories", "ties", "lies", "pies", "zombies", "selfies", "rookies"})


def normalise_word(word: str) -> str:
    """Fold simple English plurals: restaurants -> restaurant, movies -> movie, buses -> bus."""
    if len(word) <= 3 or word.isdigit():
        return word
    if word in _IE_PLURALS or word in ("series", "species", "news"):
        return word[:-1] if word in _IE_PLURALS else word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes", "uses")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(_KEEP_ENDINGS):
        return word[:-1]
    return word


# Derivational endings folded when a request's words are matched with a catalogue's ("remind" / "reminder", "reserve"
# / "reservation", "rent" / "rental", "book" / "booking"): one ending, and the stem keeps at least four letters, so
# short words ("news", "need", "water") stay whole.
_DERIVATIONS = ("ations", "ation", "ments", "ment", "ings", "ing", "ions", "ion", "ers", "er", "als", "al", "ed")


def stem(word: str) -> str:
    """A word without one derivational ending and a final "e": what two forms of one word share."""
    for suffix in _DERIVATIONS:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 4 else word


def split_identifier(text: str) -> str:
    """GetRestaurants -> Get Restaurants, departure_date -> departure date."""
    return _CAMEL_RE.sub(" ", text).replace("_", " ")


def humanise(argument: str) -> str:
    """departure_date -> departure date; propertyID -> property ID."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", argument.replace("_", " ").replace(".", " ").replace("-", " "))
    return " ".join(w if w.isupper() and len(w) > 1 else w.lower() for w in spaced.split())


_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|\n+")


def sentences(text: str) -> list[str]:
    """The text's sentences (split after . ! ? and at line breaks), stripped, empty ones left out."""
    return [part.strip() for part in _SENTENCE_RE.split(text) if part.strip()]


def tokenize(text: str, *, drop_stop_words: bool = True) -> list[str]:
    """Lower-case, identifier-split, plural-folded word tokens."""
    words = _WORD_RE.findall(split_identifier(text).lower())
    if drop_stop_words:
        words = [w for w in words if w not in STOP_WORDS]
    return [normalise_word(w) for w in words]


def one_edit(a: str, b: str) -> bool:
    """`a` and `b` differ by exactly one inserted, deleted or substituted letter, or two swapped neighbours."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long = (a, b) if len(a) < len(b) else (b, a)
    i = next((k for k, (x, y) in enumerate(zip(short, long)) if x != y), len(short))
    return short[i:] == long[i + 1:]


def misspelt(word: str, vocabulary: frozenset[str], min_length: int = 8) -> bool:
    """`word` is a misspelling of a member of `vocabulary`: one edit away from it, and long enough (8 letters by
    default) that one edit does not make another common word ("preferance" for "preference"; "cooking" and
    "booking" are both words, so 7 letters are never folded)."""
    return len(word) >= min_length and word not in vocabulary and any(one_edit(word, v) for v in vocabulary)


# Three or more capitalised words in a row, "&", "and", "of" or "the" between them: a proper name ("Family &
# Cosmetic Dentistry", "Baan Thai House & Wine Bar"); two ("Live Music") may be a title-cased phrase.
PROPER_NAME = r"[A-Z][\w'.-]*(?:(?:\s+(?:&|and|of|the))?\s+[A-Z][\w'.-]*){2,}"
# Verbs that say how a flag's thing relates to the item (serves_alcohol, offers_delivery, allows_pets): the thing
# names the flag, the verb does not ("serves freshwater fish" says nothing of alcohol).
RELATION_WORDS = frozenset("has have is are can does serves serve offers offer allows allow includes include accepts "
                           "accept supports support provides provide requires require needs need with".split())
# A negation in the words before a flag's name, or a negating prefix on it, says the flag is off ("no pets",
# "without breakfast", "unfurnished", "non-smoking").
NEGATION = re.compile(r"\b(no|not|without|don't|dont|doesn't|never|non)\b", re.I)
# A span that ends on an initialism whose last stop was cut as a sentence's ("M.D", "U.S", "p.m"): the stop is its.
INITIALISM_END = re.compile(r"(?<![A-Za-z])(?:[A-Za-z]\.)+[A-Za-z]$")
NEGATING_PREFIX = re.compile(r"(?:un|non-?)(?=[a-z]{4})")
