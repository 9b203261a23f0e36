"""What every served engine shares: scope bookkeeping, token bookkeeping, the choice fallback and `ServedEngine`
(the HTTP client is in `served/http.py`, the prompt layout in `served/layout.py`).

- **Scopes.** `ScopeLedger` keeps the last prompts each scope sent, so a prefix-cache count reported by the
  backend is clipped to what the caller may know: its own earlier text, or the shared messages of a scope
  it shares. Traces never show another user's cached text (timing is a separate side channel, see README).
- **Choice fallback.** Backends without prompt logprobs score candidates by one constrained generation over the
  candidate set: the chosen candidate's score is its path's logprobs; the others get upper bounds read from the
  alternatives at the token where they leave that path.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
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
    reusable,
    tokens_before,
)
from prefcall.engine.served.http import HttpClient
from prefcall.errors import BackendError, ContextOverflowError, EngineError, MissingCapabilityError


# -- scopes --------------------------------------------------------------------------------------------------------
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


def local_model_file(reported: Any) -> str | None:
    """The GGUF file a llama.cpp server says it loaded (llama-cpp-python's model id, llama-server's `model_path`),
    when that file is on this machine (as given, or relative to this directory); None otherwise."""
    text = str(reported or "")
    if not text.endswith(".gguf"):
        return None
    path = Path(text).expanduser()
    return str(path.resolve()) if path.is_file() else None


def gguf_info(model_file: str | None) -> Any:
    """The metadata of a local GGUF file (engine.gguf_meta.GGUFInfo: its `chat_template`, its `name`), None
    without a readable one."""
    if not model_file:
        return None
    from prefcall.engine.gguf_meta import read_gguf_info

    try:
        return read_gguf_info(model_file)
    except (OSError, ValueError):
        return None


# Alternatives asked for at a healed candidate's last token: the closing quote's continuations (`",`, `"}`, `"\n`)
# that carry the mass are among the top few; what a top-20 list leaves out is below its 20th entry.
HEAL_TOP = 20


def heal_last(tokens: Sequence[TokenLogprob], used: int) -> float:
    """What healing adds to a forced path's sum (`score_candidates(heal_end=True)`, as the in-process engine heals):
    when the candidate's last token is punctuation only (a closing quote), its exact log P is replaced by the
    log of the summed probability of every listed alternative that begins with its text (the token itself
    included). 0.0 when the last token is not punctuation or the server listed no alternatives."""
    if used < 1 or used > len(tokens):
        return 0.0
    last = tokens[used - 1]
    if not last.token or any(ch.isalnum() for ch in last.token) or not last.top:
        return 0.0
    found = {last.token: last.logprob}
    for text, logprob in last.top:
        if text.startswith(last.token):
            found.setdefault(text, logprob)
    return float(np.logaddexp.reduce(list(found.values()))) - last.logprob


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
        # heal_end: backends that list top alternatives heal the closing quote (heal_last); the others score the
        # exact tokens.
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
