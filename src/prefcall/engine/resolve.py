"""Find the model file: a reference (path, hf:, ollama:, lmstudio:, catalogue name) or the embedded default."""

from __future__ import annotations

from pathlib import Path

from prefcall.engine.embedded import embedded_model_path
from prefcall.engine.references import resolve_reference
from prefcall.errors import InvalidModelError, ModelNotFoundError

GGUF_MAGIC = b"GGUF"


def check_gguf(path: Path) -> Path:
    """Fail early, with one line, on a missing file or one that is not GGUF."""
    if not path.exists():
        raise ModelNotFoundError(
            f"model file not found: {path}: set PREFCALL_MODEL or pass --model (a path or a reference: prefcall model list)"
        )
    if not path.is_file():
        raise InvalidModelError(f"model path is not a file: {path}: point PREFCALL_MODEL at a .gguf file")
    with path.open("rb") as handle:
        magic = handle.read(4)
    if magic != GGUF_MAGIC:
        raise InvalidModelError(f"not a GGUF model file: {path}: download a .gguf model or unset PREFCALL_MODEL")
    from prefcall.engine.gguf_meta import read_gguf_info

    header = read_gguf_info(path)  # the header only (a fraction of a second); other oddities are llama.cpp's to judge
    if header.truncated:
        raise InvalidModelError(
            f"model file is truncated: {path} has {header.size} of {header.data_end} bytes (an interrupted download?): "
            "download it again (prefcall model pull ... --force, or your tool's pull)"
        )
    return path


def resolve_model_path(explicit: str | Path | None) -> Path:
    """explicit (from --model or PREFCALL_MODEL via Settings) wins; else the embedded SmolLM2.

    `explicit` is a model reference (engine/references.py): a path, hf:ORG/REPO/FILE.gguf[@REV],
    ollama:NAME[:TAG], lmstudio:PUBLISHER/REPO/FILE.gguf or a catalogue name. Nothing is downloaded here."""
    if explicit:
        return check_gguf(resolve_reference(explicit).path)
    return check_gguf(embedded_model_path())
