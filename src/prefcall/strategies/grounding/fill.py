"""Grounded argument filling: structure proposes, the model scores, a calibrated rule decides.

For one function and the text the caller sent (user turns, applicable instructions, earlier calls):
1. candidates per argument from its schema (`values`): spans, enum values, booleans, numbers (an enum option
   that is the argument's documented default and is written nowhere is none: the API assumes it without it);
2. structural evidence (`evidence`) ranks span and number candidates; arguments whose best candidate is far below
   the threshold (`prune`) are left out without asking the model;
3. the model scores the top candidates and `null` as the value of that argument, in one JSON-prefix prompt per
   argument (`{"city": ` + `"Calistoga"` / `null`); the prompt's system and user parts are shared by all
   arguments, so the engine re-evaluates only the argument's key;
4. a calibrated logistic rule per model (`GroundingWeights`) combines the structural log-odds and the model's
   log-odds of the candidate against null; a value is set when its probability passes 0.5, or when a written
   span's probabilities over the open arguments it is best for add up past 0.5 (the most probable of them);
5. one span of a source fills at most one argument (the more probable keeps it); a second value of the same
   argument is kept only when the text coordinates it with the first ("Italian or Mexican") and it passes too or
   the model prefers it to null; values joined only by "and" / "&" are one value, the span covering them
   ("pizza and pasta").
Values are grounded by construction: the model chooses among candidates read from the request, never writes one.
Where a model's fit turns proposals on (`GroundingWeights.propose`), a required span argument none of whose scored
candidates passes gets one more: the model writes the value it would give, and what it writes counts only as the
candidate it matches (up to case), which is then scored with the others.

Free arguments (arrays, objects, syntax strings: `values.argument_kind`) have no candidates to choose from: the
model writes them under the argument's grammar (or null), on the same prompt, and a value is kept only when every
part of it occurs in a source (`values.ungrounded_leaf`: "A(3,4)" may become [3, 4], never [5, 6]). An argument
the model leaves null, cuts at its token limit or writes from nowhere stays unset, so a required one is asked for.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from prefcall.engine.base import ChatMessage, Engine, Prompt, PromptUsage, score_batch
from prefcall.errors import GrammarError
from prefcall.retrieval.text import NEGATING_PREFIX as _NEGATING_PREFIX
from prefcall.retrieval.text import NEGATION as _NEGATION
from prefcall.retrieval.text import PROPER_NAME, RELATION_WORDS
from prefcall.retrieval.text import STOP_WORDS, split_identifier, stem
from prefcall.schemas.model import Function, Turn
from prefcall.schemas.render import grammar_schema, render_function_spec

from prefcall.strategies.grounding.evidence import (
    FEATURES,
    FeatureContext,
    Weights,
    argument_words,
    content_argument,
    features,
)
from prefcall.strategies.grounding.indifference import schema_default
from prefcall.strategies.grounding.misfit import find_misfit, pattern_value, shaped
from prefcall.strategies.grounding.temporal import CALENDAR_WORDS
from prefcall.strategies.grounding.temporal import align as align_temporal
from prefcall.strategies.grounding.temporal import expression_spans
from prefcall.strategies.grounding.temporal import argument_kind as temporal_kind
from prefcall.strategies.grounding.temporal import newest_unit as newest_temporal
from prefcall.strategies.grounding.temporal import outside as outside_temporal
from prefcall.strategies.grounding.values import (
    DETERMINERS,
    STREET_ADDRESS,
    ArgumentCandidates,
    Candidate,
    Source,
    argument_candidates,
    argument_kind,
    cuts_match,
    cuts_name,
    normal_text,
    origin_like,
    parse_number,
    turn_of,
    ungrounded_leaf,
    word_root,
    words,
)

TOP_K = 3
NULL = "null"
PROPOSE_POOL = 40  # the candidates (best by structure) a proposal chooses among
FREE_MAX_TOKENS = 96  # a free value longer than this is cut, and a cut value is never used
SYSTEM = (
    "You fill in the arguments of the API function {name} from a user's request. Each argument is either words "
    "copied exactly from the request or its standing instructions, or null when they do not give it.\n\n{spec}"
)
_JOINED = re.compile(r"^\s*(and|&)\s*$", re.I)  # no comma: "A, B and C" is a list
_COORDINATION = re.compile(r"^\s*(,\s*)?(or|and|,|/)\s*(maybe\s+|perhaps\s+)?$", re.I)


class GroundingWeights(BaseModel):
    """The structure weights and, per argument kind, the combination (fitted by `prefcall fit`: evaluation.fit)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    structure: Weights
    # (structure log-odds, model log-odds, bias[, length]): `length` weighs how many more tokens the value has than
    # null. A small model's log-odds of a value sum its tokens' log-probabilities, so a value of several words
    # ("the drugstore on Elm", "call my mother") loses to a one-word piece of it or to null for its length alone;
    # a fitted length weight gives that back (`prefcall fit`; three numbers: no length term).
    span: tuple[float, ...] = (1.0, 0.5, 0.0)
    # Numbers have no closing quote to heal, so their model log-odds keep the earlier scale: their own combination.
    number: tuple[float, ...] | None = None  # None: the span combination
    # A span with no capitalised word ("the guest bathroom", "oat milk latte") has a combination of its own: a small
    # model's log-odds of a common noun phrase run lower than a name's, and structure's evidence for it is weaker
    # (`is_phrase`; fitted per model by `prefcall fit`, kept only where it beats the span combination held out).
    phrase: tuple[float, ...] | None = None  # None: the span combination
    enum: tuple[float, float, float] = (2.0, 0.5, -1.0)  # (value written in the text, model log-odds, bias)
    boolean: tuple[float, float, float] = (2.0, 0.5, -1.5)  # (argument named in the text, model log-odds, bias)
    # (model log-odds, bias) for a flag the text does not name ("a salon for both men and women" of is_unisex):
    # the model may read it as true, never as false. None: a flag nobody named stays unset (a small model says
    # "true" to anything; fitted per model by `prefcall fit`).
    unnamed_flag: tuple[float, float] | None = None
    prune: float = -4.0  # structure log-odds under which the model is not asked
    # The probability at which a required argument still unset takes its most probable free span or number: the
    # API cannot be called without it, so the choice is between that value and asking the user; a request
    # without a value memory scores new values low ("near the train station" for a parking spot's location).
    # None: only values that reach 0.5 (fitted per model by `prefcall fit`: evaluation.fit.fit_required_floor).
    required_floor: float | None = None
    # The lead, in nats of the model's log-probability, by which a required span argument still unset after the
    # floor takes the scored candidate the model likes best over every other scored one: the model may put all of
    # a new common noun phrase's words under null ("the airport" at the odds of null for a parking spot) and yet
    # far above the sentence's other spans ("parking space", ten nats under). None: no such rule (fitted per model
    # by `prefcall fit` on the request's fills: evaluation.fit.fit_required_lead).
    required_lead: float | None = None
    # A written span that is probably some open argument's value (its probabilities summed over the arguments it
    # is best for pass 0.5) goes to the most probable of them (`_pool_spans`).
    pooled_spans: bool = True
    # A time or date argument's candidates respect the sources' temporal expressions (`temporal.align`): the whole
    # "half past 11 in the morning" is a candidate, its parts and spans running past it are not.
    temporal_units: bool = True
    use_model: bool = True
    # The model proposes: for a required span argument none of whose scored candidates passes, it writes the span
    # it would give, read back to one of the argument's PROPOSE_POOL best candidates (`_Scorer.propose`), and that
    # candidate is scored with the others. Structure sees the words, the model reads the sentence ("order dinner
    # pad thai from the diner": the dish is "pad thai", not "the diner").
    propose: bool = False

    @field_validator("span", "number", "phrase")
    @classmethod
    def _three_or_four(cls, value: tuple[float, ...] | None) -> tuple[float, ...] | None:
        if value is not None and len(value) not in (3, 4):
            raise ValueError("a span or number combination is (structure, model, bias) or (structure, model, bias, "
                             "length)")
        return value


