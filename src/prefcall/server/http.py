"""Streamable HTTP transport: bearer-token auth (one token, one user), loopback by default, /healthz."""

from __future__ import annotations

import ipaddress
import logging
import sys
from typing import Any

from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse

from prefcall.config import Settings
from prefcall.errors import ConfigError
from prefcall.server.auth import configured_tokens, generate_token

log = logging.getLogger("prefcall.server")

LOOPBACK_NAMES = {"localhost"}


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def tokens_for_http(settings: Settings, default_user: str) -> dict[str, str]:
    """Configured tokens, or one generated for `default_user` and printed to stderr (never stdout)."""
    tokens = configured_tokens(settings)
    if not tokens:
        token = generate_token()
        tokens = {token: default_user}
        print(f"prefcall: no PREFCALL_TOKENS set; generated a bearer token for user {default_user!r}:\n"
              f"  Authorization: Bearer {token}", file=sys.stderr, flush=True)
    return tokens


def add_health_route(server: MCPServer) -> None:
    """GET /healthz (no auth, no user data): liveness and model state, for load balancers and tests."""
    services = server.services  # type: ignore[attr-defined]

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(_: Request) -> JSONResponse:
        models = services.models
        body: dict[str, Any] = {"status": "ok", "model": models.stage, "ready": models.ready}
        if models.error is not None:
            body["error"] = str(models.error)
        return JSONResponse(body)


def http_app(server: MCPServer, *, host: str, path: str = "/mcp") -> Any:
    """The Starlette app (auth is already part of `server` when it was created with tokens)."""
    add_health_route(server)
    return server.streamable_http_app(host=host, streamable_http_path=path)


def serve_http(server: MCPServer, *, host: str, port: int, path: str = "/mcp", allow_remote: bool = False) -> None:
    import uvicorn

    if not is_loopback(host) and not allow_remote:
        raise ConfigError(f"refusing to listen on non-loopback host {host!r}: pass --allow-remote "
                          "(and put TLS in front) to expose prefcall beyond this machine")
    app = http_app(server, host=host, path=path)
    print(f"prefcall: serving MCP over HTTP at http://{host}:{port}{path}", file=sys.stderr, flush=True)
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).run()
