"""The llama.cpp engine: with `engine/grammar.py` (its model-free grammar check), the only module in prefcall
that imports `llama_cpp`.

It drives llama.cpp token by token instead of using `create_completion`, because:
- untrusted text must never become control tokens: the chat template is rendered with placeholders, its own
  pieces are tokenized with special-token parsing and the message contents without (`_tokenize_prompt`);
- per-token logprobs of the generated text must not need `logits_all=True` (n_ctx x n_vocab floats); we read
  the last row of logits after each step, and under a grammar renormalise them over the allowed tokens
  (the grammar is applied to the logits before the softmax, so a forced token reads as log 1 = 0);
- candidate scoring evaluates the prompt once and scores every candidate in one batched decode: each candidate is
  its own sequence over the prompt's KV cells (a token tree), and several prompts that share a beginning (one
  function's arguments) are scored in the same decode, their shared tokens evaluated once (`score_batch`);
- shared prompt prefixes (system prompt + catalogue) are kept as saved KV states between calls, reused across
  users only up to the shared messages (`Scope`), and within one user as far as the tokens agree;
- the public shared prefixes (built-in prompts and catalogues, no user's text) are also written to disk
  (`PrefixDisk`), so a restarted server does not evaluate them again on its first request;
- cancellation is checked between evaluation batches and between tokens.
"""

from __future__ import annotations

import ctypes
import json
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prefcall.config import Settings
from prefcall.engine.base import (
    LLAMA_CPP_SCORES,
    LOCAL,
    Cancel,
    CandidateScores,
    EngineInfo,
    Generation,
    Prompt,
    PromptUsage,
    Scope,
    TokenLogprob,
    check_cancel,
    fold_system,
    heal_boundary,
    reusable,
    tokens_before,
)
from prefcall.engine.grammar import check_grammar
from prefcall.engine.kv_cache import PrefixDisk, SavedState
from prefcall.engine.resolve import resolve_model_path
from prefcall.errors import CancelledError, ContextOverflowError, EngineError, GrammarError, InvalidModelError

import llama_cpp  # noqa: E402  (kept below the prefcall imports on purpose: the one import site)
from llama_cpp import _internals as llama_internals  # noqa: E402
from llama_cpp.llama_grammar import LlamaGrammar  # noqa: E402

# ChatML, used only when a GGUF carries no chat template of its own.
_FALLBACK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_MIN_PREFIX_TO_SAVE = 32  # tokens; shorter prefixes are cheaper to re-evaluate than to copy
# Sequences a scoring decode may use (llama.cpp's n_seq_max; the KV cache is unified, so this costs no memory):
# sequence 0 holds the prompt, each candidate of a decode one of the others.
_SCORE_SEQS = 64
# Tokens per scoring decode: on a CPU a batch of 64 costs about 20 ms a token against 50 for one alone, and more
# buys little; each kept logits row costs n_vocab floats (Qwen2.5: 0.6 MB), so the rows of one decode are bounded.
_SCORE_TOKENS = 64
_GRAMMAR_CACHE = 64


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max()
    return shifted - np.log(np.exp(shifted).sum())


