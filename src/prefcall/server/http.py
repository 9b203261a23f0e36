"""Streamable HTTP transport: bearer-token auth (one token, one user), loopback by default, /healthz,
one-line JSON-RPC errors for malformed bodies (`prefcall.server.transport`)."""

from __future__ import annotations

import ipaddress
import logging
import sys
from typing import Any

from mcp.server.auth.middleware.bearer_auth import RequireAuthMiddleware
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from starlette.requests import Request
from starlette.responses import JSONResponse

from prefcall.config import Settings
from prefcall.errors import ConfigError
from prefcall.server.auth import configured_tokens, generate_token
from prefcall.server.transport import MalformedBodyGuard

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
    """GET /healthz (no auth): 200 {"status": "ready"} or 503 {"status": "not_ready"}, nothing else.

    Unauthenticated, so it says nothing about files, paths, users or load. A model that failed to load is
    loaded again here once its back-off has passed or its file changed (in the background: the check still
    answers at once), so a load balancer's probe is enough to bring a fixed server back."""
    services = server.services  # type: ignore[attr-defined]

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(_: Request) -> JSONResponse:
        if services.models.poll():
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "not_ready"}, status_code=503)


def guard_malformed_bodies(app: Any, path: str, max_body: int = DEFAULT_MAX_REQUEST_BODY_SIZE) -> None:
    """Put `MalformedBodyGuard` on the MCP endpoint, inside the bearer-token check (unauthenticated requests
    still get their 401 first)."""
    for route in app.routes:
        if getattr(route, "path", None) != path:
            continue
        endpoint = route.app
        if isinstance(endpoint, RequireAuthMiddleware):
            endpoint.app = MalformedBodyGuard(endpoint.app, max_body)
        else:
            route.app = MalformedBodyGuard(endpoint, max_body)
        return
    raise RuntimeError(f"no MCP route at {path!r} to guard")  # the SDK changed how it builds the app


def http_app(server: MCPServer, *, host: str, path: str = "/mcp") -> Any:
    """The Starlette app (auth is already part of `server` when it was created with tokens)."""
    add_health_route(server)
    app = server.streamable_http_app(host=host, streamable_http_path=path)
    guard_malformed_bodies(app, path)
    return app


def serve_http(server: MCPServer, *, host: str, port: int, path: str = "/mcp", allow_remote: bool = False) -> None:
    import uvicorn

    if not is_loopback(host) and not allow_remote:
        raise ConfigError(f"refusing to listen on non-loopback host {host!r}: pass --allow-remote "
                          "(and put TLS in front) to expose prefcall beyond this machine")
    app = http_app(server, host=host, path=path)
    print(f"prefcall: serving MCP over HTTP at http://{host}:{port}{path}", file=sys.stderr, flush=True)
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).run()
