"""Input checks done before any strategy or store is touched, so a bad request changes nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prefcall.errors import ValidationError
from prefcall.schemas.model import Call, Turn
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


def dialogue_turns(dialogue: str | Sequence[TurnIn], max_chars: int) -> list[Turn]:
    """A host's dialogue (plain string or turns) as strategy Turns, after size and content checks."""
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
    size = sum(len(t.content) for t in turns)
    if size > max_chars:
        raise ValidationError(
            f"dialogue is {size} characters, over the limit of {max_chars}: send only the recent turns "
            "(or raise PREFCALL_MAX_DIALOGUE_CHARS)"
        )
    return turns


def check_unique_names(names: Sequence[str], what: str = "tool") -> None:
    seen: set[str] = set()
    duplicates = sorted({n for n in names if n in seen or seen.add(n)})  # type: ignore[func-returns-value]
    if duplicates:
        raise ValidationError(f"duplicate {what} names: {', '.join(duplicates)}: give each {what} a unique name")


def tool_parameters(tool: ToolIn) -> dict[str, Any]:
    """The argument schema of a host-sent tool, whichever dialect it came in."""
    return tool.parameters or tool.input_schema or {"type": "object", "properties": {}}


def check_text(text: str, field: str, max_chars: int) -> str:
    check_unicode(text, field)
    text = text.strip()
    if not text:
        raise ValidationError(f"{field} is empty: send some text")
    if len(text) > max_chars:
        raise ValidationError(f"{field} is {len(text)} characters, over the limit of {max_chars}: shorten it")
    return text
