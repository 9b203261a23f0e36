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

from prefcall.engine.base import ChatMessage, Engine
from prefcall.errors import GrammarError, ValidationError
from prefcall.schemas.model import Call, Catalogue, Function, Turn, as_dialogue, render_dialogue
from prefcall.strategies.nlt import NltUsage

# JSON-Schema keys a grammar cannot (or need not) enforce; dropping them keeps every catalogue convertible.
_DROPPED_KEYS = {
    "default", "optional", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "pattern", "minLength", "maxLength", "examples", "title", "$schema", "description",
}  # fmt: skip
# BFCL's python-flavoured type names.
_TYPE_ALIASES = {"dict": "object", "float": "number", "tuple": "array", "int": "integer", "bool": "boolean", "str": "string"}


MAX_STRING_CHARS = 80
MAX_ARRAY_ITEMS = 8


class DraftResult(BaseModel):
    call: Call | None = None
    status: Literal["ok", "parse_error"] = "ok"
    raw_text: str | None = None
    usage: NltUsage = Field(default_factory=NltUsage)
    seconds: float = 0.0


def grammar_schema(schema: dict[str, Any], *, keep_required: bool = True) -> dict[str, Any]:
    """A grammar-friendly copy: BFCL type names mapped, unenforceable keys dropped, no extra properties.

    With `keep_required=False` the top level makes every argument optional, so a draft can leave out what
    the dialogue does not say (nested objects keep their own `required`)."""
    out = _clean(schema)
    if not keep_required:
        out.pop("required", None)
    return out


def _clean(node: Any) -> Any:
    if isinstance(node, list):
        return [_clean(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _clean(v) for k, v in node.items() if k not in _DROPPED_KEYS and k not in ("properties", "items")}
    kind = node.get("type")
    if isinstance(kind, str):
        kind = _TYPE_ALIASES.get(kind, kind)
        if kind == "any":
            out.pop("type", None)
        else:
            out["type"] = kind
    if out.get("type") == "string" and "enum" not in out:
        out["maxLength"] = MAX_STRING_CHARS  # a greedy small model can otherwise run digits to the token limit
    if out.get("type") == "array":
        out["maxItems"] = min(int(node.get("maxItems") or MAX_ARRAY_ITEMS), MAX_ARRAY_ITEMS)
    if "items" in node:
        out["items"] = _clean(node["items"])
    if "properties" in node:
        out["properties"] = {name: _clean(sub) for name, sub in (node.get("properties") or {}).items()}
        out["additionalProperties"] = False
        required = [r for r in node.get("required") or [] if r in out["properties"]]
        if required:
            out["required"] = required
        else:
            out.pop("required", None)
    return out


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
    if support:
        system += "\n\n" + support
    prompt = engine.format_chat(
        [ChatMessage("system", system), ChatMessage("user", dialogue_text + '\n\nAnswer as JSON {"name": ...}.')]
    )
    schema = {"type": "object", "properties": {"name": {"enum": [f.name for f in functions]}}, "required": ["name"]}
    generation = engine.generate(prompt, max_tokens=64, json_schema=schema)
    usage.add(generation.usage, generation.completion_tokens)
    try:
        return str(json.loads(generation.text)["name"])
    except (json.JSONDecodeError, KeyError, TypeError):
        return functions[0].name  # the grammar makes this unreachable in practice; the first is a safe default


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
    """Arguments for one function, constrained to its (cleaned) JSON Schema."""
    usage = usage if usage is not None else NltUsage()
    system = (
        "You fill in the arguments of a function call from the user's request. Use only values the user or their "
        "profile states; leave out arguments nobody gave.\nFunction: " + _describe(function)
    )
    if support:
        system += "\n\n" + support
    prompt = engine.format_chat(
        [ChatMessage("system", system), ChatMessage("user", dialogue_text + "\n\nAnswer with the arguments as JSON.")]
    )
    schema = grammar_schema(function.parameters or {"type": "object", "properties": {}}, keep_required=keep_required)
    schema.setdefault("type", "object")
    try:
        generation = engine.generate(prompt, max_tokens=max_tokens, json_schema=schema)
    except GrammarError as exc:
        return DraftResult(status="parse_error", raw_text=f"grammar error: {exc}", usage=usage)
    usage.add(generation.usage, generation.completion_tokens)
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
