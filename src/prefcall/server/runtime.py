"""Server runtime: dedicated worker threads (the models come from `prefcall.engine.loader.ModelLoader`).

Why dedicated threads instead of anyio's thread pool: SQLite connections (sqlite3 / sqlite-utils) may
only be used from the thread that opened them, and the HTTP transport runs the event loop in whatever
thread uvicorn owns. So every store lives on the "db" thread and everything that touches the model (and
the demonstration store the pipeline reads) lives on the "model" thread; the engine serialises model
calls anyway, so one model thread costs no throughput.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class Worker:
    """One named thread; `await worker.call(fn, *args)` runs fn there without blocking the event loop."""

    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        future = self._executor.submit(fn, *args, **kwargs)
        return await asyncio.wrap_future(future)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
