"""What NLT works with and answers: the tools (`ToolSpec`, `as_tool_specs`), a fitted decision rule, and the
result (`NltResult` with its decisions and token usage). The selection itself is in `strategies/nlt.py`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from prefcall.engine.base import PromptUsage
from prefcall.errors import ValidationError
from prefcall.schemas.model import Catalogue, Function
from prefcall.strategies.shortlist import Shortlist

Mode = Literal["score", "generate", "structured"]
MODES: tuple[str, ...] = ("score", "generate", "structured")
DEFAULT_MODE: Mode = "score"
Status = Literal["ok", "partial", "parse_error"]


class ToolSpec(BaseModel):
    """A tool as NLT sees it; `parameters` is only shown in the structured baseline."""

    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    parameters: dict[str, Any] | None = None


class ToolDecision(BaseModel):
    name: str
    selected: bool
    probability: float | None = None  # score mode: sigmoid(score), compared with the result's threshold
    score: float | None = None  # score mode: the rule's weighted sum of the evidence below
    model_logodds: float | None = None  # log P(YES)/P(NO), minus the content-free baseline when calibrated
    raw_logodds: float | None = None  # log P(YES)/P(NO) as the model gave it
    lexical: float | None = None  # BM25 of the request against the tool's name and description
    cosine: float | None = None  # the embedder's cosine of the request and "humanised name: description"
    shortlisted: bool = True  # False: a large tool list was shortlisted without it, so the model was not asked


# Tool lists up to this size are what the rules were fitted on; past it, `DecisionRule.size_slope` applies.
FITTED_LIST_SIZE = 10
# A rule of its own for large lists (DecisionRule.large) decides lists from this size: it is fitted on lists of 50
# and 200 tools, where a shortlist reaches the model (strategies.shortlist lists up to 32 tools whole). Lists of 11
# to 32 tools are decided by the size terms: decided by a rule fitted on 50 and 200 tools, the selection sets'
# lists of 11 tools lost a tenth of their exact set (RESULTS.md, thirty-first session).
OWN_RULE_FROM = 33


class DecisionRule(BaseModel):
    """How score mode turns per-tool evidence into a decision: select when `model_weight * model_logodds +
    lexical_weight * lexical + embedding_weight * cosine > threshold` (log-odds units). A rule whose model weight
    is 0 never calls the model (nor its content-free baseline).

    Large lists: the more tools, the more of them come close to a request by chance, so past FITTED_LIST_SIZE tools
    the threshold rises by `size_slope` per unit of ln(tools / FITTED_LIST_SIZE), and with a `margin` a tool is
    selected only when its score is within `margin` of the best tool's (both fitted by `prefcall fit --nlt` on
    tune requests against 10, 50 and 200 tools; 0 and None leave the rule as it was). Both act on lists of more
    than FITTED_LIST_SIZE tools only: a list of the size the rule was fitted on is decided as before."""

    model_weight: float = 1.0
    lexical_weight: float = 0.0
    embedding_weight: float = 0.0
    threshold: float = 0.0
    size_slope: float = 0.0
    margin: float | None = None
    # the cosine is the best of the request's sentences (a request that asks for two things matches each of its
    # tools in one sentence; the whole request's vector matches neither well); False: the whole request's
    sentence_cosine: bool = False
    # A list too large to be listed whole (strategies.shortlist.WHOLE_UP_TO) is asked page by page: the catalogue
    # cut once into pages of similar tools, the model asked about the pages that hold the tools retrieval ranks
    # best (strategies.shortlist.paged; their number and size fitted per embedder), each page listed as a small
    # list is. False: one shortlist of the tools retrieval ranks best, which changes with every request.
    paged: bool = False
    # the pages' size and how many best-ranked tools' pages are asked, where fitted for this model on its own
    # answers (`prefcall fit --nlt --large-lists --paged --pages`); None: as fitted for the embedder
    page_size: int | None = None
    page_seeds: int | None = None
    source: str = "default (no rule fitted for this model): calibrated P(YES) > 0.5"
    # Lists of OWN_RULE_FROM tools or more: this rule's own weights, threshold and terms, fitted on large lists
    # (`prefcall fit --nlt --large-lists`). Where its model weight is 0 the model is not asked about a large list.
    # None: this rule (with its size terms) decides lists of every size.
    large: DecisionRule | None = None

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> DecisionRule:
        """The rule a stored entry of nlt_rules.json describes (its notes, such as the fit's evidence, left out)."""
        return cls(**{k: v for k, v in entry.items() if k in cls.model_fields})

    def for_size(self, tools: int) -> DecisionRule:
        """The rule that decides a list of `tools` tools: `large` from OWN_RULE_FROM tools where there is one."""
        return self.large if self.large is not None and tools >= OWN_RULE_FROM else self

    def threshold_for(self, tools: int) -> float:
        """The threshold for a list of `tools` tools."""
        return self.threshold + self.size_slope * math.log(max(tools, FITTED_LIST_SIZE) / FITTED_LIST_SIZE)

    def decide(self, evidence: dict[str, tuple[float | None, float, float | None]],
               size: int | None = None) -> set[str]:
        """The tools this rule selects from each tool's (model log-odds, BM25, cosine) in one list of `size` tools
        (None: the evidence's count), as select_tools decides: by the rule for that size (`large`), among the
        tools it can select (`eligible`)."""
        size = len(evidence) if size is None else size
        chosen = self.for_size(size)
        return chosen.selects({name: chosen.score(*parts) for name, parts in chosen.eligible(evidence).items()}, size)

    def eligible(self, evidence: dict[str, tuple[float | None, float, float | None]]
                 ) -> dict[str, tuple[float | None, float, float | None]]:
        """The tools this rule can select in a list: where it weighs the model, those the model was asked about (a
        shortlist left the others out, their log-odds None); otherwise every tool."""
        return {n: v for n, v in evidence.items() if v[0] is not None} if self.model_weight else dict(evidence)

    def selects(self, scores: dict[str, float], size: int | None = None) -> set[str]:
        """The tools this rule selects, given the scores of one list's tools; `size`: the list's size where only
        some of its tools were scored (a shortlist reached the model), else the number of scores."""
        if not scores:
            return set()
        size = len(scores) if size is None else max(size, len(scores))
        cut, best = self.threshold_for(size), max(scores.values())
        margin = self.margin if size > FITTED_LIST_SIZE else None
        return {name for name, score in scores.items() if score > cut and (margin is None or score >= best - margin)}

    def score(self, model_logodds: float | None, lexical: float, cosine: float | None = None) -> float:
        return (self.model_weight * (model_logodds or 0.0) + self.lexical_weight * lexical
                + self.embedding_weight * (cosine or 0.0))

    @property
    def evidence(self) -> list[str]:
        """The evidence this rule decides by: model, lexical, embedding (those with a weight)."""
        weights = {"model": self.model_weight, "lexical": self.lexical_weight, "embedding": self.embedding_weight}
        return [name for name, weight in weights.items() if weight]


class NltUsage(BaseModel):
    prompt_tokens: int = 0
    evaluated: int = 0
    reused: int = 0
    completion_tokens: int = 0
    calls: int = 0

    def add(self, usage: PromptUsage, completion_tokens: int = 0) -> None:
        self.prompt_tokens += usage.prompt_tokens
        self.evaluated += usage.evaluated
        self.reused += usage.reused
        self.completion_tokens += completion_tokens
        self.calls += 1

    def merge(self, other: NltUsage) -> None:
        """Fold in the usage of a sub-step (e.g. the relevance check inside clarify)."""
        for key in ("prompt_tokens", "evaluated", "reused", "completion_tokens", "calls"):
            setattr(self, key, getattr(self, key) + getattr(other, key))


class NltResult(BaseModel):
    mode: Mode
    status: Status
    decisions: list[ToolDecision] = Field(default_factory=list)
    selected: list[str] = Field(default_factory=list)
    reasoning: str | None = None
    missing: list[str] = Field(default_factory=list)  # tools the model gave no decision for
    unknown: list[str] = Field(default_factory=list)  # names the model wrote that are not tools
    conflicts: list[str] = Field(default_factory=list)  # tools given both YES and NO (first kept)
    raw_text: str | None = None
    repaired: bool = False  # generate mode: the first answer had no tool line; a forced-name retry was parsed
    threshold: float | None = None  # score mode: the probability a tool's sigmoid(score) must exceed
    rule: DecisionRule | None = None  # score mode: the weights and threshold used (and where they come from)
    evidence: list[str] = Field(default_factory=list)  # score mode: what decided (model, lexical, embedding)
    content_free: dict[str, float] | None = None  # score mode, calibrated: mean content-free log-odds per tool
    calibration_cached: bool | None = None  # score mode: the content-free baseline came from the cache
    shortlist: Shortlist | None = None  # score mode, model asked: which tools reached the model's prompt
    usage: NltUsage = Field(default_factory=NltUsage)
    seconds: float = 0.0


# -- tools ------------------------------------------------------------------------------------
def as_tool_specs(tools: Catalogue | Sequence[ToolSpec | Function | dict[str, Any]]) -> list[ToolSpec]:
    """Accept a Catalogue, Functions, ToolSpecs or `{name, description}` dicts; names must be unique."""
    items = tools.functions if isinstance(tools, Catalogue) else list(tools)
    specs = [_as_spec(item) for item in items]
    if not specs:
        raise ValidationError("no tools given: pass at least one tool to select from")
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise ValidationError(f"duplicate tool name {spec.name!r}: tool names must be unique")
        seen.add(spec.name)
    return specs


def _as_spec(item: ToolSpec | Function | dict[str, Any]) -> ToolSpec:
    if isinstance(item, ToolSpec):
        return item
    if isinstance(item, Function):
        return ToolSpec(name=item.name, description=item.description, parameters=item.parameters)
    if isinstance(item, dict) and item.get("name"):
        return ToolSpec(
            name=str(item["name"]), description=str(item.get("description") or ""), parameters=item.get("parameters")
        )
    raise ValidationError(f"not a tool: {str(item)[:80]!r}: give a dict with at least a 'name'")


DecisionRule.model_rebuild()
