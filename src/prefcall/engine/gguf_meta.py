"""Read a GGUF file's header (metadata and tensor table) without loading its weights.

Only the key/value section and the tensor infos are read; arrays (the tokenizer's vocabulary, tens of
thousands of strings) are skipped over and kept as a length. A truncated or damaged file gives what was
read plus an error string instead of raising: `prefcall model list` shows it in the row.

Format (GGUF v2/v3, little-endian; big-endian files are detected by their version field):
magic "GGUF", uint32 version, uint64 tensor_count, uint64 kv_count, then kv_count times
(string key, uint32 type, value), then tensor_count times (string name, uint32 n_dims, uint64 dims[n_dims],
uint32 ggml type, uint64 offset), padding to `general.alignment`, then the tensor data.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

GGUF_MAGIC = b"GGUF"

# GGUF value types -> struct format (scalars); 8 = string, 9 = array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_MAX_STRING = 64 * 1024 * 1024  # a longer string means a damaged file
_MAX_COUNT = 1 << 31
_KEEP_ARRAY = 16  # arrays up to this length are kept; longer ones become ArraySummary

# llama.cpp's LLAMA_FTYPE values (general.file_type) -> the names quantisation tools print.
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
    37: "TQ2_0", 38: "MXFP4_MOE",
}

# ggml tensor types -> (elements per block, bytes per block), to find where the data should end.
_TENSOR_TYPES = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 36),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
    16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82),
    23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2),
    34: (256, 54), 35: (256, 66), 39: (32, 17),
}


class GGUFFormatError(ValueError):
    """The bytes are not a readable GGUF header."""


@dataclass(frozen=True)
class ArraySummary:
    """A long array (e.g. the vocabulary), kept as its element type and length."""

    type: int
    length: int


@dataclass
class GGUFInfo:
    path: str
    size: int = 0
    version: int | None = None
    tensor_count: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    n_params: int | None = None  # from the tensor table
    data_end: int | None = None  # where the last tensor ends, when every tensor type is known
    error: str | None = None

    # -- what prefcall shows and uses ---------------------------------------------------
    @property
    def architecture(self) -> str | None:
        value = self.metadata.get("general.architecture")
        return str(value) if value is not None else None

    @property
    def name(self) -> str | None:
        value = self.metadata.get("general.name")
        return str(value) if value is not None else None

    def arch_value(self, key: str) -> Any:
        return self.metadata.get(f"{self.architecture}.{key}") if self.architecture else None

    @property
    def context_length(self) -> int | None:
        return _int(self.arch_value("context_length"))

    @property
    def block_count(self) -> int | None:
        return _int(self.arch_value("block_count"))

    @property
    def file_type(self) -> int | None:
        return _int(self.metadata.get("general.file_type"))

    @property
    def quantisation(self) -> str | None:
        ftype = self.file_type
        if ftype is None:
            return None
        return FILE_TYPES.get(ftype & ~1024, f"type {ftype}")  # 1024: llama.cpp's "guessed" flag

    @property
    def chat_template(self) -> str | None:
        value = self.metadata.get("tokenizer.chat_template")
        return value if isinstance(value, str) and value.strip() else None

    @property
    def has_chat_template(self) -> bool:
        return self.chat_template is not None

    @property
    def truncated(self) -> bool:
        return self.data_end is not None and self.size < self.data_end

    def kv_bytes_per_token(self, bytes_per_value: int = 2) -> int | None:
        """K and V cache bytes for one token of context (f16 cache), from the attention shape."""
        layers = self.block_count
        heads = _int(self.arch_value("attention.head_count"))
        kv_heads = _int(self.arch_value("attention.head_count_kv")) or heads
        embed = _int(self.arch_value("embedding_length"))
        if not (layers and heads and kv_heads and embed):
            return None
        key_len = _int(self.arch_value("attention.key_length")) or embed // heads
        value_len = _int(self.arch_value("attention.value_length")) or embed // heads
        return layers * kv_heads * (key_len + value_len) * bytes_per_value

    def summary(self) -> dict[str, Any]:
        return {
            "architecture": self.architecture,
            "name": self.name,
            "quantisation": self.quantisation,
            "context_length": self.context_length,
            "layers": self.block_count,
            "params": self.n_params,
            "chat_template": self.has_chat_template,
            "size": self.size,
            "error": self.error,
        }


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class _Reader:
    def __init__(self, handle: BinaryIO, endian: str) -> None:
        self.handle = handle
        self.endian = endian

    def take(self, n: int) -> bytes:
        data = self.handle.read(n)
        if len(data) != n:
            raise EOFError(f"file ends at byte {self.handle.tell()} inside the header")
        return data

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(self.endian + fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        length = self.scalar("Q")
        if length > _MAX_STRING:
            raise GGUFFormatError(f"string of {length} bytes at byte {self.handle.tell()}: damaged header")
        return self.take(length).decode("utf-8", "replace")

    def skip_string(self) -> None:
        length = self.scalar("Q")
        if length > _MAX_STRING:
            raise GGUFFormatError(f"string of {length} bytes at byte {self.handle.tell()}: damaged header")
        self.handle.seek(length, 1)

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item_kind = self.scalar("I")
            count = self.scalar("Q")
            if count > _MAX_COUNT:
                raise GGUFFormatError(f"array of {count} items: damaged header")
            if count <= _KEEP_ARRAY:
                return [self.value(item_kind) for _ in range(count)]
            self.skip_array(item_kind, count)
            return ArraySummary(item_kind, count)
        raise GGUFFormatError(f"unknown value type {kind} at byte {self.handle.tell()}")

    def skip_array(self, kind: int, count: int) -> None:
        if kind in _SCALARS:
            self.handle.seek(struct.calcsize(_SCALARS[kind]) * count, 1)
        elif kind == _STRING:
            for _ in range(count):
                self.skip_string()
        else:
            for _ in range(count):
                self.value(kind)


def read_gguf_info(path: str | Path) -> GGUFInfo:
    """The header of a GGUF file; never raises for a bad file (see `error`)."""
    path = Path(path)
    info = GGUFInfo(path=str(path))
    try:
        info.size = path.stat().st_size
        with path.open("rb") as raw:
            _read(raw, info)
    except (OSError, EOFError, GGUFFormatError, struct.error, UnicodeDecodeError) as exc:
        info.error = f"{type(exc).__name__ if isinstance(exc, OSError) else 'unreadable'}: {exc}"
    else:
        if info.truncated:
            info.error = f"truncated: {info.size} of {info.data_end} bytes (an interrupted download?)"
    return info


def _read(raw: BinaryIO, info: GGUFInfo) -> None:
    handle = _buffered(raw)
    if handle.read(4) != GGUF_MAGIC:
        raise GGUFFormatError("not a GGUF file (no GGUF magic)")
    (version,) = struct.unpack("<I", handle.read(4) or b"\0\0\0\0")
    endian = "<"
    if version > 0xFFFF:  # written big-endian
        endian = ">"
        version = struct.unpack(">I", struct.pack("<I", version))[0]
    info.version = version
    if version < 2:
        raise GGUFFormatError(f"GGUF version {version} is too old for llama.cpp: convert the model again")
    reader = _Reader(handle, endian)
    info.tensor_count = reader.scalar("Q")
    kv_count = reader.scalar("Q")
    if info.tensor_count > _MAX_COUNT or kv_count > _MAX_COUNT:
        raise GGUFFormatError("implausible tensor or key count: damaged header")
    for _ in range(kv_count):
        key = reader.string()
        info.metadata[key] = reader.value(reader.scalar("I"))
    _read_tensors(reader, info)


def _read_tensors(reader: _Reader, info: GGUFInfo) -> None:
    params, end, known = 0, 0, True
    for _ in range(info.tensor_count or 0):
        reader.skip_string()
        n_dims = reader.scalar("I")
        if n_dims > 8:
            raise GGUFFormatError(f"tensor with {n_dims} dimensions: damaged header")
        elements = 1
        for _ in range(n_dims):
            elements *= reader.scalar("Q")
        kind = reader.scalar("I")
        offset = reader.scalar("Q")
        params += elements
        block = _TENSOR_TYPES.get(kind)
        if block is None:
            known = False
        else:
            end = max(end, offset + elements // block[0] * block[1])
    info.n_params = params
    if known:
        alignment = _int(info.metadata.get("general.alignment")) or 32
        start = reader.handle.tell()
        start += (-start) % alignment
        info.data_end = start + end


def _buffered(raw: BinaryIO) -> BinaryIO:
    import io

    return raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(raw)  # type: ignore[arg-type]


def format_size(n_bytes: int | None) -> str:
    if n_bytes is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.2f} {unit}" if unit == "GB" else f"{n_bytes / scale:.0f} {unit}"
    return f"{n_bytes} B"


def format_params(n: int | None) -> str:
    if not n:
        return "?"
    if n >= 1e9:
        return f"{n / 1e9:.1f}B"
    return f"{n / 1e6:.0f}M" if n >= 1e6 else f"{n / 1e3:.0f}k" if n >= 1e3 else str(n)
