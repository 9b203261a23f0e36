"""`ModelLoader`: the engine and embedder of one process, each loaded once, on first use or in the background.

The evaluation harness reads `loader.engine` / `loader.embedder` when a task first needs them (metric-only
runs never load a model); the MCP server calls `start()` when it starts and `await wait()` in tools, so that
tools/list answers at once while the model loads. Both paths share the same once-only, thread-safe loading.
A threading lock and Event (not anyio's) because a loader may be shared by several event loops (one per
in-process client in tests, uvicorn's loop over HTTP).

A failed load is not final: the next `wait()` (a tool call) or `poll()` (/healthz) loads again once the
back-off has passed (PREFCALL_MODEL_RETRY_S, doubling per failure up to `MAX_BACKOFF_S`), or at once when the
model file changed (its size or modification time), so fixing the file or the setting needs no restart.

The engine handed out is `CancelBound`: model calls made inside a server model job stop between tokens when
that job's client goes away (`prefcall.engine.cancel`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Hashable
from pathlib import Path

import prefcall.engine as engines
from prefcall.config import Settings
from prefcall.engine.base import Embedder, Engine
from prefcall.engine.cancel import cancel_bound
from prefcall.errors import EngineError, PrefcallError

log = logging.getLogger("prefcall.engine")

ProgressFn = Callable[[float, str], Awaitable[None]]

MAX_BACKOFF_S = 300.0


def model_file_signature(settings: Settings) -> Hashable:
    """(path, size, mtime) of the model file the settings name; None for served engines or when not resolvable.

    A missing file has a signature too (path, None, None), so that the file appearing counts as a change."""
    from prefcall.engine.served import parse_engine_spec

    try:
        if parse_engine_spec(settings.engine, settings.engine_model) is not None:
            return None
        if settings.model:
            from prefcall.engine.references import resolve_reference

            path = resolve_reference(settings.model).path
        else:
            from prefcall.engine.embedded import embedded_model_path

            path = embedded_model_path()
    except Exception:  # noqa: BLE001 - an unresolvable reference has no file to watch; the back-off still applies
        return None
    return file_signature(path)


def file_signature(path: str | Path) -> tuple[str, int | None, int | None]:
    """(path, size, mtime in ns) of a model file; size and mtime are None while it does not exist."""
    try:
        stat = Path(path).stat()
    except OSError:
        return (str(path), None, None)
    return (str(path), stat.st_size, stat.st_mtime_ns)


def as_prefcall_error(exc: BaseException) -> PrefcallError:
    if isinstance(exc, PrefcallError):
        return exc
    return EngineError(f"model loading failed: {type(exc).__name__}: {exc}: check PREFCALL_MODEL")


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
        signature: Callable[[Settings], Hashable] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._engine = cancel_bound(engine) if engine is not None else None
        self._embedder = embedder
        self._load_engine = load_engine
        self._load_embedder = load_embedder
        self._signature = signature or model_file_signature
        self._clock = clock
        self._engine_lock = threading.Lock()
        self._embedder_lock = threading.Lock()
        self._done = threading.Event()
        self._started = False
        self._start_lock = threading.Lock()
        self.error: PrefcallError | None = None
        self.stage = "waiting to start"
        self.seconds = 0.0
        self.failures = 0  # consecutive failed loads
        self._failed_at = 0.0
        self._attempt_signature: Hashable = None
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
                try:
                    loaded = loader(self.settings)
                except Exception as exc:  # noqa: BLE001 - every load failure is one line naming what to fix
                    raise as_prefcall_error(exc) from exc
                self._engine = cancel_bound(loaded)
                log.info("model ready: %s (%s)", loaded.info.model_name, loaded.info.backend)
            return self._engine

    @property
    def embedder(self) -> Embedder:
        """The sentence embedder, loaded now if it is not yet."""
        with self._embedder_lock:
            if self._embedder is None:
                self.stage = "loading the sentence embedder"
                loader = self._load_embedder or engines.load_embedder
                try:
                    self._embedder = loader(self.settings)
                except Exception as exc:  # noqa: BLE001
                    raise as_prefcall_error(exc) from exc
            return self._embedder

    # -- in the background -----------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self._done.is_set() and self.error is None

    def backoff_s(self) -> float:
        """How long after the last failure the next attempt is due (0 before any failure)."""
        if not self.failures:
            return 0.0
        return min(MAX_BACKOFF_S, self.settings.model_retry_s * 2 ** (self.failures - 1))

    def retry_in_s(self) -> float:
        return max(0.0, self._failed_at + self.backoff_s() - self._clock())

    def start(self) -> None:
        """Load both in a daemon thread (idempotent); returns at once."""
        with self._start_lock:
            if self._started or self._done.is_set():
                return
            self._started = True
            self._attempt_signature = self._signature(self.settings)
        threading.Thread(target=self._load_both, name="prefcall-model-loader", daemon=True).start()

    def poll(self) -> bool:
        """Start loading if it has not started, or again if the last load failed and a retry is due (back-off
        passed or the model file changed). Returns at once; True when the models are ready."""
        with self._start_lock:
            if self._done.is_set() and self.error is not None:
                changed = self._signature(self.settings) != self._attempt_signature
                if changed or self.retry_in_s() <= 0:
                    log.info("retrying the model load (%s)", "the model file changed" if changed else "back-off over")
                    self.error = None
                    self.stage = "waiting to start"
                    self._started = False
                    self._done.clear()
        self.start()
        return self.ready

    def _load_both(self) -> None:
        started = time.perf_counter()
        # The embedder (importing torch is most of a cold start) loads beside the language model, not after it.
        embedder_error: list[BaseException] = []

        def warm_embedder() -> None:
            try:
                # The packaged embedder loads lazily; warm it here so the first request does not pay for it.
                self.embedder.embed(["warm up"])
            except BaseException as exc:  # noqa: BLE001 - reported by the loading thread below
                embedder_error.append(exc)

        side = threading.Thread(target=warm_embedder, name="prefcall-embedder-loader", daemon=True)
        side.start()
        try:
            try:
                self.engine  # noqa: B018 - loads it
            finally:
                side.join()
            if embedder_error:
                raise embedder_error[0]
            self.stage = "ready"
            self.failures = 0
        except Exception as exc:  # noqa: BLE001 - any loader crash must become a tool error, not a dead server
            self.error = as_prefcall_error(exc)
            self.stage = "failed"
            self.failures += 1
            self._failed_at = self._clock()
            if isinstance(exc, PrefcallError):
                log.error("model loading failed: %s", exc)
            else:
                log.exception("model loading failed")
        finally:
            self.seconds = time.perf_counter() - started
            self._done.set()

    def _failure(self, error: PrefcallError) -> PrefcallError:
        """The load error, saying when the next attempt is due."""
        hint = (f"prefcall loads it again on a call after ~{max(1, round(self.retry_in_s()))} s, "
                "or at once when the model file changes")
        try:
            again = type(error)(f"{error} ({hint})")
        except Exception:  # noqa: BLE001 - an error type with another signature: keep the original
            return error
        again.__cause__ = error
        return again

    async def wait(self, progress: ProgressFn | None = None) -> tuple[Engine, Embedder]:
        """Start the background load (or a due retry), wait (asynchronously, reporting progress) and return
        both; raise the load error, saying when the next attempt is due."""
        waited = 0.0
        while True:
            self.poll()
            while not self._done.is_set():
                if progress is not None:
                    await progress(waited, f"prefcall is {self.stage} ...")
                await asyncio.sleep(0.25)
                waited += 0.25
            with self._start_lock:
                if not self._done.is_set():  # a retry started between the two checks: wait for it
                    continue
                error = self.error
                if error is None and self._engine is not None and self._embedder is not None:
                    return self._engine, self._embedder
            if error is not None:
                raise self._failure(error)
            return self.engine, self.embedder
