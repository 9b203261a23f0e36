"""Post-checks: validate calls against the catalogue, repair what is safely repairable, drop the rest
with reasons, and turn a missing REQUIRED argument into a question for the user.

Repairs are deliberately conservative (case/underscore folding, close spelling of a function name,
enum spelling, boolean and number spellings - the lenient rules of `prefcall.schemas.validation`, checked
with jsonschema): anything that would need guessing is dropped instead.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from prefcall.retrieval.text import split_identifier
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


def repair_value(value: Any, spec: dict[str, Any]) -> tuple[Any, str | None]:
    """(the value as the spec wants it, None) or (None, why it cannot be): the lenient spellings of
    `prefcall.schemas.validation` are repaired (booleans, numbers, enum case), an empty value never is."""
    from prefcall.schemas.validation import coerce_value  # jsonschema: imported when calls are checked

    if isinstance(value, str) and not value.strip():
        return None, "empty value"
    return coerce_value(value, spec)


def check_call(call: Call, catalogue: Catalogue, notes: list[CheckNote]) -> Call | None:
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
        fixed, problem = repair_value(value, properties[target])
        if problem:
            notes.append(CheckNote(call=function.name, action="dropped", reason=f"{target}: {problem}"))
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
    spec = function.properties.get(argument, {})
    what = spec.get("description") or words(argument)
    options = spec.get("enum")
    tail = f" (one of: {', '.join(map(str, options))})" if options else ""
    return f"What {what.rstrip('.').lower()} would you like for the {words(function.name)}{tail}?"


def post_check(calls: list[Call], catalogue: Catalogue) -> PostCheckResult:
    """Repair or drop invalid calls, de-duplicate, and ask for missing required arguments."""
    notes: list[CheckNote] = []
    kept: list[Call] = []
    seen: set = set()
    for call in calls:
        fixed = check_call(call, catalogue, notes)
        if fixed is None or fixed.key() in seen:
            continue
        seen.add(fixed.key())
        kept.append(fixed)
    missing = [
        MissingArgument(function=c.name, argument=a, question=question_for(function, a),
                        description=str(function.properties.get(a, {}).get("description") or ""))
        for c in kept
        for function in [catalogue.function(c.name)]
        for a in function.required
        if a not in c.arguments
    ]
    if missing:
        question = " ".join(dict.fromkeys(m.question for m in missing))
        return PostCheckResult(calls=kept, notes=notes, missing=missing, decision="ask", question=question)
    return PostCheckResult(calls=kept, notes=notes, decision="call" if kept else "refuse")