_CAPITALS = FEATURES.index("capitals")


def is_phrase(features: Sequence[float]) -> bool:
    """A span candidate with no capitalised word (its evidence.FEATURES row): GroundingWeights.phrase's rows."""
    return features[_CAPITALS] == 0.0


def span_combination(weights: GroundingWeights, kind: str, features: Sequence[float]) -> Sequence[float]:
    """The combination a span or number candidate (with its feature row) is scored by."""
    if kind == "number":
        return weights.number if weights.number is not None else weights.span
    return weights.phrase if weights.phrase is not None and is_phrase(features) else weights.span


def combine(combination: Sequence[float], evidence: float, odds: float, length: float = 0.0) -> float:
    """The combination's log-odds: a * evidence + b * odds + c, plus d * length where it has a length weight."""
    a, b, c, *rest = combination
    return a * evidence + b * odds + c + (rest[0] * length if rest else 0.0)


class Choice(BaseModel):
    """What one argument was set to, with its probability and where it came from."""

    argument: str
    values: list[Any]
    texts: list[str] = Field(default_factory=list)
    sources: list[str] = Field(default_factory=list)  # source kind + ref of each value
    probability: float
    model_probability: float | None = None  # the model's share of this answer vs the other candidates and null


class FillResult(BaseModel):
    function: str
    choices: list[Choice] = Field(default_factory=list)
    considered: dict[str, float] = Field(default_factory=dict)  # argument -> best probability, set or not
    runner_up: Choice | None = None  # the most probable value left unset (below the threshold), if any
    unset: list[Choice] = Field(default_factory=list)  # every scored value left unset, most probable first
    decisions: list[float] = Field(default_factory=list)  # the model's probability of each answer it gave
    model_calls: int = 0
    prompt_tokens: int = 0
    evaluated: int = 0
    reused: int = 0
    decoded: int = 0  # candidate tokens after the first (CandidateScores.decoded) + free values' generated tokens
    ungrounded: dict[str, str] = Field(default_factory=dict)  # free argument -> why its generated value was not kept
    misfits: dict[str, str] = Field(default_factory=dict)  # argument -> what its schema says of the user's value

    @property
    def arguments(self) -> dict[str, list[Any]]:
        return {c.argument: c.values for c in self.choices}

    @property
    def least_confidence(self) -> float:
        """1 - geometric mean of the model's probability for each answer it gave (value or null)."""
        if not self.decisions:
            return 0.0
        return 1.0 - math.exp(sum(math.log(max(p, 1e-9)) for p in self.decisions) / len(self.decisions))


def transcript(turns: Sequence[Turn], instructions: Sequence[str] = ()) -> str:
    lines = [f"{'User' if t.role == 'user' else 'Assistant'}: {t.content}" for t in turns if t.content.strip()]
    text = "Request:\n" + "\n".join(lines)
    if instructions:
        text += "\nStanding instructions:\n" + "\n".join(f"- {i}" for i in instructions)
    return text


class RankRow(BaseModel):
    """One scored candidate as the combination saw it, for fitting the combination (`prefcall fit`): `evidence` is
    the structural log-odds (span, number) or the indicator (enum: written in the text; boolean: named), `odds`
    the model's log-odds against null (None when the model was not asked: pruned, or no model)."""

    function: str
    argument: str
    kind: str
    group: int  # one per argument ranking: candidates of one decision share it
    value: Any
    evidence: float
    odds: float | None
    # Span and number candidates: the structural features (evidence.FEATURES) every candidate had, for fitting the
    # structure weights; `ranked` is False for candidates that structure kept out of the top TOP_K (never scored).
    features: list[float] | None = None
    ranked: bool = True
    length: float | None = None  # how many more tokens the scored value has than null (None: not scored)
    request: bool = True  # False: a standing instruction read alone (its fill has no required floor)


Recorder = Callable[[RankRow], None]


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, x))))


class _Scorer:
    """The model's log-probabilities of candidate values for one argument, null included."""

    def __init__(self, engine: Engine | None, function: Function, context: str, result: FillResult) -> None:
        self.engine = engine
        self.system = SYSTEM.format(name=function.name, spec=render_function_spec(function))
        self.context = context
        self.result = result
        self.lengths: dict[str, np.ndarray] = {}  # argument -> each scored value's tokens minus null's

    def __call__(self, asks: dict[str, list[Any]]) -> dict[str, np.ndarray | None]:
        """Each argument's candidate values and null scored, all arguments at once (one batched evaluation where
        the engine can: their prompts differ only in the argument's name at the end)."""
        if self.engine is None or not asks:
            return {name: None for name in asks}
        requests = [(self._prompt(argument, ": "),
                     [json.dumps(v, ensure_ascii=False) for v in values] + [NULL])
                    for argument, values in asks.items()]
        # A value's closing quote is scored as any token it starts (`",`): see Engine.score_candidates.
        out: dict[str, np.ndarray | None] = {}
        for argument, scores in zip(asks, score_batch(self.engine, requests, heal_end=True)):
            self._count(scores.usage, scores.decoded)
            logprobs = np.asarray(scores.logprobs, dtype=np.float64)
            out[argument] = logprobs - np.logaddexp.reduce(logprobs)  # renormalised over the candidates and null
            counts = np.asarray(scores.token_counts, dtype=np.float64)
            self.lengths[argument] = counts[:-1] - counts[-1]
        return out

    def _prompt(self, argument: str, colon: str) -> Prompt:
        """The function's system part and the request, answered up to the argument's key and `colon`; every
        argument's prompt shares all but that key (`shared=1`)."""
        return Prompt((ChatMessage("system", self.system), ChatMessage("user", self.context)),
                      prefix="{" + json.dumps(argument) + colon, shared=1)

    def _count(self, usage: PromptUsage, decoded: int) -> None:
        """One model call's tokens, added to the fill's (decoded: scored candidates' or generated tokens)."""
        self.result.model_calls += 1
        self.result.prompt_tokens += usage.prompt_tokens
        self.result.evaluated += usage.evaluated
        self.result.reused += usage.reused
        self.result.decoded += decoded

    def propose(self, argument: str, candidates: Sequence[Candidate]) -> int | None:
        """The index of the candidate the model writes as the argument's value: one short greedy generation
        after the argument's key, read as JSON and kept only when it is one of the candidates' values up to case
        (the model chooses, it never adds a value: the candidate keeps its own writing); None for null, anything
        else, or without a model. Not under a grammar: a JSON grammar forbids the space a model writes before
        the value, which leaves it only null to write."""
        if self.engine is None or not candidates:
            return None
        prompt = self._prompt(argument, ":")
        budget = max(self.engine.count_tokens(json.dumps(c.value, ensure_ascii=False)) for c in candidates) + 2
        # The value ends where the next key or the object's end begins: the generation stops there.
        generation = self.engine.generate(prompt, max_tokens=budget, stop=('", "', '"}', '",\n'))
        self._count(generation.usage, generation.completion_tokens)
        value = _first_json(generation.text)
        if value is _NOTHING and generation.finish_reason == "stop":
            value = _first_json(generation.text + '"')  # the stop took the closing quote
        if value is None or value is _NOTHING or isinstance(value, (dict, list)):
            return None
        written = str(value).strip().casefold()
        return next((i for i, c in enumerate(candidates) if str(c.value).strip().casefold() == written), None)

    def write(self, argument: str, schema: dict[str, Any], sources: Sequence[Source]) -> Choice | None:
        """A free argument's value as the model writes it under the argument's grammar (or null); kept only
        when grounded in the sources (see the module docstring)."""
        if self.engine is None:
            return None
        # No space after the colon: the model writes `": [` as one token, and a prompt that ends in the space
        # it would have written leaves it off its usual path (Qwen2.5-Coder-1.5B wrote [-1, 2] for "A(3,4)"
        # after `{"pointA": ` and [3,4] after `{"pointA":`).
        prompt = self._prompt(argument, ":")
        grammar = {"anyOf": [grammar_schema(schema), {"type": "null"}]}
        try:
            generation = self.engine.generate(prompt, max_tokens=FREE_MAX_TOKENS, json_schema=grammar)
        except GrammarError as exc:
            self.result.ungrounded[argument] = str(exc)
            return None
        self._count(generation.usage, generation.completion_tokens)
        if generation.finish_reason == "length":
            self.result.ungrounded[argument] = f"cut at {FREE_MAX_TOKENS} tokens"
            return None
        try:
            value = json.loads(generation.text)
        except json.JSONDecodeError:
            self.result.ungrounded[argument] = "not JSON"
            return None
        if value is None:
            return None
        problem = ungrounded_leaf(value, schema, sources)
        if problem is not None:
            self.result.ungrounded[argument] = f"{problem} is in no source"
            return None
        probability = math.exp(generation.mean_logprob)
        return Choice(argument=argument, values=[value], texts=[generation.text.strip()],
                      sources=["model:written, every part found in the request"], probability=probability,
                      model_probability=probability)