def _compile_template(source: str) -> Any:
    """Compile the GGUF's chat template once (compiling costs 5-20 ms, more than rendering)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)


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
        self._vocab = self._llm._model.vocab
        self._vocab_size = self._llm.n_vocab()
        self._template = self._llm.metadata.get("tokenizer.chat_template") or _FALLBACK_TEMPLATE
        self._compiled_template = _compile_template(self._template)
        self._bos_text = self._token_text(self._llm.token_bos())
        self._eos_text = self._token_text(self._llm.token_eos())
        self._merge_system = False  # templates that reject a system role get it folded into the first user turn
        self._pieces_ok = self._probe_template()
        self._saved: OrderedDict[tuple[int, ...], SavedState] = OrderedDict()
        self._ctx_scope: Scope | None = None  # whose text the current KV context holds
        self._ctx_shared = 0  # how many of its tokens are shared messages
        self._grammars: OrderedDict[str, LlamaGrammar] = OrderedDict()
        self._candidates = llama_internals.LlamaTokenDataArray(n_vocab=self._vocab_size)
        self._disk = self._prefix_disk(path)
        self._vocab_pieces: list[bytes] | None = None  # every token's text, read once for heal_end
        self._heal_cache: dict[int, np.ndarray | None] = {}
        n_layer = llama_cpp.llama_model_n_layer(self._llm._model.model)
        backend = detect_backend(self.settings.n_gpu_layers)
        wanted = self.settings.n_gpu_layers
        offloaded = 0 if backend == "cpu" else (n_layer + 1 if wanted < 0 else min(wanted, n_layer + 1))
        self._info = EngineInfo(
            model_path=str(path),
            model_name=self._llm.metadata.get("general.name") or path.stem,
            backend=backend,
            n_ctx=self._llm.n_ctx(),
            n_gpu_layers=self.settings.n_gpu_layers,
            chat_template=self._template,
            extra={"n_vocab": self._vocab_size, "n_layer": n_layer, "n_gpu_layers_offloaded": offloaded,
                   "template_pieces": self._pieces_ok},
            scores=LLAMA_CPP_SCORES,
        )

    def _load(self, path: Path) -> llama_cpp.Llama:
        s = self.settings
        try:
            llm = llama_cpp.Llama(
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
        # llama-cpp-python makes a one-sequence context; scoring branches candidates as sequences of a unified KV
        # cache, so the context is made again with room for them (Llama takes no n_seq_max argument).
        params = llm.context_params
        params.n_seq_max = min(_SCORE_SEQS, llama_cpp.llama_max_parallel_sequences())
        params.kv_unified = True
        # Output rows a scoring decode may keep: one per token, and llama.cpp counts one per sequence besides (the
        # buffer grows to what decodes use, not to this bound).
        params.n_outputs_max = int(params.n_batch) + int(params.n_seq_max)
        llm._ctx.close()
        try:
            llm._ctx = llama_internals.LlamaContext(model=llm._model, params=params, verbose=s.verbose)
        except ValueError as exc:
            raise InvalidModelError(f"could not make a context for {path}: {exc}: lower PREFCALL_N_CTX") from exc
        self._seqs = int(params.n_seq_max)
        self._tree = llama_internals.LlamaBatch(n_tokens=max(1, s.n_batch), embd=0, n_seq_max=self._seqs,
                                                verbose=s.verbose)
        return llm

    def _prefix_disk(self, path: Path) -> PrefixDisk | None:
        s = self.settings
        if s.prefix_disk_mb <= 0:
            return None
        try:
            stat = path.stat()
        except OSError:
            return None
        stamp = [str(path.resolve()), stat.st_size, stat.st_mtime_ns, llama_cpp.__version__, s.n_gpu_layers]
        return PrefixDisk(Path(s.data_dir) / "kv", stamp, s.prefix_disk_mb * 1024 * 1024)

    # -- Engine contract --------------------------------------------------------------
    @property
    def info(self) -> EngineInfo:
        return self._info

    def count_tokens(self, text: str) -> int:
        return len(self._plain(text))

    def prompt_tokens(self, prompt: Prompt) -> int:
        return len(self._tokenize_prompt(prompt)[0])

    def render(self, prompt: Prompt) -> str:
        """The prompt as the template renders it (for display and debugging only)."""
        return self._render(self._messages(prompt), {}) + prompt.prefix

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
        grammar = self._grammar(json_schema) if json_schema is not None else None
        tokens, shared_len = self._tokenize_prompt(prompt)
        with self._lock:
            started = time.perf_counter()
            budget = self._check_fits(len(tokens), max_tokens)
            usage = self._evaluate_prompt(tokens, shared_len, scope, cancel)
            text, generated, finish = self._decode_loop(grammar, budget, stop, top_logprobs, cancel)
            return Generation(text, generated, usage, finish, time.perf_counter() - started)

    def score_candidates(
        self, prompt: Prompt, candidates: Sequence[str], *, scope: Scope = LOCAL, cancel: Cancel | None = None,
        heal_end: bool = False,
    ) -> CandidateScores:
        return self.score_batch([(prompt, candidates)], scope=scope, cancel=cancel, heal_end=heal_end)[0]

    def score_batch(
        self, requests: Sequence[tuple[Prompt, Sequence[str]]], *, scope: Scope = LOCAL, cancel: Cancel | None = None,
        heal_end: bool = False,
    ) -> list[CandidateScores]:
        """`score_candidates` for several prompts at once: the tokens all prompts begin with (the trunk) are
        evaluated as a prompt is (cached prefixes reused); what follows in each prompt (its stem) and every
        candidate's tokens go into batched decodes as a token tree, each candidate its own sequence over the
        trunk and its prompt's stem. The context is left at the trunk, so the next call reuses all of it."""
        if not requests:
            return []
        prepared: list[tuple[list[int], int, list[list[int]]]] = []
        for prompt, candidates in requests:
            if not candidates or any(not c for c in candidates):
                raise EngineError("a candidate is empty: pass non-empty candidate strings")
            healed, texts = heal_boundary(prompt, candidates)
            tokens, shared_len = self._tokenize_prompt(healed)
            candidate_tokens = [self._plain(c) for c in texts]
            if any(not toks for toks in candidate_tokens):
                raise EngineError("a candidate is empty: pass non-empty candidate strings")
            prepared.append((tokens, shared_len, candidate_tokens))
        with self._lock:
            started = time.perf_counter()
            for tokens, _, candidate_tokens in prepared:
                self._check_fits(len(tokens), max(len(t) for t in candidate_tokens))
            first = prepared[0][0]
            trunk_len = min(len(tokens) - 1 for tokens, _, _ in prepared)  # every prompt keeps a stem token
            for tokens, _, _ in prepared[1:]:
                trunk_len = min(trunk_len, self._common_prefix(first, tokens))
            # Tokens one decode takes: _SCORE_TOKENS, or the longest stem and candidate where that is longer.
            need = max(len(t) - trunk_len + max(map(len, c)) - 1 for t, _, c in prepared)
            limit = min(max(1, self.settings.n_batch), self._info.n_ctx - trunk_len - 1, max(_SCORE_TOKENS, need))
            if need > limit and len(prepared) > 1:
                # Prompts that part early (long stems): one tree per prompt, each over its own whole prompt.
                return [self.score_batch([r], scope=scope, cancel=cancel, heal_end=heal_end)[0] for r in requests]
            if need > limit:
                raise EngineError(f"a candidate is longer than one decode holds ({limit} tokens): raise "
                                  "PREFCALL_N_BATCH or score shorter candidates")
            if trunk_len:
                shared = min(min(s for _, s, _ in prepared), trunk_len)
                trunk_usage = self._evaluate_prompt(first[:trunk_len], shared, scope, cancel, need_logits=False)
            else:
                self._clear()
                self._ctx_scope, self._ctx_shared = scope, 0
                trunk_usage = PromptUsage()
            self._drop_branches(trunk_len)  # a longer context than the trunk may have been kept: its cells go
            scores: list[list[float]] = [[0.0] * len(c) for _, _, c in prepared]
            try:
                for group in self._tree_groups(prepared, trunk_len, limit):
                    check_cancel(cancel)
                    self._score_tree(prepared, group, trunk_len, scores, heal_end)
            except CancelledError:
                raise
            except Exception as exc:  # llama.cpp reports decode failures as plain exceptions
                self._llm.reset()
                self._clear()
                self._ctx_scope = None
                raise EngineError(f"llama.cpp failed to score candidates: {exc}") from exc
            finally:
                self._drop_branches(trunk_len)
            seconds = (time.perf_counter() - started) / len(prepared)
            out = []
            for b, (tokens, _, candidate_tokens) in enumerate(prepared):
                stem = len(tokens) - trunk_len
                evaluated = stem + (trunk_usage.evaluated if b == 0 else 0)
                usage = PromptUsage(prompt_tokens=len(tokens), evaluated=evaluated, reused=len(tokens) - evaluated)
                out.append(CandidateScores(list(requests[b][1]), scores[b], [len(t) for t in candidate_tokens],
                                           usage, seconds))
            return out

    def _tree_groups(self, prepared: Sequence[tuple[list[int], int, list[list[int]]]], trunk_len: int,
                     limit: int) -> list[list[tuple[int, list[int]]]]:
        """The (prompt, candidate indices) parts of each decode: at most `limit` tokens (a prompt's stem, and each
        candidate token prefix once, as `_score_tree` lays them out), one sequence per candidate, as many as the
        context has."""
        groups: list[list[tuple[int, list[int]]]] = [[]]
        used = seqs = 0
        for b, (tokens, _, candidate_tokens) in enumerate(prepared):
            stem = len(tokens) - trunk_len
            part: list[int] = []
            nodes: set[tuple[int, ...]] = set()
            for i, toks in enumerate(candidate_tokens):
                prefixes = {tuple(toks[:k + 1]) for k in range(len(toks) - 1)}  # the tokens it feeds
                new = prefixes - nodes
                cost = len(new) + (0 if part else stem)
                if (used + cost > limit or seqs + 1 > self._seqs - 1) and (part or groups[-1]):
                    if part:
                        groups[-1].append((b, part))
                    groups.append([])
                    part, nodes, used, seqs = [], set(), 0, 0
                    new, cost = prefixes, len(prefixes) + stem
                part.append(i)
                nodes |= new
                used += cost
                seqs += 1
            groups[-1].append((b, part))
        return [g for g in groups if g]

    def _score_tree(self, prepared: Sequence[tuple[list[int], int, list[list[int]]]],
                    group: Sequence[tuple[int, list[int]]], trunk_len: int, scores: list[list[float]],
                    heal_end: bool) -> None:
        """One decode of a token tree over the trunk in sequence 0: per prompt its stem, then its candidates as a
        prefix tree (a token prefix several candidates share is one node), every candidate a sequence of its own;
        logits kept wherever a candidate's next token is predicted."""
        batch = self._tree.batch
        n = 0
        next_seq = 1
        reads: list[tuple[int, int, list[int]]] = []  # (prompt, candidate, batch index predicting each token)

        def put(token: int, pos: int, seqs: Sequence[int], logits: bool) -> int:
            nonlocal n
            batch.token[n] = token
            batch.pos[n] = pos
            batch.n_seq_id[n] = len(seqs)
            for j, seq in enumerate(seqs):
                batch.seq_id[n][j] = seq
            batch.logits[n] = logits
            n += 1
            return n - 1

        for b, part in group:
            tokens, _, candidate_tokens = prepared[b]
            seq_of = {i: next_seq + k for k, i in enumerate(part)}
            next_seq += len(part)
            stem = tokens[trunk_len:]
            everyone = list(seq_of.values())
            stem_end = -1
            for k, token in enumerate(stem):
                stem_end = put(token, trunk_len + k, everyone, k == len(stem) - 1)
            # A candidate token prefix is one node, decoded once for every candidate that begins with it.
            node: dict[tuple[int, ...], int] = {}
            for i in part:
                toks = candidate_tokens[i]
                for k in range(len(toks) - 1):
                    key = tuple(toks[:k + 1])
                    if key not in node:
                        through = [seq_of[j] for j in part if tuple(candidate_tokens[j][:k + 1]) == key]
                        node[key] = put(toks[k], len(tokens) + k, through, True)
                reads.append((b, i, [stem_end] + [node[tuple(toks[:k + 1])] for k in range(len(toks) - 1)]))
        batch.n_tokens = n
        memory = self._llm._ctx.memory
        for seq in range(1, next_seq):
            llama_cpp.llama_memory_seq_cp(memory, 0, seq, -1, -1)
        self._llm._ctx.decode(self._tree)
        ctx = self._llm._ctx.ctx
        rows: dict[int, np.ndarray] = {}

        def logprobs_at(index: int) -> np.ndarray:
            if index not in rows:
                row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, index), shape=(self._vocab_size,))
                rows[index] = _log_softmax(row)
            return rows[index]

        for b, i, at in reads:
            toks = prepared[b][2][i]
            last = len(toks) - 1
            scores[b][i] = sum(self._token_logprob(logprobs_at(at[k]), toks[k], heal_end and k == last)
                               for k in range(len(toks)))
        for seq in range(1, next_seq):
            llama_cpp.llama_memory_seq_rm(memory, seq, -1, -1)

    def _drop_branches(self, trunk_len: int) -> None:
        """Back to the trunk in sequence 0 alone: no candidate sequence, nothing after the trunk."""
        memory = self._llm._ctx.memory
        for seq in range(1, self._seqs):
            llama_cpp.llama_memory_seq_rm(memory, seq, -1, -1)
        llama_cpp.llama_memory_seq_rm(memory, 0, trunk_len, -1)
        self._llm.n_tokens = min(self._llm.n_tokens, trunk_len)

    def _clear(self) -> None:
        llama_cpp.llama_memory_clear(self._llm._ctx.memory, True)
        self._llm.n_tokens = 0

    # -- prompts: template pieces vs untrusted text ------------------------------------
    def _messages(self, prompt: Prompt) -> list[dict[str, str]]:
        return fold_system(prompt, self._merge_system)

    def _render(self, messages: list[dict[str, str]], placeholders: dict[int, str]) -> str:
        shown = [{**m, "content": placeholders.get(i, m["content"])} for i, m in enumerate(messages)]
        return self._compiled_template.render(messages=shown, add_generation_prompt=True,
                                              bos_token=self._bos_text, eos_token=self._eos_text)

    def _probe_template(self) -> bool:
        """Check that the template copies message contents verbatim (so placeholders can stand in for them)."""
        probe = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                 {"role": "assistant", "content": "a"}, {"role": "user", "content": "v"}]
        try:
            self._render(probe, {})
        except Exception:  # noqa: BLE001 - templates raise their own errors for roles they do not support
            self._merge_system = True
            probe = probe[1:]
        marks = {i: f"\u27e6p{i}{secrets.token_hex(4)}\u27e7" for i in range(len(probe))}
        try:
            rendered = self._render(probe, marks)
        except Exception:  # noqa: BLE001
            return False
        return all(rendered.count(mark) == 1 for mark in marks.values())

    def _tokenize_prompt(self, prompt: Prompt) -> tuple[list[int], int]:
        """Token ids of the whole prompt and how many of them belong to the shared messages.

        The template is rendered with a random placeholder per message; its own text between placeholders is
        tokenized with special tokens parsed, the contents and the answer prefix as plain text."""
        messages = self._messages(prompt)
        shared = prompt.shared - (len(prompt.messages) - len(messages))  # a folded system message is no longer shared
        nonce = secrets.token_hex(6)
        marks = {i: f"\u27e6m{i}{nonce}\u27e7" for i in range(len(messages))}
        rendered = self._render(messages, marks) if self._pieces_ok else None
        if rendered is None or any(rendered.count(mark) != 1 for mark in marks.values()):
            # A template that rewrites contents: render them, but defuse anything that reads as a special token.
            safe = [{**m, "content": self._defuse(m["content"])} for m in messages]
            tokens = self._special(self._render(safe, {}), first=True) + self._plain(prompt.prefix)
            return tokens, 0
        pattern = re.compile("|".join(re.escape(mark) for mark in marks.values()))
        index_of = {mark: i for i, mark in marks.items()}
        pieces: list[list[int]] = []
        shared_until: int | None = None  # index of the last piece that belongs to the shared messages
        position = 0
        for match in pattern.finditer(rendered):
            pieces.append(self._special(rendered[position:match.start()], first=not any(pieces)))
            i = index_of[match.group()]
            pieces.append(self._plain(messages[i]["content"]))
            if i == shared - 1:
                shared_until = len(pieces)  # the template text that follows (end of turn, next role) is shared too
            position = match.end()
        pieces.append(self._special(rendered[position:], first=not any(pieces)))
        tokens = [t for piece in pieces for t in piece]
        shared_len = sum(len(p) for p in pieces[: shared_until + 1]) if shared_until is not None else 0
        return tokens + self._plain(prompt.prefix), shared_len

    def _defuse(self, text: str) -> str:
        for special in {self._bos_text, self._eos_text, "<|", "|>", "<s>", "</s>"} - {""}:
            text = text.replace(special, " ".join(special))
        return text

    def _special(self, text: str, *, first: bool) -> list[int]:
        """Template text: special tokens parsed; BOS added at the very start unless the template wrote it."""
        if not text:
            return []
        add_bos = first and not (self._bos_text and text.startswith(self._bos_text))
        return self._llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)

    def _plain(self, text: str) -> list[int]:
        """Untrusted text: never parsed for special tokens, no BOS."""
        if not text:
            return []
        return self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self._piece(token, special=True).decode("utf-8", "replace")

    def _piece(self, token: int, special: bool = False) -> bytes:
        # LlamaModel.token_to_piece returns its whole 32-byte buffer, NULs included; use the length.
        size = 64
        while True:
            buffer = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buffer, size, 0, special)
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
    @staticmethod
    def _common_prefix(tokens: Sequence[int], cached: Sequence[int]) -> int:
        n = 0
        for a, b in zip(tokens, cached):
            if a != b:
                break
            n += 1
        return n

    def _current_tokens(self) -> list[int]:
        return [int(t) for t in self._llm.input_ids[: self._llm.n_tokens]]

    def _evaluate_prompt(self, tokens: list[int], shared_len: int, scope: Scope, cancel: Cancel | None,
                         need_logits: bool = True) -> PromptUsage:
        """Bring the context to exactly `tokens`, evaluating only what a cached state the caller may reuse holds
        (`need_logits`: the last token is evaluated again if need be, so that its logits exist)."""
        check_cancel(cancel)
        current = self._current_tokens()
        keep_current = reusable(self._common_prefix(tokens, current), shared_len, scope, self._ctx_scope,
                                 self._ctx_shared)
        saved_key, saved_keep = self._best_saved(tokens, shared_len, scope)
        if saved_keep > keep_current + _MIN_PREFIX_TO_SAVE:
            # Take the state out first: remembering the current context may evict it.
            saved = self._saved.pop(saved_key)
            self._remember(current)
            restored = self._restore(saved_key, saved)
            keep_current = min(restored, saved_keep)
        elif len(current) - keep_current >= _MIN_PREFIX_TO_SAVE:
            self._remember(current)  # about to overwrite a long context another request may want back
        # Where logits are needed at least one token must be decoded so that fresh ones exist.
        keep = min(keep_current, len(tokens) - (1 if need_logits else 0))
        # A public shared prefix this context lacks: from disk, or written there once evaluated.
        on_disk = self._disk is not None and scope.shared == LOCAL.shared and shared_len >= _MIN_PREFIX_TO_SAVE
        write_at = 0
        if on_disk and keep < shared_len < len(tokens):
            restored = self._restore_from_disk(tokens[:shared_len])
            if restored:
                keep = restored
            else:  # no file, or a bad one (dropped, and the context with it): evaluate the prefix and write it
                keep = keep if restored is None else 0
                write_at = shared_len
        self._llm.n_tokens = keep
        self._ctx_scope, self._ctx_shared = scope, shared_len
        batch = max(1, self.settings.n_batch)
        try:
            position = keep
            for stop in ([write_at] if write_at > keep else []) + [len(tokens)]:
                for start in range(position, stop, batch):
                    check_cancel(cancel)
                    self._llm.eval(tokens[start:min(start + batch, stop)])
                position = stop
                if stop == write_at:
                    self._write_to_disk(tokens[:write_at])
        except CancelledError:
            self._ctx_scope, self._ctx_shared = scope, min(shared_len, self._llm.n_tokens)
            raise
        except Exception as exc:  # llama.cpp reports decode failures as plain exceptions
            self._llm.reset()
            self._ctx_scope = None
            raise EngineError(f"llama.cpp failed to evaluate the prompt: {exc}") from exc
        return PromptUsage(prompt_tokens=len(tokens), evaluated=len(tokens) - keep, reused=keep)

    def _best_saved(self, tokens: Sequence[int], shared_len: int, scope: Scope) -> tuple[tuple[int, ...], int]:
        best_key: tuple[int, ...] = ()
        best = 0
        for key, saved in self._saved.items():
            n = reusable(self._common_prefix(tokens, key), shared_len, scope, saved.scope, saved.shared_len)
            if n > best:
                best_key, best = key, n
        return best_key, best

    def _remember(self, current: list[int]) -> None:
        slots = self.settings.prefix_cache_slots
        if slots <= 0 or len(current) < _MIN_PREFIX_TO_SAVE or self._ctx_scope is None:
            return
        key = tuple(current)
        if key in self._saved:
            self._saved.move_to_end(key)
            return
        self._saved[key] = SavedState(self._seq_state(), self._ctx_scope, self._ctx_shared)
        while len(self._saved) > slots:
            self._saved.popitem(last=False)

    def _seq_state(self) -> bytes:
        ctx = self._llm._ctx.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(ctx, buffer, size, 0)
        return ctypes.string_at(buffer, written)  # bytes(buffer[:n]) costs 0.6 s per 3.6 MB

    def _write_to_disk(self, tokens: list[int]) -> None:
        if self._disk is not None and self._llm.n_tokens == len(tokens):
            self._disk.write(tokens, self._seq_state())

    def _restore_from_disk(self, tokens: list[int]) -> int | None:
        """Load a prefix's KV state from disk into sequence 0: its length, None when there is no file, and 0
        when the file did not load (it is removed; the context is then empty)."""
        data = self._disk.read(tokens) if self._disk is not None else None
        if data is None:
            return None
        restored = self._restore(tuple(tokens), SavedState(data, LOCAL, len(tokens)), keep_in_memory=False)
        if restored != len(tokens):
            self._disk.forget(tokens)  # type: ignore[union-attr]
            return 0
        return restored

    def _restore(self, key: tuple[int, ...], saved: SavedState, *, keep_in_memory: bool = True) -> int:
        """Load a saved KV state of sequence 0; returns how many tokens of context it restored."""
        # Llama.load_state assumes n_tokens <= n_batch when logits_all=False; restore seq 0 directly.
        buffer = (ctypes.c_uint8 * len(saved.data)).from_buffer_copy(saved.data)
        self._llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        if llama_cpp.llama_state_seq_set_data(self._llm._ctx.ctx, buffer, len(saved.data), 0) != len(saved.data):
            self._llm.n_tokens = 0
            return 0
        self._llm.input_ids[: len(key)] = key
        self._llm.n_tokens = len(key)
        if keep_in_memory:
            self._saved[key] = saved  # most recently used
        return len(key)

    # -- decoding ---------------------------------------------------------------------
    def _last_logits(self) -> np.ndarray:
        # With logits_all=False, llama-cpp-python no longer copies logits into Llama.scores;
        # the context still holds the last evaluated row.
        pointer = llama_cpp.llama_get_logits_ith(self._llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(self._vocab_size,)).copy()

    def _token_logprob(self, logprobs: np.ndarray, token: int, heal: bool) -> float:
        """The token's log-probability; healed (`score_candidates(heal_end=True)`): that of any token beginning
        with its text, when its text is punctuation only."""
        ids = self._continuations(token) if heal else None
        if ids is None:
            return float(logprobs[token])
        return float(np.logaddexp.reduce(logprobs[ids]))

    def _continuations(self, token: int) -> np.ndarray | None:
        """Ids of the vocabulary tokens whose text begins with this token's text (itself included), for a token
        that is punctuation only (`"` -> `"`, `",`, `"}`, ...); None for any other token."""
        if token in self._heal_cache:
            return self._heal_cache[token]
        text = self._piece(token)
        ids = None
        if text and not any(ch.isalnum() for ch in text.decode("utf-8", "replace")):
            if self._vocab_pieces is None:
                self._vocab_pieces = [self._piece(t) for t in range(self._vocab_size)]
            ids = np.fromiter((t for t, piece in enumerate(self._vocab_pieces) if piece.startswith(text)), dtype=np.int64)
        self._heal_cache[token] = ids
        return ids

    def _grammar(self, schema: dict[str, Any]) -> LlamaGrammar:
        key = json.dumps(schema)  # key order matters: the grammar writes keys in the schema's order
        if key in self._grammars:
            self._grammars.move_to_end(key)
            return self._grammars[key]
        try:
            grammar = LlamaGrammar.from_json_schema(key, verbose=False)
        except Exception as exc:  # the converter raises bare exceptions for unsupported schema parts
            raise GrammarError(f"JSON Schema cannot become a grammar ({exc}): simplify or fix the schema") from exc
        self._grammars[key] = grammar
        while len(self._grammars) > _GRAMMAR_CACHE:
            self._grammars.popitem(last=False)
        return grammar

    def compile_grammar(self, schema: dict[str, Any]) -> None:
        """Check that llama.cpp accepts the grammar of a schema (GrammarError if not); cached for later use."""
        with self._lock:  # the grammar cache is shared with generation
            grammar = self._grammar(schema)
        handle = self._grammar_sampler(grammar)
        llama_cpp.llama_sampler_free(handle)

    def check_grammar(self, schema: dict[str, Any]) -> None:
        """The engine-level grammar check: `check_grammar` below (model-free, so it never waits for a generation
        holding the engine's lock); GrammarError when the schema cannot be compiled."""
        check_grammar(schema)

    def _grammar_sampler(self, grammar: LlamaGrammar) -> Any:
        handle = llama_cpp.llama_sampler_init_grammar(self._vocab, grammar._grammar.encode("utf-8"),
                                                      grammar._root.encode("utf-8"))
        if not handle:  # llama.cpp returns NULL for a grammar it cannot parse
            raise GrammarError("llama.cpp rejected the grammar built from the schema: simplify the schema")
        return handle

    def _allowed_logits(self, handle: Any, logits: np.ndarray) -> np.ndarray:
        """The logits with every token the grammar forbids at this step set to -inf."""
        self._candidates.copy_logits(logits)
        llama_cpp.llama_sampler_apply(handle, ctypes.byref(self._candidates.candidates))
        return np.array(self._candidates.candidates_data.logit, dtype=np.float32)

    def _decode_loop(
        self, grammar: LlamaGrammar | None, budget: int, stop: Sequence[str], top_n: int, cancel: Cancel | None
    ) -> tuple[str, list[TokenLogprob], str]:
        handle = self._grammar_sampler(grammar) if grammar is not None else None
        out: list[TokenLogprob] = []
        raw = b""
        try:
            for _ in range(budget):
                check_cancel(cancel)
                logits = self._last_logits()
                raw_logprobs = _log_softmax(logits)
                if handle is not None:
                    allowed = self._allowed_logits(handle, logits)
                    finite = np.isfinite(allowed)
                    n_allowed = int(finite.sum())
                    if n_allowed == 0:
                        raise GrammarError("the grammar allows no token here: the schema cannot be completed")
                    logprobs = np.where(finite, allowed - _logsumexp(allowed[finite]), -np.inf)
                    forced = n_allowed == 1
                else:
                    logprobs, forced = raw_logprobs, False
                token = int(np.argmax(logprobs))
                if handle is not None:
                    llama_cpp.llama_sampler_accept(handle, token)
                if llama_cpp.llama_vocab_is_eog(self._vocab, token):
                    return raw.decode("utf-8", "ignore"), out, "stop"
                piece = self._piece(token)
                raw += piece
                out.append(TokenLogprob(piece.decode("utf-8", "replace"), float(logprobs[token]),
                                        self._top(logprobs, top_n), forced, float(raw_logprobs[token])))
                text = raw.decode("utf-8", "ignore")
                hit = next((s for s in stop if s and s in text), None)
                if hit is not None:
                    cut = text.index(hit)
                    return text[:cut], tokens_before(out, cut), "stop"
                self._llm.eval([token])
            return raw.decode("utf-8", "ignore"), out, "length"
        finally:
            if handle is not None:
                llama_cpp.llama_sampler_free(handle)

    def _top(self, logprobs: np.ndarray, n: int) -> tuple[tuple[str, float], ...]:
        if n <= 0:
            return ()
        n = min(n, len(logprobs) - 1)
        best = np.argpartition(-logprobs, n)[:n]
        best = best[np.argsort(-logprobs[best])]
        return tuple((self._token_text(int(t)), float(logprobs[t])) for t in best if np.isfinite(logprobs[t]))

    def close(self) -> None:
        with self._lock:
            self._saved.clear()
            self._llm.close()


def _logsumexp(values: np.ndarray) -> float:
    top = float(values.max())
    return top + float(np.log(np.exp(values - top).sum()))
