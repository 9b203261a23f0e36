"""The llama.cpp engine: the only module in prefcall that imports `llama_cpp`.

It drives llama.cpp token by token instead of using `create_completion`, because:
- per-token logprobs of the generated text must not need `logits_all=True`
  (that allocates n_ctx x n_vocab floats); we read the last row of logits after each step;
- candidate scoring must evaluate the prompt once and branch per candidate from its KV state;
- shared prompt prefixes (system prompt + catalogue) are kept as saved KV states between
  calls, so alternating catalogues do not re-evaluate each other's prefix.
"""

from __future__ import annotations

import ctypes
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prefcall.config import Settings
from prefcall.engine.base import (
    CandidateScores,
    ChatMessage,
    EngineInfo,
    Generation,
    PromptUsage,
    TokenLogprob,
)
from prefcall.engine.resolve import resolve_model_path
from prefcall.errors import ContextOverflowError, EngineError, GrammarError, InvalidModelError

import llama_cpp  # noqa: E402  (kept below the prefcall imports on purpose: the one import site)
from llama_cpp import _internals as llama_internals  # noqa: E402
from llama_cpp.llama_grammar import LlamaGrammar  # noqa: E402

# ChatML, used only when a GGUF carries no chat template of its own.
_FALLBACK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_MIN_PREFIX_TO_SAVE = 32  # tokens; shorter prefixes are cheaper to re-evaluate than to copy


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max()
    return shifted - np.log(np.exp(shifted).sum())


