"""Streamable HTTP: bearer tokens map to users, no token is a 401, users cannot touch each other's profiles,
and 20 concurrent clients each get their own user's answer (fake engine, uvicorn in a thread)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from test_server_support import TRAVEL_TOOLS, free_port, make_server, serving

from prefcall.errors import ConfigError
from prefcall.server.auth import parse_tokens
from prefcall.server.http import is_loopback

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789ab"


@contextmanager
def http_server(tmp_path: Path, tokens: dict[str, str], **kwargs: Any) -> Iterator[str]:
    """prefcall over streamable HTTP on 127.0.0.1:<free port>, in a thread; yields the base URL.
    `kwargs` go to `make_server` (engine, settings overrides)."""
    with serving(make_server(tmp_path, tokens=tokens, **kwargs)) as base:
        yield base


def client_for(base: str, token: str) -> Client:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return Client(streamable_http_client(f"{base}/mcp", http_client=http), read_timeout_seconds=60)


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> tuple[bool, Any]:
    result = await client.call_tool(tool, arguments)
    return result.is_error, (result.content[0].text if result.is_error else result.structured_content)


def test_requests_without_a_valid_token_are_refused(tmp_path: Path) -> None:
    with http_server(tmp_path, {ALICE: "alice"}) as base:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        assert httpx.post(f"{base}/mcp", json=body, headers=headers).status_code == 401
        wrong = {**headers, "Authorization": "Bearer not-a-token-at-all"}
        assert httpx.post(f"{base}/mcp", json=body, headers=wrong).status_code == 401
        health = httpx.get(f"{base}/healthz")  # needs no token, says ready or not and nothing else
        assert health.status_code == 200 and health.json() == {"status": "ready"}


def test_a_token_only_reaches_its_own_users_profile(tmp_path: Path) -> None:
    async def scenario(base: str) -> None:
        async with client_for(base, ALICE) as alice, client_for(base, BOB) as bob:
            assert (await call(alice, "add_instruction", {"text": "I always fly Delta."}))[0] is False
            assert (await call(bob, "add_instruction", {"text": "I always fly United."}))[0] is False
            # Alice's token defaults to alice and refuses bob, for reads and writes alike.
            error, listed = await call(alice, "list_instructions", {})
            assert not error and listed["user_id"] == "alice"
            for tool, arguments in [
                ("list_instructions", {"user_id": "bob"}),
                ("add_instruction", {"user_id": "bob", "text": "Bob now flies Delta."}),
                ("remove_instruction", {"user_id": "bob", "instruction_id": 2}),
                ("tag_profile", {"user_id": "bob", "catalogue": "nlsi"}),
                ("parse_request", {"user_id": "bob", "dialogue": "A flight", "catalogue": "nlsi"}),
            ]:
                error, message = await call(alice, tool, arguments)
                assert error and "does not match your token" in message, (tool, message)
            # An instruction id of bob's is not removable through alice's profile either.
            bob_ids = [i["id"] for i in (await call(bob, "list_instructions", {}))[1]["instructions"]]
            error, message = await call(alice, "remove_instruction", {"instruction_id": bob_ids[0]})
            assert error and "no instruction" in message
            with pytest.raises(Exception, match="does not match your token"):
                await alice.read_resource("profiles://bob")
            own = json.loads((await alice.read_resource("profiles://alice")).contents[0].text)
            assert [i["text"] for i in own["instructions"]] == ["I always fly Delta."]
            bob_profile = (await call(bob, "list_instructions", {}))[1]
            assert [i["text"] for i in bob_profile["instructions"]] == ["I always fly United."]

    with http_server(tmp_path, {ALICE: "alice", BOB: "bob"}) as base:
        anyio.run(scenario, base)


def test_twenty_concurrent_clients_each_get_their_own_users_answer(tmp_path: Path) -> None:
    users = {f"user{i:02d}-token-abcdefghij": f"user{i:02d}" for i in range(20)}
    airline = {user: f"Air{user[-2:]}" for user in users.values()}
    answers: dict[str, Any] = {}

    async def one_client(base: str, token: str, user: str) -> None:
        async with client_for(base, token) as client:  # catalogues are per user: each imports its own
            assert (await call(client, "import_catalogue", {"name": "travel", "tools": TRAVEL_TOOLS}))[0] is False
            await call(client, "add_instruction", {"text": f"When I book flights, I always fly {airline[user]}."})
            error, result = await call(client, "parse_request", {"dialogue": "Find me a flight to Boston",
                                                                 "catalogue": "travel", "config": "default"})
            answers[user] = result if not error else {"error": result}

    async def scenario(base: str) -> None:
        async with anyio.create_task_group() as group:
            for token, user in users.items():
                group.start_soon(one_client, base, token, user)

    with http_server(tmp_path, users) as base:
        anyio.run(scenario, base)
        assert httpx.get(f"{base}/healthz").json()["status"] == "ready"  # still healthy afterwards
    assert len(answers) == 20
    for user, result in answers.items():
        assert "error" not in result, (user, result)
        assert result["user_id"] == user
        assert result["calls"][0]["arguments"]["airlines"] == airline[user], (user, result["calls"])


def test_token_configuration_is_checked() -> None:
    assert parse_tokens("abcdefghijklmnop:alice, qrstuvwxyz0123456:bob", "env") == {
        "abcdefghijklmnop": "alice", "qrstuvwxyz0123456": "bob"}
    with pytest.raises(ConfigError, match="shorter"):
        parse_tokens("short:alice", "env")
    with pytest.raises(ConfigError, match="user id"):
        parse_tokens("abcdefghijklmnop:../bob", "env")
    with pytest.raises(ConfigError, match="token:user_id"):
        parse_tokens("abcdefghijklmnop", "env")
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")


def test_serving_on_a_public_interface_needs_an_explicit_flag(tmp_path: Path) -> None:
    from prefcall.server.http import serve_http

    server = make_server(tmp_path, tokens={ALICE: "alice"})
    with pytest.raises(ConfigError, match="--allow-remote"):
        serve_http(server, host="0.0.0.0", port=free_port())


def test_tokens_come_from_env_and_file_or_are_generated(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefcall.config import Settings

    monkeypatch.delenv("PREFCALL_TOKENS", raising=False)
    monkeypatch.delenv("PREFCALL_TOKENS_FILE", raising=False)
    from prefcall.server.http import tokens_for_http

    listing = tmp_path / "tokens.txt"
    listing.write_text("# prefcall tokens\nfile-token-0123456789:carol\n", encoding="utf-8")
    settings = Settings(tokens="env-token-0123456789ab:dave", tokens_file=listing)
    assert tokens_for_http(settings, "me") == {"env-token-0123456789ab": "dave", "file-token-0123456789": "carol"}
    generated = tokens_for_http(Settings(), "me")
    (token, user), = generated.items()
    assert user == "me" and len(token) >= 16
    captured = capsys.readouterr()
    assert token in captured.err and token not in captured.out  # never on stdout
    with pytest.raises(ConfigError, match="tokens file"):
        tokens_for_http(Settings(tokens_file=tmp_path / "missing.txt"), "me")
