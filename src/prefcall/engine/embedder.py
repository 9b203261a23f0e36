"""sentence-transformers embedder over the packaged all-MiniLM-L6-v2, offline, loaded lazily once."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prefcall.engine.resolve import embedded_embedder_path
from prefcall.errors import ModelNotFoundError


class SentenceEmbedder:
    def __init__(self, model_dir: str | Path | None = None, batch_size: int = 64, threads: int | None = None) -> None:
        self._model_dir = Path(model_dir) if model_dir else None
        self._threads = threads
        self._batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return (self._model_dir or Path("all-MiniLM-L6-v2")).name

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                folder = self._model_dir or embedded_embedder_path()
                if not folder.is_dir():
                    raise ModelNotFoundError(f"embedder folder not found: {folder}: set PREFCALL_EMBEDDER")
                # Never reach for a hub: the weights ship inside a package.
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                import torch
                from sentence_transformers import SentenceTransformer

                if self._threads:
                    torch.set_num_threads(self._threads)

                self._model_dir = folder
                self._model = SentenceTransformer(str(folder), device="cpu")
            return self._model

    def load(self) -> SentenceEmbedder:
        self._load()
        return self

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        model = self._load()
        if not texts:
            return np.zeros((0, model.get_sentence_embedding_dimension()), dtype=np.float32)
        vectors = model.encode(
            list(texts), batch_size=self._batch_size, normalize_embeddings=True, convert_to_numpy=True,
            show_progress_bar=False,
        )
        return vectors.astype(np.float32, copy=False)
