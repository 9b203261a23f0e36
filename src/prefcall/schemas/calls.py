"""NLSI-style call strings <-> `Call`s, and validation of a call against its catalogue.

Grammar (a small recursive-descent parser rather than regexes, so commas, parentheses and escaped
quotes inside values are handled):

    calls    := call ( [,;\\n] call )*
    call     := NAME "(" [ arg ( "," arg )* [","] ] ")"
    arg      := NAME "=" value
    value    := "..." | '...' | number | True | False | None | [ value, ... ] | bare word(s)

`format_call(parse_call(s)) == s` for every call string in NLSI dev (double-quoted values, ", "
between arguments); values keep their Python type (a quoted "True" stays the string "True").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from prefcall.errors import ParseError, ValidationError
from prefcall.schemas.model import Call, Catalogue, Function

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_NUMBER_RE = re.compile(r"-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
_LITERALS = {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}


@dataclass
class _Cursor:
    text: str
    pos: int = 0

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r":
            self.pos += 1

    def skip_space_and_newlines(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def fail(self, what: str) -> ParseError:
        found = repr(self.text[self.pos : self.pos + 20]) if self.pos < len(self.text) else "end of text"
        return ParseError(f"call string, column {self.pos + 1}: expected {what}, found {found}; write Name(arg=\"value\")")

    def expect(self, char: str) -> None:
        self.skip_space_and_newlines()
        if self.peek() != char:
            raise self.fail(repr(char))
        self.pos += 1

    def name(self) -> str:
        self.skip_space_and_newlines()
        match = _NAME_RE.match(self.text, self.pos)
        if not match:
            raise self.fail("a name")
        self.pos = match.end()
        return match.group()


def _string(cur: _Cursor) -> str:
    quote = cur.peek()
    cur.pos += 1
    out = []
    while cur.pos < len(cur.text):
        char = cur.text[cur.pos]
        if char == "\\" and cur.pos + 1 < len(cur.text):
            nxt = cur.text[cur.pos + 1]
            out.append(_ESCAPES.get(nxt, "\\" + nxt))
            cur.pos += 2
            continue
        if char == quote:
            cur.pos += 1
            return "".join(out)
        out.append(char)
        cur.pos += 1
    raise ParseError(f"call string: unterminated {quote}-quoted value starting near column {cur.pos + 1}; close the quote")


def _bare(cur: _Cursor) -> Any:
    """Unquoted value: up to the next top-level ',' or ')'; numbers and True/False/None keep their type."""
    start = cur.pos
    while cur.pos < len(cur.text) and cur.text[cur.pos] not in ",)]":
        cur.pos += 1
    word = cur.text[start : cur.pos].strip()
    if not word:
        raise cur.fail("a value")
    if word in _LITERALS:
        return _LITERALS[word]
    if _NUMBER_RE.fullmatch(word):
        return float(word) if any(c in word for c in ".eE") else int(word)
    return word


def _value(cur: _Cursor) -> Any:
    cur.skip_space_and_newlines()
    char = cur.peek()
    if char in ('"', "'"):
        return _string(cur)
    if char == "[":
        cur.pos += 1
        items: list[Any] = []
        cur.skip_space_and_newlines()
        while cur.peek() != "]":
            items.append(_value(cur))
            cur.skip_space_and_newlines()
            if cur.peek() == ",":
                cur.pos += 1
                cur.skip_space_and_newlines()
            elif cur.peek() != "]":
                raise cur.fail("',' or ']'")
        cur.pos += 1
        return items
    if char == "{":
        return _json_object(cur)
    return _bare(cur)


def _json_object(cur: _Cursor) -> Any:
    decoder = json.JSONDecoder()
    try:
        value, end = decoder.raw_decode(cur.text, cur.pos)
    except json.JSONDecodeError as exc:
        raise cur.fail("a JSON object") from exc
    cur.pos = end
    return value


def _call(cur: _Cursor) -> Call:
    name = cur.name()
    cur.expect("(")
    arguments: dict[str, Any] = {}
    cur.skip_space_and_newlines()
    while cur.peek() != ")":
        key = cur.name()
        if key in arguments:
            raise ParseError(f"call string: argument {key!r} of {name} is given twice; keep one")
        cur.expect("=")
        arguments[key] = _value(cur)
        cur.skip_space_and_newlines()
        if cur.peek() == ",":
            cur.pos += 1
            cur.skip_space_and_newlines()
        elif cur.peek() != ")":
            raise cur.fail("',' or ')'")
    cur.pos += 1
    return Call(name=name, arguments=arguments)


def parse_calls(text: str) -> list[Call]:
    """Every call in the text (separated by commas, semicolons or newlines); ParseError on malformed input."""
    cur = _Cursor(text)
    calls: list[Call] = []
    cur.skip_space_and_newlines()
    while cur.pos < len(text):
        calls.append(_call(cur))
        cur.skip_space_and_newlines()
        if cur.peek() in (",", ";"):
            cur.pos += 1
            cur.skip_space_and_newlines()
    return calls


def parse_call(text: str) -> Call:
    """Exactly one call."""
    calls = parse_calls(text)
    if len(calls) != 1:
        raise ParseError(f"call string: expected exactly one call, found {len(calls)}; pass one Name(...) call")
    return calls[0]


def _format_value(value: Any, *, quote_scalars: bool) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool) or value is None:
        text = {True: "True", False: "False", None: "None"}[value]
        return f'"{text}"' if quote_scalars else text
    if isinstance(value, (int, float)):
        return f'"{value}"' if quote_scalars else repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_format_value(v, quote_scalars=quote_scalars) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def format_call(call: Call, *, quote_scalars: bool = False) -> str:
    """`Name(arg="value", ...)` in argument order; `quote_scalars` writes True/3 as "True"/"3" (NLSI gold style)."""
    args = ", ".join(f"{k}={_format_value(v, quote_scalars=quote_scalars)}" for k, v in call.arguments.items())
    return f"{call.name}({args})"


def format_calls(calls: list[Call], *, quote_scalars: bool = False) -> str:
    return ", ".join(format_call(c, quote_scalars=quote_scalars) for c in calls)


# ---------------------------------------------------------------------------- validation
IssueKind = Literal["unknown_function", "unknown_argument", "wrong_type", "not_in_enum", "missing_required"]


class CallIssue(BaseModel):
    kind: IssueKind
    function: str
    argument: str | None = None  # dotted path for nested values, e.g. "filters.city"
    message: str


_BOOL_STRINGS = {"true", "false"}


def _type_ok(value: Any, kind: str, *, strict: bool) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool) or (not strict and isinstance(value, str) and value.lower() in _BOOL_STRINGS)
    if kind in ("integer", "number"):
        if isinstance(value, bool):
            return False
        if isinstance(value, str) and not strict:
            return bool(_NUMBER_RE.fullmatch(value.strip())) and (kind == "number" or value.strip().lstrip("-").isdigit())
        if kind == "integer":
            return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        return isinstance(value, (int, float))
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    if kind == "null":
        return value is None
    return True


def _enum_ok(value: Any, allowed: list[Any], *, strict: bool) -> bool:
    if value in allowed:
        return True
    # Lenient: model output often differs from the enum in case or quotes numbers ("2" for 2).
    return not strict and str(value).strip().lower() in {str(a).lower() for a in allowed}


def _check_value(value: Any, schema: dict[str, Any], function: str, path: str, strict: bool) -> list[CallIssue]:
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    if kinds and not any(_type_ok(value, k, strict=strict) for k in kinds):
        return [CallIssue(kind="wrong_type", function=function, argument=path,
                          message=f"{function}.{path}: expected {'/'.join(kinds)}, got {type(value).__name__} {value!r}")]
    if "enum" in schema and not _enum_ok(value, schema["enum"], strict=strict):
        shown = ", ".join(repr(v) for v in schema["enum"][:12])
        return [CallIssue(kind="not_in_enum", function=function, argument=path,
                          message=f"{function}.{path}: {value!r} is not one of {shown}")]
    if "const" in schema and value != schema["const"]:
        return [CallIssue(kind="not_in_enum", function=function, argument=path,
                          message=f"{function}.{path}: {value!r} must be {schema['const']!r}")]
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    if alternatives:
        per_alternative = [_check_value(value, alt, function, path, strict) for alt in alternatives]
        if all(per_alternative):
            return per_alternative[0]
    issues: list[CallIssue] = []
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            issues += _check_value(item, schema["items"], function, f"{path}[{i}]", strict)
    if isinstance(value, dict) and ("properties" in schema or schema.get("type") == "object"):
        issues += _check_object(value, schema, function, path, strict)
    return issues


def _check_object(value: dict[str, Any], schema: dict[str, Any], function: str, prefix: str, strict: bool) -> list[CallIssue]:
    properties = schema.get("properties") or {}
    issues: list[CallIssue] = []
    join = (lambda k: f"{prefix}.{k}") if prefix else (lambda k: k)
    for key, item in value.items():
        if key not in properties:
            if schema.get("additionalProperties") is True or (prefix and "properties" not in schema):
                continue
            known = ", ".join(properties) or "none"
            issues.append(CallIssue(kind="unknown_argument", function=function, argument=join(key),
                                    message=f"{function}: unknown argument {join(key)!r}; known: {known}"))
            continue
        issues += _check_value(item, properties[key], function, join(key), strict)
    for key in schema.get("required") or []:
        if key not in value:
            issues.append(CallIssue(kind="missing_required", function=function, argument=join(key),
                                    message=f"{function}: missing required argument {join(key)!r}"))
    return issues


def validate_call(call: Call, catalogue: Catalogue | Function, *, strict: bool = False) -> list[CallIssue]:
    """Every problem of the call; [] when valid.

    strict=False accepts what NLSI-style strings produce: "True"/"false" for booleans, "3" for numbers,
    and enum values differing only in case.
    """
    function = catalogue if isinstance(catalogue, Function) else catalogue.function(call.name)
    if function is None or function.name != call.name:
        known = ", ".join(catalogue.names) if isinstance(catalogue, Catalogue) else catalogue.name
        return [CallIssue(kind="unknown_function", function=call.name,
                          message=f"unknown function {call.name!r}; known: {known}")]
    return _check_object(call.arguments, function.parameters, function.name, "", strict)


def check_call(call: Call, catalogue: Catalogue | Function, *, strict: bool = False) -> Call:
    """The call itself when valid; ValidationError listing every issue otherwise."""
    issues = validate_call(call, catalogue, strict=strict)
    if issues:
        raise ValidationError("; ".join(issue.message for issue in issues))
    return call
