"""What every served engine shares: the HTTP client, prompt layout, scope bookkeeping and the choice fallback.

- **HTTP.** One `httpx.Client` per engine, thread-safe, with a connection pool sized to the model queue
  (`PREFCALL_ENGINE_POOL`), timeouts, and retries with exponential backoff and jitter on HTTP 429/503 and refused
  connections (never on a read timeout: the request may be running). No lock is held around a request:
  concurrency is the backend's job (its slots, batches and replicas).
- **Prompt layout.** The chat template is rendered with a placeholder per message (by the backend where it can
  render, else client-side with sandboxed Jinja); the text between placeholders is the template's own, the
  placeholders stand for untrusted contents. A backend then tokenizes the pieces apart (token-id prompts) or
  sends one string whose contents were *defused*: every role marker the template uses and every `<|...|>`,
  `<tag>` or `[TAG]`-shaped marker is broken up so that it cannot parse as a control token.
- **Scopes.** `ScopeLedger` keeps the last prompts each scope sent, so a prefix-cache count reported by the
  backend is clipped to what the caller may know: its own earlier text, or the shared messages of a scope
  it shares. Traces never show another user's cached text (timing is a separate side channel, see README).
- **Choice fallback.** Backends without prompt logprobs score candidates by one constrained generation over the
  candidate set: the chosen candidate's score is its path's logprobs; the others get upper bounds read from the
  alternatives at the token where they leave that path.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from prefcall.config import Settings
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
)
from prefcall.errors import (
    BackendError,
    BackendTimeoutError,
    BackendUnavailableError,
    CancelledError,
    ConfigError,
    ContextOverflowError,
    EngineError,
    MissingCapabilityError,
)

RETRY_STATUS = (429, 503)
_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def check_cancel(cancel: Cancel | None) -> None:
    if cancel is not None and cancel.is_set():
        raise CancelledError("the request was cancelled (the client went away or gave up): nothing to do")


# -- HTTP ----------------------------------------------------------------------------------------------------------
class HttpClient:
    """A pooled, retrying JSON client for one backend; every failure becomes a typed one-line error."""

    def __init__(self, backend: str, base_url: str, settings: Settings, *,
                 transport: httpx.BaseTransport | None = None, sleep: Callable[[float], None] = time.sleep,
                 backoff_base_s: float = 0.5, backoff_cap_s: float = 8.0) -> None:
        self.backend = backend
        self.base_url = base_url.rstrip("/")
        self.retries = settings.engine_retries
        self.timeout_s = settings.engine_timeout_s
        self._sleep = sleep
        self._backoff_base = backoff_base_s
        self._backoff_cap = backoff_cap_s
        headers = {"Accept": "application/json"}
        token = settings.engine_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        pool = settings.engine_pool
        self.client = httpx.Client(
            base_url=self.base_url, headers=headers, transport=transport,
            timeout=httpx.Timeout(settings.engine_timeout_s, connect=settings.engine_connect_timeout_s),
            limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool),
        )
        self.requests = 0  # sent, retries included (tests and the bench read it)

    @property
    def where(self) -> str:
        return f"{self.backend} at {self.base_url}"

    def close(self) -> None:
        self.client.close()

    def get(self, path: str, *, cancel: Cancel | None = None) -> Any:
        return self.request("GET", path, None, cancel=cancel)

    def post(self, path: str, body: dict[str, Any], *, cancel: Cancel | None = None) -> Any:
        return self.request("POST", path, body, cancel=cancel)

    def _attempt(self, attempt: int, path: str, cancel: Cancel | None, send: Callable[[], Any]) -> Any:
        """One try of `send()`: its result, None when a refused connection is worth another try (after the
        backoff), else the failure as a one-line typed error."""
        check_cancel(cancel)
        try:
            self.requests += 1
            return send()
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            if attempt < self.retries:
                self._backoff(attempt, None, cancel)
                return None
            raise BackendUnavailableError(f"{self.where} is not reachable ({_short(exc)}): start it or fix "
                                          "PREFCALL_ENGINE") from exc
        except httpx.TimeoutException as exc:
            raise BackendTimeoutError(f"{self.where} did not answer {path} within {self.timeout_s:g} s: raise "
                                      "PREFCALL_ENGINE_TIMEOUT_S or check the server's load") from exc
        except httpx.HTTPError as exc:
            raise BackendError(f"{self.where} failed on {path} ({_short(exc)}): check the server") from exc

    def request(self, method: str, path: str, body: dict[str, Any] | None, *, cancel: Cancel | None = None) -> Any:
        for attempt in range(self.retries + 1):
            response = self._attempt(attempt, path, cancel, lambda: self.client.request(
                method, path, content=_dumps(body) if body is not None else None,
                headers={"Content-Type": "application/json"} if body is not None else None))
            if response is None:
                continue
            if response.status_code in RETRY_STATUS and attempt < self.retries:
                self._backoff(attempt, response.headers.get("Retry-After"), cancel)
                continue
            self._raise_for_status(response.status_code, response.text, path)
            try:
                return response.json()
            except ValueError as exc:
                raise BackendError(f"{self.where} answered {path} with something that is not JSON: check the URL "
                                   "and the engine kind in PREFCALL_ENGINE") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    @contextmanager
    def stream(self, path: str, body: dict[str, Any], *, cancel: Cancel | None = None,
               ndjson: bool = False) -> Iterator[Iterator[dict[str, Any]]]:
        """POST and yield the events of a server-sent-events (or NDJSON) stream; cancel closes the connection."""
        for attempt in range(self.retries + 1):
            def open_stream() -> tuple[Any, Any]:
                context = self.client.stream("POST", path, content=_dumps(body),
                                             headers={"Content-Type": "application/json"})
                return context, context.__enter__()

            opened = self._attempt(attempt, path, cancel, open_stream)
            if opened is None:
                continue
            context, response = opened
            try:
                if response.status_code != 200:
                    text = response.read().decode("utf-8", "replace")
                    if response.status_code in RETRY_STATUS and attempt < self.retries:
                        retry_after = response.headers.get("Retry-After")
                        context.__exit__(None, None, None)
                        context = None
                        self._backoff(attempt, retry_after, cancel)
                        continue
                    self._raise_for_status(response.status_code, text, path)
                yield self._events(response, path, cancel, ndjson)
                return
            except httpx.TimeoutException as exc:
                raise BackendTimeoutError(f"{self.where} stopped sending {path} for {self.timeout_s:g} s: raise "
                                          "PREFCALL_ENGINE_TIMEOUT_S or check the server's load") from exc
            except httpx.HTTPError as exc:
                raise BackendError(f"{self.where} broke off {path} ({_short(exc)}): check the server") from exc
            finally:
                if context is not None:
                    context.__exit__(None, None, None)

    def _events(self, response: httpx.Response, path: str, cancel: Cancel | None,
                ndjson: bool) -> Iterator[dict[str, Any]]:
        for line in response.iter_lines():
            check_cancel(cancel)  # leaving the loop closes the response: the server sees the client go
            line = line.strip()
            if not line or line.startswith(":"):
                continue
            if not ndjson:
                if not line.startswith("data:"):
                    continue  # event:, id:, retry: lines
                line = line[5:].strip()
                if line == "[DONE]":
                    return
            try:
                event = json.loads(line)
            except ValueError as exc:
                raise BackendError(f"{self.where} sent an unreadable stream event on {path}: {line[:80]!r}") from exc
            if isinstance(event, dict) and event.get("error"):
                raise BackendError(f"{self.where} failed during {path}: {_error_message(event)}")
            yield event
        check_cancel(cancel)

    def _backoff(self, attempt: int, retry_after: str | None, cancel: Cancel | None) -> None:
        """Exponential backoff with full jitter; a Retry-After header (seconds) wins, within the cap."""
        delay = min(self._backoff_cap, self._backoff_base * 2 ** attempt) * (0.5 + random.random() / 2)
        if retry_after:
            try:
                delay = min(self._backoff_cap, max(0.0, float(retry_after)))
            except ValueError:
                pass
        deadline = time.monotonic() + delay
        self._sleep_interruptibly(delay, deadline, cancel)

    def _sleep_interruptibly(self, delay: float, deadline: float, cancel: Cancel | None) -> None:
        if self._sleep is not time.sleep:  # tests inject a fake clock
            check_cancel(cancel)
            self._sleep(delay)
            return
        while True:
            check_cancel(cancel)
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.1))

    def _raise_for_status(self, status: int, text: str, path: str) -> None:
        if status < 300:
            return
        message = _error_message(_maybe_json(text)) or text[:200]
        lowered = message.lower()
        if status in (401, 403):
            raise BackendError(f"{self.where} refused the request (HTTP {status}): set PREFCALL_ENGINE_API_KEY")
        if status in RETRY_STATUS:
            raise BackendUnavailableError(f"{self.where} stayed busy or loading (HTTP {status}) through "
                                          f"{self.retries} retries: try later or add capacity")
        if status == 404:
            raise BackendError(f"{self.where} has no {path} (HTTP 404: {message[:120]}): check the engine kind in "
                               "PREFCALL_ENGINE and the server's version")
        if "context" in lowered and any(w in lowered for w in ("exceed", "too long", "maximum", "length")):
            raise ContextOverflowError(f"{self.where} says the prompt does not fit ({message[:160]}): shorten the "
                                       "dialogue or serve a longer context")
        raise BackendError(f"{self.where} rejected {path} (HTTP {status}: {message[:200]})")


def _dumps(body: dict[str, Any]) -> bytes:
    # Never sort keys: the order of a JSON Schema's properties is the order grammar-constrained JSON writes them.
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _maybe_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _error_message(payload: Any) -> str:
    if isinstance(payload, dict):
        error = payload.get("error", payload.get("detail", payload.get("message")))
        if isinstance(error, dict):
            return str(error.get("message") or error)
        if isinstance(error, list):
            return "; ".join(str(e.get("msg", e)) if isinstance(e, dict) else str(e) for e in error)
        if error is not None:
            return str(error)
    return str(payload) if payload else ""


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:160] or type(exc).__name__


# -- chat templates and prompt layout -----------------------------------------------------------------------------
def compile_template(source: str) -> Callable[..., str]:
    """A sandboxed Jinja chat template, like the in-process engine's (HF-style helpers included)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: time.strftime(fmt)
    return env.from_string(source).render


