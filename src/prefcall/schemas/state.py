"""A conversation's dialogue state, the FnCTOD way: per function, the arguments set so far, each with the user turn
and the source it came from.

A turn updates the state (`DialogueState.updated`): a call of this turn adds its values and replaces a value the
user changed; every other value stays, with the turn that set it. The active function is the one this turn called
first; a turn that calls nothing keeps it. A dialogue that moves between functions (a restaurant, then a taxi to it)
keeps one entry per function. The state is plain data: a host may send it back with the next turn (stateless), or
prefcall rebuilds it from the calls the dialogue's assistant turns carry (`from_turns`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from prefcall.schemas.model import Call, Turn

# Where a value came from: the user's words, an assistant's proposal the user accepted, a standing instruction, an
# earlier call (sent by the host on an assistant turn), the schema's default.
StateOrigin = Literal["user", "offer", "instruction", "call", "default"]


class StateValue(BaseModel):
    value: Any
    origin: StateOrigin = Field(description="who set it: the user's words, an assistant's proposal the user "
                                            "accepted, a standing instruction, an earlier call, or the schema's "
                                            "default")
    turn: int = Field(ge=0, description="the user turn that set it (0 is the conversation's first user turn)")
    instruction: str | None = Field(default=None, description="the standing instruction that set it")
    source: str | None = Field(default=None, description="the words it was read from")


class FunctionState(BaseModel):
    arguments: dict[str, StateValue] = Field(default_factory=dict)
    turn: int = Field(ge=0, description="the last user turn that called the function")


class DialogueState(BaseModel):
    """Per function of the conversation, its arguments so far; `active` is the function the user is after now."""

    turn: int = Field(default=-1, ge=-1, description="the last user turn this state includes (-1: none yet)")
    active: str | None = Field(default=None, description="the function the conversation is about now")
    functions: dict[str, FunctionState] = Field(default_factory=dict)

    def calls(self) -> list[Call]:
        """One call per function with every value the state holds: the active function first, then the others
        from the most recently called."""
        order = sorted(self.functions, key=lambda name: (name != self.active, -self.functions[name].turn))
        return [Call(name=name, arguments={k: v.value for k, v in self.functions[name].arguments.items()})
                for name in order]

    def updated(self, calls: Sequence[Call], turn: int, provenance: Iterable[dict[str, Any]] = (),
                origin: StateOrigin = "user") -> DialogueState:
        """The state after user turn `turn` made `calls` (a copy; this one is unchanged). `provenance` (the
        pipeline's: function, argument, origin, instruction, source) says where each value came from; a value
        without one takes `origin`. A value equal to the one held keeps its turn and source."""
        known = {(p.get("function"), p.get("argument")): p for p in provenance}
        state = self.model_copy(deep=True)
        state.turn = max(state.turn, turn)
        for call in calls:
            frame = state.functions.setdefault(call.name, FunctionState(turn=turn))
            frame.turn = max(frame.turn, turn)
            for argument, value in call.arguments.items():
                if value is None or value == "":
                    continue
                held = frame.arguments.get(argument)
                if held is not None and held.value == value:
                    continue
                found = known.get((call.name, argument), {})
                frame.arguments[argument] = StateValue(value=value, origin=found.get("origin", origin), turn=turn,
                                                       instruction=found.get("instruction"),
                                                       source=found.get("source"))
        if calls:
            state.active = calls[0].name
        return state

    @classmethod
    def from_turns(cls, turns: Sequence[Turn]) -> DialogueState:
        """The state the calls on the dialogue's assistant turns set: each assistant turn's calls update the state
        at the user turn before it (origin "call")."""
        state, user_turn = cls(), -1
        for turn in turns:
            if turn.role == "user":
                user_turn += 1
            elif turn.role == "assistant" and turn.calls:
                state = state.updated(turn.calls, max(user_turn, 0), origin="call")
        return state


def user_turn_index(turns: Sequence[Turn]) -> int:
    """The index of the dialogue's last user turn (0 for the first); -1 without one."""
    return sum(t.role == "user" for t in turns) - 1
