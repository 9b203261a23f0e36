"""prefcall.server: the MCP server (`create_server`) and `prefcall serve`."""

from __future__ import annotations

from typing import Any


def create_server(*args: Any, **kwargs: Any) -> Any:
    """Build the MCP server; see `prefcall.server.app.create_server`."""
    from prefcall.server.app import create_server as _create

    return _create(*args, **kwargs)


__all__ = ["create_server"]
