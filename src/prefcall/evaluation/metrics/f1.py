"""Precision, recall and F1: the one place every metric computes them.

Convention (one for every metric): nothing predicted and nothing expected is a perfect answer (1, 1, 1);
otherwise an empty side scores 0 and F1 is the harmonic mean. Per-item ("macro") and summed ("micro")
figures both come from `prf` on counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable


def prf(tp: float, n_pred: float, n_gold: float) -> tuple[float, float, float]:
    """(precision, recall, F1) from true positives and the sizes of the predicted and gold sets."""
    if not n_pred and not n_gold:
        return 1.0, 1.0, 1.0
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def set_prf(predicted: set, gold: set) -> tuple[float, float, float]:
    """P/R/F1 of two sets (one example)."""
    return prf(len(predicted & gold), len(predicted), len(gold))


def multiset_counts(predicted: Iterable[Hashable], gold: Iterable[Hashable]) -> tuple[int, int, int]:
    """(tp, n_pred, n_gold) of two multisets: a repeated item counts as often as it occurs on both sides."""
    pred, want = Counter(predicted), Counter(gold)
    return sum((pred & want).values()), sum(pred.values()), sum(want.values())


def micro_prf(counts: Iterable[tuple[float, float, float]]) -> tuple[float, float, float]:
    """P/R/F1 of summed (tp, n_pred, n_gold) counts."""
    tp = n_pred = n_gold = 0.0
    for a, b, c in counts:
        tp, n_pred, n_gold = tp + a, n_pred + b, n_gold + c
    return prf(tp, n_pred, n_gold)
