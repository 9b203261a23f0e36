"""How the server answers when something goes wrong or takes time: one-line tool and resource errors worded for
an MCP host, log lines, and progress while the model loads."""

import logging
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError as PydanticValidationError

from prefcall.errors import NotFoundError, PrefcallError

log = logging.getLogger("prefcall.server")


# A union's branch appears in pydantic's error location as its type (`dialogue.list[TurnIn].0.role`).
_UNION_BRANCH = re.compile(r"(str|int|float|bool|list\[.*\]|dict\[.*\])")


def argument_error(exc: PydanticValidationError, what: str = "argument") -> str:
    """One line from pydantic's structured errors, naming the most specific failing field (for a union, the
    branch the caller evidently meant: the deepest location)."""
    errors = exc.errors()
    deepest = max(errors, key=lambda e: len(e["loc"]))
    field = ".".join(str(p) for p in deepest["loc"] if not (isinstance(p, str) and _UNION_BRANCH.fullmatch(p)))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"invalid {what} {field or 'input'}: {deepest['msg']}{more}"


# Store messages suggest CLI commands; an MCP host should hear about the equivalent tools instead.
_CLI_HINTS = [
    (re.compile(r"create it with `prefcall profile create ([^`]+)`"), r"create it with create_profile(user_id='\1')"),
    (re.compile(r"`prefcall profile list[^`]*`"), "list_instructions"),
    (re.compile(r"see `prefcall schema list`"), "see list_catalogues"),
    (re.compile(r"pass --replace to overwrite"), "pass replace=true to overwrite"),
]


def for_hosts(message: str) -> str:
    for pattern, replacement in _CLI_HINTS:
        message = pattern.sub(replacement, message)
    return message


@contextmanager
def tool_errors() -> Iterator[None]:
    """Every failure becomes an MCP tool error (isError) with one actionable line; the server keeps serving."""
    try:
        yield
    except (ToolError, MCPError):
        raise
    except PrefcallError as exc:
        raise ToolError(for_hosts(str(exc))) from exc
    except PydanticValidationError as exc:
        raise ToolError(argument_error(exc, "input")) from exc
    except Exception as exc:  # noqa: BLE001 - last resort: say what failed, keep serving
        log.exception("unexpected failure in a tool")
        raise ToolError(f"internal error ({type(exc).__name__}: {exc}): the server is still running; "
                        "see its stderr log and report the bug") from exc


@contextmanager
def resource_errors() -> Iterator[None]:
    try:
        yield
    except (ResourceError, MCPError):
        raise
    except NotFoundError as exc:
        raise ResourceNotFoundError(for_hosts(str(exc))) from exc
    except PrefcallError as exc:
        raise ResourceError(for_hosts(str(exc))) from exc


async def tell(ctx: Context, level: str, message: str) -> None:
    """Log to stderr and, for clients that opted in (log_level), as an MCP logging notification."""
    log.log(logging.WARNING if level == "warning" else logging.INFO, message)
    with warnings.catch_warnings():
        # The logging capability is deprecated in the 2026-07-28 protocol but still what hosts display.
        warnings.simplefilter("ignore")
        try:
            await ctx.log(level, message, logger_name="prefcall")  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - a log line must never fail a tool
            log.debug("could not send a log notification", exc_info=True)


def progress_for(ctx: Context):
    """Progress notifications while the model is still loading (no-op when the client sent no token)."""
    told = False

    async def report(waited: float, message: str) -> None:
        nonlocal told
        if not told:
            told = True
            await tell(ctx, "info", message)
        try:
            await ctx.report_progress(waited, None, message)
        except Exception:  # noqa: BLE001
            log.debug("could not send progress", exc_info=True)

    return report
