"""QwN (Query-when-Need): before calling, decide to ask a question, continue, or admit the toolset cannot help.

Faithful part (the paper's decision prompt): the model answers `Question: ...` when key details are
missing, unclear or look wrong, `Continue` when the request is clear and doable, and
"Due to the limitation of toolset, I cannot solve the question" when no tool fits; questions already
asked are listed so it does not repeat them.

Beyond the paper, deterministic evidence from the catalogue:
- relevance: is any function relevant? (the embedder's fitted relevance rule when an embedder is given, else NLT
  scoring mode)
- a draft call (the caller's, or a grammar-constrained draft): which REQUIRED arguments neither the dialogue
  nor the profile instructions supply (absent, empty, or a value that appears nowhere in the text), and
  values outside their enum.

Combination rule (policy="combined", the default), first match wins:
1. relevance was checked and no function fits -> "limitation" (whatever the model said). With an embedder, the
   request is judged against the whole catalogue by the embedder's fitted relevance rule (`strategies.relevance`,
   data/relevance.json: the rule parse_request refuses by, fitted to keep 98% of relevant tune requests), so
   clarify and parse_request refuse the same requests; an embedder without a fitted rule refuses nothing, and a
   caller's `relevance_threshold` is a cosine cut per function instead. After the draft, also when the user's
   words fill none of the drafted function's required arguments and the same rule, reading that function alone,
   is under its threshold: a question about a function the request is not about is the wrong answer. Where the
   model's fit has a check (`check`, strategies.model_check: the server passes the one parse_request refuses by),
   the check decides relevance in place of the embedder's rule, after the draft, from the model's yes/no about the
   closest and the drafted function weighed with the embedder's score (a check fitted `embedder_first` lets the
   embedder's rule refuse first). The caller's `stage` runs parse_request's stage 1 (once) before the draft:
   the draft is of the function stage 1 chose (parse_request's choice; the embedder's closest where stage 1
   chose none), the check also asks about it, as in parse_request, and reads its "None" margin where fitted
   so; without `stage`, the embedder's closest is drafted and a check that reads that margin leaves relevance
   to the embedder's rule. The MCP server hands clarify stage 1 where the model's fit has a check (which runs
   stage 1 anyway), not at a tier without one (stage 1 for the draft alone costs more than it gained there:
   RESULTS.md, the thirty-fourth session). The
   result's `decision_without_check` is what the embedder's rule alone gave;
2. the draft misses required arguments or has invalid enum values not already asked about -> "question"
   naming them in plain words (whatever the model said);
3. everything missing was already asked -> "continue" (never repeat a question);
4. the evidence is complete and clean (draft parsed, nothing missing) -> "continue";
5. no usable evidence (draft failed) -> the model's own decision; a repeated model question -> "continue".
policy="model" is the paper alone (no evidence); policy="evidence" ignores the model's text.
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from prefcall.engine.base import Embedder, Engine, Prompt, PromptUsage
from prefcall.retrieval.text import humanise
from prefcall.schemas.model import Call, Catalogue, Function, MissingArgument, Turn, as_dialogue, render_dialogue
from prefcall.strategies.model_check import CheckRule, StageView, verdict
from prefcall.strategies.nlt import select_tools
from prefcall.strategies.nlt_models import NltUsage
from prefcall.strategies.qwn_draft import DraftResult, _support_block, draft_call
from prefcall.strategies.relevance import judged, similarities, unrelated
from prefcall.strategies.shortlist import Shortlist, fits_context, shortlist_catalogue

Decision = Literal["question", "continue", "limitation"]
Policy = Literal["combined", "model", "evidence"]

LIMITATION_TEXT = "Due to the limitation of toolset, I cannot solve the question"


class ClarifyResult(BaseModel):
    decision: Decision
    question: str | None = None
    missing_arguments: list[MissingArgument] = Field(default_factory=list)
    model_said: str | None = None  # the model's raw decision text (None when the model was not asked)
    model_decision: Decision | None = None  # what that text parsed to
    evidence: list[str] = Field(default_factory=list)
    relevant: list[str] | None = None  # functions that cleared the relevance check (None: not checked)
    draft: Call | None = None
    status: Literal["ok", "parse_error"] = "ok"
    shortlist: Shortlist | None = None  # a large catalogue: the functions the model's prompts listed
    # The decision the embedder's rule alone would give, where the model's fitted check decided relevance (None:
    # no check was asked): what the check changed, on the same request.
    decision_without_check: Decision | None = None
    usage: NltUsage = Field(default_factory=NltUsage)
    seconds: float = 0.0


# -- the paper's decision prompt ------------------------------------------------------------
def _tool_line(function: Function) -> str:
    params = []
    for name, spec in function.properties.items():
        mark = " (required)" if name in function.required else ""
        desc = str(spec.get("description") or "").strip()
        params.append(f"{name}{mark}" + (f": {desc}" if desc else ""))
    listing = "; ".join(params) if params else "no parameters"
    return f"- {function.name}: {function.description.strip()} Parameters: {listing}"


def qwn_prompt(
    engine: Engine,
    turns: list[Turn],
    catalogue: Catalogue,
    instructions: Sequence[str],
    asked: Sequence[str],
    context: str | None,
) -> Prompt:
    rules = (
        "Before calling a tool, decide whether you can call it now.\n"
        "- If key details the tool needs are missing, unclear or look wrong, answer 'Question: ' followed by "
        "one question to the user about them.\n"
        "- If the request is clear and a tool can do it, answer 'Continue'.\n"
        f"- If no tool can solve the request, answer '{LIMITATION_TEXT}'.\n"
        "Answer with one line only."
    )
    system = "You are an assistant that uses tools to help the user.\nTools:\n"
    system += "\n".join(_tool_line(f) for f in catalogue.functions) + "\n\n" + rules
    # The system part holds only the tools (shared across users); the user's profile and questions go with
    # the dialogue.
    user = render_dialogue(turns)
    support = _support_block(instructions, context)
    if support:
        user = support + "\n\n" + user
    if asked:
        user = "Questions you already asked (do not ask them again):\n" + "\n".join(f"- {q}" for q in asked) \
            + "\n\n" + user
    return Prompt.chat(system, user)


_QUESTION_RE = re.compile(r"question\s*[:：]\s*(?P<q>.*)", re.IGNORECASE | re.DOTALL)


def parse_decision(text: str) -> tuple[Decision | None, str | None]:
    """(decision, question) from the model's text; (None, None) when it says none of the three."""
    stripped = text.strip()
    lowered = stripped.lower()
    if "limitation" in lowered or "cannot solve" in lowered:
        return "limitation", None
    match = _QUESTION_RE.search(stripped)
    if match and match.group("q").strip():
        return "question", match.group("q").strip().splitlines()[0].strip()
    if re.match(r"^\W*continue\b", lowered):
        return "continue", None
    first_line = stripped.splitlines()[0].strip() if stripped else ""
    if first_line.endswith("?"):
        return "question", first_line  # a bare question is still a question
    return None, None


