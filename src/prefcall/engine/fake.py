"""Test doubles: a fake engine with canned text, logprobs and candidate scores, and a fake embedder.

They follow the same contracts as the real ones, so every strategy's unit tests run in milliseconds. The fake
engine is strict where the real one is forced: a canned reply for a JSON-Schema-constrained call must be JSON
that validates against the schema AND writes its keys in the order the grammar would (required properties
first, then optional ones, each in schema order), so a test catches what a real model could never produce.
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

import jsonschema
import numpy as np

from prefcall.engine.base import (
    LOCAL,
    Cancel,
    CandidateScores,
    Capabilities,
    EngineInfo,
    Generation,
    Prompt,
    PromptUsage,
    Scope,
    TokenLogprob,
    schema_key_order,
)
from prefcall.errors import CancelledError, ContextOverflowError, GrammarError

_TOKEN_RE = re.compile(r"\s*\S+|\s+")


def fake_tokenize(text: str) -> list[str]:
    """Whitespace-attached word pieces: concatenating them gives back the text."""
    return _TOKEN_RE.findall(text)


def render_fake(prompt: Prompt) -> str:
    """The fake's chat layout: `<|role|>` lines; what `when=` rules and recorded prompts match against."""
    body = "".join(f"<|{m.role}|>\n{m.content}\n" for m in prompt.messages)
    return body + "<|assistant|>\n" + prompt.prefix


class CannedReplyError(AssertionError):
    """A canned reply the real engine could never produce for this schema (invalid JSON, schema or key order)."""