def load_template_setting(value: str | None) -> str | None:
    """PREFCALL_ENGINE_CHAT_TEMPLATE: Jinja source, a file holding it, or "chatml"."""
    if not value:
        return None
    if value.strip().lower() == "chatml":
        return _CHATML
    if "{%" not in value and "{{" not in value:
        path = Path(value).expanduser()
        if not path.is_file():
            raise ConfigError(f"PREFCALL_ENGINE_CHAT_TEMPLATE={value!r} is neither Jinja text nor a file: give one")
        return path.read_text(encoding="utf-8")
    return value


def jinja_renderer(source: str, bos: str = "", eos: str = "") -> Callable[[list[dict[str, str]]], str]:
    render = compile_template(source)
    return lambda messages: render(messages=messages, add_generation_prompt=True, bos_token=bos, eos_token=eos)


@dataclass(frozen=True)
class Layout:
    """A rendered prompt in pieces: ("template", text) and ("content", message index), in order."""

    pieces: tuple[tuple[str, Any], ...]
    messages: tuple[dict[str, str], ...]
    shared_pieces: int  # how many leading pieces belong to the shared messages (their end-of-turn included)
    ok: bool = True  # False: the template rewrites contents; `pieces` is one defused template string


_MARKER_RE = re.compile(r"<\|[^<>|\s]{0,40}\|>|</?[A-Za-z_][A-Za-z0-9_.:\-]{0,40}>|\[/?[A-Z][A-Z_]{1,20}\]")
_GENERIC_MARKERS = ("<|", "|>", "<s>", "</s>")


