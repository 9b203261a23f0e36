"""FnCTOD function calling: stage 1 picks functions from concise descriptions, stage 2 fills arguments
with only the chosen function's full spec. Both stages are grammar-constrained JSON, so function names,
argument names and enum values cannot be invented. A one-stage variant (every spec in one prompt) is
kept for the comparison benchmark.

Prompt layout: the stable part (instructions for the model + catalogue listing or one function's spec)
is the system message, FIRST; demonstrations, standing instructions and the dialogue come last, so the
engine's KV prefix cache reuses the stable part across requests.
Multi-turn: earlier calls stay in the transcript (`render_dialogue` prints "Assistant called: ..."), as in
FnCTOD, so the same code does dialogue state tracking.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from prefcall.engine.base import Engine, Generation, Prompt, score_batch
from prefcall.engine.loader import file_signature
from prefcall.retrieval.text import tokenize
from prefcall.schemas import render as schema_render
from prefcall.schemas.model import Call, Catalogue, Function
from prefcall.storage.demos import Demonstration
from prefcall.strategies.selection import (
    ALSO_RE,
    DomainModel,
    SelectionConfig,
    dialogue_domains,
    instruction_domains,
    split_condition,
)

MAX_CALLS = 3  # NLSI requests need up to 2-3 calls (chains across domains, one call per preferred value)
SELECTION_MAX_TOKENS = 48
ARGUMENTS_MAX_TOKENS = 160

SELECTION_SYSTEM = (
    "You are an assistant that decides which API functions to call for a user's request.\n"
    "The user's standing instructions may ask for extra functions (for example 'also check hotels').\n"
    "Answer with a JSON list of function names.\n\nFunctions:\n{listing}"
)
ARGUMENTS_SYSTEM = (
    "You are an assistant that fills in the arguments of the API function {name}.\n"
    "Use values from the dialogue and from the user's standing instructions that apply; when they "
    "conflict, the dialogue wins. Leave out arguments that nobody mentioned. If the user prefers several "
    "values, give one call per value.\n"
    "Answer with a JSON list of argument objects, one per call.\n\n{spec}"
)
ONE_STAGE_SYSTEM = (
    "You are an assistant that turns a user's request into API calls.\n"
    "Use values from the dialogue and from the user's standing instructions that apply; when they "
    "conflict, the dialogue wins. Leave out arguments that nobody mentioned.\n"
    'Answer with a JSON list of calls like {{"name": ..., "arguments": {{...}}}}.\n\nFunctions:\n{specs}'
)
JOINT_NOTE = (
    "\nFirst write each standing instruction that applies in tagged form, e.g. "
    "[IN:GET_EVENTS I like [SL:CITY Boston ] ] (keep every word; IN: the API, SL: its argument), then the calls."
)


class CallingContext(BaseModel):
    """What both stages see besides the catalogue."""

    dialogue: str  # rendered transcript
    instructions: list[str] = Field(default_factory=list)  # plain or tagged standing instructions
    profile: list[str] = Field(default_factory=list)  # every standing instruction of the user (stage 1's evidence)
    demos: list[Demonstration] = Field(default_factory=list)


class StageOutput(BaseModel):
    """One model call's parsed result; `error` set (and `raw` kept) when the output could not be parsed."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    stage: str
    value: Any = None
    raw: str = ""
    error: str | None = None
    generation: Generation | None = None
    usage: Any = None  # FunctionScores of a scored selection (token usage of score_candidates)
    seconds: float = 0.0


class CallingResult(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    functions: list[str] = Field(default_factory=list)
    calls: list[Call] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)  # joint mode only
    stages: list[StageOutput] = Field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        return [f"{s.stage}: {s.error}" for s in self.stages if s.error]

    @property
    def call_generations(self) -> list[Generation]:
        """Generations that produced arguments/calls: what the uncertainty gate measures."""
        return [s.generation for s in self.stages if s.generation is not None and s.stage != "select"]


# -- rendering -----------------------------------------------------------------------------------
def render_listing(catalogue: Catalogue) -> str:
    return schema_render.render_listing(catalogue)


def render_spec(function: Function) -> str:
    return schema_render.render_function_spec(function)


def render_instructions(instructions: Sequence[str]) -> str:
    return "\n".join(f"- {i}" for i in instructions) if instructions else "(none)"


