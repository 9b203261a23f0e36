"""The sentence embedder over the packaged all-MiniLM-L6-v2 (or PREFCALL_EMBEDDER's folder), offline, loaded
lazily once. A mean-pooled BERT folder runs on numpy (`engine.bert_numpy`: no torch import, which was most of a
cold start); any other folder, or PREFCALL_EMBEDDER_BACKEND=sentence-transformers, runs on sentence-transformers."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from prefcall.engine import bert_numpy
from prefcall.engine.embedded import embedded_embedder_path
from prefcall.errors import ModelNotFoundError

EmbedderBackend = Literal["auto", "numpy", "sentence-transformers"]


class SentenceEmbedder:
    def __init__(self, model_dir: str | Path | None = None, batch_size: int = 16, threads: int | None = None,
                 backend: EmbedderBackend = "auto") -> None:
        self._model_dir = Path(model_dir) if model_dir else None
        self._packaged = model_dir is None
        self._threads = threads
        self._batch_size = batch_size
        self._backend = backend
        self._model: Any = None
        self._numpy: bert_numpy.NumpyBertEncoder | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """The model folder's name; the packaged default is "all-MiniLM-L6-v2" before and after loading."""
        return "all-MiniLM-L6-v2" if self._packaged or self._model_dir is None else self._model_dir.name

    @property
    def backend(self) -> str:
        """What runs the model once loaded: "numpy" or "sentence-transformers" ("" before loading)."""
        return "numpy" if self._numpy is not None else "sentence-transformers" if self._model is not None else ""

    def _load(self) -> Any:
        with self._lock:
            if self._model is None and self._numpy is None:
                folder = self._model_dir or embedded_embedder_path()
                if not folder.is_dir():
                    raise ModelNotFoundError(f"embedder folder not found: {folder}: set PREFCALL_EMBEDDER")
                if self._backend != "sentence-transformers" and bert_numpy.supports(folder):
                    self._model_dir = folder
                    self._numpy = bert_numpy.NumpyBertEncoder(folder)
                    return self._numpy
                if self._backend == "numpy":
                    raise ModelNotFoundError(f"{folder} is not a mean-pooled BERT sentence-transformers folder: "
                                             "set PREFCALL_EMBEDDER_BACKEND=sentence-transformers")
                # Never reach for a hub: the weights ship inside a package.
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                import torch
                from sentence_transformers import SentenceTransformer

                if self._threads:
                    torch.set_num_threads(self._threads)

                self._model_dir = folder
                self._model = SentenceTransformer(str(folder), device="cpu")
            return self._numpy if self._numpy is not None else self._model

    def load(self) -> SentenceEmbedder:
        self._load()
        return self

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        model = self._load()
        if isinstance(model, bert_numpy.NumpyBertEncoder):
            from threadpoolctl import threadpool_limits

            # BLAS threads beyond the free cores contend with llama.cpp's (5x slower measured on 2 busy cores).
            with threadpool_limits(limits=self._threads or 1, user_api="blas"):
                return model.encode(list(texts), batch_size=self._batch_size)
        if not texts:
            return np.zeros((0, model.get_sentence_embedding_dimension()), dtype=np.float32)
        vectors = model.encode(
            list(texts), batch_size=self._batch_size, normalize_embeddings=True, convert_to_numpy=True,
            show_progress_bar=False,
        )
        return vectors.astype(np.float32, copy=False)
