"""Shared helpers for the server tests: a schema-aware fake engine, a small catalogue, a server factory.

The fake answers grammar-constrained requests with the smallest JSON valid for the schema unless a rule
matches, so server tests do not depend on each strategy's exact prompts; rules (prompt substring ->
text or function of the prompt) give the targeted answers a test needs.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from prefcall.config import Settings
from prefcall.engine.base import LOCAL, Generation, Prompt, Scope, TokenLogprob, schema_key_order
from prefcall.engine.fake import FakeEmbedder, FakeEngine, check_canned_json, fake_tokenize, render_fake

Reply = str | Callable[[str], str]

TRAVEL_TOOLS = [
    {
        "name": "GetFlights",
        "description": "Find flights between two cities.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "origin_city": {"type": "string", "description": "departure city"},
                "destination_city": {"type": "string", "description": "arrival city"},
                "airlines": {"type": "string", "description": "preferred airline"},
            },
            "required": ["destination_city"],
        },
    },
    {
        "name": "GetHotels",
        "description": "Find hotels in a city.",
        "inputSchema": {
            "type": "object",
            "properties": {"location": {"type": "string"}, "star_rating": {"type": "string"}},
            "required": ["location"],
        },
    },
]


def minimal_instance(schema: dict[str, Any]) -> Any:
    """The smallest value valid for a (grammar-style) JSON Schema."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return minimal_instance(schema[key][0])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = kind[0]
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        return {k: minimal_instance(props.get(k, {})) for k in schema_key_order(schema) if k in required}
    if kind == "array":
        return [minimal_instance(schema.get("items", {})) for _ in range(schema.get("minItems", 0))]
    return {"string": "x", "integer": 0, "number": 0, "boolean": False, "null": None}.get(kind, "x")


class RuleEngine(FakeEngine):
    """FakeEngine whose replies come from (substring, reply) rules, else the schema's minimal instance."""

    def __init__(self, rules: list[tuple[str, Reply]] | None = None, default: str = "Continue") -> None:
        super().__init__()
        self.rules = list(rules or [])
        self.default_text = default

    def generate(self, prompt: Prompt, *, max_tokens: int = 256, stop=(), json_schema=None, top_logprobs: int = 0,
                 scope: Scope = LOCAL, cancel=None):
        rendered = render_fake(prompt)
        with self._lock:
            self.prompts.append(rendered)
            self.calls.append({"kind": "generate", "prompt": rendered, "json_schema": json_schema, "scope": scope})
            text = None
            for needle, reply in self.rules:
                if needle in rendered:
                    text = reply(rendered) if callable(reply) else reply
                    break
            if text is None:
                text = json.dumps(minimal_instance(json_schema)) if json_schema is not None else self.default_text
            for s in stop:
                if s and s in text:
                    text = text[: text.index(s)]
            if json_schema is not None:
                check_canned_json(text, json_schema)
            pieces = fake_tokenize(text)[:max_tokens] or [""]
            tokens = [TokenLogprob(p, -0.05) for p in pieces]
            return Generation(text="".join(pieces), tokens=tokens, usage=self._usage(prompt, scope),
                              finish_reason="stop")


def airline_from_instructions(prompt: str) -> str:
    """Arguments reply that copies the airline named in the user's standing instructions (per-user answers)."""
    found = re.search(r"I always fly (\w+)", prompt)
    arguments = {"destination_city": "Boston"}
    if found:
        arguments["airlines"] = found.group(1)
    return json.dumps([arguments])


def travel_engine() -> RuleEngine:
    return RuleEngine([
        ("decides which API functions to call", '["GetFlights"]'),
        ("fills in the arguments of the API function GetFlights", airline_from_instructions),
        ("fills in the arguments of the API function GetHotels", '[{"location": "Boston"}]'),
    ])


def server_settings(tmp_path: Path, **overrides: Any) -> Settings:
    return Settings(data_dir=tmp_path / "data", db_path=tmp_path / "prefcall.db", **overrides)


def make_server(tmp_path: Path, engine: FakeEngine | None = None, *, settings: dict[str, Any] | None = None,
                **kwargs: Any):
    """The server on a temporary database with the rule engine; `settings`: overrides (e.g. smaller limits)."""
    from prefcall.server.app import create_server

    return create_server(server_settings(tmp_path, **(settings or {})), engine=engine or travel_engine(),
                         embedder=FakeEmbedder(), **kwargs)


@pytest.fixture
def travel_server(tmp_path: Path):
    return make_server(tmp_path)


def serve_fake_stdio(db_path: str) -> None:
    """`python tests/test_server_support.py DB`: prefcall over stdio with the rule engine (subprocess tests)."""
    import anyio

    from prefcall.server.app import create_server
    from prefcall.server.transport import serve_stdio

    settings = Settings(data_dir=Path(db_path).parent / "data", db_path=Path(db_path))
    server = create_server(settings, engine=travel_engine(), embedder=FakeEmbedder())
    anyio.run(serve_stdio, server)


if __name__ == "__main__":
    import sys

    serve_fake_stdio(sys.argv[1])


# ------------------------------------------------------------------------------- HTTP in a thread
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serving(server) -> Iterator[str]:
    """`server` over streamable HTTP on 127.0.0.1:<free port>, uvicorn in a thread; yields the base URL and closes
    the server's services afterwards."""
    from prefcall.server.http import http_app

    port = free_port()
    runner = uvicorn.Server(uvicorn.Config(http_app(server, host="127.0.0.1"), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not runner.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("HTTP server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        runner.should_exit = True
        thread.join(timeout=10)
        server.services.close()
