"""A robust service: a model that failed to load is loaded again without a restart (after a back-off, or at
once when its file changes), /healthz says only ready / not ready, configuration errors are one line, the
server speaks the newest protocol revision the SDK has, and clarify falls back to returning its question
where the connection cannot ask the user."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import anyio
import httpx
import uvicorn
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitResult
from mcp_types.version import LATEST_HANDSHAKE_VERSION, LATEST_PROTOCOL_VERSION
from test_server_queue import client_for, wait_until
from test_server_support import TRAVEL_TOOLS, free_port, make_server, server_settings, serving, travel_engine

import prefcall
from prefcall.cli import main
from prefcall.engine.fake import FakeEmbedder
from prefcall.errors import InvalidModelError
from prefcall.server.app import create_server
from prefcall.server.services import Services

SOURCE = Path(prefcall.__file__).resolve().parents[1]
SUPPORT = Path(__file__).with_name("test_server_support.py")
TOKEN = "alice-token-0123456789"


class FlakyModel:
    """A loader that fails until the model file says 'good' (counts its attempts)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.attempts = 0

    def __call__(self, settings):
        self.attempts += 1
        if self.path.read_text() != "good":
            raise InvalidModelError(f"could not load model {self.path}: bad magic: check it is a complete GGUF file")
        return travel_engine()


def flaky_server(tmp_path: Path, retry_s: float, **kwargs):
    model = tmp_path / "model.gguf"
    model.write_text("bad")
    loader = FlakyModel(model)
    settings = server_settings(tmp_path, model=str(model), model_retry_s=retry_s)
    services = Services(settings, load_engine=loader, load_embedder=lambda s: FakeEmbedder())
    return create_server(settings, services=services, **kwargs), loader, model


async def list_catalogues(client: Client) -> tuple[bool, str]:
    result = await client.call_tool("list_catalogues", {})
    assert not result.is_error
    result = await client.call_tool("select_tools_nlt", {"message": "a flight", "tools": TRAVEL_TOOLS})
    return result.is_error, result.content[0].text


def test_a_failed_model_load_is_retried_after_the_back_off_without_a_restart(tmp_path: Path) -> None:
    server, loader, model = flaky_server(tmp_path, retry_s=0.5)

    async def scenario() -> None:
        async with Client(server) as client:
            error, text = await list_catalogues(client)
            assert error and "could not load model" in text and "loads it again on a call after ~" in text
            assert "\n" not in text
            error, _ = await list_catalogues(client)  # within the back-off: no new attempt
            assert error and loader.attempts == 1
            model.write_text("good")  # fixed, but the check below waits for the back-off, not the file
            await anyio.sleep(0.6)
            error, text = await list_catalogues(client)
            assert not error, text
            assert loader.attempts == 2

    anyio.run(scenario)


def test_a_changed_model_file_is_loaded_again_at_once(tmp_path: Path) -> None:
    server, loader, model = flaky_server(tmp_path, retry_s=3600)

    async def scenario() -> None:
        async with Client(server) as client:
            error, _ = await list_catalogues(client)
            assert error and loader.attempts == 1
            error, _ = await list_catalogues(client)
            assert error and loader.attempts == 1  # an hour of back-off
            model.write_text("good")  # the size changes: retried on the next call
            error, text = await list_catalogues(client)
            assert not error, text
            assert loader.attempts == 2

    anyio.run(scenario)


def test_healthz_says_only_ready_or_not_ready_and_recovers_with_the_model(tmp_path: Path) -> None:
    server, loader, model = flaky_server(tmp_path, retry_s=3600, tokens={TOKEN: "alice"})
    with serving(server) as base:
        wait_until(lambda: loader.attempts == 1 and server.services.models.error is not None)
        answer = httpx.get(f"{base}/healthz")
        assert answer.status_code == 503
        assert answer.json() == {"status": "not_ready"}  # no path, no error text, no stage
        assert str(tmp_path) not in answer.text
        model.write_text("good")
        wait_until(lambda: httpx.get(f"{base}/healthz").status_code == 200)
        assert httpx.get(f"{base}/healthz").json() == {"status": "ready"}