class ChatLayout:
    """Renders messages through a chat template with placeholders and splits template text from contents.

    `render(messages)` renders placeholder messages to text with the generation prompt added; it is the
    backend's own renderer (llama-server's /apply-template, vLLM's /tokenize + /detokenize) or client-side Jinja.
    Layouts are cached per sequence of roles: a template sees only placeholders, never user text."""

    def __init__(self, render: Callable[[list[dict[str, str]]], str]) -> None:
        self._render = render
        self._nonce = secrets.token_hex(6)
        self._cache: OrderedDict[tuple[str, ...], tuple[str, ...] | None] = OrderedDict()
        self._lock = threading.Lock()
        self.merge_system = False
        self.markers: set[str] = set(_GENERIC_MARKERS)
        self.pieces_ok = self._probe()

    def _mark(self, i: int) -> str:
        return f"\u27e6m{i}{self._nonce}\u27e7"

    def _probe(self) -> bool:
        probe = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                 {"role": "assistant", "content": "a"}, {"role": "user", "content": "v"}]
        try:
            self._render(probe)
        except MissingCapabilityError:
            raise
        except Exception:  # noqa: BLE001 - templates raise their own errors for roles they do not support
            self.merge_system = True
        return self._split(("user", "assistant", "user")) is not None

    def messages(self, prompt: Prompt) -> tuple[list[dict[str, str]], int]:
        """The messages as the template sees them (contents stripped, a rejected system role folded into the first
        user turn) and how many of them are shared."""
        messages = [{"role": m.role, "content": m.content.strip()} for m in prompt.messages]
        shared = prompt.shared
        if self.merge_system and messages and messages[0]["role"] == "system":
            system = messages.pop(0)["content"]
            if messages and messages[0]["role"] == "user":
                messages[0] = {"role": "user", "content": f"{system}\n\n{messages[0]['content']}"}
            else:
                messages.insert(0, {"role": "user", "content": system})
            shared = 0  # the system text now shares a turn with the user's
        return messages, shared

    def _split(self, roles: tuple[str, ...]) -> tuple[str, ...] | None:
        """The template's text around each placeholder (len(roles) + 1 strings), or None if contents are rewritten."""
        with self._lock:
            if roles in self._cache:
                self._cache.move_to_end(roles)
                return self._cache[roles]
        marks = [self._mark(i) for i in range(len(roles))]
        rendered = self._render([{"role": r, "content": m} for r, m in zip(roles, marks)])
        texts: tuple[str, ...] | None = None
        if all(rendered.count(m) == 1 for m in marks):
            positions = [rendered.index(m) for m in marks]
            if positions == sorted(positions):
                out, start = [], 0
                for mark, at in zip(marks, positions):
                    out.append(rendered[start:at])
                    start = at + len(mark)
                out.append(rendered[start:])
                texts = tuple(out)
        with self._lock:
            self._cache[roles] = texts
            while len(self._cache) > 64:
                self._cache.popitem(last=False)
            if texts is not None:
                for text in texts:
                    self.markers.update(_MARKER_RE.findall(text))
        return texts

    def layout(self, prompt: Prompt) -> Layout:
        messages, shared = self.messages(prompt)
        texts = self._split(tuple(m["role"] for m in messages)) if self.pieces_ok else None
        if texts is None:
            # A template that rewrites contents: render them, defused, as one piece (nothing is shared).
            safe = [{**m, "content": self.defuse(m["content"])} for m in messages]
            return Layout((("template", self._render(safe)),), tuple(messages), 0, ok=False)
        pieces: list[tuple[str, Any]] = []
        shared_pieces = 0
        for i, message in enumerate(messages):
            pieces.append(("template", texts[i]))
            pieces.append(("content", i))
            if i == shared - 1:
                shared_pieces = len(pieces) + 1  # the template text after it (end of turn) is shared too
        pieces.append(("template", texts[-1]))
        return Layout(tuple(pieces), tuple(messages), shared_pieces)

    def defuse(self, text: str) -> str:
        """Break every control-token-shaped marker so that a tokenizer parsing special tokens keeps it as text."""
        if not text:
            return text
        with self._lock:
            markers = set(self.markers)
        for marker in sorted(markers | set(_MARKER_RE.findall(text)), key=len, reverse=True):
            if marker and marker in text:
                text = text.replace(marker, marker[0] + " " + marker[1:])
        return text

    def render_text(self, prompt: Prompt) -> str:
        """The whole prompt as one string, contents and prefix defused (for backends that take string prompts)."""
        layout = self.layout(prompt)
        out = []
        for kind, value in layout.pieces:
            out.append(value if kind == "template" else self.defuse(layout.messages[value]["content"]))
        return "".join(out) + self.defuse(prompt.prefix)

    def shared_text_len(self, prompt: Prompt) -> int:
        """Characters of `render_text(prompt)` that belong to the shared messages."""
        layout = self.layout(prompt)
        n = 0
        for kind, value in layout.pieces[: layout.shared_pieces]:
            n += len(value if kind == "template" else self.defuse(layout.messages[value]["content"]))
        return n