def fill_arguments(engine: Engine | None, function: Function, sources: Sequence[Source], context: str,
                   features_ctx: FeatureContext, weights: GroundingWeights, *,
                   skip: Sequence[str] = (), record: Recorder | None = None,
                   write_free: bool = True, avoid: Collection[str] = ()) -> FillResult:
    """Choose each argument's value among grounded candidates (see the module docstring). `record` receives
    every scored candidate (RankRow), for fitting the combination; `write_free=False` leaves free arguments unset
    (a tag is made of spans, so the tagger has no use for a written value). `avoid`: written values (compared
    case- and punctuation-folded) that no argument takes unless it is itself where something leaves from
    (`values.origin_like`): a chained call's place is never the triggering call's origin."""
    result = FillResult(function=function.name)
    scorer = _Scorer(engine if weights.use_model else None, function, context, result)
    pending: list[tuple[float, str, list[tuple[float, Candidate, float | None]], ArgumentCandidates]] = []
    avoided = {normal_text(v) for v in avoid}
    pools = {name: argument_candidates(name, schema, sources)
             for name, schema in function.properties.items() if name not in skip}
    named = _named_enum_spans(pools, features_ctx)
    # Each span argument that holds a time or a date alone, and of those the function's only one of its kind.
    kinds = {a: k for a, sch in function.properties.items()
             if weights.temporal_units and argument_kind(sch) == "span" and (k := temporal_kind(a, sch))}
    temporal = {name: kinds[name] for name in pools if name in kinds}
    only = {name for name in temporal if list(kinds.values()).count(kinds[name]) == 1}
    numbered = _numbered_names(sources)
    # the words of every argument's name (each one's own among them): a span made of them says which argument
    # ("the city"), never a value
    every = {w for argument in function.properties for w in argument_words(argument, {}).split()}
    timed: dict[int, list[tuple[int, int]]] | None = None
    plans: dict[str, _Plan | None] = {}
    for name, pool in pools.items():
        schema = pool.schema
        if pool.kind == "enum" and (default := schema_default(schema)) is not None:
            # The documented default, written nowhere, says nothing the API does not assume without it ("(default:
            # Economy)"): the model's taste for it is no value of the user's.
            pool.candidates = [c for c in pool.candidates if c.grounded or str(c.value) != str(default)]
        if name in temporal:
            # A time argument with no date argument beside it takes the date the time is on ("8:30 tomorrow"), and
            # a date argument with no time argument the time of that day ("Saturday morning").
            other = "date" if temporal[name] == "time" else "time"
            dated = other not in kinds.values() and not any(
                sch.get("format") == "date-time" for sch in function.properties.values())
            pool.candidates = align_temporal(pool.candidates, sources, temporal[name], dated=dated)
        elif pool.kind == "span" and kinds and not content_argument(name, schema) \
                and schema.get("format") != "date-time":
            if timed is None:  # the function's time and date expressions, found once for all its arguments
                timed = expression_spans(sources, set(kinds.values()))
            pool.candidates = outside_temporal(pool.candidates, timed)
        if avoided and pool.kind == "span" and not origin_like(name, schema):
            pool.candidates = [c for c in pool.candidates if normal_text(c.text) not in avoided]
        if named and pool.kind == "span":
            pool.candidates = [c for c in pool.candidates if not _overlaps(c, named)]
        if pool.kind == "span":
            pool.candidates = [c for c in pool.candidates if not cuts_match(c) and not cuts_name(c)]
            own = set(argument_words(name, {}).split())
            pool.candidates = [c for c in pool.candidates
                               if not _names_argument(every, c.text) and not _labelled(own, c.text)]
            # A span that is an option another argument enumerates is that argument's ("a Dermatologist": the
            # doctor's type, never the doctor's name); a call's value stays where the call put it.
            pool.candidates = [c for c in pool.candidates if c.source is None or c.source.kind == "call"
                               or not features_ctx.another_options(name, c.text)]
            if _written_in_digits(name):  # a phone number or a postal code is written with digits, never a name
                pool.candidates = [c for c in pool.candidates if not c.grounded or _digits_only(c.text)]
            elif _a_count(name):  # number_of_tickets as a string: "2" or "two", never a name
                pool.candidates = [c for c in pool.candidates if not c.grounded or parse_number(c.text) is not None]
        if pool.kind in ("span", "number"):
            pool.candidates = [c for c in pool.candidates
                               if not _cuts_numbered_name(c, numbered, whole=pool.kind == "span")]
        if pool.kind == "number" and (unit := unit_of(name)) is not None:
            pool.candidates = [c for c in pool.candidates if not _counts_other(c, unit)]
        plans[name] = _plan(pool, features_ctx, weights)
    owners = _span_owners(pools, features_ctx)
    lms = scorer({name: [c.value for c in plan.top] for name, plan in plans.items() if plan and plan.ask})
    if weights.propose:
        # A required span argument none of whose scored candidates passes: the model proposes one among more of
        # them (an optional argument left unset is what most requests mean; a required one unset costs a question).
        required = set(function.required)
        proposed = [name for name, plan in plans.items()
                    if name in required and plan is not None and plan.ask and plan.structure is not None
                    and pools[name].kind == "span"
                    and not _passes(plan, lms.get(name), scorer.lengths.get(name), weights)
                    and _add_proposal(scorer, name, pools[name], plan)]
        if proposed:
            again = {name: [c.value for c in plan.top] for name in proposed if (plan := plans[name]) is not None}
            lms.update(scorer(again))
    for name, pool in pools.items():
        ranked = _rank(pool, plans[name], lms.get(name), features_ctx, weights, result,
                       None if record is None else _Rows(record, function.name, name, _row_kind(pool, plans[name])),
                       scorer.lengths.get(name))
        if ranked:
            result.considered[name] = ranked[0][0]
            pending.append((ranked[0][0], name, ranked, pool))
    # The most probable arguments claim their spans first; a span fills one argument.
    taken: list[tuple[Source | None, int, int]] = []
    for _, name, ranked, pool in sorted(pending, key=lambda p: -p[0]):
        if pool.kind == "enum":  # a value written twice can be two arguments' ("from checking into checking")
            ranked = [(p, _free_mention(c, name, taken, owners), m) for p, c, m in ranked]
        eligible = [(p, c, m) for p, c, m in ranked if p >= 0.5 and _free_for(c, name, taken, owners)]
        # A span the text gives this argument (its name written before it, "from") comes before the others.
        own = [e for e in eligible if owners.get(_span_key(e[1])) == name]
        chosen = _latest(own or eligible, sources)
        unit = _newest_unit(pool, sources, temporal[name]) if name in only else None
        if unit is not None and not _overlaps(unit, taken) and (
                chosen is None or (_said_last(chosen[1], sources) or -1) < (turn_of(unit.source) or 0)):
            # The function's one time (or date) argument, and the newest turn gives one time: that is its value,
            # in place of one an earlier turn gave.
            chosen = (max(0.5, next((p for p, c, _ in ranked if c.text == unit.text), 0.0)), unit, None)
        if chosen is None:
            continue
        probability, candidate, model_p = chosen
        if pool.kind == "span":
            candidate = _suffixed(candidate, pool)
        picks = [(probability, candidate)]
        if pool.kind == "span":
            # A span coordinated with the chosen one ("Italian or Mexican") is a value of the same argument by
            # structure; it is kept when it passes on its own or the model prefers it to null.
            scored = [m for _, _, m in ranked if m is not None]
            null_share = 1.0 - sum(scored) if scored else None
            # A bare comma also joins a place to its region ("Toronto, Canada"): there only a value that passes on
            # its own is a second value; "or" / "and" let the model's preference over null decide.
            for p, c, m in ranked:
                if (c is not candidate and _coordinated(candidate, c)
                        and (p >= 0.5 or (m is not None and null_share is not None and m > null_share
                                          and not _comma_only(candidate, c)))
                        and not _overlaps(c, taken) and not _overlaps(c, [(k.source, k.start, k.end)
                                                                          for _, k in picks])):
                    picks.append((p, c))
            picks = _joined(picks, pool, probability)
        for _, c in picks:
            if c.source is not None:
                taken.append((c.source, c.start, c.end))
        result.choices.append(_choice(name, [c for _, c in picks], probability, model_p))
    if weights.pooled_spans:
        _pool_spans(pending, result, taken)
    for name, schema in function.properties.items():
        if write_free and name not in skip and argument_kind(schema) == "free" \
                and (choice := scorer.write(name, schema, sources)):
            result.choices.append(choice)
    for choice in list(result.choices):
        # A code the user wrote for an enum, of its options' shape but none of them ("3x3" where the sizes are 4x6,
        # 5x7, 8x10), is never replaced by an option the user did not write (the model's guess "5x7"): it is asked
        # about below, by name. A word may be a synonym of an option ("huge" of "large"); a code is exact.
        schema = function.properties.get(choice.argument, {})
        if argument_kind(schema) == "enum" and all(source == "schema" for source in choice.sources):
            alike = [c for s in sources if s.kind == "user" for c in shaped(s, schema.get("enum") or [])]
            if len(alike) == 1 and not _overlaps(alike[0], taken):
                result.choices.remove(choice)
    chosen_names = {c.argument for c in result.choices}
    for name, schema in function.properties.items():
        # A value the user wrote that the schema does not allow is no candidate; it is set so that the post-check
        # asks about it by name instead of calling without it (`misfit`).
        if name in skip or name in chosen_names:
            continue
        if (found := find_misfit(function, name, schema, sources, taken=taken, avoid=avoided)):
            candidate, problem = found
            result.choices.append(_choice(name, [candidate], 0.5, None))
            result.misfits[name] = problem
        elif (code := pattern_value(function, name, schema, sources, taken=taken, avoid=avoided)):
            result.choices.append(_choice(name, [code], 0.5, None))
            chosen_names.add(name)
    chosen_names |= set(result.misfits)
    if weights.required_floor is not None or weights.required_lead is not None:
        chosen_names |= _required_floor(pending, result, taken, owners, set(function.required) - chosen_names,
                                        weights.required_floor, weights.required_lead)
    # What is left unset is what an instruction's reading may still take (grounded.tag_structured): a name keeps
    # its written credential there too ("Benjamin Sadoff, MD").
    left = [(ranked[0], name, pool) for _, name, ranked, pool in pending if name not in chosen_names]
    if left:
        (probability, candidate, model_p), name, pool = max(left, key=lambda t: t[0][0])
        candidate = _suffixed(candidate, pool) if pool.kind == "span" else candidate
        if not _overlaps(candidate, taken):
            result.runner_up = _choice(name, [candidate], probability, model_p)
    unset = [(p, name, _suffixed(c, pool) if pool.kind == "span" else c, m)
             for _, name, ranked, pool in pending if name not in chosen_names for p, c, m in ranked]
    unset = [(p, name, c, m) for p, name, c, m in unset if not _overlaps(c, taken)]
    result.unset = [_choice(name, [c], p, m) for p, name, c, m in sorted(unset, key=lambda t: -t[0])]
    order = list(function.properties)
    result.choices.sort(key=lambda c: order.index(c.argument))
    return result


