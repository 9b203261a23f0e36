"""Server figures: stdio cold start to first answer, resident memory, HTTP throughput under 1/4/16 clients.

Everything talks to a real `prefcall serve` child process (started here, stopped here by its own pid) over
the real transports, loopback only, with a temporary database and a generated token.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from prefcall.bench.context import BenchContext
from prefcall.bench.stats import ratio, rss_bytes, summarize, target
from prefcall.strategies.pipeline_models import DEFAULT_CONFIG

USER = "bench-user"
READ_TIMEOUT = 900.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_command(model_args: list[str], *extra: str) -> list[str]:
    return [sys.executable, "-m", "prefcall.cli", "serve", *model_args, *extra]


def child_pids(parent: int, needle: str) -> list[int]:
    """Processes whose parent is `parent` and whose command line contains `needle` (the spawned server)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and needle in cmdline:
            found.append(int(entry.name))
    return found


def _mb(value: int | None) -> float | None:
    return round(value / 2**20, 1) if value else None


def parse_arguments(ctx: BenchContext, i: int) -> dict[str, Any]:
    item = ctx.item(i)
    return {"dialogue": item.utterance, "catalogue": "nlsi", "config": DEFAULT_CONFIG, "applicable": item.applicable}


async def _call(client: Any, tool: str, arguments: dict[str, Any]) -> tuple[bool, Any, float]:
    started = time.perf_counter()
    result = await client.call_tool(tool, arguments)
    seconds = time.perf_counter() - started
    return (not result.is_error), (result.structured_content if not result.is_error else result.content[0].text), seconds


# -- stdio cold start ------------------------------------------------------------------------------
async def stdio_cold_start(ctx: BenchContext, db: Path, data_dir: Path | None = None) -> dict[str, Any]:
    from mcp import Client, StdioServerParameters

    env = {**os.environ, "PREFCALL_DB_PATH": str(db)} | ({"PREFCALL_DATA_DIR": str(data_dir)} if data_dir else {})
    parameters = StdioServerParameters(command=sys.executable, args=serve_command(ctx.model_args)[1:], env=env)
    started = time.perf_counter()
    async with Client(parameters, read_timeout_seconds=READ_TIMEOUT) as client:
        initialized = time.perf_counter() - started
        ok, _, _ = await _call(client, "list_catalogues", {})
        first_tool = time.perf_counter() - started
        await _call(client, "create_profile", {"user_id": USER})
        # The user's instructions live in their profile, as a host would store them (add_instruction): the first
        # parse_request of a fresh install tags them and keeps the tags, a restart reads them back. The key makes
        # the add idempotent, so a restart on the same data folder stores nothing twice.
        for i in (0, 1):
            for text in parse_arguments(ctx, i)["applicable"]:
                key = "bench-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
                await _call(client, "add_instruction", {"user_id": USER, "text": text, "idempotency_key": key})
        arguments = {**parse_arguments(ctx, 0), "user_id": USER}
        parsed_ok, answer, parse_seconds = await _call(client, "parse_request", arguments)
        first_parse = time.perf_counter() - started
        _, _, warm_seconds = await _call(client, "parse_request", {**parse_arguments(ctx, 1), "user_id": USER})
        pids = child_pids(os.getpid(), "serve")
        rss = rss_bytes(pids[0]) if pids else None
    return {"initialize_s": round(initialized, 3), "first_tool_result_s": round(first_tool, 3),
            "first_tool_ok": ok, "first_parse_request_s": round(first_parse, 3),
            "first_parse_request_call_s": round(parse_seconds, 3), "first_parse_ok": parsed_ok,
            "second_parse_request_s": round(warm_seconds, 3),
            "first_parse_error": None if parsed_ok else str(answer)[:200], "rss_mb": _mb(rss)}


# -- HTTP throughput -------------------------------------------------------------------------------
@contextlib.contextmanager
def http_server(ctx: BenchContext, db: Path, token: str, log_path: Path):
    """`prefcall serve --transport http` on 127.0.0.1:<free port>; yields (base_url, process)."""
    port = free_port()
    # Every bench client uses the one token (one user): raise the model queue's per-user share above the most
    # concurrent clients (16), or the queue would refuse all but PREFCALL_QUEUE_PER_USER of them as busy.
    env = {**os.environ, "PREFCALL_DB_PATH": str(db), "PREFCALL_TOKENS": f"{token}:{USER}",
           "PREFCALL_QUEUE_PER_USER": "64", "PREFCALL_QUEUE_SIZE": "64"}
    command = serve_command(ctx.model_args, "--transport", "http", "--host", "127.0.0.1", "--port", str(port))
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def wait_ready(base: str, process: subprocess.Popen, timeout: float = 600.0, log_path: Path | None = None) -> float:
    import httpx

    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if process.poll() is not None:
            raise RuntimeError(f"prefcall serve exited with status {process.returncode} before it was ready")
        with contextlib.suppress(httpx.HTTPError, ValueError):
            # /healthz says only ready (200) or not (503); why a load failed is in the server's log.
            if httpx.get(f"{base}/healthz", timeout=5).json().get("status") == "ready":
                return time.perf_counter() - started
        if log_path is not None and log_path.is_file():
            lines = log_path.read_text(errors="replace").splitlines()
            failed = [line for line in lines if "model loading failed" in line]
            if failed:
                raise RuntimeError(failed[-1].strip())
        time.sleep(0.25)
    raise TimeoutError(f"prefcall serve was not ready after {timeout:.0f} s")


def http_client(base: str, token: str) -> Any:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return Client(streamable_http_client(f"{base}/mcp", http_client=http), read_timeout_seconds=READ_TIMEOUT)