# ------------------------------------------------------------------------------- one-line configuration errors
def test_an_invalid_setting_is_one_line_naming_it_for_every_command(monkeypatch, capsys, tmp_path: Path) -> None:
    monkeypatch.setenv("PREFCALL_N_CTX", "10")
    for argv in (["serve"], ["eval", "nlsi", "--limit", "1"], ["demo"], ["profile", "list", "alice"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err == ("prefcall: error: invalid setting PREFCALL_N_CTX=10: Input should be greater than or "
                       "equal to 256: fix it or unset it"), (argv, err)
    monkeypatch.delenv("PREFCALL_N_CTX")
    monkeypatch.setenv("PREFCALL_QUEUE_SIZE", "lots")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("prefcall: error: invalid setting PREFCALL_QUEUE_SIZE=lots: ") and "\n" not in err
    monkeypatch.delenv("PREFCALL_QUEUE_SIZE")
    assert main(["demo", "--n-ctx", "10"]) == 2  # a flag is checked before the demo spawns its server
    assert capsys.readouterr().err.strip().startswith("prefcall: error: invalid setting PREFCALL_N_CTX=10: ")


def test_a_model_that_cannot_load_is_one_line_from_the_cli(capsys, tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 16)
    assert main(["info", "--model", str(broken)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("prefcall: error: ") and "\n" not in err and str(broken) in err


def test_prefcall_serve_with_a_bad_setting_prints_one_line_and_exits(tmp_path: Path) -> None:
    env = {**os.environ, "PREFCALL_N_CTX": "10", "PYTHONPATH": str(SOURCE), "PREFCALL_DATA_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "prefcall.cli", "serve"], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode != 0
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "prefcall: error: invalid setting PREFCALL_N_CTX=10: Input should be greater than or equal to 256: "
        "fix it or unset it"]


# ------------------------------------------------------------------------------- protocol revision
def test_the_server_speaks_the_newest_revision_the_sdk_has_over_stdio_and_http(tmp_path: Path) -> None:
    assert LATEST_PROTOCOL_VERSION == "2026-07-28"  # the SDK pinned in pyproject (mcp 2.3) has it
    parameters = StdioServerParameters(
        command=sys.executable, args=[str(SUPPORT), str(tmp_path / "stdio.db")],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT.parent), str(SOURCE)])},
    )
    seen: dict[str, object] = {}

    async def over_stdio() -> None:
        async with Client(stdio_client(parameters)) as client:  # default mode: server/discover first
            seen["stdio"] = client.protocol_version
            seen["stdio_supported"] = client.session.discover_result.supported_versions
            assert not (await client.call_tool("list_catalogues", {})).is_error
        async with Client(stdio_client(parameters), mode="legacy") as client:  # 2025 hosts still served
            seen["stdio_legacy"] = client.protocol_version

    async def over_http(base: str) -> None:
        async with client_for(base, TOKEN) as client:
            seen["http"] = client.protocol_version
            assert not (await client.call_tool("list_catalogues", {})).is_error
        async with client_for(base, TOKEN, mode="legacy") as client:
            seen["http_legacy"] = client.protocol_version

    anyio.run(over_stdio)
    with serving(make_server(tmp_path, tokens={TOKEN: "alice"})) as base:
        anyio.run(over_http, base)
    assert seen["stdio"] == seen["http"] == LATEST_PROTOCOL_VERSION
    assert LATEST_PROTOCOL_VERSION in seen["stdio_supported"]
    assert seen["stdio_legacy"] == seen["http_legacy"] == LATEST_HANDSHAKE_VERSION


def test_clarify_returns_its_question_where_the_connection_cannot_ask_the_user(tmp_path: Path) -> None:
    """JSON-response HTTP on a 2025 revision has no back channel for elicitation/create: the client declared
    elicitation, but clarify answers with the question as data instead of failing the call."""
    server = make_server(tmp_path)
    port = free_port()
    app = server.streamable_http_app(host="127.0.0.1", json_response=True)
    runner = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    wait_until(lambda: runner.started, 20)
    asked: list[object] = []

    async def answer(context, params):
        asked.append(params)
        return ElicitResult(action="accept", content={n: "Paris" for n in params.requested_schema["properties"]})

    async def scenario() -> dict:
        async with Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp"), mode="legacy",
                          elicitation_callback=answer) as client:
            await client.call_tool("import_catalogue", {"name": "travel", "tools": TRAVEL_TOOLS})
            await client.call_tool("add_instruction", {"user_id": "alice", "text": "I like Delta."})
            result = await client.call_tool("clarify", {"user_id": "alice", "dialogue": "Find me a hotel",
                                                        "catalogue": "travel"})
            assert not result.is_error, result.content[0].text
            return result.structured_content

    try:
        result = anyio.run(scenario)
    finally:
        runner.should_exit = True
        thread.join(timeout=10)
        server.services.close()
    assert result["decision"] == "question" and result["question"]
    assert result["elicited"] is False and not asked


def test_clarify_asks_a_2026_client_through_the_portable_input_required_form_over_http(tmp_path: Path) -> None:
    asked: list[object] = []

    async def answer(context, params):
        asked.append(params)
        return ElicitResult(action="accept", content={n: "Paris" for n in params.requested_schema["properties"]})

    async def scenario(base: str) -> dict:
        async with client_for(base, TOKEN, elicitation_callback=answer) as client:
            assert client.protocol_version == "2026-07-28"
            await client.call_tool("import_catalogue", {"name": "travel", "tools": TRAVEL_TOOLS})
            await client.call_tool("add_instruction", {"text": "I like Delta."})
            result = await client.call_tool("clarify", {"dialogue": "Find me a hotel", "catalogue": "travel"})
            assert not result.is_error, result.content[0].text
            return result.structured_content

    with serving(make_server(tmp_path, tokens={TOKEN: "alice"})) as base:
        result = anyio.run(scenario, base)
    assert asked and result["elicited"] is True and result["elicitation_action"] == "accept"
    assert set(result["answer"].values()) == {"Paris"}
