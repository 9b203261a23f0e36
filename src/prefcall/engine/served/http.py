"""The served engines' HTTP client.

One `httpx.Client` per engine, thread-safe, with a connection pool sized to the model queue
(`PREFCALL_ENGINE_POOL`), timeouts, and retries with exponential backoff and jitter on HTTP 429/503 and refused
connections (never on a read timeout: the request may be running). No lock is held around a request:
concurrency is the backend's job (its slots, batches and replicas).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from prefcall.config import Settings
from prefcall.engine.base import Cancel, check_cancel
from prefcall.errors import (
    BackendError,
    BackendTimeoutError,
    BackendUnavailableError,
    ContextOverflowError,
)

RETRY_STATUS = (429, 503)


class HttpClient:
    """A pooled, retrying JSON client for one backend; every failure becomes a typed one-line error."""

    def __init__(self, backend: str, base_url: str, settings: Settings, *,
                 transport: httpx.BaseTransport | None = None, sleep: Callable[[float], None] = time.sleep,
                 backoff_base_s: float = 0.5, backoff_cap_s: float = 8.0) -> None:
        self.backend = backend
        self.base_url = base_url.rstrip("/")
        self.retries = settings.engine_retries
        self.timeout_s = settings.engine_timeout_s
        self._sleep = sleep
        self._backoff_base = backoff_base_s
        self._backoff_cap = backoff_cap_s
        headers = {"Accept": "application/json"}
        token = settings.engine_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        pool = settings.engine_pool
        self.client = httpx.Client(
            base_url=self.base_url, headers=headers, transport=transport,
            timeout=httpx.Timeout(settings.engine_timeout_s, connect=settings.engine_connect_timeout_s),
            limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool),
        )
        self.requests = 0  # sent, retries included (tests and the bench read it)

    @property
    def where(self) -> str:
        return f"{self.backend} at {self.base_url}"

    def close(self) -> None:
        self.client.close()

    def get(self, path: str, *, cancel: Cancel | None = None) -> Any:
        return self.request("GET", path, None, cancel=cancel)

    def post(self, path: str, body: dict[str, Any], *, cancel: Cancel | None = None) -> Any:
        return self.request("POST", path, body, cancel=cancel)

    def _attempt(self, attempt: int, path: str, cancel: Cancel | None, send: Callable[[], Any]) -> Any:
        """One try of `send()`: its result, None when a refused connection is worth another try (after the
        backoff), else the failure as a one-line typed error."""
        check_cancel(cancel)
        try:
            self.requests += 1
            return send()
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            if attempt < self.retries:
                self._backoff(attempt, None, cancel)
                return None
            raise BackendUnavailableError(f"{self.where} is not reachable ({_short(exc)}): start it or fix "
                                          "PREFCALL_ENGINE") from exc
        except httpx.TimeoutException as exc:
            raise BackendTimeoutError(f"{self.where} did not answer {path} within {self.timeout_s:g} s: raise "
                                      "PREFCALL_ENGINE_TIMEOUT_S or check the server's load") from exc
        except httpx.RemoteProtocolError as exc:
            # The server closed a kept-alive connection before answering (llama-server drops idle ones): nothing
            # was answered, so the request goes again at once, on a new connection.
            if attempt < self.retries:
                return None
            raise BackendError(f"{self.where} failed on {path} ({_short(exc)}): check the server") from exc
        except httpx.HTTPError as exc:
            raise BackendError(f"{self.where} failed on {path} ({_short(exc)}): check the server") from exc

    def request(self, method: str, path: str, body: dict[str, Any] | None, *, cancel: Cancel | None = None) -> Any:
        for attempt in range(self.retries + 1):
            response = self._attempt(attempt, path, cancel, lambda: self.client.request(
                method, path, content=_dumps(body) if body is not None else None,
                headers={"Content-Type": "application/json"} if body is not None else None))
            if response is None:
                continue
            if response.status_code in RETRY_STATUS and attempt < self.retries:
                self._backoff(attempt, response.headers.get("Retry-After"), cancel)
                continue
            self._raise_for_status(response.status_code, response.text, path)
            try:
                return response.json()
            except ValueError as exc:
                raise BackendError(f"{self.where} answered {path} with something that is not JSON: check the URL "
                                   "and the engine kind in PREFCALL_ENGINE") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    @contextmanager
    def stream(self, path: str, body: dict[str, Any], *, cancel: Cancel | None = None,
               ndjson: bool = False) -> Iterator[Iterator[dict[str, Any]]]:
        """POST and yield the events of a server-sent-events (or NDJSON) stream; cancel closes the connection."""
        for attempt in range(self.retries + 1):
            def open_stream() -> tuple[Any, Any]:
                context = self.client.stream("POST", path, content=_dumps(body),
                                             headers={"Content-Type": "application/json"})
                return context, context.__enter__()

            opened = self._attempt(attempt, path, cancel, open_stream)
            if opened is None:
                continue
            context, response = opened
            try:
                if response.status_code != 200:
                    text = response.read().decode("utf-8", "replace")
                    if response.status_code in RETRY_STATUS and attempt < self.retries:
                        retry_after = response.headers.get("Retry-After")
                        context.__exit__(None, None, None)
                        context = None
                        self._backoff(attempt, retry_after, cancel)
                        continue
                    self._raise_for_status(response.status_code, text, path)
                yield self._events(response, path, cancel, ndjson)
                return
            except httpx.TimeoutException as exc:
                raise BackendTimeoutError(f"{self.where} stopped sending {path} for {self.timeout_s:g} s: raise "
                                          "PREFCALL_ENGINE_TIMEOUT_S or check the server's load") from exc
            except httpx.HTTPError as exc:
                raise BackendError(f"{self.where} broke off {path} ({_short(exc)}): check the server") from exc
            finally:
                if context is not None:
                    context.__exit__(None, None, None)

    def _events(self, response: httpx.Response, path: str, cancel: Cancel | None,
                ndjson: bool) -> Iterator[dict[str, Any]]:
        for line in response.iter_lines():
            check_cancel(cancel)  # leaving the loop closes the response: the server sees the client go
            line = line.strip()
            if not line or line.startswith(":"):
                continue
            if not ndjson:
                if not line.startswith("data:"):
                    continue  # event:, id:, retry: lines
                line = line[5:].strip()
                if line == "[DONE]":
                    return
            try:
                event = json.loads(line)
            except ValueError as exc:
                raise BackendError(f"{self.where} sent an unreadable stream event on {path}: {line[:80]!r}") from exc
            if isinstance(event, dict) and event.get("error"):
                raise BackendError(f"{self.where} failed during {path}: {_error_message(event)}")
            yield event
        check_cancel(cancel)

    def _backoff(self, attempt: int, retry_after: str | None, cancel: Cancel | None) -> None:
        """Exponential backoff with full jitter; a Retry-After header (seconds) wins, within the cap."""
        delay = min(self._backoff_cap, self._backoff_base * 2 ** attempt) * (0.5 + random.random() / 2)
        if retry_after:
            try:
                delay = min(self._backoff_cap, max(0.0, float(retry_after)))
            except ValueError:
                pass
        deadline = time.monotonic() + delay
        self._sleep_interruptibly(delay, deadline, cancel)

    def _sleep_interruptibly(self, delay: float, deadline: float, cancel: Cancel | None) -> None:
        if self._sleep is not time.sleep:  # tests inject a fake clock
            check_cancel(cancel)
            self._sleep(delay)
            return
        while True:
            check_cancel(cancel)
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.1))

    def _raise_for_status(self, status: int, text: str, path: str) -> None:
        if status < 300:
            return
        message = _error_message(_maybe_json(text)) or text[:200]
        lowered = message.lower()
        if status in (401, 403):
            raise BackendError(f"{self.where} refused the request (HTTP {status}): set PREFCALL_ENGINE_API_KEY")
        if status in RETRY_STATUS:
            raise BackendUnavailableError(f"{self.where} stayed busy or loading (HTTP {status}) through "
                                          f"{self.retries} retries: try later or add capacity")
        if status == 404:
            raise BackendError(f"{self.where} has no {path} (HTTP 404: {message[:120]}): check the engine kind in "
                               "PREFCALL_ENGINE and the server's version")
        if "context" in lowered and any(w in lowered for w in ("exceed", "too long", "maximum", "length")):
            raise ContextOverflowError(f"{self.where} says the prompt does not fit ({message[:160]}): shorten the "
                                       "dialogue or serve a longer context")
        raise BackendError(f"{self.where} rejected {path} (HTTP {status}: {message[:200]})")


def _dumps(body: dict[str, Any]) -> bytes:
    # Never sort keys: the order of a JSON Schema's properties is the order grammar-constrained JSON writes them.
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _maybe_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _error_message(payload: Any) -> str:
    if isinstance(payload, dict):
        error = payload.get("error", payload.get("detail", payload.get("message")))
        if isinstance(error, dict):
            return str(error.get("message") or error)
        if isinstance(error, list):
            return "; ".join(str(e.get("msg", e)) if isinstance(e, dict) else str(e) for e in error)
        if error is not None:
            return str(error)
    return str(payload) if payload else ""


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:160] or type(exc).__name__
