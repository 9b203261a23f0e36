"""Commands that use the model directly: demo, info, generate."""

from __future__ import annotations

import argparse
import json
import sys

from prefcall.commands.options import add_model_options, settings_from_args
from prefcall.engine.base import Prompt


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
    from prefcall.strategies.taps_gate import gate_status

    report = info_report(engine.info, settings.model) | {
        "engine": settings.engine or "llama-cpp", "capabilities": asdict(engine.info.capabilities),
        "taps_gate": gate_status(engine.info.model_name, settings.data_dir),
        "grounding_fit": fit_status(engine, settings.data_dir)}
    print(json.dumps(report, indent=2, default=str))
    close = getattr(engine, "close", None)
    if callable(close):
        close()
    return 0


def fit_status(engine, data_dir) -> dict:
    """Which grounding fit the pipeline uses for this model (`prefcall fit`), by its fingerprint."""
    from prefcall.storage import fits

    fingerprint = fits.engine_fingerprint(engine, data_dir)
    found = fits.load(fingerprint, data_dir)
    shared = {"shared_with_file": engine.info.model_file} if fits.shares_file_fit(engine.info) else {}
    if found is None:
        return {"fitted": False, "fingerprint": fingerprint, **shared,
                "note": "no fit for this model: the shipped rule applies; run `prefcall fit` to fit it"}
    selection = found.source.get("selection", {}) if found.selection else {}
    return {"fitted": True, "fingerprint": fingerprint, **shared, "origin": found.origin,
            "kinds": sorted(found.grounding),
            "command": found.source.get("command", ""),
            "selection": {"fitted": True, "command": selection.get("command", ""),
                          "tune_top1": selection.get("accuracy_fitted", {}).get("all")} if found.selection
            else {"fitted": False, "note": "stage 1 uses the hand-set rule; `prefcall fit --selection` fits it"},
            # the other fitted parts of stage 1 and of the refusal decision (None: the hand-set one applies)
            "calibration_floor": found.calibration_floor, "none_prior": found.none_prior,
            "relevance_rule": found.relevance is not None}


def info_report(info, reference: str | None = None) -> dict:
    """What `prefcall info` prints: the model, the backend it runs on and how many layers were offloaded."""
    from pathlib import Path

    from prefcall.engine.gguf_meta import read_gguf_info

    extra = info.extra if isinstance(info.extra, dict) else {}
    gguf = read_gguf_info(info.model_path) if Path(info.model_path).is_file() else None
    layers = gguf.block_count if gguf is not None else None
    offloaded = extra.get("n_gpu_layers_offloaded")  # reported by engines that know it
    if offloaded is None and info.backend == "cpu":
        offloaded = 0  # a CPU run (no GPU backend in this build, or n_gpu_layers 0) offloads nothing
    return {
        "model": info.model_name,
        "reference": reference or "embedded",
        "path": info.model_path,
        "architecture": gguf.architecture if gguf else None,
        "quantisation": gguf.quantisation if gguf else None,
        "backend": info.backend,
        "n_ctx": info.n_ctx,
        "n_gpu_layers": info.n_gpu_layers,
        "n_gpu_layers_offloaded": offloaded,  # null: the engine did not say
        "n_layers": layers + 1 if layers else None,  # repeating blocks + the output layer, as llama.cpp counts them
        "chat_template": bool(gguf.has_chat_template) if gguf else None,
    }


def run_generate(args: argparse.Namespace) -> int:
    from prefcall.engine import load_engine

    engine = load_engine(settings_from_args(args))
    schema = json.loads(open(args.schema, encoding="utf-8").read()) if args.schema else None
    prompt = Prompt.chat(None, args.prompt)
    result = engine.generate(prompt, max_tokens=args.max_tokens, json_schema=schema)
    print(result.text)
    print(json.dumps({"tokens": result.completion_tokens, "least_confidence": round(result.least_confidence, 4),
                      "prompt_evaluated": result.usage.evaluated, "seconds": round(result.seconds, 3)}),
          file=sys.stderr)
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from prefcall.demo import run

    settings_from_args(args)  # a bad --n-ctx is one line here, not a failure inside the spawned server
    return run(args)
