"""Saved KV states of the in-process engine: one in memory (`SavedState`), and public shared prefixes on disk
(`PrefixDisk`), so a restarted server does not evaluate them again."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prefcall.engine.base import Scope


@dataclass
class SavedState:
    """A saved KV state of sequence 0: its tokens, bytes, and whose text it holds."""

    data: bytes
    scope: Scope
    shared_len: int


class PrefixDisk:
    """KV states of public shared prompt prefixes on disk: DATA_DIR/kv/<model stamp>/<token hash>.kv.

    Only prefixes every caller may read (`Scope.shared == "public"`: prefcall's own prompts and built-in
    catalogues) are written, never a user's text or a private catalogue. One file per prefix, named by the hash of
    its tokens and of the model file (path, size, mtime) and llama.cpp version, so another model or build never
    reads it. Writes are atomic; a file that does not load is ignored and removed. The folder is kept under
    `limit_bytes` by removing the least recently used files (a read touches its file)."""

    def __init__(self, folder: Path, stamp: Sequence[Any], limit_bytes: int) -> None:
        digest = hashlib.sha256(json.dumps(list(stamp), default=str).encode("utf-8")).hexdigest()[:16]
        self.folder = folder / digest
        self.limit_bytes = limit_bytes

    def path(self, tokens: Sequence[int]) -> Path:
        digest = hashlib.sha256(np.asarray(tokens, dtype=np.int64).tobytes()).hexdigest()[:32]
        return self.folder / f"{digest}.kv"

    def read(self, tokens: Sequence[int]) -> bytes | None:
        path = self.path(tokens)
        try:
            data = path.read_bytes()
            os.utime(path)
        except OSError:
            return None
        return data or None

    def write(self, tokens: Sequence[int], data: bytes) -> None:
        if len(data) > self.limit_bytes:
            return
        path = self.path(tokens)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
            self._trim()
        except OSError:
            pass  # a read-only or full data folder: evaluate the prefix again next start

    def forget(self, tokens: Sequence[int]) -> None:
        try:
            self.path(tokens).unlink()
        except OSError:
            pass

    def _trim(self) -> None:
        files = []
        for path in self.folder.glob("*.kv"):
            try:
                stat = path.stat()
            except OSError:
                continue
            files.append((stat.st_mtime_ns, stat.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.limit_bytes:
                break
            try:
                path.unlink()
                total -= size
            except OSError:
                pass
