"""Can this tool do what the user asks? The model's own reading, as relevance evidence beside the embedder's.

A request on a function's topic that the function cannot serve ("What type of rock is best for a garden
sculpture?" against `sculpture.create`) is close to the function's text by any cosine; only a model that reads the
request can turn it down. Where a model's fit has a `CheckRule` (`prefcall fit --relevance` stores one only when,
on tuning requests its fit did not read, it refuses more irrelevant requests net of relevant ones than the
embedder's rule alone, within the same keep rule), the pipeline
asks the model one yes/no question per function in question (the one closest to the request by the embedder, and
the one stage 1 chose) and refuses the answer when the rule's score of the embedder's relevance score and the best
function's yes-margin (log P(Yes) - log P(No)) is under its threshold. A rule fitted `embedder_first` refuses what
the embedder's rule refuses before it asks: far off-topic chatter ("Good morning!") that a small model still calls
a fit for a calendar tool costs no model call.

The function's text is catalogue data and the request is the user's: both go in the user message, the request last
and marked as the request; neither can change the question.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from prefcall.engine.base import Engine, Prompt, PromptUsage, score_batch
from prefcall.schemas.model import Function
from prefcall.schemas.render import render_function_spec
from prefcall.strategies.fnctod import LinearRule

CHECK_FEATURES = ("relevance_score", "model_yes")
SPEC_CHARS = 1500  # a function's text beyond this adds nothing to the question (and costs prompt tokens)
REQUEST_CHARS = 1500
SYSTEM = "You check whether a tool can fulfil a user's request. Answer with one word: Yes or No."
QUESTION = "Can this tool, called with suitable arguments, do what the user asks?"
ANSWERS = ("Yes", "No")


class CheckRule(LinearRule):
    """Over CHECK_FEATURES. `embedder_first`: a request the embedder's rule refuses on its own is refused without
    asking the model (the check only adds refusals to the embedder's); the fit says which reads its tuning
    requests better (fit_relevance.fit_check). Fits stored before it was a choice asked the model every time."""

    weights: list[float] = Field(min_length=len(CHECK_FEATURES) + 1, max_length=len(CHECK_FEATURES) + 1)
    embedder_first: bool = False


def check_prompt(function: Function, request: str) -> Prompt:
    user = (f"{render_function_spec(function)[:SPEC_CHARS]}\n\nUser request:\n{request.strip()[:REQUEST_CHARS]}\n\n"
            f"{QUESTION}")
    return Prompt.chat(SYSTEM, user)


def yes_margins(engine: Engine, functions: Sequence[Function], request: str,
                usage: PromptUsage | None = None) -> list[float]:
    """log P(Yes) - log P(No) of the check question for each function (one batch); the prompt tokens it took are
    added to `usage` when given."""
    if not functions:
        return []
    scored = score_batch(engine, [(check_prompt(f, request), list(ANSWERS)) for f in functions])
    for s in scored if usage is not None else ():
        usage.add(s.usage)
    return [s.logprobs[0] - s.logprobs[1] for s in scored]


def features(relevance_score: float, margins: Sequence[float]) -> list[float]:
    """CHECK_FEATURES: the embedder rule's score and the best yes-margin of the functions asked about."""
    return [relevance_score, max(margins)]