async def concurrency_round(ctx: BenchContext, base: str, token: str, clients: int, per_client: int,
                            offset: int) -> dict[str, Any]:
    """`clients` sessions opened first, then all fire `per_client` sequential parse_requests at once."""
    import anyio

    latencies: list[float] = []
    failures: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(http_client(base, token)) for _ in range(clients)]

        async def worker(n: int, client: Any) -> None:
            for j in range(per_client):
                ok, answer, seconds = await _call(client, "parse_request", parse_arguments(ctx, offset + n * per_client + j))
                latencies.append(seconds)
                if not ok:
                    failures.append(str(answer)[:160])

        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for n, client in enumerate(sessions):
                group.start_soon(worker, n, client)
        wall = time.perf_counter() - started
    requests = clients * per_client
    return {"clients": clients, "requests": requests, "answered": len(latencies), "errors": len(failures),
            "error_samples": failures[:3], "wall_s": round(wall, 3),
            "throughput_rps": round(requests / wall, 4) if wall > 0 else None,
            "latency_s": summarize(latencies)}


async def http_throughput(ctx: BenchContext, db: Path, log_path: Path) -> dict[str, Any]:
    token = secrets.token_urlsafe(24)
    levels = ((1, 1), (4, 1)) if ctx.quick else ((1, max(2, ctx.reps)), (4, 1), (16, 1))
    out: dict[str, Any] = {"levels": {}}
    with http_server(ctx, db, token, log_path) as (base, process):
        import anyio

        out["ready_s"] = round(await anyio.to_thread.run_sync(wait_ready, base, process, 600.0, log_path), 3)
        async with http_client(base, token) as client:
            await _call(client, "create_profile", {})
            ok, answer, warm = await _call(client, "parse_request", parse_arguments(ctx, 0))  # warm the catalogue
        out["warmup_s"] = round(warm, 3)
        out["warmup_ok"] = ok
        out["rss_after_load_mb"] = _mb(rss_bytes(process.pid))
        offset = 1
        for clients, per_client in levels:
            ctx.log(f"bench: server with {clients} concurrent HTTP client(s) ...")
            out["levels"][str(clients)] = await concurrency_round(ctx, base, token, clients, per_client, offset)
            offset += clients * per_client
        out["rss_after_requests_mb"] = _mb(rss_bytes(process.pid))
    single = out["levels"]["1"]["latency_s"].get("p50")
    for clients, level in out["levels"].items():
        bound = single * int(clients) if single else None
        level["queue_bound_s"] = round(bound, 3) if bound else None
        level["p95_over_queue_bound"] = ratio(level["latency_s"].get("p95"), bound)
    return out


def section_server(ctx: BenchContext) -> dict[str, Any]:
    import anyio

    with tempfile.TemporaryDirectory(prefix="prefcall-bench-") as folder:
        folder_path = Path(folder)
        ctx.log("bench: stdio cold start (fresh data folder, then a restart) ...")
        # A fresh install calibrates stage 1 for the catalogue (three content-free prompts) and stores it; a restart
        # reads it from the data folder. The target is about the restart: a server is started far more often
        # than it is installed.
        fresh = anyio.run(stdio_cold_start, ctx, folder_path / "stdio.db", folder_path / "data")
        stdio = anyio.run(stdio_cold_start, ctx, folder_path / "stdio.db", folder_path / "data")
        stdio["fresh_install"] = {k: fresh[k] for k in ("first_tool_result_s", "first_parse_request_s",
                                                        "first_parse_request_call_s")}
        ctx.log("bench: HTTP server ...")
        http = anyio.run(http_throughput, ctx, folder_path / "http.db", folder_path / "http.log")
    figures = {"stdio": stdio, "http": http, "config": DEFAULT_CONFIG,
               "note": "parse_request on nlsi with the request's applicable instructions; every request a different "
                       "NLSI utterance; model calls are serialised on one model thread, so latency grows with queue depth"}
    top = max(http["levels"], key=int)
    level = http["levels"][top]
    rss = max(v for v in (stdio.get("rss_mb"), http.get("rss_after_requests_mb")) if v is not None) \
        if (stdio.get("rss_mb") or http.get("rss_after_requests_mb")) else None
    targets = [
        target("server: stdio cold start to first tool result", stdio["first_tool_result_s"], 5.0, unit="s"),
        target("server: stdio restart to first parse_request answer", stdio["first_parse_request_s"], 5.0, unit="s"),
        # The call alone, without the interpreter start and the MCP SDK's import (~2 s of the line above).
        target("server: first parse_request call after a restart", stdio["first_parse_request_call_s"], 5.0, unit="s"),
        target("server: resident memory with the embedded model", rss, 1536.0, unit="MB"),
        target(f"server: {top} clients p95 / (queue depth x single latency)", level["p95_over_queue_bound"], 1.2, unit="x"),
        {"name": f"server: {top} clients every request answered", "value": level["answered"] - level["errors"],
         "limit": level["requests"], "met": level["errors"] == 0 and level["answered"] == level["requests"], "unit": ""},
    ]
    headline = [("first tool result s", stdio["first_tool_result_s"]),
                ("first parse_request s (restart)", stdio["first_parse_request_s"]),
                ("that call alone s (restart)", stdio["first_parse_request_call_s"]),
                ("first parse_request s (fresh install)", stdio["fresh_install"]["first_parse_request_s"]),
                ("RSS MB", rss)]
    for clients, lv in http["levels"].items():
        headline.append((f"{clients} clients rps / p95 s", f"{lv['throughput_rps']} / {lv['latency_s'].get('p95')}"))
    return {"figures": figures, "targets": targets, "headline": headline}
