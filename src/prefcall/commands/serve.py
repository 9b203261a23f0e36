"""`prefcall serve`: the MCP server over stdio (default, what desktop hosts spawn) or streamable HTTP."""

from __future__ import annotations

import argparse
import logging
import sys

from prefcall.commands.options import add_model_options, settings_from_args


def register(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser("serve", help="run the MCP server (stdio by default, or --transport http)")
    add_model_options(serve)
    serve.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                       help="stdio for desktop hosts (default); http for streamable HTTP with bearer tokens")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP: interface to bind (default loopback)")
    serve.add_argument("--port", type=int, default=8765, help="HTTP: port (default 8765)")
    serve.add_argument("--path", default="/mcp", help="HTTP: endpoint path (default /mcp)")
    serve.add_argument("--allow-remote", action="store_true", help="HTTP: allow binding a non-loopback host")
    serve.add_argument("--tokens-file", help="HTTP: file of 'token:user_id' lines (or PREFCALL_TOKENS)")
    serve.add_argument("--user", default="me",
                       help="HTTP: user of the token generated when none is configured (default 'me')")
    serve.add_argument("--db", help="SQLite database path (default PREFCALL_DB_PATH or DATA_DIR/prefcall.db)")
    serve.add_argument("--verbose", action="store_true", help="debug logging to stderr")
    serve.set_defaults(handler=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    updates = {}
    if args.tokens_file:
        updates["tokens_file"] = args.tokens_file
    if args.verbose:
        updates["verbose"] = True
    if updates:
        settings = settings.model_copy(update=updates)
    # stdout belongs to the MCP protocol on stdio: every log line goes to stderr.
    logging.basicConfig(level=logging.DEBUG if settings.verbose else logging.INFO, stream=sys.stderr,
                        format="prefcall %(levelname)s %(name)s: %(message)s")
    from prefcall.server.app import create_server

    if args.transport == "http":
        from prefcall.server.http import serve_http, tokens_for_http

        server = create_server(settings, tokens=tokens_for_http(settings, args.user))
        try:
            serve_http(server, host=args.host, port=args.port, path=args.path, allow_remote=args.allow_remote)
        finally:
            server.services.close()  # type: ignore[attr-defined]
        return 0

    import anyio

    from prefcall.server.transport import serve_stdio

    server = create_server(settings)
    try:
        anyio.run(serve_stdio, server)
    finally:
        server.services.close()  # type: ignore[attr-defined]
    return 0
