"""NLSI-style call strings <-> `Call`s (the one call-string parser), and validation of a call against its catalogue.

Grammar (a small recursive-descent parser rather than regexes, so commas, parentheses and escaped
quotes inside values are handled):

    calls    := call ( [,;\\n] call )*
    call     := NAME "(" [ arg ( "," arg )* [","] ] ")"
    arg      := NAME "=" value
    value    := "..." | '...' | number | True | False | None | [ value, ... ] | bare word(s)

`format_call(parse_call(s)) == s` for every call string in NLSI dev (double-quoted values, ", "
between arguments); values keep their Python type (a quoted "True" stays the string "True"). One export
artefact is recovered: a value's own quote between two letters or digits (`"11 o"clock"`, `"Akiko"s"`, seen in
the NLSI test split) is read as the apostrophe it replaced, since a closing quote is never followed by a letter.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from prefcall.errors import ParseError, ValidationError
from prefcall.schemas.model import Call, Catalogue, Function

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError as SchemaError

NUMBER_RE = re.compile(r"-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
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
        if char == quote and _is_apostrophe(cur.text, cur.pos):
            out.append("'")  # a quote between two letters is an apostrophe: o"clock, Akiko"s (NLSI test gold)
            cur.pos += 1
            continue
        if char == quote:
            cur.pos += 1
            return "".join(out)
        out.append(char)
        cur.pos += 1
    raise ParseError(f"call string: unterminated {quote}-quoted value starting near column {cur.pos + 1}; close the quote")


def _is_apostrophe(text: str, pos: int) -> bool:
    """The quote at `pos` sits between two word characters (`o"clock`), so it cannot close the value: the data
    had an apostrophe there that an export turned into the value's own quote."""
    return 0 < pos < len(text) - 1 and text[pos - 1].isalnum() and text[pos + 1].isalnum()


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
    if NUMBER_RE.fullmatch(word):
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
    from prefcall.schemas.validation import path_text
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
    from prefcall.schemas.validation import closed, errors  # jsonschema: imported when a call is validated

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
