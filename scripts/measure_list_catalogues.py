"""Issue 13, point 7: how long list_catalogues takes, and how large its answer is, for one HTTP user after
another user imports the largest catalogue the default limits allow.

    PYTHONPATH=src python scripts/measure_list_catalogues.py [--tools 1000] [--repeat 5]

prefcall over streamable HTTP (uvicorn in a thread, fake engine: no model is involved in listing), two users;
bob imports `--tools` tools whose JSON totals just under PREFCALL_MAX_CATALOGUE_BYTES (each tool under
PREFCALL_MAX_SCHEMA_BYTES), then alice and bob each call list_catalogues `--repeat` times. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from prefcall.config import Settings
from prefcall.engine.fake import FakeEmbedder, FakeEngine
from prefcall.server.app import create_server
from prefcall.server.http import http_app

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789ab"


def largest_catalogue(tools: int, settings: Settings) -> list[dict[str, Any]]:
    """`tools` tools filling 98% of the catalogue byte limit evenly (long descriptions, a 100-value enum each)."""

    def build(description_chars: int) -> list[dict[str, Any]]:
        properties: dict[str, Any] = {f"argument_{i}": {"type": "string", "description": "d" * description_chars}
                                      for i in range(8)}
        properties["choice"] = {"type": "string", "enum": [f"v{k:03d}" for k in range(100)]}
        return [{"name": f"tool_{i:05d}", "description": "A tool. " * 8,
                 "inputSchema": {"type": "object", "properties": properties, "required": ["argument_0"]}}
                for i in range(tools)]

    chars = settings.max_catalogue_bytes // tools // 8
    while chars > 0 and len(json.dumps(build(chars)).encode()) > 0.98 * settings.max_catalogue_bytes:
        chars = int(chars * 0.95)
    return build(chars)


def client_for(base: str, token: str) -> Client:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return Client(streamable_http_client(f"{base}/mcp", http_client=http), read_timeout_seconds=600)


async def timed_list(client: Client, repeat: int) -> dict[str, Any]:
    seconds, sizes, names = [], [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        result = await client.call_tool("list_catalogues", {})
        seconds.append(time.perf_counter() - started)
        # What crosses the wire: the text content plus the structured copy.
        sizes.append(len(result.content[0].text.encode()) + len(json.dumps(result.structured_content).encode()))
        names = sum(len(c["functions"]) for c in result.structured_content["catalogues"])
    return {"median_s": round(statistics.median(seconds), 4), "max_s": round(max(seconds), 4),
            "response_bytes": sizes[-1], "functions_listed": names}


async def measure(base: str, tools: list[dict[str, Any]], repeat: int) -> dict[str, Any]:
    async with client_for(base, ALICE) as alice, client_for(base, BOB) as bob:
        before = await timed_list(alice, repeat)
        started = time.perf_counter()
        imported = await bob.call_tool("import_catalogue", {"name": "huge", "tools": tools})
        import_s = time.perf_counter() - started
        if imported.is_error:
            raise SystemExit(f"import failed: {imported.content[0].text}")
        return {"alice_before": before, "bob_import_s": round(import_s, 2),
                "alice_after": await timed_list(alice, repeat), "bob_after": await timed_list(bob, repeat)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=None, help="tools to import (default: PREFCALL_MAX_TOOLS)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(data_dir=Path(folder), db_path=Path(folder) / "prefcall.db")
        tools = largest_catalogue(args.tools or settings.max_tools, settings)
        server = create_server(settings, engine=FakeEngine(), embedder=FakeEmbedder(),
                               tokens={ALICE: "alice", BOB: "bob"})
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        runner = uvicorn.Server(uvicorn.Config(http_app(server, host="127.0.0.1"), host="127.0.0.1", port=port,
                                               log_level="warning"))
        thread = threading.Thread(target=runner.run, daemon=True)
        thread.start()
        while not runner.started:
            time.sleep(0.05)
        try:
            figures = anyio.run(measure, f"http://127.0.0.1:{port}", tools, args.repeat)
        finally:
            runner.should_exit = True
            thread.join(timeout=10)
            server.services.close()
    figures["catalogue"] = {"tools": len(tools), "bytes": len(json.dumps(tools).encode()),
                            "limit_bytes": settings.max_catalogue_bytes}
    json.dump(figures, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
