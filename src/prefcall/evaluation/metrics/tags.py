"""TAPS structured-tag metrics: span precision / recall / F1 macro-averaged over slot labels (TAPS Table 7),
action (intent) accuracy and the rate of well-formed tag strings.

A tag string looks like `[IN:GET_EVENTS If I ask for events [SL:CITY New York ] ... ]`; intents may nest.
Tags are read with the one tag-language parser, `prefcall.tagging.tags.parse_tags`, so the metric and the
pipeline agree on the grammar.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prefcall.errors import ParseError
from prefcall.evaluation.metrics.f1 import multiset_counts, prf
from prefcall.evaluation.metrics.normalise import normalise_text
from prefcall.tagging.tags import TagNode, TagTree, parse_tags

Span = tuple[str, str]  # (SLOT_LABEL, normalised text)


@dataclass
class TagParse:
    valid: bool
    intents: list[str] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    error: str = ""


_LOOSE_LABEL_RE = re.compile(r"\[(IN|SL):\s+")


def read_tags(tagged: str) -> TagParse:
    """Intents and normalised slot spans of a tag string; invalid when it does not parse, a slot stands outside
    any intent, or there is no intent. `[SL: CITY` (a space after the colon, found once in TAPS's own gold) is
    read as `[SL:CITY`."""
    tagged = _LOOSE_LABEL_RE.sub(r"[\1:", tagged or "")
    try:
        tree = parse_tags(tagged)
    except ParseError as exc:  # malformed tags: an invalid prediction
        return TagParse(valid=False, error=str(exc))
    return _from_tree(tree)


def _from_tree(tree: TagTree) -> TagParse:
    """Intents and spans of a parsed tree; a slot outside any intent is invalid."""
    intents: list[str] = []
    spans: list[Span] = []
    error = ""

    def visit(children: list[TagNode | str], inside_intent: bool) -> None:
        nonlocal error
        for child in children:
            if isinstance(child, str):
                continue
            if child.kind == "IN":
                intents.append(child.label.upper())
                visit(child.children, True)
            else:
                if not inside_intent:
                    error = error or f"slot {child.label} outside any intent"
                spans.append((child.label.upper(), normalise_text(child.text())))
                visit(child.children, inside_intent)

    visit(tree.children, False)
    if not intents:
        error = error or "no [IN:...] intent"
    return TagParse(valid=not error, intents=intents, spans=spans, error=error)


def score_tags(predicted: TagParse, gold: TagParse) -> dict[str, float]:
    """Per-instruction scores: action accuracy, item-level span F1, validity."""
    # An invalid tagging is wrong even where there was nothing to find.
    f1 = prf(*multiset_counts(predicted.spans, gold.spans))[2] if predicted.valid else 0.0
    action = predicted.valid and sorted(predicted.intents) == sorted(gold.intents)
    return {"action_accuracy": float(action), "span_f1": f1, "valid": float(predicted.valid)}


def span_counts(pairs: Iterable[tuple[TagParse, TagParse]]) -> dict[str, list[int]]:
    """Per slot label: [tp, n_pred, n_gold] summed over instructions (spans as multisets)."""
    counts: dict[str, list[int]] = {}
    for predicted, gold in pairs:
        pred = Counter(predicted.spans) if predicted.valid else Counter()
        gold_c = Counter(gold.spans)
        for (label, text), n in (pred | gold_c).items():
            row = counts.setdefault(label, [0, 0, 0])
            row[0] += min(pred[(label, text)], gold_c[(label, text)])
            row[1] += pred[(label, text)]
            row[2] += gold_c[(label, text)]
    return counts


def span_metrics(pairs: Sequence[tuple[TagParse, TagParse]]) -> dict[str, Any]:
    """Macro over slot labels seen in gold or prediction (TAPS Table 7), plus micro and the per-label table."""
    counts = span_counts(pairs)
    per_label = {label: dict(zip(("precision", "recall", "f1"), prf(*row))) | {"support": row[2]}
                 for label, row in sorted(counts.items())}
    n = len(per_label)
    totals = [sum(row[i] for row in counts.values()) for i in range(3)]
    micro = prf(*totals)  # no span anywhere (gold or predicted) is a perfect answer, not a zero
    return {
        "span_precision": sum(v["precision"] for v in per_label.values()) / n if n else 1.0,
        "span_recall": sum(v["recall"] for v in per_label.values()) / n if n else 1.0,
        "span_f1": sum(v["f1"] for v in per_label.values()) / n if n else 1.0,
        "span_micro_f1": micro[2],
        "per_slot": per_label,
    }
