"""Argument values against their JSON Schema, with `jsonschema`: strict, or lenient where model output and
NLSI-style call strings spell a value differently from its type; a call against its catalogue (`validate_call`,
`check_call`).

Lenient (one rule for every caller: call validation, post-check repairs, demonstration typing):
- boolean: true/false, or the strings true/false/yes/no/1/0 in any case;
- integer: a whole number (3, 3.0) or its digits as a string ("3");
- number: a number or a numeric string ("2.5");
- string: a string, or a number/boolean that can be written as one;
- enum: a value equal to an option, or equal to it after case and surrounding spaces are folded.
`coerce` turns a lenient value into the strict one (so "True" -> True, "3" -> 3, "economy" -> "Economy").
BFCL's type names (dict, float, tuple, any, ...) are understood as the JSON Schema types they stand for.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Literal

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError as SchemaError
from jsonschema.protocols import Validator
from pydantic import BaseModel

from prefcall.errors import ValidationError
from prefcall.retrieval.text import number_from_words
from prefcall.schemas.calls import NUMBER_RE
from prefcall.schemas.importers import BFCL_TYPES
from prefcall.schemas.model import Call, Catalogue, Function

INTEGER_RE = re.compile(r"-?\d+")
BOOLEAN_WORDS = {"true": True, "false": False, "yes": True, "no": False, "1": True, "0": False}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _lenient_boolean(checker: Any, value: Any) -> bool:
    return isinstance(value, bool) or (isinstance(value, str) and value.strip().lower() in BOOLEAN_WORDS)


def _lenient_integer(checker: Any, value: Any) -> bool:
    if isinstance(value, str):
        return bool(INTEGER_RE.fullmatch(value.strip()))
    return _is_number(value) and float(value).is_integer()


def _lenient_number(checker: Any, value: Any) -> bool:
    return _is_number(value) or (isinstance(value, str) and bool(NUMBER_RE.fullmatch(value.strip())))


def _lenient_string(checker: Any, value: Any) -> bool:
    return isinstance(value, (str, int, float))  # bool is an int: True -> "True"


def _with_bfcl_names(checker: Any) -> Any:
    """BFCL's names checked like the JSON Schema types they stand for; "any" accepts everything."""
    names = {name: (lambda c, v, target=target: c.is_type(v, target)) if target else (lambda c, v: True)
             for name, target in BFCL_TYPES.items() if name != target}
    return checker.redefine_many(names)


def _lenient_enum(validator: Any, options: list[Any], instance: Any, schema: dict[str, Any]) -> Iterator[SchemaError]:
    if instance in options or _folded(instance) in {_folded(o) for o in options}:
        return
    yield SchemaError(f"{instance!r} is not one of {options!r}")


def _folded(value: Any) -> str:
    return str(value).strip().lower()


_STRICT_CHECKER = _with_bfcl_names(Draft202012Validator.TYPE_CHECKER)
_LENIENT_CHECKER = _with_bfcl_names(_STRICT_CHECKER.redefine_many({
    "boolean": _lenient_boolean, "integer": _lenient_integer, "number": _lenient_number, "string": _lenient_string,
}))
StrictValidator = validators.extend(Draft202012Validator, type_checker=_STRICT_CHECKER)
LenientValidator = validators.extend(Draft202012Validator, {"enum": _lenient_enum}, type_checker=_LENIENT_CHECKER)


def validator_for(schema: dict[str, Any], *, strict: bool) -> Validator:
    return (StrictValidator if strict else LenientValidator)(schema)


def closed(schema: Any) -> Any:
    """A copy in which every object schema that lists `properties` (and the top level) rejects other keys,
    unless it says otherwise: an argument the catalogue does not define is an error, not a pass."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) if k in ("items", "anyOf", "oneOf", "allOf", "prefixItems") else v for k, v in schema.items()}
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: closed(v) for k, v in schema["properties"].items()}
        out.setdefault("additionalProperties", False)
    return out


def errors(value: Any, schema: dict[str, Any], *, strict: bool) -> list[SchemaError]:
    """Every way the value breaks the schema (jsonschema's order: the schema's keywords and properties)."""
    return list(validator_for(schema, strict=strict).iter_errors(value))


def path_text(path: Any) -> str:
    """("filters", "cities", 0) -> "filters.cities[0]"."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def coerce(value: Any, schema: dict[str, Any]) -> Any:
    """The strict form of a value the lenient rules accept; anything else unchanged."""
    kind = schema.get("type")
    kind = BFCL_TYPES.get(kind, kind) if isinstance(kind, str) else None
    if kind == "boolean" and isinstance(value, str) and value.strip().lower() in BOOLEAN_WORDS:
        value = BOOLEAN_WORDS[value.strip().lower()]
    elif kind in ("integer", "number") and isinstance(value, str) and \
            (written := number_from_words(value)) is not None:
        value = written  # "five" people, "a couple" of nights, "twenty-five" dollars
    elif kind == "integer" and _lenient_integer(None, value) and not isinstance(value, bool):
        value = int(value.strip()) if isinstance(value, str) else int(value)
    elif kind == "number" and isinstance(value, str) and NUMBER_RE.fullmatch(value.strip()):
        text = value.strip()
        value = int(text) if INTEGER_RE.fullmatch(text) else float(text)
    elif kind == "string" and (_is_number(value) or isinstance(value, bool)):
        value = str(value)
    options = schema.get("enum")
    if isinstance(options, list) and value not in options:
        value = next((o for o in options if _folded(o) == _folded(value)), value)
    return value