def _demo_block(demo: Demonstration, answer: str) -> str:
    return (f"Standing instructions:\n{render_instructions(demo.instructions)}\nDialogue:\n{demo.dialogue}\n"
            f"{answer}")


def _request_block(ctx: CallingContext, question: str) -> str:
    return f"Standing instructions:\n{render_instructions(ctx.instructions)}\nDialogue:\n{ctx.dialogue}\n{question}"


def _with_demos(ctx: CallingContext, answer_for: Any, question: str) -> str:
    parts = [f"Example {i + 1}:\n{_demo_block(d, answer_for(d))}" for i, d in enumerate(ctx.demos)]
    parts.append(("Now the request:\n" if ctx.demos else "") + _request_block(ctx, question))
    return "\n\n".join(parts)


# -- schemas -------------------------------------------------------------------------------------
def selection_schema(catalogue: Catalogue, max_calls: int = MAX_CALLS, allow_none: bool = False) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string", "enum": catalogue.names},
            "minItems": 0 if allow_none else 1, "maxItems": max_calls}


def arguments_object_schema(function: Function) -> dict[str, Any]:
    # Required arguments are NOT enforced: a value nobody gave must stay missing (and be asked for), not invented.
    return schema_render.arguments_schema(function, enforce_required=False)


def arguments_schema(function: Function, max_calls: int = MAX_CALLS, joint: bool = False) -> dict[str, Any]:
    calls = {"type": "array", "items": arguments_object_schema(function), "minItems": 1, "maxItems": max_calls}
    return _joint(calls) if joint else calls


def one_stage_schema(catalogue: Catalogue, max_calls: int = MAX_CALLS, joint: bool = False) -> dict[str, Any]:
    calls = schema_render.calls_schema(catalogue, enforce_required=False, min_items=1, max_items=max_calls)
    return _joint(calls) if joint else calls


def _joint(calls: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
                                             "calls": calls},
            "required": ["tags", "calls"], "additionalProperties": False}


# -- stages --------------------------------------------------------------------------------------
def _run(engine: Engine, stage: str, system: str, user: str, schema: dict[str, Any], max_tokens: int) -> StageOutput:
    prompt = Prompt.chat(system, user)  # the system part is instructions + catalogue only: shared across users
    started = time.perf_counter()
    generation = engine.generate(prompt, max_tokens=max_tokens, json_schema=schema, top_logprobs=2)
    seconds = generation.seconds or (time.perf_counter() - started)
    try:
        value = json.loads(generation.text)
    except json.JSONDecodeError as exc:
        why = "output cut at max_tokens" if generation.finish_reason == "length" else f"invalid JSON ({exc.msg})"
        return StageOutput(stage=stage, raw=generation.text, error=why, generation=generation, seconds=seconds)
    return StageOutput(stage=stage, value=value, raw=generation.text, generation=generation, seconds=seconds)


def select_functions(engine: Engine, catalogue: Catalogue, ctx: CallingContext, *, max_calls: int = MAX_CALLS,
                     allow_none: bool = False) -> StageOutput:
    """Stage 1: a JSON list of function names (enum), from the concise listing only."""
    system = SELECTION_SYSTEM.format(listing=render_listing(catalogue))
    user = _with_demos(ctx, lambda d: f"Functions: {json.dumps(d.functions)}", "Functions:")
    out = _run(engine, "select", system, user, selection_schema(catalogue, max_calls, allow_none), SELECTION_MAX_TOKENS)
    if out.error is None:
        names = [n for n in out.value if isinstance(n, str)] if isinstance(out.value, list) else []
        out.value = [n for n in dict.fromkeys(names) if catalogue.function(n) is not None]
    return out


def typed_arguments(arguments: dict[str, Any], function: Function | None) -> dict[str, Any]:
    """A demonstration's values in the spec's types ("True" -> true), matching what the grammar lets the model write."""
    from prefcall.schemas.validation import coerce_value  # jsonschema: imported when demonstrations are shown

    if function is None:
        return dict(arguments)
    out = {}
    for name, value in arguments.items():
        fixed, problem = coerce_value(value, function.properties.get(name, {}))
        out[name] = value if problem else fixed
    return out


def _calls_for(demo: Demonstration, function: Function) -> str:
    name = function.name
    same = [typed_arguments(c.arguments, function) for c in demo.calls if c.name == name]
    if same:
        return f"Calls for {name}: {json.dumps(same)}"
    return "Calls: " + "; ".join(f"{c.name} {json.dumps(c.arguments)}" for c in demo.calls)