# -- deterministic evidence -----------------------------------------------------------------
def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _word_known(word: str, vocabulary: set[str]) -> bool:
    if word in vocabulary:
        return True
    # Inflections ("darker" for "dark", "flights" for "flight") count as stated.
    return len(word) >= 4 and any(len(v) >= 4 and (v.startswith(word) or word.startswith(v)) for v in vocabulary)


def is_grounded(value: Any, schema: dict[str, Any], text: str) -> bool:
    """Does the dialogue/profile text state this value? Booleans cannot be quoted, so they count as stated."""
    if value is None or value == "" or value == [] or value == {}:
        return False
    if isinstance(value, bool):
        return True
    if isinstance(value, (int, float)):
        number = int(value) if float(value).is_integer() else value
        return re.search(rf"(?<![\d.]){re.escape(str(number))}(?![\d])", text) is not None
    if isinstance(value, str):
        return _string_grounded(value, text)
    if isinstance(value, list):
        item_schema = schema.get("items") or {}
        return any(is_grounded(v, item_schema, text) for v in value)
    if isinstance(value, dict):
        return _object_grounded(value, schema, text)
    return True


def _string_grounded(value: str, text: str) -> bool:
    norm_value, norm_text = " ".join(_words(value)), " ".join(_words(text))
    if not norm_value:
        return False
    if norm_value in norm_text:
        return True
    content = [w for w in norm_value.split() if len(w) >= 3] or norm_value.split()
    vocabulary = set(norm_text.split())
    known = sum(_word_known(w, vocabulary) for w in content)
    return known / len(content) >= 0.6


