"""parse_request's named configurations (PipelineConfig, CONFIGS, get_config) and what it returns (ParseResult,
Trace): the data of strategies.pipeline, apart from the steps."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from prefcall.errors import ValidationError
from prefcall.schemas.model import Call, MissingArgument
from prefcall.schemas.state import DialogueState
from prefcall.strategies.taps_gate import MEASURES
from prefcall.strategies.taps_tagger import TagMode, TagResult

Tagging = Literal["off", "always", "joint", "gated"]
# Stage 1 of two-stage calling: "generate" = FnCTOD's grammar-constrained JSON list of names (paper-faithful);
# "score" = every name scored, calibrated against a content-free dialogue; "hybrid" = score + domain prior.
FunctionSelection = Literal["generate", "score", "hybrid"]
# Stage 2: "generate" = FnCTOD's grammar-constrained JSON arguments (free values: BFCL-style catalogues);
# "grounded" = values chosen among spans of the user's turns, preferences applied from tags (strategies.grounded).
Filling = Literal["generate", "grounded"]


DEFAULT_CONFIG = "full"  # the configuration the server ships (parse_request without `config`) and bench measures


class PipelineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    select_instructions: bool = False  # ignored when the caller passes `applicable`
    use_demos: bool = False
    n_demos: int = Field(default=3, ge=0, le=10)
    demo_candidates: int = Field(default=20, ge=1)
    two_stage: bool = True
    tagging: Tagging = "off"
    gate_threshold: float | None = None  # None: calibrated value for the model, else DEFAULT_GATE_THRESHOLD
    gate_measure: str = "least_confidence"
    post_check: bool = False
    merge_tag_slots: bool = False  # ours: fill arguments the calls left out from valid tags' slots
    allow_refuse: bool = False  # stage 1 may return no function (MCP hosts); NLSI always needs a call
    # grounded, with allow_refuse: an ask for functions the request is not about becomes a refusal
    ask_relevance: bool = True
    # which answers the relevance check reads: "unfilled_asks" (asks whose request fills no required argument)
    # or "all" (every call and ask: whether a function fits never depends on what the filler could fill)
    relevance_scope: Literal["unfilled_asks", "all"] = "all"
    # grounded, with allow_refuse: also refuse an ask whose request names no drafted function and fills none of
    # its required arguments. Off: that is an empty fill, not evidence that no function fits (a small model fills
    # nothing in "Remind me to call my mother"); refusals come from relevance evidence only.
    refuse_unfilled: bool = False
    # grounded: a profile's records of past use set nothing unless the request refers back to past use, and its
    # facts about the user ("My home address is ...") fill required arguments left open (strategies.statements)
    profile_statements: bool = True
    # stage 1 lists a catalogue of more than 32 functions shortlisted by retrieval to this many (strategies.shortlist;
    # None: the size fitted for the embedder)
    shortlist_size: int | None = Field(default=None, ge=1)
    max_calls: int = Field(default=2, ge=1, le=8)  # NLSI gold has at most 2 calls; greedy decoding fills maxItems with repeats
    tag_shots: int = Field(default=4, ge=0, le=10)
    tag_mode: TagMode = "text"  # "text": TAPS free-text tagger; "spans": constrained labels+spans (small models)
    record_variants: bool = False  # gated: also run the tagged pass when the gate holds, for threshold analysis
    function_selection: FunctionSelection = "generate"
    prior_weight: float = Field(default=1.0, ge=0.0)  # hybrid: weight of the domain log prior
    filling: Filling = "generate"


CONFIGS: dict[str, PipelineConfig] = {
    "default": PipelineConfig(name="default"),
    "ext-tag": PipelineConfig(name="ext-tag", tagging="always"),
    "joint-tag": PipelineConfig(name="joint-tag", tagging="joint"),
    "taps": PipelineConfig(name="taps", tagging="gated"),
    "fnctod-full": PipelineConfig(name="fnctod-full", select_instructions=True, use_demos=True, n_demos=3,
                                  two_stage=True, tagging="gated", post_check=True, merge_tag_slots=True,
                                  tag_mode="spans", function_selection="hybrid"),
    # The shipped default: scored stage 1, grounded values, preferences from structured tags, post-check.
    "full": PipelineConfig(name="full", select_instructions=True, use_demos=True, n_demos=0, two_stage=True,
                           tagging="always", post_check=True, tag_mode="structured", function_selection="hybrid",
                           filling="grounded"),
}


def get_config(name: str, **overrides: Any) -> PipelineConfig:
    """A named configuration with field overrides; unknown names or fields raise ValidationError."""
    if name not in CONFIGS:
        raise ValidationError(f"unknown pipeline config {name!r}: use one of {', '.join(CONFIGS)}")
    if overrides.get("gate_measure", "least_confidence") not in MEASURES:
        raise ValidationError(f"gate_measure must be one of {', '.join(MEASURES)}")
    try:
        return CONFIGS[name].model_validate({**CONFIGS[name].model_dump(), **overrides})
    except PydanticValidationError as exc:
        raise ValidationError(f"bad override for config {name!r}: {exc.errors()[0]['msg']} "
                              f"({'.'.join(map(str, exc.errors()[0]['loc']))})") from exc


class Trace(BaseModel):
    timings: dict[str, float] = Field(default_factory=dict)
    prompt_tokens: int = 0
    evaluated: int = 0
    reused: int = 0
    completion_tokens: int = 0
    decoded: int = 0  # single-token decodes of scored candidates (after each one's first token)
    model_calls: int = 0


class ParseResult(BaseModel):
    status: Literal["ok", "parse_error"] = "ok"
    # "error": no decision was made, the model's output could not be parsed (status parse_error, see errors)
    decision: Literal["call", "ask", "refuse", "error"] = "call"
    calls: list[Call] = Field(default_factory=list)
    question: str | None = None
    missing: list[MissingArgument] = Field(default_factory=list)
    instructions_used: list[str] = Field(default_factory=list)
    confidence: float = 0.0  # exp(mean token logprob) of the final calls' generations
    least_confidence: float | None = None  # of the first (untagged) pass: what the gate compares
    uncertainty: dict[str, float] = Field(default_factory=dict)  # every measure, first pass
    tagged: bool = False  # the final calls were generated from tagged instructions
    gate_fired: bool = False
    gate_threshold: float | None = None
    functions: list[str] = Field(default_factory=list)  # stage 1's selection (final pass)
    tags: list[TagResult] = Field(default_factory=list)  # for the caller to cache (ProfileStore.set_tags)
    demos: list[str] = Field(default_factory=list)  # ids of the demonstrations shown
    notes: list[str] = Field(default_factory=list)  # post-check repairs and drops
    config: str = ""
    trace: Trace = Field(default_factory=Trace)
    raw: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    variants: dict[str, list[Call]] = Field(default_factory=dict)  # gated: {"untagged": [...], "tagged": [...]}
    provenance: list[dict[str, Any]] = Field(default_factory=list)  # grounded: who set each value
    skipped: dict[str, str] = Field(default_factory=dict)  # grounded: instruction -> why it did not apply
    state: DialogueState | None = None  # the conversation's state after this turn (schemas.state)
