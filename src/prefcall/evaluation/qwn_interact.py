"""The paper's auto-interaction for evaluating QwN: a simulated user answers only the expected question.

Loop: clarify -> if it asks, the simulated user replies with the withheld information when the question is
semantically close to the expected one (cosine >= threshold with an Embedder), else "I cannot help with that";
-> when it continues, the calls are drafted (or made by `call_maker`) and compared with the expected ones.

Metrics per episode: G1 (asked the expected question), G2 (the final calls equal the expected calls,
name and arguments), Re (redundant questions: asked but not the expected one, or asked again after it was
answered), Steps (clarify rounds until it continued, admitted a limitation, or hit max_steps).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from prefcall.engine.base import Embedder, Engine
from prefcall.evaluation.metrics.normalise import normalise_argument
from prefcall.schemas.model import Call, Catalogue, Turn, as_dialogue
from prefcall.strategies.qwn import Decision, clarify
from prefcall.strategies.qwn_draft import draft_call

CANNOT_HELP = "Sorry, I cannot help with that."


class Episode(BaseModel):
    g1: bool = False
    g2: bool = False
    redundant: int = 0
    steps: int = 0
    final_decision: Decision | None = None
    calls: list[Call] = Field(default_factory=list)
    transcript: list[Turn] = Field(default_factory=list)


class SimulatedUser:
    """Answers once, and only a question that means the same as the expected one."""

    def __init__(self, expected_question: str, answer: str, embedder: Embedder, threshold: float = 0.6) -> None:
        self.expected_question = expected_question
        self.answer = answer
        self.embedder = embedder
        self.threshold = threshold
        self.answered = False

    def similarity(self, question: str) -> float:
        vectors = np.asarray(self.embedder.embed([question, self.expected_question]))
        return float(vectors[0] @ vectors[1])

    def respond(self, question: str) -> tuple[str, bool]:
        """(reply, matched): the withheld answer the first time the expected question comes, else a refusal."""
        if not self.answered and self.similarity(question) >= self.threshold:
            self.answered = True
            return self.answer, True
        return CANNOT_HELP, False


def calls_match(predicted: Sequence[Call], expected: Sequence[Call]) -> bool:
    """Same multiset of calls: names equal and arguments equal after the metrics' value normalisation
    (`normalise_argument`: case, punctuation, spaces, 2.0 == 2)."""
    def key(call: Call) -> str:
        return repr((call.name, sorted((k, repr(normalise_argument(v))) for k, v in call.arguments.items())))

    return sorted(map(key, predicted)) == sorted(map(key, expected))


def interact(
    engine: Engine,
    dialogue: str | list[Turn],
    catalogue: Catalogue,
    *,
    expected_question: str,
    answer: str,
    expected_calls: Sequence[Call],
    embedder: Embedder,
    threshold: float = 0.6,
    max_steps: int = 3,
    instructions: Sequence[str] = (),
    call_maker: Callable[[list[Turn]], list[Call]] | None = None,
    **clarify_options: Any,
) -> Episode:
    """Run one episode of ask/answer until the strategy continues, gives up, or runs out of steps."""
    user = SimulatedUser(expected_question, answer, embedder, threshold)
    turns = as_dialogue(dialogue)
    asked: list[str] = []
    episode = Episode()
    for _ in range(max_steps):
        episode.steps += 1
        result = clarify(engine, turns, catalogue, instructions=instructions, asked=asked, **clarify_options)
        episode.final_decision = result.decision
        if result.decision != "question" or not result.question:
            break
        reply, matched = user.respond(result.question)
        episode.g1 = episode.g1 or matched
        episode.redundant += 0 if matched else 1
        asked.append(result.question)
        turns = turns + [Turn(role="assistant", content=result.question), Turn(role="user", content=reply)]
    if episode.final_decision == "continue":
        episode.calls = call_maker(turns) if call_maker else _draft_calls(engine, turns, catalogue, instructions)
        episode.g2 = calls_match(episode.calls, expected_calls)
    episode.transcript = turns
    return episode


def _draft_calls(engine: Engine, turns: list[Turn], catalogue: Catalogue, instructions: Sequence[str]) -> list[Call]:
    draft = draft_call(engine, turns, catalogue, instructions=instructions)
    return [draft.call] if draft.call else []


def interaction_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """G1 and G2 rates, mean redundant questions (Re) and mean Steps; zeros for no episodes."""
    n = len(episodes)
    if n == 0:
        return {"G1": 0.0, "G2": 0.0, "Re": 0.0, "Steps": 0.0, "episodes": 0}
    return {
        "G1": sum(e.g1 for e in episodes) / n,
        "G2": sum(e.g2 for e in episodes) / n,
        "Re": sum(e.redundant for e in episodes) / n,
        "Steps": sum(e.steps for e in episodes) / n,
        "episodes": n,
    }
