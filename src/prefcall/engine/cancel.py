"""Request cancellation that reaches the engine without every strategy passing it along.

The server runs each model job under `bind_cancel(event)` on its model thread (`prefcall.server.runtime`);
`CancelBound` (the engine the `ModelLoader` hands out) adds that event to every `generate` /
`score_candidates` call, so an engine stops between tokens once the client has gone away. Outside a bound
job (evaluation, the CLI) nothing changes: there is no ambient cancellation.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from prefcall.engine.base import Cancel, CandidateScores, Engine, Generation, Prompt, score_batch

_current: ContextVar[Cancel | None] = ContextVar("prefcall_cancel", default=None)


@contextmanager
def bind_cancel(cancel: Cancel | None) -> Iterator[None]:
    """Model calls made inside this block (in this thread / context) stop when `cancel` is set."""
    token = _current.set(cancel)
    try:
        yield
    finally:
        _current.reset(token)


def current_cancel() -> Cancel | None:
    return _current.get()


class AnyCancel:
    """Set when any of its parts is set."""

    def __init__(self, *parts: Cancel) -> None:
        self.parts = parts

    def is_set(self) -> bool:
        return any(part.is_set() for part in self.parts)


def with_ambient(cancel: Cancel | None) -> Cancel | None:
    ambient = _current.get()
    if ambient is None or ambient is cancel:
        return cancel
    return ambient if cancel is None else AnyCancel(cancel, ambient)


class CancelBound:
    """An engine whose model calls also honour the ambient cancellation (`bind_cancel`); all else delegates."""

    def __init__(self, engine: Engine) -> None:
        self.inner = engine

    def generate(self, prompt: Prompt, *, cancel: Cancel | None = None, **kwargs: Any) -> Generation:
        return self.inner.generate(prompt, cancel=with_ambient(cancel), **kwargs)

    def score_candidates(self, prompt: Prompt, candidates: Sequence[str], *, cancel: Cancel | None = None,
                         **kwargs: Any) -> CandidateScores:
        return self.inner.score_candidates(prompt, candidates, cancel=with_ambient(cancel), **kwargs)

    def score_batch(self, requests: Sequence[tuple[Prompt, Sequence[str]]], *, cancel: Cancel | None = None,
                    **kwargs: Any) -> list[CandidateScores]:
        return score_batch(self.inner, requests, cancel=with_ambient(cancel), **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def cancel_bound(engine: Engine) -> Engine:
    return engine if isinstance(engine, CancelBound) else CancelBound(engine)  # type: ignore[return-value]
