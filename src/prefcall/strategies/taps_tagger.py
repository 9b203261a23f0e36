"""The TAPS tagger: a standing instruction -> its structured tag form, with few-shot examples retrieved
(hybrid BM25 + embedding) from a tagged set such as taps/tags_train.json.

The output is validated (`prefcall.tagging.tags.validate_tags`); an invalid tagging comes back as
status="invalid" with its reasons and is never used for generation.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from prefcall.engine.base import ChatMessage, Embedder, Engine, Prompt
from prefcall.errors import ParseError, StoreError, ValidationError
from prefcall.retrieval.hybrid import HybridIndex
from prefcall.schemas.model import Catalogue
from prefcall.tagging.tags import (
    MAX_SPAN_WORDS,
    SlotFill,
    build_span_tags,
    instruction_spans,
    intent_label,
    parse_tags,
    serialize_tags,
    slot_label,
    tags_to_span_choice,
    tags_to_triples,
    validate_tags,
)

TagMode = Literal["text", "spans", "structured"]  # structured: strategies.grounded.tag_structured
TAG_MODES: tuple[str, ...] = ("text", "spans")

TAGGER_SYSTEM = (
    "You tag a user's standing instruction for API calls. Copy the instruction word for word and add brackets:\n"
    "[IN:<API> ... ] around the part about an API, [SL:<ARGUMENT> value ] around each value.\n"
    "Use only these APIs and arguments:\n{labels}"
)


class TagExample(BaseModel):
    instruction: str
    tagged: str


# Hand-written fallback so the tagger works without a tagged set (e.g. a server with no data files).
BUILTIN_EXAMPLES = [
    TagExample(instruction="When I look for restaurants, I like Thai food in Oakland.",
               tagged="[IN:GET_RESTAURANTS When I look for restaurants, I like [SL:CUISINE Thai ] food in [SL:CITY Oakland ]. ]"),
    TagExample(instruction="My preferred airline is United Airlines when I book flights.",
               tagged="[IN:GET_FLIGHTS My preferred airline is [SL:AIRLINES United Airlines ] when I book flights. ]"),
    TagExample(instruction="If I ask for Events, also check Hotels.",
               tagged="[IN:GET_EVENTS If I ask for Events, also check [IN:GET_HOTELS Hotels ]. ]"),
]


class TagExamples:
    """Tagged instructions with a hybrid index for nearest-neighbour few-shot selection."""

    def __init__(self, examples: list[TagExample], embedder: Embedder | None = None) -> None:
        self.examples = examples
        self._embedder = embedder
        self._index: HybridIndex | None = None
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: Path | str, embedder: Embedder | None = None) -> TagExamples:
        try:
            rows = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise StoreError(f"cannot read tagged examples {path}: {exc}: pass taps/tags_train.json") from exc
        return cls([TagExample(instruction=r["instruction"], tagged=r["tagged"]) for r in rows], embedder)

    @classmethod
    def builtin(cls) -> TagExamples:
        return cls(list(BUILTIN_EXAMPLES))

    def nearest(self, instruction: str, k: int) -> list[TagExample]:
        with self._lock:
            if self._index is None:
                self._index = HybridIndex([e.instruction for e in self.examples], self._embedder)
        hits = self._index.search(instruction, k)
        chosen = [self.examples[h.index] for h in hits if self.examples[h.index].instruction != instruction]
        # Closest last: small models copy the most recent example most.
        return list(reversed(chosen[:k]))


class TagResult(BaseModel):
    instruction: str
    status: Literal["ok", "invalid"]
    mode: TagMode = "text"
    tagged: str | None = None  # canonical serialisation when ok
    raw: str = ""
    reasons: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # spans mode: model choices left out (duplicates, overlaps)
    triples: list[SlotFill] = Field(default_factory=list)
    least_confidence: float | None = None
    prompt_tokens: int = 0
    evaluated: int = 0
    reused: int = 0
    completion_tokens: int = 0
    decoded: int = 0  # structured mode: candidate tokens after the first (CandidateScores.decoded)
    seconds: float = 0.0


def render_labels(catalogue: Catalogue) -> str:
    return "\n".join(
        f"IN:{intent_label(f.name)}: " + ", ".join(f"SL:{slot_label(a)}" for a in f.properties) for f in catalogue.functions
    )


def tagger_prompt(engine: Engine, instruction: str, catalogue: Catalogue, shots: list[TagExample]) -> Prompt:
    messages = [ChatMessage("system", TAGGER_SYSTEM.format(labels=render_labels(catalogue)))]
    for shot in shots:
        messages += [ChatMessage("user", shot.instruction), ChatMessage("assistant", shot.tagged)]
    messages.append(ChatMessage("user", instruction))
    return Prompt(tuple(messages), shared=1)


def check_tagging(instruction: str, tagged: str, catalogue: Catalogue) -> TagResult:
    """Validate a tag string (from a model, a cache or a file) for this instruction and catalogue."""
    reasons = validate_tags(tagged, instruction, catalogue)
    if reasons:
        return TagResult(instruction=instruction, status="invalid", raw=tagged, reasons=reasons)
    tree = parse_tags(tagged)
    return TagResult(instruction=instruction, status="ok", tagged=serialize_tags(tree), raw=tagged,
                     triples=tags_to_triples(tree, catalogue))


def tag_instruction(engine: Engine, instruction: str, catalogue: Catalogue, examples: TagExamples | None = None,
                    *, k: int = 4, mode: TagMode = "text") -> TagResult:
    """Tag one instruction with k retrieved examples; invalid output -> status="invalid" with reasons.

    mode="text" (TAPS): the model rewrites the instruction with brackets inserted.
    mode="spans" (ours, for small models): the model picks labels and spans as grammar-constrained JSON and
    the tag string is built from them (`tag_spans`)."""
    if mode == "spans":
        return tag_spans(engine, instruction, catalogue, examples, k=k)
    if mode != "text":
        raise ValidationError(f"unknown tagging mode {mode!r}: use one of {', '.join(TAG_MODES)}")
    shots = (examples or TagExamples.builtin()).nearest(instruction, k)
    prompt = tagger_prompt(engine, instruction, catalogue, shots)
    started = time.perf_counter()
    budget = engine.count_tokens(instruction) * 2 + 48  # the words plus brackets and labels
    generation = engine.generate(prompt, max_tokens=budget, stop=("\n",))
    raw = generation.text.strip()
    try:
        result = check_tagging(instruction, raw, catalogue)
    except ParseError as exc:  # validate_tags reports parse problems itself; this is belt and braces
        result = TagResult(instruction=instruction, status="invalid", raw=raw, reasons=[str(exc)])
    return result.model_copy(update={
        "least_confidence": generation.least_confidence, "prompt_tokens": generation.usage.prompt_tokens,
        "evaluated": generation.usage.evaluated, "reused": generation.usage.reused,
        "completion_tokens": generation.completion_tokens, "seconds": generation.seconds or time.perf_counter() - started,
    })


# -- constrained span tagging ---------------------------------------------------------------------
SPANS_SYSTEM = (
    "You read a user's standing instruction for API calls and answer in JSON.\n"
    '"intent": the API the instruction is about. "slots": the arguments of that API whose values the instruction '
    'states, each "value" copied exactly from the instruction. "with": other APIs it asks to check as well (usually none).\n'
    "APIs and their arguments:\n{labels}"
)
# Key names sort alphabetically in decision order (intent < slots < with) on purpose: the engine caches grammars
# under the schema dumped with sorted keys, so properties are generated in alphabetical order.
MAX_SLOTS = 4  # TAPS gold has at most 4 slots per instruction; a bound also stops greedy repetition
MAX_ALSO = 2


def render_span_labels(catalogue: Catalogue) -> str:
    return "\n".join(
        f"{intent_label(f.name)}: " + (", ".join(slot_label(a) for a in f.properties) or "(no arguments)")
        for f in catalogue.functions
    )


def spans_schema(instruction: str, catalogue: Catalogue, max_words: int = MAX_SPAN_WORDS) -> dict:
    """JSON Schema of the constrained answer. One anyOf branch per intent so each intent offers only its own
    slot labels; every value is an enum of the instruction's word n-grams (shared through $defs so the
    grammar holds the n-grams once, not once per intent)."""
    intents = [intent_label(f.name) for f in catalogue.functions]
    branches = []
    for function in catalogue.functions:
        slots: dict = {"type": "array", "maxItems": MAX_SLOTS, "items": {
            "type": "object", "additionalProperties": False, "required": ["slot", "value"],
            "properties": {"slot": {"enum": [slot_label(a) for a in function.properties]},
                           "value": {"$ref": "#/$defs/span"}}}}
        if not function.properties:
            slots = {"type": "array", "maxItems": 0, "items": {"type": "string"}}
        branches.append({"type": "object", "additionalProperties": False, "required": ["intent", "slots", "with"],
                         "properties": {"intent": {"const": intent_label(function.name)}, "slots": slots,
                                        "with": {"type": "array", "maxItems": MAX_ALSO, "items": {"$ref": "#/$defs/intent"}}}})
    return {"$defs": {"span": {"enum": list(instruction_spans(instruction, max_words))}, "intent": {"enum": intents}},
            "anyOf": branches}


def spans_prompt(engine: Engine, instruction: str, catalogue: Catalogue, shots: list[TagExample]) -> Prompt:
    messages = [ChatMessage("system", SPANS_SYSTEM.format(labels=render_span_labels(catalogue)))]
    for shot in shots:
        choice = tags_to_span_choice(shot.tagged, catalogue)
        if choice is not None:  # a demo whose intent is not in this catalogue would teach a label we forbid
            messages += [ChatMessage("user", shot.instruction), ChatMessage("assistant", json.dumps(choice))]
    messages.append(ChatMessage("user", instruction))
    return Prompt(tuple(messages), shared=1)


def read_span_choice(raw: str) -> tuple[str, list[tuple[str, str]], list[str]]:
    """(intent, [(slot, value)], also) from the model's JSON; ParseError when it is not that shape."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ParseError(f"tagger output is not complete JSON ({exc.msg}): raise the token budget or check the grammar") from exc
    if not isinstance(data, dict) or not isinstance(data.get("intent"), str):
        raise ParseError('tagger JSON has no "intent" string: the answer must be {"intent", "slots", "with"}')
    slots = data.get("slots") or []
    also = data.get("with") or []
    if not isinstance(slots, list) or not all(isinstance(s, dict) and isinstance(s.get("slot"), str)
                                              and isinstance(s.get("value"), str) for s in slots):
        raise ParseError('tagger JSON "slots" must be a list of {"slot": str, "value": str}')
    if not isinstance(also, list) or not all(isinstance(a, str) for a in also):
        raise ParseError('tagger JSON "with" must be a list of intent names')
    return data["intent"], [(s["slot"], s["value"]) for s in slots], also