def _newest_unit(pool: ArgumentCandidates, sources: Sequence[Source], kind: Literal["time", "date"]) -> Candidate | None:
    """The newest turn's one `kind` expression (`temporal.newest_unit`) for the function's only argument of that kind,
    when it is still one of the argument's candidates; None where the schema sets the value's form (a format or
    pattern: "today" is no ISO date)."""
    if pool.schema.get("format") or pool.schema.get("pattern"):
        return None
    unit = newest_temporal(sources, kind)
    if unit is None or not any(c.source is unit.source and c.start == unit.start for c in pool.candidates):
        return None
    return unit


def _latest(passing: list[tuple[float, Candidate, float | None]],
            sources: Sequence[Source]) -> tuple[float, Candidate, float | None] | None:
    """The value an argument takes among those that pass (most probable first): the one the user said last. A
    dialogue's later turn changes what an earlier one said ("Actually, make it 7 pm"; another restaurant), so a
    passing value of a later turn wins over a more probable one of an earlier turn or call; between values of one
    turn, or without turns (an instruction), the most probable."""
    if len(passing) < 2:
        return passing[0] if passing else None
    turns = [_said_last(c, sources) for _, c, _ in passing]
    known = [t for t in turns if t is not None]
    if not known or turns[0] is None or max(known) <= turns[0]:
        return passing[0]
    return passing[turns.index(max(known))]


def _said_last(candidate: Candidate, sources: Sequence[Source]) -> int | None:
    """The last dialogue turn that writes the candidate's words (`turn_of`): a value first read from an early turn
    and said again later counts as said later."""
    own = turn_of(candidate.source)
    if own is None or not candidate.text:
        return own
    pattern = re.compile(rf"(?<!\w){re.escape(candidate.text)}(?!\w)", re.I)
    later = [t for s in sources if (t := turn_of(s)) is not None and t > own and pattern.search(s.text)]
    return max(later, default=own)


def _choice(argument: str, candidates: list[Candidate], probability: float, model_p: float | None) -> Choice:
    return Choice(argument=argument, values=[c.value for c in candidates], texts=[c.text for c in candidates],
                  sources=[f"{c.source.kind}:{c.source.ref}" if c.source else "schema" for c in candidates],
                  probability=probability, model_probability=model_p)


_GROUPS = itertools.count(1)  # numbers the argument rankings a Recorder sees (thread-safe in CPython)


class _Rows:
    """Hands one argument's scored candidates to a Recorder, under one group number."""

    def __init__(self, record: Recorder, function: str, argument: str, kind: str) -> None:
        self.record, self.function, self.argument, self.kind = record, function, argument, kind
        self.group = next(_GROUPS)

    def __call__(self, value: Any, evidence: float, odds: float | None, features: np.ndarray | None = None,
                 ranked: bool = True, length: float | None = None) -> None:
        self.record(RankRow(function=self.function, argument=self.argument, kind=self.kind, group=self.group,
                            value=value, evidence=evidence, odds=odds, ranked=ranked, length=length,
                            features=None if features is None else [round(float(f), 5) for f in features]))


@dataclass
class _Plan:
    """What ranking one argument asks of the model: `top`, the candidates to score (span and number: the best by
    structure, `order` their indices in the pool, `structure` their structural logits; `matrix`, `logits` and
    `ranking` every candidate's features, logit and rank); `ask` is False where structure alone decides (pruned)."""

    top: list[Candidate]
    ask: bool = True
    structure: list[float] | None = None
    matrix: np.ndarray | None = None
    logits: np.ndarray | None = None
    ranking: list[int] = field(default_factory=list)
    order: list[int] = field(default_factory=list)
    unnamed: bool = False  # a flag no source names: only true can be read, by the unnamed_flag combination


