"""Post-checks: validate calls against the catalogue, repair what is safely repairable, and turn a missing
REQUIRED argument, or a value the user gave that the schema does not allow, into a question for the user.

Repairs are deliberately conservative (case/underscore folding, close spelling of a function name,
enum spelling, boolean and number spellings - the lenient rules of `prefcall.schemas.validation`, checked
with jsonschema; dates and times in words normalised to the schema's `format` by `prefcall.schemas.formats`).
A value that would need guessing is never called, dropped silently or replaced: the answer becomes `ask`, with a
question that names the problem ("45 is more than party size allows (at most 20)"). Unknown functions and
arguments, which no user gave, are dropped with a note.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from prefcall.retrieval.text import split_identifier
from prefcall.schemas import formats
from prefcall.schemas.model import Call, Catalogue, Function, MissingArgument


class CheckNote(BaseModel):
    call: str
    action: Literal["dropped", "repaired"]
    reason: str


class PostCheckResult(BaseModel):
    calls: list[Call]
    notes: list[CheckNote] = Field(default_factory=list)
    missing: list[MissingArgument] = Field(default_factory=list)
    decision: Literal["call", "ask", "refuse"] = "call"
    question: str | None = None


def _fold(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def resolve_function(name: str, catalogue: Catalogue) -> Function | None:
    """Exact name, else case/underscore-folded, else a close spelling (GetDenists -> GetDentists)."""
    exact = catalogue.function(name)
    if exact is not None:
        return exact
    folded = {_fold(f.name): f for f in catalogue.functions}
    if _fold(name) in folded:
        return folded[_fold(name)]
    close = difflib.get_close_matches(_fold(name), list(folded), n=1, cutoff=0.85)
    return folded[close[0]] if close else None


def repair_value(value: Any, spec: dict[str, Any], today: dt.date | None = None) -> tuple[Any, str | None]:
    """(the value as the spec wants it, None) or (None, why it cannot be): the lenient spellings of
    `prefcall.schemas.validation` are repaired (booleans, numbers, enum case), dates and times in words are
    written in the spec's `format`, an empty value never is repaired."""
    from prefcall.schemas.validation import coerce_value  # jsonschema: imported when calls are checked

    if isinstance(value, str) and not value.strip():
        return None, "empty value"
    if isinstance(value, str) and spec.get("format") in formats.FORMATS:
        value, problem = formats.normalise(value, str(spec["format"]), today)
        if problem:
            return None, problem
    return coerce_value(value, spec)


_TYPE_WORDS = {"integer": "a whole number", "number": "a number", "boolean": "yes or no", "string": "text",
               "array": "a list", "object": "a set of fields"}


def explain(value: Any, spec: dict[str, Any], argument: str, problem: str) -> str:
    """The problem in the user's terms: what the value breaks (a range, a form, the options)."""
    from prefcall.schemas.validation import coerce, errors

    shown = value if isinstance(value, str) else repr(value)
    worded = isinstance(value, str) and spec.get("format") in formats.FORMATS  # formats.normalise's own words
    found = [] if worded or problem == "empty value" else errors(coerce(value, spec), spec, strict=True)
    name = words(argument)
    if not found:
        return problem
    error = found[0]
    limit = error.validator_value
    if error.validator in ("maximum", "exclusiveMaximum"):
        return f"{shown} is more than {name} allows (at most {limit})"
    if error.validator in ("minimum", "exclusiveMinimum"):
        return f"{shown} is less than {name} allows (at least {limit})"
    if error.validator == "pattern":
        return f"'{shown}' is not in the form {name} takes"
    if error.validator in ("enum", "const"):
        options = limit if isinstance(limit, list) else [limit]
        return f"'{shown}' is not one of the {name} options ({', '.join(map(str, options))})"
    if error.validator == "type":
        kinds = limit if isinstance(limit, list) else [limit]
        return f"'{shown}' is not {' or '.join(_TYPE_WORDS.get(str(k), str(k)) for k in kinds)}"
    if error.validator == "maxLength":
        return f"'{shown}' is longer than {name} allows ({limit} characters)"
    if error.validator == "minLength":
        return f"'{shown}' is shorter than {name} allows ({limit} characters)"
    return problem


