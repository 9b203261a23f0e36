"""TAPS structured-tag metrics: span precision / recall / F1 macro-averaged over slot labels (TAPS Table 7),
action (intent) accuracy and the rate of well-formed tag strings.

A tag string looks like `[IN:GET_EVENTS If I ask for events [SL:CITY New York ] ... ]`; intents may nest.
`parse_tags` here is private until `prefcall.strategies.taps_tags.parse_tags` lands; `read_tags` prefers that.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prefcall.errors import ParseError

_TOKEN_RE = re.compile(r"\[(IN|SL):([A-Za-z0-9_]+)|\]|[^\[\]]+|\[")
_PUNCT = str.maketrans("", "", string.punctuation)

Span = tuple[str, str]  # (SLOT_LABEL, normalised text)


@dataclass
class TagParse:
    valid: bool
    intents: list[str] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    error: str = ""


def normalise_span(text: str) -> str:
    return " ".join(text.lower().translate(_PUNCT).split())


def parse_tags(tagged: str) -> TagParse:
    """Stack parse; invalid when brackets do not balance, a slot nests a bracket, or there is no intent."""
    stack: list[tuple[str, str, list[str]]] = []  # (kind, label, text pieces)
    intents: list[str] = []
    spans: list[Span] = []
    error = ""
    for match in _TOKEN_RE.finditer(tagged or ""):
        token = match.group(0)
        if match.group(1):
            kind, label = match.group(1), match.group(2).upper()
            if stack and stack[-1][0] == "SL":
                error = error or f"bracket opened inside slot {stack[-1][1]}"
            if kind == "IN":
                intents.append(label)
            elif not stack:
                error = error or f"slot {label} outside any intent"
            stack.append((kind, label, []))
        elif token == "]":
            if not stack:
                error = error or "unbalanced ']'"
                continue
            kind, label, pieces = stack.pop()
            if kind == "SL":
                spans.append((label, normalise_span("".join(pieces))))
        elif token == "[":
            error = error or "'[' without IN:/SL: label"
        else:
            for frame in stack:
                if frame[0] == "SL":
                    frame[2].append(token)
    if stack:
        error = error or f"{len(stack)} bracket(s) left open"
    if not intents:
        error = error or "no [IN:...] intent"
    return TagParse(valid=not error, intents=intents, spans=spans, error=error)


_LOOSE_LABEL_RE = re.compile(r"\[(IN|SL):\s+")


def read_tags(tagged: str) -> TagParse:
    """Use the strategy's parser when it exists, so the metric and the pipeline agree on the grammar.
    `[SL: CITY` (a space after the colon, found once in TAPS's own gold) is read as `[SL:CITY`."""
    tagged = _LOOSE_LABEL_RE.sub(r"[\1:", tagged or "")
    try:
        from prefcall.strategies.taps_tags import parse_tags as shared
    except ImportError:
        return parse_tags(tagged)
    try:
        parsed = shared(tagged)
    except ParseError as exc:  # the shared parser raises on malformed tags: an invalid prediction
        return TagParse(valid=False, error=str(exc))
    return _from_shared(parsed, tagged)


def _from_shared(tree: Any, tagged: str) -> TagParse:
    """Read the strategy's TagTree (nodes with kind IN/SL, label, text()); a slot outside any intent is invalid."""
    intents: list[str] = []
    spans: list[Span] = []
    error = ""

    def visit(children: list[Any], inside_intent: bool) -> None:
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
                spans.append((child.label.upper(), normalise_span(child.text())))
                visit(child.children, inside_intent)

    visit(list(getattr(tree, "children", [])), False)
    if not intents:
        error = error or "no [IN:...] intent"
    return TagParse(valid=not error, intents=intents, spans=spans, error=error)


def score_tags(predicted: TagParse, gold: TagParse) -> dict[str, float]:
    """Per-instruction scores: action accuracy, item-level span F1, validity."""
    pred_spans = Counter(predicted.spans) if predicted.valid else Counter()
    gold_spans = Counter(gold.spans)
    tp = sum((pred_spans & gold_spans).values())
    n_pred, n_gold = sum(pred_spans.values()), sum(gold_spans.values())
    if not predicted.valid:
        f1 = 0.0  # an invalid tagging is wrong even where there was nothing to find
    elif n_pred == 0 and n_gold == 0:
        f1 = 1.0
    elif tp == 0:
        f1 = 0.0
    else:
        p, r = tp / n_pred, tp / n_gold
        f1 = 2 * p * r / (p + r)
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


def prf(tp: int, n_pred: int, n_gold: int) -> tuple[float, float, float]:
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def span_metrics(pairs: Sequence[tuple[TagParse, TagParse]]) -> dict[str, Any]:
    """Macro over slot labels seen in gold or prediction (TAPS Table 7), plus micro and the per-label table."""
    counts = span_counts(pairs)
    per_label = {label: dict(zip(("precision", "recall", "f1"), prf(*row))) | {"support": row[2]}
                 for label, row in sorted(counts.items())}
    n = len(per_label)
    totals = [sum(row[i] for row in counts.values()) for i in range(3)]
    micro = prf(*totals) if n else (1.0, 1.0, 1.0)
    # No span anywhere (gold or predicted) is a perfect answer, not a zero.
    return {
        "span_precision": sum(v["precision"] for v in per_label.values()) / n if n else 1.0,
        "span_recall": sum(v["recall"] for v in per_label.values()) / n if n else 1.0,
        "span_f1": sum(v["f1"] for v in per_label.values()) / n if n else 1.0,
        "span_micro_f1": micro[2],
        "per_slot": per_label,
    }
