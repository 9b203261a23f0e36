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

The question has versions (`QUESTIONS`); a rule keeps the one it was fitted with (fits stored before versions read
version 1). Version 2 names what a message that asks a tool for nothing looks like (small talk, thanks, an opinion,
a question of general knowledge, a task for another tool, a request that nothing be done). A rule fitted
`calibrated` reads each margin less the margin the model gives the same function for the content-free request
"N/A" ("Calibrate before use", Zhao et al., 2021, as select_tools_nlt does): a model that says Yes to a tool
whatever is asked (a generic tool, a long description) no longer passes every request for it. The baseline is
asked once per engine, question and function text (cached, floats only).

A rule fitted `stage_one` also reads stage 1's margin of "None" over the best function (fnctod's `none_margin`: the
model's score of the "no function fits" candidate against the functions', from the stage-1 prompt that lists them
all, no further model call): a request on a tool's topic that asks for something the tool does not do passes the
question about that tool, yet the model, seeing the whole list, puts "None" close to it.

A rule may also read the model's answer to questions about the message alone (`MESSAGE_QUESTIONS`, no tool in
the prompt): does the user ask for anything to be done or found? A thank-you or a remark on a topic the tools
share ("my old provider was terrible with refunds") reads as a fit for a refund tool, yet asks for nothing; the
tool question weighs the topic, the message question the act. A rule fitted with `messages` reads those margins
after the tool's (`features`); the fit chooses them only where, held out, they refuse more irrelevant tuning
requests net of relevant ones. Read two-sided, a message's clear Yes ("I need an inventory update on markers")
can outweigh a tool's clear No (a document formatter), and a task sent to a server whose tools do something else
passes; a rule fitted `one_sided` reads a message margin only where it says No (`one_sided`): the message
question can count against a request that asks for nothing, never for one that asks what no tool here does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import NamedTuple

from pydantic import Field, field_validator, model_validator

from prefcall.engine.base import Embedder, Engine, Prompt, PromptUsage, score_batch
from prefcall.schemas.model import Function
from prefcall.schemas.render import render_function_spec
from prefcall.strategies import relevance
from prefcall.strategies.fnctod import LinearRule
from prefcall.strategies.nlt import TOOL_PREFIX, ContentFreeCache

CHECK_FEATURES = ("relevance_score", "model_yes")
SPEC_CHARS = 1500  # a function's text beyond this adds nothing to the question (and costs prompt tokens)
REQUEST_CHARS = 1500
ANSWERS = ("Yes", "No")
CONTENT_FREE = "N/A"  # the request a calibrated rule's baseline is asked with


class Question(NamedTuple):
    system: str
    label: str  # what the user's words are introduced as
    question: str


QUESTIONS: dict[int, Question] = {
    1: Question("You check whether a tool can fulfil a user's request. Answer with one word: Yes or No.",
                "User request", "Can this tool, called with suitable arguments, do what the user asks?"),
    2: Question("You check whether a tool can fulfil a user's message. Answer with one word: Yes or No.",
                "User message", "Does the user's message ask for something this tool does? Answer No when the message "
                "is small talk, thanks, an opinion, a question of general knowledge, a task that needs a different "
                "tool, or asks for nothing to be done."),
}
LATEST = 2  # the version `prefcall fit --relevance` asks

# Questions about the user's message alone (no tool in the prompt), by version: their yes-margins are features of a
# rule fitted with `messages`. The fit asks every version (`prefcall fit --relevance`) and chooses which to read.
MESSAGE_QUESTIONS: dict[int, Question] = {
    1: Question("You read one message that a user sent to an assistant. Answer with one word: Yes or No.",
                "User message", "Is this message a request for the assistant to take an action or to fetch or "
                "compute something for the user?"),
    2: Question("You read one message that a user sent to an assistant that can use tools. Answer with one word: "
                "Yes or No.", "User message", "Does the message ask the assistant to do something or to find "
                "something out for the user (an action, a search, a booking, a change, a lookup, a calculation)? "
                "Answer No when it only chats, greets, thanks, gives feedback or an opinion, asks a question of "
                "general knowledge, or asks for nothing to be done."),
}


