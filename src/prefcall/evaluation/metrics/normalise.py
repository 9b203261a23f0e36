"""Value normalisation for comparing predicted and gold argument values: the one rule every metric uses
(except BFCL's AST match, which follows BFCL's own checker).

TAPS's rule (grill-lab/taps, preprocess=True), also used for SGD values and tag spans: lower-case, remove
ASCII punctuation, fold whitespace. Structured values are normalised element-wise, and a float that is a
whole number equals the integer (2.0 == 2).
"""

from __future__ import annotations

import string
from typing import Any

_PUNCT = str.maketrans("", "", string.punctuation)


def normalise_text(value: Any) -> str:
    """'San Fran.' -> 'san fran'; 'New-York' -> 'newyork'."""
    return " ".join(str(value).lower().translate(_PUNCT).split())


def normalise_argument(value: Any) -> Any:
    """Strings as `normalise_text`, whole floats as ints, lists and dicts element-wise; other values as they are."""
    if isinstance(value, str):
        return normalise_text(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [normalise_argument(v) for v in value]
    if isinstance(value, dict):
        return {k: normalise_argument(v) for k, v in value.items()}
    return value
