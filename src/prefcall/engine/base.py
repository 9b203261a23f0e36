"""The engine contract every strategy talks to. Only `prefcall.engine.llama` and `.grammar` import llama_cpp.

Design (one contract for the in-process engine, the served engines and the fakes):

- **Prompts stay in pieces.** A `Prompt` is chat messages plus an optional start of the answer that prefcall
  writes itself. Message contents are untrusted text (dialogues, standing instructions, tool descriptions,
  demonstrations): an engine tokenizes them as plain text, never parsing special tokens, and chat-template
  control tokens come only from the template. Strategies never render a prompt to a string and send it back.
- **Cache scopes.** `Prompt.shared` counts the leading messages that do not depend on the user (the system
  prompt with a catalogue). An engine may reuse the KV state of those across users whose `Scope.shared` is the
  same (everyone may read a built-in catalogue); the rest only within the same `Scope.user`.
- **Grammar-constrained JSON** follows the schema's key order (no key sorting), as llama.cpp's converter
  writes it: required properties first, then optional ones, each group in schema order.
- **Probabilities.** Under a grammar, a generated token's `logprob` is renormalised over the tokens the grammar
  allows at that step; a token the grammar forces (the only one allowed) is marked `forced` and carries no
  information about the model's confidence. `raw_logprob` is the unconstrained value, when known.
- **Cancellation.** Every model call takes `cancel` (anything with `is_set()`, e.g. a `threading.Event`);
  an engine checks it between tokens and raises `CancelledError`.

Engines are synchronous and thread-safe (one model call at a time in-process); the server runs them on
its model thread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from prefcall.errors import CancelledError

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class ChatMessage:
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(frozen=True)
class Prompt:
    """A chat prompt kept apart from the template: messages (untrusted contents) and the answer's start.

    `prefix` is text prefcall writes as the beginning of the assistant's answer (e.g. ``Function:`` before
    scoring names, or a forced ``Tool -``); it is tokenized as plain text too. `shared` is how many leading
    messages are the same for every user (system prompt + a catalogue both may read)."""

    messages: tuple[ChatMessage, ...]
    prefix: str = ""
    shared: int = 0

    def __post_init__(self) -> None:
        if not self.messages:
            raise ValueError("a prompt needs at least one message")
        for message in self.messages:
            if message.role not in ROLES:
                raise ValueError(f"unknown chat role {message.role!r}: use one of {', '.join(ROLES)}")
        if not 0 <= self.shared <= len(self.messages):
            raise ValueError(f"shared={self.shared} is outside 0..{len(self.messages)} messages")

    @classmethod
    def chat(cls, system: str | None, user: str, *, prefix: str = "", shared_system: bool = True) -> Prompt:
        """The common shape: one system message (shared across users by default) and one user message."""
        messages = ((ChatMessage("system", system),) if system is not None else ()) + (ChatMessage("user", user),)
        return cls(messages, prefix=prefix, shared=1 if system is not None and shared_system else 0)

    def continued(self, more: str) -> Prompt:
        """The same prompt with more of the answer already written."""
        return replace(self, prefix=self.prefix + more)

    def text_for_display(self) -> str:
        """A readable rendering for logs and debugging (not what a model sees)."""
        body = "\n".join(f"[{m.role}]\n{m.content}" for m in self.messages)
        return body + f"\n[assistant]\n{self.prefix}"


@dataclass(frozen=True)
class Scope:
    """Whose KV state a call may reuse. `user`: the caller (their own earlier text may be reused);
    `shared`: who may read the shared messages (the catalogue's readers; "public" for built-ins)."""

    user: str = ""
    shared: str = "public"


LOCAL = Scope()  # one local user (stdio, CLI, evaluation): everything may be reused


class Cancel(Protocol):
    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class TokenLogprob:
    token: str
    logprob: float  # natural log; under a grammar, renormalised over the tokens it allowed; <= 0
    top: tuple[tuple[str, float], ...] = ()  # runner-up tokens (same normalisation), best first
    forced: bool = False  # the grammar allowed only this token: no information about the model
    raw_logprob: float | None = None  # the model's unconstrained log-probability, when known


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
    def chosen(self) -> list[TokenLogprob]:
        """The tokens the model chose (not forced by a grammar): what confidence measures read."""
        return [t for t in self.tokens if not t.forced]

    @property
    def sum_logprob(self) -> float:
        return sum(t.logprob for t in self.tokens)

    @property
    def mean_logprob(self) -> float:
        chosen = self.chosen
        return sum(t.logprob for t in chosen) / len(chosen) if chosen else 0.0

    @property
    def least_confidence(self) -> float:
        """TAPS's uncertainty: 1 - exp(mean logprob of the chosen tokens); 0.0 when every token was forced."""
        return 1.0 - math.exp(self.mean_logprob) if self.tokens else 1.0


@dataclass
class CandidateScores:
    """Log-probability of each candidate continuation of one prompt."""

    candidates: list[str]
    logprobs: list[float]
    token_counts: list[int]
    usage: PromptUsage = field(default_factory=PromptUsage)
    seconds: float = 0.0

    @property
    def decoded(self) -> int:
        """Single-token decodes the scoring cost: every candidate token after the first (the first comes from the
        prompt's own logits). What raw llama.cpp would spend generating them."""
        return sum(max(0, n - 1) for n in self.token_counts)

    def best(self) -> str:
        return self.candidates[max(range(len(self.logprobs)), key=self.logprobs.__getitem__)]

    def probabilities(self) -> list[float]:
        """Softmax over the candidates (their share of the mass the model gives to this set)."""
        top = max(self.logprobs)
        weights = [math.exp(lp - top) for lp in self.logprobs]
        total = sum(weights)
        return [w / total for w in weights]


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do; a strategy that needs a missing one falls back or refuses with one line."""

    grammar: bool = True  # JSON-Schema-constrained generation
    logprobs: bool = True  # per-token log-probabilities of generated text
    renormalised_logprobs: bool = True  # logprobs renormalised over grammar-allowed tokens (else raw)
    candidate_scoring: bool = True  # log P(candidate | prompt) by teacher forcing (else: emulated)
    prompt_pieces: bool = True  # untrusted text is kept apart from template tokens
    prefix_cache: bool = True  # KV reuse of shared prompt prefixes
    cancellation: bool = True  # a call stops between tokens when cancelled


# What an engine's candidate scores are (EngineInfo.scores): llama.cpp's raw log P of the candidate's tokens by
# teacher forcing, the closing quote healed (`score_candidates(heal_end=True)`). The in-process engine, llama-server
# and llama-cpp-python's server all score so; on one model file their scores differ by batch-shape noise only (about
# 0.1 nats, tests/test_served_parity.py), so a fit made on one of them holds on the others (storage.fits).
LLAMA_CPP_SCORES = "llama.cpp teacher forcing, raw, closing quote healed"


@dataclass(frozen=True)
class EngineInfo:
    model_path: str
    model_name: str
    backend: str  # "cpu" | "cuda" | "metal" | "fake" | "llama-server" ...
    n_ctx: int
    n_gpu_layers: int
    chat_template: str | None = None
    capabilities: Capabilities = field(default_factory=Capabilities)
    extra: dict[str, Any] = field(default_factory=dict)
    scores: str = ""  # what its candidate scores are (LLAMA_CPP_SCORES, or "" for another kind)
    model_file: str | None = None  # a served engine's GGUF, when the server names one that is on this machine


@runtime_checkable
class Engine(Protocol):
    """What every strategy may ask of a language model."""

    @property
    def info(self) -> EngineInfo: ...

    def count_tokens(self, text: str) -> int:
        """Tokens of plain text (no special-token parsing)."""
        ...

    def prompt_tokens(self, prompt: Prompt) -> int:
        """Tokens of a whole prompt as the engine would evaluate it."""
        ...

    def generate(
        self,
        prompt: Prompt,
        *,
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        json_schema: dict[str, Any] | None = None,
        top_logprobs: int = 0,
        scope: Scope = LOCAL,
        cancel: Cancel | None = None,
    ) -> Generation:
        """Greedy generation; with `json_schema`, output is constrained to JSON valid for it (key order kept)."""
        ...

    def score_candidates(
        self, prompt: Prompt, candidates: Sequence[str], *, scope: Scope = LOCAL, cancel: Cancel | None = None,
        heal_end: bool = False,
    ) -> CandidateScores:
        """Log P(candidate | prompt) for each candidate (plain text continuing the prompt's answer).

        `heal_end`: a candidate whose last token is punctuation only (the closing quote of a JSON string) is
        scored as ending in any token that begins with that text. Byte-pair vocabularies write a closing quote
        together with what follows (`",`, `"}`), so the exact token `"` is improbable even when the value is
        right: with Qwen2.5 `"San Jose"` scored -10.1 against -8.5 for `null`, `"San Jose",` -0.03. Engines that
        cannot sum over their vocabulary (served ones) score the exact tokens."""
        ...


@runtime_checkable
class BatchScoring(Protocol):
    """An engine that scores several prompts' candidates in one go (the in-process llama.cpp engine: their shared
    beginning evaluated once, every candidate in one batched decode). Use `score_batch(engine, ...)`, which falls
    back to one `score_candidates` call per prompt for any other engine."""

    def score_batch(
        self, requests: Sequence[tuple[Prompt, Sequence[str]]], *, scope: Scope = LOCAL, cancel: Cancel | None = None,
        heal_end: bool = False,
    ) -> list[CandidateScores]:
        """One `CandidateScores` per (prompt, candidates), in order; the same scores as `score_candidates` would
        give each, up to the numerical noise of another batch shape."""
        ...


def score_batch(engine: Engine, requests: Sequence[tuple[Prompt, Sequence[str]]], *, heal_end: bool = False,
                scope: Scope | None = None, cancel: Cancel | None = None) -> list[CandidateScores]:
    """Candidates of several prompts scored together where the engine can (`BatchScoring`), else prompt by prompt
    (`scope` and `cancel` passed on when given)."""
    extra: dict[str, Any] = {k: v for k, v in (("scope", scope), ("cancel", cancel)) if v is not None}
    if isinstance(engine, BatchScoring):
        return engine.score_batch(requests, heal_end=heal_end, **extra)
    return [engine.score_candidates(prompt, candidates, heal_end=heal_end, **extra) for prompt, candidates in requests]


@runtime_checkable
class Embedder(Protocol):
    """Sentence embeddings; rows are L2-normalised so a dot product is a cosine."""

    @property
    def name(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> Any:  # numpy.ndarray of shape (n, dim), float32
        ...


class ScopedEngine:
    """An engine bound to one caller's cache scope: what the server hands a strategy for one request.

    Strategies stay unaware of users; every call they make carries the caller's scope and cancellation."""

    def __init__(self, engine: Engine, scope: Scope, cancel: Cancel | None = None) -> None:
        self.engine = engine
        self.scope = scope
        self.cancel = cancel

    @property
    def info(self) -> EngineInfo:
        return self.engine.info

    def count_tokens(self, text: str) -> int:
        return self.engine.count_tokens(text)

    def prompt_tokens(self, prompt: Prompt) -> int:
        return self.engine.prompt_tokens(prompt)

    def generate(self, prompt: Prompt, *, max_tokens: int = 256, stop: Sequence[str] = (),
                 json_schema: dict[str, Any] | None = None, top_logprobs: int = 0, scope: Scope | None = None,
                 cancel: Cancel | None = None) -> Generation:
        return self.engine.generate(prompt, max_tokens=max_tokens, stop=stop, json_schema=json_schema,
                                    top_logprobs=top_logprobs, scope=self.scope, cancel=cancel or self.cancel)

    def score_candidates(self, prompt: Prompt, candidates: Sequence[str], *, scope: Scope | None = None,
                         cancel: Cancel | None = None, heal_end: bool = False) -> CandidateScores:
        return self.engine.score_candidates(prompt, candidates, scope=self.scope, cancel=cancel or self.cancel,
                                            heal_end=heal_end)

    def score_batch(self, requests: Sequence[tuple[Prompt, Sequence[str]]], *, scope: Scope | None = None,
                    cancel: Cancel | None = None, heal_end: bool = False) -> list[CandidateScores]:
        return score_batch(self.engine, requests, heal_end=heal_end, scope=self.scope, cancel=cancel or self.cancel)


def heal_boundary(prompt: Prompt, candidates: Sequence[str]) -> tuple[Prompt, list[str]]:
    """The same texts with the spaces that end the answer prefix moved onto every candidate.

    Byte-pair tokenizers write `: "Paris"` as `:`, ` "`, `Paris`, `"`; scoring `"Paris"` after a prefix that
    ends in a lone space token asks the model about a token sequence it never produced in training (with
    Qwen2.5 every value scored ~0 against `null` that way). Engines that tokenize call this first; the
    candidates' texts, and so the caller's view, are unchanged."""
    stripped = prompt.prefix.rstrip(" \t")
    trail = prompt.prefix[len(stripped):]
    if not trail:
        return prompt, list(candidates)
    return replace(prompt, prefix=stripped), [trail + c for c in candidates]


def schema_key_order(schema: dict[str, Any]) -> list[str]:
    """The order in which grammar-constrained JSON writes an object's keys (llama.cpp's converter):
    required properties first, then the optional ones, each group in the schema's order."""
    properties = list((schema.get("properties") or {}).keys())
    required = set(schema.get("required") or [])
    return [p for p in properties if p in required] + [p for p in properties if p not in required]


def check_cancel(cancel: Cancel | None) -> None:
    if cancel is not None and cancel.is_set():
        raise CancelledError("the request was cancelled (the client went away or gave up): nothing to do")


def reusable(common: int, shared_len: int, scope: Scope, other: Scope | None, other_shared: int) -> int:
    """How much of a cached context a caller may reuse: all of what agrees within one user; across users, only
    the shared messages, and only between callers who may read the same shared text (None: nobody's, nothing)."""
    if other is None:
        return 0
    if other == scope:
        return common
    if other.shared == scope.shared:
        return min(common, shared_len, other_shared)
    return 0


def tokens_before(tokens: list[TokenLogprob], cut: int) -> list[TokenLogprob]:
    """Tokens that start before character `cut`: the stop string's own tokens are not the answer's."""
    kept, length = [], 0
    for token in tokens:
        if length >= cut:
            break
        kept.append(token)
        length += len(token.token)
    return kept


def fold_system(prompt: Prompt, merge_system: bool) -> list[dict[str, str]]:
    """The prompt's messages as a chat template sees them: contents stripped, and where the template rejects a
    system role (`merge_system`), the system text folded into the first user turn (or made one)."""
    messages = [{"role": m.role, "content": m.content.strip()} for m in prompt.messages]
    if merge_system and messages and messages[0]["role"] == "system":
        system = messages.pop(0)["content"]
        if messages and messages[0]["role"] == "user":
            messages[0] = {"role": "user", "content": f"{system}\n\n{messages[0]['content']}"}
        else:
            messages.insert(0, {"role": "user", "content": system})
    return messages