# -- scopes --------------------------------------------------------------------------------------------------------
def reusable(common: int, shared_len: int, scope: Scope, other: Scope, other_shared: int) -> int:
    """The in-process engine's rule: all of what agrees within one user; across users only the shared messages,
    and only between callers who may read the same shared text."""
    if other == scope:
        return common
    if other.shared == scope.shared:
        return min(common, shared_len, other_shared)
    return 0


class ScopeLedger:
    """The last prompts sent, per scope: what a caller may be told about prefix reuse (never another user's text)."""

    def __init__(self, size: int = 128) -> None:
        self._recent: OrderedDict[tuple[Scope, bytes], tuple[np.ndarray, int]] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def allowed(self, tokens: Sequence[int], shared_len: int, scope: Scope) -> int:
        best = 0
        mine = np.asarray(tokens, dtype=np.int64)
        with self._lock:
            entries = list(self._recent.items())
        for (other, _), (cached, other_shared) in entries:
            if other != scope and other.shared != scope.shared:
                continue  # nothing of a scope with other readers may be reused
            n = min(len(mine), len(cached))
            differ = np.flatnonzero(mine[:n] != cached[:n])
            common = int(differ[0]) if differ.size else n
            best = max(best, reusable(common, shared_len, scope, other, other_shared))
        return best

    def record(self, tokens: Sequence[int], shared_len: int, scope: Scope) -> None:
        array = np.asarray(tokens, dtype=np.int64)
        key = (scope, array.tobytes())
        with self._lock:
            self._recent[key] = (array, shared_len)
            self._recent.move_to_end(key)
            while len(self._recent) > self._size:
                self._recent.popitem(last=False)

    def usage(self, tokens: Sequence[int], shared_len: int, scope: Scope, server_reused: int | None) -> PromptUsage:
        """Usage with the backend's cached count clipped to what this scope may know; unknown counts read as 0."""
        allowed = self.allowed(tokens, shared_len, scope)
        self.record(tokens, shared_len, scope)
        reused = min(server_reused or 0, allowed, max(0, len(tokens) - 1))
        return PromptUsage(prompt_tokens=len(tokens), evaluated=len(tokens) - reused, reused=reused)


