"""Commands that use the model directly: demo, info, generate."""

from __future__ import annotations

import argparse
import json
import sys

from prefcall.commands.options import add_model_options, settings_from_args
from prefcall.engine.base import ChatMessage


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser("demo", help="run the end-to-end demo through MCP with the embedded model")
    add_model_options(demo)
    demo.set_defaults(handler=run_demo)

    info = subparsers.add_parser("info", help="load the model and report it, its backend and settings")
    add_model_options(info)
    info.set_defaults(handler=run_info)

    generate = subparsers.add_parser("generate", help="generate from a prompt (debugging aid)")
    add_model_options(generate)
    generate.add_argument("prompt", help="user message, rendered with the model's chat template")
    generate.add_argument("--schema", help="JSON Schema file: constrain the output to JSON valid for it")
    generate.add_argument("--max-tokens", type=int, default=128)
    generate.set_defaults(handler=run_generate)


def run_info(args: argparse.Namespace) -> int:
    from prefcall.engine import load_engine

    from dataclasses import asdict

    settings = settings_from_args(args)
    engine = load_engine(settings)
    info = engine.info
    report = {"model": info.model_name, "path": info.model_path, "backend": info.backend,
              "n_ctx": info.n_ctx, "n_gpu_layers": info.n_gpu_layers, "engine": settings.engine or "llama-cpp",
              "capabilities": asdict(info.capabilities)}
    if info.extra:
        report["details"] = info.extra
    print(json.dumps(report, indent=2, default=str))
    close = getattr(engine, "close", None)
    if callable(close):
        close()
    return 0


def run_generate(args: argparse.Namespace) -> int:
    from prefcall.engine import load_engine

    engine = load_engine(settings_from_args(args))
    schema = json.loads(open(args.schema, encoding="utf-8").read()) if args.schema else None
    prompt = engine.format_chat([ChatMessage("user", args.prompt)])
    result = engine.generate(prompt, max_tokens=args.max_tokens, json_schema=schema)
    print(result.text)
    print(json.dumps({"tokens": result.completion_tokens, "least_confidence": round(result.least_confidence, 4),
                      "prompt_evaluated": result.usage.evaluated, "seconds": round(result.seconds, 3)}),
          file=sys.stderr)
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from prefcall.demo import run

    return run(args)