def check_canned_json(text: str, schema: dict[str, Any]) -> Any:
    """Parse `text` and check it as grammar-constrained output of `schema`; raise CannedReplyError if impossible."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CannedReplyError(f"canned reply is not JSON ({exc.msg}): {text[:80]!r}") from exc
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        raise CannedReplyError(f"canned reply does not validate against its schema: {exc.message}") from exc
    problem = _key_order_problem(value, schema, schema, "$")
    if problem:
        raise CannedReplyError(f"canned reply writes keys out of the grammar's order at {problem}")
    return value


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        node: Any = root
        for part in ref[2:].split("/"):
            node = node[part]
        return _resolve(node, root)
    return schema


def _key_order_problem(value: Any, schema: Any, root: dict[str, Any], path: str) -> str | None:
    if not isinstance(schema, dict):
        return None
    schema = _resolve(schema, root)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            for branch in schema[key]:
                if jsonschema.Draft202012Validator(_with_defs(branch, root)).is_valid(value):
                    return _key_order_problem(value, branch, root, path)
            return None
    if isinstance(value, dict) and "properties" in schema:
        order = schema_key_order(schema)
        positions = [order.index(k) for k in value if k in order]
        if positions != sorted(positions):
            return f"{path}: wrote {list(value)}, grammar order {order}"
        for k, v in value.items():
            problem = _key_order_problem(v, schema["properties"].get(k), root, f"{path}.{k}")
            if problem:
                return problem
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problem = _key_order_problem(item, schema["items"], root, f"{path}[{i}]")
            if problem:
                return problem
    return None


def _with_defs(branch: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    return {**branch, "$defs": root["$defs"]} if "$defs" in root and "$defs" not in branch else branch


@dataclass
class CannedReply:
    text: str
    logprob: float = -0.1  # per token
    when: str | None = None  # substring of the rendered prompt that selects this reply; None = next in queue
    top: Sequence[tuple[str, float]] = ()


@dataclass
class FakeEngine:
    """Canned replies chosen by prompt substring (rules) or in order (queue); records every prompt."""

    replies: list[CannedReply] = field(default_factory=list)
    default: CannedReply = field(default_factory=lambda: CannedReply(text=""))
    scorer: Callable[[str, str], float] | dict[str, float] | None = None
    n_ctx: int = 4096
    capabilities: Capabilities = field(default_factory=Capabilities)
    enforce_schema: bool = True  # False: a backend that silently ignores the JSON Schema (canned text passes as is)
    prompts: list[str] = field(default_factory=list)  # rendered (render_fake) prompts, in call order
    calls: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._queue: deque[CannedReply] = deque(r for r in self.replies if r.when is None)
        self._rules = [r for r in self.replies if r.when is not None]
        self._lock = threading.Lock()
        self._cached: list[str] = []
        self._cached_scope: Scope | None = None
        self._cached_shared = 0

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

    def _usage(self, prompt: Prompt, scope: Scope) -> PromptUsage:
        # Mimic KV prefix reuse: tokens shared with the previous prompt are reused, across users only the
        # shared messages (as the real engine's Scope rule).
        tokens = fake_tokenize(render_fake(prompt))
        shared_len = len(fake_tokenize(render_fake(Prompt(prompt.messages[: prompt.shared])))) - 1 \
            if prompt.shared else 0
        common = 0
        for a, b in zip(tokens, self._cached):
            if a != b:
                break
            common += 1
        if self._cached_scope is None:
            common = 0
        elif self._cached_scope != scope:
            common = min(common, shared_len, self._cached_shared) if self._cached_scope.shared == scope.shared else 0
        self._cached, self._cached_scope, self._cached_shared = tokens, scope, shared_len
        return PromptUsage(prompt_tokens=len(tokens), evaluated=len(tokens) - common, reused=common)

    # -- Engine contract --------------------------------------------------------------
    @property
    def info(self) -> EngineInfo:
        return EngineInfo(model_path="<fake>", model_name="fake", backend="fake", n_ctx=self.n_ctx, n_gpu_layers=0,
                          capabilities=self.capabilities)

    def count_tokens(self, text: str) -> int:
        return len(fake_tokenize(text))

    def prompt_tokens(self, prompt: Prompt) -> int:
        return len(fake_tokenize(render_fake(prompt)))

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
        _check(cancel)
        rendered = render_fake(prompt)
        self._check_fits(rendered)
        with self._lock:
            self.prompts.append(rendered)
            self.calls.append({"kind": "generate", "prompt": rendered, "json_schema": json_schema,
                               "stop": list(stop), "scope": scope})
            canned = self._pick(rendered)
            text = canned.text
            for s in stop:
                if s and s in text:
                    text = text[: text.index(s)]
            if json_schema is not None and self.enforce_schema:
                check_canned_json(text, json_schema)
            pieces = fake_tokenize(text)[:max_tokens]
            finish = "length" if len(fake_tokenize(text)) > max_tokens else "stop"
            tokens = [TokenLogprob(p, canned.logprob, tuple(canned.top)) for p in pieces]
            return Generation(text="".join(pieces), tokens=tokens, usage=self._usage(prompt, scope),
                              finish_reason=finish)

    def score_candidates(
        self, prompt: Prompt, candidates: Sequence[str], *, scope: Scope = LOCAL, cancel: Cancel | None = None,
        heal_end: bool = False,
    ) -> CandidateScores:
        _check(cancel)
        rendered = render_fake(prompt)
        self._check_fits(rendered, max((len(fake_tokenize(c)) for c in candidates), default=0))
        with self._lock:
            self.prompts.append(rendered)
            self.calls.append({"kind": "score", "prompt": rendered, "candidates": list(candidates), "scope": scope,
                               "heal_end": heal_end})
            usage = self._usage(prompt, scope)
            logprobs = [self._score(rendered, c) for c in candidates]
            counts = [max(1, len(fake_tokenize(c))) for c in candidates]
            return CandidateScores(list(candidates), logprobs, counts, usage)

    def _check_fits(self, rendered: str, extra: int = 0) -> None:
        """The real engine's refusal of a prompt its context cannot hold (fake tokens are words)."""
        n_prompt = len(fake_tokenize(rendered)) + extra
        if n_prompt >= self.n_ctx:
            raise ContextOverflowError(f"prompt is {n_prompt} tokens but the context holds {self.n_ctx}: "
                                       "raise PREFCALL_N_CTX or shorten the dialogue")

    def check_grammar(self, schema: dict[str, Any]) -> None:
        """The engine-level grammar check, in pure Python: what llama.cpp refuses is refused here too."""
        check_grammar_pure(schema)

    def _score(self, prompt: str, candidate: str) -> float:
        if callable(self.scorer):
            return float(self.scorer(prompt, candidate))
        if isinstance(self.scorer, dict):
            return float(self.scorer.get(candidate.strip(), self.scorer.get(candidate, -5.0)))
        return -1.0 * max(1, len(fake_tokenize(candidate)))


