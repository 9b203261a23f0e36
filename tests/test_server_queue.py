"""The model queue: bounded, round-robin between users, a per-user share, one-line busy errors, and
cancellation that reaches the engine between tokens. Unit tests of `ModelQueue`, then the same through the
real protocol (streamable HTTP, three users, a fake engine the test holds on its first token)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from test_server_support import TRAVEL_TOOLS, RuleEngine, server_settings, serving, travel_engine

from prefcall.engine.base import LOCAL, ChatMessage, Prompt, Scope
from prefcall.engine.cancel import CancelBound, current_cancel
from prefcall.engine.fake import FakeEmbedder
from prefcall.errors import BusyError, CancelledError
from prefcall.server.runtime import ModelQueue

ALICE, BOB, CAROL = "alice-token-0123456789", "bob-token-0123456789ab", "carol-token-0123456789"
TOKENS = {ALICE: "alice", BOB: "bob", CAROL: "carol"}


def wait_until(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


# ------------------------------------------------------------------------------- ModelQueue itself
def test_waiting_jobs_are_served_round_robin_between_users() -> None:
    queue = ModelQueue(size=10, per_user=4)
    gate = threading.Event()
    order: list[str] = []
    try:
        blocker = queue.submit("zed", gate.wait)
        wait_until(lambda: queue.snapshot()["running"] == "zed")
        jobs = [queue.submit(user, lambda user=user, i=i: order.append(f"{user}{i}"))
                for i, user in enumerate(["alice", "alice", "alice", "bob", "carol", "bob"])]
        assert queue.waiting == 6
        gate.set()
        for job in [blocker, *jobs]:
            job.future.result(timeout=10)
        # alice arrived first with three jobs, but bob and carol each get a turn between hers
        assert order == ["alice0", "bob3", "carol4", "alice1", "bob5", "alice2"]
    finally:
        queue.shutdown()


def test_a_full_queue_and_a_users_share_are_one_line_busy_errors() -> None:
    queue = ModelQueue(size=2, per_user=2, first_estimate_s=3.0)
    gate = threading.Event()
    try:
        queue.submit("alice", gate.wait)
        wait_until(lambda: queue.snapshot()["running"] == "alice")
        queue.submit("alice", lambda: None)
        with pytest.raises(BusyError) as share:
            queue.submit("alice", lambda: None)  # running + waiting = her share of 2
        assert "\n" not in str(share.value)
        assert str(share.value).startswith("busy: you already have 2 requests for the model in the queue")
        assert "PREFCALL_QUEUE_PER_USER=2" in str(share.value)
        queue.submit("bob", lambda: None)
        with pytest.raises(BusyError) as full:
            queue.submit("carol", lambda: None)
        assert str(full.value) == "busy: the model queue is full (2 waiting); retry in ~9 s"
        assert full.value.retry_after_s == 9
        assert queue.snapshot()["refused"] == 2
    finally:
        gate.set()
        queue.shutdown()


class SlowEngine(RuleEngine):
    """Generates one token every 20 ms for up to `tokens` tokens, checking cancellation between tokens."""

    def __init__(self, tokens: int = 500) -> None:
        super().__init__(travel_engine().rules)
        self.tokens = tokens
        self.started = threading.Event()
        self.cancelled = threading.Event()
        self.hold = threading.Event()  # set: no more waiting (tests release the engine with it)

    def generate(self, prompt: Prompt, *, max_tokens: int = 256, stop=(), json_schema=None, top_logprobs: int = 0,
                 scope: Scope = LOCAL, cancel=None):
        self.started.set()
        for _ in range(self.tokens):
            if cancel is not None and cancel.is_set():
                self.cancelled.set()
                raise CancelledError("the request was cancelled (the client went away or gave up): nothing to do")
            if self.hold.wait(0.02):
                break
        return super().generate(prompt, max_tokens=max_tokens, stop=stop, json_schema=json_schema,
                                top_logprobs=top_logprobs, scope=scope, cancel=cancel)


def test_a_cancelled_caller_stops_its_running_job_between_tokens_and_leaves_the_queue_if_waiting() -> None:
    # 100k tokens at 20 ms: the job never ends on its own within the test, so only cancellation sets `cancelled`
    # (events prove it, not the wall clock).
    engine = CancelBound(SlowEngine(tokens=100_000))
    queue = ModelQueue(size=4, per_user=4)

    async def scenario() -> None:
        ask = Prompt(messages=(ChatMessage("user", "hi"),))
        running = asyncio.ensure_future(queue.call(lambda: engine.generate(ask)))
        waiting = asyncio.ensure_future(queue.call(lambda: "never runs"))
        await asyncio.to_thread(engine.inner.started.wait, 10)
        assert queue.waiting == 1
        waiting.cancel()
        running.cancel()
        for task in (running, waiting):
            with pytest.raises(asyncio.CancelledError):
                await task
        assert await asyncio.to_thread(engine.inner.cancelled.wait, 60)
        assert queue.waiting == 0
        assert await queue.call(lambda: current_cancel() is not None) is True  # the model is free again

    try:
        asyncio.run(scenario())
        assert engine.inner.cancelled.is_set()
        assert queue.snapshot()["cancelled"] == 2
    finally:
        engine.inner.hold.set()  # a failed cancellation must not leave the model thread running
        queue.shutdown()


# ------------------------------------------------------------------------------- through the protocol


def client_for(base: str, token: str, **kwargs: Any) -> Client:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return Client(streamable_http_client(f"{base}/mcp", http_client=http), read_timeout_seconds=60, **kwargs)


PARSE = {"dialogue": "Find me a flight to Boston", "catalogue": "travel", "config": "default"}


def queue_server(tmp_path: Path, engine: SlowEngine, **settings: Any):
    from prefcall.server.app import create_server

    return create_server(server_settings(tmp_path, **settings), engine=engine, embedder=FakeEmbedder(),
                         tokens=TOKENS)


async def setup_users(base: str) -> None:
    for token in TOKENS:
        async with client_for(base, token) as client:
            # Catalogues belong to their importer: every user imports their own "travel".
            result = await client.call_tool("import_catalogue", {"name": "travel", "tools": TRAVEL_TOOLS})
            assert not result.is_error
            assert not (await client.call_tool("create_profile", {})).is_error


def test_over_http_a_full_queue_answers_busy_at_once_and_the_queued_request_still_completes(tmp_path: Path) -> None:
    engine = SlowEngine(tokens=100_000)  # holds the model until the test sets engine.hold
    server = queue_server(tmp_path, engine, queue_size=1, queue_per_user=1)
    outcome: dict[str, Any] = {}

    async def parse(name: str, token: str) -> None:
        async with client_for(base, token) as client:
            result = await client.call_tool("parse_request", PARSE)
            outcome[name] = (result.is_error, result.content[0].text if result.is_error else result.structured_content)

    async def scenario() -> None:
        await setup_users(base)
        async with anyio.create_task_group() as group:
            group.start_soon(parse, "alice-first", ALICE)
            assert await anyio.to_thread.run_sync(engine.started.wait, 20)  # alice runs
            await parse("alice-second", ALICE)  # alice's share is 1: refused at once
            group.start_soon(parse, "bob", BOB)  # waits (the one waiting place)
            deadline = time.monotonic() + 20
            while server.services.model.waiting < 1:
                assert time.monotonic() < deadline
                await anyio.sleep(0.02)
            # Full: refused at once. Had carol been queued instead, her call could only end after engine.hold
            # is set below, i.e. never (the client's 60 s read timeout): the busy answer itself proves "at once".
            await parse("carol", CAROL)
            engine.hold.set()

    with serving(server) as base:
        anyio.run(scenario)
    error, text = outcome["alice-second"]
    assert error and "busy: you already have 1 requests" in text and "\n" not in text
    error, text = outcome["carol"]
    assert error and "\n" not in text
    assert re.search(r"busy: the model queue is full \(1 waiting\); retry in ~\d+ s$", text), text
    for name in ("alice-first", "bob"):
        error, result = outcome[name]
        assert not error, result
        assert result["calls"][0]["name"] == "GetFlights"


def test_over_http_a_client_that_goes_away_cancels_its_model_work(tmp_path: Path) -> None:
    engine = SlowEngine(tokens=100_000)
    server = queue_server(tmp_path, engine)

    async def scenario() -> None:
        await setup_users(base)
        async with client_for(base, ALICE) as client:
            assert client.protocol_version == "2026-07-28"  # one POST per request: leaving closes it
            with anyio.move_on_after(30) as scope:
                async with anyio.create_task_group() as group:
                    group.start_soon(client.call_tool, "parse_request", PARSE)
                    assert await anyio.to_thread.run_sync(engine.started.wait, 20)
                    group.cancel_scope.cancel()  # the host gives up on the call
            assert not scope.cancelled_caught
        await anyio.to_thread.run_sync(engine.cancelled.wait, 20)
        # the model is free for the next request at once
        engine.hold.set()
        async with client_for(base, BOB) as client:
            result = await client.call_tool("parse_request", PARSE)
            assert not result.is_error, result.content[0].text

    with serving(server) as base:
        anyio.run(scenario)
    assert engine.cancelled.is_set()
    assert server.services.model.snapshot()["cancelled"] >= 1


def test_a_cancelled_mcp_request_stops_its_model_work(tmp_path: Path) -> None:
    """A 2025-revision client (stdio-style stream) that gives up sends notifications/cancelled."""
    from prefcall.server.app import create_server

    engine = SlowEngine(tokens=100_000)
    server = create_server(server_settings(tmp_path), engine=engine, embedder=FakeEmbedder())

    async def scenario() -> None:
        async with Client(server, mode="legacy") as client:
            assert not (await client.call_tool("import_catalogue", {"name": "travel", "tools": TRAVEL_TOOLS})).is_error
            assert not (await client.call_tool("create_profile", {"user_id": "me"})).is_error
            async with anyio.create_task_group() as group:
                group.start_soon(client.call_tool, "parse_request", {**PARSE, "user_id": "me"})
                assert await anyio.to_thread.run_sync(engine.started.wait, 20)
                group.cancel_scope.cancel()
            await anyio.to_thread.run_sync(engine.cancelled.wait, 20)
            engine.hold.set()
            assert not (await client.call_tool("list_catalogues", {})).is_error

    try:
        anyio.run(scenario)
    finally:
        server.services.close()
    assert engine.cancelled.is_set()
