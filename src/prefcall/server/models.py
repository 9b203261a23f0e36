"""Typed inputs and results of the MCP tools. Their JSON Schemas are what hosts see as input/output schemas.

The server maps each strategy's own result onto these models, so the wire contract stays stable while
strategies evolve (a new strategy field does not silently change what every host receives). The one model
shared with the strategies is `MissingArgument` (prefcall.schemas.model).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from prefcall.schemas.model import MissingArgument
from prefcall.schemas.state import DialogueState


class CallIn(BaseModel):
    """A concrete call, as hosts send it (report_feedback, earlier assistant calls)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, description="function name in the catalogue")
    arguments: dict[str, Any] = Field(default_factory=dict, description="argument name -> value")


class TurnIn(BaseModel):
    """One dialogue turn; an assistant turn may carry the calls it made (kept in context, FnCTOD-style)."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: str = ""
    calls: list[CallIn] = Field(default_factory=list)


class ToolIn(BaseModel):
    """A tool description in MCP tools/list style (`inputSchema`) or OpenAI style (`parameters`)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    parameters: dict[str, Any] | None = Field(default=None, description="JSON Schema of the arguments")
    input_schema: dict[str, Any] | None = Field(default=None, alias="inputSchema")

    @model_validator(mode="before")
    @classmethod
    def _unwrap_openai(cls, data: Any) -> Any:
        # OpenAI tools arrive as {"type": "function", "function": {...}}.
        if isinstance(data, dict) and isinstance(data.get("function"), dict) and "name" not in data:
            return data["function"]
        return data


# ---------------------------------------------------------------------------- results
class CallOut(BaseModel):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Trace(BaseModel):
    """Where the time and tokens went: the KV-prefix reuse shows in `reused` (stdio). Over HTTP, where users
    share the caches, `evaluated` is the caller's prompt size and `reused` 0: cache state is not shown."""

    timings: dict[str, float] = Field(default_factory=dict, description="seconds per step")
    prompt_tokens: int = 0
    evaluated: int = Field(default=0, description="prompt tokens the model actually evaluated "
                                                  "(over HTTP: the prompt size)")
    reused: int = Field(default=0, description="prompt tokens taken from the KV cache (over HTTP: 0)")
    completion_tokens: int = 0
    model_calls: int = 0
    seconds: float = 0.0


class ValueProvenance(BaseModel):
    function: str
    argument: str
    value: Any
    origin: Literal["user", "offer", "instruction", "call", "default"]
    instruction: str | None = Field(default=None, description="the standing instruction that set it")
    source: str | None = Field(default=None, description="the words it was read from")


class ParseRequestResult(BaseModel):
    """The calls to make for this request, or the question to ask, or a refusal."""

    user_id: str
    catalogue: str
    config: str
    status: Literal["ok", "parse_error"]
    decision: Literal["call", "ask", "refuse", "error"] = Field(
        description="call: make `calls`; ask: put `question` to the user; refuse: no tool fits; "
                    "error: no decision, the model's output could not be parsed (status parse_error, see errors)")
    calls: list[CallOut] = Field(default_factory=list)
    question: str | None = Field(default=None, description="the clarifying question when decision is 'ask'")
    missing: list[MissingArgument] = Field(default_factory=list)
    instructions_used: list[str] = Field(default_factory=list, description="standing instructions applied")
    confidence: float | None = Field(default=None, description="1 - least confidence of the final generation")
    least_confidence: float | None = None
    tagged: bool = Field(default=False, description="whether structured (TAPS) tagging was used")
    gate_fired: bool = False
    functions: list[str] = Field(default_factory=list, description="functions stage 1 selected")
    demonstrations: list[str] = Field(default_factory=list, description="ids of the few-shot demonstrations shown")
    notes: list[str] = Field(default_factory=list, description="post-check repairs and drops")
    provenance: list[ValueProvenance] = Field(default_factory=list,
                                              description="who set each value: the user's words, an earlier call, "
                                                          "or which standing instruction")
    skipped: dict[str, str] = Field(default_factory=dict, description="instruction -> why it did not apply")
    state: DialogueState | None = Field(
        default=None, description="the conversation's state after this turn: per function, every argument set so "
                                  "far with the user turn and the source it came from; send it back as `state` with "
                                  "the next turn instead of the earlier calls")
    trace: Trace = Field(default_factory=Trace)
    errors: list[str] = Field(default_factory=list)
    raw: list[str] = Field(default_factory=list, description="raw model outputs, for debugging parse errors")


