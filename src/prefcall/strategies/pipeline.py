"""parse_request: dialogue + standing instructions + catalogue -> calls, a question, or a refusal.

Steps (each switchable per request through PipelineConfig, for ablations):
1. instruction selection (`strategies.selection.select_instructions`, or the caller's `applicable`);
2. FC-ICL demonstrations (hybrid retrieval + reranker);
3. FnCTOD calling (two-stage, or one-stage for comparison); stage 1 either generates the JSON list of names
   (FnCTOD, `function_selection="generate"`) or scores every name, calibrated, optionally with a domain prior
   ("score" / "hybrid", used by `full`), plus the functions the applicable instructions chain to;
4. TAPS tagging: off / always (ext-tag) / joint (tags and calls in one pass) / gated (uncertainty gate);
5. post-checks against the catalogue (repair/drop, ask for missing required arguments).

Named configurations mirror TAPS's table plus ours: default, ext-tag, joint-tag, taps, fnctod-full (FnCTOD
generation with every TAPS step), full (grounded calling: strategies.grounded; the server's default).
"""

from __future__ import annotations

import copy
import hashlib
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from prefcall.engine.base import LOCAL, Embedder, Engine, Generation, PromptUsage, Scope, ScopedEngine
from prefcall.errors import StoreError, ValidationError
from prefcall.tagging.tags import TaggedInstruction
from prefcall.retrieval.text import tokenize
from prefcall.schemas.model import Call, Catalogue, Function, Turn, as_dialogue, render_dialogue
from prefcall.schemas.state import DialogueState, user_turn_index
from prefcall.storage import fits
from prefcall.storage.demos import DemoStore
from prefcall.strategies import fnctod, grounded, model_check, relevance, shortlist, statements
from prefcall.strategies.fcicl import DemoQuery, DemoRetriever, HeuristicReranker, Reranker, ScoredDemo
from prefcall.strategies.grounding.values import Source, accepted_offers
from prefcall.strategies.pipeline_models import DEFAULT_CONFIG, ParseResult, PipelineConfig, Trace, get_config
from prefcall.strategies.postcheck import post_check
from prefcall.strategies.preferences import apply_preferences
from prefcall.strategies.selection import DomainModel, select_instructions
from prefcall.strategies.taps_gate import default_threshold, gate_mismatch, uncertainty
from prefcall.strategies.taps_tagger import TagExamples, TagResult, check_tagging, tag_instruction

_Rule = TypeVar("_Rule", bound=BaseModel)  # a stored part of a model's fit (`Pipeline._fitted`)


