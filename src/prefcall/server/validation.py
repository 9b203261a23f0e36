"""Input checks done before any strategy or store is touched, so a bad request changes nothing."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from prefcall.errors import LimitError, ValidationError
from prefcall.schemas.model import Call, Catalogue, Turn
from prefcall.schemas.state import DialogueState
from prefcall.server.models import ToolIn, TurnIn


def first_bad_unicode(text: str) -> int | None:
    """Index of the first lone surrogate (text that cannot be encoded as UTF-8), or None."""
    try:
        text.encode("utf-8")
        return None
    except UnicodeEncodeError as exc:
        return exc.start


def check_unicode(value: Any, field: str) -> None:
    """Walk strings inside `value` (dict keys too); lone surrogates are refused with the field named."""
    if isinstance(value, str):
        position = first_bad_unicode(value)
        if position is not None:
            raise ValidationError(
                f"{field} contains invalid Unicode (a lone surrogate at character {position}): send valid UTF-8 text"
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            check_unicode(key, field)
            check_unicode(item, field)
    elif isinstance(value, (list, tuple)):
        for item in value:
            check_unicode(item, field)
    elif hasattr(value, "model_dump"):
        check_unicode(value.model_dump(), field)


def dialogue_size(turns: Sequence[Turn]) -> int:
    """Characters of a dialogue as the limit counts them: every turn's text plus its calls' arguments (JSON)."""
    return sum(len(t.content) + sum(len(c.name) + len(json.dumps(c.arguments, ensure_ascii=False)) for c in t.calls)
               for t in turns)


def dialogue_turns(dialogue: str | Sequence[TurnIn], max_chars: int, max_turns: int | None = None) -> list[Turn]:
    """A host's dialogue (plain string or turns) as strategy Turns, after size and content checks."""
    if max_turns is not None and not isinstance(dialogue, str) and len(dialogue) > max_turns:
        raise LimitError(f"dialogue has {len(dialogue)} turns", max_turns, "max_dialogue_turns")
    check_unicode(dialogue if isinstance(dialogue, str) else [t.model_dump() for t in dialogue], "dialogue")
    if isinstance(dialogue, str):
        turns = [Turn(role="user", content=dialogue.strip())] if dialogue.strip() else []
    else:
        turns = [
            Turn(role=t.role, content=t.content, calls=[Call(name=c.name, arguments=c.arguments) for c in t.calls])
            for t in dialogue
            if t.content.strip() or t.calls
        ]
    if not any(t.role == "user" and t.content.strip() for t in turns):
        raise ValidationError("dialogue is empty: send the user's request as a string or a list of turns")
    size = dialogue_size(turns)
    if size > max_chars:
        raise LimitError(f"dialogue is {size} characters (turn texts and call arguments)",
                         max_chars, "max_dialogue_chars")
    return turns


def state_in(state: DialogueState | None, max_chars: int) -> DialogueState | None:
    """A host's dialogue state (the one a previous parse_request returned), after size and content checks."""
    if state is None:
        return None
    check_unicode(state.model_dump(), "state")
    size = json_size(state.model_dump())
    if size > max_chars:
        raise LimitError(f"state is {size} characters", max_chars, "max_dialogue_chars")
    return state


def check_state_functions(state: DialogueState, catalogue: Catalogue) -> None:
    unknown = sorted(set(state.functions) - set(catalogue.names) |
                     ({state.active} - set(catalogue.names) if state.active else set()))
    if unknown:
        raise ValidationError(f"state names {', '.join(unknown)}, not in catalogue {catalogue.name}: send the state "
                              "that parse_request returned for this catalogue")


def check_unique_names(names: Sequence[str], what: str = "tool") -> None:
    seen: set[str] = set()
    duplicates = sorted({n for n in names if n in seen or seen.add(n)})  # type: ignore[func-returns-value]
    if duplicates:
        raise ValidationError(f"duplicate {what} names: {', '.join(duplicates)}: give each {what} a unique name")


def tool_parameters(tool: ToolIn) -> dict[str, Any]:
    """The argument schema of a host-sent tool, whichever dialect it came in."""
    return tool.parameters or tool.input_schema or {"type": "object", "properties": {}}


def check_text(text: str, field: str, max_chars: int, setting: str = "max_dialogue_chars") -> str:
    check_unicode(text, field)
    text = text.strip()
    if not text:
        raise ValidationError(f"{field} is empty: send some text")
    if len(text) > max_chars:
        raise LimitError(f"{field} is {len(text)} characters", max_chars, setting)
    return text


def json_size(value: Any) -> int:
    """Bytes of `value` as UTF-8 JSON (what size limits on structured input count)."""
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))


def check_tool_list(tools: Sequence[Any], max_tools: int, max_bytes: int) -> None:
    """A host-sent tool list within the tool-count and size limits, checked before anything walks it."""
    if len(tools) > max_tools:
        raise LimitError(f"the tool list has {len(tools)} tools", max_tools, "max_tools")
    size = json_size([t.model_dump() if hasattr(t, "model_dump") else t for t in tools])
    if size > max_bytes:
        raise LimitError(f"the tool list is {size} bytes of JSON", max_bytes, "max_catalogue_bytes")
