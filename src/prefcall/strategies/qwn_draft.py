"""A small grammar-constrained draft call: choose a function, then fill its arguments from the dialogue.

Used by `clarify` (its draft shows which required arguments the dialogue does not supply) and by the
evaluation tasks (BFCL call generation, ACEBench preference arguments). FnCTOD-style two steps:
the function name first (enum grammar), then arguments with only that function's schema in the grammar.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from prefcall.engine.base import Engine, Prompt
from prefcall.errors import GrammarError, ValidationError
from prefcall.schemas.model import Call, Catalogue, Function, Turn, as_dialogue, render_dialogue
from prefcall.schemas.render import arguments_schema
from prefcall.strategies.nlt_models import NltUsage

class DraftResult(BaseModel):
    call: Call | None = None
    status: Literal["ok", "parse_error"] = "ok"
    raw_text: str | None = None
    usage: NltUsage = Field(default_factory=NltUsage)
    seconds: float = 0.0


def _describe(function: Function) -> str:
    return json.dumps(
        {"name": function.name, "description": function.description, "parameters": function.parameters},
        ensure_ascii=False,
    )


def _support_block(instructions: Sequence[str], context: str | None) -> str:
    lines = []
    if context and context.strip():
        lines.append(f"Context: {context.strip()}")
    if instructions:
        lines.append("The user's standing instructions and profile:\n" + "\n".join(f"- {i}" for i in instructions))
    return "\n".join(lines)


def choose_function(
    engine: Engine, dialogue_text: str, functions: Sequence[Function], usage: NltUsage, support: str = ""
) -> str:
    """Grammar-constrained choice of one function name."""
    if len(functions) == 1:
        return functions[0].name
    listing = "\n".join(f"- {f.name}: {f.description}" for f in functions)
    system = f"You choose the one function that serves the user's request.\nFunctions:\n{listing}"
    user = (support + "\n\n" if support else "") + dialogue_text + '\n\nAnswer as JSON {"name": ...}.'
    prompt = Prompt.chat(system, user)
    schema = {"type": "object", "properties": {"name": {"enum": [f.name for f in functions]}}, "required": ["name"]}
    generation = engine.generate(prompt, max_tokens=64, json_schema=schema)
    usage.add(generation.usage, generation.completion_tokens)
    try:
        return str(json.loads(generation.text)["name"])
    except (json.JSONDecodeError, KeyError, TypeError):
        return functions[0].name  # the grammar makes this unreachable in practice; the first is a safe default


# How many times the first budget a draft cut by it is given on its second try (160 -> 480 tokens).
LONG_DRAFT_FACTOR = 3


def draft_arguments(
    engine: Engine,
    dialogue_text: str,
    function: Function,
    *,
    support: str = "",
    keep_required: bool = True,
    max_tokens: int = 160,
    usage: NltUsage | None = None,
) -> DraftResult:
    """Arguments for one function, constrained to its JSON Schema as `schemas.render.arguments_schema` cleans it
    (keep_required=False: the top level's required arguments may be left out)."""
    usage = usage if usage is not None else NltUsage()
    system = (
        "You fill in the arguments of a function call from the user's request. Use only values the user or their "
        "profile states; leave out arguments nobody gave.\nFunction: " + _describe(function)
    )
    user = (support + "\n\n" if support else "") + dialogue_text + "\n\nAnswer with the arguments as JSON."
    prompt = Prompt.chat(system, user)
    schema = arguments_schema(function, enforce_required=keep_required)
    budgets = (max_tokens, max_tokens * LONG_DRAFT_FACTOR)
    for budget in budgets:
        try:
            generation = engine.generate(prompt, max_tokens=budget, json_schema=schema)
        except GrammarError as exc:
            return DraftResult(status="parse_error", raw_text=f"grammar error: {exc}", usage=usage)
        usage.add(generation.usage, generation.completion_tokens)
        # A draft cut by the budget (nested objects and lists of a large schema) is drafted once more with a
        # larger one; the grammar ends a short draft by itself, so only those long ones pay for it.
        if generation.finish_reason != "length":
            break
    try:
        arguments = json.loads(generation.text)
    except json.JSONDecodeError:
        return DraftResult(status="parse_error", raw_text=generation.text, usage=usage)  # e.g. cut by max_tokens
    if not isinstance(arguments, dict):
        return DraftResult(status="parse_error", raw_text=generation.text, usage=usage)
    return DraftResult(call=Call(name=function.name, arguments=arguments), raw_text=generation.text, usage=usage)


def draft_call(
    engine: Engine,
    dialogue: str | list[Turn],
    catalogue: Catalogue,
    *,
    function_name: str | None = None,
    candidates: Sequence[str] | None = None,
    instructions: Sequence[str] = (),
    context: str | None = None,
    keep_required: bool = True,
    max_tokens: int = 160,
) -> DraftResult:
    """Choose a function (unless given; among `candidates` when given) and draft its arguments."""
    started = time.perf_counter()
    if not catalogue.functions:
        raise ValidationError("the catalogue has no functions: add at least one before drafting a call")
    usage = NltUsage()
    text = render_dialogue(as_dialogue(dialogue))
    support = _support_block(instructions, context)
    if function_name is None:
        pool = [f for f in catalogue.functions if candidates is None or f.name in candidates] or catalogue.functions
        function_name = choose_function(engine, text, pool, usage, support)
    function = catalogue.function(function_name)
    if function is None:
        raise ValidationError(f"function {function_name!r} is not in catalogue {catalogue.name!r}: pick one of its names")
    result = draft_arguments(
        engine, text, function, support=support, keep_required=keep_required, max_tokens=max_tokens, usage=usage
    )
    result.seconds = time.perf_counter() - started
    return result