def _compile_template(source: str) -> Any:
    """Compile the GGUF's chat template once (compiling costs 5-20 ms, more than rendering)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    return ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(source)


def detect_backend(n_gpu_layers: int) -> str:
    """Which device the layers run on: what was asked for, limited by what this build supports."""
    system = llama_cpp.llama_print_system_info().decode("utf-8", "replace").upper()
    if n_gpu_layers == 0 or not llama_cpp.llama_supports_gpu_offload():
        return "cpu"
    for name in ("CUDA", "METAL", "VULKAN", "HIP", "SYCL"):
        if name in system:
            return name.lower()
    return "gpu"


class LlamaEngine:
    """Thread-safe engine over one GGUF model; calls are serialised by a lock."""

    def __init__(self, settings: Settings | None = None, *, model_path: str | Path | None = None) -> None:
        self.settings = settings or Settings()
        path = resolve_model_path(model_path or self.settings.model)
        self._lock = threading.RLock()
        self._llm = self._load(path)
        self._vocab_size = self._llm.n_vocab()
        self._template = self._llm.metadata.get("tokenizer.chat_template") or _FALLBACK_TEMPLATE
        self._compiled_template = _compile_template(self._template)
        self._saved: OrderedDict[tuple[int, ...], bytes] = OrderedDict()  # prefix tokens -> KV bytes of seq 0
        self._grammars: OrderedDict[str, LlamaGrammar] = OrderedDict()
        self._info = EngineInfo(
            model_path=str(path),
            model_name=self._llm.metadata.get("general.name") or path.stem,
            backend=detect_backend(self.settings.n_gpu_layers),
            n_ctx=self._llm.n_ctx(),
            n_gpu_layers=self.settings.n_gpu_layers,
            chat_template=self._template,
            extra={"n_vocab": self._vocab_size},
        )

    def _load(self, path: Path) -> llama_cpp.Llama:
        s = self.settings
        try:
            return llama_cpp.Llama(
                model_path=str(path),
                n_ctx=s.n_ctx,
                n_batch=s.n_batch,
                n_threads=s.n_threads,
                n_threads_batch=s.n_threads_batch,
                n_gpu_layers=s.n_gpu_layers,
                seed=s.seed,
                logits_all=False,
                verbose=s.verbose,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise InvalidModelError(f"could not load model {path}: {exc}: check it is a complete GGUF file") from exc

    # -- Engine contract --------------------------------------------------------------
    @property
    def info(self) -> EngineInfo:
        return self._info

    def format_chat(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> str:
        return self._compiled_template.render(
            messages=[{"role": m.role, "content": m.content} for m in messages],
            add_generation_prompt=add_generation_prompt,
            bos_token=self._token_text(self._llm.token_bos()),
            eos_token=self._token_text(self._llm.token_eos()),
        )

    def count_tokens(self, text: str) -> int:
        return len(self._tokenize(text))

    def generate(
        self,
        prompt: str,
        *,
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        json_schema: dict[str, Any] | None = None,
        top_logprobs: int = 0,
    ) -> Generation:
        grammar = self._grammar(json_schema) if json_schema is not None else None
        tokens = self._tokenize(prompt)
        with self._lock:
            started = time.perf_counter()
            budget = self._check_fits(len(tokens), max_tokens)
            usage = self._evaluate_prompt(tokens)
            sampler = self._sampler(grammar)
            text, generated, finish = self._decode_loop(sampler, budget, stop, top_logprobs)
            return Generation(text, generated, usage, finish, time.perf_counter() - started)

    def score_candidates(self, prompt: str, candidates: Sequence[str]) -> CandidateScores:
        prompt_tokens = self._tokenize(prompt)
        candidate_tokens = [self._tokenize(c, add_bos=False) for c in candidates]
        if any(not toks for toks in candidate_tokens):
            raise EngineError("a candidate is empty: pass non-empty candidate strings")
        with self._lock:
            started = time.perf_counter()
            self._check_fits(len(prompt_tokens), max(len(t) for t in candidate_tokens))
            usage = self._evaluate_prompt(prompt_tokens)
            first = _log_softmax(self._last_logits())
            base = self._llm.n_tokens
            scores = [self._score_continuation(base, first, toks) for toks in candidate_tokens]
            # Leave the context at the prompt so the next call reuses all of it.
            self._llm.n_tokens = base
            self._llm._ctx.kv_cache_seq_rm(-1, base, -1)
            counts = [len(t) for t in candidate_tokens]
            return CandidateScores(list(candidates), scores, counts, usage, time.perf_counter() - started)

    # -- tokens -----------------------------------------------------------------------
    def _tokenize(self, text: str, add_bos: bool = True) -> list[int]:
        # The chat template may already have written BOS as text; do not add a second one.
        bos_text = self._token_text(self._llm.token_bos())
        add_bos = add_bos and not (bos_text and text.startswith(bos_text))
        return self._llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self._piece(token, special=True).decode("utf-8", "replace")

    def _piece(self, token: int, special: bool = False) -> bytes:
        # LlamaModel.token_to_piece returns its whole 32-byte buffer, NULs included; use the length.
        size = 64
        while True:
            buffer = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_token_to_piece(self._llm._model.vocab, token, buffer, size, 0, special)
            if n >= 0:
                return buffer.raw[:n]
            size = -n

    def _check_fits(self, n_prompt: int, max_new: int) -> int:
        n_ctx = self._info.n_ctx
        if n_prompt == 0:
            raise EngineError("the prompt is empty: pass some text to generate from")
        if max_new < 1:
            raise EngineError(f"max_tokens must be at least 1, got {max_new}")
        if n_prompt >= n_ctx:
            raise ContextOverflowError(
                f"prompt is {n_prompt} tokens but the context holds {n_ctx}: "
                "raise PREFCALL_N_CTX or shorten the dialogue"
            )
        return min(max_new, n_ctx - n_prompt)

    # -- KV state ---------------------------------------------------------------------
    def _common_prefix(self, tokens: Sequence[int], cached: Sequence[int]) -> int:
        n = 0
        for a, b in zip(tokens, cached):
            if a != b:
                break
            n += 1
        return n

    def _current_tokens(self) -> list[int]:
        return [int(t) for t in self._llm.input_ids[: self._llm.n_tokens]]

    def _evaluate_prompt(self, tokens: list[int]) -> PromptUsage:
        """Bring the context to exactly `tokens`, evaluating only what no cached state holds."""
        current = self._current_tokens()
        shared = self._common_prefix(tokens, current)
        saved_key, saved_shared = self._best_saved(tokens)
        if saved_shared > shared + _MIN_PREFIX_TO_SAVE:
            # Take the state out first: remembering the current context may evict it.
            saved = self._saved.pop(saved_key)
            self._remember(current)
            shared = min(self._restore(saved_key, saved), saved_shared)
        elif len(current) - shared >= _MIN_PREFIX_TO_SAVE:
            self._remember(current)  # about to overwrite a long context another catalogue may want back
        # At least one token must be decoded so that fresh logits exist.
        keep = min(shared, len(tokens) - 1)
        self._llm.n_tokens = keep
        try:
            self._llm.eval(tokens[keep:])
        except Exception as exc:  # llama.cpp reports decode failures as plain exceptions
            self._llm.reset()
            raise EngineError(f"llama.cpp failed to evaluate the prompt: {exc}") from exc
        return PromptUsage(prompt_tokens=len(tokens), evaluated=len(tokens) - keep, reused=keep)

    def _best_saved(self, tokens: Sequence[int]) -> tuple[tuple[int, ...], int]:
        best_key: tuple[int, ...] = ()
        best = 0
        for key in self._saved:
            n = self._common_prefix(tokens, key)
            if n > best:
                best_key, best = key, n
        return best_key, best

    def _remember(self, current: list[int]) -> None:
        slots = self.settings.prefix_cache_slots
        if slots <= 0 or len(current) < _MIN_PREFIX_TO_SAVE:
            return
        key = tuple(current)
        if key in self._saved:
            self._saved.move_to_end(key)
            return
        ctx = self._llm._ctx.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(ctx, buffer, size, 0)
        self._saved[key] = ctypes.string_at(buffer, written)  # bytes(buffer[:n]) costs 0.6 s per 3.6 MB
        while len(self._saved) > slots:
            self._saved.popitem(last=False)

    def _restore(self, key: tuple[int, ...], data: bytes) -> int:
        """Load a saved KV state of sequence 0; returns how many tokens of context it restored."""
        # Llama.load_state assumes n_tokens <= n_batch when logits_all=False; restore seq 0 directly.
        buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        self._llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        if llama_cpp.llama_state_seq_set_data(self._llm._ctx.ctx, buffer, len(data), 0) != len(data):
            self._llm.n_tokens = 0
            return 0
        self._llm.input_ids[: len(key)] = key
        self._llm.n_tokens = len(key)
        self._saved[key] = data  # most recently used
        return len(key)

    # -- decoding ---------------------------------------------------------------------
    def _last_logits(self) -> np.ndarray:
        # With logits_all=False, llama-cpp-python no longer copies logits into Llama.scores;
        # the context still holds the last evaluated row.
        pointer = llama_cpp.llama_get_logits_ith(self._llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(self._vocab_size,)).copy()

    def _score_continuation(self, base: int, first: np.ndarray, tokens: list[int]) -> float:
        total = float(first[tokens[0]])
        for previous, token in zip(tokens, tokens[1:]):
            self._llm.eval([previous])
            total += float(_log_softmax(self._last_logits())[token])
        self._llm.n_tokens = base
        return total

    def _grammar(self, schema: dict[str, Any]) -> LlamaGrammar:
        key = json.dumps(schema, sort_keys=True)
        if key in self._grammars:
            self._grammars.move_to_end(key)
            return self._grammars[key]
        try:
            grammar = LlamaGrammar.from_json_schema(key, verbose=False)
        except Exception as exc:  # the converter raises bare exceptions for unsupported schema parts
            raise GrammarError(f"JSON Schema cannot become a grammar ({exc}): simplify or fix the schema") from exc
        self._grammars[key] = grammar
        while len(self._grammars) > 64:
            self._grammars.popitem(last=False)
        return grammar

    def _sampler(self, grammar: LlamaGrammar | None) -> llama_internals.LlamaSampler:
        sampler = llama_internals.LlamaSampler()
        if grammar is not None:
            handle = llama_cpp.llama_sampler_init_grammar(
                self._llm._model.vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8")
            )
            if not handle:  # llama.cpp returns NULL for a grammar it cannot parse
                raise GrammarError("llama.cpp rejected the grammar built from the schema: simplify the schema")
            llama_cpp.llama_sampler_chain_add(sampler.sampler, handle)
        sampler.add_greedy()
        return sampler

    def _decode_loop(
        self, sampler: llama_internals.LlamaSampler, budget: int, stop: Sequence[str], top_n: int
    ) -> tuple[str, list[TokenLogprob], str]:
        out: list[TokenLogprob] = []
        raw = b""
        for _ in range(budget):
            logprobs = _log_softmax(self._last_logits())
            token = sampler.sample(self._llm._ctx, -1)  # applies the grammar, picks greedily, accepts
            if llama_cpp.llama_vocab_is_eog(self._llm._model.vocab, token):
                return raw.decode("utf-8", "ignore"), out, "stop"
            piece = self._piece(token)
            raw += piece
            out.append(TokenLogprob(piece.decode("utf-8", "replace"), float(logprobs[token]), self._top(logprobs, top_n)))
            text = raw.decode("utf-8", "ignore")
            hit = next((s for s in stop if s and s in text), None)
            if hit is not None:
                cut = text.index(hit)
                return text[:cut], _tokens_before(out, cut), "stop"
            self._llm.eval([token])
        return raw.decode("utf-8", "ignore"), out, "length"

    def _top(self, logprobs: np.ndarray, n: int) -> tuple[tuple[str, float], ...]:
        if n <= 0:
            return ()
        best = np.argpartition(-logprobs, n)[:n]
        best = best[np.argsort(-logprobs[best])]
        return tuple((self._token_text(int(t)), float(logprobs[t])) for t in best)

    def close(self) -> None:
        with self._lock:
            self._saved.clear()
            self._llm.close()


def _tokens_before(tokens: list[TokenLogprob], cut: int) -> list[TokenLogprob]:
    """Tokens that start before character `cut`: the stop string's own tokens are not the answer's."""
    kept, length = [], 0
    for token in tokens:
        if length >= cut:
            break
        kept.append(token)
        length += len(token.token)
    return kept
