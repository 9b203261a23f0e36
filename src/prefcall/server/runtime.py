"""Server runtime: dedicated worker threads and the once-only model loader.

Why dedicated threads instead of anyio's thread pool: SQLite connections (sqlite3 / sqlite-utils) may
only be used from the thread that opened them, and the HTTP transport runs the event loop in whatever
thread uvicorn owns. So every store lives on the "db" thread and everything that touches the model (and
the demonstration store the pipeline reads) lives on the "model" thread; the engine serialises model
calls anyway, so one model thread costs no throughput.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from prefcall.config import Settings
from prefcall.engine.base import Embedder, Engine
from prefcall.errors import EngineError, PrefcallError

log = logging.getLogger("prefcall.server")

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


ProgressFn = Callable[[float, str], Awaitable[None]]


class ModelLoader:
    """Loads the engine and embedder once, in the background; callers wait until they are ready.

    A threading.Event (not an anyio.Event) because the loader may be shared by several event loops
    (one per in-process client in tests, uvicorn's loop over HTTP).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        engine: Engine | None = None,
        embedder: Embedder | None = None,
        load_engine: Callable[[Settings], Engine] | None = None,
        load_embedder: Callable[[Settings], Embedder] | None = None,
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.embedder = embedder
        self._load_engine = load_engine
        self._load_embedder = load_embedder
        self._done = threading.Event()
        self._started = False
        self._lock = threading.Lock()
        self.error: PrefcallError | None = None
        self.stage = "waiting to start"
        self.seconds = 0.0
        if engine is not None and embedder is not None:
            self._done.set()
            self.stage = "ready"

    @property
    def ready(self) -> bool:
        return self._done.is_set() and self.error is None

    def start(self) -> None:
        """Start loading in a daemon thread (idempotent); returns at once."""
        with self._lock:
            if self._started or self._done.is_set():
                return
            self._started = True
        threading.Thread(target=self._load, name="prefcall-model-loader", daemon=True).start()

    def _load(self) -> None:
        started = time.perf_counter()
        try:
            if self.engine is None:
                self.stage = "loading the language model"
                log.info("loading the language model ...")
                self.engine = self._engine_loader()(self.settings)
                log.info("model ready: %s (%s)", self.engine.info.model_name, self.engine.info.backend)
            if self.embedder is None:
                self.stage = "loading the sentence embedder"
                self.embedder = self._embedder_loader()(self.settings)
                # The packaged embedder loads lazily; warm it here so the first request does not pay for it.
                self.embedder.embed(["warm up"])
            self.stage = "ready"
        except PrefcallError as exc:
            self.error = exc
            self.stage = "failed"
            log.error("model loading failed: %s", exc)
        except Exception as exc:  # noqa: BLE001 - any loader crash must become a tool error, not a dead server
            self.error = EngineError(f"model loading failed: {type(exc).__name__}: {exc}: check PREFCALL_MODEL")
            self.stage = "failed"
            log.exception("model loading failed")
        finally:
            self.seconds = time.perf_counter() - started
            self._done.set()

    def _engine_loader(self) -> Callable[[Settings], Engine]:
        if self._load_engine is not None:
            return self._load_engine
        from prefcall.engine import load_engine

        return load_engine

    def _embedder_loader(self) -> Callable[[Settings], Embedder]:
        if self._load_embedder is not None:
            return self._load_embedder
        from prefcall.engine import load_embedder

        return load_embedder

    async def wait(self, progress: ProgressFn | None = None) -> tuple[Engine, Embedder]:
        """Block (asynchronously) until loaded; report progress while waiting; raise the load error."""
        self.start()
        waited = 0.0
        while not self._done.is_set():
            if progress is not None:
                await progress(waited, f"prefcall is {self.stage} ...")
            await asyncio.sleep(0.25)
            waited += 0.25
        if self.error is not None:
            raise self.error
        assert self.engine is not None and self.embedder is not None
        return self.engine, self.embedder
