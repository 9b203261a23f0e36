"""Catalogue, function and call models shared by every strategy.

A function's parameters are a JSON Schema object (`{"type": "object", "properties": ..., "required": [...]}`);
importers in `prefcall.schemas.importers` normalise other dialects into this form.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class Function(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})

    @property
    def properties(self) -> dict[str, dict[str, Any]]:
        return dict(self.parameters.get("properties") or {})

    @property
    def required(self) -> list[str]:
        return list(self.parameters.get("required") or [])


class Catalogue(BaseModel):
    name: str = Field(min_length=1, max_length=100)
    description: str = ""
    functions: list[Function] = Field(default_factory=list)

    def function(self, name: str) -> Function | None:
        return next((f for f in self.functions if f.name == name), None)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.functions]


class Call(BaseModel):
    """One concrete API call."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)

    def key(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        """Order-free identity, for de-duplication and set comparison."""
        return self.name, tuple(sorted((k, str(v)) for k, v in self.arguments.items()))


class MissingArgument(BaseModel):
    """An argument a call needs but the request does not supply: what post-checks and QwN `clarify` report and
    the MCP tools return."""

    function: str
    argument: str
    description: str = ""  # the parameter's description from the catalogue
    reason: Literal["absent", "not_stated", "invalid"] = "absent"  # not given / given but said nowhere / not allowed
    question: str | None = None  # a question to the user about this argument, when one was phrased for it
    problem: str | None = None  # reason "invalid": what the given value breaks, in the user's terms


class Turn(BaseModel):
    """One dialogue turn; assistant turns may carry the calls made at that point (FnCTOD keeps them in context)."""

    role: str = Field(pattern="^(user|assistant|system)$")
    content: str = ""
    calls: list[Call] = Field(default_factory=list)


def as_dialogue(dialogue: str | list[Turn] | list[dict[str, Any]]) -> list[Turn]:
    """Accept a plain string (one user turn) or a list of turns."""
    if isinstance(dialogue, str):
        return [Turn(role="user", content=dialogue)]
    return [t if isinstance(t, Turn) else Turn.model_validate(t) for t in dialogue]


def render_dialogue(turns: list[Turn]) -> str:
    """Plain-text transcript; earlier calls shown the way FnCTOD keeps them in the dialogue."""
    lines = []
    for turn in turns:
        speaker = "User" if turn.role == "user" else "Assistant" if turn.role == "assistant" else "System"
        if turn.content:
            lines.append(f"{speaker}: {turn.content}")
        for call in turn.calls:
            args = ", ".join(f'{k}="{v}"' for k, v in call.arguments.items())
            lines.append(f"{speaker} called: {call.name}({args})")
    return "\n".join(lines)
