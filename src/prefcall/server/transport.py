"""prefcall's wrapper around the SDK's transports: every message the SDK cannot parse gets a JSON-RPC error.

The SDK's stdio transport (mcp 2.3) hands a line it cannot validate to the dispatcher as an exception, and the
dispatcher drops it: invalid JSON, a lone surrogate (``"\\ud800"``), nesting deeper than pydantic-core's
limit (about 200), a batch array, a message with wrong types or a null id all get no answer, and the host
waits forever. Here each line is checked first with the SDK's own validator; a line it would drop is answered
on the same write stream instead (the SDK's writer serialises it, so frames never interleave):

- -32700 parse error with id null when the line is not JSON at all (nothing to take an id from);
- -32600 invalid request otherwise, with the message's id when it has a usable one (a string or an integer
  of a request, never of a response), else id null. A batch is refused as a whole (MCP has no batches
  since 2025-06-18).

Streamable HTTP already answers most malformed bodies with a 4xx, but with pydantic's multi-line dump under
-32602 and without the id; `MalformedBodyGuard` gives HTTP the same one-line answers as stdio (400).

Lines the SDK accepts pass through untouched; valid notifications get no answer (JSON-RPC forbids one).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError as PydanticValidationError

log = logging.getLogger("prefcall.server")

MAX_MESSAGE_CHARS = 200  # of a detail quoted back in an error message
SCAN_LIMIT = 256 * 1024  # longest message whose id is looked for without recursion (deeper than json.loads goes)


# ------------------------------------------------------------------------------- the one classifier
def _first_error(exc: PydanticValidationError) -> str:
    errors = exc.errors(include_url=False)
    if not errors:
        return "not a JSON-RPC message"
    # A union of four message kinds: the error of the branch that got furthest says the most.
    best = max(errors, key=lambda e: len(e["loc"]))
    where = ".".join(str(p) for p in best["loc"][1:])
    text = f"{where}: {best['msg']}" if where else best["msg"]
    return " ".join(text.split())[:MAX_MESSAGE_CHARS]


def _usable_id(message: dict[str, Any]) -> str | int | None:
    """The id to answer with: a request's string or integer id (not a bool); None for a response or notification."""
    if "method" not in message and ("result" in message or "error" in message):
        return None  # a (broken) response: its id belongs to the server's own requests, never answer it
    value = message.get("id")
    if isinstance(value, bool):
        return None
    if isinstance(value, str) or (isinstance(value, int) and -(2**53) < value < 2**53):
        return value
    return None


def rejection(line: str | bytes) -> JSONRPCError | None:
    """None when the SDK accepts the message; else the JSON-RPC error that answers it."""
    try:
        message = jsonrpc_message_adapter.validate_json(line, by_name=False)
    except PydanticValidationError as exc:
        detail = _first_error(exc)
    else:
        # The SDK reads a request whose id is null, a bool, a float or an object as a notification (the extra
        # member is ignored) and never answers it; MCP ids are strings or integers, never null.
        if isinstance(message, JSONRPCNotification) and _has_id_member(line):
            return _error(None, INVALID_REQUEST,
                          "Invalid request: id must be a string or an integer (MCP does not allow null ids)")
        return None
    try:
        parsed = json.loads(line)
    except RecursionError:
        # Deeper than Python's own limit: the members of the outer object are still readable without recursion.
        text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
        members = _top_level_scalars(text)
        if members is None:
            return _error(None, PARSE_ERROR, f"Parse error: {detail}")
        return _error(_usable_id(members), INVALID_REQUEST,
                      "Invalid request: nested too deeply (the SDK's JSON parser stops at about 200 levels)")
    except ValueError:
        # Not JSON by the standard library either: nothing to take an id from.
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        reason = "empty message" if not line.strip() else detail
        return _error(None, PARSE_ERROR, f"Parse error: {reason}")
    if isinstance(parsed, list):
        return _error(None, INVALID_REQUEST, "Invalid request: JSON-RPC batches are not supported (MCP removed "
                                             "them): send one message at a time")
    if not isinstance(parsed, dict):
        kind = type(parsed).__name__
        return _error(None, INVALID_REQUEST, f"Invalid request: a message is a JSON object, not {kind}")
    return _error(_usable_id(parsed), INVALID_REQUEST, f"Invalid request: {_parse_reason(parsed, detail)}")


_DECODER = json.JSONDecoder()


def _top_level_scalars(text: str) -> dict[str, Any] | None:
    """The scalar members (and the names of the others) of a top-level JSON object, read without recursion;
    None when the text is not a complete object, or is longer than `SCAN_LIMIT` (a character loop in Python:
    kept short so that a huge deep body cannot hold the event loop). For messages too deep for `json.loads`."""
    if len(text) > SCAN_LIMIT:
        return None
    i, n = 0, len(text)
    while i < n and text[i].isspace():
        i += 1
    if i >= n or text[i] != "{":
        return None
    members: dict[str, Any] = {}
    depth, i, key, expect_key = 1, i + 1, None, True
    while i < n and depth > 0:
        char = text[i]
        if char == '"':
            try:
                value, end = _DECODER.raw_decode(text, i)
            except ValueError:
                return None
            if depth == 1 and expect_key:
                key, expect_key = value, False
            elif depth == 1 and key is not None:
                members[key], key = value, None
            i = end
            continue
        if char in "{[":
            if depth == 1 and key is not None:
                members[key], key = ..., None  # a nested value: present, not read
            depth += 1
        elif char in "}]":
            depth -= 1
        elif char == "," and depth == 1:
            expect_key = True
        elif depth == 1 and key is not None and not char.isspace() and char != ":":
            try:
                value, end = _DECODER.raw_decode(text, i)
            except ValueError:
                return None
            members[key], key = value, None
            i = end
            continue
        i += 1
    return members if depth == 0 else None


