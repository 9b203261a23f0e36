"""NLT (Natural Language Tools): tool selection written in natural language, plus two variants.

Modes
- "generate" (the paper): a five-part prompt (role, search purpose, tool list with "use it when"
  descriptions, output description, output example); the model writes `Thinking: ...`, then one
  `ToolName - YES|NO` line per tool, then `Assessment finished.`; a tolerant parser reads it.
- "score" (beyond the paper): the same prompt, the reasoning skipped; for each tool the line
  `ToolName -` is forced and P(" YES") vs P(" NO") read from the next-token distribution.
  Everything stable (system prompt, tools, request) comes first, the per-tool line last, so the
  engine's KV prefix reuse evaluates only a few tokens per tool. Optional calibration against a
  content-free request ("N/A"), as in "Calibrate before use" (Zhao et al., 2021).
- "structured" (the baseline NLT is compared with): tools as JSON function definitions and a
  grammar-constrained `{"tools": [...names]}` answer.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from prefcall.engine.base import Engine, Prompt, PromptUsage
from prefcall.errors import ValidationError
from prefcall.schemas.model import Catalogue, Function

Mode = Literal["generate", "score", "structured"]
Status = Literal["ok", "partial", "parse_error"]

CONTENT_FREE_MESSAGE = "N/A"
FINISH_MARKER = "Assessment finished."
_THINKING_PRIME = "Thinking:"
_SKIPPED_THINKING = "Thinking: I check each tool against the message.\n"


class ToolSpec(BaseModel):
    """A tool as NLT sees it; `parameters` is only shown in the structured baseline."""

    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    parameters: dict[str, Any] | None = None


class ToolDecision(BaseModel):
    name: str
    selected: bool
    probability: float | None = None  # P(YES), calibrated when asked; score mode only


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
    threshold: float | None = None
    content_free: dict[str, float] | None = None  # P(YES) for the "N/A" request, when calibrated
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


# -- prompts ----------------------------------------------------------------------------------
def _when_to_use(spec: ToolSpec) -> str:
    description = spec.description.strip().rstrip(".") or "the message asks for exactly what its name says"
    return f"- {spec.name}: use it when {description[0].lower() + description[1:]}."


def nlt_system_prompt(specs: Sequence[ToolSpec]) -> str:
    """The paper's five parts, in order. The example uses made-up tools so it never leaks an answer."""
    role = "You are a tool selection assistant. You decide which tools are needed to answer a user's message."
    purpose = (
        "Your task: read the message and decide, for every tool listed below, whether it must be used to answer it. "
        "Say YES only when the message asks for what the tool does. If no tool fits, say NO to every tool."
    )
    tool_list = "Tools:\n" + "\n".join(_when_to_use(s) for s in specs)
    output = (
        "Output format: first a line starting with 'Thinking:' with one short sentence of reasoning. "
        "Then one line per tool, in the order listed, written exactly as 'ToolName - YES' or 'ToolName - NO'. "
        f"End with the line '{FINISH_MARKER}'"
    )
    example = (
        "Example (for a message asking about the weather, with the tools weather_lookup and send_email):\n"
        "Thinking: The user wants the weather, so only the weather tool is needed.\n"
        "weather_lookup - YES\nsend_email - NO\n" + FINISH_MARKER + "\n"
        "Write the names of the tools listed above, not the example's."
    )
    return "\n\n".join([role, purpose, tool_list, output, example])


def _user_prompt(message: str, context: str | None) -> str:
    parts = [f"Context: {context.strip()}"] if context and context.strip() else []
    parts.append(f"Message: {message.strip()}")
    return "\n".join(parts)


def nlt_prompt(engine: Engine, specs: Sequence[ToolSpec], message: str, context: str | None = None) -> Prompt:
    return Prompt.chat(nlt_system_prompt(specs), _user_prompt(message, context))


def structured_prompt(engine: Engine, specs: Sequence[ToolSpec], message: str, context: str | None = None) -> Prompt:
    definitions = [
        {"name": s.name, "description": s.description, "parameters": s.parameters or {"type": "object", "properties": {}}}
        for s in specs
    ]
    system = (
        "You are a function calling assistant. Available functions (JSON):\n"
        + json.dumps(definitions, ensure_ascii=False)
        + '\n\nAnswer with JSON {"tools": [...]} listing the names of the functions needed to answer the message; '
        "an empty list when none fits."
    )
    return Prompt.chat(system, _user_prompt(message, context))


