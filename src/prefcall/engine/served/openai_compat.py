"""OpenAI-compatible servers: vLLM, llama-cpp-python's server, SGLang, and any other (LM Studio, ...).

Each flavour says what its server offers beyond the OpenAI API (see `FLAVOURS` and the capability table in
README). Two ways of prompting:

- **completions** (`/v1/completions`, a prompt prefcall renders itself):
  - `vllm`: token ids. The template is vLLM's own (`POST /tokenize` with placeholder messages, then
    `/detokenize`); pieces are tokenized apart (`/tokenize`, `add_special_tokens` only for the first), message
    contents defused first because HF tokenizers match added special tokens in any text. Schema-constrained output
    through `structured_outputs.json` (`guided_json` before vLLM 0.10.2); logprobs come from the grammar-masked
    logits in vLLM V1 (the bitmask is applied before the sampler computes them), so they are **renormalised** and a
    forced token reads 0 with every alternative masked (`forced` marked). Candidate scoring: one request with every
    prompt+candidate as token ids and `prompt_logprobs` (teacher forcing). `cache_salt` per scope: no prefix-cache
    sharing between users at all (the shared catalogue included), so cache counts can never reveal another's text.
  - `llama-cpp-python`: a string prompt (its server tokenizes with special-token parsing, so contents are defused),
    a GBNF `grammar` from llama.cpp's converter (the in-process engine's grammar), `logprobs` (raw: read from the
    logits before the grammar). Candidate scoring by teacher forcing: the candidate's own tokens forced with a
    one-literal grammar plus `logit_bias`, their raw logprobs read back. (Its `echo` logprobs would do it too, but
    that server sorts the whole vocabulary in Python for every prompt token: 30 s for three candidates on a
    26-token prompt here; and they are off by one when a prompt does not start with the BOS id.)
    The server does not expose its chat template: PREFCALL_ENGINE_CHAT_TEMPLATE, else ChatML.
- **chat** (`/v1/chat/completions`, the server applies its template): `sglang` and `openai`. Contents defused;
  the answer's prefix is a final assistant message with `continue_final_message`. Schema through
  `response_format: json_schema`. SGLang scores candidates through its `regex` constraint (the choice fallback);
  a generic server cannot, and says so in one line. Token counts are estimates (no tokenizer endpoint).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import replace
from collections.abc import Sequence
from typing import Any

from prefcall.config import Settings
from prefcall.engine.base import (
    LLAMA_CPP_SCORES,
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
    heal_boundary,
)
from prefcall.engine.served.base import (
    FORCED_RUNNER_UP,
    HEAL_TOP,
    ChoiceForm,
    EngineSpec,
    ServedEngine,
    StreamState,
    apply_stop,
    cache_salt,
    check_budget,
    estimate_tokens,
    forced_literal_body,
    gguf_info,
    heal_last,
    local_model_file,
    regex_choice,
    sum_covering,
    top_pairs,
)
from prefcall.engine.served.layout import ChatLayout, jinja_renderer, load_template_setting
from prefcall.errors import BackendError, EngineError

FLAVOURS = ("vllm", "llama-cpp-python", "sglang", "openai")
_CHATML = "chatml"
log = logging.getLogger("prefcall.engine")


def _version(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split("+")[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


class OpenAICompatEngine(ServedEngine):
    def __init__(self, spec: EngineSpec, settings: Settings, **kwargs: Any) -> None:
        self.backend = spec.kind
        super().__init__(spec, settings, **kwargs)
        self.flavour = spec.kind
        if self.flavour == "openai" and self._has_extras_tokenize():
            self.flavour = self.backend = "llama-cpp-python"
            self.http.backend = self.backend
        self._tokens: OrderedDict[tuple[str, bool], tuple[int, ...]] = OrderedDict()
        self._tokens_lock = threading.Lock()
        self._secret = (settings.engine_cache_secret.get_secret_value() if settings.engine_cache_secret
                        else secrets.token_hex(16))
        self._logprobs_seen: bool | None = None
        models = self._models()
        self.model = spec.model or settings.engine_model or (models[0].get("id") if models else None)
        if not self.model:
            raise BackendError(f"{self.http.where} lists no model: set PREFCALL_ENGINE_MODEL or add #model to "
                               "PREFCALL_ENGINE")
        card = next((m for m in models if m.get("id") == self.model), {})
        self.n_ctx = int(card.get("max_model_len") or 0)
        self.vllm_version: tuple[int, ...] | None = None
        self.model_file: str | None = None
        meta = None  # the local GGUF's metadata (llama-cpp-python's server names its file)
        template = load_template_setting(settings.engine_chat_template)
        self.layout: ChatLayout | None = None
        self.template_source = "server (chat endpoint)"
        if self.flavour == "vllm":
            self.vllm_version = self._probe_vllm_version()
            if template is not None:
                self.layout, self.template_source = ChatLayout(jinja_renderer(template)), "PREFCALL_ENGINE_CHAT_TEMPLATE"
            else:
                self.layout, self.template_source = ChatLayout(self._vllm_render), "server /tokenize + /detokenize"
        elif self.flavour == "llama-cpp-python":
            # The server does not expose its template: the setting, else the GGUF's when the file is here, else
            # ChatML with a warning (a model trained on another template answers worse with it).
            model_file = local_model_file(self.model)
            meta = gguf_info(model_file)
            stored = meta.chat_template if meta is not None else None
            source = template if template is not None else stored or load_template_setting(_CHATML)
            self.layout = ChatLayout(jinja_renderer(source or ""))
            # the file's model rendered with the file's template: the in-process engine's prompts (storage.fits)
            self.model_file = model_file if stored is not None and source == stored else None
            if template is not None:
                self.template_source = "PREFCALL_ENGINE_CHAT_TEMPLATE"
            elif stored is not None:
                self.template_source = f"the GGUF file ({self.model_file})"
                template = stored
            else:
                self.template_source = ("ChatML (the server does not expose its template and its model file is not "
                                        "on this machine: set PREFCALL_ENGINE_CHAT_TEMPLATE)")
                log.warning("%s: assuming the ChatML chat template (llama-cpp-python's server does not expose its "
                            "own); set PREFCALL_ENGINE_CHAT_TEMPLATE if the model uses another", self.http.where)
        else:
            # Chat endpoints template server-side; a layout is kept only for its defusing markers.
            self.layout = ChatLayout(jinja_renderer(template or load_template_setting(_CHATML) or ""))
        if not self.n_ctx:
            self.n_ctx = settings.n_ctx
            n_ctx_note = "assumed PREFCALL_N_CTX (the server does not report it; it refuses longer prompts)"
        else:
            n_ctx_note = "reported by the server"
        model_name = str(self.model)
        if model_name.endswith(".gguf"):
            model_name = model_name.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".gguf")
        # llama-cpp-python's server scores as the in-process engine does (teacher forcing, raw, healed); on a model
        # file that is here it is the same model, so it is named as in-process and shares its fit (storage.fits).
        llama = self.flavour == "llama-cpp-python"
        self._info = EngineInfo(
            model_path=f"{spec.url} ({self.model})",
            model_name=(meta.name if self.model_file and meta is not None else None) or model_name,
            backend=self.backend, n_ctx=self.n_ctx, n_gpu_layers=0, chat_template=template,
            capabilities=self._capabilities(), extra=self._extra(n_ctx_note),
            scores=LLAMA_CPP_SCORES if llama else "", model_file=self.model_file,
        )

    # -- discovery ----------------------------------------------------------------------------------------------
    def _has_extras_tokenize(self) -> bool:
        try:
            self.http.post("/extras/tokenize", {"input": "probe"})
            return True
        except BackendError:
            return False

    def _models(self) -> list[dict[str, Any]]:
        reply = self.http.get("/v1/models")
        data = reply.get("data") if isinstance(reply, dict) else None
        return [m for m in data or [] if isinstance(m, dict)]

    def _probe_vllm_version(self) -> tuple[int, ...] | None:
        try:
            reply = self.http.get("/version")
        except BackendError:
            return None
        version = reply.get("version") if isinstance(reply, dict) else None
        return _version(str(version)) if version else None

    def _capabilities(self) -> Capabilities:
        f = self.flavour
        return Capabilities(
            grammar=True,
            logprobs=True,
            renormalised_logprobs=f == "vllm",
            candidate_scoring=f in ("vllm", "llama-cpp-python"),
            prompt_pieces=False,  # contents are defused, not tokenized without special-token parsing
            prefix_cache=f == "vllm",
            cancellation=True,
        )

    def _extra(self, n_ctx_note: str) -> dict[str, Any]:
        f = self.flavour
        extra = {
            "url": self.spec.url, "flavour": f, "template": self.template_source, "n_ctx": n_ctx_note,
            "vllm_version": ".".join(map(str, self.vllm_version)) if self.vllm_version else None,
            "prompt": {"vllm": "token ids", "llama-cpp-python": "string"}.get(f, "chat messages"),
            "logprobs": "renormalised over grammar-allowed tokens (vLLM V1)" if f == "vllm" else "raw",
            "candidate_scoring": {"vllm": "teacher forcing (prompt_logprobs)",
                                  "llama-cpp-python": "teacher forcing (one-literal grammar + logit_bias)",
                                  "sglang": "choice fallback (regex constraint)"}.get(f, "not available"),
            "untrusted_text": "defused (role and control markers broken up) before the server tokenizes it",
            "prefix_cache": {"vllm": "cache_salt per user (no cross-user sharing)",
                             "llama-cpp-python": "server reuses the previous request's prefix; unreported"}.get(
                f, "server-side; unreported"),
            "token_counts": "server tokenizer" if f in ("vllm", "llama-cpp-python") else "estimated (~4 chars/token)",
            "device": "server-side",
        }
        return {k: v for k, v in extra.items() if v is not None}

    # -- templates and tokens -----------------------------------------------------------------------------------
    def _vllm_render(self, messages: list[dict[str, str]]) -> str:
        reply = self.http.post("/tokenize", {"model": self.model, "messages": messages,
                                             "add_generation_prompt": True, "add_special_tokens": False})
        tokens = reply.get("tokens") if isinstance(reply, dict) else None
        if not isinstance(tokens, list):
            raise BackendError(f"{self.http.where} answered /tokenize without tokens: check its version")
        text = self.http.post("/detokenize", {"model": self.model, "tokens": tokens}).get("prompt")
        if not isinstance(text, str):
            raise BackendError(f"{self.http.where} answered /detokenize without a prompt: check its version")
        return text

    def _tokenize(self, text: str, *, first: bool = False, cancel: Cancel | None = None) -> tuple[int, ...]:
        if not text:
            return ()
        key = (text, first)
        with self._tokens_lock:
            if key in self._tokens:
                self._tokens.move_to_end(key)
                return self._tokens[key]
        if self.flavour == "vllm":
            reply = self.http.post("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": first},
                                   cancel=cancel)
        else:
            reply = self.http.post("/extras/tokenize", {"input": text}, cancel=cancel)
        tokens = tuple(int(t) for t in reply.get("tokens", []))
        if len(text) <= 20_000:
            with self._tokens_lock:
                self._tokens[key] = tokens
                while len(self._tokens) > 512:
                    self._tokens.popitem(last=False)
        return tokens

    def _defuse(self, text: str) -> str:
        assert self.layout is not None
        return self.layout.defuse(text)

    def prompt_ids(self, prompt: Prompt, cancel: Cancel | None = None) -> tuple[list[int], int]:
        """vLLM: token ids of the prompt (pieces tokenized apart) and the shared messages' share of them."""
        assert self.layout is not None
        layout = self.layout.layout(prompt)
        pieces: list[tuple[int, ...]] = []
        for kind, value in layout.pieces:
            if kind == "template":
                first = not any(pieces)
                ids = self._tokenize(value, first=first, cancel=cancel)
                if first and len(ids) >= 2 and ids[0] == ids[1]:
                    ids = ids[1:]
                pieces.append(ids)
            else:
                pieces.append(self._tokenize(self._defuse(layout.messages[value]["content"]), cancel=cancel))
        tokens = [t for piece in pieces for t in piece]
        shared_len = sum(len(p) for p in pieces[: layout.shared_pieces])
        return tokens + list(self._tokenize(self._defuse(prompt.prefix), cancel=cancel)), shared_len

    def _prompt_text(self, prompt: Prompt) -> str:
        assert self.layout is not None
        return self.layout.render_text(prompt)

    def count_tokens(self, text: str) -> int:
        if self.flavour == "vllm":
            return len(self._tokenize(self._defuse(text)))
        if self.flavour == "llama-cpp-python":
            return max(0, len(self._tokenize(self._defuse(text))) - self._bos_count()) if text else 0
        return estimate_tokens(text)

    def _bos_count(self) -> int:
        """llama-cpp-python's /extras/tokenize adds BOS when the model wants it: count what an empty text gives."""
        if not hasattr(self, "_bos_cached"):
            reply = self.http.post("/extras/tokenize", {"input": ""})
            self._bos_cached = len(reply.get("tokens", []))
        return self._bos_cached

    def prompt_tokens(self, prompt: Prompt) -> int:
        if self.flavour == "vllm":
            return len(self.prompt_ids(prompt)[0])
        if self.flavour == "llama-cpp-python":
            return len(self._tokenize(self._prompt_text(prompt)))
        return estimate_tokens(self._chat_text(prompt))

    def _chat_text(self, prompt: Prompt) -> str:
        # The contents, plus room for a few template tokens per message.
        return "".join(m.content for m in prompt.messages) + prompt.prefix + " " * 32 * len(prompt.messages)

    # -- contract -------------------------------------------------------------------------------------------------
    def generate(self, prompt: Prompt, *, max_tokens: int = 256, stop: Sequence[str] = (),
                 json_schema: dict[str, Any] | None = None, top_logprobs: int = 0, scope: Scope = LOCAL,
                 cancel: Cancel | None = None) -> Generation:
        return self._generate(prompt, max_tokens=max_tokens, stop=stop, json_schema=json_schema,
                              top_logprobs=top_logprobs, scope=scope, cancel=cancel)

    def _generate(self, prompt: Prompt, *, max_tokens: int, stop: Sequence[str], json_schema: dict[str, Any] | None,
                  top_logprobs: int, scope: Scope, cancel: Cancel | None, grammar: str | None = None,
                  choice: Sequence[str] | None = None) -> Generation:
        started = time.perf_counter()
        check_cancel(cancel)
        if self.flavour in ("sglang", "openai"):
            return self._generate_chat(prompt, max_tokens=max_tokens, stop=stop, json_schema=json_schema,
                                       top_logprobs=top_logprobs, cancel=cancel, choice=choice, started=started)
        shared_len = 0
        if self.flavour == "vllm":
            ids, shared_len = self.prompt_ids(prompt, cancel)
            prompt_value: Any = ids
            n_prompt = len(ids)
        else:
            prompt_value = self._prompt_text(prompt)
            ids = list(self._tokenize(prompt_value, cancel=cancel))
            n_prompt = len(ids)
        budget = check_budget(n_prompt, max_tokens, self.n_ctx)
        k = max(1, top_logprobs)
        body: dict[str, Any] = {"model": self.model, "prompt": prompt_value, "max_tokens": budget,
                                "temperature": 0.0, "stop": [s for s in stop if s], "stream": True}
        if self.flavour == "vllm":
            k = min(20, max(2, top_logprobs))  # a runner-up tells a forced token from a confident one
            body.update({"logprobs": k, "stream_options": {"include_usage": True},
                         "cache_salt": cache_salt(self._secret, scope)})
            if json_schema is not None:
                body.update(self._vllm_structured({"json": json_schema}))
            if choice is not None:
                body.update(self._vllm_structured({"choice": list(choice)}))
        else:
            body.update({"logprobs": k, "repeat_penalty": 1.0, "top_k": 1, "seed": 0})
            if json_schema is not None:
                from prefcall.engine.grammar import json_schema_gbnf

                body["grammar"] = json_schema_gbnf(json_schema)
            if grammar is not None:
                body["grammar"] = grammar
        state = StreamState()
        with self.http.stream("/v1/completions", body, cancel=cancel) as events:
            for event in events:
                self._absorb_completion(state, event, top_logprobs)
        self._check_logprobs(state)
        text, tokens, cut = apply_stop(state.text, state.tokens, stop)
        finish = "stop" if cut else (state.finish or "stop")
        if self.flavour == "vllm":
            usage = self.ledger.usage(ids, shared_len, scope, state.cached)
        else:
            usage = PromptUsage(prompt_tokens=n_prompt, evaluated=n_prompt, reused=0)  # reuse is not reported
        return Generation(text, tokens, usage, finish, time.perf_counter() - started)

    def _vllm_structured(self, constraint: dict[str, Any]) -> dict[str, Any]:
        if self.vllm_version is not None and self.vllm_version < (0, 10, 2):
            key, value = next(iter(constraint.items()))
            return {f"guided_{key}": value}
        return {"structured_outputs": constraint}

    def _absorb_completion(self, state: StreamState, event: dict[str, Any], top_n: int) -> None:
        usage = event.get("usage")
        if isinstance(usage, dict):
            state.prompt_tokens = usage.get("prompt_tokens")
            details = usage.get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                state.cached = int(details["cached_tokens"])
        for choice in event.get("choices") or []:
            state.text += choice.get("text") or ""
            logprobs = choice.get("logprobs")
            if logprobs:
                state.extra["logprobs"] = True
                tokens = logprobs.get("tokens") or []
                values = logprobs.get("token_logprobs") or []
                tops = logprobs.get("top_logprobs") or [None] * len(tokens)
                for token, value, top in zip(tokens, values, tops):
                    if value is None:
                        continue
                    state.tokens.append(self._token(str(token), float(value), top, top_n))
            if choice.get("finish_reason"):
                state.finish = "length" if choice["finish_reason"] == "length" else "stop"

    def _token(self, token: str, logprob: float, top: Any, top_n: int) -> TokenLogprob:
        alternatives = top_pairs(top, 20)
        logprob = min(0.0, logprob)
        if self.flavour == "vllm":
            others = [lp for t, lp in alternatives if t != token]
            forced = logprob > -1e-6 and all(lp <= FORCED_RUNNER_UP for lp in others)
            shown = tuple(p for p in alternatives if p[1] > FORCED_RUNNER_UP)[:top_n]
            return TokenLogprob(token, logprob, shown, forced, None)
        return TokenLogprob(token, logprob, alternatives[:top_n], False, logprob)

    def _check_logprobs(self, state: StreamState) -> None:
        if state.text and not state.extra.get("logprobs"):
            raise BackendError(f"{self.http.where} returned no logprobs: start it with logprobs enabled "
                               "(llama-cpp-python: --logits_all true)")

    # -- chat flavours ----------------------------------------------------------------------------------------
    def _generate_chat(self, prompt: Prompt, *, max_tokens: int, stop: Sequence[str],
                       json_schema: dict[str, Any] | None, top_logprobs: int, cancel: Cancel | None,
                       choice: Sequence[str] | None, started: float) -> Generation:
        if max_tokens < 1:
            raise EngineError(f"max_tokens must be at least 1, got {max_tokens}")
        messages = [{"role": m.role, "content": self._defuse(m.content.strip())} for m in prompt.messages]
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                "temperature": 0.0, "stop": [s for s in stop if s], "logprobs": True,
                                "top_logprobs": min(20, max(1, top_logprobs)), "stream": True,
                                "stream_options": {"include_usage": True}}
        if prompt.prefix:
            messages.append({"role": "assistant", "content": self._defuse(prompt.prefix)})
            body.update({"continue_final_message": True, "add_generation_prompt": False})
        if json_schema is not None:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "prefcall", "schema": json_schema, "strict": True}}
        if choice is not None:
            body["regex"] = regex_choice(choice)
        state = StreamState()
        with self.http.stream("/v1/chat/completions", body, cancel=cancel) as events:
            for event in events:
                self._absorb_chat(state, event, top_logprobs)
        text, tokens, cut = apply_stop(state.text, state.tokens, stop)
        if text and not state.extra.get("logprobs"):
            self._logprobs_seen = False
        finish = "stop" if cut else (state.finish or "stop")
        n = int(state.prompt_tokens or estimate_tokens(self._chat_text(prompt)))
        return Generation(text, tokens, PromptUsage(n, n, 0), finish, time.perf_counter() - started)

    def _absorb_chat(self, state: StreamState, event: dict[str, Any], top_n: int) -> None:
        usage = event.get("usage")
        if isinstance(usage, dict):
            state.prompt_tokens = usage.get("prompt_tokens")
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or choice.get("message") or {}
            state.text += delta.get("content") or ""
            content = (choice.get("logprobs") or {}).get("content") or []
            for entry in content:
                state.extra["logprobs"] = True
                text = bytes(entry["bytes"]).decode("utf-8", "replace") if isinstance(entry.get("bytes"), list) \
                    else str(entry.get("token", ""))
                logprob = min(0.0, float(entry.get("logprob", 0.0)))
                state.tokens.append(TokenLogprob(text, logprob, top_pairs(entry.get("top_logprobs"), top_n),
                                                 False, logprob))
            if choice.get("finish_reason"):
                state.finish = "length" if choice["finish_reason"] == "length" else "stop"

    # -- scoring ----------------------------------------------------------------------------------------------
    def score_candidates(self, prompt: Prompt, candidates: Sequence[str], *, scope: Scope = LOCAL,
                         cancel: Cancel | None = None, heal_end: bool = False) -> CandidateScores:
        if any(not c for c in candidates):
            raise EngineError("a candidate is empty: pass non-empty candidate strings")
        if self.flavour in ("vllm", "llama-cpp-python"):
            healed, texts = heal_boundary(prompt, candidates)
            if self.flavour == "vllm":
                scored = self._score_vllm(healed, texts, scope, cancel)
            else:
                scored = self._score_literal(healed, texts, scope, cancel, heal_end)
            return replace(scored, candidates=list(candidates))
        if self.flavour == "sglang":
            return self.score_by_choice(prompt, candidates, scope=scope, cancel=cancel)
        raise self.missing("score candidates", "an OpenAI-compatible server offers neither prompt logprobs nor a "
                                               "choice constraint; use vllm:, llama-server: or sglang:")

    def choice_generation(self, prompt: Prompt, candidates: Sequence[str], *, scope: Scope,
                          cancel: Cancel | None) -> tuple[Generation, list[ChoiceForm]]:
        longest = max(estimate_tokens(c) for c in candidates) + 4
        generation = self._generate(prompt, max_tokens=longest, stop=(), json_schema=None, top_logprobs=20,
                                    scope=scope, cancel=cancel, choice=candidates)
        return generation, [ChoiceForm(c, 0, len(c)) for c in candidates]

    def _score_vllm(self, prompt: Prompt, candidates: Sequence[str], scope: Scope,
                    cancel: Cancel | None) -> CandidateScores:
        started = time.perf_counter()
        ids, shared_len = self.prompt_ids(prompt, cancel)
        continuations = [list(self._tokenize(self._defuse(c), cancel=cancel)) for c in candidates]
        check_budget(len(ids), max(len(c) for c in continuations), self.n_ctx)
        reply = self.http.post("/v1/completions", {
            "model": self.model, "prompt": [ids + c for c in continuations], "max_tokens": 1, "temperature": 0.0,
            "prompt_logprobs": 0, "cache_salt": cache_salt(self._secret, scope),
        }, cancel=cancel)
        choices = sorted(reply.get("choices") or [], key=lambda c: c.get("index", 0))
        if len(choices) != len(candidates):
            raise BackendError(f"{self.http.where} answered {len(choices)} choices for {len(candidates)} prompts")
        scores = []
        for choice, continuation in zip(choices, continuations):
            positions = choice.get("prompt_logprobs") or []
            total = 0.0
            for offset, token in enumerate(continuation):
                entry = positions[len(ids) + offset] if len(ids) + offset < len(positions) else None
                value = (entry or {}).get(str(token))
                if value is None:
                    raise BackendError(f"{self.http.where} returned no prompt logprob for token {token}: start it "
                                       "with prompt logprobs allowed (--max-logprobs)")
                total += float(value["logprob"] if isinstance(value, dict) else value)
            scores.append(total)
        usage_block = reply.get("usage") or {}
        cached = (usage_block.get("prompt_tokens_details") or {}).get("cached_tokens")
        usage = self.ledger.usage(ids, shared_len, scope, int(cached) if cached is not None else None)
        return CandidateScores(list(candidates), scores, [len(c) for c in continuations], usage,
                               time.perf_counter() - started)

    def _score_literal(self, prompt: Prompt, candidates: Sequence[str], scope: Scope,
                       cancel: Cancel | None, heal_end: bool = False) -> CandidateScores:
        """llama-cpp-python: teacher forcing, one request per candidate (see `forced_literal_body`); `heal_end`
        asks for the top alternatives and heals the closing quote (`heal_last`)."""
        started = time.perf_counter()
        text = self._prompt_text(prompt)
        ids = self._tokenize(text, cancel=cancel)
        check_budget(len(ids), 1, self.n_ctx)
        bos = self._bos_count()
        scores, counts = [], []
        for candidate in candidates:
            check_cancel(cancel)
            safe = self._defuse(candidate)
            canonical = list(self._tokenize(safe, cancel=cancel))[bos:]
            body = {"model": self.model, "prompt": text, "temperature": 0.0, "logprobs": HEAL_TOP if heal_end else 1,
                    "repeat_penalty": 1.0,
                    "top_k": 1, "seed": 0, "stream": True,
                    **forced_literal_body(safe, canonical, "max_tokens", dict_bias=True)}
            state = StreamState()
            with self.http.stream("/v1/completions", body, cancel=cancel) as events:
                for event in events:
                    self._absorb_completion(state, event, HEAL_TOP if heal_end else 0)
            self._check_logprobs(state)
            total, used = sum_covering(state.tokens, safe, self.http.where)
            if heal_end:
                total += heal_last(state.tokens, used)
            scores.append(total)
            counts.append(used)
        return CandidateScores(list(candidates), scores, counts, PromptUsage(len(ids), len(ids), 0),
                               time.perf_counter() - started)
