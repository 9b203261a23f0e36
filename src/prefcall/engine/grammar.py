"""JSON Schema -> GBNF with llama.cpp's converter, and llama.cpp's grammar check without a model: what the
in-process engine, the served engines that take a GBNF grammar and import-time catalogue checks share. With
`engine/llama.py`, the only module that imports `llama_cpp`."""

from __future__ import annotations

import json
from typing import Any

from prefcall.errors import GrammarError

import llama_cpp  # noqa: E402  (below the prefcall imports, as in engine/llama.py)


def check_grammar(schema: dict[str, Any]) -> None:
    """Compile a JSON Schema as the in-process engine would, without a model: llama.cpp's converter, then
    llama.cpp's own grammar parser (a grammar sampler made with no vocabulary: JSON grammars name no tokens).
    GrammarError when either refuses it. What import-time checks use before (or without) a loaded model."""
    gbnf = json_schema_gbnf(schema)
    handle = llama_cpp.llama_sampler_init_grammar(None, gbnf.encode("utf-8"), b"root")
    if not handle:
        raise GrammarError("llama.cpp rejected the grammar built from the schema: simplify the schema "
                           "(a double quote in a property name or enum value is a known cause)")
    llama_cpp.llama_sampler_free(handle)


def json_schema_gbnf(schema: dict[str, Any]) -> str:
    """The GBNF grammar llama.cpp's converter writes for a JSON Schema (the same one the in-process engine uses).

    For served engines that take a GBNF `grammar` (llama-cpp-python's server): same key order, same grammar."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    try:
        return json_schema_to_gbnf(json.dumps(schema))  # key order matters: never sort keys
    except Exception as exc:  # the converter raises bare exceptions for unsupported schema parts
        raise GrammarError(f"JSON Schema cannot become a grammar ({exc}): simplify or fix the schema") from exc
