"""Catalogue renderings for prompts and for grammar-constrained generation.

- `render_listing`: one line per function ("name - description"), for function-selection prompts.
- `render_function_spec` / `render_catalogue_spec`: full parameter specs, as FnCTOD gives the model
  only the chosen function's spec in its argument-generation step.
- `call_schema` / `calls_schema` / `arguments_schema` / `function_name_schema`: JSON Schemas for
  llama.cpp's json_schema_to_grammar. They use only object, properties, required, enum, const,
  anyOf, array/items and the scalar types; descriptions, defaults, patterns and formats are dropped
  because the converter either ignores them or fails on them, and they add nothing to a grammar.
"""

from __future__ import annotations

import json
from typing import Any

from prefcall.schemas.model import Catalogue, Function

_SCALARS = ("string", "integer", "number", "boolean", "null")


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
def grammar_value_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A parameter schema reduced to the keywords grammar conversion supports."""
    out: dict[str, Any] = {}
    if "enum" in schema:
        return {"enum": list(schema["enum"])}
    if "const" in schema:
        return {"const": schema["const"]}
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    kind = schema.get("type")
    if alternatives and not kind:
        return {"anyOf": [grammar_value_schema(a) for a in alternatives]}
    if isinstance(kind, list):
        return {"anyOf": [grammar_value_schema({**schema, "type": k}) for k in kind]}
    if kind in _SCALARS:
        out["type"] = kind
    elif kind == "array":
        out["type"] = "array"
        if isinstance(schema.get("items"), dict) and schema["items"]:
            out["items"] = grammar_value_schema(schema["items"])
    elif kind == "object" or "properties" in schema:
        out.update(_object_schema(schema.get("properties") or {}, list(schema.get("required") or []),
                                  closed="properties" in schema))
    return out


def _object_schema(properties: dict[str, Any], required: list[str], *, closed: bool = True,
                   enforce_required: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "object",
        "properties": {name: grammar_value_schema(schema) for name, schema in properties.items()},
    }
    if enforce_required and required:
        out["required"] = [r for r in required if r in properties]
    if closed:
        out["additionalProperties"] = False
    return out


def arguments_schema(function: Function, *, enforce_required: bool = True) -> dict[str, Any]:
    """The arguments object of one given function: only its parameters, enums kept.

    enforce_required=False lets a model leave out a required argument it cannot fill, so that a
    missing value becomes visible (and askable, QwN-style) instead of being invented.
    """
    return _object_schema(function.properties, function.required, enforce_required=enforce_required)


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


def function_name_schema(catalogue: Catalogue, *, many: bool = False, allow_none: bool = False) -> dict[str, Any]:
    """A function name (or a list of names) from the catalogue; `allow_none` adds "none" for "no tool fits"."""
    names: list[Any] = list(catalogue.names) + (["none"] if allow_none else [])
    item = {"enum": names}
    return {"type": "array", "items": item} if many else item
