"""Embeddings of texts that recur across requests (a catalogue's tool texts), cached per embedder and text.

A catalogue's tools are embedded once; only the request is embedded per call. The cache holds floats only (never a
model), keyed by the embedder's name and the SHA-256 of the text, and drops the least recently used past `size`.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from prefcall.engine.base import Embedder


class TextVectors:
    """Unit vectors of texts per embedder name and text hash (least recently used dropped past `size`)."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _key(embedder: Embedder, text: str) -> tuple[str, str]:
        return embedder.name, hashlib.sha256(text.encode("utf-8")).hexdigest()

    def get(self, embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
        """Rows in the order of `texts`; only the texts not cached are embedded (in one batch)."""
        keys = [self._key(embedder, t) for t in texts]
        with self._lock:
            known = {k: self._vectors[k] for k in keys if k in self._vectors}
        missing = list(dict.fromkeys(t for k, t in zip(keys, texts) if k not in known))
        if missing:
            vectors = np.asarray(embedder.embed(missing), dtype=np.float32)
            known.update({self._key(embedder, t): v for t, v in zip(missing, vectors)})
        with self._lock:
            for key in keys:
                self._vectors[key] = known[key]
                self._vectors.move_to_end(key)
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)
        if not keys:
            return np.zeros((0, 1), dtype=np.float32)
        return np.stack([known[k] for k in keys])

    def clear(self) -> None:
        with self._lock:
            self._vectors.clear()


# Floats only (no model is held): the tool texts of the catalogues seen, shared by NLT, stage 1's shortlist and the
# relevance check, so one catalogue is embedded once per embedder.
TOOL_VECTORS = TextVectors()
