"""Fuzz: several hundred malformed requests, generated from a fixed seed, over stdio (one server process) and
over streamable HTTP (one server, 2025 sessions and 2026-07-28 single requests). Every one must be answered
within a timeout; the counts are printed (`pytest -s`):

    answered cleanly (a JSON-RPC result, tool errors included) / protocol error (a JSON-RPC error) /
    silent (no answer in time) / crash (the process died, the connection failed or a 5xx)

and the server must still answer a valid request afterwards. The fake engine keeps it fast."""

from __future__ import annotations

import json
import os
import queue
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from mcp_types import JSONRPCNotification, JSONRPCRequest, jsonrpc_message_adapter
from test_server_support import TRAVEL_TOOLS, make_server, serving

import prefcall

SEED = 13
TIMEOUT_S = 10.0
SOURCE = Path(prefcall.__file__).resolve().parents[1]
SUPPORT = Path(__file__).with_name("test_server_support.py")
TOKEN = "fuzz-token-0123456789ab"
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}

TOOLS: dict[str, dict[str, Any]] = {  # each tool's arguments when well-formed
    "parse_request": {"user_id": "fuzz", "dialogue": "Find me a flight to Boston", "catalogue": "travel"},
    "select_tools_nlt": {"message": "a flight to Boston", "catalogue": "travel"},
    "clarify": {"user_id": "fuzz", "dialogue": "Find me a hotel", "catalogue": "travel", "elicit": False},
    "tag_profile": {"user_id": "fuzz", "catalogue": "travel"},
    "create_profile": {"user_id": "fuzz"},
    "add_instruction": {"user_id": "fuzz", "text": "When I book flights, I always fly Delta."},
    "remove_instruction": {"user_id": "fuzz", "instruction_id": 999999},
    "list_instructions": {"user_id": "fuzz"},
    "list_catalogues": {},
    "import_catalogue": {"name": "fuzzcat", "tools": TRAVEL_TOOLS[:1], "replace": True},
    "report_feedback": {"user_id": "fuzz", "dialogue": "Find me a flight to Boston", "catalogue": "travel",
                        "calls": [{"name": "GetFlights", "arguments": {"destination_city": "Boston"}}]},
}
WRONG_VALUES: list[Any] = [5, -1, 1.5, True, None, [], {}, [1, 2], {"a": {"b": 1}}, "", "x" * 300, "\ud800"]
SURROGATES = ["\ud800", "\udfff", "\ud83d", "a\udc00b", "\ud800\ud800"]


@dataclass
class Case:
    category: str
    payload: bytes
    obj: Any = None  # the structure it was dumped from (None for raw bytes)


def dump(obj: Any) -> bytes:
    return json.dumps(obj).encode()  # ensure_ascii: lone surrogates become \\ud800 escapes


def nested(depth: int, rng: random.Random) -> str:
    """JSON text nested `depth` levels deep (arrays or objects), built without recursion."""
    if rng.random() < 0.5:
        return "[" * depth + "1" + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


def expects_answer(payload: bytes) -> bool:
    """False for a well-formed notification or response: JSON-RPC answers neither, so they are no fuzz case."""
    try:
        message = jsonrpc_message_adapter.validate_json(payload, by_name=False)
    except Exception:  # noqa: BLE001
        return True
    if isinstance(message, JSONRPCRequest):
        return True
    if isinstance(message, JSONRPCNotification):
        try:
            return isinstance(json.loads(payload), dict) and "id" in json.loads(payload)  # an id the SDK ignores
        except ValueError:
            return True
    return False


