"""Import API catalogues from the formats hosts and data sets use, auto-detected, into one JSON Schema form.

Formats:
- "openai":   `[{"type": "function", "function": {name, description, parameters}}]`, or `{"tools": [...]}`
- "functions": bare `{name, description, parameters}` items, a list or `{"functions": [...]}` (the NLSI
               schema and prefcall's own export use this form)
- "mcp":      MCP `tools/list` output: items with `inputSchema`, a list or `{"tools": [...]}`
- "bfcl":     BFCL function docs (`"type": "dict"`, "float", "tuple", "any"), bare or inside BFCL records
               `{"id", "question", "function": [...]}` (JSON lines accepted)
- "sgd":      Schema-Guided Dialogue services: one function per intent, categorical slots become enums
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

from prefcall.config import Settings
from prefcall.errors import LimitError, ValidationError
from prefcall.schemas.model import Catalogue, Function

FORMATS = ("openai", "functions", "mcp", "bfcl", "sgd")
JSON_TYPES = ("string", "integer", "number", "boolean", "array", "object", "null")
TYPE_HINT = "use string/integer/number/boolean/array/object"

# BFCL's Python/Java/JavaScript type names -> JSON Schema; None means "any value" (no type constraint).
BFCL_TYPES: dict[str, str | None] = {
    "dict": "object", "object": "object", "hashmap": "object", "map": "object",
    "float": "number", "double": "number", "number": "number",
    "integer": "integer", "int": "integer", "long": "integer", "short": "integer", "byte": "integer",
    "string": "string", "str": "string", "char": "string",
    "boolean": "boolean", "bool": "boolean",
    "array": "array", "list": "array", "tuple": "array", "arraylist": "array", "set": "array",
    "any": None, "null": "null",
}
# Keywords whose values are sub-schemas (or maps/lists of them) that validation and BFCL mapping descend into.
_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf")


# ---------------------------------------------------------------------------- loading
def load_json_text(text: str, *, source: str = "input") -> Any:
    """JSON or JSON lines; a syntax error names the line and column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as first:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) > 1 and lines[0].lstrip().startswith("{"):
            records = []
            for number, line in enumerate(text.splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValidationError(
                        f"{source}: malformed JSON at line {number}, column {exc.colno}: {exc.msg}; fix the file"
                    ) from exc
            return records
        raise ValidationError(
            f"{source}: malformed JSON at line {first.lineno}, column {first.colno}: {first.msg}; fix the file"
        ) from first


def read_source(source: str | bytes | Path | dict | list) -> tuple[Any, str | None]:
    """Parsed data and a default catalogue name (the file's stem) from a path, JSON text or parsed data."""
    if isinstance(source, (dict, list)):
        return source, None
    if isinstance(source, bytes):
        return load_json_text(source.decode("utf-8")), None
    if isinstance(source, Path) or (isinstance(source, str) and not source.lstrip().startswith(("{", "["))):
        path = Path(source)
        if not path.is_file():
            raise ValidationError(f"catalogue file not found: {path}; give a path to a JSON file or JSON text")
        return load_json_text(path.read_text(encoding="utf-8"), source=str(path)), path.stem
    return load_json_text(source), None


# ---------------------------------------------------------------------------- detection
def _items_of(data: Any) -> list[Any]:
    if isinstance(data, dict):
        for key in ("tools", "functions"):
            if isinstance(data.get(key), list):
                return data[key]
        return [data]
    return data if isinstance(data, list) else []


def _is_bfcl_params(params: Any) -> bool:
    return isinstance(params, dict) and str(params.get("type", "")).lower() == "dict"


def detect_format(data: Any) -> str:
    """One of FORMATS; ValidationError when the structure matches none of them."""
    items = _items_of(data)
    first = next((item for item in items if isinstance(item, dict)), None)
    if first is None:
        raise ValidationError("catalogue: no functions found; expected a list of tools/functions or an SGD schema")
    if "service_name" in first and "intents" in first:
        return "sgd"
    if isinstance(first.get("function"), list):  # BFCL record with its function docs
        return "bfcl"
    if first.get("type") == "function" and isinstance(first.get("function"), dict):
        return "openai"
    if "inputSchema" in first:
        return "mcp"
    if "name" in first:
        return "bfcl" if any(_is_bfcl_params(i.get("parameters")) for i in items if isinstance(i, dict)) else "functions"
    raise ValidationError(
        "catalogue: unrecognised format; expected OpenAI tools, MCP tools/list, BFCL functions, SGD schema"
        " or {name, description, parameters} items"
    )


# ---------------------------------------------------------------------------- per-format conversion
def _function(raw: Any, path: str, *, params_key: str = "parameters") -> Function:
    if not isinstance(raw, dict):
        raise ValidationError(f"{path}: expected an object with name, description and {params_key}")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValidationError(f"{path}.name: missing or empty function name; every function needs a name")
    params = raw.get(params_key)
    if params is None:
        params = {"type": "object", "properties": {}}
    description = raw.get("description") or raw.get("title") or ""
    return Function(name=name.strip(), description=str(description), parameters=copy.deepcopy(params))


def _from_openai(data: Any) -> list[Function]:
    out = []
    for i, item in enumerate(_items_of(data)):
        inner = item.get("function") if isinstance(item, dict) and item.get("type") == "function" else item
        out.append(_function(inner, f"functions[{i}]"))
    return out


def _from_functions(data: Any) -> list[Function]:
    return [_function(item, f"functions[{i}]") for i, item in enumerate(_items_of(data))]


def _from_mcp(data: Any) -> list[Function]:
    return [_function(item, f"functions[{i}]", params_key="inputSchema") for i, item in enumerate(_items_of(data))]


def _bfcl_schema(schema: Any, path: str) -> Any:
    """Rewrite BFCL's type names into JSON Schema, recursively."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if "type" in out and isinstance(out["type"], str):
        key = out["type"].strip().lower()
        if key not in BFCL_TYPES:
            raise ValidationError(f"{path}.type: unknown type {out['type']!r}; {TYPE_HINT}")
        mapped = BFCL_TYPES[key]
        if mapped is None:
            del out["type"]  # "any": no constraint
        else:
            out["type"] = mapped
    for key in _SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {k: _bfcl_schema(v, f"{path}.{key}.{k}") for k, v in out[key].items()}
    if "items" in out:
        out["items"] = _bfcl_schema(out["items"], f"{path}.items")
    for key in _SCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_bfcl_schema(v, f"{path}.{key}[{i}]") for i, v in enumerate(out[key])]
    return out


def _from_bfcl(data: Any) -> list[Function]:
    raw_functions: list[Any] = []
    for item in _items_of(data):
        if isinstance(item, dict) and isinstance(item.get("function"), list):
            raw_functions.extend(item["function"])
        else:
            raw_functions.append(item)
    out = []
    for i, raw in enumerate(raw_functions):
        function = _function(raw, f"functions[{i}]")
        params = _bfcl_schema(function.parameters, f"functions[{i}].parameters")
        out.append(function.model_copy(update={"parameters": params}))
    return _drop_identical_duplicates(out)


def _drop_identical_duplicates(functions: list[Function]) -> list[Function]:
    """BFCL records repeat the same function docs; identical copies are one function (conflicts stay)."""
    seen: dict[str, Function] = {}
    out = []
    for function in functions:
        if function.name in seen and seen[function.name] == function:
            continue
        seen.setdefault(function.name, function)
        out.append(function)
    return out


def _sgd_slot_schema(slot: dict[str, Any], default: str | None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    description = str(slot.get("description", ""))
    if default is not None:
        # Defaults go into the description: grammar converters ignore or reject the `default` keyword.
        description = f"{description} (default: {default})" if description else f"default: {default}"
    if description:
        schema["description"] = description
    if slot.get("is_categorical") and slot.get("possible_values"):
        schema["enum"] = [str(v) for v in slot["possible_values"]]
    return schema


def _from_sgd(data: Any) -> list[Function]:
    services = _items_of(data)
    counts = Counter(intent.get("name") for s in services for intent in s.get("intents", []))
    out = []
    for si, service in enumerate(services):
        slots = {slot["name"]: slot for slot in service.get("slots", [])}
        for ii, intent in enumerate(service.get("intents", [])):
            path = f"services[{si}].intents[{ii}]"
            name = intent.get("name")
            if not name:
                raise ValidationError(f"{path}.name: missing intent name; every SGD intent needs a name")
            # The same intent name in two services (e.g. Hotels_1 and Hotels_4) would clash: qualify those only.
            function_name = f"{service['service_name']}_{name}" if counts[name] > 1 else name
            properties: dict[str, Any] = {}
            required = list(intent.get("required_slots", []))
            optional = dict(intent.get("optional_slots", {}))
            for slot_name in [*required, *optional]:
                if slot_name not in slots:
                    raise ValidationError(f"{path}: slot {slot_name!r} is not declared in the service's slots")
                properties[slot_name] = _sgd_slot_schema(slots[slot_name], optional.get(slot_name))
            description = str(intent.get("description", ""))
            if service.get("description"):
                description = f"{description} ({service['service_name']}: {service['description']})"
            out.append(
                Function(
                    name=function_name,
                    description=description,
                    parameters={"type": "object", "properties": properties, "required": required},
                )
            )
    return out


_CONVERTERS = {
    "openai": _from_openai,
    "functions": _from_functions,
    "mcp": _from_mcp,
    "bfcl": _from_bfcl,
    "sgd": _from_sgd,
}


# ---------------------------------------------------------------------------- $ref inlining and validation
def inline_refs(schema: Any, path: str, limits: Settings | None = None) -> Any:
    """Replace local `{"$ref": "#/$defs/X"}` with the definition (MCP servers built on pydantic emit these).

    With `limits`, expansion stops with a LimitError past `max_ref_depth` nested references or once the
    expanded schema grows past `max_schema_bytes` (counted as it is built, so a small schema whose references
    fan out exponentially is refused before it takes the memory)."""
    if not isinstance(schema, dict):
        return schema
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    budget = [limits.max_schema_bytes if limits is not None else None]

    def charge(node: Any, where: str) -> None:
        if budget[0] is None:
            return
        if isinstance(node, dict):
            budget[0] -= 2 + sum(len(str(k)) + 4 for k in node)
        elif isinstance(node, list):
            budget[0] -= 2 + len(node)
        else:
            budget[0] -= len(str(node)) + 2
        if budget[0] < 0:
            raise LimitError(f"{path} is more than {limits.max_schema_bytes} bytes after $ref expansion",  # type: ignore[union-attr]
                             limits.max_schema_bytes, "max_schema_bytes")  # type: ignore[union-attr]

    def resolve(node: Any, where: str, stack: tuple[str, ...]) -> Any:
        charge(node, where)
        if isinstance(node, list):
            return [resolve(v, f"{where}[{i}]", stack) for i, v in enumerate(node)]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            key = ref.rsplit("/", 1)[-1]
            if not ref.startswith(("#/$defs/", "#/definitions/")) or key not in defs:
                raise ValidationError(f"{where}.$ref: cannot resolve {ref!r}; only local #/$defs references work")
            if key in stack:
                raise ValidationError(f"{where}.$ref: recursive reference {ref!r} is not supported; flatten the schema")
            if limits is not None and len(stack) >= limits.max_ref_depth:
                raise LimitError(f"{where}.$ref: references nest more than {limits.max_ref_depth} deep",
                                 limits.max_ref_depth, "max_ref_depth")
            merged = {**defs[key], **{k: v for k, v in node.items() if k != "$ref"}}
            return resolve(merged, where, (*stack, key))
        return {
            k: resolve(v, f"{where}.{k}", stack) for k, v in node.items() if k not in ("$defs", "definitions")
        }

    return resolve(schema, path, ())


def _check_schema(schema: Any, path: str, limits: Settings | None = None) -> None:
    if not isinstance(schema, dict):
        raise ValidationError(f"{path}: expected a JSON Schema object, got {type(schema).__name__}")
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    for item in kinds:
        if item not in JSON_TYPES:
            raise ValidationError(f"{path}.type: unknown type {item!r}; {TYPE_HINT}")
    if "enum" in schema and (not isinstance(schema["enum"], list) or not schema["enum"]):
        raise ValidationError(f"{path}.enum: must be a non-empty list of allowed values")
    if limits is not None and "enum" in schema and len(schema["enum"]) > limits.max_enum_values:
        raise LimitError(f"{path}.enum has {len(schema['enum'])} values", limits.max_enum_values, "max_enum_values")
    properties = schema.get("properties")
    if properties is not None:
        if not isinstance(properties, dict):
            raise ValidationError(f"{path}.properties: must be an object mapping names to schemas")
        for name, sub in properties.items():
            _check_schema(sub, f"{path}.properties.{name}", limits)
    required = schema.get("required")
    if required is not None:
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise ValidationError(f"{path}.required: must be a list of property names")
        for name in required:
            if name not in (properties or {}):
                raise ValidationError(f"{path}.required: {name!r} is not one of the properties; add it or drop it")
    if "items" in schema and isinstance(schema["items"], dict):
        _check_schema(schema["items"], f"{path}.items", limits)
    for key in _SCHEMA_LISTS:
        for i, sub in enumerate(schema.get(key) or []):
            _check_schema(sub, f"{path}.{key}[{i}]", limits)


def validate_function(function: Function, path: str, limits: Settings | None = None) -> Function:
    """Inline $refs, check types recursively; the top level must be an object schema. With `limits`: the
    description, schema size (after $ref expansion), $ref depth and enum sizes are bounded (LimitError)."""
    if limits is not None and len(function.description) > limits.max_description_chars:
        raise LimitError(f"{path}.description is {len(function.description)} characters",
                         limits.max_description_chars, "max_description_chars")
    params = inline_refs(function.parameters, f"{path}.parameters", limits)
    if not isinstance(params, dict):
        raise ValidationError(f"{path}.parameters: expected a JSON Schema object, got {type(params).__name__}")
    if params.get("type", "object") != "object":
        raise ValidationError(f"{path}.parameters.type: must be 'object' (the arguments of a call)")
    params.setdefault("type", "object")
    params.setdefault("properties", {})
    if limits is not None:
        size = len(json.dumps(params, ensure_ascii=False).encode("utf-8"))
        if size > limits.max_schema_bytes:
            raise LimitError(f"{path}.parameters is {size} bytes of JSON", limits.max_schema_bytes, "max_schema_bytes")
    _check_schema(params, f"{path}.parameters", limits)
    return function.model_copy(update={"parameters": params})


def check_catalogue_size(catalogue: Catalogue, limits: Settings) -> None:
    """Tool count, description and whole-catalogue size limits (before the per-function checks)."""
    if len(catalogue.functions) > limits.max_tools:
        raise LimitError(f"catalogue has {len(catalogue.functions)} tools", limits.max_tools, "max_tools")
    if len(catalogue.description) > limits.max_description_chars:
        raise LimitError(f"catalogue description is {len(catalogue.description)} characters",
                         limits.max_description_chars, "max_description_chars")


def check_source_size(data: Any, limits: Settings) -> None:
    """A whole import (parsed JSON) against `max_catalogue_bytes`."""
    size = len(json.dumps(data, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))
    if size > limits.max_catalogue_bytes:
        raise LimitError(f"catalogue is {size} bytes of JSON", limits.max_catalogue_bytes, "max_catalogue_bytes")


def validate_catalogue(catalogue: Catalogue, limits: Settings | None = None) -> Catalogue:
    """A checked copy: known types only, required names exist, function names unique; `limits` bound sizes."""
    if limits is not None:
        check_catalogue_size(catalogue, limits)
    seen: dict[str, int] = {}
    functions = []
    for i, function in enumerate(catalogue.functions):
        if function.name in seen:
            raise ValidationError(
                f"functions[{i}].name: duplicate function name {function.name!r} (also functions[{seen[function.name]}]);"
                " rename one"
            )
        seen[function.name] = i
        functions.append(validate_function(function, f"functions[{i}]", limits))
    return catalogue.model_copy(update={"functions": functions})


# ---------------------------------------------------------------------------- public entry points
def import_catalogue(
    source: str | bytes | Path | dict | list,
    *,
    name: str | None = None,
    description: str | None = None,
    format: str = "auto",
    limits: Settings | None = None,
) -> Catalogue:
    """A validated Catalogue from a file path, JSON text or parsed JSON, in any supported format.
    `limits` (the settings' PREFCALL_MAX_* values) bound what a user may import; None: trusted data, no bounds."""
    if limits is not None and isinstance(source, (str, bytes)) and len(source) > limits.max_catalogue_bytes:
        raise LimitError(f"catalogue is {len(source)} bytes", limits.max_catalogue_bytes, "max_catalogue_bytes")
    data, stem = read_source(source)
    if limits is not None:
        check_source_size(data, limits)
    fmt = detect_format(data) if format == "auto" else format
    if fmt not in _CONVERTERS:
        raise ValidationError(f"format: unknown format {format!r}; use auto or one of {', '.join(FORMATS)}")
    functions = _CONVERTERS[fmt](data)
    if not functions:
        raise ValidationError("catalogue: no functions found; the input lists no tools, functions or intents")
    meta = data if isinstance(data, dict) else {}
    default_name = meta.get("name") if isinstance(meta.get("name"), str) and "functions" in meta else None
    default_description = meta.get("description") or meta.get("source") or ""
    catalogue = Catalogue(
        name=name or default_name or stem or "imported",
        description=description if description is not None else str(default_description),
        functions=functions,
    )
    return validate_catalogue(catalogue, limits)


def catalogue_to_dict(catalogue: Catalogue) -> dict[str, Any]:
    """prefcall's own export form; `import_catalogue` reads it back (format "functions")."""
    return {
        "name": catalogue.name,
        "description": catalogue.description,
        "functions": [f.model_dump() for f in catalogue.functions],
    }


def export_catalogue(catalogue: Catalogue, *, indent: int | None = 1) -> str:
    return json.dumps(catalogue_to_dict(catalogue), indent=indent, ensure_ascii=False)


def to_openai_tools(catalogue: Catalogue) -> list[dict[str, Any]]:
    """OpenAI / MCP-host style tool list, for hosts that want it back in their own form."""
    return [{"type": "function", "function": f.model_dump()} for f in catalogue.functions]