def generate_arguments(engine: Engine, function: Function, ctx: CallingContext, *, max_calls: int = MAX_CALLS,
                       joint: bool = False) -> StageOutput:
    """Stage 2: argument objects for one function, with only its spec in the prompt."""
    system = ARGUMENTS_SYSTEM.format(name=function.name, spec=render_spec(function)) + (JOINT_NOTE if joint else "")
    user = _with_demos(ctx, lambda d: _calls_for(d, function), f"Calls for {function.name}:")
    out = _run(engine, f"arguments:{function.name}", system, user, arguments_schema(function, max_calls, joint),
               ARGUMENTS_MAX_TOKENS + (96 if joint else 0))
    if out.error is None:
        tags, items = (out.value.get("tags", []), out.value.get("calls", [])) if joint else ([], out.value)
        out.value = {"tags": tags, "calls": [Call(name=function.name, arguments=a) for a in items if isinstance(a, dict)]}
    return out


def two_stage(engine: Engine, catalogue: Catalogue, ctx: CallingContext, *, max_calls: int = MAX_CALLS,
              allow_none: bool = False, joint: bool = False, functions: Sequence[str] | None = None) -> CallingResult:
    """FnCTOD: select functions (unless given), then one argument generation per selected function."""
    result = CallingResult()
    if functions is None:
        selection = select_functions(engine, catalogue, ctx, max_calls=max_calls, allow_none=allow_none)
        result.stages.append(selection)
        functions = selection.value or []
    result.functions = list(functions)
    for name in result.functions:
        stage = generate_arguments(engine, catalogue.function(name), ctx, max_calls=max_calls, joint=joint)
        result.stages.append(stage)
        if stage.error is None:
            result.calls += stage.value["calls"]
            result.tags += stage.value["tags"]
    return result


def one_stage(engine: Engine, catalogue: Catalogue, ctx: CallingContext, *, max_calls: int = MAX_CALLS,
              joint: bool = False) -> CallingResult:
    """Baseline: every function's spec in one prompt, calls generated in one pass."""
    specs = "\n".join(render_spec(f) for f in catalogue.functions)
    system = ONE_STAGE_SYSTEM.format(specs=specs) + (JOINT_NOTE if joint else "")
    def answer(d: Demonstration) -> str:
        typed = [{"name": c.name, "arguments": typed_arguments(c.arguments, catalogue.function(c.name))} for c in d.calls]
        return "Calls: " + json.dumps(typed)

    user = _with_demos(ctx, answer, "Calls:")
    out = _run(engine, "one-stage", system, user, one_stage_schema(catalogue, max_calls, joint),
               ARGUMENTS_MAX_TOKENS * 2 + (96 if joint else 0))
    result = CallingResult(stages=[out])
    if out.error is None:
        tags, items = (out.value.get("tags", []), out.value.get("calls", [])) if joint else ([], out.value)
        result.calls = [Call(name=i["name"], arguments=i.get("arguments") or {}) for i in items]
        result.tags = tags
        result.functions = list(dict.fromkeys(c.name for c in result.calls))
    return result


# -- stage 1 by scoring (ours) -------------------------------------------------------------------
# Small models answer the generated JSON list with a positional favourite (SmolLM2-135M: "GetBuses" for almost
# everything). Scoring every name as a continuation and removing each name's prior under a content-free dialogue
# ("calibrate before use", Zhao et al. 2021) removes both that favouritism and the bias against long names
# (log P of a multi-token name is a sum). "hybrid" adds a domain prior from the dialogue's words / embeddings.
SCORE_SYSTEM = (
    "You are an assistant that decides which API function to call for a user's request.\n"
    "Answer with the name of one function.\n\nFunctions:\n{listing}"
)
# Averaged, as in Zhao et al.: one content-free input alone carries its own quirks.
CONTENT_FREE_DIALOGUES = ("User: N/A", "User: [MASK]", "User: ")
# What a stored calibration depends on besides the model and the catalogue (see CalibrationFile).
CALIBRATION_FORMAT = hashlib.sha256(repr((CONTENT_FREE_DIALOGUES, SCORE_SYSTEM, 1)).encode()).hexdigest()[:16]
NONE_CANDIDATE = "None"  # scored only when the caller allows "no function fits"
DOMAIN_PRIOR_MASS = 0.9  # share of prior probability on the functions the dialogue's domain detection names


