"""Options every model-using command shares, and the Settings they build."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prefcall.config import Settings


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """Options every model-using command shares; they override PREFCALL_* variables."""
    parser.add_argument("--model", help="GGUF model: a path, hf:ORG/REPO/FILE.gguf[@REV], ollama:NAME[:TAG], "
                        "lmstudio:PUB/REPO/FILE.gguf or a catalogue name (prefcall model list); "
                        "default: PREFCALL_MODEL or the embedded SmolLM2-135M")
    parser.add_argument("--n-gpu-layers", type=int, help="layers to offload to CUDA/Metal (-1: all)")
    parser.add_argument("--n-ctx", type=int, help="context window in tokens")
    parser.add_argument("--threads", type=int, help="CPU threads")
    parser.add_argument("--engine", help="where the model runs: llama-cpp (in-process, default) or KIND:URL[#model], "
                                         "e.g. llama-server:http://127.0.0.1:8080, vllm:URL, ollama:URL#llama3.2 "
                                         "(default: PREFCALL_ENGINE)")


def settings_from_args(args: argparse.Namespace) -> Settings:
    from prefcall.config import Settings  # pydantic-settings: only when a command runs, not for --help

    overrides = {
        "model": getattr(args, "model", None),
        "n_gpu_layers": getattr(args, "n_gpu_layers", None),
        "n_ctx": getattr(args, "n_ctx", None),
        "n_threads": getattr(args, "threads", None),
        "engine": getattr(args, "engine", None),
        "db_path": getattr(args, "db", None),
    }
    return Settings(**{k: v for k, v in overrides.items() if v is not None})
