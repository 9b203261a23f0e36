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
    """The real llama.cpp engine; imported here so that nothing else pulls in llama_cpp."""
    from prefcall.engine.llama import LlamaEngine

    return LlamaEngine(settings)


def load_embedder(settings: Settings) -> Embedder:
    from prefcall.engine.embedder import SentenceEmbedder

    return SentenceEmbedder(settings.embedder, threads=settings.embedder_threads)


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
