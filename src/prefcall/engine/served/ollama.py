"""Ollama, through its native API (docs/api.md and docs/openapi.yaml in the ollama repository).

- Prompts go to `POST /api/chat` as messages (Ollama applies the model's Go template, which prefcall cannot
  render); contents are defused because Ollama tokenizes the rendered prompt with special-token parsing. The
  answer's prefix is sent as a final assistant message, which Ollama continues (maintainers' answer in
  ollama/ollama#6778).
- Schema-constrained output: `format` with the JSON Schema (keys sent in schema order).
- Logprobs: `logprobs: true` and `top_logprobs` (Ollama 0.12.11 and later; `/api/version` is read at start-up).
  Whether they are taken before or after the grammar is not documented: declared **raw**.
- Candidate scoring: no prompt logprobs, so the documented choice fallback, constrained by
  `format: {"type": "string", "enum": candidates}`; the JSON quotes around the answer are not counted.
- Token counts: no tokenizer endpoint; estimated (~4 characters a token). Context: `options.num_ctx` is set to
  PREFCALL_N_CTX on every request (Ollama's default is smaller and it truncates silently); `/api/show` gives the
  model's trained context. Cache counts: Ollama reports evaluated prompt tokens only; `reused` reads 0.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

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
    check_cancel,
)
from prefcall.engine.served.base import (
    ChoiceForm,
    EngineSpec,
    ServedEngine,
    StreamState,
    apply_stop,
    check_budget,
    estimate_tokens,
    top_pairs,
)
from prefcall.engine.served.layout import ChatLayout, jinja_renderer, load_template_setting
from prefcall.engine.served.openai_compat import _version
from prefcall.errors import BackendError, EngineError

LOGPROBS_SINCE = (0, 12, 11)


class OllamaEngine(ServedEngine):
    backend = "ollama"

    def __init__(self, spec: EngineSpec, settings: Settings, **kwargs: Any) -> None:
        super().__init__(spec, settings, **kwargs)
        self.model = spec.model or settings.engine_model
        if not self.model:
            raise BackendError(f"{self.http.where}: name the model, e.g. PREFCALL_ENGINE=ollama:{spec.url}#llama3.2 "
                               "or PREFCALL_ENGINE_MODEL")
        version_reply = self.http.get("/api/version")
        self.version = str(version_reply.get("version", "")) if isinstance(version_reply, dict) else ""
        self.has_logprobs = bool(self.version) and _version(self.version) >= LOGPROBS_SINCE
        show = self.http.post("/api/show", {"model": self.model})
        info = show.get("model_info") or {}
        arch = info.get("general.architecture")
        trained = int(info.get(f"{arch}.context_length") or 0) if arch else 0
        self.n_ctx = min(settings.n_ctx, trained) if trained else settings.n_ctx
        # Only for defusing markers: the Go template cannot be rendered here.
        self.layout = ChatLayout(jinja_renderer(load_template_setting(settings.engine_chat_template)
                                                or load_template_setting("chatml") or ""))
        for marker in _template_markers(str(show.get("template") or "")):
            self.layout.markers.add(marker)
        self._info = EngineInfo(
            model_path=f"{spec.url} ({self.model})", model_name=str(info.get("general.name") or self.model),
            backend=self.backend, n_ctx=self.n_ctx, n_gpu_layers=0, chat_template=show.get("template"),
            capabilities=Capabilities(grammar=True, logprobs=self.has_logprobs, renormalised_logprobs=False,
                                      candidate_scoring=False, prompt_pieces=False, prefix_cache=False,
                                      cancellation=True),
            extra={"url": spec.url, "version": self.version, "trained_context": trained or None,
                   "capabilities": show.get("capabilities"),
                   "logprobs": "raw (assumed; undocumented)" if self.has_logprobs
                   else f"not offered before Ollama {'.'.join(map(str, LOGPROBS_SINCE))}",
                   "candidate_scoring": "choice fallback (format enum)",
                   "untrusted_text": "defused (role and control markers broken up); Ollama applies its template",
                   "token_counts": "estimated (~4 chars/token)", "prefix_cache": "server-side; unreported",
                   "device": "server-side"},
        )

    def count_tokens(self, text: str) -> int:
        return estimate_tokens(text)

    def prompt_tokens(self, prompt: Prompt) -> int:
        return estimate_tokens("".join(m.content for m in prompt.messages) + prompt.prefix) + 8 * len(prompt.messages)

    def generate(self, prompt: Prompt, *, max_tokens: int = 256, stop: Sequence[str] = (),
                 json_schema: dict[str, Any] | None = None, top_logprobs: int = 0, scope: Scope = LOCAL,
                 cancel: Cancel | None = None) -> Generation:
        return self._chat(prompt, max_tokens=max_tokens, stop=stop, fmt=json_schema, top_logprobs=top_logprobs,
                          cancel=cancel)

    def _chat(self, prompt: Prompt, *, max_tokens: int, stop: Sequence[str], fmt: Any, top_logprobs: int,
              cancel: Cancel | None) -> Generation:
        started = time.perf_counter()
        check_cancel(cancel)
        budget = check_budget(self.prompt_tokens(prompt), max_tokens, self.n_ctx)
        messages = [{"role": m.role, "content": self.layout.defuse(m.content.strip())} for m in prompt.messages]
        if prompt.prefix:
            messages.append({"role": "assistant", "content": self.layout.defuse(prompt.prefix)})
        body: dict[str, Any] = {
            "model": self.model, "messages": messages, "stream": True,
            "options": {"temperature": 0.0, "top_k": 1, "seed": 0, "repeat_penalty": 1.0, "num_predict": budget,
                        "num_ctx": self.n_ctx, "stop": [s for s in stop if s]},
        }
        if fmt is not None:
            body["format"] = fmt
        if self.has_logprobs:
            body.update({"logprobs": True, "top_logprobs": min(20, max(1, top_logprobs))})
        state = StreamState()
        with self.http.stream("/api/chat", body, cancel=cancel, ndjson=True) as events:
            for event in events:
                self._absorb(state, event, top_logprobs)
        text, tokens, cut = apply_stop(state.text, state.tokens, stop)
        finish = "stop" if cut else (state.finish or "stop")
        n = int(state.prompt_tokens or self.prompt_tokens(prompt))
        return Generation(text, tokens, PromptUsage(n, n, 0), finish, time.perf_counter() - started)

    def _absorb(self, state: StreamState, event: dict[str, Any], top_n: int) -> None:
        message = event.get("message") or {}
        state.text += message.get("content") or event.get("response") or ""
        for entry in event.get("logprobs") or []:
            text = bytes(entry["bytes"]).decode("utf-8", "replace") if isinstance(entry.get("bytes"), list) \
                else str(entry.get("token", ""))
            logprob = min(0.0, float(entry.get("logprob", 0.0)))
            state.tokens.append(TokenLogprob(text, logprob, top_pairs(entry.get("top_logprobs"), top_n), False,
                                             logprob))
        if event.get("done"):
            state.finish = "length" if event.get("done_reason") == "length" else "stop"
            if event.get("prompt_eval_count") is not None:
                state.prompt_tokens = int(event["prompt_eval_count"])

    def score_candidates(self, prompt: Prompt, candidates: Sequence[str], *, scope: Scope = LOCAL,
                         cancel: Cancel | None = None, heal_end: bool = False) -> CandidateScores:
        if not self.has_logprobs:
            raise self.missing("score candidates", f"Ollama {self.version or '(unknown version)'} returns no "
                                                   "logprobs; upgrade to 0.12.11 or later")
        if any(not c for c in candidates):
            raise EngineError("a candidate is empty: pass non-empty candidate strings")
        return self.score_by_choice(prompt, candidates, scope=scope, cancel=cancel)

    def choice_generation(self, prompt: Prompt, candidates: Sequence[str], *, scope: Scope,
                          cancel: Cancel | None) -> tuple[Generation, list[ChoiceForm]]:
        schema = {"type": "string", "enum": list(candidates)}
        longest = max(estimate_tokens(json.dumps(c)) for c in candidates) + 4
        generation = self._chat(prompt, max_tokens=longest, stop=(), fmt=schema, top_logprobs=20, cancel=cancel)
        forms = []
        for candidate in candidates:
            encoded = json.dumps(candidate, ensure_ascii=False)
            forms.append(ChoiceForm(encoded, 1, len(encoded) - 1))
        return generation, forms


def _template_markers(template: str) -> set[str]:
    from prefcall.engine.served.layout import _MARKER_RE

    return set(_MARKER_RE.findall(template))