class _Meter:
    """Accumulates token usage and model calls of everything one parse does."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace

    def scoring(self, s: fnctod.FunctionScores) -> None:
        t = self.trace
        t.prompt_tokens += s.prompt_tokens
        t.evaluated += s.evaluated
        t.reused += s.reused
        t.decoded += s.decoded
        t.model_calls += 1

    def generation(self, g: Generation) -> None:
        t = self.trace
        t.prompt_tokens += g.usage.prompt_tokens
        t.evaluated += g.usage.evaluated
        t.reused += g.usage.reused
        t.completion_tokens += g.completion_tokens
        t.model_calls += 1

    def tag(self, r: TagResult) -> None:
        t = self.trace
        t.prompt_tokens += r.prompt_tokens
        t.evaluated += r.evaluated
        t.reused += r.reused
        t.completion_tokens += r.completion_tokens
        t.decoded += r.decoded
        t.model_calls += 1

    def time(self, step: str, started: float) -> None:
        self.trace.timings[step] = self.trace.timings.get(step, 0.0) + time.perf_counter() - started


# Content-free calibrations kept in memory: whole catalogues, and single functions of large (shortlisted) ones.
CALIBRATION_CACHE_SIZE = 4096
_SPEAKER_RE = re.compile(r"^(User|Agent|Assistant|System):", re.M)


def transcript(dialogue: list[Turn] | str) -> str:
    """Turns rendered FnCTOD-style; a string already written as 'User: ...' lines is kept as is."""
    if isinstance(dialogue, str) and _SPEAKER_RE.match(dialogue.strip()):
        return dialogue.strip()
    return render_dialogue(as_dialogue(dialogue))


def _as_tagged(items: Iterable[str | TaggedInstruction]) -> list[TaggedInstruction]:
    return [i if isinstance(i, TaggedInstruction) else TaggedInstruction(instruction=str(i)) for i in items]


def with_state(turns: list[Turn], state: DialogueState) -> list[Turn]:
    """The dialogue with `state` in place of the calls its assistant turns carry: the state's calls on the
    assistant turn just before the last user turn (what the filler and stage 1 read as earlier calls), or on an
    assistant turn of their own there when the user spoke last twice."""
    plain = [t.model_copy(update={"calls": []}) if t.calls else t for t in turns]
    calls = state.calls()
    if not calls:
        return plain
    last = max((i for i, t in enumerate(plain) if t.role == "user"), default=len(plain))
    if last > 0 and plain[last - 1].role == "assistant":
        return [*plain[:last - 1], plain[last - 1].model_copy(update={"calls": calls}), *plain[last:]]
    return [*plain[:last], Turn(role="assistant", content="", calls=calls), *plain[last:]]


def _keep_active(functions: list[str], active: str | None, catalogue: Catalogue, turns: Sequence[Turn],
                 notes: list[str]) -> list[str]:
    """Stage 1's functions, with the conversation's `active` one in place of the one stage 1 put first unless the
    user's new turn names that one more than the active one (its name, or description words unique enough:
    DomainModel.named, with two adjacent words also read as one). A word both share ("find restaurants" while
    reserving at a restaurant) is no evidence for a switch: it names the two alike. A proposal the new turn accepts
    is part of it ("Shall I book a table there?" / "Yes, please")."""
    if active is None or not functions or functions[0] == active or catalogue.function(active) is None:
        return functions
    last = max((i for i, t in enumerate(turns) if t.role == "user"), default=None)
    new = "" if last is None else turns[last].content
    if last and last - 1 in accepted_offers(turns):
        new = f"{turns[last - 1].content} {new}"
    tokens = tokenize(new, drop_stop_words=False)
    # Two adjacent words also as one: "round trip" names SearchRoundtripFlights, "one way" SearchOnewayFlight.
    named = DomainModel.build(catalogue).named([*tokens, *(a + b for a, b in zip(tokens, tokens[1:]))])
    if named.get(functions[0], 0.0) > named.get(active, 0.0):
        return functions
    notes.append(f"stage 1: kept {active}, the conversation's function: the new turn does not name "
                 f"{functions[0]}, which scored first, more than it")
    return [active, *(f for f in functions[1:] if f != active)]


class Pipeline:
    """Composes the strategies; thread-safe as long as the engine is (the tag cache is locked).

    One pipeline serves every caller; `scoped(scope)` is the view one request uses (see there)."""

    def __init__(self, engine: Engine, embedder: Embedder | None = None, demos: DemoStore | None = None, *,
                 tag_examples: TagExamples | None = None, reranker: Reranker | None = None,
                 data_dir: Any = None, tag_cache_size: int = 4096) -> None:
        self.engine = engine
        self.embedder = embedder
        self.retriever = DemoRetriever(demos, embedder) if demos is not None else None
        self.tag_examples = tag_examples
        self.reranker = reranker or HeuristicReranker()
        self.data_dir = data_dir  # where calibration.json lives; None: Settings().data_dir
        self._tag_cache: OrderedDict[tuple[str, str, str, str | None], TagResult] = OrderedDict()
        self._tag_cache_size = tag_cache_size
        self._calibration: OrderedDict[tuple[str, str, str, bool], list[float]] = OrderedDict()
        self._lock = threading.Lock()
        self.demos = demos
        self._memories = grounded.MemoryCache()
        self._weights: grounded.GroundingWeights | None = None
        self._rule: fnctod.SelectionRule | None = None
        self._abstention: tuple[fnctod.AbstentionRule | None] | None = None
        self._none_prior: fnctod.NonePrior | None = None
        self._floor: float | None = None
        self._check: tuple[model_check.CheckRule | None] | None = None
        self._fit: tuple[fits.Fit | None] | None = None  # the model's fit, read once (`fit`)
        self.record: grounded.Recorder | None = None  # `prefcall fit` collects the filler's scored candidates
        self.scope = LOCAL

    def scoped(self, scope: Scope) -> Pipeline:
        """This pipeline for one caller. Every model call carries `scope` (whose KV state it may reuse);
        demonstrations are those of `scope.user` (the local user's on stdio) and the shared seeded ones; the tag
        cache is keyed by the user and the calibration cache by who may read the catalogue (`scope.shared`), so
        one user's requests never answer from, or show the state of, a cache another user's text filled.
        Caches, indexes and weights are the parent's (keyed, not copied): the fitted rules are read here, once, on
        the parent, not by every request's view."""
        self.grounding_weights()
        self.selection_rule()
        self.abstention_rule()
        self.none_prior()
        self.calibration_floor()
        self.check_rule()
        view = copy.copy(self)
        view.engine = ScopedEngine(self.engine, scope)
        view.scope = scope
        return view

    # -- public ------------------------------------------------------------------------
    def tag(self, instruction: str, catalogue: Catalogue, config: PipelineConfig) -> TagResult:
        """Tag one standing instruction the way `parse` would with `config` (mode, cache key, validation)."""
        return self._tag_one(TaggedInstruction(instruction=instruction), catalogue, config,
                             _Meter(Trace()))

    def parse(self, dialogue: list[Turn] | str, instructions: Sequence[str] | Sequence[TaggedInstruction],
              catalogue: Catalogue, config: PipelineConfig, *, applicable: list[str] | None = None,
              exclude_demo_ids: set[str] | frozenset[str] = frozenset(),
              state: DialogueState | None = None) -> ParseResult:
        """The calls for the dialogue's last user turn, and the conversation's state after it (`result.state`).
        `state`, the state a host got back with the previous turn, stands for the calls of earlier turns: the
        answer is the one the same dialogue with those calls on its assistant turns gets (`with_state`)."""
        turns = grounded.split_turns(dialogue)
        if state is not None:
            turns = with_state(turns, state)
        previous = state if state is not None else DialogueState.from_turns(turns)
        # A turn of a conversation about one of the catalogue's functions is about the catalogue: a follow-up
        # ("Leaving from Denver") names no function, and refusing it would drop the conversation.
        continuing = config.allow_refuse and previous.active is not None
        # A new turn says little of what it is about ("Yes, please", "Is it expensive?"): the conversation's
        # function stays unless the new turn names another one (`_keep_active`), whether the host sent the state
        # back or the earlier calls on the assistant turns (both give the same answer).
        result = self._parse(turns if state is not None else dialogue, instructions, catalogue,
                             config.model_copy(update={"allow_refuse": False}) if continuing else config,
                             applicable=applicable, exclude_demo_ids=exclude_demo_ids, active=previous.active)
        if continuing:
            result.notes.append(f"no refusal: the conversation is about {previous.active} (its state)")
        turn = max(user_turn_index(turns), previous.turn + 1 if state is not None else 0)
        made = result.calls if result.decision in ("call", "ask") else []
        result.state = previous.updated(made, turn, result.provenance)
        return result

    def _parse(self, dialogue: list[Turn] | str, instructions: Sequence[str] | Sequence[TaggedInstruction],
               catalogue: Catalogue, config: PipelineConfig, *, applicable: list[str] | None,
               exclude_demo_ids: set[str] | frozenset[str], active: str | None = None) -> ParseResult:
        result = ParseResult(config=config.name)
        meter = _Meter(result.trace)
        started = time.perf_counter()
        if config.filling == "grounded":
            self._parse_grounded(dialogue, _as_tagged(instructions), catalogue, config, applicable,
                                 frozenset(exclude_demo_ids), result, meter, active)
            meter.time("total", started)
            return result
        text = transcript(dialogue)
        chosen, _ = self._select(text, _as_tagged(instructions), catalogue, config, applicable, meter)
        result.instructions_used = [i.instruction for i in chosen]
        pool = self._demo_pool(text, result.instructions_used, catalogue, config, exclude_demo_ids, meter)

        if config.tagging == "always":
            tagged = self._tag_all(chosen, catalogue, config, meter, result)
            calling = self._call(text, tagged, catalogue, config, pool, meter, result, "generate_tagged")
            result.tagged = any(t.status == "ok" for t in result.tags)
        else:
            plain = [i.instruction for i in chosen]
            calling = self._call(text, plain, catalogue, config, pool, meter, result, "generate",
                                 joint=config.tagging == "joint")
            result.tagged = config.tagging == "joint"
            first = uncertainty(calling.call_generations)
            result.uncertainty = first
            result.least_confidence = first["least_confidence"]
            if config.tagging == "gated":
                calling = self._gate(text, chosen, catalogue, config, pool, meter, result, calling)
        if config.tagging == "joint":
            result.tags = [check_tagging(_untag(t), t, catalogue) for t in calling.tags]
        if config.tagging == "always":
            result.uncertainty = uncertainty(calling.call_generations)
            result.least_confidence = result.uncertainty["least_confidence"]

        self._finish(result, calling, catalogue, config, meter)
        meter.time("total", started)
        return result

    def stage_one(self, dialogue: list[Turn] | str, catalogue: Catalogue, config: PipelineConfig,
                  profile: Sequence[str] = ()) -> fnctod.StageOutput:
        """Stage 1 alone, as `parse` runs it with `config` for a user whose standing instructions are `profile`
        (none selected, so no chained functions): which function the request is for, with the per-function score
        table (`usage`: FunctionScores when scored)."""
        turns = grounded.split_turns(dialogue)
        wishes = statements.read_profile(profile, catalogue).wishes if config.profile_statements else list(profile)
        ctx = fnctod.CallingContext(dialogue=render_dialogue(turns), instructions=[], profile=wishes)
        return self._select_functions(catalogue, ctx, config, ParseResult(config=config.name), _Meter(Trace()))

    def stage_view(self, dialogue: list[Turn] | str, catalogue: Catalogue,
                   profile: Sequence[str] = ()) -> model_check.StageView:
        """What a fitted check and clarify's draft read of stage 1 (`stage_one` as parse_request runs it with
        refusals allowed), for a tool that runs no stage 1 of its own (clarify): the margin of "None" over the best
        function (None where stage 1 does not weigh "None": no embedder's cosines, or a generated selection) and
        the function chosen."""
        stage = self.stage_one(dialogue, catalogue, get_config(DEFAULT_CONFIG, allow_refuse=True), profile)
        features = stage.usage.relevance_features() if isinstance(stage.usage, fnctod.FunctionScores) else None
        chosen = [name for name in (stage.value or [])[:1] if catalogue.function(name) is not None]
        return model_check.StageView(features[fnctod.NONE_MARGIN] if features else None, chosen)

    def check_for(self, dialogue: list[Turn] | str, catalogue: Catalogue, profile: Sequence[str] = ()
                  ) -> tuple[model_check.CheckRule | None, Callable[[], model_check.StageView] | None]:
        """What another tool (clarify) needs to judge relevance by this model's fitted check as parse_request does:
        the check (None without one) and a call that runs stage 1 for this request (`stage_for`: the function
        stage 1 chose, which clarify drafts and the check asks about, and its "None" margin)."""
        check = self.check_rule()
        if check is None:
            return None, None
        return check, self.stage_for(dialogue, catalogue, profile)

    def stage_for(self, dialogue: list[Turn] | str, catalogue: Catalogue, profile: Sequence[str] = ()
                  ) -> Callable[[], model_check.StageView]:
        """A call that runs stage 1 for this request (`stage_view`): what clarify drafts by, given it."""
        return lambda: self.stage_view(dialogue, catalogue, profile)

    # -- grounded ----------------------------------------------------------------------
    def _parse_grounded(self, dialogue: list[Turn] | str, instructions: list[TaggedInstruction], catalogue: Catalogue,
                        config: PipelineConfig, applicable: list[str] | None, exclude: frozenset[str],
                        result: ParseResult, meter: _Meter, active: str | None = None) -> None:
        turns = grounded.split_turns(dialogue)
        users = "\n".join(f"User: {t.content}" for t in turns if t.role == "user" and t.content)
        texts = [i.instruction for i in instructions]
        profile = statements.read_profile(texts, catalogue) if config.profile_statements else None
        chosen, domains = self._select(users, instructions, catalogue, config, applicable, meter)
        chosen = _without_records(chosen, users, profile, result)
        result.instructions_used = [i.instruction for i in chosen]
        grounder = self._grounder(catalogue, exclude)

        started = time.perf_counter()
        ctx = fnctod.CallingContext(dialogue=render_dialogue(turns), instructions=result.instructions_used,
                                    profile=profile.wishes if profile is not None else texts)
        selection = self._select_functions(catalogue, ctx, config, result, meter)
        meter.time("select_functions", started)
        if isinstance(selection.usage, fnctod.FunctionScores):
            meter.scoring(selection.usage)
        result.raw.append(selection.raw)
        if selection.error:
            result.status, result.decision = "parse_error", "error"
            result.errors.append(f"select: {selection.error}")
            return
        result.functions = _keep_active(list(selection.value or []), active, catalogue, turns, result.notes)
        if domains is not None and result.functions and result.functions[0] not in domains:
            # The selector read the request as about other functions than stage 1 chose ("anything exciting going
            # on?": travel, where stage 1 chose events): the instructions that apply are the chosen function's.
            chosen, _ = self._select(users, instructions, catalogue, config, applicable, meter,
                                     domains=result.functions[:1])
            chosen = _without_records(chosen, users, profile, result)
            used = [i.instruction for i in chosen]
            if used != result.instructions_used:
                result.notes.append(f"instructions selected again for {result.functions[0]}, the function stage 1 "
                                    f"chose (the request's words pointed to {', '.join(domains) or 'none'})")
                result.instructions_used = used
                if isinstance(selection.usage, fnctod.FunctionScores):
                    result.functions = fnctod.chained_functions(catalogue, used,
                                                                result.functions[:1])[:config.max_calls]

        started = time.perf_counter()
        sources = grounded.user_sources(turns)
        context = grounded.transcript(grounded.value_turns(turns))
        drafts, confidences, unwritten = [], [], []
        # A scored stage 1 returns the request's function, then the functions standing instructions chain to it:
        # those take no value the first call took as where it leaves from (a hotel after a flight from Boston to
        # Miami is in Miami).
        origins: list[str] = []
        chained = isinstance(selection.usage, fnctod.FunctionScores)
        for position, name in enumerate(result.functions):
            function = catalogue.function(name)
            if function is None:
                continue
            follows = chained and position > 0
            filled = grounder.fill(function, sources, context, avoid=origins if follows else (), chained=follows)
            if position == 0:
                origins = grounded.origins_of(function, filled)
            self._count(meter, filled)
            unwritten += [f"unset {name}.{argument}: the model's value was not kept ({why})"
                          for argument, why in filled.ungrounded.items()]
            confidences.append(1.0 - filled.least_confidence)
            drafts.append(grounded.with_indifference(grounded.draft_from_fill(filled), function,
                                                     [t.content for t in turns if t.role == "user"]))
        meter.time("fill", started)
        unsupported = grounded.unsupported(drafts, catalogue, users)  # before preferences add their values
        gave_required = grounded.fills_required(drafts, catalogue)

        preferences = []
        if chosen and drafts:
            started = time.perf_counter()
            for item in chosen:
                tag = self._tag_one(item, catalogue, config, meter, grounder, prefer=result.functions)
                result.tags.append(tag)
                if tag.status != "ok":
                    result.errors.append(f"tagging {item.instruction!r} invalid: {'; '.join(tag.reasons)}")
                    continue
                preference = grounded.preference_of(tag, catalogue)
                if preference is not None:
                    preferences.append(preference)
            meter.time("tagging", started)
            result.tagged = bool(preferences)
        facts = profile.facts if profile is not None else []
        preferences = statements.whole_fact_values(preferences, facts, catalogue)
        applied = apply_preferences(drafts, preferences, catalogue, facts={f.instruction for f in facts})
        if profile is not None:
            for used in statements.resolve_back_reference(applied.drafts, profile.records, users, catalogue,
                                                          _record_reader(grounder), _record_functions(grounder,
                                                                                                      catalogue)):
                result.instructions_used.append(used)
                result.notes.append(f"what the request refers back to from the record {used!r}")
            for used in statements.fill_from_facts(applied.drafts, facts, catalogue):
                if used not in result.instructions_used:
                    result.instructions_used.append(used)
                result.notes.append(f"a required argument from the profile's fact {used!r}")
        result.skipped = applied.skipped
        result.provenance = grounded.provenance_of(applied.drafts)
        result.confidence = min(confidences) if confidences else 0.0
        result.least_confidence = 1.0 - result.confidence if confidences else None
        started = time.perf_counter()
        checked = post_check(grounded.calls_of(applied.drafts), catalogue)
        result.calls, result.missing, result.question = checked.calls, checked.missing, checked.question
        result.notes += [f"{n.action} {n.call}: {n.reason}" for n in checked.notes] + unwritten
        result.decision = checked.decision
        if result.decision == "refuse" and not result.functions and isinstance(selection.usage, fnctod.FunctionScores):
            result.notes.append(f"refuse: the request is not about the catalogue ({selection.usage.why_none()})")
        if config.allow_refuse and config.refuse_unfilled and result.decision == "ask" and unsupported:
            # Nothing the user wrote fills any required argument and nothing names the function: the request is
            # not about it, so asking for its arguments would be the wrong question.
            result.notes.append(f"refuse {', '.join(result.functions)}: the request names none of them and "
                                "gives none of their required arguments")
            result.calls, result.missing, result.question, result.decision = [], [], None, "refuse"
        meter.time("post_check", started)
        checked_answer = result.decision in ("call", "ask") if config.relevance_scope == "all" else \
            result.decision == "ask" and not gave_required
        decided = isinstance(selection.usage, fnctod.FunctionScores) and selection.usage.refused is not None
        if config.allow_refuse and config.ask_relevance and checked_answer and not decided:
            started = time.perf_counter()
            scores = selection.usage if isinstance(selection.usage, fnctod.FunctionScores) else None
            self._refuse_off_topic(turns, catalogue, result, meter, scores)
            meter.time("ask_relevance", started)

    def _refuse_off_topic(self, turns: list[Turn], catalogue: Catalogue, result: ParseResult,
                          meter: _Meter | None = None, scores: fnctod.FunctionScores | None = None) -> None:
        """An answer for functions the request is not about becomes a refusal (strategies.relevance): the user's
        words are compared with the name and description of every function of the catalogue, against the
        embedder's fitted threshold; the request is refused only when none clears it. With `relevance_scope`
        "all" every call and ask is checked, whatever the filler found (the threshold is fitted low enough to keep
        requests worded far from their function: "Get me to Paris tomorrow"); "unfilled_asks" reads only asks that
        fill no required argument. Without an embedder or a fitted threshold, the answer stands. A model with a
        fitted CheckRule (strategies.model_check) is also asked whether the closest function, and the one stage 1
        chose, can do what the request asks (and, where the rule reads them, whether the message asks for anything
        at all: model_check.MESSAGE_QUESTIONS); the rule weighs its answers with the embedder's score (a rule fitted
        `embedder_first` refuses what the embedder's rule refuses without asking; one fitted `stage_one` also reads
        stage 1's "None" margin from `scores`, and without it the answer stands)."""
        # Every function of the catalogue, not only the ones stage 1 chose: a request that another function fits
        # is about the catalogue (stage 1 may have chosen wrong), and refusing it would cost a real request.
        words = "\n".join(t.content for t in turns if t.role == "user" and t.content)
        check = self.check_rule()
        if check is None:
            found = relevance.unrelated(self.embedder, words, catalogue.functions)
            if found is None:
                return
            why = found.describe()
        else:
            stage = scores.relevance_features() if scores is not None else None
            usage = PromptUsage()
            found_check = model_check.verdict(self.engine, self.embedder, check, words, catalogue.functions,
                                              result.functions[:1], usage,
                                              lambda: model_check.StageView(
                                                  stage[fnctod.NONE_MARGIN] if stage else None, []))
            if found_check is not None and meter is not None:
                meter.trace.model_calls += found_check.asked
                meter.trace.prompt_tokens += usage.prompt_tokens
                meter.trace.evaluated += usage.evaluated
                meter.trace.reused += usage.reused
            if found_check is None:
                return
            if not found_check.refused:  # the model's answers kept it (only a refusal skips asking): say why
                result.notes.append(f"kept: the request is about the catalogue ({found_check.why})")
                return
            why = found_check.why
        self._refuse(result, why)

    @staticmethod
    def _refuse(result: ParseResult, why: str) -> None:
        result.notes.append(f"refuse {', '.join(result.functions)}: the request is not about them ({why})")
        result.calls, result.missing, result.question, result.decision = [], [], None, "refuse"

    def fit(self) -> fits.Fit | None:
        """The fit `prefcall fit` made for this model (the user's, else a shipped one), by its fingerprint (a
        model file's hash; a served model's id, template and tokenizer: storage.fits); None if never fitted. Read
        once per pipeline: every fitted part (grounding, stage 1, the None prior, the refusal rule) comes from it."""
        if self._fit is None:
            self._fit = (fits.load(fits.engine_fingerprint(self.engine, self._data_dir()), self._data_dir()),)
        return self._fit[0]

    def grounding_weights(self) -> grounded.GroundingWeights:
        """The filler's weights: the shipped structure with the model's fitted combination, else the default."""
        if self._weights is None:
            fit = self.fit()
            self._weights = grounded.load_weights(self.engine.info.model_name,
                                                  fitted=fit.grounding if fit is not None else None)
        return self._weights

    def _grounder(self, catalogue: Catalogue, exclude: frozenset[str]) -> grounded.Grounder:
        weights = self.grounding_weights()
        owner = self.scope.user
        memory = (self._memories.get(f"{catalogue.name}@{owner}", self.demos.all(catalogue.name, owner=owner))
                  if self.demos is not None else None)
        return grounded.Grounder(self.engine, self.embedder, weights, memory, exclude, self.record)

    @staticmethod
    def _count(meter: _Meter, filled: grounded.FillResult) -> None:
        trace = meter.trace
        trace.prompt_tokens += filled.prompt_tokens
        trace.evaluated += filled.evaluated
        trace.reused += filled.reused
        trace.decoded += filled.decoded
        trace.model_calls += filled.model_calls

    # -- steps -------------------------------------------------------------------------
    def _select(self, text: str, instructions: list[TaggedInstruction], catalogue: Catalogue, config: PipelineConfig,
                applicable: list[str] | None, meter: _Meter,
                domains: Sequence[str] | None = None) -> tuple[list[TaggedInstruction], list[str] | None]:
        """The instructions that apply, and the functions the selector took the request to be for (None where no
        selector ran: the caller's `applicable`, or every instruction). `domains`: those functions, known."""
        started = time.perf_counter()
        try:
            if applicable is not None:
                known = {i.instruction: i for i in instructions}
                return [known.get(a) or TaggedInstruction(instruction=a) for a in applicable], None
            if not config.select_instructions:
                return instructions, None
            found = select_instructions(text, [i.instruction for i in instructions], catalogue, self.embedder,
                                        domains=domains)
            keep = set(found.selected_texts)
            return [i for i in instructions if i.instruction in keep], found.dialogue_domains
        finally:
            meter.time("select_instructions", started)

    def _demo_pool(self, text: str, instructions: list[str], catalogue: Catalogue, config: PipelineConfig,
                   exclude: Iterable[str], meter: _Meter) -> list[ScoredDemo]:
        if not (config.use_demos and config.n_demos and self.retriever is not None):
            return []
        started = time.perf_counter()
        query = DemoQuery(dialogue=text, instructions=instructions)
        pool = self.retriever.candidates(query, catalogue.name, config.demo_candidates, exclude, owner=self.scope.user)
        meter.time("demos", started)
        return pool

    def _rerank(self, pool: list[ScoredDemo], text: str, instructions: list[str], functions: list[str],
                n: int) -> list:
        query = DemoQuery(dialogue=text, instructions=instructions, functions=functions)
        return [s.demo for s in self.reranker.rerank(query, pool, n)]

    def _call(self, text: str, instructions: list[str], catalogue: Catalogue, config: PipelineConfig,
              pool: list[ScoredDemo], meter: _Meter, result: ParseResult, step: str, *, joint: bool = False,
              reuse: fnctod.StageOutput | None = None):
        started = time.perf_counter()
        demos = self._rerank(pool, text, instructions, [], config.n_demos) if pool else []
        ctx = fnctod.CallingContext(dialogue=text, instructions=instructions, demos=demos)
        if config.two_stage:
            selection = reuse or self._select_functions(catalogue, ctx, config, result, meter)
            functions = selection.value or []
            if pool and functions:
                # Rerank again now that stage 1 predicted the functions: demos of the same API teach its arguments.
                ctx = ctx.model_copy(update={"demos": self._rerank(pool, text, instructions, functions, config.n_demos)})
            calling = fnctod.two_stage(self.engine, catalogue, ctx, max_calls=config.max_calls, joint=joint,
                                       functions=functions)
            calling.stages.insert(0, selection)
        else:
            calling = fnctod.one_stage(self.engine, catalogue, ctx, max_calls=config.max_calls, joint=joint)
        for stage in calling.stages:
            if stage.generation is not None:
                meter.generation(stage.generation)
            if isinstance(stage.usage, fnctod.FunctionScores):
                meter.scoring(stage.usage)
        result.demos = [d.id for d in ctx.demos]
        meter.time(step, started)
        return calling

    def _select_functions(self, catalogue: Catalogue, ctx: fnctod.CallingContext, config: PipelineConfig,
                          result: ParseResult, meter: _Meter) -> fnctod.StageOutput:
        listed = self._shortlist(catalogue, ctx, config, result)
        if config.function_selection == "generate":
            selection = fnctod.select_functions(self.engine, listed, ctx, max_calls=config.max_calls,
                                                allow_none=config.allow_refuse)
        else:
            calibration = self._calibration_for(listed, config.allow_refuse, meter) if listed is catalogue \
                else self._calibration_per_function(catalogue, listed, config.allow_refuse, meter)
            # Chains come from the plain instruction texts that apply (tagged forms would hide "also").
            selection = fnctod.select_by_score(
                self.engine, listed, ctx, calibration=calibration, embedder=self.embedder,
                use_prior=config.function_selection == "hybrid", prior_weight=config.prior_weight,
                chain_instructions=result.instructions_used, max_calls=config.max_calls,
                allow_none=config.allow_refuse, rule=self.selection_rule(), abstention=self.abstention_rule(),
                none_prior=self.none_prior(), floor=self.calibration_floor())
            if listed is not catalogue and selection.value:
                # An instruction may chain to a function the shortlist left out: chains read the whole catalogue.
                selection.value = fnctod.chained_functions(catalogue, result.instructions_used,
                                                           selection.value[:1])[:config.max_calls]
        return selection

    def _shortlist(self, catalogue: Catalogue, ctx: fnctod.CallingContext, config: PipelineConfig,
                   result: ParseResult) -> Catalogue:
        """The functions stage 1 lists: the catalogue, or for a large one the shortlist retrieved for the user's
        words (strategies.shortlist), trimmed until the stage's prompt fits the context."""
        fits = shortlist.fits_context(self.engine, shortlist.CONTEXT_RESERVE * (2 if config.function_selection ==
                                                                              "generate" else 1))
        query = fnctod.user_words(ctx.dialogue)
        listed, report = shortlist.shortlist_catalogue(
            catalogue, query, self.embedder, config.shortlist_size,
            lambda sub: fits(fnctod.scoring_prompt(self.engine, sub, ctx.dialogue)))
        if report.applied:
            result.notes.append(f"stage 1: {report.describe()}")
        return listed

    def abstention_rule(self) -> fnctod.AbstentionRule | None:
        """Whether any function fits, the model's fitted rule (`prefcall fit --relevance`); None without one (the
        hand-set "None" prior and the embedder's threshold decide). It weighs the embedder's cosine, so it is
        used only with an embedder."""
        if self._abstention is None:
            fit = self.fit()
            found = fit.relevance if fit is not None and self.embedder is not None else None
            self._abstention = (self._fitted(fnctod.AbstentionRule, found, "relevance rule", "--relevance"),)
        return self._abstention[0]

    def none_prior(self) -> fnctod.NonePrior:
        """The "None" candidate's prior in stage 1: the model's fitted one (`prefcall fit --relevance`, kept only
        when it refuses more irrelevant tuning requests and no more relevant ones), else the hand-set one."""
        if self._none_prior is None:
            fit = self.fit()
            found = fit.none_prior if fit is not None else None
            self._none_prior = self._fitted(fnctod.NonePrior, found, "None prior", "--relevance") \
                or fnctod.HAND_NONE_PRIOR
        return self._none_prior

    def check_rule(self) -> model_check.CheckRule | None:
        """The model's fitted check (`prefcall fit --relevance`: its yes/no reading of whether a tool can do what
        is asked, weighed with the embedder's relevance score); None without one (the embedder's rule alone). It
        weighs the embedder's score, so it is used only with an embedder."""
        if self._check is None:
            fit = self.fit()
            found = fit.check if fit is not None and self.embedder is not None else None
            self._check = (self._fitted(model_check.CheckRule, found, "check rule", "--relevance"),)
        return self._check[0]

    def _fitted(self, kind: type[_Rule], found: Any, what: str, option: str) -> _Rule | None:
        """One stored part of the model's fit, read as `kind`; None when it has none. A damaged part is a one-line
        error that says how to mend it."""
        if not found:
            return None
        try:
            return kind.model_validate(found)
        except PydanticValidationError as exc:
            raise StoreError(f"the fitted {what} of {self.engine.info.model_name} is unreadable "
                             f"({exc.errors()[0]['msg']}): refit it with `prefcall fit {option}`") from exc

    def calibration_floor(self) -> float:
        """Stage 1's bound on the calibration's gain: the model's fitted floor (`prefcall fit --selection`, kept only
        when it selects better on the tune rows and no source worse), else fnctod.CALIBRATION_FLOOR."""
        if self._floor is None:
            fit = self.fit()
            self._floor = fit.calibration_floor if fit is not None and fit.calibration_floor is not None \
                else fnctod.CALIBRATION_FLOOR
        return self._floor

    def selection_rule(self) -> fnctod.SelectionRule:
        """Stage 1's rule: the model's fitted one (`prefcall fit --selection`), else the hand-set one. It weighs
        the embedder's cosine, so a fit is used only with an embedder."""
        if self._rule is None:
            fit = self.fit()
            weights = fit.selection if fit is not None else None
            self._rule = fnctod.SelectionRule(weights=weights) if weights and self.embedder is not None \
                else fnctod.HAND_RULE
        return self._rule

    def _calibration_per_function(self, catalogue: Catalogue, listed: Catalogue, allow_none: bool,
                                  meter: _Meter) -> list[float]:
        """Content-free scores for a shortlist of a large catalogue, per function: a function's score is computed
        under the first shortlist it appears in and reused under later ones (a request's shortlist changes with the
        request, and a function's content-free score depends mostly on the function), so a catalogue's functions
        are calibrated once each, not once per shortlist. "None" is kept per catalogue."""
        content = hashlib.sha256(catalogue.model_dump_json().encode("utf-8")).hexdigest()

        def key(name: str) -> tuple[str, str, str, bool]:
            function = listed.function(name)
            text = function.model_dump_json() if function is not None else f"{fnctod.NONE_CANDIDATE}|{content}"
            return self.scope.shared, "function", hashlib.sha256(text.encode("utf-8")).hexdigest(), allow_none

        names = fnctod.candidate_names(listed, allow_none)
        with self._lock:
            known = {n: self._calibration[key(n)][0] for n in names if key(n) in self._calibration}
        missing = [n for n in names if n not in known]
        if missing:
            started = time.perf_counter()
            scores = fnctod.content_free_scores(self.engine, listed, allow_none=allow_none, only=missing)
            meter.time("calibrate_selection", started)
            known.update(zip(missing, scores))
            with self._lock:
                for name, score in zip(missing, scores):
                    self._calibration[key(name)] = [score]
                self._trim_calibration()
        return [known[n] for n in names]

    def _trim_calibration(self) -> None:
        while len(self._calibration) > CALIBRATION_CACHE_SIZE:
            self._calibration.popitem(last=False)

    def _calibration_for(self, catalogue: Catalogue, allow_none: bool, meter: _Meter) -> list[float]:
        """Content-free scores per catalogue, computed on first use and cached (they depend only on the listing)."""
        # Keyed by who may read the catalogue and by its content: a user's catalogue (and a replaced one) is never
        # answered from a calibration made from another's.
        content = hashlib.sha256(catalogue.model_dump_json().encode("utf-8")).hexdigest()
        key = (self.scope.shared, catalogue.name, content, allow_none)
        with self._lock:
            cached = self._calibration.get(key)
        if cached is not None:
            return cached
        started = time.perf_counter()
        # On disk per model file and catalogue: a restarted server skips the content-free prompts.
        disk = fnctod.CalibrationFile(self._data_dir(), self.engine.info, key)
        scores = disk.read()
        if scores is None:
            scores = fnctod.content_free_scores(self.engine, catalogue, allow_none=allow_none)
            disk.write(scores)
            meter.time("calibrate_selection", started)
        with self._lock:
            self._calibration[key] = scores
            self._calibration.move_to_end(key)
            self._trim_calibration()
        return scores

    def _gate(self, text, chosen, catalogue, config, pool, meter, result, calling):
        threshold = config.gate_threshold
        off = None
        if threshold is None:
            info = self.engine.info
            threshold = default_threshold(info.model_name, self._data_dir(), config.gate_measure)
            off = gate_mismatch(info.model_name, self._data_dir(), info.capabilities.renormalised_logprobs,
                                config.gate_measure)
        result.gate_threshold = threshold
        if off is not None:
            result.notes.append(off)
        fired = off is None and result.uncertainty.get(config.gate_measure, 1.0) > threshold
        result.gate_fired = fired
        if not (fired or config.record_variants):
            return calling
        tagged = self._tag_all(chosen, catalogue, config, meter, result)
        if tagged == [i.instruction for i in chosen]:
            # Nothing could be tagged validly: regenerating would repeat the same prompt.
            result.variants = {"untagged": calling.calls, "tagged": calling.calls} if config.record_variants else {}
            return calling
        regenerated = self._call(text, tagged, catalogue, config, pool, meter, result,
                                 "regenerate_tagged" if fired else "variant_tagged", reuse=_scored_selection(calling))
        if config.record_variants:
            result.variants = {"untagged": calling.calls, "tagged": regenerated.calls}
        if not fired:
            return calling
        result.raw += [s.raw for s in calling.stages]
        result.tagged = True
        return regenerated

    def _data_dir(self):
        if self.data_dir is not None:
            return self.data_dir
        from prefcall.config import Settings

        return Settings().data_dir

    def _tag_all(self, chosen: list[TaggedInstruction], catalogue: Catalogue, config: PipelineConfig,
                 meter: _Meter, result: ParseResult) -> list[str]:
        """Tagged form of each instruction (pre-tagged, cached or freshly tagged); invalid ones stay plain."""
        started = time.perf_counter()
        out = []
        for item in chosen:
            tag = self._tag_one(item, catalogue, config, meter)
            result.tags.append(tag)
            if tag.status == "ok":
                out.append(tag.tagged)
            else:
                result.errors.append(f"tagging {item.instruction!r} invalid: {'; '.join(tag.reasons)}")
                out.append(item.instruction)
        meter.time("tagging", started)
        return out

    def _tag_one(self, item: TaggedInstruction, catalogue: Catalogue, config: PipelineConfig, meter: _Meter,
                 grounder: grounded.Grounder | None = None, prefer: Sequence[str] = ()) -> TagResult:
        """`prefer`: the functions the request is for. A structured tag for another function, of an instruction
        whose words fit one of these as well, is made again for it (grounded.retag_for; cached apart)."""
        if item.tagged:
            return check_tagging(item.instruction, item.tagged, catalogue)  # pre-tagged: validate, never trust
        tag = self._tag_cached(item, catalogue, config, meter, grounder)
        if config.tag_mode == "structured" and prefer:
            grounder = grounder or self._grounder(catalogue, frozenset())
            function = grounded.retag_for(grounder, tag, catalogue, prefer)
            if function is not None:
                tag = self._tag_cached(item, catalogue, config, meter, grounder, function)
        return tag

    def _tag_cached(self, item: TaggedInstruction, catalogue: Catalogue, config: PipelineConfig, meter: _Meter,
                    grounder: grounded.Grounder | None = None, function: str | None = None) -> TagResult:
        """The instruction's tag from the cache, else made and cached; `function`: the one it is tagged for."""
        key = (self.scope.user, self.scope.shared,
               grounded.tag_key(item.instruction, catalogue, config.tag_mode, self.engine.info.model_name), function)
        with self._lock:
            if key in self._tag_cache:
                self._tag_cache.move_to_end(key)
                return self._tag_cache[key]
        if config.tag_mode == "structured":
            tag = grounded.tag_structured(grounder or self._grounder(catalogue, frozenset()), item.instruction,
                                          catalogue, prefer=(function,) if function else ())
        else:
            tag = tag_instruction(self.engine, item.instruction, catalogue, self.tag_examples, k=config.tag_shots,
                                  mode=config.tag_mode)
        meter.tag(tag)
        with self._lock:
            self._tag_cache[key] = tag
            while len(self._tag_cache) > self._tag_cache_size:
                self._tag_cache.popitem(last=False)
        return tag

    def _finish(self, result: ParseResult, calling, catalogue: Catalogue, config: PipelineConfig, meter: _Meter) -> None:
        started = time.perf_counter()
        result.functions = calling.functions
        result.raw += [s.raw for s in calling.stages]
        result.errors += calling.errors
        generations = calling.call_generations
        result.confidence = 1.0 - uncertainty(generations)["least_confidence"] if generations else 0.0
        calls = list(calling.calls)
        if config.merge_tag_slots:
            calls = merge_tag_slots(calls, result.tags)
        if calling.errors:
            result.status = "parse_error"
        if config.post_check:
            checked = post_check(calls, catalogue)
            result.calls, result.missing, result.question = checked.calls, checked.missing, checked.question
            result.notes += [f"{n.action} {n.call}: {n.reason}" for n in checked.notes]
            result.decision = checked.decision
        else:
            result.calls = _dedupe(calls)
            result.decision = "call" if result.calls else "refuse"
        if result.status == "parse_error" and not result.calls:
            result.decision = "error"  # a parse failure is not a refusal
        meter.time("post_check", started)


def _without_records(chosen: list[TaggedInstruction], request: str, profile: statements.Profile | None,
                     result: ParseResult) -> list[TaggedInstruction]:
    """The chosen instructions less the profile's records of past use (strategies.statements; `profile` None: the
    config reads every instruction as a wish): a record is not a wish, so it is not tagged as one; a request that
    refers back to past use reads it by the filler instead."""
    if profile is None:
        return chosen
    back = statements.refers_back(request)
    kept = []
    for item in chosen:  # by its own text: a caller's `applicable` may name texts the profile does not hold
        if statements.kind_of(item.instruction) == "record":
            note = (f"left out {item.instruction!r}: a record of past use, " +
                    ("read only for what the request refers back to" if back else
                     "and the request does not refer back to it"))
            if note not in result.notes:
                result.notes.append(note)
        else:
            kept.append(item)
    return kept


def _record_functions(grounder: grounded.Grounder, catalogue: Catalogue) -> Callable[[str], list[str]]:
    """The functions a record is about (`grounded.instruction_functions`: its words, else the embedder's closest);
    the catalogue's domain model is built at the first record asked about, so a request that refers back to
    nothing never builds it."""
    model: list[DomainModel] = []

    def functions_of(record: str) -> list[str]:
        if not model:
            model.append(DomainModel.build(catalogue))
        return grounded.instruction_functions(grounder, record, model[0])
    return functions_of


def _record_reader(grounder: grounded.Grounder) -> Callable[[Function, str, bool], dict[str, tuple[Any, str]]]:
    """The filler on a record's text alone: argument -> (value, the words it was read from), one value per
    argument. A record about the function whose argument the request names (`about`: "the same event as last
    time") is read as a request is (the required floor and the model's proposals: the request refers back to it
    for what it holds); any other as an instruction is (neither)."""
    def read(function: Function, record: str, about: bool) -> dict[str, tuple[Any, str]]:
        filled = grounder.fill(function, [Source("instruction", record, record)], record, write_free=False,
                               request=about)
        return {c.argument: (c.values[0], " | ".join(c.texts)) for c in filled.choices if len(c.values) == 1}
    return read


def _scored_selection(calling) -> fnctod.StageOutput | None:
    """A scored stage 1 depends on the dialogue (and the plain instructions' chains), not on tagging: the tagged
    pass reuses it instead of scoring again. Its usage is dropped so the trace counts the scoring once."""
    for stage in calling.stages:
        if stage.stage == "select" and isinstance(stage.usage, fnctod.FunctionScores):
            return stage.model_copy(update={"usage": None})
    return None


def _untag(tagged: str) -> str:
    return " ".join(re.sub(r"\[(IN|SL):[A-Za-z0-9_]+|\]", " ", tagged).split())


def _dedupe(calls: list[Call]) -> list[Call]:
    seen, out = set(), []
    for call in calls:
        if call.key() not in seen:
            seen.add(call.key())
            out.append(call)
    return out


def merge_tag_slots(calls: list[Call], tags: list[TagResult]) -> list[Call]:
    """Fill arguments a call left out from valid tags of the same function (never overwrite: the dialogue wins)."""
    fills = [f for t in tags if t.status == "ok" for f in t.triples if f.slot is not None]
    merged = []
    for call in calls:
        arguments = dict(call.arguments)
        for fill in fills:
            if fill.function == call.name and fill.slot not in arguments:
                arguments[fill.slot] = fill.value
        merged.append(Call(name=call.name, arguments=arguments))
    return merged
