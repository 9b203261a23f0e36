"""The engine contract every strategy talks to. Only `prefcall.engine.llama` imports llama_cpp.

Engines are synchronous and thread-safe (one model call at a time); `AsyncEngine` runs
them off the event loop for the server.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class ChatMessage:
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(frozen=True)
class TokenLogprob:
    token: str
    logprob: float  # natural log of the model's (unconstrained) probability; <= 0
    top: tuple[tuple[str, float], ...] = ()  # runner-up tokens, best first, for margin measures


@dataclass
class PromptUsage:
    """How many prompt tokens were evaluated vs taken from the KV cache."""

    prompt_tokens: int = 0
    evaluated: int = 0
    reused: int = 0

    def add(self, other: PromptUsage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.evaluated += other.evaluated
        self.reused += other.reused


@dataclass
class Generation:
    text: str
    tokens: list[TokenLogprob]
    usage: PromptUsage
    finish_reason: str  # "stop" | "length"
    seconds: float = 0.0

    @property
    def completion_tokens(self) -> int:
        return len(self.tokens)

    @property
    def sum_logprob(self) -> float:
        return sum(t.logprob for t in self.tokens)

    @property
    def mean_logprob(self) -> float:
        return self.sum_logprob / len(self.tokens) if self.tokens else 0.0

    @property
    def least_confidence(self) -> float:
        """TAPS's uncertainty: 1 - exp(mean token logprob)."""
        return 1.0 - math.exp(self.mean_logprob) if self.tokens else 1.0


@dataclass
class CandidateScores:
    """Log-probability of each candidate continuation of one prompt."""

    candidates: list[str]
    logprobs: list[float]
    token_counts: list[int]
    usage: PromptUsage = field(default_factory=PromptUsage)
    seconds: float = 0.0

    def best(self) -> str:
        return self.candidates[max(range(len(self.logprobs)), key=self.logprobs.__getitem__)]

    def probabilities(self) -> list[float]:
        """Softmax over the candidates (their share of the mass the model gives to this set)."""
        top = max(self.logprobs)
        weights = [math.exp(lp - top) for lp in self.logprobs]
        total = sum(weights)
        return [w / total for w in weights]


@dataclass(frozen=True)
class EngineInfo:
    model_path: str
    model_name: str
    backend: str  # "cpu" | "cuda" | "metal" | "fake" ...
    n_ctx: int
    n_gpu_layers: int
    chat_template: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Engine(Protocol):
    """What every strategy may ask of a language model."""

    @property
    def info(self) -> EngineInfo: ...

    def format_chat(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> str:
        """Render messages with the model's own chat template."""
        ...

    def count_tokens(self, text: str) -> int: ...

    def generate(
        self,
        prompt: str,
        *,
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        json_schema: dict[str, Any] | None = None,
        top_logprobs: int = 0,
    ) -> Generation:
        """Greedy generation; with `json_schema`, output is constrained to JSON valid for it."""
        ...

    def score_candidates(self, prompt: str, candidates: Sequence[str]) -> CandidateScores:
        """Log P(candidate | prompt) for each candidate, evaluating the prompt once."""
        ...


@runtime_checkable
class Embedder(Protocol):
    """Sentence embeddings; rows are L2-normalised so a dot product is a cosine."""

    @property
    def name(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> Any:  # numpy.ndarray of shape (n, dim), float32
        ...
