"""Answer parity between two engines: the same MCP requests in-process and served, compared answer by answer.

Token log-probabilities that agree within 0.1 nats say little about answers: a served engine that scores a
value's closing quote differently, or reads another model's fit, agrees token by token and still answers `ask`
where the in-process engine calls. So parity is checked where a user sees it: parse_request, select_tools_nlt,
clarify and tag_profile through the MCP protocol (an in-memory client), on the same catalogues and profiles.

Each request's **margin** in-process is how far its answer stands from the backends' score noise: the request is
run again with every candidate score moved by deterministic noise of that size (`ScoreTap`, two seeds); an answer
that holds under the noise is *stable* and must be identical on the served engine; an answer that moves is listed
with the smallest gap between two candidates it scored (nats), never hidden. The noise is measured in the same
run: the 95th percentile of the differences between the two engines' scores of one candidate on one prompt, never
less than `NOISE_FLOOR`; the candidates more than 1 nat apart are listed (`ScoreNoise.outliers`).

The requests are the smoke suite's (data/smoke_suite.json: call, ask, refuse, preferences, NLT, clarify) plus
`EXTRA_CASES` (multi-call, preference with a missing value, two refusals, clarify with a preference, NLT on a
second catalogue, tag_profile). Written for this check, not taken from any evaluation set.
"""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from prefcall.config import Settings
from prefcall.engine.base import CandidateScores, Embedder, Engine, score_batch

NOISE_FLOOR = 0.15  # nats: the score noise measured between llama.cpp backends on one model file (README)
SEEDS = (1, 2)


@dataclass(frozen=True)
class ParityCase:
    id: str
    tool: str  # parse_request | select_tools_nlt | clarify | tag_profile
    catalogue: str
    text: str = ""  # the dialogue (parse_request, clarify) or the message (select_tools_nlt)
    instructions: tuple[str, ...] = ()


EXTRA_CASES = (
    ParityCase("parse-two-calls", "parse_request", "travel",
               "User: Book a flight from Boston to Denver on 2025-08-10 and a hotel in Denver for 2 nights from "
               "2025-08-10.", ("When I book flights, I always fly Delta.", "For hotels I want 4 stars.")),
    ParityCase("parse-preference-ask", "parse_request", "travel", "User: Book me a flight to Chicago.",
               ("When I book flights, I always fly Delta.",)),
    ParityCase("parse-restaurant-cuisine", "parse_request", "travel",
               "User: Get me a table for 2 at 8pm in Oakland.", ("I like Italian food when eating out.",)),
    ParityCase("parse-refuse-joke", "parse_request", "travel", "User: Tell me a joke about cats.",
               ("When I book flights, I always fly Delta.",)),
    ParityCase("parse-refuse-football", "parse_request", "travel", "User: Who won the football match last night?"),
    ParityCase("clarify-flight-preference", "clarify", "travel",
               "User: Book a flight from New York to Los Angeles on 2025-09-01.",
               ("When I book flights, I always fly Delta.",)),
    ParityCase("nlt-travel-weather", "select_tools_nlt", "travel", "Will it rain in Oslo tomorrow?"),
    ParityCase("tag-travel-profile", "tag_profile", "travel", "",
               ("When I book flights, I always fly Delta.", "For hotels I want 4 stars.",
                "If I reserve restaurants, my city is San Francisco.")),
)


def parity_cases() -> tuple[dict[str, Any], tuple[ParityCase, ...]]:
    """The catalogues ({name: catalogue}) and the cases: the smoke suite's, then EXTRA_CASES."""
    raw = json.loads((resources.files("prefcall") / "data" / "smoke_suite.json").read_text(encoding="utf-8"))
    tools = {"parse_request": "parse_request", "select_tools": "select_tools_nlt", "clarify": "clarify"}
    cases = tuple(ParityCase(item["id"], tools[item["kind"]], item["catalogue"],
                             item.get("dialogue") or item.get("message", ""), tuple(item.get("instructions", ())))
                  for item in raw["cases"])
    return raw["catalogues"], cases + EXTRA_CASES