def _passes(plan: _Plan, lm: np.ndarray | None, lengths: np.ndarray | None, weights: GroundingWeights) -> bool:
    """Does one of the plan's scored span candidates reach probability 0.5 under its span combination?"""
    if lm is None or plan.structure is None or plan.matrix is None:
        return True  # without the model's scores there is nothing a proposal could be scored by
    return any(combine(span_combination(weights, "span", plan.matrix[plan.order[i]]), s, float(lm[i] - lm[-1]),
                       float(lengths[i]) if lengths is not None else 0.0) >= 0
               for i, s in enumerate(plan.structure))


_NOTHING = object()


def _first_json(text: str) -> Any:
    """The JSON value the text opens with (after spaces), or _NOTHING."""
    try:
        return json.JSONDecoder().raw_decode(text.lstrip())[0]
    except json.JSONDecodeError:
        return _NOTHING


def _add_proposal(scorer: _Scorer, name: str, pool: ArgumentCandidates, plan: _Plan) -> bool:
    """The model's own choice among the argument's best PROPOSE_POOL candidates joins the plan's scored ones; True
    when it was not among them already."""
    assert plan.structure is not None and plan.logits is not None
    pool_order = plan.ranking[:PROPOSE_POOL]
    chosen = scorer.propose(name, [pool.candidates[i] for i in pool_order])
    if chosen is None or pool_order[chosen] in plan.order:
        return False
    index = pool_order[chosen]
    plan.order.append(index)
    plan.top.append(pool.candidates[index])
    plan.structure.append(float(plan.logits[index]))
    return True


def _row_kind(pool: ArgumentCandidates, plan: _Plan | None) -> str:
    """The kind a recorded row is fitted as: a flag nobody names has its own rule (`prefcall fit --flags`)."""
    return "unnamed_flag" if plan is not None and plan.unnamed else pool.kind


def _plan(pool: ArgumentCandidates, ctx: FeatureContext, weights: GroundingWeights) -> _Plan | None:
    """The candidates one argument's ranking scores with the model; None when nothing can be a value."""
    if not pool.candidates or pool.kind == "free":
        return None
    if pool.kind in ("span", "number"):
        matrix = features(ctx, pool.name, pool.schema, pool.candidates)
        logits = weights.structure.logits(matrix)
        ranking = [int(i) for i in np.argsort(-logits)]
        order = ranking[:TOP_K]
        if pool.kind == "span":
            # A span coordinated with one of the best ("Italian or Mexican") is scored with them: it may be a
            # second value of the argument even where structure ranks it lower (a sentence's first word).
            order += [i for i in ranking[TOP_K:] if any(_coordinated(pool.candidates[j], pool.candidates[i])
                                                        for j in order)][:TOP_K]
        structure = [float(logits[i]) for i in order]
        return _Plan([pool.candidates[i] for i in order], structure[0] >= weights.prune, structure, matrix, logits,
                     ranking, order)
    if pool.kind == "boolean" and not any(_named(pool, ctx, cand) for cand in pool.candidates):
        # A flag nobody mentioned stays unset: a small model will happily say "true" to anything, and a value
        # must come from the request or an instruction, never from the model's taste. A model fitted to read
        # paraphrases (weights.unnamed_flag) is asked, and only true can come of it.
        return None if weights.unnamed_flag is None else _Plan(list(pool.candidates), unnamed=True)
    return _Plan(list(pool.candidates))


def _rank(pool: ArgumentCandidates, plan: _Plan | None, lm: np.ndarray | None, ctx: FeatureContext,
          weights: GroundingWeights, result: FillResult,
          rows: _Rows | None = None, lengths: np.ndarray | None = None) -> list[tuple[float, Candidate, float | None]]:
    """(probability, candidate, model probability) best first, from the plan and the model's scores of its
    candidates (`lm`: log-probabilities of `plan.top` and null, None without a model; `lengths`: their tokens
    beyond null's); empty when nothing can be a value."""
    if plan is None:
        return []
    if plan.structure is not None:
        assert plan.matrix is not None and plan.logits is not None
        top, structure, matrix, order = plan.top, plan.structure, plan.matrix, plan.order
        if rows is not None:  # the candidates never scored, with their features (the structure fit's rows)
            kept = set(order if plan.ask else order[:1])
            for i in plan.ranking:
                if i not in kept:
                    rows(pool.candidates[i].value, float(plan.logits[i]), None, matrix[i], ranked=False)
        if not plan.ask:
            if rows is not None:
                rows(top[0].value, structure[0], None, matrix[order[0]])
            return [(_sigmoid(structure[0]), top[0], None)]
        out = []
        for i, (cand, s) in enumerate(zip(top, structure)):
            odds = float(lm[i] - lm[-1]) if lm is not None else 0.0
            length = float(lengths[i]) if lm is not None and lengths is not None else None
            if rows is not None:
                rows(cand.value, s, odds if lm is not None else None, matrix[order[i]], length=length)
            combination = span_combination(weights, pool.kind, matrix[order[i]])
            out.append((_sigmoid(combine(combination, s, odds, length or 0.0)), cand,
                        math.exp(lm[i]) if lm is not None else None))
        _record(result, lm)
        return sorted(out, key=lambda t: -t[0])
    _record(result, lm)
    a, b, c = weights.enum if pool.kind == "enum" else weights.boolean
    if plan.unnamed:
        assert weights.unnamed_flag is not None
        a, (b, c) = 0.0, weights.unnamed_flag
    out = []
    for i, cand in enumerate(pool.candidates):
        evidence = float(cand.grounded) if pool.kind == "enum" else _named(pool, ctx, cand)
        odds = float(lm[i] - lm[-1]) if lm is not None else 0.0
        if rows is not None:
            rows(cand.value, float(evidence), odds if lm is not None else None)
        if plan.unnamed and (lm is None or cand.value is not True):
            continue  # nothing unnamed turns a flag off, and without the model nothing unnamed is read
        out.append((_sigmoid(a * evidence + b * odds + c), cand, math.exp(lm[i]) if lm is not None else None))
    return sorted(out, key=lambda t: -t[0])


def _record(result: FillResult, lm: np.ndarray | None) -> None:
    if lm is not None:
        result.decisions.append(float(math.exp(lm.max())))


def _flag_words(argument: str, relations: bool = False) -> list[str]:
    """The words that name a flag: without relation verbs unless they are all it has (or `relations`), and never
    a function word other than those ("for" of good_for_kids names nothing in "If I ask for Travel")."""
    found = [w for w in argument_words(argument, {}).split()
             if len(w) > 2 and (w not in STOP_WORDS or w in RELATION_WORDS)]
    content = [w for w in found if w not in RELATION_WORDS]
    return found if relations and content else content or [w for w in found if w not in ("has", "is", "are")]


@dataclass(frozen=True)
class _Hit:
    """A word of the text that names a flag; `negated` when a prefix negates it ("unfurnished", "non-smoking")."""

    start: int
    end: int
    negated: bool = False


_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")


def _same_word(word: str, root: str) -> bool:
    """`word` is a form of the flag word whose root is `root`: the same root, or one root begins the other and the
    shorter has five letters or more ("delivered" for delivery, "pet" for pets, "alcoholic" for alcohol)."""
    own = word_root(word)
    if own == root:
        return True
    short, long = sorted((own, root), key=len)
    return len(short) >= 5 and long.startswith(short)


def _hits(argument: str, text: str, relations: bool = False) -> list[_Hit]:
    roots = [word_root(w) for w in _flag_words(argument, relations)]
    if not roots or not text:
        return []
    out = []
    names = _proper_names(text)
    for match in _WORD.finditer(text):
        word = match.group(0).lower()
        if any(start <= match.start() < end for start, end in names):
            continue  # "Family & Cosmetic Dentistry" is a dentist's name, not a word about cosmetic services
        if any(_same_word(word, root) for root in roots):
            out.append(_Hit(match.start(), match.end()))
        elif (prefix := _NEGATING_PREFIX.match(word)) and any(_same_word(word[prefix.end():], r) for r in roots):
            out.append(_Hit(match.start(), match.end(), negated=True))
    return out


