"""llama.cpp's llama-server, through its native API (tools/server/README.md in llama.cpp).

- Prompts are **token ids**: the chat template is rendered by the server (`POST /apply-template` with a placeholder
  per message, cached per sequence of roles; `/props`' `chat_template` rendered client-side when that endpoint is
  missing), template text is tokenized with `parse_special: true`, message contents and the answer's prefix with
  `parse_special: false` (`POST /tokenize`). Untrusted text never becomes a control token. A server too old to
  honour `parse_special` is detected at start-up; contents are then defused instead (`prompt_pieces=False`).
- Generation: `POST /completion` with the token ids, a GBNF `grammar` from the in-process engine's converter
  (llama.cpp's JSON-Schema converter: required properties first, schema order kept; the server's own
  `json_schema` converter would also allow newlines and indentation, so outputs would differ in whitespace),
  greedy sampling, `n_probs` and `stream: true` (cancel closes the stream).
  `n_probs` reports the softmax of the raw logits, before the grammar: logprobs are **raw**
  (`renormalised_logprobs=False`, `forced` unknown, `raw_logprob` = `logprob`).
- Candidate scoring: teacher forcing, one request per candidate: a one-literal grammar plus a `logit_bias` on the
  candidate's own tokens make greedy decoding emit exactly them, and `n_probs` gives each one's raw logprob
  (the bias acts in the sampler, not on the reported probabilities); the prompt's KV state is reused between
  candidates (`cache_prompt`, same slot).
- Prefix cache: `cache_prompt: true`; with `PREFCALL_ENGINE_PIN_SLOTS` (default) each user's requests go to one
  slot (`id_slot` = hash of the scope modulo `/props` `total_slots`), so a slot's cached private text is reused
  by its own user first. Reported reuse (`timings.cache_n`) is clipped by the scope ledger.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
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
    HEAL_TOP,
    EngineSpec,
    ServedEngine,
    StreamState,
    apply_stop,
    check_budget,
    forced_literal_body,
    gguf_info,
    heal_last,
    local_model_file,
    sum_covering,
    top_pairs,
)
from prefcall.engine.served.layout import ChatLayout, jinja_renderer, load_template_setting
from prefcall.errors import BackendError, EngineError


class LlamaServerEngine(ServedEngine):
    backend = "llama-server"

    def __init__(self, spec: EngineSpec, settings: Settings, **kwargs: Any) -> None:
        super().__init__(spec, settings, **kwargs)
        self._tokens: OrderedDict[tuple[str, bool, bool], tuple[int, ...]] = OrderedDict()
        self._tokens_lock = threading.Lock()
        props = self.http.get("/props")
        settings_block = props.get("default_generation_settings") or {}
        self.n_ctx = int(settings_block.get("n_ctx") or props.get("n_ctx") or 0)
        self.total_slots = int(props.get("total_slots") or 1)
        model_path = str(props.get("model_path") or spec.model or "")
        template_setting = load_template_setting(settings.engine_chat_template)
        self.template_source = "server /apply-template"
        if template_setting is not None:
            renderer = jinja_renderer(template_setting)
            self.template_source = "PREFCALL_ENGINE_CHAT_TEMPLATE"
        else:
            renderer = self._apply_template
        try:
            self.layout = ChatLayout(renderer)
        except BackendError:
            if not props.get("chat_template"):
                raise
            self.layout = ChatLayout(jinja_renderer(props["chat_template"], str(props.get("bos_token") or ""),
                                                    str(props.get("eos_token") or "")))
            self.template_source = "/props chat_template (client-side Jinja)"
        self.parse_special_honoured = self._probe_parse_special()
        pieces = self.parse_special_honoured and self.layout.pieces_ok
        # the file's model with the file's template (the server's own, unless its --chat-template replaced it or a
        # template is set here): the in-process engine's prompts, so it shares the file's fit (storage.fits)
        model_file = local_model_file(model_path)
        meta = gguf_info(model_file)
        in_use = template_setting if template_setting is not None else props.get("chat_template")
        self.model_file = model_file if model_file and in_use in (None, meta and meta.chat_template) else None
        self._info = EngineInfo(
            model_path=model_path or spec.url,
            model_name=spec.model or (meta.name if self.model_file and meta is not None else None) or
            (model_path.rsplit("/", 1)[-1].removesuffix(".gguf") if model_path else "llama-server"),
            backend=self.backend, n_ctx=self.n_ctx, n_gpu_layers=0,
            chat_template=props.get("chat_template"),
            capabilities=Capabilities(grammar=True, logprobs=True, renormalised_logprobs=False,
                                      candidate_scoring=True, prompt_pieces=pieces, prefix_cache=True,
                                      cancellation=True),
            extra={"url": spec.url, "build": props.get("build_info"), "total_slots": self.total_slots,
                   "template": self.template_source, "logprobs": "raw (n_probs, before the grammar)",
                   "grammar": "GBNF from llama.cpp's JSON-Schema converter (as in-process)",
                   "candidate_scoring": "teacher forcing (one-literal grammar + logit_bias)",
                   "untrusted_text": "tokenized with parse_special=false" if pieces
                   else "defused before tokenization (server ignores parse_special)",
                   "prefix_cache": "cache_prompt; id_slot per user" if settings.engine_pin_slots else "cache_prompt",
                   "device": "server-side"},
            scores=LLAMA_CPP_SCORES, model_file=self.model_file,
        )

    # -- template and tokens ------------------------------------------------------------------------------------
    def _apply_template(self, messages: list[dict[str, str]]) -> str:
        reply = self.http.post("/apply-template", {"messages": messages, "add_generation_prompt": True})
        prompt = reply.get("prompt") if isinstance(reply, dict) else None
        if not isinstance(prompt, str):
            raise BackendError(f"{self.http.where} answered /apply-template without a prompt: check its version")
        return prompt

    def _tokenize(self, text: str, *, special: bool, add_special: bool = False,
                  cancel: Cancel | None = None) -> tuple[int, ...]:
        if not text:
            return ()
        key = (text, special, add_special)
        with self._tokens_lock:
            if key in self._tokens:
                self._tokens.move_to_end(key)
                return self._tokens[key]
        reply = self.http.post("/tokenize", {"content": text, "add_special": add_special, "parse_special": special},
                               cancel=cancel)
        tokens = tuple(int(t["id"]) if isinstance(t, dict) else int(t) for t in reply.get("tokens", []))
        if len(text) <= 20_000:
            with self._tokens_lock:
                self._tokens[key] = tokens
                while len(self._tokens) > 512:
                    self._tokens.popitem(last=False)
        return tokens

    def _probe_parse_special(self) -> bool:
        """True when /tokenize keeps a control marker as text with parse_special=false (older servers parse it)."""
        markers = sorted(m for m in self.layout.markers if m.startswith("<|") and m.endswith("|>"))
        marker = markers[0] if markers else None
        if marker is None:
            return True  # nothing to test against; llama-server documents parse_special
        special = self._tokenize(marker, special=True)
        plain = self._tokenize(marker, special=False)
        return not (len(special) == 1 and plain == special)

    def _plain(self, text: str, cancel: Cancel | None = None) -> tuple[int, ...]:
        if not self.parse_special_honoured:
            text = self.layout.defuse(text)
        return self._tokenize(text, special=False, cancel=cancel)

    def prompt_ids(self, prompt: Prompt, cancel: Cancel | None = None) -> tuple[list[int], int]:
        """Token ids of the whole prompt and how many of them are the shared messages' (as the in-process engine)."""
        layout = self.layout.layout(prompt)
        pieces: list[tuple[int, ...]] = []
        for index, (kind, value) in enumerate(layout.pieces):
            if kind == "template":
                first = not any(pieces)
                ids = self._tokenize(value, special=True, add_special=first, cancel=cancel)
                if first and len(ids) >= 2 and ids[0] == ids[1]:
                    ids = ids[1:]  # the template wrote BOS itself and the server added another
                pieces.append(ids)
            else:
                content = layout.messages[value]["content"]
                pieces.append(self._plain(content, cancel) if layout.ok else self._tokenize(
                    self.layout.defuse(content), special=True, cancel=cancel))
        tokens = [t for piece in pieces for t in piece]
        shared_len = sum(len(p) for p in pieces[: layout.shared_pieces])
        return tokens + list(self._plain(prompt.prefix, cancel)), shared_len

    def count_tokens(self, text: str) -> int:
        return len(self._plain(text))

    def prompt_tokens(self, prompt: Prompt) -> int:
        return len(self.prompt_ids(prompt)[0])

    def _slot(self, scope: Scope) -> int:
        if not self.settings.engine_pin_slots or self.total_slots <= 1:
            return -1
        digest = hashlib.sha256(f"{scope.shared}\0{scope.user}".encode()).digest()
        return int.from_bytes(digest[:4], "big") % self.total_slots

    # -- contract -------------------------------------------------------------------------------------------------
    def generate(self, prompt: Prompt, *, max_tokens: int = 256, stop: Sequence[str] = (),
                 json_schema: dict[str, Any] | None = None, top_logprobs: int = 0, scope: Scope = LOCAL,
                 cancel: Cancel | None = None) -> Generation:
        started = time.perf_counter()
        check_cancel(cancel)
        ids, shared_len = self.prompt_ids(prompt, cancel)
        budget = check_budget(len(ids), max_tokens, self.n_ctx)
        body: dict[str, Any] = {
            "prompt": ids, "n_predict": budget, "temperature": 0.0, "top_k": 1, "repeat_penalty": 1.0,
            "dry_multiplier": 0.0, "stop": [s for s in stop if s], "n_probs": max(1, top_logprobs),
            "post_sampling_probs": False, "cache_prompt": True, "stream": True, "return_tokens": True,
            "id_slot": self._slot(scope),
        }
        if json_schema is not None:
            # The in-process engine's grammar (llama.cpp's Python converter), not the server's `json_schema`: the
            # server's C++ converter also allows newlines and indentation between tokens, so the same model would
            # write differently spaced JSON (measured: '{\n  "cuisine": ...' vs '{ "cuisine": ...').
            from prefcall.engine.grammar import json_schema_gbnf

            body["grammar"] = json_schema_gbnf(json_schema)
        state = StreamState()
        with self.http.stream("/completion", body, cancel=cancel) as events:
            for event in events:
                self._absorb(state, event, top_logprobs)
        text, tokens, cut = apply_stop(state.text, state.tokens, stop)
        finish = "stop" if cut else (state.finish or "stop")
        usage = self.ledger.usage(ids, shared_len, scope, state.cached)
        return Generation(text, tokens, usage, finish, time.perf_counter() - started)

    def _absorb(self, state: StreamState, event: dict[str, Any], top_n: int) -> None:
        state.text += event.get("content") or ""
        probs = event.get("completion_probabilities")
        if probs is None:
            probs = event.get("probs") or []
        for entry in probs:
            state.tokens.append(_token(entry, top_n))
        if event.get("stop"):
            stop_type = event.get("stop_type")
            state.finish = "length" if stop_type == "limit" else "stop"
            if event.get("truncated"):
                state.finish = "length"
            timings = event.get("timings") or {}
            cached = timings.get("cache_n", event.get("tokens_cached"))
            state.cached = int(cached) if cached is not None else None

    def score_candidates(self, prompt: Prompt, candidates: Sequence[str], *, scope: Scope = LOCAL,
                         cancel: Cancel | None = None, heal_end: bool = False) -> CandidateScores:
        started = time.perf_counter()
        if any(not c for c in candidates):
            raise EngineError("a candidate is empty: pass non-empty candidate strings")
        healed, texts = heal_boundary(prompt, candidates)
        ids, shared_len = self.prompt_ids(healed, cancel)
        canonicals = [list(self._plain(c, cancel)) for c in texts]
        check_budget(len(ids), max((len(c) for c in canonicals), default=1), self.n_ctx)
        scores, counts = [], []
        usage: PromptUsage | None = None
        for candidate, canonical in zip(texts, canonicals):
            check_cancel(cancel)
            text = candidate if self.parse_special_honoured else self.layout.defuse(candidate)
            reply = self.http.post("/completion", {
                "prompt": ids, "temperature": 0.0, "top_k": 1, "repeat_penalty": 1.0, "dry_multiplier": 0.0,
                "n_probs": HEAL_TOP if heal_end else 1, "post_sampling_probs": False, "cache_prompt": True,
                "stream": False,
                "id_slot": self._slot(scope), **forced_literal_body(text, canonical, "n_predict", dict_bias=False),
            }, cancel=cancel)
            probs = reply.get("completion_probabilities")
            if probs is None:
                probs = reply.get("probs") or []
            tokens = [_token(e, HEAL_TOP if heal_end else 0) for e in probs]
            total, used = sum_covering(tokens, text, self.http.where)
            if heal_end:
                total += heal_last(tokens, used)
            scores.append(total)
            counts.append(used)
            if usage is None:
                timings = reply.get("timings") or {}
                cached = timings.get("cache_n", reply.get("tokens_cached"))
                usage = self.ledger.usage(ids, shared_len, scope, int(cached) if cached is not None else None)
        return CandidateScores(list(candidates), scores, counts, usage or PromptUsage(len(ids), len(ids), 0),
                               time.perf_counter() - started)


def _token(entry: dict[str, Any], top_n: int) -> TokenLogprob:
    if "logprob" in entry:
        logprob = float(entry["logprob"])
    else:  # post_sampling_probs answers with probabilities
        import math

        logprob = math.log(max(float(entry.get("prob", 0.0)), 1e-300))
    if isinstance(entry.get("bytes"), list):
        text = bytes(entry["bytes"]).decode("utf-8", "replace")
    else:
        text = str(entry.get("token", ""))
    top = top_pairs(entry.get("top_logprobs", entry.get("top_probs")), top_n)
    return TokenLogprob(text, min(0.0, logprob), top, False, min(0.0, logprob))
