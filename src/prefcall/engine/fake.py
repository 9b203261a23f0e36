"""Test doubles: a fake engine with canned text, logprobs and candidate scores, and a fake embedder.

They follow the same contracts as the real ones, so every strategy's unit tests run in milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prefcall.engine.base import (
    CandidateScores,
    ChatMessage,
    EngineInfo,
    Generation,
    PromptUsage,
    TokenLogprob,
)

_TOKEN_RE = re.compile(r"\s*\S+|\s+")


def fake_tokenize(text: str) -> list[str]:
    """Whitespace-attached word pieces: concatenating them gives back the text."""
    return _TOKEN_RE.findall(text)


@dataclass
class CannedReply:
    text: str
    logprob: float = -0.1  # per token
    when: str | None = None  # substring of the prompt that selects this reply; None = next in queue
    top: Sequence[tuple[str, float]] = ()


@dataclass
class FakeEngine:
    """Canned replies chosen by prompt substring (rules) or in order (queue); records every prompt."""

    replies: list[CannedReply] = field(default_factory=list)
    default: CannedReply = field(default_factory=lambda: CannedReply(text=""))
    scorer: Callable[[str, str], float] | dict[str, float] | None = None
    n_ctx: int = 4096
    prompts: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._queue: deque[CannedReply] = deque(r for r in self.replies if r.when is None)
        self._rules = [r for r in self.replies if r.when is not None]
        self._lock = threading.Lock()
        self._cached_prefix: list[str] = []

    # -- canned behaviour -------------------------------------------------------------
    def reply(self, text: str, *, when: str | None = None, logprob: float = -0.1) -> FakeEngine:
        item = CannedReply(text=text, when=when, logprob=logprob)
        (self._rules if when is not None else self._queue).append(item)
        return self

    def _pick(self, prompt: str) -> CannedReply:
        for rule in self._rules:
            if rule.when in prompt:  # type: ignore[operator]
                return rule
        return self._queue.popleft() if self._queue else self.default

    def _usage(self, prompt: str) -> PromptUsage:
        # Mimic KV prefix reuse: tokens shared with the previous prompt are "reused".
        tokens = fake_tokenize(prompt)
        shared = 0
        for a, b in zip(tokens, self._cached_prefix):
            if a != b:
                break
            shared += 1
        self._cached_prefix = tokens
        return PromptUsage(prompt_tokens=len(tokens), evaluated=len(tokens) - shared, reused=shared)

    # -- Engine contract --------------------------------------------------------------
    @property
    def info(self) -> EngineInfo:
        return EngineInfo(model_path="<fake>", model_name="fake", backend="fake", n_ctx=self.n_ctx, n_gpu_layers=0)

    def format_chat(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> str:
        body = "".join(f"<|{m.role}|>\n{m.content}\n" for m in messages)
        return body + ("<|assistant|>\n" if add_generation_prompt else "")

    def count_tokens(self, text: str) -> int:
        return len(fake_tokenize(text))

    def generate(
        self,
        prompt: str,
        *,
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        json_schema: dict[str, Any] | None = None,
        top_logprobs: int = 0,
    ) -> Generation:
        with self._lock:
            self.prompts.append(prompt)
            self.calls.append({"kind": "generate", "prompt": prompt, "json_schema": json_schema, "stop": list(stop)})
            canned = self._pick(prompt)
            text = canned.text
            for s in stop:
                if s and s in text:
                    text = text[: text.index(s)]
            if json_schema is not None:
                json.loads(text)  # a fake must not hand strategies JSON the real grammar could never produce
            pieces = fake_tokenize(text)[:max_tokens]
            finish = "length" if len(fake_tokenize(text)) > max_tokens else "stop"
            tokens = [TokenLogprob(p, canned.logprob, tuple(canned.top)) for p in pieces]
            return Generation(text="".join(pieces), tokens=tokens, usage=self._usage(prompt), finish_reason=finish)

    def score_candidates(self, prompt: str, candidates: Sequence[str]) -> CandidateScores:
        with self._lock:
            self.prompts.append(prompt)
            self.calls.append({"kind": "score", "prompt": prompt, "candidates": list(candidates)})
            usage = self._usage(prompt)
            logprobs = [self._score(prompt, c) for c in candidates]
            counts = [max(1, len(fake_tokenize(c))) for c in candidates]
            return CandidateScores(list(candidates), logprobs, counts, usage)

    def _score(self, prompt: str, candidate: str) -> float:
        if callable(self.scorer):
            return float(self.scorer(prompt, candidate))
        if isinstance(self.scorer, dict):
            return float(self.scorer.get(candidate.strip(), self.scorer.get(candidate, -5.0)))
        return -1.0 * max(1, len(fake_tokenize(candidate)))


class FakeEmbedder:
    """Hashed bag of lower-cased words: texts sharing words get similar, normalised vectors."""

    def __init__(self, dim: int = 128) -> None:
        self.dim = dim
        self.calls = 0

    @property
    def name(self) -> str:
        return f"fake-hash-{self.dim}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z0-9]+", text.lower()):
                bucket = int(hashlib.md5(word.encode()).hexdigest()[:8], 16) % self.dim
                out[row, bucket] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)