class CheckRule(LinearRule):
    """Over CHECK_FEATURES. `embedder_first`: a request the embedder's rule refuses on its own is refused without
    asking the model (the check only adds refusals to the embedder's); the fit says which reads its tuning
    requests better (fit_relevance.fit_check). Fits stored before it was a choice asked the model every time.
    `question`: the version of QUESTIONS it was fitted on; `calibrated`: it reads margins less the content-free
    baseline; `messages`: the versions of MESSAGE_QUESTIONS whose yes-margins it reads after CHECK_FEATURES (one
    weight each); `one_sided`: it reads those margins only where they say No (`one_sided`: a message that asks for
    something may still ask a tool here cannot do, so a Yes must not lift a tool's low margin); `stage_one`: it
    reads stage 1's "None" margin after those (one weight)."""

    weights: list[float] = Field(min_length=len(CHECK_FEATURES) + 1)
    embedder_first: bool = False
    question: int = 1
    calibrated: bool = False
    messages: list[int] = Field(default_factory=list)
    stage_one: bool = False
    one_sided: bool = False

    @field_validator("messages")
    @classmethod
    def _known_messages(cls, value: list[int]) -> list[int]:
        unknown = sorted(set(value) - set(MESSAGE_QUESTIONS))
        if unknown:
            raise ValueError(f"message question versions {unknown} are not among {sorted(MESSAGE_QUESTIONS)}: refit "
                             "with `prefcall fit --relevance`")
        return value

    @model_validator(mode="after")
    def _one_weight_each(self) -> CheckRule:
        want = len(CHECK_FEATURES) + 1 + len(self.messages) + int(self.stage_one)
        if len(self.weights) != want:
            raise ValueError(f"a check rule reading {len(self.messages)} message questions"
                             f"{' and stage 1' if self.stage_one else ''} has {want} weights, not "
                             f"{len(self.weights)}: refit with `prefcall fit --relevance`")
        return self

    @field_validator("question")
    @classmethod
    def _known(cls, value: int) -> int:
        if value not in QUESTIONS:
            raise ValueError(f"question version {value} is not one of {sorted(QUESTIONS)}: refit with "
                             "`prefcall fit --relevance`")
        return value


def check_prompt(function: Function, request: str, question: int = 1) -> Prompt:
    asked = QUESTIONS[question]
    user = (f"{render_function_spec(function)[:SPEC_CHARS]}\n\n{asked.label}:\n{request.strip()[:REQUEST_CHARS]}"
            f"\n\n{asked.question}")
    return Prompt.chat(asked.system, user)


def _key(function: Function, question: int) -> str:
    payload = json.dumps([question, CONTENT_FREE, render_function_spec(function)[:SPEC_CHARS]], ensure_ascii=False)
    return TOOL_PREFIX + "check:" + hashlib.sha256(payload.encode("utf-8")).hexdigest()


class Margins(NamedTuple):
    raw: list[float]  # log P(Yes) - log P(No) for the request, per function
    content_free: list[float]  # the same for CONTENT_FREE (from the cache where it was asked before)

    def calibrated(self) -> list[float]:
        return [r - c for r, c in zip(self.raw, self.content_free)]


def margins(engine: Engine, functions: Sequence[Function], request: str, question: int = 1,
            usage: PromptUsage | None = None, *, content_free: bool = True,
            cache: ContentFreeCache | None = None) -> Margins:
    """The check's yes-margin for each function, and (`content_free`) each function's baseline: the requests and
    the baselines not cached yet go in one batch; the prompt tokens they took are added to `usage` when given."""
    if not functions:
        return Margins([], [])
    cache = CHECK_BASELINES if cache is None else cache
    keys = [_key(f, question) for f in functions] if content_free else []
    known = {k: found["margin"] for k in keys if (found := cache.get(engine, k)) is not None}
    missing = [(f, k) for f, k in zip(functions, keys) if k not in known]
    asked = [(check_prompt(f, r, question), list(ANSWERS))
             for f, r in [*((f, request) for f in functions), *((f, CONTENT_FREE) for f, _ in missing)]]
    scored = score_batch(engine, asked)
    for s in scored if usage is not None else ():
        usage.add(s.usage)
    values = [s.logprobs[0] - s.logprobs[1] for s in scored]
    for (_, key), value in zip(missing, values[len(functions):]):
        known[key] = value
        cache.put(engine, key, {"margin": value})
    return Margins(values[:len(functions)], [known[k] for k in keys])


def yes_margins(engine: Engine, functions: Sequence[Function], request: str,
                usage: PromptUsage | None = None, *, question: int = 1, calibrated: bool = False) -> list[float]:
    """log P(Yes) - log P(No) of the check question for each function (one batch), less its content-free
    baseline when `calibrated`; the prompt tokens it took are added to `usage` when given."""
    found = margins(engine, functions, request, question, usage, content_free=calibrated)
    return found.calibrated() if calibrated else found.raw


# Floats only (no model is held): each function's content-free margin, per engine and question.
CHECK_BASELINES = ContentFreeCache()


