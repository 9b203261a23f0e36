"""Served engines: the engine contract over HTTP, on llama-server, vLLM, SGLang, Ollama or any OpenAI-compatible
server (LM Studio, llama-cpp-python's server).

`PREFCALL_ENGINE=KIND:URL[#model]` picks one; `load_served_engine(settings)` builds it. Each backend declares its
`Capabilities` (see the table in README.md, "Served engines"); a strategy that needs a missing one uses the
documented fallback or gets a one-line `MissingCapabilityError` naming the backend and the feature.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from prefcall.engine.served.base import EngineSpec, ServedEngine
from prefcall.errors import ConfigError

if TYPE_CHECKING:
    import httpx

    from prefcall.config import Settings

IN_PROCESS = ("", "llama-cpp", "llama.cpp", "in-process", "local")
KINDS = {
    "llama-server": "llama-server",
    "llamacpp-server": "llama-server",
    "vllm": "vllm",
    "sglang": "sglang",
    "openai": "openai",
    "lmstudio": "openai",
    "lm-studio": "openai",
    "llama-cpp-python": "llama-cpp-python",
    "ollama": "ollama",
}


def parse_engine_spec(text: str | None, model: str | None = None) -> EngineSpec | None:
    """`KIND:URL[#model]` -> EngineSpec; None for the in-process engine. One-line ConfigError when malformed."""
    value = (text or "").strip()
    if value.lower() in IN_PROCESS:
        return None
    kind, sep, rest = value.partition(":")
    kind = kind.strip().lower()
    if not sep or kind not in KINDS:
        raise ConfigError(f"PREFCALL_ENGINE={value!r} is not KIND:URL: use llama-cpp (in-process) or one of "
                          f"{', '.join(sorted(set(KINDS) - {'llamacpp-server', 'lm-studio'}))} followed by "
                          ":http://host:port")
    url, _, fragment = rest.strip().partition("#")
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or len(url.split("://", 1)[1]) == 0:
        raise ConfigError(f"PREFCALL_ENGINE={value!r}: the URL must start with http:// or https:// "
                          f"(e.g. {kind}:http://127.0.0.1:8080)")
    for suffix in ("/v1", "/api"):
        url = url.removesuffix(suffix)  # people paste OpenAI base URLs
    return EngineSpec(KINDS[kind], url, fragment.strip() or model or None)


def load_served_engine(settings: Settings, *, transport: httpx.BaseTransport | None = None,
                       sleep: Callable[[float], None] = time.sleep) -> ServedEngine:
    spec = parse_engine_spec(settings.engine, settings.engine_model)
    if spec is None:
        raise ConfigError("PREFCALL_ENGINE names the in-process engine: load it with prefcall.engine.load_engine")
    if spec.kind == "llama-server":
        from prefcall.engine.served.llama_server import LlamaServerEngine

        return LlamaServerEngine(spec, settings, transport=transport, sleep=sleep)
    if spec.kind == "ollama":
        from prefcall.engine.served.ollama import OllamaEngine

        return OllamaEngine(spec, settings, transport=transport, sleep=sleep)
    from prefcall.engine.served.openai_compat import OpenAICompatEngine

    return OpenAICompatEngine(spec, settings, transport=transport, sleep=sleep)


__all__ = ["EngineSpec", "ServedEngine", "load_served_engine", "parse_engine_spec"]
