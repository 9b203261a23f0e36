"""The MCP server: tools, resources and a prompt over `Services`. Validation here, decisions in strategies.
This module builds the server; the tools, resources and prompt are in `server/tools.py`.

`create_server(settings, engine=..., embedder=..., store=..., catalogues=..., demos=...)` builds an
`MCPServer`; tests pass fakes and a temporary database, `prefcall serve` passes nothing (real models,
loaded in the background once the server starts).
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, TextContent
from pydantic import ValidationError as PydanticValidationError

from prefcall import __version__
from prefcall.config import Settings
from prefcall.engine.base import Embedder, Engine
from prefcall.schemas.registry import CatalogueRegistry
from prefcall.server.auth import StaticTokenVerifier
from prefcall.server.reporting import argument_error
from prefcall.server.services import Services, Source
from prefcall.server.tools import register_tools
from prefcall.storage.demos import DemoStore
from prefcall.storage.profiles import ProfileStore

SERVER_INSTRUCTIONS = """prefcall turns a user's request into concrete API calls, personalised with the user's standing
instructions (e.g. "when I book flights I fly Delta"). Call parse_request with the dialogue, the user id and a
catalogue name (list_catalogues); it answers with calls to make, a question to ask the user, or a refusal.
Use clarify before acting when a request may be missing details, select_tools_nlt to pick tools from a list,
and report_feedback after the user accepts or corrects a call so prefcall learns from it. Manage standing
instructions with add_instruction / list_instructions / remove_instruction, and tag them with tag_profile."""


class PrefcallServer(MCPServer):
    """MCPServer whose argument-validation failures are one line naming the field.

    The SDK validates a tool's arguments against its signature and raises a ToolError carrying pydantic's
    multi-line dump, with the pydantic error as `__cause__`; that structured error is what is reported here."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise
        except ToolError as exc:
            if isinstance(exc.__cause__, PydanticValidationError):
                raise ToolError(f"Error executing tool {name}: {argument_error(exc.__cause__)}") from exc.__cause__
            raise


async def one_line_errors(ctx: Any, call_next: Any) -> Any:
    """Server middleware, a last guard: every tool error's text is a single line."""
    result = await call_next(ctx)
    if ctx.method != "tools/call":
        return result
    if isinstance(result, CallToolResult) and result.is_error:
        for block in result.content:
            if isinstance(block, TextContent):
                block.text = " ".join(block.text.split())
    elif isinstance(result, dict) and result.get("isError"):  # the runner may hand over the serialised form
        for block in result.get("content") or []:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                block["text"] = " ".join(block["text"].split())
    return result


# ------------------------------------------------------------------------------- the factory
def create_server(
    settings: Settings | None = None,
    *,
    engine: Engine | None = None,
    embedder: Embedder | None = None,
    store: Source[ProfileStore] = None,
    catalogues: Source[CatalogueRegistry] = None,
    demos: Source[DemoStore] = None,
    tokens: dict[str, str] | None = None,
    services: Services | None = None,
) -> MCPServer:
    """Build the prefcall MCP server.

    `engine`/`embedder`: injected models (tests); None loads the real ones in the background at start.
    `store` (ProfileStore), `catalogues` (CatalogueRegistry), `demos` (DemoStore): objects or zero-argument
    factories; None opens them on `settings.database_path()`. `tokens` ({token: user}) turns on bearer auth
    (HTTP). `services` replaces all of the above (tests that control model loading)."""
    settings = settings or Settings()
    services = services or Services(
        settings, engine=engine, embedder=embedder, profiles=store, catalogues=catalogues, demos=demos
    )

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[Services]:
        # Loading starts now, in the background: the host gets tools/list at once, and a tool call that
        # needs the model waits (with progress) instead of failing.
        services.models.start()
        yield services

    auth_kwargs: dict[str, Any] = {}
    if tokens is not None:
        from mcp.server.auth.settings import AuthSettings

        auth_kwargs = {
            "token_verifier": StaticTokenVerifier(tokens),
            "auth": AuthSettings(issuer_url="http://127.0.0.1", resource_server_url=None),
        }
    server = PrefcallServer(
        "prefcall",
        title="prefcall: personalised tool calls",
        instructions=SERVER_INSTRUCTIONS,
        version=__version__,
        lifespan=lifespan,
        middleware=[one_line_errors],
        log_level="DEBUG" if settings.verbose else "WARNING",
        **auth_kwargs,
    )
    server.services = services  # type: ignore[attr-defined]  # for the CLI and tests

    register_tools(server, services, settings)
    return server