def check_call(call: Call, catalogue: Catalogue, notes: list[CheckNote],
               invalid: list[MissingArgument] | None = None, today: dt.date | None = None) -> Call | None:
    """The call with its function and arguments repaired; unknown names are dropped with a note. A value the
    schema does not allow goes to `invalid` (a question about it), never into the call."""
    function = resolve_function(call.name, catalogue)
    if function is None:
        notes.append(CheckNote(call=call.name, action="dropped", reason=f"unknown function {call.name!r}"))
        return None
    if function.name != call.name:
        notes.append(CheckNote(call=call.name, action="repaired", reason=f"function name -> {function.name}"))
    properties = function.properties
    folded = {_fold(n): n for n in properties}
    arguments: dict[str, Any] = {}
    for name, value in call.arguments.items():
        target = name if name in properties else folded.get(_fold(name))
        if target is None:
            notes.append(CheckNote(call=function.name, action="dropped", reason=f"unknown argument {name!r}"))
            continue
        fixed, problem = repair_value(value, properties[target], today)
        if problem:
            notes.append(CheckNote(call=function.name, action="dropped", reason=f"{target}: {problem}"))
            if invalid is not None:
                why = explain(value, properties[target], target, problem)
                invalid.append(MissingArgument(
                    function=function.name, argument=target, reason="invalid", problem=why,
                    question=f"{why[:1].upper()}{why[1:]}. {question_for(function, target)}",
                    description=str(properties[target].get("description") or "")))
            continue
        if target != name or fixed != value:
            notes.append(CheckNote(call=function.name, action="repaired", reason=f"{name}={value!r} -> {target}={fixed!r}"))
        arguments[target] = fixed
    return Call(name=function.name, arguments=arguments)


def words(identifier: str) -> str:
    """departure_date -> 'departure date'; GetRentalCars -> 'rental cars'."""
    text = split_identifier(identifier).lower()
    return re.sub(r"^(get|find|search|book|list)\s+", "", text).strip()


def question_for(function: Function, argument: str) -> str:
    """"What party size would you like for the table? (How many people.)": the argument's words, the function's,
    the options of an enum, and the catalogue's description of the argument."""
    spec = function.properties.get(argument, {})
    options = spec.get("enum")
    tail = f" (one of: {', '.join(map(str, options))})" if options else ""
    description = str(spec.get("description") or "").strip().rstrip(".")
    note = f" ({description[:1].upper()}{description[1:]}.)" if description and not options else ""
    return f"What {words(argument)} would you like for the {words(function.name)}{tail}?{note}"


def post_check(calls: list[Call], catalogue: Catalogue, today: dt.date | None = None) -> PostCheckResult:
    """Repair invalid calls, de-duplicate, and ask about values the schema does not allow and about missing
    required arguments."""
    notes: list[CheckNote] = []
    invalid: list[MissingArgument] = []
    kept: list[Call] = []
    seen: set = set()
    for call in calls:
        fixed = check_call(call, catalogue, notes, invalid, today)
        if fixed is None or fixed.key() in seen:
            continue
        seen.add(fixed.key())
        kept.append(fixed)
    asked = {(m.function, m.argument) for m in invalid}
    missing = invalid + [
        MissingArgument(function=c.name, argument=a, question=question_for(function, a),
                        description=str(function.properties.get(a, {}).get("description") or ""))
        for c in kept
        for function in [catalogue.function(c.name)]
        for a in function.required
        if a not in c.arguments and (c.name, a) not in asked
    ]
    if missing:
        question = " ".join(dict.fromkeys(m.question for m in missing))
        return PostCheckResult(calls=kept, notes=notes, missing=missing, decision="ask", question=question)
    return PostCheckResult(calls=kept, notes=notes, decision="call" if kept else "refuse")
