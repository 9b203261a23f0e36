"""Engines: the contract, the llama.cpp implementation (imported lazily), fakes, and the embedder."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prefcall.engine.base import (
    CandidateScores,
    ChatMessage,
    Embedder,
    Engine,
    EngineInfo,
    Generation,
    PromptUsage,
    TokenLogprob,
)

if TYPE_CHECKING:
    from prefcall.config import Settings


def load_engine(settings: Settings) -> Engine:
    """The engine PREFCALL_ENGINE names: the in-process llama.cpp engine (unset or `llama-cpp`), or a served one
    (`llama-server:URL`, `vllm:URL`, `sglang:URL`, `openai:URL`, `llama-cpp-python:URL`, `ollama:URL#model`).

    Imported here so that nothing else pulls in llama_cpp, and served engines never load a model in-process."""
    from prefcall.engine.served import load_served_engine, parse_engine_spec

    if parse_engine_spec(settings.engine, settings.engine_model) is not None:
        return load_served_engine(settings)
    from prefcall.engine.llama import LlamaEngine

    return LlamaEngine(settings)


def load_embedder(settings: Settings) -> Embedder:
    from prefcall.engine.embedder import SentenceEmbedder

    return SentenceEmbedder(settings.embedder, threads=settings.embedder_threads, backend=settings.embedder_backend)


__all__ = [
    "CandidateScores",
    "ChatMessage",
    "Embedder",
    "Engine",
    "EngineInfo",
    "Generation",
    "PromptUsage",
    "TokenLogprob",
    "load_embedder",
    "load_engine",
]
