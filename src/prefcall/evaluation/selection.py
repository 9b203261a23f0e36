"""Instruction selection scored against NLSI's gold `applicable_standing_instructions` (`prefcall profile
evaluate-selection`): micro precision / recall / F1 and exact-set accuracy, no language model involved."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from prefcall.engine.base import Embedder
from prefcall.evaluation.metrics.f1 import prf
from prefcall.schemas.model import Catalogue, Turn
from prefcall.schemas.registry import builtin_catalogue
from prefcall.strategies.selection import SelectionConfig, select_instructions


def evaluate_selection(
    items: Sequence[dict[str, Any]],
    embedder: Embedder | None,
    catalogue: Catalogue | None = None,
    *,
    config: SelectionConfig | None = None,
) -> dict[str, Any]:
    """Micro precision/recall/F1 and exact-set accuracy against NLSI `applicable_standing_instructions`."""
    if catalogue is None:
        catalogue = builtin_catalogue("nlsi")
    tp = fp = fn = exact = 0
    started = time.perf_counter()
    for item in items:
        result = select_instructions(
            nlsi_dialogue(item["user_utterance"]), item["all_standing_instructions"], catalogue, embedder, config=config
        )
        predicted = set(result.selected_texts)
        gold = set(item["applicable_standing_instructions"])
        tp += len(predicted & gold)
        fp += len(predicted - gold)
        fn += len(gold - predicted)
        exact += predicted == gold
    n = len(items)
    precision, recall, f1 = prf(tp, tp + fp, tp + fn)
    return {
        "items": n,
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "f1": round(f1, 4),
        "exact_match": round(exact / n, 4) if n else 0.0,
        "embedder": getattr(embedder, "name", None) if embedder is not None else None,
        "seconds": round(time.perf_counter() - started, 2),
    }


def nlsi_dialogue(user_utterance: str) -> list[Turn]:
    """NLSI's `user_utterance` is a transcript ("User: ...\\nAgent: ..."); split it into turns."""
    turns = []
    for line in user_utterance.splitlines():
        role, _, content = line.partition(":")
        role = role.strip().lower()
        if role in ("user", "agent", "assistant", "system") and content:
            turns.append(Turn(role="user" if role == "user" else "assistant", content=content.strip()))
        elif turns:
            turns[-1].content += "\n" + line
        elif line.strip():
            turns.append(Turn(role="user", content=line.strip()))
    return turns


def load_items(path: str, limit: int | None = None) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        items = json.load(handle)
    return items[:limit] if limit else items
