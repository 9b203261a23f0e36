"""Scripted served-engine backends for tests: recorded documentation fixtures behind an httpx.MockTransport.

Nothing here opens a socket. A `Stub` routes (method, path) to canned replies or small functions, records every
request body, and can stream server-sent events or NDJSON. `StubTokenizer` stands in for a server's tokenizer:
ChatML control markers are special tokens only when special-token parsing is on.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx

DATA = Path(__file__).parent / "data" / "served"
SPECIAL = {"<|im_start|>": 1, "<|im_end|>": 2}
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def fixture(name: str) -> dict[str, Any]:
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))


class StubTokenizer:
    """Word pieces with ids assigned on first sight (so /detokenize can invert them); ChatML markers special."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.inverse: dict[int, str] = {v: k for k, v in SPECIAL.items()}
        self.lock = threading.Lock()

    def piece_id(self, piece: str) -> int:
        with self.lock:
            if piece not in self.vocab:
                self.vocab[piece] = 100 + len(self.vocab)
                self.inverse[self.vocab[piece]] = piece
            return self.vocab[piece]

    def encode(self, text: str, *, parse_special: bool = True) -> list[int]:
        parts = re.split(r"(<\|im_start\|>|<\|im_end\|>)", text) if parse_special else [text]
        ids: list[int] = []
        for part in parts:
            if parse_special and part in SPECIAL:
                ids.append(SPECIAL[part])
                continue
            ids.extend(self.piece_id(w) for w in re.findall(r"\s*\S+|\s+", part))
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.inverse.get(i, "?") for i in ids)


def render_chatml(messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(CHATML).render(messages=messages, add_generation_prompt=add_generation_prompt)


def sse(events: Iterable[dict[str, Any]], done: bool = True) -> bytes:
    out = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return out + (b"data: [DONE]\n\n" if done else b"")


def ndjson(events: Iterable[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


Reply = Any  # dict/list -> JSON 200; httpx.Response; callable(body) -> either; list -> successive replies


class Stub:
    """A backend: routes, recorded requests, and a handler for httpx.MockTransport."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Reply] = {}
        self.requests: list[tuple[str, str, Any, httpx.Headers]] = []
        self.lock = threading.Lock()

    def route(self, method: str, path: str, reply: Reply) -> Stub:
        self.routes[(method, path)] = reply
        return self

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def bodies(self, path: str) -> list[Any]:
        return [body for _, p, body, _ in self.requests if p == path]

    def count(self, path: str) -> int:
        return len(self.bodies(path))

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        key = (request.method, request.url.path)
        with self.lock:
            self.requests.append((request.method, request.url.path, body, request.headers))
            reply = self.routes.get(key)
            if isinstance(reply, list) and reply and all(isinstance(r, (httpx.Response, Exception)) or callable(r)
                                                         for r in reply):
                reply = reply.pop(0) if len(reply) > 1 else reply[0]
        if reply is None:
            return httpx.Response(404, json={"error": {"code": 404, "message": f"no route {key}"}})
        if isinstance(reply, Exception):
            raise reply
        if callable(reply) and not isinstance(reply, httpx.Response):
            reply = reply(body)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, httpx.Response):
            return reply
        return httpx.Response(200, json=reply)


def streaming(chunks: Iterable[bytes], on_close: Callable[[], None] | None = None,
              content_type: str = "text/event-stream") -> httpx.Response:
    """A response whose body is produced lazily (so a client can leave it part-way)."""

    class Body(httpx.SyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            yield from chunks

        def close(self) -> None:
            if on_close is not None:
                on_close()

    return httpx.Response(200, headers={"content-type": content_type}, stream=Body())


def llama_server_stub(tokenizer: StubTokenizer | None = None) -> tuple[Stub, StubTokenizer]:
    """llama-server's documented endpoints: /props, /apply-template, /tokenize (parse_special honoured)."""
    tok = tokenizer or StubTokenizer()
    doc = fixture("llama_server")
    stub = Stub()
    stub.route("GET", "/props", doc["props"])
    stub.route("POST", "/apply-template", lambda body: {"prompt": render_chatml(body["messages"])})
    stub.route("POST", "/tokenize", lambda body: {"tokens": tok.encode(body["content"],
                                                                       parse_special=body.get("parse_special", True))})
    return stub, tok


def vllm_stub(version: str = "0.11.0") -> tuple[Stub, StubTokenizer]:
    tok = StubTokenizer()
    doc = fixture("vllm")
    stub = Stub()
    stub.route("GET", "/v1/models", doc["models"])
    stub.route("GET", "/version", {"version": version})

    def tokenize(body: dict[str, Any]) -> dict[str, Any]:
        text = render_chatml(body["messages"], body.get("add_generation_prompt", True)) if "messages" in body \
            else body["prompt"]
        ids = tok.encode(text)  # an HF tokenizer matches added special tokens in any text
        return {"count": len(ids), "max_model_len": 8192, "tokens": ids, "token_strs": None}

    stub.route("POST", "/tokenize", tokenize)
    stub.route("POST", "/detokenize", lambda body: {"prompt": tok.decode(body["tokens"])})
    return stub, tok