# Stage 1's evidence per candidate function (`FunctionScores.features`): the calibrated model score, the domain
# prior, the request's cosine to "name: description", the lexical evidence split by where the words come from
# (selection.DomainModel.parts), and whether a standing instruction of the user's profile is about the function
# (a request that could be for events or for travel, from a user whose instructions speak of events), weighed by
# how few of the catalogue's functions the profile speaks of (`profile_value`). A fitted
# SelectionRule weighs them (`prefcall fit --selection`, stored per model fingerprint); without one, the hand-set
# rule adds the model score and the prior, as the scored stage 1 always did.
SELECTION_FEATURES = ("model", "prior", "similarity", "name_words", "description_words", "parameters", "profile")
_EARLIER_FEATURES = 6  # a rule fitted before "profile" existed weighs it 0


def profile_value(functions: int, covered: int) -> float:
    """The "profile" feature of a function the user's standing instructions speak of: log(N / k), where they speak
    of k of the catalogue's N functions (0 for the others). If a request were for a covered function no more often
    than for any other, covered would say nothing; that it says more the fewer functions the profile covers is the
    shape of Bayes' rule (a boost of log(1 + aN / ((1 - a)k)) when a share a of requests is for covered functions).
    Instructions about one of twenty functions point at it; instructions about most of them say little (a user who
    wrote one for each of their tools), and about all of them, nothing."""
    return math.log(functions / covered) if 0 < covered <= functions else 0.0


class SelectionRule(BaseModel):
    """Weights over SELECTION_FEATURES; a function's score is their dot product with its features."""

    weights: list[float] = Field(min_length=len(SELECTION_FEATURES), max_length=len(SELECTION_FEATURES))

    @field_validator("weights", mode="before")
    @classmethod
    def _earlier_fit(cls, value: Any) -> Any:
        if isinstance(value, list) and len(value) == _EARLIER_FEATURES:
            return [*value, 0.0]
        return value

    def score(self, features: Sequence[float]) -> float:
        return float(sum(w * x for w, x in zip(self.weights, features)))


HAND_RULE = SelectionRule(weights=[1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])

# Whether any function fits the request at all: the request's best cosine with a function text, and the model's
# calibrated score of "None" against its best function (`relevance_features`). A fitted AbstentionRule weighs them
# (`prefcall fit --relevance`, stored per model fingerprint); without one, "None" competes in `combined` with the
# prior (NonePrior: fitted per model by `prefcall fit --relevance`, else HAND_NONE_PRIOR).
RELEVANCE_FEATURES = ("similarity", "none_margin")
NONE_MARGIN = RELEVANCE_FEATURES.index("none_margin")  # the model's score of "None" less the best function's


class LinearRule(BaseModel):
    """Refuse when bias + weights . features falls under `threshold`; a subclass says which features."""

    weights: list[float]
    threshold: float

    def score(self, features: Sequence[float]) -> float:
        return float(self.weights[0] + sum(w * x for w, x in zip(self.weights[1:], features)))

    def refuses(self, features: Sequence[float]) -> bool:
        return self.score(features) < self.threshold


class AbstentionRule(LinearRule):
    """Over RELEVANCE_FEATURES (fitted to keep a share of the tuning requests that a function fits, in every
    source)."""

    weights: list[float] = Field(min_length=len(RELEVANCE_FEATURES) + 1, max_length=len(RELEVANCE_FEATURES) + 1)


class DomainEvidence(BaseModel):
    """What the user's words say about each candidate, before the model: the log prior (selection's domain
    detection), the cosine to each function's text and the lexical evidence parts."""

    prior: list[float]
    cosines: list[float] | None = None
    parts: list[tuple[float, float, float]] = Field(default_factory=list)
    named: bool = False  # the user's words name a function outright (an input of the None prior)
    profile: list[float] = Field(default_factory=list)  # profile_value where a standing instruction is about it