def coerce_value(value: Any, schema: dict[str, Any]) -> tuple[Any, str | None]:
    """(the value in its strict form, None), or (None, why it cannot be one) - the first strict error."""
    fixed = coerce(value, schema)
    found = errors(fixed, schema, strict=True)
    return (None, found[0].message) if found else (fixed, None)


# ---------------------------------------------------------------------------- calls against their catalogue
IssueKind = Literal["unknown_function", "unknown_argument", "wrong_type", "not_in_enum", "missing_required",
                    "constraint"]  # constraint: any other JSON Schema keyword (minimum, pattern, ...)


class CallIssue(BaseModel):
    kind: IssueKind
    function: str
    argument: str | None = None  # dotted path for nested values, e.g. "filters.city"
    message: str


_KINDS: dict[str, IssueKind] = {"type": "wrong_type", "enum": "not_in_enum", "const": "not_in_enum",
                                "required": "missing_required", "additionalProperties": "unknown_argument"}


def _issues(error: SchemaError, function: str) -> list[CallIssue]:
    """CallIssues of one jsonschema error, in the words of the old hand-written checks."""
    path = path_text(error.absolute_path)
    where = f"{function}.{path}" if path else function
    join = (lambda key: f"{path}.{key}") if path else (lambda key: key)
    value = error.instance
    kind = _KINDS.get(str(error.validator), "constraint")
    if error.validator in ("anyOf", "oneOf"):
        # No alternative fits: report what the first one says (the caller most likely meant it).
        first = [e for e in error.context or [] if e.schema_path and e.schema_path[0] == 0]
        return [issue for e in first for issue in _issues(e, function)] or [
            CallIssue(kind="constraint", function=function, argument=path or None, message=f"{where}: {error.message}")]
    if error.validator == "required":
        return [CallIssue(kind=kind, function=function, argument=join(key),
                          message=f"{function}: missing required argument {join(key)!r}")
                for key in error.validator_value if isinstance(value, dict) and key not in value]
    if error.validator == "additionalProperties":
        known = error.schema.get("properties") or {}
        listed = ", ".join(known) or "none"
        return [CallIssue(kind=kind, function=function, argument=join(key),
                          message=f"{function}: unknown argument {join(key)!r}; known: {listed}")
                for key in value if key not in known]
    if error.validator == "type":
        kinds = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        message = f"{where}: expected {'/'.join(kinds)}, got {type(value).__name__} {value!r}"
    elif error.validator == "enum":
        message = f"{where}: {value!r} is not one of {', '.join(repr(v) for v in error.validator_value[:12])}"
    elif error.validator == "const":
        message = f"{where}: {value!r} must be {error.validator_value!r}"
    else:
        message = f"{where}: {error.message}"
    return [CallIssue(kind=kind, function=function, argument=path or None, message=message)]


def validate_call(call: Call, catalogue: Catalogue | Function, *, strict: bool = False) -> list[CallIssue]:
    """Every problem of the call; [] when valid (jsonschema, see `prefcall.schemas.validation`).

    strict=False accepts what NLSI-style strings produce: "True"/"false" for booleans, "3" for numbers, 3 for
    a string, and enum values differing only in case. An argument the function does not define is an issue.
    """
    function = catalogue if isinstance(catalogue, Function) else catalogue.function(call.name)
    if function is None or function.name != call.name:
        known = ", ".join(catalogue.names) if isinstance(catalogue, Catalogue) else catalogue.name
        return [CallIssue(kind="unknown_function", function=call.name,
                          message=f"unknown function {call.name!r}; known: {known}")]
    schema = closed({**function.parameters, "properties": function.properties})
    issues = [issue for error in errors(call.arguments, schema, strict=strict) for issue in _issues(error, function.name)]
    order = list(call.arguments)

    def position(issue: CallIssue) -> tuple[bool, int]:
        top = re.split(r"[.\[]", issue.argument or "", maxsplit=1)[0]
        return issue.kind == "missing_required", order.index(top) if top in order else len(order)

    return sorted(issues, key=position)


def check_call(call: Call, catalogue: Catalogue | Function, *, strict: bool = False) -> Call:
    """The call itself when valid; ValidationError listing every issue otherwise."""
    issues = validate_call(call, catalogue, strict=strict)
    if issues:
        raise ValidationError("; ".join(issue.message for issue in issues))
    return call
