"""`prefcall` command line. Each command module under `prefcall.commands` registers its own subcommands;
this module only lists them and dispatches."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from prefcall import __version__
from prefcall.commands import bench, calibrate, demos, engine, model, profile, schema, serve, tag
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
    demos,  # demos ...
    evaluate,  # eval
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
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        return int(handler(args) or 0)
    except PrefcallError as exc:
        print(f"prefcall: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