class FunctionScores(BaseModel):
    """Per-function scores of one dialogue: raw log P(name), minus the content-free prior, plus the domain prior
    (`combined`, the hand-set rule). With a fitted rule, `fitted` holds its score of each function: whether no
    function fits is still decided by `combined` (the None candidate's prior is calibrated against it), and which
    function, by `fitted`."""

    names: list[str]
    raw: list[float]
    calibration: list[float]  # the content-free scores, smoothed (the calibration subtracted)
    content_free: list[float] = Field(default_factory=list)  # the same before smoothing (empty: uncalibrated)
    prior: list[float]  # log prior (all 0.0 without a domain prior)
    combined: list[float]
    features: list[list[float]] = Field(default_factory=list)  # per name, SELECTION_FEATURES
    fitted: list[float] | None = None
    refused: bool | None = None  # set by a fitted AbstentionRule: no function fits (None: `combined` decides)
    named: bool = False  # the user's words name a function outright (DomainEvidence.named)
    prompt_tokens: int = 0
    evaluated: int = 0
    reused: int = 0
    decoded: int = 0  # candidate tokens after the first (CandidateScores.decoded)
    seconds: float = 0.0

    def ranked(self) -> list[str]:
        if self.refused is not None:  # the abstention rule decided whether any function fits; the rest rank them
            scores = self.fitted if self.fitted is not None else self.combined
            order = [self.names[i] for i in sorted(range(len(self.names)), key=lambda i: -scores[i])
                     if self.names[i] != NONE_CANDIDATE]
            return [NONE_CANDIDATE, *order] if self.refused else [*order, NONE_CANDIDATE]
        scores = self._ranking_scores()
        return [self.names[i] for i in sorted(range(len(self.names)), key=lambda i: -scores[i])]

    def _ranking_scores(self) -> list[float]:
        """The scores `ranked` orders by where no abstention rule decided: `combined` where there is no `fitted` or
        "None" comes first by `combined`, else `fitted`."""
        if self.fitted is None:
            return self.combined
        first = self.names[max(range(len(self.names)), key=lambda i: self.combined[i])]
        return self.combined if first == NONE_CANDIDATE else self.fitted

    def best(self) -> str:
        return self.ranked()[0]

    def table(self) -> dict[str, dict[str, float]]:
        table = {n: {"raw": round(r, 3), "calibration": round(c, 3), "prior": round(p, 3), "combined": round(s, 3)}
                 for n, r, c, p, s in zip(self.names, self.raw, self.calibration, self.prior, self.combined)}
        for n, f in zip(self.names, self.fitted or []):
            table[n]["fitted"] = round(f, 3)
        if self.refused is not None and NONE_CANDIDATE in table:
            table[NONE_CANDIDATE]["refused"] = float(self.refused)
        return table

    def relevance_features(self) -> list[float] | None:
        """RELEVANCE_FEATURES of this request, or None without the "None" candidate or the cosines."""
        if NONE_CANDIDATE not in self.names or not self.features:
            return None
        others = [f for n, f in zip(self.names, self.features) if n != NONE_CANDIDATE]
        if not others:
            return None
        none = self.features[self.names.index(NONE_CANDIDATE)]
        return [max(f[2] for f in others), none[0] - max(f[0] for f in others)]

    def why_none(self) -> str:
        """Why stage 1 chose "None" (no function fits), in words for the answer's notes: the rule that decided and
        the scores it read (the ones `ranked` ordered by)."""
        ranked = [n for n in self.ranked() if n != NONE_CANDIDATE]
        closest = f"; the closest function {ranked[0]}" if ranked else ""
        if self.refused:
            return f"stage 1's fitted abstention rule found that no function fits{closest}"
        scores = dict(zip(self.names, self._ranking_scores()))
        best = f" at {scores[ranked[0]]:.2f}" if ranked else ""
        none = scores.get(NONE_CANDIDATE, float("nan"))
        return f"stage 1 scored \"None\" {none:.2f}, above every function{closest}{best}"

    def none_prior_inputs(self) -> tuple[float, float, float, bool] | None:
        """What the None prior is weighed against (`fit_relevance.fit_none_prior`): the None candidate's calibrated
        model score, the best function's `combined`, the request's best cosine and whether it names a function.
        "None" wins when its model score plus NonePrior.log_odds(cosine, named) passes the best function's."""
        if NONE_CANDIDATE not in self.names or not self.features:
            return None
        i = self.names.index(NONE_CANDIDATE)
        others = [j for j in range(len(self.names)) if j != i]
        if not others:
            return None
        return (self.features[i][0], max(self.combined[j] for j in others), max(self.features[j][2] for j in others),
                self.named)


def scoring_prompt(engine: Engine, catalogue: Catalogue, dialogue: str) -> Prompt:
    """Catalogue listing first (shared by every request and by the calibration prompts: KV reuse), dialogue last."""
    system = SCORE_SYSTEM.format(listing=render_listing(catalogue))
    return Prompt.chat(system, f"Dialogue:\n{dialogue}", prefix="Function:")