def selection_schema(names: Sequence[str]) -> dict[str, Any]:
    # maxItems keeps a greedy model from repeating names until the token budget runs out.
    return {
        "type": "object",
        "properties": {"tools": {"type": "array", "items": {"enum": list(names)}, "maxItems": len(names)}},
        "required": ["tools"],
    }


# -- parsing ----------------------------------------------------------------------------------
_DECISION_RE = re.compile(
    r"^\s*(?:[-*•+]+|\d+[.)])?\s*[`*\"']*(?P<name>.+?)[`*\"']*\s*(?:[-–—:=>|]+|\s)\s*[`*\"']*"
    r"(?P<value>yes|no|true|false)\b[`*\"'.!]*\s*$",
    re.IGNORECASE,
)
_THINKING_RE = re.compile(r"^\s*[*_#]*\s*thinking[*_]*\s*:[*_]*\s*(?P<text>.*)$", re.IGNORECASE)


def _normalise(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _match_tool(written: str, names: Sequence[str]) -> str | None:
    written = written.strip()
    for candidate in (lambda n: n == written, lambda n: n.lower() == written.lower()):
        hit = next((n for n in names if candidate(n)), None)
        if hit:
            return hit
    key = _normalise(written)
    return next((n for n in names if _normalise(n) == key), None) if key else None


def parse_nlt_output(text: str, names: Sequence[str]) -> NltResult:
    """Read `Thinking:` and `Name - YES/NO` lines; missing, unknown and conflicting names are reported."""
    votes: dict[str, bool] = {}
    unknown: list[str] = []
    conflicts: list[str] = []
    reasoning: list[str] = []
    in_thinking = False
    for line in text.splitlines():
        thinking = _THINKING_RE.match(line)
        if thinking:
            reasoning.append(thinking.group("text").strip())
            in_thinking = True
            continue
        match = _DECISION_RE.match(line)
        if not match:
            if in_thinking and line.strip() and FINISH_MARKER.lower() not in line.lower():
                reasoning.append(line.strip())
            continue
        in_thinking = False
        name = _match_tool(match.group("name"), names)
        value = match.group("value").lower() in ("yes", "true")
        if name is None:
            unknown.append(match.group("name").strip())
        elif name in votes:
            if votes[name] != value and name not in conflicts:
                conflicts.append(name)  # the first decision stands; the conflict is reported
        else:
            votes[name] = value
    decisions = [ToolDecision(name=n, selected=votes[n]) for n in names if n in votes]
    missing = [n for n in names if n not in votes]
    status: Status = "parse_error" if not votes else "partial" if missing else "ok"
    return NltResult(
        mode="generate",
        status=status,
        decisions=decisions,
        selected=[d.name for d in decisions if d.selected],
        reasoning=" ".join(r for r in reasoning if r) or None,
        missing=missing,
        unknown=unknown,
        conflicts=conflicts,
        raw_text=text,
    )


# -- the three modes --------------------------------------------------------------------------
def _generate_mode(engine: Engine, specs: list[ToolSpec], message: str, context: str | None) -> NltResult:
    # The answer is primed with "Thinking:" so that small models start in the format instead of answering
    # the user's question directly.
    prompt = nlt_prompt(engine, specs, message, context).continued(_THINKING_PRIME)
    names = [s.name for s in specs]
    # Budget: reasoning plus one short line per tool; the finish marker stops generation early.
    budget = 64 + sum(engine.count_tokens(f"{s.name} - YES\n") for s in specs)
    generation = engine.generate(prompt, max_tokens=budget, stop=(FINISH_MARKER,))
    text = generation.text
    if not text.lstrip().lower().startswith("thinking"):
        text = f"{_THINKING_PRIME} {text.lstrip()}"  # put back the primed prefix so the parser sees the reasoning
    result = parse_nlt_output(text, names)
    result.raw_text = generation.text
    result.usage.add(generation.usage, generation.completion_tokens)
    # Repair when nothing parsed, or when the model wrote names that are not tools instead of some that are.
    if result.status == "parse_error" or (result.unknown and result.missing):
        result = _repair(engine, prompt, generation.text, names, budget, result.usage)
    return result


def _repair(engine: Engine, prompt: Prompt, first_text: str, names: list[str], budget: int, usage: NltUsage) -> NltResult:
    """Second try when no tool line parsed (tiny models copy the example's tool names): keep the model's
    reasoning line and force the first listed tool's name, so the decision lines start on the real names."""
    reasoning = first_text.strip().splitlines()[0].strip() if first_text.strip() else "I check each tool."
    forced = f" {reasoning}\n{names[0]} -"
    generation = engine.generate(prompt.continued(forced), max_tokens=budget, stop=(FINISH_MARKER,))
    result = parse_nlt_output(f"{_THINKING_PRIME}{forced}{generation.text}", names)
    result.raw_text = f"{first_text}\n--- repaired ---\n{names[0]} -{generation.text}"
    result.repaired = True
    usage.add(generation.usage, generation.completion_tokens)
    result.usage = usage
    return result


def tool_yes_probabilities(
    engine: Engine, specs: Sequence[ToolSpec], message: str, context: str | None, usage: NltUsage
) -> dict[str, float]:
    """P(YES) per tool from the next token after the forced `ToolName -` (softmax over YES/NO)."""
    prefix = nlt_prompt(engine, specs, message, context).continued(_SKIPPED_THINKING)
    probabilities: dict[str, float] = {}
    for spec in specs:
        scores = engine.score_candidates(prefix.continued(f"{spec.name} -"), [" YES", " NO"])
        usage.add(scores.usage)
        probabilities[spec.name] = scores.probabilities()[0]
    return probabilities


def calibrate_probability(p_yes: float, p_yes_content_free: float) -> float:
    """Divide by the content-free prior and renormalise (Zhao et al., 2021, two-class case)."""
    eps = 1e-9
    yes = p_yes / max(p_yes_content_free, eps)
    no = (1.0 - p_yes) / max(1.0 - p_yes_content_free, eps)
    return yes / (yes + no)


def _score_mode(
    engine: Engine, specs: list[ToolSpec], message: str, context: str | None, threshold: float, calibrate: bool
) -> NltResult:
    usage = NltUsage()
    probabilities = tool_yes_probabilities(engine, specs, message, context, usage)
    content_free = None
    if calibrate:
        content_free = tool_yes_probabilities(engine, specs, CONTENT_FREE_MESSAGE, context, usage)
        probabilities = {n: calibrate_probability(p, content_free[n]) for n, p in probabilities.items()}
    decisions = [ToolDecision(name=s.name, selected=probabilities[s.name] > threshold, probability=probabilities[s.name]) for s in specs]
    return NltResult(
        mode="score",
        status="ok",
        decisions=decisions,
        selected=[d.name for d in decisions if d.selected],
        threshold=threshold,
        content_free=content_free,
        usage=usage,
    )


def _structured_mode(engine: Engine, specs: list[ToolSpec], message: str, context: str | None) -> NltResult:
    names = [s.name for s in specs]
    prompt = structured_prompt(engine, specs, message, context)
    budget = 16 + sum(engine.count_tokens(json.dumps(n)) + 2 for n in names)
    generation = engine.generate(prompt, max_tokens=budget, json_schema=selection_schema(names))
    usage = NltUsage()
    usage.add(generation.usage, generation.completion_tokens)
    try:
        chosen = json.loads(generation.text)["tools"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return NltResult(mode="structured", status="parse_error", missing=names, raw_text=generation.text, usage=usage)
    picked = {n for n in chosen if n in names}
    decisions = [ToolDecision(name=n, selected=n in picked) for n in names]
    return NltResult(
        mode="structured",
        status="ok",
        decisions=decisions,
        selected=[n for n in names if n in picked],
        unknown=[str(n) for n in chosen if n not in names],
        raw_text=generation.text,
        usage=usage,
    )


def select_tools(
    engine: Engine,
    message: str,
    tools: Catalogue | Sequence[ToolSpec | Function | dict[str, Any]],
    *,
    mode: Mode = "generate",
    context: str | None = None,
    threshold: float = 0.5,
    calibrate: bool = False,
) -> NltResult:
    """Decide YES/NO for every tool. A parse failure or missing tools show in `status`/`missing`.

    Score mode selects a tool when P(YES) > threshold (strictly: a calibrated P(YES) of exactly 0.5 means
    "no different from a content-free request")."""
    specs = as_tool_specs(tools)
    if not 0.0 <= threshold <= 1.0:
        raise ValidationError(f"threshold {threshold} is outside [0, 1]: pass a probability")
    started = time.perf_counter()
    if mode == "generate":
        result = _generate_mode(engine, specs, message, context)
    elif mode == "score":
        result = _score_mode(engine, specs, message, context, threshold, calibrate)
    elif mode == "structured":
        result = _structured_mode(engine, specs, message, context)
    else:
        raise ValidationError(f"unknown NLT mode {mode!r}: use generate, score or structured")
    result.seconds = time.perf_counter() - started
    return result
