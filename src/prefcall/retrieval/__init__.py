"""Retrieval shared by strategies: hybrid BM25 + embedding search (FC-ICL demonstrations, instruction selection)."""

from prefcall.retrieval.hybrid import BM25Index, DenseIndex, Hit, HybridIndex, top_indices
from prefcall.retrieval.text import tokenize

__all__ = ["BM25Index", "DenseIndex", "Hit", "HybridIndex", "tokenize", "top_indices"]
