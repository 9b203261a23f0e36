"""`prefcall` command line. Each command module under `prefcall.commands` registers its own subcommands;
this module only lists them and dispatches."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from prefcall import __version__
from prefcall.commands import bench, calibrate, corpus, demos, engine, fit, model, profile, schema, serve, split, tag
from prefcall.commands import eval as evaluate
from prefcall.errors import PrefcallError

# Each module exposes `register(subparsers)` and sets `handler=` on the parsers it adds.
COMMAND_MODULES = (
    engine,  # demo, info, generate
    model,  # model list / pull / check
    serve,  # serve
    profile,  # profile ...
    schema,  # schema ...
    tag,  # tag
    calibrate,  # calibrate
    fit,  # fit (the grounding rule per model file)
    demos,  # demos ...
    evaluate,  # eval
    corpus,  # corpus build
    split,  # split build / show
    bench,  # bench
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prefcall",
        description="Personalised tool selection for MCP hosts, with a local GGUF model.",
    )
    parser.add_argument("--version", action="version", version=f"prefcall {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command as given (run records name it)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        from prefcall.config import Settings

        Settings()  # PREFCALL_* variables are checked before any command starts (a spawned server included)
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:  # noqa: BLE001 - configuration and model errors are one line, the rest re-raised
        line = one_line_error(exc)
        if line is None:
            raise
        print(f"prefcall: error: {line}", file=sys.stderr)
        return 2


def one_line_error(exc: BaseException) -> str | None:
    """The one line to print for a prefcall error or an invalid setting (also when a task group wrapped it);
    None for anything else (a bug: its traceback is wanted)."""
    from pydantic import ValidationError as PydanticValidationError

    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, PrefcallError):
        return str(exc)
    if isinstance(exc, PydanticValidationError):
        from prefcall.config import settings_error

        error = settings_error(exc)
        return None if error is None else str(error)
    return None


if __name__ == "__main__":
    raise SystemExit(main())