class ScoreTap:
    """An engine seen through a tap: every candidate scoring is recorded (prompt, candidates, scores) and, with
    `noise`, each score is moved by a deterministic amount in [-noise, noise] (a hash of the seed, the prompt and
    the candidate). Everything else is the wrapped engine's."""

    def __init__(self, engine: Engine, noise: float = 0.0, seed: int = 0) -> None:
        self._engine = engine
        self.noise = noise
        self.seed = seed
        self.calls: list[tuple[str, tuple[str, ...], tuple[float, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    @property
    def info(self) -> Any:
        return self._engine.info

    def score_candidates(self, prompt: Any, candidates: Sequence[str], **kwargs: Any) -> CandidateScores:
        return self._tapped(prompt, candidates, self._engine.score_candidates(prompt, candidates, **kwargs))

    def score_batch(self, requests: Sequence[tuple[Any, Sequence[str]]], **kwargs: Any) -> list[CandidateScores]:
        scored = score_batch(self._engine, requests, **kwargs)
        return [self._tapped(prompt, candidates, s) for (prompt, candidates), s in zip(requests, scored)]

    def _tapped(self, prompt: Any, candidates: Sequence[str], scored: CandidateScores) -> CandidateScores:
        key = json.dumps([[m.role, m.content] for m in prompt.messages] + [prompt.prefix])
        self.calls.append((key, tuple(candidates), tuple(scored.logprobs)))
        if not self.noise:
            return scored
        moved = [s + self.noise * _unit(self.seed, key, c) for s, c in zip(scored.logprobs, candidates)]
        return replace(scored, logprobs=moved)


def _unit(seed: int, prompt: str, candidate: str) -> float:
    digest = hashlib.sha256(f"{seed}\x00{prompt}\x00{candidate}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 63 - 1.0


def smallest_gap(calls: Sequence[tuple[str, tuple[str, ...], tuple[float, ...]]]) -> float | None:
    """The smallest gap (nats) between the best and the second candidate of any scoring with two or more."""
    gaps = []
    for _, _, scores in calls:
        finite = sorted((s for s in scores if math.isfinite(s)), reverse=True)
        if len(finite) >= 2:
            gaps.append(finite[0] - finite[1])
    return round(min(gaps), 3) if gaps else None


@dataclass(frozen=True)
class ScoreNoise:
    """How far two engines' scores of one candidate on one prompt lie apart, over the scorings both made."""

    compared: int = 0
    median: float = 0.0
    p95: float = 0.0  # what the answers are tested against (at least NOISE_FLOOR)
    worst: float = 0.0
    # candidates more than 1 nat apart: the served engine's forced path left the candidate's own tokenization (a
    # one-literal grammar and a logit bias cannot force a token sequence; seen on long values that join words and
    # digits, which score far below the values chosen), listed with both scores
    outliers: tuple[tuple[str, float, float], ...] = ()


def score_noise(a: Sequence[tuple[str, tuple[str, ...], tuple[float, ...]]],
                b: Sequence[tuple[str, tuple[str, ...], tuple[float, ...]]]) -> ScoreNoise:
    first = {(key, c): s for key, cands, scores in a for c, s in zip(cands, scores)}
    diffs, outliers = [], []
    for key, cands, scores in b:
        for c, s in zip(cands, scores):
            other = first.get((key, c))
            if other is not None and math.isfinite(other) and math.isfinite(s):
                diffs.append(abs(other - s))
                if abs(other - s) > 1.0:
                    outliers.append((c, round(other, 3), round(s, 3)))
    if not diffs:
        return ScoreNoise()
    diffs.sort()
    return ScoreNoise(len(diffs), diffs[len(diffs) // 2], diffs[min(len(diffs) - 1, int(0.95 * len(diffs)))],
                      diffs[-1], tuple(outliers))


def _calls(calls: list[dict[str, Any]]) -> list[str]:
    return sorted(f"{c['name']}({json.dumps(c.get('arguments') or {}, sort_keys=True)})" for c in calls)


def answer_of(tool: str, result: dict[str, Any]) -> dict[str, Any]:
    """What a user sees of a result, without timings, traces and scores."""
    if tool == "parse_request":
        return {"decision": result.get("decision"), "calls": _calls(result.get("calls") or []),
                "missing": sorted(f"{m.get('function')}.{m.get('argument')}" for m in result.get("missing") or [])}
    if tool == "select_tools_nlt":
        return {"selected": sorted(result.get("selected") or []), "status": result.get("status")}
    if tool == "clarify":
        return {"decision": result.get("decision"),
                "missing": sorted(f"{m.get('function')}.{m.get('argument')}"
                                  for m in result.get("missing_arguments") or [])}
    if tool == "tag_profile":
        return {"tagged": result.get("tagged"), "invalid": result.get("invalid"),
                "tags": sorted(f"{t.get('text')} -> {t.get('status')}: {t.get('tags')}"
                               for t in result.get("instructions") or [])}
    raise ValueError(f"no answer form for tool {tool!r}")


@dataclass
class CaseRun:
    case: ParityCase
    answer: dict[str, Any] = field(default_factory=dict)
    calls: list[tuple[str, tuple[str, ...], tuple[float, ...]]] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0  # the tool call's wall time through MCP


async def run_cases(engine: Engine, embedder: Embedder | None, settings: Settings,
                    cases: Sequence[ParityCase] | None = None) -> dict[str, CaseRun]:
    """Every case through one MCP server on `engine` (an in-memory client, a fresh database), one user per
    case."""
    catalogues, every = parity_cases()
    cases = list(cases or every)
    tap = engine if isinstance(engine, ScoreTap) else ScoreTap(engine)
    runs: dict[str, CaseRun] = {}
    with tempfile.TemporaryDirectory(prefix="prefcall-parity-") as folder:  # a fresh database per run
        fresh = settings.model_copy(update={"data_dir": Path(folder), "db_path": None})
        await _run(tap, embedder, fresh, catalogues, cases, runs)
    return runs


async def _run(tap: ScoreTap, embedder: Embedder | None, settings: Settings, catalogues: dict[str, Any],
               cases: Sequence[ParityCase], runs: dict[str, CaseRun]) -> None:
    from mcp import Client

    from prefcall.server.app import create_server

    server = create_server(settings, engine=tap, embedder=embedder)  # type: ignore[arg-type]
    async with Client(server) as client:
        for name, catalogue in catalogues.items():
            tools = [{"name": f["name"], "description": f.get("description", ""),
                      "parameters": f.get("parameters") or {"type": "object", "properties": {}}}
                     for f in catalogue["functions"]]
            await _ok(client, "import_catalogue", {"name": name, "tools": tools, "replace": True})
        for number, case in enumerate(cases):
            user = f"parity{number}"
            await _ok(client, "create_profile", {"user_id": user})
            for text in case.instructions:
                await _ok(client, "add_instruction", {"user_id": user, "text": text})
            arguments: dict[str, Any] = {"catalogue": case.catalogue}
            if case.tool == "select_tools_nlt":
                arguments["message"] = case.text
            elif case.tool == "tag_profile":
                arguments["user_id"] = user
            else:
                arguments |= {"dialogue": case.text, "user_id": user}
                if case.tool == "clarify":
                    arguments["elicit"] = False
            start = len(tap.calls)
            run = CaseRun(case)
            began = time.perf_counter()
            try:
                run.answer = answer_of(case.tool, await _ok(client, case.tool, arguments))
            except RuntimeError as exc:
                run.error = str(exc)
            run.seconds = time.perf_counter() - began
            run.calls = tap.calls[start:]
            runs[case.id] = run


async def _ok(client: Any, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise RuntimeError(f"{tool}: {result.content[0].text}")
    return result.structured_content or {}


@dataclass
class ParityRow:
    id: str
    tool: str
    local: dict[str, Any]
    served: dict[str, Any]
    same: bool
    stable: bool  # the in-process answer held under the measured noise (both seeds)
    gap: float | None  # the smallest in-process gap between two scored candidates (nats)
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "tool": self.tool, "same": self.same, "stable": self.stable, "gap": self.gap,
                "local": self.local, "served": self.served, **({"error": self.error} if self.error else {})}


@dataclass
class ParityReport:
    rows: list[ParityRow]
    noise: ScoreNoise
    amplitude: float  # the noise each in-process answer was shaken by: max(NOISE_FLOOR, noise.p95)
    seconds: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # engine -> tool -> p50, p95

    @property
    def failures(self) -> list[ParityRow]:
        """Stable answers that differ: what parity forbids."""
        return [r for r in self.rows if r.stable and not r.same]

    @property
    def unstable(self) -> list[ParityRow]:
        return [r for r in self.rows if not r.stable]

    def summary(self) -> dict[str, Any]:
        stable = [r for r in self.rows if r.stable]
        return {"requests": len(self.rows), "same": sum(r.same for r in self.rows), "stable": len(stable),
                "stable_same": sum(r.same for r in stable), "shaken_by_nats": round(self.amplitude, 3),
                "score_noise": {"compared": self.noise.compared, "median": round(self.noise.median, 3),
                                "p95": round(self.noise.p95, 3), "max": round(self.noise.worst, 3),
                                "over_1_nat": [list(o) for o in self.noise.outliers]},
                "unstable": [r.as_json() for r in self.unstable],
                "differ": [r.as_json() for r in self.rows if not r.same], "seconds": self.seconds}


async def compare(local: Engine, served: Engine, embedder: Embedder | None, local_settings: Settings,
                  served_settings: Settings, cases: Sequence[ParityCase] | None = None) -> ParityReport:
    """Run the cases on both engines, measure the score noise between them, and test each in-process answer
    against that noise (two seeds): the 95th percentile of the score differences, at least NOISE_FLOOR."""
    base = await run_cases(local, embedder, local_settings, cases)
    other = await run_cases(served, embedder, served_settings, cases)
    noise = score_noise([c for r in base.values() for c in r.calls], [c for r in other.values() for c in r.calls])
    amplitude = max(NOISE_FLOOR, noise.p95)
    shaken = [await run_cases(ScoreTap(local, amplitude, seed), embedder, local_settings, cases) for seed in SEEDS]
    rows = []
    for key, run in base.items():
        stable = run.error is None and all(s[key].answer == run.answer for s in shaken)
        served_run = other[key]
        rows.append(ParityRow(key, run.case.tool, run.answer, served_run.answer,
                              run.answer == served_run.answer and run.error is None and served_run.error is None,
                              stable, smallest_gap(run.calls), run.error or served_run.error))
    seconds = {"in-process": tool_seconds(base), "served": tool_seconds(other)}
    return ParityReport(rows, noise, amplitude, seconds)


def tool_seconds(runs: dict[str, CaseRun]) -> dict[str, dict[str, float]]:
    """Per tool: how many requests and the p50 / p95 of their wall time through MCP (one sequential client)."""
    by_tool: dict[str, list[float]] = {}
    for run in runs.values():
        by_tool.setdefault(run.case.tool, []).append(run.seconds)
    out = {}
    for tool, values in sorted(by_tool.items()):
        values.sort()
        out[tool] = {"n": len(values), "p50": round(values[len(values) // 2], 2),
                     "p95": round(values[min(len(values) - 1, int(0.95 * len(values)))], 2)}
    return out
