"""NLSI-style call strings <-> `Call`s (the one call-string parser); a call is checked against its catalogue in
`prefcall.schemas.validation` (`validate_call`, `check_call`).

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
from typing import Any

from prefcall.errors import ParseError
from prefcall.schemas.model import Call

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
