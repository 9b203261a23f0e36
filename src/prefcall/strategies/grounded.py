"""Grounded calling: functions scored, arguments chosen among spans of the request, preferences applied from tags.

The `grounded` pipeline configuration (the server's default) composes small steps:
1. the dialogue is split into turns; instruction selection and argument values read the user's turns only
   (the assistant's questions are not the user's words); earlier calls are a source too;
2. stage 1 scores every function name against a content-free calibration (`fnctod.select_by_score`) and may
   return none: that is a refusal, not a guess;
3. each selected function's arguments are filled by `grounding.fill` from candidate spans of the user's turns
   and earlier calls (numbers, booleans and enum values normalised from the schema); such a value is never
   written by the model, so it cannot be invented, and never comes from a demonstration (demonstrations only
   inform the value memory that ranks spans); arrays, objects and syntax strings are written by the model under
   their grammar and kept only when every part of them occurs in those sources;
4. each applicable standing instruction is tagged by the same filler run on the instruction alone
   (`tag_structured`: intent from the instruction's domain words, slots = the spans chosen, chains from the
   functions its consequence names); a validated tag becomes a `Preference` that rules apply to the calls
   (conditions, chains, the dialogue wins), with the instruction that set each value recorded;
5. several calls of one function only when the request or an instruction coordinates several values;
6. post-check: ask for required arguments still missing (the question per argument reaches the host),
   call otherwise.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from prefcall.engine.base import Embedder, Engine
from prefcall.errors import ConfigError, ParseError
from prefcall.retrieval.text import tokenize
from prefcall.schemas.model import Call, Catalogue, Function, Turn, as_dialogue
from prefcall.schemas.validation import coerce_value
from prefcall.storage.demos import Demonstration
from prefcall.strategies.grounding.evidence import FEATURES, FeatureContext, ValueMemory, Weights
from prefcall.strategies.grounding.fill import (Choice, FillResult, GroundingWeights, RankRow, Recorder,
                                                fill_arguments, flag_mention, transcript)
from prefcall.strategies.grounding.indifference import dont_care_value, indifference
from prefcall.strategies.grounding.values import (Source, accepted_offers, call_sources, is_offer, offer_sources,
                                                  origin_like, questions)
from prefcall.strategies.preferences import Draft, Preference, Provenance, preference_from_tags
from prefcall.strategies.selection import (DomainModel, SelectionConfig, instruction_domains, outside_names,
                                          split_condition)
from prefcall.strategies.taps_tagger import TagResult, check_tagging
from prefcall.tagging.tags import build_span_tags, function_for_intent, intent_label, parse_tags, slot_label

_SPEAKER = re.compile(r"^\s*(User|Agent|Assistant|System)\s*:\s?(.*)$", re.I)
_ROLES = {"user": "user", "agent": "assistant", "assistant": "assistant", "system": "system"}


# ---------------------------------------------------------------------------- turns
def split_turns(dialogue: str | list[Turn]) -> list[Turn]:
    """Turns of a dialogue; a rendered transcript ("User: ...\\nAgent: ...") is split back into its turns."""
    if not isinstance(dialogue, str):
        return as_dialogue(dialogue)
    turns: list[Turn] = []
    for line in dialogue.splitlines():
        match = _SPEAKER.match(line)
        if match:
            turns.append(Turn(role=_ROLES[match.group(1).lower()], content=match.group(2).strip()))
        elif line.strip() and turns:
            turns[-1] = turns[-1].model_copy(update={"content": (turns[-1].content + "\n" + line.strip()).strip()})
        elif line.strip():
            turns.append(Turn(role="user", content=line.strip()))
    return turns or [Turn(role="user", content=dialogue.strip())]


def value_turns(turns: Sequence[Turn]) -> list[Turn]:
    """The turns values are read from, in order: the user's, and the assistant's proposals the user accepted (the
    filler's context; the assistant's other words are not the user's)."""
    offered = set(accepted_offers(turns))
    return [t for i, t in enumerate(turns) if t.role == "user" or i in offered]


def user_sources(turns: list[Turn]) -> list[Source]:
    """The user's turns, the assistant's proposals the user accepted and the calls made earlier in the dialogue:
    where a value may come from."""
    sources = [Source("user", t.content, f"turn {i}",
                      asked=questions(turns[i - 1].content) if i and turns[i - 1].role == "assistant" else "")
               for i, t in enumerate(turns) if t.role == "user" and t.content]
    return sources + offer_sources(turns) + call_sources(c for t in turns for c in t.calls)


# ---------------------------------------------------------------------------- weights and memory
def load_weights(model_name: str = "", path: Path | None = None,
                 fitted: dict[str, list[float]] | None = None) -> GroundingWeights:
    """Structural weights shipped in data/grounding.json, with the combination calibrated for `model_name`
    when one is listed (else the defaults), and over both the kinds a fit for this model file sets (`fitted`:
    storage.fits.Fit.grounding, made by `prefcall fit`)."""
    text = path.read_text(encoding="utf-8") if path else \
        (resources.files("prefcall") / "data" / "grounding.json").read_text(encoding="utf-8")
    data = json.loads(text)
    s = data["structure"]
    if tuple(s.get("features", FEATURES)) != FEATURES:
        raise ConfigError("grounding weights were fitted for other features: refit them with the current code")
    weights = GroundingWeights(structure=Weights(tuple(s["mean"]), tuple(s["scale"]), tuple(s["weights"]),
                                                 float(s["bias"])))
    combination = {**data.get("combination", {}).get("default", {}),
                   **data.get("combination", {}).get(model_name, {}), **(fitted or {})}
    return weights.model_copy(update={k: tuple(v) if isinstance(v, list) else bool(v) if k == "propose" else v
                                      for k, v in combination.items()})


@dataclass
class MemoryCache:
    """Value memories per catalogue, rebuilt when the demonstrations change (count and newest id)."""

    _items: dict[str, tuple[tuple[int, str], ValueMemory]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, catalogue: str, demos: list[Demonstration]) -> ValueMemory:
        stamp = (len(demos), demos[-1].id if demos else "")
        with self._lock:
            cached = self._items.get(catalogue)
            if cached is not None and cached[0] == stamp:
                return cached[1]
        memory = ValueMemory()
        for demo in demos:
            for call in demo.calls:
                for argument, value in call.arguments.items():
                    memory.add(call.name, argument, value, demo.id)
        with self._lock:
            self._items[catalogue] = (stamp, memory)
        return memory


# ---------------------------------------------------------------------------- filling
@dataclass
class Grounder:
    """What filling needs besides the function and the text: engine, embedder, weights, value memory."""

    engine: Engine | None
    embedder: Embedder | None
    weights: GroundingWeights
    memory: ValueMemory | None = None
    exclude: frozenset[str] = frozenset()
    record: Recorder | None = None  # receives every scored candidate (`prefcall fit`); None in serving

    def fill(self, function: Function, sources: list[Source], context: str, *, write_free: bool = True,
             avoid: Sequence[str] = (), request: bool = True, chained: bool = False) -> FillResult:
        """`request`: the sources are a request, whose required arguments the call cannot go without (the
        required floor and the model's proposals fill them); False for a standing instruction read alone, which
        sets only the arguments it states ("If I ask for Taxi Rides, my preferred passengers is five" names no
        pickup, and "Taxi Rides" is none). `chained`: the call is one a standing instruction chains to the
        request's function, so the request's words name another function (FeatureContext.named)."""
        features = FeatureContext(function, self.embedder, self.memory, self.exclude,
                                  sources_text="\n".join(s.text for s in sources), named=not chained)
        weights = self.weights if request else self.weights.model_copy(update={"required_floor": None,
                                                                                "propose": False})
        record = self.record
        if record is not None and not request:  # rows say which fill they come from (`prefcall fit`)
            outer = record

            def record(row: RankRow) -> None:
                outer(row.model_copy(update={"request": False}))
        return fill_arguments(self.engine, function, sources, context, features, weights, record=record,
                              write_free=write_free, avoid=avoid)


def origins_of(function: Function, filled: FillResult) -> list[str]:
    """The values a call took for arguments that say where something leaves from (its origin city, its departure
    airport): what a call chained to it must not take as its own place."""
    return [text for choice in filled.choices
            if origin_like(choice.argument, function.properties.get(choice.argument, {})) for text in choice.texts
            if text]


def with_indifference(draft: Draft, function: Function, texts: Sequence[str]) -> Draft:
    """An argument the filler left unset, that the user says they do not mind ("any airline"), takes the schema's
    don't-care value when it has one the schema accepts (grounding.indifference); the user said it (origin
    "user")."""
    for argument, spec in function.properties.items():
        if argument in draft.values or not isinstance(spec, dict):
            continue
        default = dont_care_value(spec)
        if default is None or coerce_value(default, spec)[1] is not None:
            continue
        said = indifference(texts, argument)
        if said is not None:
            draft.set(argument, [default], Provenance(argument=argument, value=default, origin="user", source=said))
    return draft


# A value the user wrote that the filler found this probable for an argument but left unset: too weak to set
# alone, it is still the user's word against a standing instruction's value for that argument (`Draft.heard`).
HEARD_FLOOR = 0.35


def draft_from_fill(result: FillResult, origin: str = "user") -> Draft:
    draft = Draft(name=result.function)
    for choice in result.choices:
        kind, ref = choice.sources[0].split(":", 1) if choice.sources and ":" in choice.sources[0] else (origin, "")
        draft.set(choice.argument, choice.values, Provenance(
            argument=choice.argument, value=choice.values[0] if len(choice.values) == 1 else choice.values,
            origin="call" if kind == "call" else "offer" if is_offer(ref) else "user",
            source=" | ".join(choice.texts)))
    for choice in result.unset:  # most probable first
        kind, _, ref = choice.sources[0].partition(":") if choice.sources else ("", "", "")
        if (choice.probability >= HEARD_FLOOR and kind == "user" and not is_offer(ref) and choice.texts
                and choice.texts[0]
                and choice.argument not in draft.values and choice.argument not in draft.heard):
            draft.heard[choice.argument] = Provenance(argument=choice.argument, value=choice.values[0],
                                                      origin="user", source=choice.texts[0])
    return draft


# ---------------------------------------------------------------------------- structured tags
def tag_key(instruction: str, catalogue: Catalogue, mode: str, model: str) -> str:
    """Stored tags are keyed by the instruction's text hash, the catalogue (name and content), mode and model."""
    digest = hashlib.sha256(instruction.encode()).hexdigest()[:16]
    listing = hashlib.sha256(json.dumps([f.model_dump() for f in catalogue.functions], sort_keys=True,
                                        default=str).encode()).hexdigest()[:12]
    return f"{digest}:{catalogue.name}@{listing}:{mode}:{model}"


INSTRUCTION_FLOOR = 0.2  # lowest probability at which an instruction's best value is taken when none clears 0.5


def tag_structured(grounder: Grounder, instruction: str, catalogue: Catalogue,
                   domains: DomainModel | None = None, prefer: Sequence[str] = ()) -> TagResult:
    """Tag an instruction with the grounded filler: intent = the function its words name (else the function
    whose text the embedder finds closest), slots = the spans the filler chooses in it, further intents = other
    functions its consequence names (chains). Where its words fit several functions alike ("When the request is
    in standard seating" fits a ferry's cabin and a taxi's vehicle), the first of them in `prefer` (the functions
    the request is for) is its intent: the request says which one the user meant.

    The filler reads the instruction as the request's text: under an empty request, a model reads every
    argument as not given (Qwen2.5-Coder-1.5B gave "Amazing Smile Dental" 0.003 against null for dentist_name).
    A boolean is tagged on the words that name it ("[SL:SERVES_ALCOHOL serves alcohol ]"), set False with the
    negation that says so ("[SL:SHUFFLE no shuffle ]", "[SL:FURNISHED unfurnished ]"): tags are spans, and a value
    without one would be lost."""
    domains = domains or DomainModel.build(catalogue)
    found = instruction_functions(grounder, instruction, domains)
    if not found:
        return TagResult(instruction=instruction, status="invalid", mode="structured",
                         reasons=["no function of the catalogue matches this instruction"])
    main = catalogue.function(next((name for name in found if name in prefer), found[0]))
    assert main is not None
    filled = grounder.fill(main, [Source("instruction", instruction, instruction)],
                           transcript([Turn(role="user", content=instruction)]), write_free=False, request=False)
    choices = list(filled.choices)
    condition, consequence = split_condition(instruction)
    if not choices and filled.runner_up is not None and filled.runner_up.probability >= INSTRUCTION_FLOOR:
        # A standing instruction exists to state a preference: when no value clears the bar, its most probable
        # value is still the best reading (a chain instruction, which names only requests, has none that high).
        choices = [filled.runner_up]
    if condition is not None:
        choices += _consequence_value(filled, choices, instruction, consequence, domains, main.name)
    slots = []
    for choice in choices:
        texts = [text for text in choice.texts if text]
        if not texts and choice.values in ([True], [False]):
            mention = flag_mention(choice.argument, instruction, negated=choice.values == [False])
            texts = [mention] if mention else []
        slots += [(slot_label(choice.argument), text) for text in texts]
    also = []
    if condition is not None:
        # A chain names another request in the consequence ("... then also look at Hotels"); a word that is a
        # chosen value ("my preferred event type is Music") names no request.
        values = {w for _, text in slots for w in tokenize(text, drop_stop_words=False)}
        named = domains.chain_targets([w for w in tokenize(outside_names(consequence), drop_stop_words=False)
                                       if w not in values], [main.name])
        also = [intent_label(n) for n in named]
    try:
        built = build_span_tags(instruction, intent_label(main.name), slots, also)
    except ParseError as exc:
        return TagResult(instruction=instruction, status="invalid", mode="structured", reasons=[str(exc)])
    result = check_tagging(instruction, built.tagged, catalogue)
    return result.model_copy(update={"mode": "structured", "notes": built.dropped,
                                     "least_confidence": filled.least_confidence,
                                     "prompt_tokens": filled.prompt_tokens, "evaluated": filled.evaluated,
                                     "reused": filled.reused, "decoded": filled.decoded})


def instruction_functions(grounder: Grounder, instruction: str, domains: DomainModel) -> list[str]:
    """The functions an instruction is about, best first (selection.instruction_domains: the words that name them,
    else the closest function texts by the embedder, computed only then)."""
    embedder = grounder.embedder

    def cosines() -> np.ndarray | None:  # embedded only where no word outside a name names a function
        if embedder is None or not domains.texts:
            return None
        vectors = np.asarray(embedder.embed([instruction, *domains.texts]), dtype=np.float32)
        return vectors[1:] @ vectors[0]

    return instruction_domains(domains, instruction, cosines, SelectionConfig())


def retag_for(grounder: Grounder, tag: TagResult, catalogue: Catalogue, prefer: Sequence[str]) -> str | None:
    """The function of `prefer` (the request's) that an instruction tagged for another one is about as well, where
    its words fit several ("When the request is in standard seating": a ferry's cabin or a taxi's vehicle); None
    where its tag is already for one of them, or it is about none of them."""
    if tag.status != "ok" or not tag.tagged or not prefer:
        return None
    tops = [c for c in parse_tags(tag.tagged).children if not isinstance(c, str) and c.kind == "IN"]
    intent = function_for_intent(tops[0].label, catalogue) if tops else None
    if intent is None or intent.name in prefer:
        return None
    found = instruction_functions(grounder, tag.instruction, DomainModel.build(catalogue))
    return next((name for name in found if name in prefer), None)


def _consequence_value(filled: FillResult, choices: list[Choice], instruction: str, consequence: str,
                       domains: DomainModel, main: str) -> list[Choice]:
    """A conditional instruction states a value in its consequence ("If cuisine is Southern, then Bennigan's is
    the place to go"): when every chosen value lies in the condition, the consequence's most probable unset value
    is taken at the instruction floor. A consequence that names another request is a chain and has none."""
    start = instruction.rfind(consequence)
    if start < 0 or domains.named(tokenize(outside_names(consequence), drop_stop_words=False)).keys() - {main}:
        return []
    end = start + len(consequence)  # the consequence may come first ("Y if X"): its own words, not the condition's

    def inside(text: str) -> bool:
        found = instruction.find(text, start) if text else -1
        return 0 <= found and found + len(text) <= end

    if any(inside(text) for choice in choices for text in choice.texts):
        return []
    taken = {choice.argument for choice in choices}
    best = next((c for c in filled.unset if c.argument not in taken and c.texts and inside(c.texts[0])), None)
    return [best] if best is not None and best.probability >= INSTRUCTION_FLOOR else []


def preference_of(tag: TagResult, catalogue: Catalogue) -> Preference | None:
    """The preference a validated tag expresses (None for invalid tags or intents outside the catalogue)."""
    if tag.status != "ok" or not tag.tagged:
        return None
    return preference_from_tags(tag.instruction, parse_tags(tag.tagged), catalogue)


def unsupported(drafts: list[Draft], catalogue: Catalogue, user_text: str) -> bool:
    """No drafted function is supported by the request: the user's words contain no word of their names and
    fill none of their required arguments (values from standing instructions do not count: they apply to any
    request). Only name words count: a description's verbs ("calculate", "find") fit many requests."""
    domains = DomainModel.build(catalogue)
    said = set(tokenize(user_text, drop_stop_words=False))
    for draft in drafts:
        function = catalogue.function(draft.name)
        if function is None or domains.name_words.get(draft.name, set()) & said or not function.required:
            return False
        if fills_required([draft], catalogue):
            return False
    return bool(drafts)


def fills_required(drafts: list[Draft], catalogue: Catalogue) -> bool:
    """The user's words gave a value for some required argument of a drafted function (before preferences)."""
    for draft in drafts:
        function = catalogue.function(draft.name)
        if function is not None and any(argument in draft.values for argument in function.required):
            return True
    return False


def calls_of(drafts: list[Draft]) -> list[Call]:
    return [call for draft in drafts for call in draft.calls()]


def provenance_of(drafts: list[Draft]) -> list[dict[str, Any]]:
    """Which instruction (or the user's words) set each value, for the caller."""
    return [{"function": d.name, "argument": p.argument, "value": p.value, "origin": p.origin,
             **({"instruction": p.instruction} if p.instruction else {}), **({"source": p.source} if p.source else {})}
            for d in drafts for p in d.provenance.values()]