_PROPER_NAME = re.compile(PROPER_NAME)  # "Family & Cosmetic Dentistry", "Cosmetic Dentistry Antioch Ca"


@functools.lru_cache(maxsize=256)
def _proper_names(text: str) -> tuple[tuple[int, int], ...]:
    """Where `text` writes proper names; each flag argument and candidate asks again of the same sources."""
    return tuple((m.start(), m.end()) for m in _PROPER_NAME.finditer(text))


def _negated(hit: _Hit, text: str) -> bool:
    """The mention says the flag is off: a negating prefix, or a negation in the words just before it."""
    return hit.negated or bool(_NEGATION.search(text[max(0, hit.start - 25):hit.start]))


def _named(pool: ArgumentCandidates, ctx: FeatureContext, candidate: Candidate) -> float:
    """Boolean evidence: the argument's words appear in a source; negated mentions support False."""
    texts = ctx.sources_text if hasattr(ctx, "sources_text") else ""
    hits = _hits(pool.name, texts)
    if not hits:
        return 0.0
    negated = any(_negated(h, texts) for h in hits)
    return 1.0 if (candidate.value is False) == negated else -1.0


def flag_mention(argument: str, text: str, max_gap: int = 3, *, negated: bool = False) -> str | None:
    """The words of `text` that name a boolean argument ("serves alcohol" for serves_alcohol): from the first
    mention of one of its words to the last one within `max_gap` words of it; None when nothing names it.
    `negated`: the mention that says the flag is off, with the negation that says so ("no pets", "unfurnished");
    None when no mention is negated."""
    if not _hits(argument, text):  # only relation verbs ("serves fish") name no flag
        return None
    hits = _hits(argument, text, relations=True)
    if negated:
        hits = hits[next((i for i, h in enumerate(hits) if _negated(h, text)), len(hits)):]
        if not hits:
            return None
    start, end = hits[0].start, hits[0].end
    if negated and not hits[0].negated:  # the negation before it: "no", "without", "doesn't"
        found = list(_NEGATION.finditer(text[max(0, start - 25):start]))
        start = max(0, start - 25) + found[-1].start()
    for hit in hits[1:]:
        if len(text[end:hit.start].split()) > max_gap:
            break
        end = hit.end
    return text[start:end]


def flag_value(argument: str, span: str) -> bool:
    """The value a tagged span gives a boolean argument: False where it says the flag is off ("no shuffle",
    "unfurnished" for furnished; a prefix counts only on the flag's own word), else True."""
    hits = _hits(argument, span, relations=True)
    return not any(_negated(h, span) for h in hits) if hits else not _NEGATION.search(span)


# ", MD", ", M.D.", ", CA": a short capitalised abbreviation a comma ties to a name ends it, before a clause goes on.
_SUFFIX_RE = re.compile(r",\s*(?:[A-Z]{2,4}|(?:[A-Z]\.){2,4})(?=$|[\s.,;:!?)\"'])")


# " - Santa Rosa", " - Retired": one to three capitalised words after a spaced dash, ending where the text or its
# clause does (punctuation or a lowercase word, never another capitalised word): a branch or qualifier of a name.
_BRANCH_RE = re.compile(r"\s+[-\u2013\u2014]\s+[A-Z][\w'.&]*(?:\s+[A-Z][\w'.&]*){0,2}(?=$|[.,;:!?)\"']|\s+[^A-Z\s])")


def _suffixed(candidate: Candidate, pool: ArgumentCandidates) -> Candidate:
    """The span with the determiner a common noun phrase is named with (`_determined`), and with the credentials
    or region abbreviation that follow it after commas ("Jay Bansal, MD", "Vancouver, BC", "David Quincy, M.D.,
    MPH") and then the branch a spaced dash adds to a name ("Access Dental - Santa Rosa", "Neil Fruman, MD -
    Retired"), each when that longer span is a candidate too: they are part of the
    name as written."""
    if candidate.source is None:
        return candidate
    candidate = _determined(candidate, pool)
    for pattern in (_SUFFIX_RE, _SUFFIX_RE, _BRANCH_RE):  # "David Quincy, M.D., MPH": credentials one by one
        if pattern is _BRANCH_RE and (not candidate.text[:1].isupper() or len(candidate.text.split()) < 2):
            break  # a branch follows a name of two words or more, not a common noun or a lone place name
        found = pattern.match(candidate.source.text, candidate.end)
        if found is None:
            continue
        end = found.end()
        candidate = next((c for c in pool.candidates if c.source is candidate.source and c.start == candidate.start
                          and c.end in (end, end - 1) and c.end > candidate.end), candidate)
    return candidate


def _determined(candidate: Candidate, pool: ArgumentCandidates) -> Candidate:
    """A common noun phrase with the definite determiner or possessive it is written with: "the airport", "my
    office", "the train station" name a place the user means, where "airport" names any (English usage: a common
    noun is named with its article). Only when the phrase ends there (the next word is punctuation, a function
    word or nothing: "the intermediate level" keeps "intermediate", the modifier of "level") and the longer span
    is a candidate too."""
    assert candidate.source is not None
    text = candidate.source.text
    if not candidate.text[:1].islower():
        return candidate
    before = words(text[:candidate.start])
    if not before or before[-1][0].lower() not in _DEFINITE or text[before[-1][2]:candidate.start].strip():
        return candidate
    after = text[candidate.end:]
    nxt = words(after)
    if nxt and not after[:nxt[0][1]].strip() and nxt[0][0].lower() not in STOP_WORDS:
        return candidate
    start = before[-1][1]
    return next((c for c in pool.candidates if c.source is candidate.source and c.start == start
                 and c.end == candidate.end), candidate)


_DEFINITE = frozenset("the my our your".split())


# Units of measure an argument's name can carry ("tip_percent", "hours", "supply_days", "distance_km"): English
# measurement words, no data set's vocabulary.
UNITS = frozenset("""percent percentage hour minute second day week month year night mile kilometer km meter metre
    foot feet inch pound lb kilogram kg gram dollar euro degree""".split())


def unit_of(argument: str) -> str | None:
    """The one unit of measure the argument's name carries, in its singular form; None for none or several."""
    found = {w.removesuffix("s") if w.removesuffix("s") in UNITS else w
             for w in split_identifier(argument).lower().split()} & UNITS
    return next(iter(found)) if len(found) == 1 else None


_NEXT_WORD = re.compile(r"\s+([A-Za-z][A-Za-z'-]*)")  # the word right after a value, only spaces between


def _counts_other(candidate: Candidate, unit: str) -> bool:
    """The number is written as a count of something else than `unit`: the word right after it is another unit
    ("four hours" is no tip in percent) or a plural noun ("two orders of it")."""
    following = _NEXT_WORD.match(candidate.source.text, candidate.end) if candidate.source is not None else None
    if following is None:
        return False  # nothing after it, or punctuation between ("15%", "20, please")
    word = following.group(1).lower()
    single = word.removesuffix("s")
    if single == unit or word == unit or word in STOP_WORDS or stem(single) == stem(unit):
        return False
    return single in UNITS or (word.endswith("s") and len(single) >= 3 and word.isalpha())


# Words of an argument's name that say its value is written with digits (phone_number, zip_code, postal_code): a
# span with a word that has none is no such value, whatever the model makes of it. So does "number" as the name's
# last word (account_number, flight_number), never a count ("number_of_tickets" may be "two").
DIGIT_NAMES = frozenset("phone telephone fax zip postal postcode".split())


def _written_in_digits(argument: str) -> bool:
    named = split_identifier(argument).lower().split()
    return bool(set(named) & DIGIT_NAMES) or named[-1:] == ["number"]


