"""The smoke suite of `prefcall model check`: cases with known answers (data/smoke_suite.json) and their scoring.

The cases are data and the scoring is small and pure, so both survive changes to the engine and the
strategies; `check.py` runs them through whatever the strategies currently do.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

KINDS = ("parse_request", "select_tools", "clarify")


@dataclass(frozen=True)
class SmokeCase:
    id: str
    kind: str  # one of KINDS
    catalogue: str
    expect: dict[str, Any]
    dialogue: str = ""  # parse_request, clarify
    message: str = ""  # select_tools
    instructions: tuple[str, ...] = ()


@dataclass(frozen=True)
class SmokeSuite:
    catalogues: dict[str, dict[str, Any]]
    cases: tuple[SmokeCase, ...]

    def select(self, ids_or_kinds: list[str] | None) -> tuple[SmokeCase, ...]:
        if not ids_or_kinds:
            return self.cases
        wanted = set(ids_or_kinds)
        return tuple(c for c in self.cases if c.id in wanted or c.kind in wanted)


@dataclass
class CaseOutcome:
    case: SmokeCase
    passed: bool
    detail: str
    got: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None  # the strategy raised: counted as a failure

    def as_json(self) -> dict[str, Any]:
        return {"id": self.case.id, "kind": self.case.kind, "passed": self.passed, "detail": self.detail,
                "seconds": round(self.seconds, 2), "error": self.error}


@lru_cache(maxsize=1)
def builtin_suite() -> SmokeSuite:
    raw = json.loads((resources.files("prefcall") / "data" / "smoke_suite.json").read_text(encoding="utf-8"))
    return suite_from_dict(raw)


def suite_from_dict(raw: dict[str, Any]) -> SmokeSuite:
    cases = []
    for item in raw["cases"]:
        if item["kind"] not in KINDS:
            raise ValueError(f"smoke case {item['id']}: unknown kind {item['kind']!r}")
        if item["catalogue"] not in raw["catalogues"]:
            raise ValueError(f"smoke case {item['id']}: unknown catalogue {item['catalogue']!r}")
        cases.append(SmokeCase(id=item["id"], kind=item["kind"], catalogue=item["catalogue"], expect=item["expect"],
                               dialogue=item.get("dialogue", ""), message=item.get("message", ""),
                               instructions=tuple(item.get("instructions", ()))))
    return SmokeSuite(catalogues=raw["catalogues"], cases=tuple(cases))


# -- scoring -------------------------------------------------------------------------------------------
def _norm(value: Any) -> str:
    text = re.sub(r"(?<=\d)(?=[a-z])|(?<=[a-z])(?=\d)", " ", str(value).lower())  # "7pm" -> "7 pm"
    return re.sub(r"[^a-z0-9]+", " ", text).strip()


def value_matches(expected: Any, got: Any) -> bool:
    """Lenient but truthful: numbers numerically; strings case- and punctuation-insensitive, the value containing
    the expected words ("American" ~ "American Airlines", "7pm" ~ "7 PM"); an empty value never matches."""
    if got is None or (isinstance(got, str) and not got.strip()):
        return False
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        try:
            return float(got) == float(expected)
        except (TypeError, ValueError):
            return _norm(got) == _norm(expected)
    e, g = _norm(expected), _norm(got)
    if not (e and g):
        return False
    # The expected words inside the value, as whole words: "American" in "American Airlines", never "Rome" in
    # "Jerome", and never the other way round ("San" is not "San Francisco"); "7pm" equals "7 PM".
    return e.replace(" ", "") == g.replace(" ", "") or f" {e} " in f" {g} "


def score_parse(expect: dict[str, Any], got: dict[str, Any]) -> tuple[bool, str]:
    decision = got.get("decision")
    if decision != expect["decision"]:
        calls = ", ".join(_call_text(c) for c in got.get("calls") or []) or "no calls"
        return False, f"decision {decision} (expected {expect['decision']}); {calls}"
    if expect["decision"] != "call":
        return True, f"decision {decision}" + (f": {got.get('question')}" if got.get("question") else "")
    calls = got.get("calls") or []
    expected_names = {c["name"] for c in expect["calls"]}
    problems = [f"unexpected call {c['name']}" for c in calls if c["name"] not in expected_names]
    for wanted in expect["calls"]:
        candidates = [c for c in calls if c["name"] == wanted["name"]]
        if not candidates:
            problems.append(f"no {wanted['name']} call")
            continue
        best = max(candidates, key=lambda c: sum(value_matches(v, c["arguments"].get(k))
                                                 for k, v in wanted["arguments"].items()))
        for key, value in wanted["arguments"].items():
            if not value_matches(value, best["arguments"].get(key)):
                problems.append(f"{wanted['name']}.{key}={best['arguments'].get(key)!r} (expected {value!r})")
    if problems:
        return False, "; ".join(problems)
    return True, ", ".join(_call_text(c) for c in calls)


def score_selection(expect: dict[str, Any], got: dict[str, Any]) -> tuple[bool, str]:
    wanted, chosen = set(expect["selected"]), set(got.get("selected") or [])
    shown = ", ".join(sorted(chosen)) or "none"
    if wanted == chosen:
        return True, f"selected {shown}"
    missing, extra = sorted(wanted - chosen), sorted(chosen - wanted)
    parts = [f"selected {shown}"] + ([f"missing {', '.join(missing)}"] if missing else []) + (
        [f"extra {', '.join(extra)}"] if extra else [])
    status = got.get("status")
    return False, "; ".join(parts) + (f" (status {status})" if status and status != "ok" else "")


def score_clarify(expect: dict[str, Any], got: dict[str, Any]) -> tuple[bool, str]:
    decision = got.get("decision")
    status = got.get("status", "ok")
    detail = f"decision {decision}" + (f": {got.get('question')}" if got.get("question") else "")
    if status != "ok":
        return False, f"{detail} (status {status}: no usable decision)"
    if decision != expect["decision"]:
        return False, f"{detail} (expected {expect['decision']})"
    return True, detail


SCORERS = {"parse_request": score_parse, "select_tools": score_selection, "clarify": score_clarify}


def score(case: SmokeCase, got: dict[str, Any]) -> tuple[bool, str]:
    return SCORERS[case.kind](case.expect, got)


def _call_text(call: dict[str, Any]) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in (call.get("arguments") or {}).items())
    return f"{call.get('name')}({args})"
