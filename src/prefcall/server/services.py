"""What the tools call: stores on the db thread, strategies on the model thread, results mapped to wire models.

Thin by design: every decision is a strategy's; this module only routes calls to the right thread and
turns strategy results into the server's typed results (`prefcall.server.models`).
"""

from __future__ import annotations

import importlib
import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from prefcall.config import Settings
from prefcall.engine.base import Embedder, Engine
from prefcall.errors import NotFoundError, PrefcallError
from prefcall.schemas.model import Call, Catalogue, Function, Turn, render_dialogue
from prefcall.server import models as m
from prefcall.server.runtime import ModelLoader, ProgressFn, Worker

log = logging.getLogger("prefcall.server")

CLARIFY_CACHE_SIZE = 32


class NotAvailableError(PrefcallError):
    """A strategy or store module this tool needs is not part of this build yet."""


def optional_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise NotAvailableError(f"{name} is not available in this prefcall build yet: update prefcall") from exc
        raise


# ------------------------------------------------------------------------------- mapping helpers
def _get(obj: Any, name: str, default: Any = None) -> Any:
    return getattr(obj, name, default) if not isinstance(obj, dict) else obj.get(name, default)


def instruction_out(item: Any) -> m.InstructionOut:
    tagged_at = _get(item, "tagged_at")
    return m.InstructionOut(
        id=_get(item, "id"),
        position=_get(item, "position"),
        text=_get(item, "text", ""),
        tags=_get(item, "tags"),
        tags_model=_get(item, "tags_model"),
        tagged_at=str(tagged_at) if tagged_at is not None else None,
        stale=bool(_get(item, "stale", False)),
    )


def usage_trace(usage: Any, seconds: float = 0.0) -> m.Trace:
    return m.Trace(
        prompt_tokens=_get(usage, "prompt_tokens", 0) or 0,
        evaluated=_get(usage, "evaluated", 0) or 0,
        reused=_get(usage, "reused", 0) or 0,
        completion_tokens=_get(usage, "completion_tokens", 0) or 0,
        model_calls=_get(usage, "calls", 0) or _get(usage, "model_calls", 0) or 0,
        seconds=round(seconds or 0.0, 4),
    )


def call_out(call: Any) -> m.CallOut:
    return m.CallOut(name=_get(call, "name"), arguments=dict(_get(call, "arguments") or {}))


def missing_out(item: Any) -> m.MissingArgument:
    if isinstance(item, str):
        return m.MissingArgument(argument=item)
    return m.MissingArgument(
        function=_get(item, "function"), argument=_get(item, "argument", ""), description=_get(item, "description", "")
    )


def parse_result_out(result: Any, *, user_id: str, catalogue: str, config: str) -> m.ParseRequestResult:
    trace = _get(result, "trace")
    timings = _get(trace, "timings") or {}
    least = _get(result, "least_confidence")
    confidence = _get(result, "confidence")
    if confidence is None and least is not None:
        confidence = 1.0 - least
    return m.ParseRequestResult(
        user_id=user_id,
        catalogue=catalogue,
        config=config,
        status=_get(result, "status", "ok"),
        decision=_get(result, "decision", "call"),
        calls=[call_out(c) for c in _get(result, "calls") or []],
        question=_get(result, "question"),
        missing=[missing_out(x) for x in _get(result, "missing") or []],
        instructions_used=[str(_get(i, "text", i)) for i in _get(result, "instructions_used") or []],
        confidence=confidence,
        least_confidence=least,
        tagged=bool(_get(result, "tagged", False)),
        gate_fired=bool(_get(result, "gate_fired", False)),
        trace=m.Trace(
            timings={k: round(float(v), 4) for k, v in dict(timings).items()},
            prompt_tokens=_get(trace, "prompt_tokens", 0) or 0,
            evaluated=_get(trace, "evaluated", 0) or 0,
            reused=_get(trace, "reused", 0) or 0,
            completion_tokens=_get(trace, "completion_tokens", 0) or 0,
            model_calls=_get(trace, "model_calls", 0) or 0,
            seconds=round(float(dict(timings).get("total", sum(dict(timings).values()))), 4) if timings else 0.0,
        ),
        functions=list(_get(result, "functions") or []),
        demonstrations=[str(d) for d in _get(result, "demos") or []],
        notes=[str(n) for n in _get(result, "notes") or []],
        errors=[str(e) for e in _get(result, "errors") or []],
        raw=[str(r) for r in _get(result, "raw") or [] if r],
    )