def check_grammar_pure(schema: dict[str, Any]) -> None:
    """A pure-Python stand-in for compiling a JSON Schema to a llama.cpp grammar (the fake's `check_grammar`).

    Refuses what the in-process engine refuses for the schemas strategies build (already cleaned by
    `schemas.render.grammar_schema`), without llama.cpp: a double quote inside a literal the grammar must write
    (a property name, an enum or const string), which
    llama.cpp's converter escapes wrongly so its parser rejects the grammar
    (tests/test_engine_fake.py checks both against `prefcall.engine.llama.check_grammar`)."""
    if not isinstance(schema, dict):
        raise GrammarError("JSON Schema cannot become a grammar (not an object): simplify or fix the schema")
    problem = _quoted_literal(schema, "$")
    if problem:
        raise GrammarError(f"llama.cpp rejected the grammar built from the schema: a double quote in {problem}; "
                           "simplify the schema")


def _quoted_literal(node: Any, where: str) -> str | None:
    if isinstance(node, list):
        return next((p for i, item in enumerate(node) if (p := _quoted_literal(item, f"{where}[{i}]"))), None)
    if not isinstance(node, dict):
        return None
    for name in node.get("properties") or {}:
        if '"' in str(name):
            return f"property name {name!r} at {where}"
    for key in ("enum", "const"):
        if key in node and _has_quote(node[key]):
            return f"{key} value at {where}"
    return next((p for key, value in node.items() if key not in ("enum", "const")
                 and (p := _quoted_literal(value, f"{where}.{key}"))), None)


def _has_quote(value: Any) -> bool:
    if isinstance(value, str):
        return '"' in value
    if isinstance(value, dict):
        return any(_has_quote(k) or _has_quote(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_quote(v) for v in value)
    return False


class BatchingFakeEngine(FakeEngine):
    """The fake with batch scoring (`BatchScoring`, as the in-process engine has): each batch is recorded in
    `batches` (its prompts' answer prefixes, scope, cancel and heal_end) and scored prompt by prompt."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.batches: list[dict[str, Any]] = []

    def score_batch(self, requests: Sequence[tuple[Prompt, Sequence[str]]], *, scope: Scope = LOCAL,
                    cancel: Cancel | None = None, heal_end: bool = False) -> list[CandidateScores]:
        self.batches.append({"prefixes": [prompt.prefix for prompt, _ in requests], "scope": scope, "cancel": cancel,
                             "heal_end": heal_end})
        _check(cancel)
        return [self.score_candidates(prompt, candidates, scope=scope, heal_end=heal_end)
                for prompt, candidates in requests]


def _check(cancel: Cancel | None) -> None:
    if cancel is not None and cancel.is_set():
        raise CancelledError("the request was cancelled (the client went away or gave up): nothing to do")


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


class CancelAfter:
    """A cancel flag that turns set at its (checks + 1)-th look: cancellation lands mid-generation by counting the
    engine's own checks (between tokens, stream events), never by racing a timer against a machine's speed."""

    def __init__(self, checks: int) -> None:
        self.left = checks
        self.looked = 0

    def is_set(self) -> bool:
        self.looked += 1
        self.left -= 1
        return self.left < 0
