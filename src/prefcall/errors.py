"""Typed errors. Every message is one line and says what to do next."""

from __future__ import annotations


class PrefcallError(Exception):
    """Base class: a one-line, actionable message."""

    def __init__(self, message: str) -> None:
        # One line only: hosts show this verbatim to the user.
        super().__init__(" ".join(str(message).split()))


class ConfigError(PrefcallError):
    """A setting is missing or invalid."""


class ModelNotFoundError(ConfigError):
    """The model file does not exist."""


class InvalidModelError(ConfigError):
    """The file exists but is not a loadable GGUF model."""


class EngineError(PrefcallError):
    """The model failed while running."""


class ContextOverflowError(EngineError):
    """A prompt does not fit in the model's context window."""


class GrammarError(EngineError):
    """A JSON Schema could not be turned into a grammar."""


class ParseError(PrefcallError):
    """Model output could not be parsed into the expected structure."""


class ValidationError(PrefcallError):
    """Input or a generated call does not conform to its schema."""


class LimitError(ValidationError):
    """An input is over one of the documented limits (README "Limits"); the message names the limit and its setting."""

    def __init__(self, what: str, limit: int, setting: str) -> None:
        self.limit = limit
        self.setting = setting if setting.startswith("PREFCALL_") else f"PREFCALL_{setting.upper()}"
        super().__init__(f"{what}; the limit is {limit} ({self.setting})")


class NotFoundError(PrefcallError):
    """A named user, instruction or catalogue does not exist."""


class StoreError(PrefcallError):
    """The profile or demonstration store failed."""


class CancelledError(EngineError):
    """The request was cancelled before the model finished (the client went away)."""


class BackendError(EngineError):
    """A served engine (llama-server, vLLM, Ollama, ...) answered with an error or something unreadable."""


class BackendUnavailableError(BackendError):
    """A served engine could not be reached, or stayed busy (HTTP 429/503) through every retry."""


class BackendTimeoutError(BackendError):
    """A served engine did not answer within the configured timeout."""


class MissingCapabilityError(EngineError):
    """The engine lacks a feature a caller needs and has no documented fallback for it."""


class DownloadError(PrefcallError):
    """A model download failed (hub unreachable, offline mode, file or repository not found)."""


class IntegrityError(PrefcallError):
    """A file's SHA-256 does not match the hub's LFS hash or prefcall's pin; it was not installed."""


class BusyError(PrefcallError):
    """The model queue is full (or the caller already holds their share of it): retry later."""

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