def candidate_names(catalogue: Catalogue, allow_none: bool = False) -> list[str]:
    return catalogue.names + ([NONE_CANDIDATE] if allow_none and NONE_CANDIDATE not in catalogue.names else [])


def content_free_scores(engine: Engine, catalogue: Catalogue, *, allow_none: bool = False,
                        only: Sequence[str] | None = None) -> list[float]:
    """Mean log P(name) over content-free dialogues: each name's prior, to subtract. Compute once per catalogue.
    `only`: score just these candidates (in this order) under the catalogue's listing."""
    names = list(only) if only is not None else candidate_names(catalogue, allow_none)
    totals = [0.0] * len(names)
    requests = [(scoring_prompt(engine, catalogue, dialogue), [f" {n}" for n in names])
                for dialogue in CONTENT_FREE_DIALOGUES]
    for scores in score_batch(engine, requests):
        totals = [t + s for t, s in zip(totals, scores.logprobs)]
    return [t / len(CONTENT_FREE_DIALOGUES) for t in totals]


class CalibrationFile:
    """Content-free scores on disk, one small JSON file per (model file, catalogue content, readers, None
    candidate, scoring prompt), so a restarted server answers its first request without the three calibration
    prompts. A file that is missing, unreadable or of another shape is recomputed; a write is atomic."""

    def __init__(self, data_dir: Path | None, info: Any, key: Sequence[Any]) -> None:
        self.path: Path | None = None
        if data_dir is None or info.backend == "fake":
            return
        stamp = [*file_signature(info.model_path), info.model_name, info.backend]
        digest = hashlib.sha256(json.dumps([CALIBRATION_FORMAT, stamp, list(key)], default=str).encode()).hexdigest()
        self.path = Path(data_dir) / "calibrations" / f"{digest[:32]}.json"

    def read(self) -> list[float] | None:
        if self.path is None:
            return None
        try:
            values = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if isinstance(values, list) and values and all(isinstance(v, (int, float)) for v in values):
            return [float(v) for v in values]
        return None

    def write(self, values: Sequence[float]) -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(list(values)), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            pass  # a read-only data folder: calibrate again next start


class NonePrior(BaseModel):
    """The "None" candidate's log prior relative to a flat one, from relevance evidence only: how close the request
    comes to the nearest function text (embedding cosine) and whether it names a function outright. Positive below
    `cosine`, rising by `slope` per unit of cosine, lowered by `named` when a function is named.
    `prefcall fit --relevance` fits it per model on the tune split (`fit_relevance.fit_none_prior`)."""

    cosine: float
    slope: float = Field(ge=0.0)
    named: float = Field(ge=0.0)

    def log_odds(self, max_cosine: Any, named: Any) -> Any:
        """For one request (a float and a bool) or for many at once (arrays, as the fit weighs them)."""
        return self.slope * (self.cosine - max_cosine) - self.named * named


# Without a fitted prior. Chosen by hand on dev slices disjoint from every reported item (BFCL irrelevance /
# simple_python items 100-199, NLSI dev 300-402): at 0.30 a None prior is positive for 48% of irrelevant requests,
# 1% of relevant BFCL requests and 7% of NLSI requests, before the model's own score.
HAND_NONE_PRIOR = NonePrior(cosine=0.30, slope=10.0, named=2.0)


def domain_log_prior(catalogue: Catalogue, dialogue: str, embedder: Any = None, *,
                     allow_none: bool = False, none_prior: NonePrior = HAND_NONE_PRIOR) -> list[float]:
    """log prior per candidate (see `domain_evidence`)."""
    return domain_evidence(catalogue, dialogue, embedder, allow_none=allow_none, none_prior=none_prior).prior