def _a_count(argument: str) -> bool:
    """The argument's name says it counts something ("number_of_tickets", "ticket_count", "numberOfRooms")."""
    named = split_identifier(argument).lower().split()
    return named[:2] == ["number", "of"] or named[-1:] == ["count"]


def _digits_only(text: str) -> bool:
    """Written with digits, every word a number or a code: "408-555-0199", "+1 (408) 555-0199", "SW1A 1AA",
    "555-CALL-NOW", "UA 123"; not "zip 94086" or a name with a number after it."""
    words = text.split()
    return any(re.search(r"\d", w) for w in words) and all(
        re.search(r"\d", w) or (w.isalpha() and w.isupper()) for w in words)


def _names_argument(own: set[str], text: str) -> bool:
    """The span is only words of the argument's own name (`own`: "cuisine" for cuisine, "the name" for
    restaurant_name; "the doctor's name" and "the name of a doctor" for doctor_name: a possessive and "of" join
    the name's words), or of another argument's of the function ("the city" or "my city" for address_of_location
    beside city, "airlines" for fare beside airlines): it says which argument, never its value. Of the 6,500 gold
    strings of NLSI dev, the bundled corpora and BFCL, none is only such words but a variable name BFCL writes
    for its own argument ("my_data" of data)."""
    plain = re.sub(r"['\u2019]s\b", "", text.lower())
    found = [w for w in re.findall(r"[a-z0-9]+", plain) if w not in DETERMINERS and w != "of"]
    return bool(found) and set(found) <= own


_NUMBERED = re.compile(r"(?<![.!?:\n])\s+([A-Z][\w'&-]*)\s+(\d+)(?=$|[\s,.;:!?)])(?:\s+([a-z]+))?")


def _numbered_names(sources: Sequence[Source]) -> dict[int, list[tuple[int, int]]]:
    """(start, end) of each name written with a number, per source (`id`): a number right after a capitalised word
    inside a sentence ("Pier 39", "Terminal 2", "Studio 54") where no noun it counts follows it, and a street
    address with its house number ("9 Pine Road": never "Pine Road" alone). A calendar word before the number makes
    a date ("May 5"), a noun after it a count ("for Anna 3 people"), and a call's values stay as they are."""
    return {id(source): [(m.start(1), m.end(2)) for m in _NUMBERED.finditer(source.text)
                         if m.group(1).lower() not in CALENDAR_WORDS and (not m.group(3) or m.group(3) in STOP_WORDS)]
            + [(m.start(), m.end()) for m in STREET_ADDRESS.finditer(source.text)]
            for source in sources if source.kind != "call"}


def _cuts_numbered_name(candidate: Candidate, names: dict[int, list[tuple[int, int]]], whole: bool) -> bool:
    """The candidate holds part of a name written with a number (`_numbered_names`): the number alone ("39" is no
    count of passengers) or the name without it ("Pier"); for a span argument (`whole`) the whole name is a value."""
    if candidate.source is None or candidate.start < 0:
        return False
    return any(candidate.start < end and start < candidate.end
               and not (whole and candidate.start <= start and candidate.end >= end)
               for start, end in names.get(id(candidate.source), []))


_COPULA = re.compile(r"\s(?:is|are|was|were)\s")


def _labelled(own: set[str], text: str) -> bool:
    """The span holds its argument's name and the "is" that gives the value ("the restaurant is Nopa" of "the name
    of the restaurant is Nopa"): a sentence about the value, never the value."""
    label = _COPULA.split(text, maxsplit=1)
    return len(label) == 2 and _names_argument(own, label[0])


def _overlaps(candidate: Candidate, taken: list[tuple[Source | None, int, int]]) -> bool:
    if candidate.source is None:
        return False
    return any(s is candidate.source and candidate.start < e and st < candidate.end for s, st, e in taken)


def _between(first: Candidate, other: Candidate) -> str | None:
    """The text between two spans of one source (None for spans of different sources or none)."""
    if first.source is None or other.source is not first.source:
        return None
    a, b = (first, other) if first.start < other.start else (other, first)
    return a.source.text[a.end:b.start]


def _comma_only(first: Candidate, other: Candidate) -> bool:
    """The two spans are joined by a comma and no coordinating word."""
    gap = _between(first, other)
    return gap is not None and gap.strip() == ","


def _pool_spans(pending: list[tuple[float, str, list[tuple[float, Candidate, float | None]], ArgumentCandidates]],
                result: FillResult, taken: list[tuple[Source | None, int, int]]) -> None:
    """A span fills at most one argument, so "it is this argument's value" are exclusive readings of one span,
    and their probabilities add up to the probability that it is a value at all. "a spot in Walnut Creek"
    against city 0.39, street_address 0.28 and restaurant_name 0.18: a value (0.85), and the city's. Spans are
    taken greedily, the most probable value first; only written spans of arguments still open count, and each
    argument counts for its best span that is still free."""
    chosen = {c.argument for c in result.choices}
    while True:
        groups: dict[tuple[int, int, int], list[tuple[float, str, Candidate, float | None, ArgumentCandidates]]] = {}
        for _, name, ranked, pool in pending:
            if name in chosen or pool.kind not in ("span", "number"):
                continue
            best = next(((p, c, m) for p, c, m in ranked if not _overlaps(c, taken)), None)
            if best is not None and best[1].source is not None:
                p, c, m = best
                groups.setdefault((id(c.source), c.start, c.end), []).append((p, name, c, m, pool))
        if not groups:
            return
        group = max(groups.values(), key=lambda g: sum(t[0] for t in g))
        if sum(t[0] for t in group) < 0.5:
            return
        p, name, candidate, m, pool = max(group, key=lambda t: t[0])
        candidate = _suffixed(candidate, pool) if pool.kind == "span" else candidate  # "Jay Bansal, MD" as written
        result.choices.append(_choice(name, [candidate], p, m))
        chosen.add(name)
        taken.append((candidate.source, candidate.start, candidate.end))


def _required_floor(pending: list[tuple[float, str, list[tuple[float, Candidate, float | None]], ArgumentCandidates]],
                    result: FillResult, taken: list[tuple[Source | None, int, int]],
                    owners: dict[tuple[int, int, int], str], unset: set[str], floor: float | None,
                    lead: float | None = None) -> set[str]:
    """Each required span or number argument still unset (`unset`) takes its most probable free written value when
    it reaches `floor` (GroundingWeights.required_floor), the most probable argument first; a span argument that
    none reaches takes the scored candidate the model puts `lead` nats or more above every other scored one
    (GroundingWeights.required_lead), when it is free; returns those set."""
    done: set[str] = set()
    for _, name, ranked, pool in sorted(pending, key=lambda t: -t[0]):
        if name not in unset or pool.kind not in ("span", "number"):
            continue
        best = next(((p, c, m) for p, c, m in ranked if c.source is not None and _free_for(c, name, taken, owners)),
                    None)
        if best is None or floor is None or best[0] < floor:
            best = _leading(ranked, lead) if pool.kind == "span" and lead is not None else None
            if best is None or best[1].source is None or not _free_for(best[1], name, taken, owners):
                continue
        p, candidate, m = best
        candidate = _suffixed(candidate, pool) if pool.kind == "span" else candidate
        result.choices.append(_choice(name, [candidate], p, m))
        taken.append((candidate.source, candidate.start, candidate.end))
        done.add(name)
    return done


def _leading(ranked: list[tuple[float, Candidate, float | None]], lead: float
             ) -> tuple[float, Candidate, float | None] | None:
    """The scored candidate whose model log-probability is `lead` or more above every other scored candidate's
    (their odds against null differ by as much: null's term cancels); None when there is none, or fewer than two
    were scored."""
    scored = sorted(((math.log(m), (p, c, m)) for p, c, m in ranked if m is not None and m > 0),
                    key=lambda t: -t[0])
    if len(scored) < 2 or scored[0][0] - scored[1][0] < lead:
        return None
    return scored[0][1]