def fuzz_cases(seed: int = SEED) -> list[Case]:
    rng = random.Random(seed)
    ids = iter(range(1000, 10**6))
    cases: list[Case] = []

    def request(method: str, params: Any = None, **extra: Any) -> dict:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": next(ids), "method": method}
        if params is not None:
            message["params"] = params
        message.update(extra)
        return message

    def call(tool: str, arguments: Any) -> dict:
        return request("tools/call", {"name": tool, "arguments": arguments})

    def add(category: str, obj: Any = None, raw: bytes | None = None) -> None:
        payload = raw if raw is not None else dump(obj)
        assert b"\n" not in payload
        cases.append(Case(category, payload, obj if raw is None else None))

    def valid() -> dict:
        tool = rng.choice(sorted(TOOLS))
        return rng.choice([call(tool, dict(TOOLS[tool])), request("tools/list", {}), request("ping"),
                           request("resources/read", {"uri": "schemas://travel"})])

    # truncated JSON
    for _ in range(40):
        text = dump(valid())
        add("truncated", raw=text[: rng.randrange(1, len(text) - 1)])
    # wrong types in the envelope
    for _ in range(40):
        message = valid()
        field = rng.choice(["jsonrpc", "method", "params", "id"])
        value = rng.choice(WRONG_VALUES if field != "id" else [True, 1.5, {}, [], [1], {"id": 1}, 10**30])
        if field == "params" and isinstance(value, dict):
            value = [value]
        message[field] = value
        add("wrong type", message)
    # deep nesting, in params, arguments or a value
    for depth in [201, 202, 256, 300, 500, 1000, 2000, 5000, 20000, 100000] * 2:
        where = rng.choice(["params", "arguments", "value"])
        prefix = f'{{"jsonrpc":"2.0","id":{next(ids)},"method":"tools/call","params":'
        if where == "params":
            text = prefix + nested(depth, rng) + "}"
        elif where == "arguments":
            text = prefix + '{"name":"parse_request","arguments":' + nested(depth, rng) + "}}"
        else:
            text = prefix + '{"name":"add_instruction","arguments":{"user_id":"fuzz","text":' + nested(depth, rng) + "}}}"
        add("deep nesting", raw=text.encode())
    # lone surrogates (escaped: valid JSON text, not valid Unicode)
    for _ in range(20):
        surrogate = rng.choice(SURROGATES)
        message = valid()
        spot = rng.choice(["method", "key", "value", "argument"])
        if spot == "method":
            message["method"] = surrogate
        elif spot == "key":
            message.setdefault("params", {})[surrogate] = 1
        elif spot == "value":
            message["params"] = {"name": "add_instruction", "arguments": {"user_id": "fuzz", "text": surrogate}}
        else:
            message["params"] = {"name": "parse_request", "arguments": {"user_id": surrogate,
                                                                        "dialogue": surrogate, "catalogue": "travel"}}
        add("lone surrogate", message)
    # unknown methods
    for method in ["", "foo", "tools/cal", "tools/call/", "TOOLS/LIST", "rpc.discover", "notifications/initialized",
                   "notifications/cancelled", "sampling/createMessage", "elicitation/create", "roots/list",
                   "x" * 5000, "tools/list\u0000", "../../etc/passwd", "résumé", "tasks/get", "completion/complete",
                   "logging/setLevel", "resources/subscribe", "server/discover"]:
        add("unknown method", request(method, {}))
    # bad params for each tool
    for tool, good in sorted(TOOLS.items()):
        fields = sorted(good) or ["user_id"]
        add("bad tool params", request("tools/call", {"name": tool}))  # no arguments
        add("bad tool params", call(tool, rng.choice([[], "x", 5, None, [good]])))
        add("bad tool params", call(tool, {}))
        add("bad tool params", call(tool, {**good, "unexpected": {"deep": [1, 2, 3]}}))
        for field in rng.sample(fields, min(3, len(fields))):
            add("bad tool params", call(tool, {**good, field: rng.choice(WRONG_VALUES)}))
        add("bad tool params", call(tool, {**good, fields[0]: "y" * 300_000}))
        add("bad tool params", request("tools/call", {"name": tool, "arguments": good, "_meta": "not an object"}))
    # oversized strings
    for size in [10_000, 100_000, 1_000_000, 2_000_000]:
        add("oversized", request("tools/call", {"name": "parse_request", "arguments": {
            "user_id": "fuzz", "dialogue": "z" * size, "catalogue": "travel"}}))
        add("oversized", request("z" * size))
        add("oversized", call("import_catalogue", {"name": "big", "tools": [
            {"name": f"T{i}", "description": "d" * 1000, "inputSchema": {"type": "object"}} for i in range(size // 10_000)]}))
    add("oversized", request("tools/call", {"name": "list_catalogues", "arguments": {"pad": "p" * 5_000_000}}))
    # batches
    for _ in range(14):
        add("batch", [valid() for _ in range(rng.randrange(1, 4))])
    add("batch", [])
    add("batch", [[valid()]])
    add("batch", [1, "two", None])
    # missing or wrong jsonrpc member
    for _ in range(15):
        message = valid()
        if rng.random() < 0.5:
            del message["jsonrpc"]
        else:
            message["jsonrpc"] = rng.choice(["1.0", "2", "3.0", 2.0, "2.0 ", None])
        add("jsonrpc member", message)
    # null and other unusable ids
    for _ in range(10):
        message = valid()
        message["id"] = None
        add("null id", message)
    # valid JSON that is no message
    for value in [0, -1, 3.14, "text", None, True, False, {}, {"jsonrpc": "2.0"}, {"id": 7}, {"method": "ping"},
                  {"jsonrpc": "2.0", "id": 8}]:
        add("not a message", value)
    # broken responses (a well-formed one is not answered: no case)
    add("broken response", {"jsonrpc": "2.0", "id": 5, "result": 5})
    add("broken response", {"jsonrpc": "2.0", "id": 5, "error": {"message": "no code"}})
    add("broken response", {"jsonrpc": "2.0", "id": 5, "error": {"code": "one", "message": "m"}})
    add("broken response", {"jsonrpc": "2.0", "result": {}})
    # bytes that are not UTF-8, or not JSON at all
    for raw in [b"\xff\xfe\xfd", b'{"jsonrpc":"2.0","id":77,"method":"\xed\xa0\x80"}', b"\x00" * 10, b"\xc3\x28",
                b'{"jsonrpc":"2.0","id":78,"method":"ping"\xff}', b"NaN", b"Infinity", b"{'single': 'quotes'}",
                b"{\"a\":1,}", b"   ", b"", b"\t", b"/* comment */ {}", b'{"jsonrpc":"2.0","id":79,"method":"ping"} x']:
        add("not JSON", raw=raw)
    # core methods with bad params
    for method, params in [
        ("resources/read", {"uri": 5}), ("resources/read", {"uri": "profiles://someone-else"}),
        ("resources/read", {"uri": "schemas://../../etc/passwd"}), ("resources/read", {"uri": "file:///etc/passwd"}),
        ("resources/read", {}), ("resources/templates/list", {"cursor": 5}), ("resources/list", {"cursor": "zzz"}),
        ("prompts/get", {"name": "nope"}), ("prompts/get", {"name": "use_prefcall", "arguments": {"user_id": 5}}),
        ("prompts/get", {}), ("prompts/list", {"cursor": []}), ("tools/list", {"cursor": {"a": 1}}),
        ("tools/call", {"name": "nope", "arguments": {}}), ("tools/call", {"name": 5}), ("tools/call", {}),
        ("tools/call", None), ("logging/setLevel", {"level": "loud"}), ("logging/setLevel", {}),
        ("completion/complete", {"ref": 5}), ("ping", {"extra": [1]}), ("ping", []),
        ("initialize", {"protocolVersion": "1999-01-01", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}),
        ("initialize", {}), ("initialize", 5), ("server/discover", {"_meta": ENVELOPE}),
    ]:
        add("core method params", request(method, params))
    assert all(expects_answer(c.payload) for c in cases), [c for c in cases if not expects_answer(c.payload)][:3]
    return cases


def request_id(case: Case) -> Any:
    return case.obj.get("id") if isinstance(case.obj, dict) else None


def classify(message: dict | None) -> str:
    if message is None:
        return "silent"
    if "error" in message:
        return "protocol error"
    return "answered cleanly"


def summary(transport: str, outcomes: list[tuple[Case, str]]) -> Counter:
    counts = Counter(outcome for _, outcome in outcomes)
    by_category = Counter((case.category, outcome) for case, outcome in outcomes)
    print(f"\nfuzz over {transport}: {len(outcomes)} malformed requests (seed {SEED}): "
          f"answered cleanly {counts['answered cleanly']}, protocol error {counts['protocol error']}, "
          f"silent {counts['silent']}, crash {counts['crash']}")
    for (category, outcome), n in sorted(by_category.items()):
        print(f"  {category:20s} {outcome:17s} {n}")
    return counts


# ------------------------------------------------------------------------------- stdio
class StdioServer:
    """The support server (fake engine) as a subprocess, read by a thread into a queue of parsed lines."""

    def __init__(self, db: Path) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT.parent), str(SOURCE)])}
        self.process = subprocess.Popen([sys.executable, str(SUPPORT), str(db)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self.lines: queue.Queue[dict | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                self.lines.put(json.loads(line))
            except ValueError:
                self.lines.put({"unreadable": line.decode("utf-8", "replace")})
        self.lines.put(None)  # EOF: the process is gone

    def send(self, payload: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(payload + b"\n")
        self.process.stdin.flush()

    def answer(self, wanted: Any, timeout: float = TIMEOUT_S) -> dict | None | str:
        """The response to request `wanted` (or an id-null error), None on timeout, "crash" at EOF."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = self.lines.get(timeout=left)
            except queue.Empty:
                return None
            if message is None:
                return "crash"
            if "method" in message or not ("result" in message or "error" in message):
                continue  # a notification (log, progress) or a request from the server
            if wanted is None or message.get("id") is None or message.get("id") == wanted:
                return message  # one request at a time: a case without a readable id takes the next answer
        return None

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


def test_every_malformed_request_over_stdio_gets_an_answer(tmp_path: Path) -> None:
    cases = fuzz_cases()
    assert len(cases) >= 300
    server = StdioServer(tmp_path / "fuzz.db")
    outcomes: list[tuple[Case, str]] = []
    try:
        server.send(dump({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}}))
        assert "result" in (server.answer(1, timeout=60) or {})
        server.send(dump({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        server.send(dump({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "import_catalogue", "arguments": {"name": "travel", "tools": TRAVEL_TOOLS}}}))
        assert "result" in (server.answer(2) or {})
        for case in cases:
            if server.process.poll() is not None:
                outcomes.append((case, "crash"))
                continue
            try:
                server.send(case.payload)
            except (BrokenPipeError, OSError):
                outcomes.append((case, "crash"))
                continue
            got = server.answer(request_id(case))
            outcomes.append((case, "crash" if got == "crash" else classify(got)))  # type: ignore[arg-type]
        counts = summary("stdio", outcomes)
        server.send(dump({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                          "params": {"name": "list_catalogues", "arguments": {}}}))
        after = server.answer(3)
    finally:
        server.close()
    silent = [c.payload[:120] for c, o in outcomes if o == "silent"]
    assert counts["silent"] == 0, silent[:5]
    assert counts["crash"] == 0
    assert isinstance(after, dict) and "result" in after and not after["result"].get("isError"), after
    assert counts["protocol error"] > len(cases) / 3  # most malformed requests are protocol errors


# ------------------------------------------------------------------------------- streamable HTTP
def http_answer(response: httpx.Response, wanted: Any) -> dict | None:
    """The JSON-RPC response in a JSON or SSE body (None when there is none)."""
    kind = response.headers.get("content-type", "")
    messages: list[Any] = []
    if "text/event-stream" in kind:
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                try:
                    messages.append(json.loads(line[5:]))
                except ValueError:
                    pass
    elif response.content:
        try:
            messages.append(json.loads(response.content))
        except ValueError:
            return None
    for message in messages:
        if isinstance(message, dict) and ("result" in message or "error" in message) and "method" not in message:
            if wanted is None or message.get("id") is None or message.get("id") == wanted:
                return message
    return None


def header_safe(value: str) -> bool:
    return value.isascii() and value.isprintable() and len(value) < 1000


def modern_variant(case: Case) -> tuple[bytes, dict[str, str]]:
    """The same case as a 2026-07-28 single request: envelope in params._meta, routing headers from the body."""
    headers = {"mcp-protocol-version": MODERN}
    obj = case.obj
    if not isinstance(obj, dict):
        return case.payload, headers
    obj = dict(obj)
    if isinstance(obj.get("method"), str) and header_safe(obj["method"]):
        headers["mcp-method"] = obj["method"]
    params = obj.get("params")
    if isinstance(params, dict):
        params = {**params, "_meta": {**ENVELOPE, **(params.get("_meta") if isinstance(params.get("_meta"), dict) else {})}}
        obj["params"] = params
        if isinstance(params.get("name"), str) and header_safe(params["name"]):
            headers["mcp-name"] = params["name"]
    return dump(obj), headers


def test_every_malformed_request_over_http_gets_an_answer(tmp_path: Path) -> None:
    cases = fuzz_cases()
    base_headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
                    "Authorization": f"Bearer {TOKEN}"}
    outcomes: list[tuple[Case, str]] = []
    with serving(make_server(tmp_path, tokens={TOKEN: "fuzz"})) as base, \
            httpx.Client(base_url=base, timeout=TIMEOUT_S) as http:
        opened = http.post("/mcp", headers=base_headers, json={
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}})
        assert opened.status_code == 200, opened.text
        session = {**base_headers, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": LEGACY}
        assert http.post("/mcp", headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
                         ).status_code == 202
        imported = http.post("/mcp", headers=session, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                                            "params": {"name": "import_catalogue", "arguments": {
                                                                "name": "travel", "tools": TRAVEL_TOOLS}}})
        assert "result" in (http_answer(imported, 2) or {})
        for index, case in enumerate(cases):
            # two thirds through the 2025 session, one third as 2026-07-28 single requests
            payload, headers = (case.payload, session) if index % 3 else modern_variant(case)
            try:
                response = http.post("/mcp", headers={**base_headers, **headers}, content=payload)
            except httpx.TimeoutException:
                outcomes.append((case, "silent"))
                continue
            except httpx.TransportError:
                outcomes.append((case, "crash"))
                continue
            if response.status_code >= 500:
                outcomes.append((case, "crash"))
                continue
            outcomes.append((case, classify(http_answer(response, request_id(case)))))
        counts = summary("HTTP", outcomes)
        after = http.post("/mcp", headers=session, json={"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                                         "params": {"name": "list_catalogues", "arguments": {}}})
        healthy = http.get("/healthz")
    silent = [c.payload[:120] for c, o in outcomes if o == "silent"]
    assert counts["silent"] == 0, silent[:5]
    assert counts["crash"] == 0
    answer = http_answer(after, 3)
    assert answer is not None and "result" in answer and not answer["result"].get("isError"), after.text[:300]
    assert healthy.json() == {"status": "ready"}


def test_the_cases_are_the_same_for_the_same_seed() -> None:
    first, second = fuzz_cases(), fuzz_cases()
    assert [c.payload for c in first] == [c.payload for c in second]
    categories = Counter(c.category for c in first)
    assert len(categories) >= 12 and min(categories.values()) >= 4, categories


def test_the_error_carries_the_id_where_one_can_be_read_and_null_where_not() -> None:
    from prefcall.server.transport import rejection

    def answer(text: str) -> tuple[Any, int]:
        error = rejection(text)
        assert error is not None, text[:80]
        assert "\n" not in error.error.message
        return error.id, error.error.code

    deep = 5000  # deeper than Python's own json recursion limit too
    assert answer('{"jsonrpc":"2.0","id":7,"method":"tools/list"') == (None, -32700)  # truncated
    assert answer("") == (None, -32700)
    assert answer('{"jsonrpc":"2.0","id":7,"method":"ping","params":{"x":"\\ud800"}}') == (7, -32600)
    assert answer('{"jsonrpc":"2.0","id":"a","method":"ping","params":' + "[" * 300 + "]" * 300 + "}") == ("a", -32600)
    assert answer('{"params":' + '{"a":' * deep + "1" + "}" * deep + ',"id":9,"method":"x","jsonrpc":"2.0"}') == (9, -32600)
    assert answer('{"id":5,"a":' + "[" * deep) == (None, -32700)  # deep and truncated: a parse error
    assert answer('[{"jsonrpc":"2.0","id":5,"method":"ping"}]') == (None, -32600)  # batch
    assert answer('{"jsonrpc":"2.0","id":6,"method":7}') == (6, -32600)
    assert answer('{"id":7,"method":"ping"}') == (7, -32600)
    assert answer('{"jsonrpc":"2.0","id":null,"method":"ping"}') == (None, -32600)
    assert answer('{"jsonrpc":"2.0","id":true,"method":"ping"}') == (None, -32600)
    assert answer('{"jsonrpc":"2.0","id":5,"result":5}') == (None, -32600)  # a broken response: never its id
    assert rejection('{"jsonrpc":"2.0","id":8,"method":"nope"}') is None  # the SDK answers: method not found
    assert rejection('{"jsonrpc":"2.0","method":"notifications/initialized"}') is None  # never answered