class ToolDecisionOut(BaseModel):
    name: str
    selected: bool
    probability: float | None = Field(default=None, description="score mode only: the decision probability "
                                                                "(the rule's weighted evidence against the list's "
                                                                "threshold, squashed); the tool is selected when it "
                                                                "passes the rule's threshold and, for a rule with a "
                                                                "margin, scores within it of the best tool")
    score: float | None = Field(default=None, description="score mode: the rule's log-odds (model + lexical + "
                                                          "embedding, each by its weight)")
    model_logodds: float | None = Field(default=None, description="score mode: log P(YES)/P(NO), minus the "
                                                                  "content-free baseline when calibrated; absent "
                                                                  "when the rule gives the model no weight")
    lexical: float | None = Field(default=None, description="score mode: BM25 of the message against the tool")
    cosine: float | None = Field(default=None, description="score mode: the embedder's cosine of the message and "
                                                           "the tool's name and description")
    shortlisted: bool = Field(default=True, description="score mode: false when a large tool list was shortlisted "
                                                        "without this tool, so the model was not asked about it")


class NltSelection(BaseModel):
    mode: Literal["generate", "score", "structured"]
    status: Literal["ok", "partial", "parse_error"]
    decisions: list[ToolDecisionOut] = Field(default_factory=list)
    selected: list[str] = Field(default_factory=list)
    reasoning: str | None = Field(default=None, description="the selector's reasoning text, when generated")
    missing: list[str] = Field(default_factory=list, description="tools the model gave no decision for")
    unknown: list[str] = Field(default_factory=list)
    raw_text: str | None = None
    threshold: float | None = Field(default=None, description="score mode: the probability a tool must exceed")
    rule: dict[str, Any] | None = Field(default=None, description="score mode: the decision rule's weights, "
                                                                  "threshold and where they come from")
    evidence: list[str] = Field(default_factory=list, description="score mode: what decided (model, lexical, "
                                                                   "embedding); without model the model was not "
                                                                   "called")
    shortlist: str | None = Field(default=None, description="score mode, a large tool list: how many tools were "
                                                            "shortlisted for the model (the rest are not selected)")
    trace: Trace = Field(default_factory=Trace)


class ClarifyOutcome(BaseModel):
    decision: Literal["question", "continue", "limitation"]
    question: str | None = None
    missing_arguments: list[MissingArgument] = Field(default_factory=list)
    model_said: str | None = None
    status: str = "ok"
    elicited: bool = Field(default=False, description="the user was asked through MCP elicitation")
    elicitation_action: Literal["accept", "decline", "cancel"] | None = None
    answer: dict[str, Any] | None = Field(default=None, description="what the user answered, when elicited")
    calls: list[CallOut] = Field(default_factory=list, description="calls parsed after an elicited answer")
    shortlist: str | None = Field(default=None, description="a large catalogue: how many of its functions the "
                                                            "model's prompts listed")
    evidence: list[str] = Field(default_factory=list, description="how the decision was reached, in words: the "
                                "relevance evidence (the embedder's rule, the model's check), the draft's missing "
                                "arguments and the rule that decided")
    trace: Trace = Field(default_factory=Trace)


class InstructionOut(BaseModel):
    id: int | str
    position: int | None = None
    text: str
    tags: str | None = Field(default=None, description="TAPS structured tags, e.g. [IN:GET_EVENTS ...]")
    tags_model: str | None = None
    tagged_at: str | None = None
    stale: bool = False


class ProfileOut(BaseModel):
    user_id: str
    instructions: list[InstructionOut] = Field(default_factory=list)


class InstructionChange(BaseModel):
    user_id: str
    action: Literal["added", "removed", "created", "exists"]
    instruction: InstructionOut | None = None
    instructions: int = Field(description="how many standing instructions the profile holds now")


class TagOutcome(BaseModel):
    instruction_id: int | str
    text: str
    status: Literal["ok", "invalid", "skipped"]
    tags: str | None = None
    errors: list[str] = Field(default_factory=list)


class TagProfileResult(BaseModel):
    user_id: str
    catalogue: str
    model: str
    tagged: int
    skipped: int
    invalid: int
    instructions: list[TagOutcome] = Field(default_factory=list)
    trace: Trace = Field(default_factory=Trace)


class CatalogueSummary(BaseModel):
    name: str
    description: str = ""
    builtin: bool = False
    functions: list[str] = Field(default_factory=list)


class CatalogueList(BaseModel):
    catalogues: list[CatalogueSummary] = Field(default_factory=list)


class CatalogueDeleted(BaseModel):
    name: str
    deleted: bool


class ImportResult(BaseModel):
    name: str
    functions: list[str]
    replaced: bool


class FeedbackResult(BaseModel):
    stored: bool
    demonstration_id: int | str | None = None
    calls: list[CallOut] = Field(default_factory=list, description="the calls stored as the demonstration")
    corrected: bool = False