# Words between an argument's name and its value that keep the name attached: "account type is checking".
_NAME_TO_VALUE = frozenset("is are was be should would will to : = -".split())


def _free_mention(candidate: Candidate, name: str, taken: list[tuple[Source | None, int, int]],
                  owners: dict[tuple[int, int, int], str]) -> Candidate:
    """An enum value's candidate carries its first mention; where another argument took or owns that one ("into
    their checking account" is the recipient's), a later mention of the same words that is free is this
    argument's ("from my checking account")."""
    if candidate.source is None or not candidate.text or _free_for(candidate, name, taken, owners):
        return candidate
    for match in re.finditer(r"\b" + re.escape(candidate.text) + r"\b", candidate.source.text, re.I):
        other = Candidate(candidate.value, match.group(), candidate.source, match.start(), match.end())
        if match.start() != candidate.start and _free_for(other, name, taken, owners):
            return other
    return candidate


def _free_for(candidate: Candidate, name: str, taken: list[tuple[Source | None, int, int]],
              owners: dict[tuple[int, int, int], str]) -> bool:
    """May `name` take this candidate: its span is not taken, and no other argument owns it (`_span_owners`)?"""
    return not _overlaps(candidate, taken) and owners.get(_span_key(candidate), name) == name  # type: ignore[arg-type]


def _span_key(candidate: Candidate) -> tuple[int, int, int] | None:
    return None if candidate.source is None else (id(candidate.source), candidate.start, candidate.end)


_CLAUSE_BREAK = re.compile(r"[,.;!?()\n]")


def _clause_before(candidate: Candidate, tokens: list[tuple[str, int, int]] | None = None) -> list[str]:
    """The words of the span's clause before it, lowercased: a comma, a sentence end or a bracket ends the clause
    ("a 15 percent tip, one order": "one" follows no "tip"). `tokens`: the source's `words`, when known."""
    assert candidate.source is not None
    text, end = candidate.source.text, candidate.start
    out: list[str] = []
    for word, start, stop in reversed([t for t in (tokens or words(text)) if t[2] <= candidate.start]):
        if _CLAUSE_BREAK.search(text[stop:end]):
            break
        out.append(word.lower())
        end = start
    return out[::-1]


def _name_run(tokens: list[str], name_words: set[str], size: int, glue: frozenset[str] = frozenset()
              ) -> tuple[int, int]:
    """How the argument's name is written right before a span, given the words of its clause before it
    (`_clause_before`): (its content words read back from the span, over at most two linking words such as "is"
    and the name's own function words, "check in"; its content words not written there). (0, size) when the name
    is not there."""
    i = len(tokens) - 1
    while i >= 0 and len(tokens) - 1 - i < 2 and tokens[i] in _NAME_TO_VALUE:
        i -= 1
    found: set[str] = set()
    while i >= 0 and (tokens[i] in name_words or tokens[i] in glue):
        if tokens[i] in name_words:
            found.add(tokens[i].removesuffix("s"))
        i -= 1
    return len(found), size - len(found)


# Words between "from" and the value it marks: "from my checking account", "from the airport".
_FROM_GAP = frozenset("my our your their his her its the a an".split())


def _preposition(tokens: list[str]) -> str | None:
    """The word before a span, given the words of its clause before it, over at most two determiners ("from my
    checking account": "from")."""
    i = len(tokens) - 1
    while i >= 0 and len(tokens) - 1 - i < 2 and tokens[i] in _FROM_GAP:
        i -= 1
    return tokens[i] if i >= 0 else None


def _span_owners(pools: dict[str, ArgumentCandidates], ctx: FeatureContext) -> dict[tuple[int, int, int], str]:
    """Spans that several arguments of the function can take, given to the one whose name the text writes right
    before it most fully ("my preferred recipient account type is savings": recipient_account_type, not
    account_type; "my preferred account type is checking": account_type, whose name is written whole); where no
    name is written, a span after "from" goes to the one argument that names where something leaves from
    (`values.origin_like`: "from my checking account" is the account the money leaves). Other spans are nobody's
    (the ranking decides)."""
    # a number's name follows it ("a 15 percent tip", "3 bedrooms"): numbers take no part
    claimed: dict[tuple[int, int, int], tuple[Candidate, set[str]]] = {}
    for name, pool in pools.items():
        if pool.kind in ("span", "enum"):
            for candidate in pool.candidates:
                key = _span_key(candidate)
                if key is not None and candidate.end > candidate.start:
                    claimed.setdefault(key, (candidate, set()))[1].add(name)
    shared = {key: value for key, value in claimed.items() if len(value[1]) > 1}
    if not shared:
        return {}
    names: dict[str, tuple[set[str], int, frozenset[str]]] = {}
    for name in {n for _, held in shared.values() for n in held}:
        # Function words of a name ("in" of check_in, "of" of number_of_seats) name nothing: "in Denver" is a city;
        # nor do words that name the function ("my preferred city for a Dentist is X" is no dentist's name).
        words_, function_words = ctx.name_words(name)
        request = {stem(w) for w in function_words}
        parts = split_identifier(name).lower().split()
        glue = frozenset(w for w in parts if w in STOP_WORDS or stem(w) in request)
        names[name] = ({w for w in words_ if w not in STOP_WORDS and stem(w) not in request},
                       len({w.removesuffix("s") for w in parts if w not in glue}), glue)
    origins = {name for name in names if origin_like(name, pools[name].schema)}
    tokens: dict[int, list[tuple[str, int, int]]] = {}
    owners = {}
    for key, (candidate, held) in shared.items():
        assert candidate.source is not None
        source_words = tokens.setdefault(id(candidate.source), words(candidate.source.text))
        before = _clause_before(candidate, source_words)
        claims = [((run, -missing), name) for name in held
                  for run, missing in [_name_run(before, *names[name])]]
        ranked = sorted(claims, reverse=True)
        if ranked[0][0][0] > 0 and ranked[0][0] > ranked[1][0]:
            owners[key] = ranked[0][1]
        elif ranked[0][0][0] == 0:
            leaving = [name for name in held if name in origins]
            if len(leaving) != 1:
                continue
            word = _preposition(before)
            if word == "from":
                owners[key] = leaving[0]
            elif word in ("to", "into") and len(held) == 2:  # the other one of a pair: where it goes
                owners[key] = next(name for name in held if name != leaving[0])
    return owners


def _named_enum_spans(pools: dict[str, ArgumentCandidates],
                      ctx: FeatureContext) -> list[tuple[Source | None, int, int]]:
    """Where an enum value is written right after its argument's own name ("my preferred event type is Music"):
    the instruction names the argument, so no string argument takes that span ("category")."""
    return [(c.source, c.start, c.end) for name, pool in pools.items() if pool.kind == "enum"
            for c in pool.candidates if c.source is not None and ctx.cue(name, c) > 0]


def _joined(picks: list[tuple[float, Candidate]], pool: ArgumentCandidates,
            probability: float) -> list[tuple[float, Candidate]]:
    """Values joined only by "and" / "&" name one thing ("pizza and pasta", "Dr. Keller and Dr. Burk", "rock and
    roll"): the span that covers them is the one value, when it is a candidate. Alternatives ("Italian or
    Mexican"), lists ("A, B and C") and values of separate instructions stay one call each."""
    if len(picks) < 2:
        return picks
    ordered = sorted((c for _, c in picks), key=lambda c: c.start)
    if any(not _JOINED.match(_between(a, b) or "") for a, b in zip(ordered, ordered[1:])):
        return picks
    first, last = ordered[0], ordered[-1]
    covering = next((c for c in pool.candidates if c.source is first.source and c.start == first.start
                     and c.end == last.end), None)
    return picks if covering is None else [(probability, covering)]


def _coordinated(first: Candidate, other: Candidate) -> bool:
    """Two spans of one source joined only by a coordinator ("Italian or Mexican", "A, B and C")."""
    gap = _between(first, other)
    return gap is not None and bool(_COORDINATION.match(gap))