def _object_grounded(value: dict[str, Any], schema: dict[str, Any], text: str) -> bool:
    properties = schema.get("properties") or {}
    required = [r for r in schema.get("required") or [] if r in properties]
    if required:
        return all(r in value and is_grounded(value[r], properties.get(r) or {}, text) for r in required)
    return any(is_grounded(v, properties.get(k) or {}, text) for k, v in value.items())


def enum_violations(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Paths whose value lies outside its enum (nested objects and arrays included; array items share their
    array's path), by strict jsonschema validation."""
    from prefcall.schemas.validation import errors  # jsonschema: imported when a draft is checked
    bad = []
    for error in errors(value, schema, strict=True):
        if error.validator == "enum":
            where = ".".join([path, *(str(p) for p in error.absolute_path if isinstance(p, str))])
            bad.append(where)
    return list(dict.fromkeys(bad))


def missing_arguments(function: Function, call: Call, support_text: str) -> list[MissingArgument]:
    """Required arguments the text does not supply, and arguments with values outside their enum."""
    out: list[MissingArgument] = []
    for name in function.required:
        spec = function.properties.get(name) or {}
        description = str(spec.get("description") or "")
        if name not in call.arguments or call.arguments[name] in (None, "", [], {}):
            out.append(MissingArgument(function=function.name, argument=name, description=description, reason="absent"))
        elif not is_grounded(call.arguments[name], spec, support_text):
            out.append(MissingArgument(function=function.name, argument=name, description=description, reason="not_stated"))
    listed = {m.argument for m in out}
    for name, value in call.arguments.items():
        spec = function.properties.get(name) or {}
        if name not in listed and enum_violations(value, spec, name):
            out.append(MissingArgument(function=function.name, argument=name, description=str(spec.get("description") or ""), reason="invalid"))
    return out


# -- the question ---------------------------------------------------------------------------
def question_for(missing: Sequence[MissingArgument]) -> str:
    """One question naming every missing argument in plain words, with its description when there is one."""
    if len(missing) == 1:
        m = missing[0]
        verb = "What" if m.reason != "invalid" else "Which valid"
        question = f"{verb} {humanise(m.argument)} would you like?"
        return question + (f" ({m.description.strip().rstrip('.')}.)" if m.description.strip() else "")
    parts = []
    for m in missing:
        hint = f" ({m.description.strip().rstrip('.')})" if m.description.strip() else ""
        parts.append(f"the {humanise(m.argument)}{hint}")
    listing = ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"To go on I need a few details: {listing}. Could you tell me them?"


def _already_asked(argument: str, asked: Sequence[str]) -> bool:
    human = humanise(argument).lower()
    return any(argument.lower() in q.lower() or human in q.lower() for q in asked)


def _is_repeat(question: str, asked: Sequence[str]) -> bool:
    key = " ".join(_words(question))
    return any(key == " ".join(_words(q)) for q in asked)


# -- relevance ------------------------------------------------------------------------------
def relevant_functions(
    engine: Engine,
    request: str,
    catalogue: Catalogue,
    usage: NltUsage,
    *,
    embedder: Embedder | None = None,
    threshold: float | None = None,
    calibrate: bool = True,
    context: str | None = None,
) -> tuple[list[str], dict[str, float], str]:
    """Functions that may serve the request, most similar first, and each function's score. With an embedder:
    its fitted relevance rule (`strategies.relevance.judged`, the rule parse_request refuses by) judges the request
    against the whole catalogue; under its threshold no function is relevant, else every function stays a candidate
    (the rule judges whether any function fits, not which). An embedder without a fitted rule refuses nothing; a
    caller's `threshold` is a cosine cut per function instead. Without an embedder, NLT P(YES) against the rule
    fitted for the model. Third: what decided, in words."""
    if embedder is not None:
        scores = similarities(embedder, request, catalogue.functions)
        ranked = sorted(scores, key=lambda name: -scores[name])
        if threshold is not None:
            return [name for name in ranked if scores[name] >= threshold], scores, f"cosine cut {threshold:.2f}"
        found = judged(embedder, request, catalogue.functions, scores)
        if found is None:
            return ranked, scores, f"{embedder.name} has no fitted relevance rule: nothing refused"
        return ([] if found.refused else ranked), scores, found.describe()
    else:
        # threshold None: the decision rule fitted for the model (nlt.rule_for)
        result = select_tools(engine, request, catalogue, mode="score", calibrate=calibrate, context=context,
                              threshold=threshold)
        usage.merge(result.usage)
        scores = {d.name: float(d.probability or 0.0) for d in result.decisions}
        cut = result.threshold or 0.5
    return sorted((n for n, s in scores.items() if s >= cut), key=lambda n: -scores[n]), scores, \
        f"NLT P(YES) cut {cut:.2f}"


# -- clarify --------------------------------------------------------------------------------
class _Evidence(BaseModel):
    relevant: list[str] | None = None
    draft: Call | None = None
    draft_ok: bool = False
    missing: list[MissingArgument] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    off_topic: str | None = None  # why the drafted function is not what the request is about (rule 1)
    checked: str | None = None  # the model's fitted check decided relevance: what it said (None: not asked)
    check_refused: bool = False  # ... and it refused (rule 1)
    embedder_refused: str | None = None  # where the check decided: why the embedder's rule alone would refuse


def _off_topic(embedder: Embedder | None, user_text: str, catalogue: Catalogue, calls: Sequence[Call],
               scores: dict[str, float] | None) -> str | None:
    """A note when every drafted call is for a function the user's words neither fill a required argument of
    nor resemble (`relevance.unrelated`); None otherwise or without a fitted rule."""
    pairs = [(function, call) for call in calls if (function := catalogue.function(call.name)) is not None]
    functions = [function for function, _ in pairs]
    for function, call in pairs:
        unfilled = {m.argument for m in missing_arguments(function, call, user_text)}
        if not function.required or set(function.required) - unfilled:
            return None  # the user's words give a required value: a question about the rest is right
    found = unrelated(embedder, user_text, functions, scores)
    return None if found is None else f"relevance after the draft: the words fill no required argument ({found.describe()})"


def _gather_evidence(
    engine: Engine,
    turns: list[Turn],
    catalogue: Catalogue,
    instructions: Sequence[str],
    draft_calls: list[Call] | None,
    embedder: Embedder | None,
    context: str | None,
    check_relevance: bool,
    relevance_threshold: float | None,
    usage: NltUsage,
    candidates: list[str] | None = None,
    check: CheckRule | None = None,
    stage: Callable[[], StageView] | None = None,
) -> _Evidence:
    evidence = _Evidence()
    user_text = "\n".join(t.content for t in turns if t.role == "user")
    support_text = "\n".join([render_dialogue(turns), *instructions, context or ""])
    scores: dict[str, float] | None = None
    own_draft = draft_calls is None  # a caller's draft names the function it chose: its relevance is not ours to judge
    # The model's fitted check decides relevance in place of the embedder's rule (as in parse_request), unless a
    # caller set a cosine cut; a check fitted `embedder_first` still lets that rule refuse first.
    # A check fitted on stage 1's "None" margin judges only where the caller can run stage 1 (`stage`);
    # otherwise the embedder's rule does.
    checking = check if check is not None and check_relevance and own_draft and embedder is not None \
        and relevance_threshold is None and (stage is not None or not check.stage_one) else None
    stage = functools.cache(stage) if stage is not None and own_draft else None  # the draft and the check: one run
    if check_relevance and draft_calls is None:
        relevant, scores, decided = relevant_functions(
            engine, user_text, catalogue, usage, embedder=embedder, threshold=relevance_threshold, context=context
        )
        best = max(scores.items(), key=lambda kv: kv[1])
        cleared = ", ".join(relevant[:5]) + (f" and {len(relevant) - 5} more" if len(relevant) > 5 else "")
        evidence.notes.append(f"relevance ({decided}): best {best[0]} {best[1]:.2f}; cleared: {cleared or 'none'}")
        if not relevant and scores and checking is not None and not checking.embedder_first:
            # the embedder's fitted rule refused (the only way a catalogue's functions all fail without a cut)
            evidence.embedder_refused = decided  # the check decides: every function stays a candidate
            relevant = sorted(scores, key=lambda name: -scores[name])
        evidence.relevant = relevant
        if not relevant:
            return evidence
        ranked = relevant  # most relevant first
        if stage is not None:  # stage 1's choice is parse_request's: drafted first
            ranked = _stage_first(ranked, stage(), evidence.notes)
    else:
        ranked = None
    if draft_calls is None:
        draft = _draft(engine, turns, catalogue, instructions, context, ranked, usage, candidates)
        if draft.call is None:
            evidence.notes.append(f"draft call failed to parse: {str(draft.raw_text)[:80]!r}")
            _check(engine, embedder, checking, user_text, catalogue, [], evidence, usage, stage)
            return evidence
        draft_calls = [draft.call]
    evidence.draft = draft_calls[0] if draft_calls else None
    evidence.draft_ok = True
    for call in draft_calls:
        function = catalogue.function(call.name)
        if function is None:
            evidence.notes.append(f"draft calls {call.name!r}, which is not in the catalogue")
            continue
        evidence.missing.extend(missing_arguments(function, call, support_text))
    for m in evidence.missing:
        evidence.notes.append(f"{m.function}.{m.argument}: {m.reason}")
    if check_relevance and own_draft and evidence.missing and embedder is not None:
        off_topic = _off_topic(embedder, user_text, catalogue, draft_calls, scores)
        if off_topic and checking is not None:
            evidence.embedder_refused = evidence.embedder_refused or off_topic  # the check decides in its place
        elif off_topic:
            evidence.off_topic = off_topic
            evidence.notes.append(off_topic)
    _check(engine, embedder, checking, user_text, catalogue, [c.name for c in draft_calls], evidence, usage,
           stage)
    return evidence


def _stage_first(ranked: list[str], view: StageView, notes: list[str]) -> list[str]:
    """`ranked` with the function stage 1 chose first (the function parse_request would call; the embedder's
    closest otherwise stays first): stage 1 reads the whole dialogue and the functions' parameters, the embedder
    only the request's words against each function's name and description."""
    chosen = next((name for name in view.chosen if name in ranked), None)
    if chosen is None or chosen == ranked[0]:
        return ranked
    notes.append(f"draft: {chosen}, the function stage 1 chose (the embedder's closest: {ranked[0]})")
    return [chosen, *(name for name in ranked if name != chosen)]


def _check(engine: Engine, embedder: Embedder | None, rule: CheckRule | None, user_text: str, catalogue: Catalogue,
           chosen: list[str], evidence: _Evidence, usage: NltUsage,
           stage: Callable[[], StageView] | None = None) -> None:
    """Ask the model's fitted check (strategies.model_check.verdict, as parse_request does) about the function
    closest to the request and the drafted one; where it cannot judge, the embedder's rule stands."""
    if rule is None:
        return
    prompt_usage = PromptUsage()
    found = verdict(engine, embedder, rule, user_text, catalogue.functions, chosen, prompt_usage, stage)
    usage.add(prompt_usage)
    if found is None:  # nothing to judge by (no relevance rule for the embedder, or no stage-1 margin)
        if evidence.embedder_refused is not None:
            evidence.off_topic, evidence.embedder_refused = evidence.embedder_refused, None
            evidence.notes.append(f"the model's check cannot judge here; the embedder's rule: {evidence.off_topic}")
        return
    evidence.checked, evidence.check_refused = found.why, found.refused
    evidence.notes.append(f"the model's check ({'refused' if found.refused else 'passed'}): {found.why}")
    if evidence.embedder_refused is not None:
        evidence.notes.append(f"the embedder's rule alone would refuse ({evidence.embedder_refused})")


def _draft(
    engine: Engine,
    turns: list[Turn],
    catalogue: Catalogue,
    instructions: Sequence[str],
    context: str | None,
    ranked: list[str] | None,
    usage: NltUsage,
    candidates: list[str] | None = None,
) -> DraftResult:
    # The most relevant function is used directly: one grammar step fewer than choosing again. Otherwise the
    # model chooses among `candidates` (a large catalogue's shortlist), else among all.
    function_name = ranked[0] if ranked else None
    draft = draft_call(
        engine, turns, catalogue, function_name=function_name, candidates=candidates, instructions=instructions,
        context=context, keep_required=False,
    )
    usage.merge(draft.usage)
    return draft


def _ask_model(
    engine: Engine,
    turns: list[Turn],
    catalogue: Catalogue,
    instructions: Sequence[str],
    asked: Sequence[str],
    context: str | None,
    usage: NltUsage,
) -> tuple[str, Decision | None, str | None]:
    prompt = qwn_prompt(engine, turns, catalogue, instructions, asked, context)
    # The paper's answer is one line; stopping there saves tokens when a small model rambles on.
    generation = engine.generate(prompt, max_tokens=48, stop=("\n",))
    usage.add(generation.usage, generation.completion_tokens)
    decision, question = parse_decision(generation.text)
    return generation.text, decision, question


def _combine(
    model_decision: Decision | None,
    model_question: str | None,
    evidence: _Evidence,
    asked: Sequence[str],
    policy: Policy,
) -> tuple[Decision | None, str | None, list[MissingArgument], list[str]]:
    notes: list[str] = []
    if policy != "model":
        if evidence.relevant is not None and not evidence.relevant:
            return "limitation", None, [], ["rule 1: no function is relevant -> limitation"]
        if evidence.off_topic:
            return "limitation", None, [], ["rule 1: the drafted function is not what the request is about -> limitation"]
        if evidence.check_refused:
            return "limitation", None, [], ["rule 1: the model's check says no function can do it -> limitation"]
        open_missing = [m for m in evidence.missing if not _already_asked(m.argument, asked)]
        if open_missing:
            notes.append("rule 2: required arguments not supplied -> question")
            return "question", question_for(open_missing), open_missing, notes
        if evidence.missing:
            return "continue", None, [], ["rule 3: every missing argument was already asked -> continue"]
        if evidence.draft_ok:
            return "continue", None, [], ["rule 4: draft complete -> continue"]
        if policy == "evidence":
            return None, None, [], ["no usable evidence"]
    if model_decision == "question" and model_question and _is_repeat(model_question, asked):
        return "continue", None, [], ["the model repeated an earlier question -> continue"]
    notes.append("rule 5: the model's decision" if policy != "model" else "policy model: the model's decision")
    return model_decision, model_question, [], notes


def clarify(
    engine: Engine,
    dialogue: list[Turn] | str,
    catalogue: Catalogue,
    *,
    instructions: Sequence[str] = (),
    asked: Sequence[str] = (),
    draft_calls: list[Call] | None = None,
    embedder: Embedder | None = None,
    context: str | None = None,
    policy: Policy = "combined",
    check_relevance: bool = True,
    relevance_threshold: float | None = None,
    shortlist_size: int | None = None,
    check: CheckRule | None = None,
    stage: Callable[[], StageView] | None = None,
) -> ClarifyResult:
    """Ask, continue or admit a limitation; see the module docstring for how model and evidence combine. A
    catalogue of more than 32 functions (or one whose decision prompt outgrows the context) reaches the model's
    prompts shortlisted for the user's words (`shortlist_size` functions; None: the size fitted for the embedder) (strategies.shortlist); the relevance evidence and a
    caller's draft read the whole catalogue."""
    started = time.perf_counter()
    turns = as_dialogue(dialogue)
    asked = list(asked) + [t.content for t in turns if t.role == "assistant" and t.content.strip().endswith("?")]
    usage = NltUsage()
    fits = fits_context(engine)
    user_text = "\n".join(t.content for t in turns if t.role == "user")
    listed, report = shortlist_catalogue(
        catalogue, user_text, embedder, shortlist_size,
        lambda sub: fits(qwn_prompt(engine, turns, sub, instructions, asked, context)))
    model_said, model_decision, model_question = None, None, None
    if policy != "evidence":
        model_said, model_decision, model_question = _ask_model(
            engine, turns, listed, instructions, asked, context, usage
        )
    evidence = _Evidence()
    if policy != "model":
        evidence = _gather_evidence(
            engine, turns, catalogue, instructions, draft_calls, embedder, context, check_relevance,
            relevance_threshold, usage, listed.names if report.applied else None, check, stage,
        )
    if report.applied:
        evidence.notes.insert(0, f"shortlist: {report.describe()}")
    decision, question, missing, notes = _combine(model_decision, model_question, evidence, asked, policy)
    without_check = None
    if evidence.checked is not None:  # what the embedder's rule alone gives on the same evidence
        alone = evidence.model_copy(update={"check_refused": False, "off_topic": evidence.embedder_refused})
        without_check = _combine(model_decision, model_question, alone, asked, policy)[0]
    status: Literal["ok", "parse_error"] = "ok" if decision is not None else "parse_error"
    return ClarifyResult(
        decision=decision or "continue",  # only with status="parse_error"; scorers must count it wrong
        question=question,
        missing_arguments=missing,
        model_said=model_said,
        model_decision=model_decision,
        evidence=evidence.notes + notes,
        relevant=evidence.relevant,
        draft=evidence.draft,
        status=status,
        shortlist=report if report.applied else None,
        decision_without_check=without_check,
        usage=usage,
        seconds=time.perf_counter() - started,
    )


def summary(result: ClarifyResult) -> dict[str, Any]:
    """A compact JSON-able view for logs and evaluation records."""
    return json.loads(result.model_dump_json(include={"decision", "question", "missing_arguments", "status", "evidence"}))