def cache_salt(secret: str, scope: Scope) -> str:
    """A per-scope salt for backends that salt their prefix cache (vLLM `cache_salt`): 43 url-safe characters."""
    digest = hashlib.sha256(f"{secret}\0{scope.shared}\0{scope.user}".encode()).hexdigest()
    return digest[:43]


# -- token bookkeeping ---------------------------------------------------------------------------------------------
def tokens_before(tokens: list[TokenLogprob], cut: int) -> list[TokenLogprob]:
    """Tokens that start before character `cut` (as the in-process engine keeps them at a stop string)."""
    kept, length = [], 0
    for token in tokens:
        if length >= cut:
            break
        kept.append(token)
        length += len(token.token)
    return kept


def apply_stop(text: str, tokens: list[TokenLogprob], stop: Sequence[str]) -> tuple[str, list[TokenLogprob], bool]:
    """Cut at the first stop string (the backend usually did already); tokens of the stop itself are dropped."""
    hits = [text.index(s) for s in stop if s and s in text]
    if hits:
        cut = min(hits)
        return text[:cut], tokens_before(tokens, cut), True
    return text, tokens_before(tokens, len(text)) if tokens else tokens, False


def check_budget(n_prompt: int, max_tokens: int, n_ctx: int) -> int:
    """The in-process engine's checks and messages: empty prompt, budget, context overflow."""
    if n_prompt == 0:
        raise EngineError("the prompt is empty: pass some text to generate from")
    if max_tokens < 1:
        raise EngineError(f"max_tokens must be at least 1, got {max_tokens}")
    if n_ctx and n_prompt >= n_ctx:
        raise ContextOverflowError(
            f"prompt is {n_prompt} tokens but the context holds {n_ctx}: raise PREFCALL_N_CTX (or the server's "
            "context) or shorten the dialogue"
        )
    return min(max_tokens, n_ctx - n_prompt) if n_ctx else max_tokens


