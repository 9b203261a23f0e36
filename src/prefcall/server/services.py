"""What the tools call: stores on the db thread, strategies on the model thread, results mapped to wire models.

Thin by design: every decision is a strategy's; this module only routes calls to the right thread and
turns each strategy's typed result (ParseResult, NltResult, ClarifyResult, TagResult) into the server's
typed results (`prefcall.server.models`) with one mapping function each.

Every call names its `Caller`: whose catalogues and demonstrations it reads and writes (`owner`), and whether
several users share this process (`private`, over HTTP). A private caller's model calls carry its own cache
`Scope` (KV state of its text is never reused for anyone else; only a built-in catalogue's shared prefix is),
and its traces report its prompt size instead of what the caches reused, which would reveal other users' traffic.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from prefcall.config import Settings
from prefcall.engine.base import LOCAL, Embedder, Engine, Scope, ScopedEngine
from prefcall.engine.loader import ModelLoader, ProgressFn
from prefcall.errors import NotFoundError, PrefcallError, ValidationError
from prefcall.schemas.model import Call, Catalogue, Function, Turn, render_dialogue
from prefcall.schemas.registry import BUILTIN_NAMES, CatalogueRegistry
from prefcall.schemas.state import DialogueState
from prefcall.server import models as m
from prefcall.server.conversations import Conversations
from prefcall.server.runtime import ModelQueue, Worker
from prefcall.server.validation import check_state_functions
from prefcall.storage.db import LOCAL_OWNER
from prefcall.storage.demos import Demonstration, DemoStore, add_demonstration
from prefcall.storage.profiles import Instruction, ProfileStore
from prefcall.strategies.grammars import check_catalogue_grammars, grammar_checker
from prefcall.strategies.nlt import select_tools
from prefcall.strategies.nlt_models import NltResult, NltUsage
from prefcall.strategies.pipeline import Pipeline
from prefcall.strategies.pipeline_models import DEFAULT_CONFIG, get_config, ParseResult
from prefcall.strategies.qwn import ClarifyResult, clarify
from prefcall.strategies.taps_tagger import BUILTIN_EXAMPLES, TagExamples, TagResult
from prefcall.tagging.tags import TaggedInstruction

log = logging.getLogger("prefcall.server")

CLARIFY_CACHE_SIZE = 32

# Trace steps whose presence says whether a cache shared by several users was warm.
CACHE_STEPS = ("calibrate_selection",)

S = TypeVar("S")
Source = S | Callable[[], S] | None  # a store, a factory called on the thread that uses it, or None (the settings' file)


@dataclass(frozen=True)
class Caller:
    """Who a request acts for. `owner`: whose catalogues and demonstrations (the token's user over HTTP, the
    local user on stdio); `private`: other users share this process (HTTP), so caches are scoped to the owner
    and traces hide cache state. The default is the one local user of stdio, as before users existed."""

    owner: str = LOCAL_OWNER
    private: bool = False

    def scope(self, catalogue_shared: bool) -> Scope:
        """The engine cache scope: on stdio everything may be reused (LOCAL); over HTTP the caller's own text
        only for the caller, and the system prompt + catalogue across users only for a built-in catalogue."""
        if not self.private:
            return LOCAL
        return Scope(user=self.owner, shared="public" if catalogue_shared else f"user:{self.owner}")


LOCAL_CALLER = Caller()


def private_trace(trace: m.Trace) -> m.Trace:
    """A trace that shows the caller's own prompt size, not the state of caches other users also fill:
    `evaluated` is the prompt size and `reused` 0, and steps that run only on a cold shared cache are dropped."""
    timings = {k: v for k, v in trace.timings.items() if k not in CACHE_STEPS}
    return trace.model_copy(update={"evaluated": trace.prompt_tokens, "reused": 0, "timings": timings})


# ------------------------------------------------------------------------------- strategy results -> wire models
def instruction_out(item: Instruction) -> m.InstructionOut:
    return m.InstructionOut(id=item.id, position=item.position, text=item.text, tags=item.tags,
                            tags_model=item.tags_model, tagged_at=item.tagged_at, stale=item.stale)


def usage_trace(usage: NltUsage, seconds: float = 0.0) -> m.Trace:
    return m.Trace(prompt_tokens=usage.prompt_tokens, evaluated=usage.evaluated, reused=usage.reused,
                   completion_tokens=usage.completion_tokens, model_calls=usage.calls, seconds=round(seconds, 4))


def call_out(call: Call) -> m.CallOut:
    return m.CallOut(name=call.name, arguments=dict(call.arguments))


def parse_result_out(result: ParseResult, *, user_id: str, catalogue: str, config: str) -> m.ParseRequestResult:
    trace, timings = result.trace, result.trace.timings
    return m.ParseRequestResult(
        user_id=user_id,
        catalogue=catalogue,
        config=config,
        status=result.status,
        decision=result.decision,
        calls=[call_out(c) for c in result.calls],
        question=result.question,
        missing=list(result.missing),
        instructions_used=list(result.instructions_used),
        confidence=result.confidence,
        least_confidence=result.least_confidence,
        tagged=result.tagged,
        gate_fired=result.gate_fired,
        trace=m.Trace(
            timings={k: round(float(v), 4) for k, v in timings.items()},
            prompt_tokens=trace.prompt_tokens,
            evaluated=trace.evaluated,
            reused=trace.reused,
            completion_tokens=trace.completion_tokens,
            model_calls=trace.model_calls,
            seconds=round(float(timings.get("total", sum(timings.values()))), 4) if timings else 0.0,
        ),
        functions=list(result.functions),
        demonstrations=list(result.demos),
        notes=list(result.notes),
        provenance=[m.ValueProvenance(**p) for p in result.provenance],
        skipped=dict(result.skipped),
        state=result.state,
        errors=list(result.errors),
        raw=[r for r in result.raw if r],
    )


def nlt_out(result: NltResult) -> m.NltSelection:
    return m.NltSelection(
        mode=result.mode,
        status=result.status,
        decisions=[m.ToolDecisionOut(name=d.name, selected=d.selected, probability=d.probability, score=d.score,
                                     model_logodds=d.model_logodds, lexical=d.lexical, cosine=d.cosine,
                                     shortlisted=d.shortlisted)
                   for d in result.decisions],
        selected=list(result.selected),
        reasoning=result.reasoning,
        missing=list(result.missing),
        unknown=list(result.unknown),
        raw_text=result.raw_text,
        threshold=result.threshold,
        rule=result.rule.model_dump() if result.rule is not None else None,
        evidence=list(result.evidence),
        shortlist=result.shortlist.describe() if result.shortlist is not None and result.shortlist.applied else None,
        trace=usage_trace(result.usage, result.seconds),
    )


def clarify_out(result: ClarifyResult) -> m.ClarifyOutcome:
    return m.ClarifyOutcome(
        decision=result.decision,
        question=result.question,
        missing_arguments=list(result.missing_arguments),
        model_said=result.model_said,
        status=result.status,
        shortlist=result.shortlist.describe() if result.shortlist is not None else None,
        evidence=list(result.evidence),
        trace=usage_trace(result.usage, result.seconds),
    )


def catalogue_summary(catalogue: Catalogue) -> m.CatalogueSummary:
    return m.CatalogueSummary(name=catalogue.name, description=catalogue.description, functions=catalogue.names,
                              builtin=catalogue.name in BUILTIN_NAMES)


def tagged_instructions(instructions: Sequence[Instruction]) -> list[TaggedInstruction]:
    """Fresh stored tags ride along so the pipeline validates them instead of tagging again."""
    return [
        TaggedInstruction(instruction=i.text, tagged=i.tags, status="ok") if i.tags and not i.stale
        else TaggedInstruction(instruction=i.text)
        for i in instructions
    ]


def _open(source: Source[S], kind: type[S], default: Callable[[], S]) -> S:
    if source is None:
        return default()
    return source if isinstance(source, kind) else source()  # type: ignore[operator]


# ------------------------------------------------------------------------------- services
class Services:
    """Stores (db thread), models (model thread), strategies. Built by `create_server`; tests inject fakes.

    `profiles`, `catalogues`, `demos` may be store objects or zero-argument factories; factories are called
    on the thread that will use the store (SQLite connections are thread-bound). None opens the store on
    the settings' database file.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        engine: Engine | None = None,
        embedder: Embedder | None = None,
        profiles: Source[ProfileStore] = None,
        catalogues: Source[CatalogueRegistry] = None,
        demos: Source[DemoStore] = None,
        load_engine: Callable[[Settings], Engine] | None = None,
        load_embedder: Callable[[Settings], Embedder] | None = None,
    ) -> None:
        self.settings = settings
        self.models = ModelLoader(
            settings, engine=engine, embedder=embedder, load_engine=load_engine, load_embedder=load_embedder
        )
        self.db = Worker("prefcall-db")
        self.model = ModelQueue("prefcall-model", size=settings.queue_size, per_user=settings.queue_per_user)
        self._profiles_source = profiles
        self._catalogues_source = catalogues
        self._demos_source = demos
        self._profiles: ProfileStore | None = None
        self._catalogues: CatalogueRegistry | None = None
        self._demos: DemoStore | None = None
        self._pipeline: Pipeline | None = None
        self._tag_examples: TagExamples | None = None
        self._clarify_cache: OrderedDict[str, m.ClarifyOutcome] = OrderedDict()
        self.conversations = Conversations(settings.conversation_limit, settings.conversation_ttl_s)

    def close(self) -> None:
        self.db.shutdown()
        self.model.shutdown()

    # -- stores, created on their own thread -----------------------------------------------------
    def _profile_store(self) -> ProfileStore:
        if self._profiles is None:
            self._profiles = _open(self._profiles_source, ProfileStore,
                                   lambda: ProfileStore.from_settings(self.settings))
        return self._profiles

    def _catalogue_store(self) -> CatalogueRegistry:
        if self._catalogues is None:
            self._catalogues = _open(self._catalogues_source, CatalogueRegistry,
                                     lambda: CatalogueRegistry.from_settings(self.settings))
        return self._catalogues

    def _demo_store(self) -> DemoStore:
        if self._demos is None:
            self._demos = _open(self._demos_source, DemoStore, lambda: DemoStore.from_settings(self.settings))
        return self._demos

    # -- profiles (db thread) --------------------------------------------------------------------
    def _instructions(self, user_id: str) -> list[Instruction]:
        return self._profile_store().list_instructions(user_id)

    async def instructions(self, user_id: str) -> list[m.InstructionOut]:
        return [instruction_out(i) for i in await self.db.call(self._instructions, user_id)]

    def _create_profile(self, user_id: str) -> bool:
        store = self._profile_store()
        if store.has_user(user_id):
            return False
        store.create_user(user_id, exist_ok=True)
        return True

    async def create_profile(self, user_id: str) -> bool:
        return await self.db.call(self._create_profile, user_id)

    def _add_instruction(self, user_id: str, text: str, create: bool,
                         request_key: str | None) -> tuple[Instruction, int]:
        store = self._profile_store()
        if create:
            self._create_profile(user_id)
        added = store.add_instruction(user_id, text, request_key=request_key)
        return added, len(store.list_instructions(user_id))

    async def add_instruction(self, user_id: str, text: str, *, create: bool,
                              request_key: str | None = None) -> tuple[m.InstructionOut, int]:
        """`request_key`: an idempotency key; a retry with the same key returns the first add's instruction."""
        added, count = await self.db.call(self._add_instruction, user_id, text, create, request_key)
        return instruction_out(added), count

    def _remove_instruction(self, user_id: str, instruction_id: int) -> tuple[Instruction, int]:
        store = self._profile_store()
        owned = {i.id for i in store.list_instructions(user_id)}  # unknown user -> NotFoundError naming the user
        if int(instruction_id) not in owned:
            # Same answer whether the id exists for someone else or not at all: ids must not leak across users.
            raise NotFoundError(
                f"user {user_id!r} has no instruction {instruction_id}: see the ids with list_instructions"
            )
        removed = store.remove_instruction(int(instruction_id), user_id=user_id)
        return removed, len(store.list_instructions(user_id))

    async def remove_instruction(self, user_id: str, instruction_id: int) -> tuple[m.InstructionOut, int]:
        removed, count = await self.db.call(self._remove_instruction, user_id, instruction_id)
        return instruction_out(removed), count

    def _set_tags(self, instruction_id: int, tags: str, model: str) -> None:
        self._profile_store().set_tags(instruction_id, tags, model)

    # -- catalogues (db thread) ------------------------------------------------------------------
    async def catalogue(self, name: str, caller: Caller = LOCAL_CALLER) -> Catalogue:
        """A built-in or one of the caller's own catalogues (another user's is 'unknown', as a missing one)."""
        return await self.db.call(lambda: self._catalogue_store().get(name, caller.owner))

    def _all_catalogues(self, owner: str) -> list[Catalogue]:
        store = self._catalogue_store()
        return [store.get(info.name, owner) for info in store.list(owner)]

    async def catalogues(self, caller: Caller = LOCAL_CALLER) -> list[Catalogue]:
        """The built-ins and the caller's own catalogues."""
        return await self.db.call(self._all_catalogues, caller.owner)

    def _grammar_check(self, catalogue: Catalogue) -> None:
        # The loaded engine's own check (the fake's in tests); before the model is ready, llama.cpp's, which
        # needs no model: an import never waits for (or fails with) the model.
        engine = self.models.engine if self.models.ready else None
        check_catalogue_grammars(catalogue, grammar_checker(engine))

    def _import_catalogue(self, tools: list[dict], name: str, description: str | None, replace: bool,
                          owner: str) -> tuple[Catalogue, bool]:
        store = self._catalogue_store()
        existed = store.exists(name, owner)
        catalogue = store.add(tools, name=name, description=description, replace=replace, owner=owner,
                              check=self._grammar_check)
        return catalogue, existed

    async def import_catalogue(self, tools: list[dict], name: str, description: str | None,
                               replace: bool, caller: Caller = LOCAL_CALLER) -> tuple[Catalogue, bool]:
        """Check (limits, names, grammars) and store under the caller's name; nobody else sees or replaces it."""
        return await self.db.call(self._import_catalogue, tools, name, description, replace, caller.owner)

    async def delete_catalogue(self, name: str, caller: Caller = LOCAL_CALLER) -> None:
        await self.db.call(lambda: self._catalogue_store().remove(name, caller.owner))

    def is_builtin(self, catalogue: Catalogue) -> bool:
        return catalogue.name in BUILTIN_NAMES

    # -- model work (model thread) ---------------------------------------------------------------
    async def ready(self, progress: ProgressFn | None = None) -> tuple[Engine, Embedder]:
        return await self.models.wait(progress)

    def _get_pipeline(self) -> Pipeline:
        if self._pipeline is None:
            if self._tag_examples is None:
                self._tag_examples = TagExamples(list(BUILTIN_EXAMPLES), self.models.embedder)
            self._pipeline = Pipeline(self.models.engine, embedder=self.models.embedder, demos=self._demo_store(),
                                      tag_examples=self._tag_examples, data_dir=self.settings.data_dir)
            self._notice_unfitted(self._pipeline)
        return self._pipeline

    def _notice_unfitted(self, pipeline: Pipeline) -> None:
        """One notice when the model has no fit of its own (neither shipped nor made by the user): its answers rest on
        rules fitted for another model until `prefcall fit` fits it."""
        from prefcall.storage import fits

        if fits.engine_fingerprint(pipeline.engine, self.settings.data_dir) is None or pipeline.fit() is not None:
            return
        log.warning("%s has no fit of its own: it answers with rules fitted for the embedded model; `prefcall fit "
                    "--model REF`, `prefcall fit --selection --model REF` and `prefcall fit --relevance --model REF` "
                    "fit it on the bundled tuning data (README: Fitting a model)", pipeline.engine.info.model_name)

    def _parse(self, turns: list[Turn], instructions: list[Instruction], catalogue: Catalogue, config: str,
               overrides: dict[str, bool], applicable: list[str] | None, scope: Scope,
               state: DialogueState | None = None) -> ParseResult:
        chosen = get_config(config, **{"shortlist_size": self.settings.shortlist_size, **overrides})
        return self._get_pipeline().scoped(scope).parse(turns, tagged_instructions(instructions), catalogue, chosen,
                                                        applicable=applicable, state=state)

    def _cache_tags(self, instructions: list[Instruction], tags: list[TagResult], model: str) -> None:
        """Store valid tags the pipeline produced for untagged instructions (saves tagging them next time)."""
        by_text = {i.text: i for i in instructions if not i.tags or i.stale}
        for tag in tags:
            item = by_text.pop(tag.instruction, None)
            if item is not None and tag.status == "ok" and tag.tagged:
                self._set_tags(item.id, tag.tagged, model)

    async def parse(self, user_id: str, turns: list[Turn], catalogue_name: str, config: str,
                    overrides: dict[str, bool], applicable: list[str] | None,
                    progress: ProgressFn | None = None, caller: Caller = LOCAL_CALLER,
                    state: DialogueState | None = None, conversation: str | None = None) -> m.ParseRequestResult:
        """`state`: the one the previous turn's result carried (its functions must be this catalogue's);
        `conversation`: a conversation id whose state prefcall keeps (server.conversations), instead."""
        if conversation is None:
            return await self._parse_turn(user_id, turns, catalogue_name, config, overrides, applicable, progress,
                                          caller, state)
        if state is not None:
            raise ValidationError("send either state (the host keeps it) or conversation_id (prefcall keeps it), "
                                  "not both")
        key = (caller.owner, user_id, catalogue_name, conversation)
        async with self.conversations.turn(key):
            out = await self._parse_turn(user_id, turns, catalogue_name, config, overrides, applicable, progress,
                                         caller, self.conversations.get(key))
            if out.state is not None:
                self.conversations.put(key, out.state)
            return out

    async def _parse_turn(self, user_id: str, turns: list[Turn], catalogue_name: str, config: str,
                          overrides: dict[str, bool], applicable: list[str] | None, progress: ProgressFn | None,
                          caller: Caller, state: DialogueState | None) -> m.ParseRequestResult:
        instructions = await self.db.call(self._instructions, user_id)
        catalogue = await self.catalogue(catalogue_name, caller)
        if state is not None:
            check_state_functions(state, catalogue)
        engine, _ = await self.ready(progress)
        scope = caller.scope(self.is_builtin(catalogue))
        result = await self.model.call(self._parse, turns, instructions, catalogue, config, overrides, applicable,
                                       scope, state)
        if result.tags:
            try:
                await self.db.call(self._cache_tags, instructions, result.tags, engine.info.model_name)
            except PrefcallError as exc:  # a cache write must not cost the host its answer
                log.warning("could not cache tags for %s: %s", user_id, exc)
        out = parse_result_out(result, user_id=user_id, catalogue=catalogue.name, config=config)
        return out.model_copy(update={"trace": private_trace(out.trace)}) if caller.private else out

    async def select_tools(self, message: str, tools: Sequence[Function] | Catalogue, *, mode: str,
                           context: str | None, threshold: float | None, calibrate: bool,
                           progress: ProgressFn | None = None, caller: Caller = LOCAL_CALLER) -> m.NltSelection:
        engine, embedder = await self.ready(progress)
        shared = isinstance(tools, Catalogue) and self.is_builtin(tools)  # a host's own tool list is its text
        scoped = ScopedEngine(engine, caller.scope(shared))
        result = await self.model.call(
            lambda: select_tools(scoped, message, tools, mode=mode, context=context, threshold=threshold,  # type: ignore[arg-type]
                                 calibrate=calibrate, embedder=embedder, shortlist_size=self.settings.shortlist_size)
        )
        out = nlt_out(result)
        return out.model_copy(update={"trace": private_trace(out.trace)}) if caller.private else out

    async def clarify(self, turns: list[Turn], catalogue: Catalogue, instructions: Sequence[str],
                      progress: ProgressFn | None = None, caller: Caller = LOCAL_CALLER) -> m.ClarifyOutcome:
        # Elicitation on the 2026-07-28 protocol retries the whole tool call with the user's answer; the
        # first pass is deterministic (greedy), so it is answered from this small cache, not recomputed.
        # Keyed by the caller too: another user's identical request is never answered from (or timed by) it.
        key = json.dumps([caller.owner, [t.model_dump() for t in turns], catalogue.model_dump(), list(instructions)],
                         sort_keys=True, default=str)
        if key in self._clarify_cache:
            self._clarify_cache.move_to_end(key)
            return self._clarify_cache[key].model_copy(deep=True)
        engine, embedder = await self.ready(progress)
        scope = caller.scope(self.is_builtin(catalogue))
        scoped = ScopedEngine(engine, scope)
        # the model's fitted check, as parse_request refuses by it, and its stage 1 (clarify drafts stage 1's choice)
        check, stage = self._get_pipeline().scoped(scope).check_for(turns, catalogue, list(instructions))
        result = await self.model.call(
            lambda: clarify(scoped, turns, catalogue, instructions=list(instructions), embedder=embedder,
                            shortlist_size=self.settings.shortlist_size, check=check, stage=stage)
        )
        outcome = clarify_out(result)
        if caller.private:
            outcome = outcome.model_copy(update={"trace": private_trace(outcome.trace)})
        self._clarify_cache[key] = outcome
        while len(self._clarify_cache) > CLARIFY_CACHE_SIZE:
            self._clarify_cache.popitem(last=False)
        return outcome.model_copy(deep=True)

    def _tag(self, text: str, catalogue: Catalogue, scope: Scope) -> TagResult:
        # The tagger parse_request's default configuration uses (constrained structured tags), so that stored
        # tags are the ones parse_request would make; the TAPS free-text tagger stays an evaluation mode.
        return self._get_pipeline().scoped(scope).tag(text, catalogue, get_config(DEFAULT_CONFIG))

    async def tag_profile(self, user_id: str, catalogue_name: str, *, force: bool,
                          progress: ProgressFn | None = None, caller: Caller = LOCAL_CALLER) -> m.TagProfileResult:
        instructions = await self.db.call(self._instructions, user_id)
        catalogue = await self.catalogue(catalogue_name, caller)
        engine, _ = await self.ready(progress)
        scope = caller.scope(self.is_builtin(catalogue))
        outcomes: list[m.TagOutcome] = []
        trace = m.Trace()
        for item in instructions:
            if item.tags and not item.stale and not force:
                outcomes.append(m.TagOutcome(instruction_id=item.id, text=item.text, status="skipped", tags=item.tags))
                continue
            result = await self.model.call(self._tag, item.text, catalogue, scope)
            trace.prompt_tokens += result.prompt_tokens
            trace.evaluated += result.evaluated
            trace.reused += result.reused
            trace.completion_tokens += result.completion_tokens
            trace.model_calls += 1
            trace.seconds = round(trace.seconds + result.seconds, 4)
            if result.status == "ok" and result.tagged:
                await self.db.call(self._set_tags, item.id, result.tagged, engine.info.model_name)
            outcomes.append(m.TagOutcome(instruction_id=item.id, text=item.text, status=result.status,
                                         tags=result.tagged, errors=list(result.reasons)))
        return m.TagProfileResult(
            user_id=user_id, catalogue=catalogue.name, model=engine.info.model_name,
            tagged=sum(o.status == "ok" for o in outcomes), skipped=sum(o.status == "skipped" for o in outcomes),
            invalid=sum(o.status == "invalid" for o in outcomes), instructions=outcomes,
            trace=private_trace(trace) if caller.private else trace,
        )

    def _store_demo(self, turns: list[Turn], instructions: list[str], catalogue: str,
                    calls: list[Call], owner: str) -> Demonstration:
        return add_demonstration(self._demo_store(), render_dialogue(turns), instructions, catalogue, calls,
                                 source="host", owner=owner)

    async def store_demonstration(self, turns: list[Turn], instructions: list[str], catalogue: str,
                                  calls: list[Call], caller: Caller = LOCAL_CALLER) -> Demonstration:
        """A demonstration of the caller's: retrieved later for the caller's requests only."""
        return await self.model.call(self._store_demo, turns, instructions, catalogue, calls, caller.owner)