def tag_spans(engine: Engine, instruction: str, catalogue: Catalogue, examples: TagExamples | None = None,
              *, k: int = 4) -> TagResult:
    """Constrained tagging: labels and instruction spans as JSON, then the tag string built and validated."""
    if not instruction.split():
        return TagResult(instruction=instruction, status="invalid", mode="spans", reasons=["empty instruction: nothing to tag"])
    shots = (examples or TagExamples.builtin()).nearest(instruction, k)
    prompt = spans_prompt(engine, instruction, catalogue, shots)
    started = time.perf_counter()
    budget = 40 + MAX_SLOTS * (14 + 2 * MAX_SPAN_WORDS) + MAX_ALSO * 10
    generation = engine.generate(prompt, max_tokens=budget, json_schema=spans_schema(instruction, catalogue))
    raw = generation.text.strip()
    try:
        intent, slots, also = read_span_choice(raw)
        built = build_span_tags(instruction, intent, slots, also)
        result = check_tagging(instruction, built.tagged, catalogue)
        result = result.model_copy(update={"raw": raw, "notes": built.dropped})
    except ParseError as exc:
        result = TagResult(instruction=instruction, status="invalid", raw=raw, reasons=[str(exc)])
    return result.model_copy(update={
        "mode": "spans", "least_confidence": generation.least_confidence,
        "prompt_tokens": generation.usage.prompt_tokens, "evaluated": generation.usage.evaluated,
        "reused": generation.usage.reused, "completion_tokens": generation.completion_tokens,
        "seconds": generation.seconds or time.perf_counter() - started,
    })
