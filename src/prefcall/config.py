"""The one settings object. Every option reads from an environment variable with the PREFCALL_ prefix."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic import ValidationError as PydanticValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from prefcall.errors import ConfigError


def default_data_dir() -> Path:
    """Where profiles and demonstrations live: $XDG_DATA_HOME/prefcall or ~/.local/share/prefcall."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "prefcall"


class Settings(BaseSettings):
    """prefcall configuration; `PREFCALL_MODEL=/path/model.gguf` and so on."""

    model_config = SettingsConfigDict(env_prefix="PREFCALL_", extra="ignore")

    # A reference, not only a path: /path/model.gguf, hf:ORG/REPO/FILE.gguf[@REV], ollama:NAME[:TAG],
    # lmstudio:PUBLISHER/REPO/FILE.gguf or a catalogue name (prefcall model list); see engine/references.py.
    model: str | None = Field(default=None, description="GGUF model reference; default: the embedded SmolLM2-135M-Instruct")

    @field_validator("model", mode="before")
    @classmethod
    def _model_path_as_reference(cls, value: object) -> object:
        """A path object is a reference like any other (a file path)."""
        return os.fspath(value) if isinstance(value, os.PathLike) else value
    lmstudio_dir: Path | None = Field(default=None, description="LM Studio models folder; default: ~/.lmstudio/models")
    model_dirs: str | None = Field(default=None, description="more folders of .gguf files for `prefcall model list`, "
                                                            "separated by os.pathsep (':' on Linux and macOS)")
    # Where the model runs: unset or "llama-cpp" loads the GGUF in-process; KIND:URL uses a served engine,
    # e.g. llama-server:http://127.0.0.1:8080, vllm:http://gpu:8000, sglang:URL, openai:URL (LM Studio and other
    # OpenAI-compatible servers), llama-cpp-python:URL, ollama:http://127.0.0.1:11434#llama3.2 (#model optional).
    engine: str | None = Field(default=None, description="llama-cpp (in-process) or KIND:URL[#model] of a served engine")
    engine_model: str | None = Field(default=None, description="model name a served engine needs (Ollama, vLLM, ...)")
    engine_api_key: SecretStr | None = Field(default=None, description="bearer token for the served engine")
    engine_api_key_env: str | None = Field(default=None, description="name of another variable holding that token")
    engine_timeout_s: float = Field(default=120.0, gt=0, description="read timeout per served-engine request")
    engine_connect_timeout_s: float = Field(default=5.0, gt=0, description="connect timeout to the served engine")
    engine_retries: int = Field(default=4, ge=0, description="retries on HTTP 429/503 and refused connections")
    engine_pool: int = Field(default=16, ge=1, description="HTTP connections to the served engine (its queue depth)")
    engine_chat_template: str | None = Field(
        default=None, description="Jinja chat template (text or file) for served engines that do not expose theirs")
    engine_pin_slots: bool = Field(default=True, description="llama-server: keep each user on one slot (id_slot)")
    engine_cache_secret: SecretStr | None = Field(
        default=None, description="vLLM: secret mixed into per-user cache_salt (same value on every replica)")
    n_gpu_layers: int = Field(default=0, description="layers to offload to CUDA/Metal; -1 offloads all")
    n_ctx: int = Field(default=4096, ge=256, description="context window in tokens")
    n_batch: int = Field(default=512, ge=8, description="prompt evaluation batch size")
    # Default: llama.cpp's choice, half the logical cores. Its thread barriers spin, so asking for more
    # threads than there are free cores slows generation several-fold (9x measured on 2 busy cores). All the cores
    # of an idle 2-core machine without hyper-threads were 1.46x faster per token, but a test that runs beside one
    # other busy process took minutes instead of seconds with them: the default stays on the safe side.
    n_threads: int | None = Field(default=None, ge=1, description="CPU threads; default: half the logical cores")
    n_threads_batch: int | None = Field(default=None, ge=1, description="threads for prompt evaluation; default: all cores")
    seed: int = 0
    prefix_cache_slots: int = Field(default=4, ge=0, description="saved KV states of shared prompt prefixes")
    prefix_disk_mb: int = Field(default=256, ge=0, description="disk kept for KV states of public prompt prefixes "
                                                               "(DATA_DIR/kv), so a restart skips them; 0: off")
    # One torch thread: a query is a few dozen tokens, and more threads contend with llama.cpp's (1.1 s vs 81 ms measured).
    embedder_threads: int = Field(default=1, ge=1, description="BLAS / torch threads for the sentence embedder")
    embedder: str | None = Field(default=None, description="sentence-transformers model dir; default: packaged all-MiniLM-L6-v2")
    embedder_backend: Literal["auto", "numpy", "sentence-transformers"] = Field(
        default="auto", description="auto: numpy for mean-pooled BERT folders (no torch import), else sentence-transformers")
    data_dir: Path = Field(default_factory=default_data_dir)
    db_path: Path | None = Field(default=None, description="SQLite file; default: DATA_DIR/prefcall.db")
    verbose: bool = False
    # MCP server (prefcall serve)
    # Limits (README "Limits"): every violation is a LimitError naming the limit and its setting.
    max_dialogue_chars: int = Field(default=20_000, ge=100, description="longest dialogue a server tool accepts, "
                                                                     "counting turn texts and call arguments (JSON)")
    max_dialogue_turns: int = Field(default=200, ge=1, description="most turns in one dialogue")
    max_tools: int = Field(default=1000, ge=1, description="most tools in one catalogue or tool list")
    shortlist_size: int | None = Field(default=None, ge=1, description="tools a large catalogue (over 32) is "
                                       "shortlisted to for a model-scored prompt (NLT score mode, stage 1, clarify); "
                                       "default: the size `prefcall fit --shortlist` fitted for the embedder")
    max_schema_bytes: int = Field(default=65_536, ge=256, description="largest argument schema of one tool, in bytes "
                                                                      "of JSON after $ref expansion")
    # 3 MiB: a catalogue at the limit still fits the MCP SDK's 4 MiB HTTP request body with its JSON-RPC envelope.
    max_catalogue_bytes: int = Field(default=3_145_728, ge=1024, description="largest catalogue, in bytes of JSON")
    max_description_chars: int = Field(default=8_000, ge=100, description="longest tool or catalogue description")
    max_enum_values: int = Field(default=1_000, ge=1, description="most values in one enum")
    max_ref_depth: int = Field(default=32, ge=1, description="deepest chain of nested $ref expansions")
    max_feedback_bytes: int = Field(default=65_536, ge=1024, description="largest report_feedback (dialogue, "
                                                                         "instructions and calls), in bytes of JSON")
    conversation_limit: int = Field(default=1_000, ge=1, description="conversations whose state prefcall keeps for "
                                    "parse_request's conversation_id (in memory; the least recently used goes first)")
    conversation_ttl_s: float = Field(default=3_600.0, gt=0, description="seconds a kept conversation's state lives "
                                                                        "after its last turn")
    max_instructions: int = Field(default=1_000, ge=1, description="most standing instructions per user")
    max_instruction_chars: int = Field(default=2_000, ge=10, description="longest standing instruction")
    tokens: str | None = Field(default=None, description="HTTP bearer tokens as 'token:user_id,token2:user2'")
    tokens_file: Path | None = Field(default=None, description="file with one 'token:user_id' per line (HTTP)")
    # The model queue (prefcall serve): the model runs one request at a time; the rest wait, shared fairly.
    queue_size: int = Field(default=32, ge=1, description="requests that may wait for the model; more are refused "
                                                          "with a one-line 'busy ... retry in ~N s' error")
    queue_per_user: int = Field(default=4, ge=1, description="requests one user may have waiting or running")
    model_retry_s: float = Field(default=10.0, ge=0, description="back-off before loading a model that failed "
                                                                 "again (doubles per failure, up to 5 min)")

    def database_path(self) -> Path:
        return self.db_path or self.data_dir / "prefcall.db"

    def engine_token(self) -> str | None:
        """The served engine's API key: PREFCALL_ENGINE_API_KEY, else the variable PREFCALL_ENGINE_API_KEY_ENV names."""
        if self.engine_api_key is not None and self.engine_api_key.get_secret_value():
            return self.engine_api_key.get_secret_value()
        if self.engine_api_key_env:
            return os.environ.get(self.engine_api_key_env) or None
        return None


def settings_error(exc: PydanticValidationError) -> ConfigError | None:
    """One line naming the setting, for a validation error of `Settings` (None for any other model's error).

    pydantic-settings raises the same error whether the value came from a PREFCALL_ variable or from a
    command-line flag that overrides it; the line names the variable (the flags' help names it too)."""
    if exc.title != Settings.__name__:
        return None
    errors = exc.errors()
    first = errors[0]
    field = str(first["loc"][0]) if first["loc"] else ""
    name = f"PREFCALL_{field.upper()}" if field else "a PREFCALL_ setting"
    value = first.get("input")
    shown = "" if isinstance(value, dict | list) or value is None else f"={str(value)[:60]!s}"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return ConfigError(f"invalid setting {name}{shown}: {first['msg']}{more}: fix it or unset it")