def _has_id_member(line: str | bytes) -> bool:
    needle = b'"id"' if isinstance(line, bytes) else '"id"'
    if needle not in line:  # type: ignore[operator]
        return False
    try:
        parsed = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return isinstance(parsed, dict) and "id" in parsed


def _parse_reason(parsed: Any, detail: str) -> str:
    """Why JSON that the standard library reads is refused: depth and lone surrogates said plainly."""
    if "recursion limit" in detail.lower():
        return "nested too deeply (the SDK's JSON parser stops at about 200 levels)"
    if detail.startswith("Invalid JSON"):
        try:
            json.dumps(parsed, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return "a string holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not valid Unicode"
    return detail


def _error(request_id: str | int | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))


# ------------------------------------------------------------------------------- stdio
class CheckedLines:
    """An async line source for the SDK's `stdio_server` that answers the lines it would drop."""

    def __init__(self, lines: Any) -> None:
        self._lines = lines
        self._write: Any = None
        self._bound = anyio.Event()
        self.rejected = 0

    def bind(self, write_stream: Any) -> None:
        self._write = write_stream
        self._bound.set()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._checked()

    async def _checked(self) -> AsyncIterator[str]:
        async for line in self._lines:
            error = rejection(line)
            if error is None:
                yield line
                continue
            self.rejected += 1
            log.info("answered an unreadable stdio message with %s: %s", error.error.code, error.error.message)
            await self._bound.wait()
            try:
                await self._write.send(SessionMessage(error))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return


def _stdin_lines() -> tuple[Any, Callable[[], None] | None]:
    """The process's stdin as the SDK reads it (fd 0 claimed and pointed at the null device while serving,
    so child processes cannot read the wire), or the plain buffer where that is not possible."""
    try:
        from mcp.server.stdio import _claim_fd, _open_stdin_diversion, _UnownedTextWrapper

        buffer, restore = _claim_fd(0, sys.stdin, "rb", _open_stdin_diversion)
        return anyio.wrap_file(_UnownedTextWrapper(buffer, encoding="utf-8", errors="replace")), restore
    except ImportError:  # a later SDK moved its helpers: read stdin in place
        import io

        wrapper = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
        return anyio.wrap_file(wrapper), None


@asynccontextmanager
async def checked_stdio(stdin: Any = None, stdout: Any = None) -> AsyncIterator[tuple[Any, Any]]:
    """`mcp.server.stdio.stdio_server` whose unreadable lines get a JSON-RPC error instead of silence."""
    restore = None
    if stdin is None:
        stdin, restore = _stdin_lines()
    lines = CheckedLines(stdin)
    try:
        async with stdio_server(stdin=lines, stdout=stdout) as (read_stream, write_stream):  # type: ignore[arg-type]
            lines.bind(write_stream)
            yield read_stream, write_stream
    finally:
        if restore is not None:
            restore()


async def serve_stdio(server: Any) -> None:
    """Run an MCPServer over stdio through `checked_stdio` (what `prefcall serve` uses)."""
    lowlevel = server._lowlevel_server  # the SDK's own run_stdio_async does the same, with the unchecked transport
    async with checked_stdio() as (read_stream, write_stream):
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


# ------------------------------------------------------------------------------- streamable HTTP
class MalformedBodyGuard:
    """ASGI wrapper for the MCP endpoint: a POST body the SDK cannot parse gets a one-line 400 JSON-RPC error.

    A body over `max_body` gets 413 with a JSON-RPC error (the SDK's own 413 is plain text); accepted bodies
    are replayed to the SDK, and every later `receive()` (the disconnect watch) reaches the client as before."""

    def __init__(self, app: Any, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if "json" not in headers.get("content-type", ""):
            await self.app(scope, receive, send)  # the SDK answers 415
            return
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body:
            await self._too_large(send)
            return
        chunks: list[bytes] = []
        size = 0
        pending: list[dict] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                pending.append(message)
                break
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if size > self.max_body or not message.get("more_body", False):
                break
        if size > self.max_body:
            await self._too_large(send)
            return
        body = b"".join(chunks)
        if not pending:
            error = rejection(body)
            if error is not None:
                log.info("answered an unreadable HTTP body with %s: %s", error.error.code, error.error.message)
                await _send_json(send, 400, error.model_dump(mode="json", by_alias=True, exclude_unset=True))
                return
        replay = [{"type": "http.request", "body": body, "more_body": False}, *pending]

        async def replayed() -> dict:
            if replay:
                return replay.pop(0)
            return await receive()

        await self.app(scope, replayed, send)

    async def _too_large(self, send: Callable) -> None:
        error = _error(None, INVALID_REQUEST, f"Invalid request: the body is larger than {self.max_body} bytes")
        await _send_json(send, 413, error.model_dump(mode="json", by_alias=True, exclude_unset=True))


async def _send_json(send: Callable, status: int, payload: dict) -> None:
    body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