def nlt_out(result: Any) -> m.NltSelection:
    return m.NltSelection(
        mode=result.mode,
        status=result.status,
        decisions=[m.ToolDecisionOut(name=d.name, selected=d.selected, probability=d.probability) for d in result.decisions],
        selected=list(result.selected),
        reasoning=result.reasoning,
        missing=list(result.missing),
        unknown=list(result.unknown),
        raw_text=result.raw_text,
        trace=usage_trace(result.usage, result.seconds),
    )


def clarify_out(result: Any) -> m.ClarifyOutcome:
    return m.ClarifyOutcome(
        decision=result.decision,
        question=result.question,
        missing_arguments=[missing_out(x) for x in result.missing_arguments],
        model_said=result.model_said,
        status=result.status,
        trace=usage_trace(result.usage, result.seconds),
    )


BUILTIN_CATALOGUES = ("nlsi", "sgd")


def catalogue_summary(catalogue: Catalogue) -> m.CatalogueSummary:
    return m.CatalogueSummary(name=catalogue.name, description=catalogue.description, functions=catalogue.names,
                              builtin=catalogue.name in BUILTIN_CATALOGUES)


# ------------------------------------------------------------------------------- services
class Services:
    """Stores (db thread), models (model thread), strategies. Built by `create_server`; tests inject fakes.

    `profiles`, `catalogues`, `demos` may be store objects or zero-argument factories; factories are called
    on the thread that will use the store (SQLite connections are thread-bound).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        engine: Engine | None = None,
        embedder: Embedder | None = None,
        profiles: Any = None,
        catalogues: Any = None,
        demos: Any = None,
        load_engine: Callable[[Settings], Engine] | None = None,
        load_embedder: Callable[[Settings], Embedder] | None = None,
    ) -> None:
        self.settings = settings
        self.models = ModelLoader(
            settings, engine=engine, embedder=embedder, load_engine=load_engine, load_embedder=load_embedder
        )
        self.db = Worker("prefcall-db")
        self.model = Worker("prefcall-model")
        self._profiles_source = profiles
        self._catalogues_source = catalogues
        self._demos_source = demos
        self._profiles: Any = None
        self._catalogues: Any = None
        self._demos: Any = None
        self._pipeline: Any = None
        self._tag_examples: Any = None
        self._clarify_cache: OrderedDict[str, m.ClarifyOutcome] = OrderedDict()

    def close(self) -> None:
        self.db.shutdown()
        self.model.shutdown()

    # -- stores, created on their own thread -----------------------------------------------------
    def _profile_store(self) -> Any:
        if self._profiles is None:
            source = self._profiles_source
            if source is None:
                store_module = optional_module("prefcall.profiles.store")
                self._profiles = store_module.ProfileStore(self.settings.database_path())
            else:
                self._profiles = source() if callable(source) and not hasattr(source, "list_instructions") else source
        return self._profiles

    def _catalogue_store(self) -> Any:
        if self._catalogues is None:
            source = self._catalogues_source
            if source is None:
                registry = optional_module("prefcall.schemas.registry")
                self._catalogues = registry.CatalogueStore(self.settings.database_path())
            else:
                self._catalogues = source() if callable(source) and not hasattr(source, "get") else source
        return self._catalogues

    def _demo_store(self, embedder: Embedder | None) -> Any:
        if self._demos is None:
            source = self._demos_source
            if source is None:
                fcicl = optional_module("prefcall.strategies.fcicl")
                self._demos = fcicl.DemoStore(self.settings.database_path(), embedder=embedder)
            else:
                self._demos = source() if callable(source) and not hasattr(source, "add") else source
        return self._demos

    # -- profiles (db thread) --------------------------------------------------------------------
    def _instructions(self, user_id: str) -> list[Any]:
        return list(self._profile_store().list_instructions(user_id))

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

    def _add_instruction(self, user_id: str, text: str, create: bool) -> tuple[Any, int]:
        store = self._profile_store()
        if create:
            self._create_profile(user_id)
        added = store.add_instruction(user_id, text)
        return added, len(store.list_instructions(user_id))

    async def add_instruction(self, user_id: str, text: str, *, create: bool) -> tuple[m.InstructionOut, int]:
        added, count = await self.db.call(self._add_instruction, user_id, text, create)
        return instruction_out(added), count

    def _remove_instruction(self, user_id: str, instruction_id: int) -> tuple[Any, int]:
        store = self._profile_store()
        store.list_instructions(user_id)  # unknown user -> NotFoundError naming the user
        owned = {i.id for i in store.list_instructions(user_id)}
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

    def _set_tags(self, user_id: str, instruction_id: Any, tags: str, model: str) -> None:
        self._profile_store().set_tags(instruction_id, tags, model)

    # -- catalogues (db thread) ------------------------------------------------------------------
    async def catalogue(self, name: str) -> Catalogue:
        return await self.db.call(lambda: self._catalogue_store().get(name))

    def _all_catalogues(self) -> list[Catalogue]:
        store = self._catalogue_store()
        listed = store.list()
        return [c if isinstance(c, Catalogue) else store.get(_get(c, "name", c)) for c in listed]

    async def catalogues(self) -> list[Catalogue]:
        return await self.db.call(self._all_catalogues)

    def _import_catalogue(self, source: Any, name: str, description: str | None, replace: bool) -> tuple[Catalogue, bool]:
        store = self._catalogue_store()
        existed = any(_get(c, "name") == name for c in store.list())
        catalogue = store.add(source, name=name, description=description, replace=replace)
        return catalogue, existed

    async def import_catalogue(
        self, source: Any, name: str, description: str | None, replace: bool
    ) -> tuple[Catalogue, bool]:
        return await self.db.call(self._import_catalogue, source, name, description, replace)

    # -- model work (model thread) ---------------------------------------------------------------
    async def ready(self, progress: ProgressFn | None = None) -> tuple[Engine, Embedder]:
        return await self.models.wait(progress)

    def _parse(self, turns: list[Turn], instructions: list[Any], catalogue: Catalogue, config: str,
               overrides: dict[str, Any], applicable: list[str] | None) -> Any:
        pipeline_module = optional_module("prefcall.strategies.pipeline")
        tags_module = optional_module("prefcall.strategies.taps_tags")
        engine, embedder = self.models.engine, self.models.embedder
        if self._pipeline is None:
            self._pipeline = pipeline_module.Pipeline(
                engine, embedder=embedder, demos=self._demo_store(embedder), data_dir=self.settings.data_dir
            )
        # Fresh stored tags ride along so the pipeline validates them instead of tagging again.
        tagged = [
            tags_module.TaggedInstruction(instruction=i.text, tagged=i.tags, status="ok")
            if i.tags and not i.stale
            else tags_module.TaggedInstruction(instruction=i.text)
            for i in map(instruction_out, instructions)
        ]
        return self._pipeline.parse(
            turns, tagged, catalogue, pipeline_module.get_config(config, **overrides), applicable=applicable
        )

    def _cache_tags(self, user_id: str, instructions: list[Any], tags: list[Any], model: str) -> None:
        """Store valid tags the pipeline produced for untagged instructions (saves tagging them next time)."""
        by_text = {i.text: i for i in map(instruction_out, instructions) if not i.tags or i.stale}
        for tag in tags:
            item = by_text.pop(_get(tag, "instruction"), None)
            if item is not None and _get(tag, "status") == "ok" and _get(tag, "tagged"):
                self._set_tags(user_id, item.id, tag.tagged, model)

    async def parse(self, user_id: str, turns: list[Turn], catalogue_name: str, config: str,
                    overrides: dict[str, Any], applicable: list[str] | None,
                    progress: ProgressFn | None = None) -> m.ParseRequestResult:
        instructions = await self.db.call(self._instructions, user_id)
        catalogue = await self.catalogue(catalogue_name)
        engine, _ = await self.ready(progress)
        result = await self.model.call(self._parse, turns, instructions, catalogue, config, overrides, applicable)
        if _get(result, "tags"):
            try:
                await self.db.call(self._cache_tags, user_id, instructions, result.tags, engine.info.model_name)
            except PrefcallError as exc:  # a cache write must not cost the host its answer
                log.warning("could not cache tags for %s: %s", user_id, exc)
        return parse_result_out(result, user_id=user_id, catalogue=catalogue.name, config=config)

    async def select_tools(self, message: str, tools: Sequence[Function] | Catalogue, *, mode: str,
                           context: str | None, threshold: float, calibrate: bool,
                           progress: ProgressFn | None = None) -> m.NltSelection:
        nlt = optional_module("prefcall.strategies.nlt")
        engine, _ = await self.ready(progress)
        result = await self.model.call(
            lambda: nlt.select_tools(engine, message, tools, mode=mode, context=context, threshold=threshold,
                                     calibrate=calibrate)
        )
        return nlt_out(result)

    async def clarify(self, turns: list[Turn], catalogue: Catalogue, instructions: Sequence[str],
                      progress: ProgressFn | None = None) -> m.ClarifyOutcome:
        qwn = optional_module("prefcall.strategies.qwn")
        # Elicitation on the 2026-07-28 protocol retries the whole tool call with the user's answer; the
        # first pass is deterministic (greedy), so it is answered from this small cache, not recomputed.
        key = json.dumps([[t.model_dump() for t in turns], catalogue.model_dump(), list(instructions)],
                         sort_keys=True, default=str)
        if key in self._clarify_cache:
            self._clarify_cache.move_to_end(key)
            return self._clarify_cache[key].model_copy(deep=True)
        engine, embedder = await self.ready(progress)
        result = await self.model.call(
            lambda: qwn.clarify(engine, turns, catalogue, instructions=list(instructions), embedder=embedder)
        )
        outcome = clarify_out(result)
        self._clarify_cache[key] = outcome
        while len(self._clarify_cache) > CLARIFY_CACHE_SIZE:
            self._clarify_cache.popitem(last=False)
        return outcome.model_copy(deep=True)

    def _tag(self, text: str, catalogue: Catalogue) -> Any:
        tagger = optional_module("prefcall.strategies.taps_tagger")
        if self._tag_examples is None:
            self._tag_examples = tagger.TagExamples(list(tagger.BUILTIN_EXAMPLES), self.models.embedder)
        return tagger.tag_instruction(self.models.engine, text, catalogue, self._tag_examples)

    async def tag_profile(self, user_id: str, catalogue_name: str, *, force: bool,
                          progress: ProgressFn | None = None) -> m.TagProfileResult:
        instructions = await self.db.call(self._instructions, user_id)
        catalogue = await self.catalogue(catalogue_name)
        engine, _ = await self.ready(progress)
        outcomes: list[m.TagOutcome] = []
        trace = m.Trace()
        for item in instructions:
            out = instruction_out(item)
            if out.tags and not out.stale and not force:
                outcomes.append(m.TagOutcome(instruction_id=out.id, text=out.text, status="skipped", tags=out.tags))
                continue
            result = await self.model.call(self._tag, out.text, catalogue)
            trace.prompt_tokens += result.prompt_tokens
            trace.evaluated += result.evaluated
            trace.reused += result.reused
            trace.completion_tokens += result.completion_tokens
            trace.model_calls += 1
            trace.seconds = round(trace.seconds + result.seconds, 4)
            if result.status == "ok" and result.tagged:
                await self.db.call(self._set_tags, user_id, _get(item, "id"), result.tagged, engine.info.model_name)
            outcomes.append(m.TagOutcome(instruction_id=out.id, text=out.text, status=result.status,
                                         tags=result.tagged, errors=list(result.reasons)))
        return m.TagProfileResult(
            user_id=user_id, catalogue=catalogue.name, model=engine.info.model_name,
            tagged=sum(o.status == "ok" for o in outcomes), skipped=sum(o.status == "skipped" for o in outcomes),
            invalid=sum(o.status == "invalid" for o in outcomes), instructions=outcomes, trace=trace,
        )

    def _store_demo(self, turns: list[Turn], instructions: list[str], catalogue: str, calls: list[Call]) -> Any:
        fcicl = optional_module("prefcall.strategies.fcicl")
        store = self._demo_store(self.models.embedder)
        return fcicl.add_demonstration(store, render_dialogue(turns), instructions, catalogue, calls, source="host")

    async def store_demonstration(self, turns: list[Turn], instructions: list[str], catalogue: str,
                                  calls: list[Call]) -> Any:
        return await self.model.call(self._store_demo, turns, instructions, catalogue, calls)