def domain_evidence(catalogue: Catalogue, dialogue: str, embedder: Any = None, *,
                    allow_none: bool = False, none_prior: NonePrior = HAND_NONE_PRIOR,
                    profile: Sequence[str] = ()) -> DomainEvidence:
    """log prior per candidate from instruction selection's dialogue-domain detection (lexical evidence from the
    catalogue's own vocabulary, plus dialogue/function-description cosine when an embedder is given).
    Detected functions share DOMAIN_PRIOR_MASS, the rest share the remainder; nothing detected: flat (all 0).
    Also the cosines and the lexical parts per candidate (zeros for the None candidate) and which functions the
    user's standing instructions (`profile`) are about (by their words, selection.instruction_domains; weighed by
    `profile_value`): the fitted rule's features."""
    model = DomainModel.build(catalogue)
    text = user_words(dialogue)
    cosines = None
    if embedder is not None and text:
        vectors = embedder.embed([text, *model.texts])
        cosines = vectors[1:] @ vectors[0]
    detected = set(dialogue_domains(model, text, cosines, SelectionConfig())) if text else set()
    names = candidate_names(catalogue, allow_none)
    functions = [n for n in names if catalogue.function(n) is not None]
    if not detected or len(detected) == len(functions):
        prior = [0.0] * len(names)
    else:
        inside = DOMAIN_PRIOR_MASS / len(detected)
        outside = (1.0 - DOMAIN_PRIOR_MASS) / (len(names) - len(detected))
        flat = 1.0 / len(names)  # log prior relative to flat, so "no evidence" and "flat" score alike
        prior = [math.log((inside if n in detected else outside) / flat) for n in names]
    named = bool(model.named(tokenize(text, drop_stop_words=False))) if text else False
    if allow_none and NONE_CANDIDATE in names and cosines is not None and len(cosines):
        prior[names.index(NONE_CANDIDATE)] = none_prior.log_odds(float(np.max(cosines)), named)
    parts = model.parts(tokenize(text, drop_stop_words=False)) if text else {}
    index = {n: i for i, n in enumerate(model.names)}
    about = {n for instruction in profile for n in instruction_domains(model, instruction, None, SelectionConfig())}
    about &= set(functions)
    covered = profile_value(len(functions), len(about))
    return DomainEvidence(
        prior=prior,
        cosines=[float(cosines[index[n]]) if n in index else 0.0 for n in names] if cosines is not None else None,
        parts=[parts.get(n, (0.0, 0.0, 0.0)) for n in names], named=named,
        profile=[covered if n in about else 0.0 for n in names])


def user_words(transcript: str) -> str:
    """The user's lines of a transcript: what the domain is detected from (earlier calls and agent turns would
    name domains the user did not ask for)."""
    lines = [line.split(":", 1)[1].strip() for line in transcript.splitlines() if line.startswith("User:")]
    return "\n".join(lines) if lines else transcript.strip()


def score_functions(engine: Engine, catalogue: Catalogue, dialogue: str, *, calibration: Sequence[float] | None,
                    prior: Sequence[float] | None = None, prior_weight: float = 1.0,
                    allow_none: bool = False, evidence: DomainEvidence | None = None,
                    rule: SelectionRule | None = None, abstention: AbstentionRule | None = None,
                    floor: float | None = None) -> FunctionScores:
    """log P(" name" | listing, dialogue) for every function in one prompt evaluation, calibrated and combined.
    `evidence` (domain_evidence) supplies the prior and the features; `rule`, a fitted rule, ranks the functions;
    `floor` bounds the calibration's gain (`smoothed`; CALIBRATION_FLOOR unless the model's fit has its own)."""
    names = candidate_names(catalogue, allow_none)
    scores = engine.score_candidates(scoring_prompt(engine, catalogue, dialogue), [f" {n}" for n in names])
    content_free = list(calibration) if calibration is not None else []
    calibration = smoothed(calibration, CALIBRATION_FLOOR if floor is None else floor) if calibration is not None \
        else [0.0] * len(names)
    if evidence is not None:
        prior = evidence.prior
    prior = list(prior) if prior is not None else [0.0] * len(names)
    combined = [r - c + prior_weight * p for r, c, p in zip(scores.logprobs, calibration, prior)]
    cosines = evidence.cosines if evidence is not None and evidence.cosines is not None else [0.0] * len(names)
    parts = evidence.parts if evidence is not None and evidence.parts else [(0.0, 0.0, 0.0)] * len(names)
    profile = evidence.profile if evidence is not None and evidence.profile else [0.0] * len(names)
    features = [[r - c, p, cos, *part, about] for r, c, p, cos, part, about in
                zip(scores.logprobs, calibration, prior, cosines, parts, profile)]
    fitted = None
    if rule is not None and rule != HAND_RULE:
        fitted = [rule.score(f) for f in features]
        if allow_none and NONE_CANDIDATE in names and catalogue.function(NONE_CANDIDATE) is None:
            others = [f for n, f in zip(names, fitted) if n != NONE_CANDIDATE]
            fitted[names.index(NONE_CANDIDATE)] = min(others, default=0.0) - 1.0  # decided by `combined` only
    result = FunctionScores(names=names, raw=list(scores.logprobs), calibration=calibration,
                            content_free=content_free, prior=prior,
                            combined=combined, features=features, fitted=fitted,
                            named=evidence.named if evidence is not None else False,
                            prompt_tokens=scores.usage.prompt_tokens,
                            evaluated=scores.usage.evaluated, reused=scores.usage.reused, decoded=scores.decoded,
                            seconds=scores.seconds)
    relevance = result.relevance_features() if abstention is not None and evidence is not None \
        and evidence.cosines is not None and catalogue.function(NONE_CANDIDATE) is None else None
    if relevance is not None:
        result.refused = abstention.refuses(relevance)
    return result


