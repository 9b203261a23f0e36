"""`ModelLoader`: the engine and embedder of one process, each loaded once, on first use or in the background.

The evaluation harness reads `loader.engine` / `loader.embedder` when a task first needs them (metric-only
runs never load a model); the MCP server calls `start()` when it starts and `await wait()` in tools, so that
tools/list answers at once while the model loads. Both paths share the same once-only, thread-safe loading.
A threading lock and Event (not anyio's) because a loader may be shared by several event loops (one per
in-process client in tests, uvicorn's loop over HTTP).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable

import prefcall.engine as engines
from prefcall.config import Settings
from prefcall.engine.base import Embedder, Engine
from prefcall.errors import EngineError, PrefcallError

log = logging.getLogger("prefcall.engine")

ProgressFn = Callable[[float, str], Awaitable[None]]


class ModelLoader:
    """Injected models are used as given; missing ones are built by `load_engine` / `load_embedder`
    (default: `prefcall.engine.load_engine` / `load_embedder`, looked up when needed)."""

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
        self._engine = engine
        self._embedder = embedder
        self._load_engine = load_engine
        self._load_embedder = load_embedder
        self._engine_lock = threading.Lock()
        self._embedder_lock = threading.Lock()
        self._done = threading.Event()
        self._started = False
        self._start_lock = threading.Lock()
        self.error: PrefcallError | None = None
        self.stage = "waiting to start"
        self.seconds = 0.0
        if engine is not None and embedder is not None:
            self._done.set()
            self.stage = "ready"

    # -- on first use ----------------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        """The engine, loaded now if it is not yet (blocks while a background load is running)."""
        with self._engine_lock:
            if self._engine is None:
                self.stage = "loading the language model"
                log.info("loading the language model ...")
                loader = self._load_engine or engines.load_engine
                self._engine = loader(self.settings)
                log.info("model ready: %s (%s)", self._engine.info.model_name, self._engine.info.backend)
            return self._engine

    @property
    def embedder(self) -> Embedder:
        """The sentence embedder, loaded now if it is not yet."""
        with self._embedder_lock:
            if self._embedder is None:
                self.stage = "loading the sentence embedder"
                loader = self._load_embedder or engines.load_embedder
                self._embedder = loader(self.settings)
            return self._embedder

    # -- in the background -----------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self._done.is_set() and self.error is None

    def start(self) -> None:
        """Load both in a daemon thread (idempotent); returns at once."""
        with self._start_lock:
            if self._started or self._done.is_set():
                return
            self._started = True
        threading.Thread(target=self._load_both, name="prefcall-model-loader", daemon=True).start()

    def _load_both(self) -> None:
        started = time.perf_counter()
        try:
            self.engine  # noqa: B018 - loads it
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

    async def wait(self, progress: ProgressFn | None = None) -> tuple[Engine, Embedder]:
        """Start the background load if needed, wait (asynchronously, reporting progress) and return both;
        raise the load error."""
        self.start()
        waited = 0.0
        while not self._done.is_set():
            if progress is not None:
                await progress(waited, f"prefcall is {self.stage} ...")
            await asyncio.sleep(0.25)
            waited += 0.25
        if self.error is not None:
            raise self.error
        return self.engine, self.embedder
