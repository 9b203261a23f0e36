"""A BERT sentence encoder in numpy: the packaged all-MiniLM-L6-v2 without importing torch.

Why our own: the stdio restart to the first parse_request took 17.7 s against a 5 s target (`prefcall bench
--only server`), and loading the embedder through sentence-transformers (importing torch and transformers) took
12.5-17 s to its first vector on the busy 2-core machine, against 0.7-1.4 s here (docs/results-history.md); the model is six
small BERT layers. This module computes exactly what
sentence-transformers computes for such a folder (modules Transformer -> mean Pooling -> Normalize): the
HF `tokenizers` tokenizer truncated to `max_seq_length`, BERT with absolute positions and exact-erf GELU,
mean over the attention mask, L2 norm. The test `test_embedder.py` compares it with sentence-transformers.

Folders it cannot run (another architecture, another pooling) are reported by `supports`; the caller then
uses sentence-transformers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
import numpy as np

from prefcall.errors import ModelNotFoundError


def supports(folder: Path) -> bool:
    """A BERT encoder with absolute positions, mean pooling (with or without Normalize), weights in safetensors."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        pooling_path = next(m["path"] for m in modules if m["type"].endswith(".Pooling"))
        pooling = json.loads((folder / pooling_path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, StopIteration):
        return False
    kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
    modes = {k for k, v in pooling.items() if k.startswith("pooling_mode") and v}
    return (config.get("model_type") == "bert" and config.get("position_embedding_type", "absolute") == "absolute"
            and config.get("hidden_act") == "gelu" and kinds in (["Transformer", "Pooling"],
                                                                  ["Transformer", "Pooling", "Normalize"])
            and modes == {"pooling_mode_mean_tokens"} and (folder / "model.safetensors").is_file()
            and (folder / "tokenizer.json").is_file())


def _erf(x: np.ndarray) -> np.ndarray:
    """erf by Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7, under float32 noise); numpy has none."""
    a = np.abs(x)
    t = 1.0 / (1.0 + np.float32(0.3275911) * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.copysign(1.0 - poly * np.exp(-a * a), x).astype(np.float32, copy=False)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


class NumpyBertEncoder:
    """Sentence vectors from a sentence-transformers BERT folder (see `supports`), float32, L2-normalised."""

    def __init__(self, folder: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        if not supports(folder):
            raise ModelNotFoundError(f"{folder} is not a mean-pooled BERT sentence-transformers folder: "
                                     "use sentence-transformers for it")
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        st_config_path = folder / "sentence_bert_config.json"
        st_config = json.loads(st_config_path.read_text(encoding="utf-8")) if st_config_path.exists() else {}
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        self.normalize = any(m["type"].endswith(".Normalize") for m in modules)
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.dim = int(config["hidden_size"])
        self.max_length = min(int(st_config.get("max_seq_length") or config["max_position_embeddings"]),
                              int(config["max_position_embeddings"]))
        weights = load_file(str(folder / "model.safetensors"))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        self.w: dict[str, np.ndarray] = {k[len(prefix):]: v.astype(np.float32, copy=False)
                                         for k, v in weights.items() if k.startswith(prefix)}
        # Dense weights transposed once (x @ W.T as one contiguous 2-D BLAS call); query, key and value fused.
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            names = [p + f"attention.self.{n}" for n in ("query", "key", "value")]
            self.w[p + "qkv.weight"] = np.ascontiguousarray(np.concatenate([self.w[n + ".weight"] for n in names]).T)
            self.w[p + "qkv.bias"] = np.concatenate([self.w[n + ".bias"] for n in names])
            for name in ("attention.output.dense", "intermediate.dense", "output.dense"):
                self.w[p + name + ".weight"] = np.ascontiguousarray(self.w[p + name + ".weight"].T)
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_length)
        self.tokenizer.enable_padding(pad_id=int(config.get("pad_token_id", 0)))
        self.do_lower_case = bool(st_config.get("do_lower_case", False))

    def _layer(self, h: np.ndarray, mask_bias: np.ndarray, i: int) -> np.ndarray:
        w = self.w
        p = f"encoder.layer.{i}."
        batch, length, dim = h.shape
        head_dim = dim // self.heads

        def proj(name: str, x: np.ndarray) -> np.ndarray:
            flat = x.reshape(batch * length, x.shape[-1]) @ w[p + name + ".weight"] + w[p + name + ".bias"]
            return flat.reshape(batch, length, -1)

        qkv = proj("qkv", h).reshape(batch, length, 3, self.heads, head_dim).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_dim) + mask_bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, dim)
        h = _layer_norm(proj("attention.output.dense", context) + h, w[p + "attention.output.LayerNorm.weight"],
                        w[p + "attention.output.LayerNorm.bias"], self.eps)
        inner = _gelu(proj("intermediate.dense", h))
        return _layer_norm(proj("output.dense", inner) + h, w[p + "output.LayerNorm.weight"],
                           w[p + "output.LayerNorm.bias"], self.eps)

    def encode(self, texts: Sequence[str], batch_size: int = 16) -> np.ndarray:
        """Texts batched by length (little padding), vectors returned in the input order."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            out[chunk] = self._encode_batch([texts[i] for i in chunk])
        return out

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch([t.lower() if self.do_lower_case else t for t in texts])
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        w = self.w
        positions = np.arange(ids.shape[1])
        h = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][positions]
             + w["embeddings.token_type_embeddings.weight"][types])
        h = _layer_norm(h, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        mask_bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]
        for i in range(self.layers):
            h = self._layer(h, mask_bias, i)
        pooled = (h * mask[:, :, None]).sum(1) / np.clip(mask.sum(1, keepdims=True), 1e-9, None)
        if self.normalize:
            pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return pooled.astype(np.float32, copy=False)

