"""The conversation's dialogue state (schemas.state): how a turn's calls update it, and how the pipeline carries it."""

from __future__ import annotations

from prefcall.schemas.model import Call, Turn
from prefcall.schemas.state import DialogueState, user_turn_index


def test_a_turn_adds_values_replaces_a_changed_one_and_keeps_the_rest():
    first = DialogueState().updated([Call(name="ReserveRestaurant", arguments={"date": "March 8th", "party_size": 2})],
                                    0, [{"function": "ReserveRestaurant", "argument": "date", "origin": "user",
                                         "source": "on the 8th"}])
    second = first.updated([Call(name="ReserveRestaurant", arguments={"restaurant": "P.f. Chang's", "party_size": 4,
                                                                      "time": None})], 1)
    held = second.functions["ReserveRestaurant"].arguments
    assert {k: (v.value, v.turn) for k, v in held.items()} == {
        "date": ("March 8th", 0), "party_size": (4, 1), "restaurant": ("P.f. Chang's", 1)}
    assert held["date"].source == "on the 8th" and "time" not in held  # an empty value sets nothing
    assert first.functions["ReserveRestaurant"].arguments["party_size"].value == 2  # `updated` returns a copy
    # The same value again keeps the turn (and source) that first set it.
    again = second.updated([Call(name="ReserveRestaurant", arguments={"date": "March 8th"})], 2)
    assert again.functions["ReserveRestaurant"].arguments["date"].turn == 0 and again.turn == 2


def test_one_entry_per_function_and_the_active_one_moves_only_with_a_call():
    state = DialogueState().updated([Call(name="ReserveRestaurant", arguments={"city": "Corte Madera"})], 0)
    state = state.updated([Call(name="GetRide", arguments={"destination": "P.f. Chang's"})], 1)
    assert state.active == "GetRide" and set(state.functions) == {"ReserveRestaurant", "GetRide"}
    assert [c.name for c in state.calls()] == ["GetRide", "ReserveRestaurant"]
    quiet = state.updated([], 2)  # a turn that calls nothing keeps the active function and every value
    assert quiet.active == "GetRide" and quiet.calls() == state.calls() and quiet.turn == 2


def test_the_state_of_a_dialogue_comes_from_the_calls_its_assistant_turns_carry():
    turns = [Turn(role="user", content="A table on the 8th"),
             Turn(role="assistant", content="Where?", calls=[Call(name="ReserveRestaurant",
                                                                  arguments={"date": "March 8th"})]),
             Turn(role="user", content="At P.f. Chang's"),
             Turn(role="assistant", content="For how many?", calls=[Call(name="ReserveRestaurant",
                                                                         arguments={"restaurant": "P.f. Chang's"})]),
             Turn(role="user", content="Two people")]
    state = DialogueState.from_turns(turns)
    held = state.functions["ReserveRestaurant"].arguments
    assert {k: (v.value, v.turn, v.origin) for k, v in held.items()} == {
        "date": ("March 8th", 0, "call"), "restaurant": ("P.f. Chang's", 1, "call")}
    assert state.turn == 1 and user_turn_index(turns) == 2
    assert DialogueState.from_turns(turns[:1]) == DialogueState()