# Contextual calibration divides by each name's content-free probability; a name the model almost never says
# unprompted (Qwen2.5-1.5B gives "GetDoctors" e^-13.5) would gain 13 nats and win every medical request (it took
# 5 of 30 NLSI items from GetDentists). A floor on that probability bounds the gain; it is soft (log-sum-exp) so
# the order of the names is kept. This default was set by hand from the 1.5B's traces of reported NLSI items (25/30
# -> 30/30 for every floor from -6 to -12); `prefcall fit --selection` fits a model's own on its tune rows
# (`fit_selection.fit_floor`, stored with its fit), which replaces it for that model.
CALIBRATION_FLOOR = -10.0


def smoothed(calibration: Sequence[float], floor: float = CALIBRATION_FLOOR) -> list[float]:
    """log(p_content_free + e^floor) per candidate: contextual calibration whose gain is bounded by -floor."""
    return [float(np.logaddexp(c, floor)) for c in calibration]


def chained_functions(catalogue: Catalogue, instructions: Sequence[str], functions: Sequence[str]) -> list[str]:
    """Extra functions the standing instructions chain to: "If I ask for Travel, then also look at Hotels" adds
    GetHotels when Travel is already called (transitively). Unconditional "also" instructions about a domain
    that is called chain too; an instruction about an uncalled domain adds nothing."""
    model = DomainModel.build(catalogue)
    chosen = list(functions)
    links = []
    for text in instructions:
        _, consequence = split_condition(text)
        if not ALSO_RE.search(consequence):
            continue
        sources = set(instruction_domains(model, text, None, SelectionConfig()))
        targets = model.chain_targets(_tokens(consequence), sources)
        links.append((sources, targets))
    changed = True
    while changed:
        changed = False
        for sources, targets in links:
            if sources & set(chosen):
                for target in targets:
                    if target not in chosen:
                        chosen.append(target)
                        changed = True
    return chosen


def _tokens(text: str) -> list[str]:
    return tokenize(text, drop_stop_words=False)


def select_by_score(engine: Engine, catalogue: Catalogue, ctx: CallingContext, *, calibration: Sequence[float] | None,
                    embedder: Any = None, use_prior: bool = False, prior_weight: float = 1.0,
                    chain_instructions: Sequence[str] = (), max_calls: int = MAX_CALLS,
                    allow_none: bool = False, rule: SelectionRule | None = None,
                    abstention: AbstentionRule | None = None, none_prior: NonePrior = HAND_NONE_PRIOR,
                    floor: float | None = None) -> StageOutput:
    """Stage 1, scored: the best function (calibrated, optionally with the domain prior, or ranked by a fitted
    `rule`) plus the functions the standing instructions chain to. `value` is the list of names, `raw` the
    per-function score table (JSON)."""
    started = time.perf_counter()
    evidence = domain_evidence(catalogue, ctx.dialogue, embedder, allow_none=allow_none,
                               none_prior=none_prior, profile=ctx.profile) if use_prior else None
    scores = score_functions(engine, catalogue, ctx.dialogue, calibration=calibration, evidence=evidence,
                             prior_weight=prior_weight, allow_none=allow_none, rule=rule if use_prior else None,
                             abstention=abstention if use_prior else None, floor=floor)
    best = scores.best()
    functions = [] if best == NONE_CANDIDATE and catalogue.function(best) is None else [best]
    functions = chained_functions(catalogue, chain_instructions, functions)[:max_calls] if functions else []
    return StageOutput(stage="select", value=functions, raw=json.dumps(scores.table()), usage=scores,
                       seconds=time.perf_counter() - started)