def gbnf_literal(text: str) -> str:
    """A GBNF string literal (llama.cpp grammar syntax)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    escaped = escaped.replace("\t", "\\t")
    return f'"{escaped}"'


def gbnf_choice(candidates: Sequence[str]) -> str:
    return "root ::= " + " | ".join(gbnf_literal(c) for c in candidates)


def forced_literal_body(candidate: str, canonical: Sequence[int], length_field: str, *,
                        dict_bias: bool) -> dict[str, Any]:
    """Request fields that make greedy decoding emit exactly the candidate's own tokens.

    A one-literal grammar allows only prefixes of what is left of the candidate; a +100 logit bias on the
    candidate's tokens (from the tokenizer) makes the next of them win among those, so the path is the tokenizer's
    tokenization, not a shorter piece the model happens to prefer. The bias acts in the sampler; the logprobs
    llama.cpp servers report are the raw ones, so they are the teacher-forced log P of each token."""
    bias = {str(t): 100.0 for t in dict.fromkeys(canonical)}
    return {
        "grammar": f"root ::= {gbnf_literal(candidate)}",
        "logit_bias": bias if dict_bias else [[int(t), 100.0] for t in bias],
        length_field: len(canonical) + 1,
    }


def sum_covering(tokens: Sequence[TokenLogprob], candidate: str, where: str) -> tuple[float, int]:
    """Sum of the logprobs of the tokens that spell the candidate (the forced path's first tokens)."""
    total, used, covered = 0.0, 0, ""
    for token in tokens:
        if len(covered) >= len(candidate):
            break
        covered += token.token
        total += token.logprob
        used += 1
    if not covered.startswith(candidate) and not candidate.startswith(covered):
        raise BackendError(f"{where} did not follow the candidate's grammar (got {covered[:40]!r}): check its "
                           "grammar support")
    return total, max(1, used)


def regex_choice(candidates: Sequence[str]) -> str:
    # Escape only the metacharacters (re.escape also escapes spaces, which some grammar engines' regex reject).
    return "(" + "|".join(re.sub(r"([.^$*+?{}\[\]\\|()/])", r"\\\1", c) for c in candidates) + ")"


FORCED_RUNNER_UP = -1e3  # alternatives at or below this are masked (vLLM writes -inf as -9999.0)


# -- the served engine ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EngineSpec:
    kind: str  # llama-server | vllm | sglang | openai | llama-cpp-python | ollama
    url: str
    model: str | None = None


@dataclass
class ChoiceForm:
    """How a candidate appears in constrained output: its text there and where the candidate itself sits."""

    text: str
    start: int
    end: int


class ServedEngine:
    """Base class: info, scope ledger, checks and the choice fallback; subclasses speak one backend's API."""

    backend = "served"

    def __init__(self, spec: EngineSpec, settings: Settings, *, transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.spec = spec
        self.settings = settings
        self.http = HttpClient(self.backend, spec.url, settings, transport=transport, sleep=sleep)
        self.ledger = ScopeLedger()
        self._info: EngineInfo | None = None

    # -- contract glue ----------------------------------------------------------------------------------------
    @property
    def info(self) -> EngineInfo:
        assert self._info is not None
        return self._info

    @property
    def capabilities(self) -> Capabilities:
        return self.info.capabilities

    def close(self) -> None:
        self.http.close()

    def missing(self, feature: str, hint: str = "") -> MissingCapabilityError:
        return MissingCapabilityError(f"{self.http.where} cannot {feature}" + (f": {hint}" if hint else ""))

    def generate(self, prompt: Prompt, *, max_tokens: int = 256, stop: Sequence[str] = (),
                 json_schema: dict[str, Any] | None = None, top_logprobs: int = 0, scope: Scope = LOCAL,
                 cancel: Cancel | None = None) -> Generation:
        raise NotImplementedError

    def score_candidates(self, prompt: Prompt, candidates: Sequence[str], *, scope: Scope = LOCAL,
                         cancel: Cancel | None = None, heal_end: bool = False) -> CandidateScores:
        # heal_end: served engines return logprobs of the exact tokens only, so every subclass scores those.
        raise NotImplementedError

    # -- the choice fallback ----------------------------------------------------------------------------------
    def choice_generation(self, prompt: Prompt, candidates: Sequence[str], *, scope: Scope,
                          cancel: Cancel | None) -> tuple[Generation, list[ChoiceForm]]:
        """One greedy generation constrained to the candidate set, with top alternatives (subclasses)."""
        raise self.missing("score candidates", "it has neither prompt logprobs nor a choice constraint; use "
                                               "llama-server:, vllm: or llama-cpp-python:")

    def score_by_choice(self, prompt: Prompt, candidates: Sequence[str], *, scope: Scope = LOCAL,
                        cancel: Cancel | None = None) -> CandidateScores:
        """Documented fallback: scores from one constrained generation over the candidates.

        The candidate the model picks gets the sum of its tokens' logprobs (exact under the backend's logprob
        semantics). Every other candidate gets an upper bound: the logprobs it shares with the chosen path, plus the
        best logprob its next token could have at the point it leaves that path (the listed alternative that starts
        it, else the smallest listed alternative, else the chosen token's own logprob, which greedy decoding over
        allowed tokens never undercuts). The ranking's top is exact; the others' margins are optimistic."""
        if any(not c for c in candidates):
            raise EngineError("a candidate is empty: pass non-empty candidate strings")
        started = time.perf_counter()
        generation, forms = self.choice_generation(prompt, candidates, scope=scope, cancel=cancel)
        text = generation.text
        spans, position = [], 0
        for token in generation.tokens:
            spans.append((position, position + len(token.token), token))
            position += len(token.token)
        scores, counts = [], []
        for candidate, form in zip(candidates, forms):
            total, n, left = 0.0, 0, False
            for start, end, token in spans:
                if end <= form.start:
                    continue  # text before the candidate (a JSON quote): the same for every candidate
                if start >= form.end:
                    break
                if form.text[start:end] == text[start:end]:
                    total += token.logprob
                    n += 1
                    continue
                # The candidate leaves the chosen path at this token: bound its next token's logprob.
                need = form.text[start:form.end]
                fitting = [lp for tok, lp in token.top if tok and (need.startswith(tok) or tok.startswith(need))]
                listed = [lp for _, lp in token.top] + [token.logprob]
                total += max(fitting) if fitting else min(listed)
                left = True
                break
            else:
                left = len(text) < form.end  # the candidate goes on where the chosen one ended: bound 0 for the rest
            scores.append(total)
            counts.append(max(1, self.count_tokens(candidate) if left else n))
        return CandidateScores(list(candidates), scores, counts, generation.usage, time.perf_counter() - started)

    def count_tokens(self, text: str) -> int:  # overridden by every backend
        raise NotImplementedError


def estimate_tokens(text: str) -> int:
    """For backends without a tokenizer endpoint: ~4 characters a token (English BPE; code and other scripts
    take more tokens, so leave headroom in PREFCALL_N_CTX)."""
    return max(1, math.ceil(len(text) / 4)) if text else 0


def top_pairs(entries: Any, limit: int) -> tuple[tuple[str, float], ...]:
    """Top alternatives from the shapes backends use: {token: logprob} or [{token|decoded_token, logprob}]."""
    if not entries or limit <= 0:
        return ()
    if isinstance(entries, dict):
        pairs = [(str(k), float(v)) for k, v in entries.items() if v is not None]
    else:
        pairs = []
        for e in entries:
            if not isinstance(e, dict):
                continue
            lp = e.get("logprob")
            if lp is None and e.get("prob") is not None:
                lp = math.log(max(float(e["prob"]), 1e-300))
            if lp is None:
                continue
            pairs.append((str(e.get("token", e.get("decoded_token", ""))), float(lp)))
    pairs.sort(key=lambda p: -p[1])
    return tuple(pairs[:limit])


@dataclass
class StreamState:
    """Accumulates a streamed generation: text, per-token logprobs, finish reason and server counts."""

    text: str = ""
    tokens: list[TokenLogprob] = field(default_factory=list)
    finish: str | None = None
    prompt_tokens: int | None = None
    cached: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