def message_prompt(request: str, version: int) -> Prompt:
    asked = MESSAGE_QUESTIONS[version]
    return Prompt.chat(asked.system, f"{asked.label}:\n{request.strip()[:REQUEST_CHARS]}\n\n{asked.question}")


def message_margins(engine: Engine, request: str, versions: Sequence[int],
                    usage: PromptUsage | None = None) -> list[float]:
    """log P(Yes) - log P(No) of each MESSAGE_QUESTIONS version about the request alone (one batch); the prompt
    tokens it took are added to `usage` when given."""
    if not versions:
        return []
    scored = score_batch(engine, [(message_prompt(request, v), list(ANSWERS)) for v in versions])
    for s in scored if usage is not None else ():
        usage.add(s.usage)
    return [s.logprobs[0] - s.logprobs[1] for s in scored]


def one_sided(margin: float) -> float:
    """A message question's margin as a rule fitted `one_sided` reads it: only a No counts (min(margin, 0))."""
    return min(float(margin), 0.0)


def features(relevance_score: float, margins: Sequence[float], messages: Sequence[float] = (),
             stage_one: Sequence[float] = (), *, sided: bool = False) -> list[float]:
    """CHECK_FEATURES: the embedder rule's score and the best yes-margin of the functions asked about; then the
    message questions' margins a rule reads (`CheckRule.messages`, in its order; `sided`: `one_sided`), then stage
    1's "None" margin for a rule fitted `stage_one`."""
    read = [one_sided(m) for m in messages] if sided else list(messages)
    return [relevance_score, max(margins), *read, *stage_one]


class StageView(NamedTuple):
    """What parse_request's stage 1 made of a request, for a tool that runs no stage 1 itself (clarify: its draft
    and its check)."""

    none_margin: float | None  # the model's score of "None" less the best function's (None: not weighed)
    chosen: list[str]  # the function stage 1 chose (none where it chose "None")


class Verdict(NamedTuple):
    refused: bool
    why: str  # what decided, in words
    asked: int  # model calls made (functions asked about and message questions); 0: the embedder's rule alone


def verdict(engine: Engine, embedder: Embedder | None, rule: CheckRule, request: str, functions: Sequence[Function],
            chosen: Sequence[str], usage: PromptUsage,
            stage: Callable[[], StageView] | None = None) -> Verdict | None:
    """The fitted check's answer to whether any of `functions` can do what `request` asks: the embedder's relevance
    rule (`relevance.judged`) decides alone where `rule` is fitted `embedder_first` and refuses; otherwise the model
    is asked about the function closest to the request, the ones in `chosen` (the function an answer was made
    for) and the one stage 1 chose (`stage`, run only when the model is asked: the check was fitted on the
    functions parse_request asks about, the closest and stage 1's), and, where the rule reads them, the questions
    about the message alone; the rule weighs those margins with the embedder's score. None where it cannot judge:
    no embedder or fitted relevance rule, or a rule fitted `stage_one` without stage 1's "None" margin.
    parse_request and clarify both judge by this, so the two refuse the same requests at a tier whose fit has a
    check. The prompt tokens go to `usage`."""
    judged = relevance.judged(embedder, request, functions)
    if judged is None:
        return None
    if rule.embedder_first and judged.refused:
        return Verdict(True, judged.describe() + "; the model was not asked", 0)
    view = stage() if stage is not None else StageView(None, [])
    none = view.none_margin if rule.stage_one else None
    if rule.stage_one and none is None:  # stage 1 did not weigh "None" here: nothing to read it by
        return None
    asked = [f for f in functions if f.name in {judged.closest, *chosen, *view.chosen}]
    yes = yes_margins(engine, asked, request, usage, question=rule.question, calibrated=rule.calibrated)
    messages = message_margins(engine, request, rule.messages, usage)
    found = features(judged.similarity, yes, messages, [none] if none is not None else [], sided=rule.one_sided)
    said = "".join(f", the message question {v}'s yes-margin {m:.2f}" for v, m in zip(rule.messages, messages))
    said += f", stage 1's None margin {found[-1]:.2f}" if rule.stage_one else ""
    refused = rule.refuses(found)
    why = (f"closest {judged.closest}: relevance score {judged.similarity:.2f}, the model's yes-margin "
           f"{found[1]:.2f}{' (calibrated)' if rule.calibrated else ''}{said}; the check's score "
           f"{rule.score(found):.2f} {'<' if refused else '>='} {rule.threshold:.2f}")
    return Verdict(refused, why, len(asked) + len(messages))
