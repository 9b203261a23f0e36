"""NLSI call metrics as TAPS scores them: (function, argument, value) triples after value normalisation.

Faithful to grill-lab/taps src/evaluation (utils.get_api_data + Evaluation with preprocess=True):
- values are lower-cased, punctuation removed, "versus" unified to "vs", city aliases from locations.json
  applied ("San Fran" and "San Francisco" -> "sfo"), the value "any" is dropped (it means "no constraint");
- the argument names `event_type` and `subcategory` are unified to `category` (as TAPS does);
- ours, documented deviations (applied to gold AND prediction, so they only matter where the two use different
  spellings of the same thing): the NLSI dev gold spells `GetDenists` in 44 items while the schema (and so any
  grammar-constrained prediction) says `GetDentists` -> FUNCTION_ALIASES; the gold keeps SGD's older argument
  names `city_of_event` (GetEvents, 6 items) and `type` (GetRentalCars, 4 items) that the NLSI schema calls
  `city` and `car_type` -> ARGUMENT_ALIASES, per function. Without them a schema-valid correct answer scores 0
  on those triples. `score_calls(..., schema_aliases=False)` gives the unaliased (TAPS-literal) score;
- precision / recall / F1 are computed per example over the SET of triples and macro-averaged over examples;
  both empty -> 1.0, exactly one empty -> 0.0;
- exact match requires the same multiset of calls (so a duplicated or missing call fails, which TAPS gets with
  its extra "number of calls differs -> EM 0" rule).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from prefcall.errors import ConfigError, ParseError
from prefcall.evaluation.metrics.f1 import set_prf
from prefcall.evaluation.metrics.normalise import normalise_text
from prefcall.schemas.calls import parse_call
from prefcall.schemas.model import Call

Triple = tuple[str, str, str]
CallKey = tuple[str, frozenset[tuple[str, str]]]

_UNIFIED_ARGS = {"event_type": "category", "subcategory": "category"}
# Data typos / older names in the NLSI gold -> the schema's names (lower-case; see the module docstring).
FUNCTION_ALIASES = {"getdenists": "getdentists"}
ARGUMENT_ALIASES = {("getevents", "city_of_event"): "city", ("getrentalcars", "type"): "car_type"}


def load_aliases(path: str | Path | None) -> dict[str, str]:
    """City alias map: keys lower-cased, stripped, and also in punctuation-free form."""
    if path is None:
        return {}
    return dict(_load_aliases(str(path)))


@lru_cache(maxsize=4)
def _load_aliases(path: str) -> tuple[tuple[str, str], ...]:
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"locations file {path} not found; pass --locations FILE (TAPS's locations.json)") from exc
    aliases: dict[str, str] = {}
    for key, value in raw.items():
        canon = str(value).strip().lower()
        aliases[str(key).strip().lower()] = canon
        aliases.setdefault(normalise_text(key), canon)
    return tuple(aliases.items())


def normalise_value(value: Any, aliases: Mapping[str, str] | None = None) -> str:
    """Lower-case, alias, unify versus/vs, strip punctuation and extra whitespace."""
    aliases = aliases or {}
    text = str(value).strip().lower()
    text = aliases.get(text, text)
    text = re.sub(r"(^|\W)versus(\W|$)", r"\1vs\2", text)
    text = normalise_text(text)
    return aliases.get(text, text)


def normalise_arg(name: str, function: str | None = None, schema_aliases: bool = True) -> str:
    """Lower-cased argument name; `function` is the normalised function name (for per-function aliases)."""
    name = name.strip().lower()
    if schema_aliases and function is not None:
        name = ARGUMENT_ALIASES.get((function, name), name)
    return _UNIFIED_ARGS.get(name, name)


def normalise_function(name: str, schema_aliases: bool = True) -> str:
    name = name.strip().lower()
    return FUNCTION_ALIASES.get(name, name) if schema_aliases else name


def call_triples(call: Call, aliases: Mapping[str, str] | None = None, schema_aliases: bool = True) -> set[Triple]:
    fn = normalise_function(call.name, schema_aliases)
    triples = set()
    for arg, value in call.arguments.items():
        norm = normalise_value(value, aliases)
        if norm == "any":
            continue
        triples.add((fn, normalise_arg(arg, fn, schema_aliases), norm))
    return triples


def triples_of(calls: Iterable[Call], aliases: Mapping[str, str] | None = None,
               schema_aliases: bool = True) -> set[Triple]:
    out: set[Triple] = set()
    for call in calls:
        out |= call_triples(call, aliases, schema_aliases)
    return out


def call_key(call: Call, aliases: Mapping[str, str] | None = None, schema_aliases: bool = True) -> CallKey:
    return (normalise_function(call.name, schema_aliases),
            frozenset((a, v) for _, a, v in call_triples(call, aliases, schema_aliases)))


def score_calls(predicted: list[Call], gold: list[Call], aliases: Mapping[str, str] | None = None, *,
                schema_aliases: bool = True) -> dict[str, float]:
    """Per-example scores: exact_match, slot_precision/recall/f1, function_f1, and the counts for micro sums."""
    sa = schema_aliases
    pred_triples, gold_triples = triples_of(predicted, aliases, sa), triples_of(gold, aliases, sa)
    precision, recall, f1 = set_prf(pred_triples, gold_triples)
    pred_fns = {normalise_function(c.name, sa) for c in predicted}
    gold_fns = {normalise_function(c.name, sa) for c in gold}
    exact = Counter(call_key(c, aliases, sa) for c in predicted) == Counter(call_key(c, aliases, sa) for c in gold)
    return {
        "exact_match": float(exact),
        "slot_precision": precision,
        "slot_recall": recall,
        "slot_f1": f1,
        "function_f1": set_prf(pred_fns, gold_fns)[2],
        "tp": float(len(pred_triples & gold_triples)),
        "n_pred": float(len(pred_triples)),
        "n_gold": float(len(gold_triples)),
        "n_pred_calls": float(len(predicted)),
        "n_gold_calls": float(len(gold)),
    }


def normalise_instruction(text: str) -> str:
    return " ".join(text.strip().strip(" .").lower().split())


def score_selection(predicted: Iterable[str], gold: Iterable[str]) -> dict[str, float]:
    """Instruction selection: set P/R/F1 over normalised instruction texts."""
    p, r, f = set_prf({normalise_instruction(s) for s in predicted}, {normalise_instruction(s) for s in gold})
    return {"selection_precision": p, "selection_recall": r, "selection_f1": f}


def calls_from_any(raw: Any) -> list[Call]:
    """Calls from strings, dicts ({name, arguments}) or Call objects."""
    out = []
    for entry in raw or []:
        if isinstance(entry, Call):
            out.append(entry)
        elif isinstance(entry, str):
            out.append(parse_call(entry))
        elif isinstance(entry, Mapping):
            out.append(Call(name=entry.get("name", ""), arguments=dict(entry.get("arguments") or {})))
        else:
            raise ParseError(f"cannot read a call from {entry!r}")
    return out
