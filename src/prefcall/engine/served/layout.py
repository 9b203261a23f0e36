"""Prompt layout for the served engines: chat templates and the text between messages.

The chat template is rendered with a placeholder per message (by the backend where it can render, else
client-side with sandboxed Jinja); the text between placeholders is the template's own, the placeholders stand
for untrusted contents. A backend then tokenizes the pieces apart (token-id prompts) or sends one string whose
contents were *defused*: every role marker the template uses and every `<|...|>`, `<tag>` or `[TAG]`-shaped
marker is broken up so that it cannot parse as a control token.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefcall.engine.base import Prompt, fold_system
from prefcall.errors import ConfigError, MissingCapabilityError

_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


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
        folded = self.merge_system and bool(prompt.messages) and prompt.messages[0].role == "system"
        # Folded, the system text shares a turn with the user's: nothing before the user's words is shared.
        return fold_system(prompt, self.merge_system), 0 if folded else prompt.shared

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
