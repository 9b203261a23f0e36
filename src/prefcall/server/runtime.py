"""Server runtime: the db worker thread and the model queue (the models come from `prefcall.engine.loader`).

Why dedicated threads instead of anyio's thread pool: SQLite connections (sqlite3 / sqlite-utils) may
only be used from the thread that opened them, and the HTTP transport runs the event loop in whatever
thread uvicorn owns. So every store lives on the "db" thread and everything that touches the model (and
the demonstration store the pipeline reads) lives on the "model" thread; the engine serialises model
calls anyway, so one model thread costs no throughput.

`ModelQueue` is the model thread with a fair, bounded queue in front of it:

- one job runs at a time; at most `size` wait (PREFCALL_QUEUE_SIZE), and one user holds at most `per_user`
  places, running included (PREFCALL_QUEUE_PER_USER). Past either bound the call fails at once with a
  one-line `BusyError` ("busy: the model queue is full (N waiting); retry in ~S s").
- waiting jobs are served round-robin between users (one job of each waiting user in turn), so one user's
  burst does not starve the others.
- a job whose caller goes away (the MCP request is cancelled, the HTTP client disconnects: the awaiting
  task is cancelled) leaves the queue if it is waiting, or has its cancel event set if it is running;
  the engine checks that event between tokens (`prefcall.engine.cancel`) and stops.

The user of a job is the bearer token's user over HTTP and "local" on stdio / in-process.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from prefcall.engine.cancel import bind_cancel
from prefcall.errors import BusyError

T = TypeVar("T")

log = logging.getLogger("prefcall.server")

LOCAL_USER = "local"


class Worker:
    """One named thread; `await worker.call(fn, *args)` runs fn there without blocking the event loop."""

    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        future = self._executor.submit(fn, *args, **kwargs)
        return await asyncio.wrap_future(future)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def request_user() -> str:
    """Whose job this is: the bearer token's user over HTTP, else the one local user."""
    from prefcall.server.auth import current_user

    return current_user() or LOCAL_USER


@dataclass(eq=False)
class Job:
    user: str
    fn: Callable[[], Any]
    future: Future = field(default_factory=Future)
    cancel: threading.Event = field(default_factory=threading.Event)
    state: str = "waiting"  # waiting -> running -> done; or waiting -> dropped


class ModelQueue:
    """The model thread behind a bounded, per-user-fair queue (see the module docstring)."""

    def __init__(self, name: str = "prefcall-model", *, size: int = 32, per_user: int = 4,
                 user_of: Callable[[], str] = request_user, first_estimate_s: float = 2.0) -> None:
        if size < 1 or per_user < 1:
            raise ValueError("queue size and per-user share must be at least 1")
        self.size = size
        self.per_user = per_user
        self._user_of = user_of
        self._lock = threading.Condition()
        self._waiting: OrderedDict[str, deque[Job]] = OrderedDict()  # users in round-robin order
        self._held: dict[str, int] = {}  # waiting + running jobs per user
        self._running: Job | None = None
        self._closed = False
        self._job_s = first_estimate_s  # moving average of a job's duration, for the retry hint
        self.served = 0
        self.refused = 0
        self.cancelled = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)  # started by the first job

    # -- what callers see --------------------------------------------------------------------------
    @property
    def waiting(self) -> int:
        with self._lock:
            return sum(len(jobs) for jobs in self._waiting.values())

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"waiting": {u: len(j) for u, j in self._waiting.items()},
                    "running": self._running.user if self._running else None,
                    "served": self.served, "refused": self.refused, "cancelled": self.cancelled}

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run fn(*args, **kwargs) on the model thread when the queue reaches it; BusyError when full."""
        job = self.submit(self._user_of(), lambda: fn(*args, **kwargs))
        try:
            return await asyncio.wrap_future(job.future)
        except BaseException:
            # Cancelled while waiting (wrap_future may have cancelled the future already) or running; a job
            # that finished with its own exception needs nothing.
            if job.future.cancelled() or not job.future.done():
                self.abandon(job)
            raise

    def submit(self, user: str, fn: Callable[[], Any]) -> Job:
        with self._lock:
            if self._closed:
                raise BusyError("busy: the server is shutting down; retry in ~5 s", retry_after_s=5)
            waiting = sum(len(jobs) for jobs in self._waiting.values())
            held = self._held.get(user, 0)
            if held >= self.per_user:
                self.refused += 1
                retry = self._retry_after(waiting)
                raise BusyError(f"busy: you already have {held} requests for the model in the queue "
                                f"(PREFCALL_QUEUE_PER_USER={self.per_user}); retry in ~{retry} s", retry_after_s=retry)
            if waiting >= self.size:
                self.refused += 1
                retry = self._retry_after(waiting)
                raise BusyError(f"busy: the model queue is full ({waiting} waiting); retry in ~{retry} s",
                                retry_after_s=retry)
            if not self._thread.is_alive() and self._thread.ident is None:
                self._thread.start()
            job = Job(user=user, fn=fn)
            self._waiting.setdefault(user, deque()).append(job)
            self._held[user] = held + 1
            self._lock.notify_all()
            return job

    def abandon(self, job: Job) -> None:
        """The caller went away: drop the job if it waits, stop it (between tokens) if it runs."""
        with self._lock:
            if job.state == "waiting":
                jobs = self._waiting.get(job.user)
                if jobs is not None and job in jobs:
                    jobs.remove(job)
                    if not jobs:
                        del self._waiting[job.user]
                job.state = "dropped"
                self._release(job.user)
                self.cancelled += 1
                job.future.cancel()
            elif job.state == "running":
                job.cancel.set()
                self.cancelled += 1

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            for jobs in self._waiting.values():
                for job in jobs:
                    job.state = "dropped"
                    job.future.cancel()
            self._waiting.clear()
            self._held.clear()
            if self._running is not None:
                self._running.cancel.set()
            self._lock.notify_all()

    # -- the model thread --------------------------------------------------------------------------
    def _retry_after(self, waiting: int) -> int:
        return max(1, math.ceil(self._job_s * (waiting + 1)))

    def _release(self, user: str) -> None:
        left = self._held.get(user, 0) - 1
        if left > 0:
            self._held[user] = left
        else:
            self._held.pop(user, None)

    def _next(self) -> Job | None:
        """The next job, round-robin: the first waiting user's oldest job; that user then goes to the back."""
        with self._lock:
            while not self._waiting and not self._closed:
                self._lock.wait()
            if self._closed:
                return None
            user, jobs = next(iter(self._waiting.items()))
            job = jobs.popleft()
            del self._waiting[user]
            if jobs:
                self._waiting[user] = jobs  # re-inserted at the end: the other users go first
            job.state = "running"
            self._running = job
            return job

    def _run(self) -> None:
        while (job := self._next()) is not None:
            started = time.perf_counter()
            if job.future.set_running_or_notify_cancel():
                try:
                    with bind_cancel(job.cancel):
                        result = job.fn()
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    job.future.set_exception(exc)
                else:
                    job.future.set_result(result)
            elapsed = time.perf_counter() - started
            with self._lock:
                job.state = "done"
                self._running = None
                self._release(job.user)
                self.served += 1
                self._job_s = 0.8 * self._job_s + 0.2 * elapsed
