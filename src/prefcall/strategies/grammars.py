"""The grammars the strategies build for a catalogue, compiled once when the catalogue is imported.

A catalogue whose schemas cannot become grammars would break every later request that uses it; compiling the
same schemas the strategies send at request time (`fnctod.selection_schema`, `fnctod.arguments_schema` per
function) at import refuses it then, with one line naming the function. The compiling is the engine's
(`check_grammar`: llama.cpp in `engine/llama.py`, a pure-Python stand-in in the fake engine).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prefcall.errors import GrammarError, ValidationError
from prefcall.schemas.model import Catalogue
from prefcall.strategies import fnctod

GrammarCheck = Callable[[dict[str, Any]], None]


def grammar_checker(engine: object | None) -> GrammarCheck:
    """The engine's own `check_grammar` when it has one; else llama.cpp's, which needs no model (served engines
    and a server whose model is still loading)."""
    check = getattr(engine, "check_grammar", None)
    if callable(check):
        return check
    from prefcall.engine.grammar import check_grammar

    return check_grammar


def request_schemas(catalogue: Catalogue) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, schema) for every grammar a request on this catalogue may need that depends on it alone."""
    yield "function names", fnctod.selection_schema(catalogue)
    for i, function in enumerate(catalogue.functions):
        yield f"functions[{i}] {function.name}", fnctod.arguments_schema(function)


def check_catalogue_grammars(catalogue: Catalogue, check: GrammarCheck) -> None:
    """ValidationError naming the first function whose grammar cannot be compiled."""
    for where, schema in request_schemas(catalogue):
        try:
            check(schema)
        except GrammarError as exc:
            raise ValidationError(f"{where}: its schema cannot be compiled to a grammar ({exc}); "
                                  "fix the schema and import again") from exc
