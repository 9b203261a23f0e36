"""`prefcall` command line. Each area registers its own subcommands; this module only dispatches."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from prefcall import __version__
from prefcall.errors import PrefcallError

# Each module exposes `register(subparsers)` and sets `handler=` on the parsers it adds.
COMMAND_MODULES = (
    "prefcall.commands.engine",  # demo, info, generate
    "prefcall.commands.model",  # model list / pull / check
    "prefcall.server.cli",  # serve
    "prefcall.profiles.cli",  # profile ...
    "prefcall.schemas.cli",  # schema ...
    "prefcall.strategies.cli",  # tag, calibrate
    "prefcall.evaluation.cli",  # eval
    "prefcall.bench.cli",  # bench
)


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """Options every model-using command shares; they override PREFCALL_* variables."""
    parser.add_argument("--model", help="GGUF model: a path, hf:ORG/REPO/FILE.gguf[@REV], ollama:NAME[:TAG], "
                        "lmstudio:PUB/REPO/FILE.gguf or a catalogue name (prefcall model list); "
                        "default: PREFCALL_MODEL or the embedded SmolLM2-135M")
    parser.add_argument("--n-gpu-layers", type=int, help="layers to offload to CUDA/Metal (-1: all)")
    parser.add_argument("--n-ctx", type=int, help="context window in tokens")
    parser.add_argument("--threads", type=int, help="CPU threads")


def settings_from_args(args: argparse.Namespace):  # -> Settings, imported lazily to keep --help fast
    from prefcall.config import Settings

    overrides = {
        "model": getattr(args, "model", None),
        "n_gpu_layers": getattr(args, "n_gpu_layers", None),
        "n_ctx": getattr(args, "n_ctx", None),
        "n_threads": getattr(args, "threads", None),
        "db_path": getattr(args, "db", None),
    }
    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prefcall",
        description="Personalised tool selection for MCP hosts, with a local GGUF model.",
    )
    parser.add_argument("--version", action="version", version=f"prefcall {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
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
