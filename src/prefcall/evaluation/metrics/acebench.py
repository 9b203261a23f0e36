"""ACEBench answer checks: argument values against `possible_answer`, calls against a gold set of calls, and the
special categories' texts (which parameter is missing or wrong).

Values follow ACEBench's checker (model_eval/checker.py): a string is right when the gold string, standardised
(lower-cased, without spaces and , . / - _ * ^), occurs in the predicted one; numbers compare as numbers (an int
equals the same float; a numeric string equals the number); "true"/"false" strings are booleans; lists compare
element-wise and dicts key by key. Where a gold value is a list and the prediction a single value, the list is
read as the acceptable values (the BFCL convention, which some possible-answer files use).

A gold answer is one dict `{function: {argument: value}}` (several calls in one dict for parallel categories,
with `_1`, `_2` suffixes on repeated names) or a list of such dicts (alternatives; the best one counts).
Deviation from ACEBench, stated: a gold argument that the call leaves out is wrong here (ACEBench only checks
required ones), so `call_exact` is a little stricter than ACEBench's accuracy.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

_STANDARD = re.compile(r"[ ,./\-_*^]")
_SUFFIX = re.compile(r"_\d+$")


def standardise(value: str) -> str:
    return _STANDARD.sub("", value).lower().replace("'", '"')


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _boolean(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def value_matches(predicted: Any, gold: Any) -> bool:
    """One predicted argument value against its gold value (see the module docstring)."""
    if isinstance(gold, bool) or isinstance(predicted, bool):
        return _boolean(predicted) is not None and _boolean(predicted) == _boolean(gold)
    if isinstance(gold, (int, float)):
        number = _number(predicted)
        return number is not None and number == float(gold)
    if isinstance(gold, str):
        if isinstance(predicted, (int, float)) and _number(gold) is not None:
            return float(predicted) == _number(gold)
        return isinstance(predicted, str) and standardise(gold) in standardise(predicted)
    if isinstance(gold, list):
        if isinstance(predicted, list):
            return len(predicted) == len(gold) and all(map(value_matches, predicted, gold))
        return any(value_matches(predicted, option) for option in gold)  # acceptable values
    if isinstance(gold, Mapping):
        return (isinstance(predicted, Mapping) and set(predicted) == set(gold)
                and all(value_matches(predicted[k], gold[k]) for k in gold))
    return predicted == gold


def gold_alternatives(ground_truth: Any, function_names: Sequence[str] = ()) -> list[list[dict[str, Any]]]:
    """possible_answer's ground truth -> alternatives, each a list of calls {"name", "arguments"}. A key with a
    `_N` suffix is the function without it when only that one exists (parallel calls to one function)."""
    options = ground_truth if isinstance(ground_truth, list) else [ground_truth]
    known = set(function_names)
    alternatives = []
    for option in options:
        if not isinstance(option, Mapping):
            raise ValueError(f"possible answer {str(option)[:80]!r} is not a {{function: {{argument: value}}}} dict")
        calls = []
        for key, arguments in option.items():
            name = key
            if key not in known and _SUFFIX.sub("", key) in known:
                name = _SUFFIX.sub("", key)
            if not isinstance(arguments, Mapping):
                raise ValueError(f"possible answer for {key!r} is not an {{argument: value}} dict")
            calls.append({"name": name, "arguments": dict(arguments)})
        alternatives.append(calls)
    return alternatives


def _call_score(call: Mapping[str, Any], gold: Mapping[str, Any]) -> tuple[int, bool]:
    """(gold arguments given with a matching value, exact: all of them and nothing else)."""
    arguments = call.get("arguments") or {}
    gold_args = gold["arguments"]
    right = sum(1 for k, v in gold_args.items() if k in arguments and value_matches(arguments[k], v))
    return right, right == len(gold_args) and set(arguments) <= set(gold_args)


def score_calls(predicted: Sequence[Mapping[str, Any]], gold: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """One alternative: function_match (same multiset of names), argument_accuracy (share of gold arguments
    given right, calls paired by name), call_exact (same calls, every argument right, none extra)."""
    names = sorted(str(c.get("name")) for c in predicted)
    function_match = names == sorted(str(c["name"]) for c in gold)
    unused = list(predicted)
    right = exact = 0
    total = sum(len(g["arguments"]) for g in gold)
    for gold_call in gold:
        same = [c for c in unused if c.get("name") == gold_call["name"]]
        if not same:
            continue
        best = max(same, key=lambda c: _call_score(c, gold_call))
        unused.remove(best)
        hits, whole = _call_score(best, gold_call)
        right += hits
        exact += whole
    argument_accuracy = right / total if total else float(function_match)
    return {"function_match": float(function_match), "argument_accuracy": argument_accuracy,
            "call_exact": float(function_match and exact == len(gold) and len(predicted) == len(gold))}


def best_alternative(predicted: Sequence[Mapping[str, Any]], alternatives: Sequence[Sequence[Mapping[str, Any]]]
                     ) -> dict[str, float]:
    """The scores of the alternative the prediction matches best (exact first, then arguments, then names)."""
    scored = [score_calls(predicted, gold) for gold in alternatives] or [score_calls(predicted, [])]
    return max(scored, key=lambda s: (s["call_exact"], s["argument_accuracy"], s["function_match"]))


def mentioned(names: Sequence[str], predicted_names: Sequence[str], text: str | None) -> float:
    """Share of `names` that the prediction names: among its flagged arguments, or in its question's text."""
    if not names:
        return 1.0
    flagged = {n.lower() for n in predicted_names}
    lowered = (text or "").lower()
    return sum(n.lower() in flagged or (bool(lowered) and n.lower() in lowered) for n in names) / len(names)
