"""Catalogue renderings for prompts and for grammar-constrained generation.

- `render_listing`: one line per function ("name - description"), for function-selection prompts.
- `render_function_spec` / `render_catalogue_spec`: full parameter specs, as FnCTOD gives the model
  only the chosen function's spec in its argument-generation step.
- `grammar_schema`: the one cleaner of a JSON Schema for llama.cpp's json_schema_to_grammar; and
  `call_schema` / `calls_schema` / `arguments_schema` built with it. They use only object, properties,
  required, enum, const, anyOf, array/items and the scalar types; descriptions, defaults, patterns and
  formats are dropped because the converter either ignores them or fails on them, and they add nothing
  to a grammar.
"""

from __future__ import annotations

import json
from typing import Any

from prefcall.schemas.importers import BFCL_TYPES
from prefcall.schemas.model import Catalogue, Function

_SCALARS = ("string", "integer", "number", "boolean", "null")
MAX_STRING_CHARS = 80
MAX_ARRAY_ITEMS = 8


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def render_listing(catalogue: Catalogue, *, description_chars: int = 160) -> str:
    """`name - description`, one line per function, catalogue order."""
    lines = []
    for function in catalogue.functions:
        description = _short(function.description, description_chars)
        lines.append(f"{function.name} - {description}" if description else function.name)
    return "\n".join(lines)


def _type_label(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        return "/".join(str(k) for k in kind)
    if kind == "array":
        items = schema.get("items")
        return f"array of {_type_label(items)}" if isinstance(items, dict) and items else "array"
    if kind:
        return str(kind)
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    if alternatives:
        return " or ".join(_type_label(a) for a in alternatives)
    return "any"


def _parameter_lines(properties: dict[str, Any], required: list[str], indent: str) -> list[str]:
    lines = []
    for name, schema in properties.items():
        parts = [_type_label(schema)]
        if name in required:
            parts.append("required")
        line = f"{indent}- {name} ({', '.join(parts)})"
        if schema.get("description"):
            line += f": {_short(str(schema['description']), 200)}"
        if "enum" in schema:
            line += f" One of: {', '.join(json.dumps(v, ensure_ascii=False) for v in schema['enum'])}."
        lines.append(line)
        nested = schema if schema.get("type") == "object" else schema.get("items") if schema.get("type") == "array" else None
        if isinstance(nested, dict) and nested.get("properties"):
            lines += _parameter_lines(nested["properties"], list(nested.get("required") or []), indent + "  ")
    return lines


def render_function_spec(function: Function) -> str:
    """Name, description and every parameter with type, required flag, description and allowed values."""
    lines = [f"Function: {function.name}"]
    if function.description:
        lines.append(f"Description: {_short(function.description, 400)}")
    if function.properties:
        lines.append("Parameters:")
        lines += _parameter_lines(function.properties, function.required, "")
    else:
        lines.append("Parameters: none")
    return "\n".join(lines)


def render_catalogue_spec(catalogue: Catalogue) -> str:
    return "\n\n".join(render_function_spec(f) for f in catalogue.functions)


# ---------------------------------------------------------------------------- grammar schemas
def grammar_schema(schema: Any, *, enforce_required: bool = True) -> Any:
    """The one cleaner of JSON Schemas for grammar-constrained generation (every strategy uses it).

    Keeps only what grammar conversion supports: type, enum, const, anyOf (oneOf and type lists become
    anyOf), array items / minItems / maxItems, object properties / required; everything else (descriptions,
    defaults, patterns, formats, ...) is dropped. BFCL's type names become JSON Schema types ("any": no type).
    Objects with properties are closed (no extra keys). Bounds for small greedy models: free strings at most
    MAX_STRING_CHARS, arrays at most MAX_ARRAY_ITEMS items. `enforce_required=False` drops the top level's
    `required`, so a model can leave out what nobody gave (nested objects keep theirs)."""
    out = _grammar_node(schema)
    if not enforce_required and isinstance(out, dict):
        out.pop("required", None)
    return out


def _grammar_node(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_grammar_node(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "enum" in schema:
        return {"enum": list(schema["enum"])}
    if "const" in schema:
        return {"const": schema["const"]}
    kind = schema.get("type")
    if isinstance(kind, str):
        kind = BFCL_TYPES.get(kind.strip().lower(), kind)
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    if alternatives and not kind:
        return {"anyOf": [_grammar_node(a) for a in alternatives]}
    if isinstance(kind, list):
        return {"anyOf": [_grammar_node({**schema, "type": k}) for k in kind]}
    out: dict[str, Any] = {}
    if kind == "string":
        out = {"type": "string", "maxLength": MAX_STRING_CHARS}  # a greedy small model can run digits to the token limit
    elif kind in _SCALARS:
        out["type"] = kind
    elif kind == "array":
        out["type"] = "array"
        if isinstance(schema.get("items"), dict) and schema["items"]:
            out["items"] = _grammar_node(schema["items"])
        if schema.get("minItems"):
            out["minItems"] = int(schema["minItems"])
        out["maxItems"] = min(int(schema.get("maxItems") or MAX_ARRAY_ITEMS), MAX_ARRAY_ITEMS)
    elif kind == "object" or "properties" in schema:
        out["type"] = "object"
        if isinstance(schema.get("properties"), dict):
            properties = schema["properties"]
            out["properties"] = {name: _grammar_node(sub) for name, sub in properties.items()}
            required = [r for r in schema.get("required") or [] if r in properties]
            if required:
                out["required"] = required
            out["additionalProperties"] = False
    return out


def arguments_schema(function: Function, *, enforce_required: bool = True) -> dict[str, Any]:
    """The arguments object of one given function: only its parameters, enums kept.

    enforce_required=False lets a model leave out a required argument it cannot fill, so that a
    missing value becomes visible (and askable, QwN-style) instead of being invented.
    """
    parameters = {**function.parameters, "type": "object", "properties": function.properties}
    return grammar_schema(parameters, enforce_required=enforce_required)


def call_schema(catalogue: Catalogue, *, enforce_required: bool = True,
                names: list[str] | None = None) -> dict[str, Any]:
    """One call `{"name": ..., "arguments": {...}}`; anyOf over functions ties argument names to the chosen name."""
    functions = [f for f in catalogue.functions if names is None or f.name in names]
    branches = [
        {
            "type": "object",
            "properties": {
                "name": {"const": f.name},
                "arguments": arguments_schema(f, enforce_required=enforce_required),
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for f in functions
    ]
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def calls_schema(catalogue: Catalogue, *, enforce_required: bool = True, min_items: int = 0,
                 max_items: int | None = None, names: list[str] | None = None) -> dict[str, Any]:
    """A list of calls, each as in `call_schema`."""
    out: dict[str, Any] = {
        "type": "array",
        "items": call_schema(catalogue, enforce_required=enforce_required, names=names),
    }
    if min_items:
        out["minItems"] = min_items
    if max_items is not None:
        out["maxItems"] = max_items
    return out
