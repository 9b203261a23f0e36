"""NLT (Natural Language Tools): tool selection written in natural language, plus two variants.

Modes
- "score" (the shipped default): the NLT prompt, the reasoning skipped; for each tool the line `ToolName -`
  is forced and the model's choice between " YES" and " NO" read as log-odds (the two candidates only,
  renormalised over {YES, NO}). Everything stable (system prompt, tools, request) comes first, the per-tool line
  last, so the engine's KV prefix reuse evaluates only a few tokens per tool. The log-odds are CALIBRATED
  against content-free requests ("", "N/A", "hello"; "Calibrate before use", Zhao et al., 2021): the mean
  log-odds the model gives each tool for those is subtracted. That baseline is computed once per engine,
  catalogue and context and cached. A lexical relevance prior (BM25 between the request and the tool's name and
  description) is added, and a tool is selected when the combined score passes a per-model threshold;
  selecting nothing is a real outcome. The weights and threshold are fitted per model on the dev split of
  tests/data/nlt only (data/nlt_rules.json; `prefcall eval nlt --split dev` reports the fit).
- "generate" (the paper): a five-part prompt (role, search purpose, tool list with "use it when"
  descriptions, output description, output example); the model writes `Thinking: ...`, then one
  `ToolName - YES|NO` line per tool, then `Assessment finished.`; a tolerant parser reads it. Unparsable
  output is status "parse_error" with no decisions, never a selection.
- "structured" (the baseline NLT is compared with): tools as JSON function definitions and a
  grammar-constrained `{"tools": [...names]}` answer.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from prefcall.engine.base import Embedder, Engine, Prompt, score_batch
from prefcall.errors import ValidationError
from prefcall.retrieval.hybrid import BM25Index
from prefcall.retrieval.text import sentences, split_identifier
from prefcall.retrieval.vectors import TOOL_VECTORS
from prefcall.schemas.model import Catalogue, Function
from prefcall.storage import fits
from prefcall.strategies.nlt_models import (
    DEFAULT_MODE,
    FITTED_LIST_SIZE,
    DecisionRule,
    Mode,
    NltResult,
    NltUsage,
    Status,
    ToolDecision,
    ToolSpec,
    as_tool_specs,
)
from prefcall.strategies.relevance import function_text
from prefcall.strategies.shortlist import WHOLE_UP_TO, Shortlist, fits_context, paged, shortlist


# Content-free requests for calibration: empty, a placeholder and a greeting (none of them needs a tool).
CONTENT_FREE_MESSAGES: tuple[str, ...] = ("", "N/A", "hello")
# Bump when the score-mode prompt changes: cached content-free baselines and fitted rules belong to a prompt.
SCORE_PROMPT_VERSION = "nlt-score-1"
RULES_FILE = "nlt_rules.json"
FINISH_MARKER = "Assessment finished."
_THINKING_PRIME = "Thinking:"
_SKIPPED_THINKING = "Thinking: I check each tool against the message.\n"


# -- prompts ----------------------------------------------------------------------------------
def _when_to_use(spec: ToolSpec) -> str:
    description = spec.description.strip().rstrip(".") or "the message asks for exactly what its name says"
    return f"- {spec.name}: use it when {description[0].lower() + description[1:]}."


def nlt_system_prompt(specs: Sequence[ToolSpec]) -> str:
    """The paper's five parts, in order. The example uses made-up tools so it never leaks an answer."""
    role = "You are a tool selection assistant. You decide which tools are needed to answer a user's message."
    purpose = (
        "Your task: read the message and decide, for every tool listed below, whether it must be used to answer it. "
        "Say YES only when the message asks for what the tool does. If no tool fits, say NO to every tool."
    )
    tool_list = "Tools:\n" + "\n".join(_when_to_use(s) for s in specs)
    output = (
        "Output format: first a line starting with 'Thinking:' with one short sentence of reasoning. "
        "Then one line per tool, in the order listed, written exactly as 'ToolName - YES' or 'ToolName - NO'. "
        f"End with the line '{FINISH_MARKER}'"
    )
    example = (
        "Example (for a message asking about the weather, with the tools weather_lookup and send_email):\n"
        "Thinking: The user wants the weather, so only the weather tool is needed.\n"
        "weather_lookup - YES\nsend_email - NO\n" + FINISH_MARKER + "\n"
        "Write the names of the tools listed above, not the example's."
    )
    return "\n\n".join([role, purpose, tool_list, output, example])


def _user_prompt(message: str, context: str | None, history: Sequence[tuple[str, str]] = ()) -> str:
    parts = [f"Context: {context.strip()}"] if context and context.strip() else []
    if history:
        parts.append("Conversation so far:\n" + "\n".join(f"{role}: {text.strip()}" for role, text in history))
    parts.append(f"Message: {message.strip()}")
    return "\n".join(parts)


def nlt_prompt(engine: Engine, specs: Sequence[ToolSpec], message: str, context: str | None = None,
               history: Sequence[tuple[str, str]] = ()) -> Prompt:
    return Prompt.chat(nlt_system_prompt(specs), _user_prompt(message, context, history))


def structured_prompt(engine: Engine, specs: Sequence[ToolSpec], message: str, context: str | None = None,
                      history: Sequence[tuple[str, str]] = ()) -> Prompt:
    definitions = [
        {"name": s.name, "description": s.description, "parameters": s.parameters or {"type": "object", "properties": {}}}
        for s in specs
    ]
    system = (
        "You are a function calling assistant. Available functions (JSON):\n"
        + json.dumps(definitions, ensure_ascii=False)
        + '\n\nAnswer with JSON {"tools": [...]} listing the names of the functions needed to answer the message; '
        "an empty list when none fits."
    )
    return Prompt.chat(system, _user_prompt(message, context, history))


def selection_schema(names: Sequence[str]) -> dict[str, Any]:
    # maxItems keeps a greedy model from repeating names until the token budget runs out.
    return {
        "type": "object",
        "properties": {"tools": {"type": "array", "items": {"enum": list(names)}, "maxItems": len(names)}},
        "required": ["tools"],
    }


# -- parsing ----------------------------------------------------------------------------------
_DECISION_RE = re.compile(
    r"^\s*(?:[-*•+]+|\d+[.)])?\s*[`*\"']*(?P<name>.+?)[`*\"']*\s*(?:[-–—:=>|]+|\s)\s*[`*\"']*"
    r"(?P<value>yes|no|true|false)\b[`*\"'.!]*\s*$",
    re.IGNORECASE,
)
_THINKING_RE = re.compile(r"^\s*[*_#]*\s*thinking[*_]*\s*:[*_]*\s*(?P<text>.*)$", re.IGNORECASE)


def _normalise(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _match_tool(written: str, names: Sequence[str]) -> str | None:
    written = written.strip()
    for candidate in (lambda n: n == written, lambda n: n.lower() == written.lower()):
        hit = next((n for n in names if candidate(n)), None)
        if hit:
            return hit
    key = _normalise(written)
    return next((n for n in names if _normalise(n) == key), None) if key else None


def parse_nlt_output(text: str, names: Sequence[str]) -> NltResult:
    """Read `Thinking:` and `Name - YES/NO` lines; missing, unknown and conflicting names are reported."""
    votes: dict[str, bool] = {}
    unknown: list[str] = []
    conflicts: list[str] = []
    reasoning: list[str] = []
    in_thinking = False
    for line in text.splitlines():
        thinking = _THINKING_RE.match(line)
        if thinking:
            reasoning.append(thinking.group("text").strip())
            in_thinking = True
            continue
        match = _DECISION_RE.match(line)
        if not match:
            if in_thinking and line.strip() and FINISH_MARKER.lower() not in line.lower():
                reasoning.append(line.strip())
            continue
        in_thinking = False
        name = _match_tool(match.group("name"), names)
        value = match.group("value").lower() in ("yes", "true")
        if name is None:
            unknown.append(match.group("name").strip())
        elif name in votes:
            if votes[name] != value and name not in conflicts:
                conflicts.append(name)  # the first decision stands; the conflict is reported
        else:
            votes[name] = value
    decisions = [ToolDecision(name=n, selected=votes[n]) for n in names if n in votes]
    missing = [n for n in names if n not in votes]
    status: Status = "parse_error" if not votes else "partial" if missing else "ok"
    return NltResult(
        mode="generate",
        status=status,
        decisions=decisions,
        selected=[d.name for d in decisions if d.selected],
        reasoning=" ".join(r for r in reasoning if r) or None,
        missing=missing,
        unknown=unknown,
        conflicts=conflicts,
        raw_text=text,
    )


# -- the three modes --------------------------------------------------------------------------
History = Sequence[tuple[str, str]]


def _generate_mode(engine: Engine, specs: list[ToolSpec], message: str, context: str | None,
                   history: History) -> NltResult:
    # The answer is primed with "Thinking:" so that small models start in the format instead of answering
    # the user's question directly.
    prompt = nlt_prompt(engine, specs, message, context, history).continued(_THINKING_PRIME)
    names = [s.name for s in specs]
    # Budget: reasoning plus one short line per tool; the finish marker stops generation early.
    budget = 64 + sum(engine.count_tokens(f"{s.name} - YES\n") for s in specs)
    check_listing_fits(engine, "generate", prompt, budget, len(specs))
    generation = engine.generate(prompt, max_tokens=budget, stop=(FINISH_MARKER,))
    text = generation.text
    if not text.lstrip().lower().startswith("thinking"):
        text = f"{_THINKING_PRIME} {text.lstrip()}"  # put back the primed prefix so the parser sees the reasoning
    result = parse_nlt_output(text, names)
    result.raw_text = generation.text
    result.usage.add(generation.usage, generation.completion_tokens)
    # Repair when nothing parsed, or when the model wrote names that are not tools instead of some that are.
    if result.status == "parse_error" or (result.unknown and result.missing):
        result = _repair(engine, prompt, generation.text, names, budget, result.usage)
    return result


def _repair(engine: Engine, prompt: Prompt, first_text: str, names: list[str], budget: int, usage: NltUsage) -> NltResult:
    """Second try when no tool line parsed (tiny models copy the example's tool names): keep the model's
    reasoning line and force the first listed tool's name, so the decision lines start on the real names."""
    reasoning = first_text.strip().splitlines()[0].strip() if first_text.strip() else "I check each tool."
    forced = f" {reasoning}\n{names[0]} -"
    generation = engine.generate(prompt.continued(forced), max_tokens=budget, stop=(FINISH_MARKER,))
    result = parse_nlt_output(f"{_THINKING_PRIME}{forced}{generation.text}", names)
    result.raw_text = f"{first_text}\n--- repaired ---\n{names[0]} -{generation.text}"
    result.repaired = True
    usage.add(generation.usage, generation.completion_tokens)
    result.usage = usage
    return result


# -- score mode: YES/NO log-odds, content-free calibration, lexical prior, fitted rule ------------
def _tool_line(spec: ToolSpec) -> str:
    return f"{spec.name} -"


def tool_yes_logodds(engine: Engine, specs: Sequence[ToolSpec], message: str, context: str | None,
                     usage: NltUsage, history: History = (), only: set[str] | None = None) -> dict[str, float]:
    """log P(" YES") - log P(" NO") per tool after the forced tool line: the choice restricted to the two
    answers (the softmax over {YES, NO} is the sigmoid of this). `only`: ask about just these tools (all listed)."""
    prefix = nlt_prompt(engine, specs, message, context, history).continued(_SKIPPED_THINKING)
    asked = [spec for spec in specs if only is None or spec.name in only]
    # Every tool's question in one batch: the prompts differ only in the tool line at their end.
    batch = score_batch(engine, [(prefix.continued(_tool_line(spec)), [" YES", " NO"]) for spec in asked])
    out: dict[str, float] = {}
    for spec, scores in zip(asked, batch):
        usage.add(scores.usage)
        out[spec.name] = scores.logprobs[0] - scores.logprobs[1]
    return out


def tool_yes_probabilities(engine: Engine, specs: Sequence[ToolSpec], message: str, context: str | None,
                           usage: NltUsage) -> dict[str, float]:
    """P(YES) per tool, renormalised over {YES, NO}."""
    return {n: sigmoid(v) for n, v in tool_yes_logodds(engine, specs, message, context, usage).items()}


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def logit(p: float) -> float:
    p = min(max(p, 1e-12), 1.0 - 1e-12)
    return math.log(p / (1.0 - p))


def calibrate_probability(p_yes: float, p_yes_content_free: float) -> float:
    """Divide by the content-free prior and renormalise (Zhao et al., 2021, two-class case); the same as
    subtracting the content-free log-odds."""
    eps = 1e-9
    yes = p_yes / max(p_yes_content_free, eps)
    no = (1.0 - p_yes) / max(1.0 - p_yes_content_free, eps)
    return yes / (yes + no)


def lexical_scores(specs: Sequence[ToolSpec], message: str, history: History = ()) -> dict[str, float]:
    """BM25 of the request against each tool's split name and description, within this catalogue. Earlier
    turns count at half weight, so "yes, please do that" inherits the topic of the question it answers. Past
    FITTED_LIST_SIZE tools, idf is read at that size (BM25Index.idf_documents): a word's weight depends on the share
    of tools holding it, so a rule fitted on ten-tool lists reads a 200-tool list's scores on the same scale."""
    index = BM25Index(idf_documents=FITTED_LIST_SIZE)
    index.add([f"{split_identifier(s.name)} {s.description}" for s in specs])
    scores = index.scores(message)
    if history:
        scores = scores + 0.5 * index.scores(" ".join(text for _, text in history[-2:]))
    return {s.name: float(v) for s, v in zip(specs, scores)}


def embedding_scores(embedder: Embedder, specs: Sequence[ToolSpec], message: str,
                     history: History = (), *, by_sentence: bool = False) -> dict[str, float]:
    """The embedder's cosine of the request with each tool's "humanised name: description" (the text the
    relevance rule embeds). Earlier turns count at half weight, as in `lexical_scores`. `by_sentence`
    (DecisionRule.sentence_cosine): a request of several sentences scores each tool by its best sentence."""
    tools = TOOL_VECTORS.get(embedder, [function_text(s.name, s.description) for s in specs])
    parts = sentences(message) if by_sentence else []
    requests = (parts if len(parts) > 1 else [message]) + \
        ([" ".join(text for _, text in history[-2:])] if history else [])
    vectors = np.asarray(embedder.embed(requests), dtype=np.float32)
    own = vectors[:-1] if history else vectors
    scores = (tools @ own.T).max(axis=1)
    if history:
        scores = scores + 0.5 * (tools @ vectors[-1])
    return {s.name: float(v) for s, v in zip(specs, scores)}


class ContentFreeCache:
    """Content-free log-odds per tool, per engine (weakly: an entry goes with its engine), catalogue, context
    and prompt version; least recently used catalogues are dropped past `size` per engine. Single tools' baselines
    (`tool_key`: shortlists of large lists) are kept apart, `tool_size` per engine."""

    def __init__(self, size: int = 64, tool_size: int = 4096) -> None:
        self.size = size
        self.tool_size = tool_size
        self._by_engine: dict[int, OrderedDict[str, dict[str, float]]] = {}

    @staticmethod
    def key(specs: Sequence[ToolSpec], context: str | None) -> str:
        payload = json.dumps([SCORE_PROMPT_VERSION, CONTENT_FREE_MESSAGES, [[s.name, s.description] for s in specs],
                              (context or "").strip()], ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    @staticmethod
    def tool_key(spec: ToolSpec, context: str | None) -> str:
        """One tool's baseline under any shortlist of a large list (`content_free_logodds(per_tool=True)`)."""
        return TOOL_PREFIX + ContentFreeCache.key([spec], context)

    def _entries(self, engine: Engine, key: str, create: bool) -> OrderedDict[str, dict[str, float]] | None:
        base = _base_engine(engine)
        slot = 2 * id(base) + key.startswith(TOOL_PREFIX)
        entries = self._by_engine.get(slot)
        if entries is None and create:
            try:
                weakref.finalize(base, self._by_engine.pop, slot, None)
            except TypeError:  # not weak-referenceable: never cache what could outlive its engine
                return None
            entries = self._by_engine.setdefault(slot, OrderedDict())
        return entries

    def get(self, engine: Engine, key: str) -> dict[str, float] | None:
        entries = self._entries(engine, key, create=False)
        if entries is None or key not in entries:
            return None
        entries.move_to_end(key)
        return dict(entries[key])

    def put(self, engine: Engine, key: str, value: dict[str, float]) -> None:
        entries = self._entries(engine, key, create=True)
        if entries is None:
            return
        entries[key] = dict(value)
        entries.move_to_end(key)
        while len(entries) > (self.tool_size if key.startswith(TOOL_PREFIX) else self.size):
            entries.popitem(last=False)

    def clear(self) -> None:
        self._by_engine.clear()


TOOL_PREFIX = "tool:"


def _base_engine(engine: Engine) -> Any:
    """A ScopedEngine wraps the shared engine; calibrations belong to the model, not to one caller."""
    return getattr(engine, "engine", engine)


# Floats only (no model is held): the baselines of the catalogues seen, so a catalogue pays for its
# content-free requests once per engine.
CONTENT_FREE_CACHE = ContentFreeCache()


def content_free_logodds(engine: Engine, specs: Sequence[ToolSpec], context: str | None, usage: NltUsage,
                         cache: ContentFreeCache | None = None, per_tool: bool = False) -> tuple[dict[str, float], bool]:
    """Mean YES/NO log-odds per tool over the content-free requests; (baseline, taken from the cache).

    `per_tool` (a shortlist of a large list, which changes with the request): each tool's baseline is kept on its
    own and reused under later shortlists, so only tools never calibrated before are asked about (under this
    shortlist's listing); a tool's content-free answer depends mostly on the tool, little on its neighbours."""
    cache = CONTENT_FREE_CACHE if cache is None else cache
    if per_tool:
        known: dict[str, float] = {}
        for spec in specs:
            found = cache.get(engine, cache.tool_key(spec, context))
            if found is not None:
                known[spec.name] = found[spec.name]
        missing = {s.name for s in specs} - set(known)
        if missing:
            runs = [tool_yes_logodds(engine, specs, m, context, usage, only=missing) for m in CONTENT_FREE_MESSAGES]
            for spec in specs:
                if spec.name in missing:
                    known[spec.name] = sum(r[spec.name] for r in runs) / len(runs)
                    cache.put(engine, cache.tool_key(spec, context), {spec.name: known[spec.name]})
        return {s.name: known[s.name] for s in specs}, not missing
    key = cache.key(specs, context)
    cached = cache.get(engine, key)
    if cached is not None:
        return cached, True
    runs = [tool_yes_logodds(engine, specs, m, context, usage) for m in CONTENT_FREE_MESSAGES]
    baseline = {s.name: sum(r[s.name] for r in runs) / len(runs) for s in specs}
    cache.put(engine, key, baseline)
    return baseline, False


@lru_cache(maxsize=1)
def _packaged_rules() -> dict[str, Any]:
    text = resources.files("prefcall").joinpath("data", RULES_FILE).read_text(encoding="utf-8")
    return {k: v for k, v in json.loads(text).items() if not k.startswith("_")}


def rule_for(engine: Engine, calibrated: bool = True, embedder: Embedder | None = None) -> DecisionRule:
    """The decision rule fitted for this model and embedder, by the model's fingerprint (storage.fits: the model
    file's hash, never its GGUF name) and the embedder's name: `<fingerprint>|<embedder>`, else the model's rule
    without the embedder (`<fingerprint>`), else a rule fitted for any model with this embedder (`*|<embedder>`:
    its model weight is 0), else the default. Rules are fitted with calibration on; without it, only the default
    applies."""
    if not calibrated:
        return DecisionRule(source="uncalibrated: raw P(YES) > 0.5")
    rules = _packaged_rules()
    fingerprint = fits.engine_fingerprint(engine) or ""
    keys = ([f"{fingerprint}|{embedder.name}"] if embedder is not None and fingerprint else []) + \
        ([fingerprint] if fingerprint else []) + ([f"*|{embedder.name}"] if embedder is not None else [])
    found = next((rules[k] for k in keys if k in rules), None)
    return DecisionRule.from_entry(found) if found else DecisionRule()


def baseline_rule(embedder: Embedder | None) -> DecisionRule | None:
    """The embedder with its fitted threshold, the baseline every selection report prints: the embedder-only rule
    `prefcall fit --nlt` fitted on the tune parts for this embedder (`baseline|<embedder>`); None without one."""
    found = _packaged_rules().get(f"baseline|{embedder.name}") if embedder is not None else None
    return DecisionRule.from_entry(found) if found else None


def _score_mode(engine: Engine, specs: list[ToolSpec], message: str, context: str | None, history: History,
                threshold: float | None, calibrate: bool, rule: DecisionRule | None,
                cache: ContentFreeCache | None, embedder: Embedder | None, all_evidence: bool,
                shortlist_size: int | None = None) -> NltResult:
    usage = NltUsage()
    # a rule may decide large lists by its own weights (DecisionRule.large)
    chosen = (rule or rule_for(engine, calibrate, embedder)).for_size(len(specs)).model_copy()
    if chosen.embedding_weight and embedder is None:
        raise ValidationError("this NLT rule weighs the embedder's similarity, but no embedder was given: pass one or "
                              "a rule without embedding_weight")
    if threshold is not None:
        chosen.threshold = logit(threshold)
        chosen.source += f"; threshold {threshold} given by the caller"
    # No work whose answer is thrown away: a rule that gives the model no weight never asks it (`all_evidence`
    # asks anyway, to record every kind of evidence for fitting a rule).
    asked = bool(chosen.model_weight) or all_evidence
    # A large tool list reaches the model shortlisted (strategies.shortlist): a tool left out is not selected.
    # Or, where the rule asks so, page by page (pages of similar tools, the same for every request).
    report = None
    groups = [specs]
    if asked:
        found = page_specs(engine, specs, message, context, history, embedder, chosen) \
            if chosen.paged and embedder is not None and len(specs) > WHOLE_UP_TO else None
        if found is None:
            scored, report = shortlist_specs(engine, specs, message, context, history, embedder, shortlist_size)
            groups = [scored]
        else:
            groups, report = found
    raw: dict[str, float] | None = None
    baseline: dict[str, float] = {}
    cached: bool | None = None
    if asked:
        raw = {}
        # a shortlist's tools are calibrated one by one (its listing changes per request); a page as a whole
        per_tool = report is not None and report.applied and not report.pages
        for group in groups:
            raw.update(tool_yes_logodds(engine, group, message, context, usage, history))
            if calibrate:
                part, hit = content_free_logodds(engine, group, context, usage, cache, per_tool)
                baseline.update(part)
                cached = hit if cached is None else cached and hit
    if not (asked and calibrate):
        baseline = {s.name: 0.0 for group in groups for s in group}
    lexical = lexical_scores(specs, message, history)
    cosines = embedding_scores(embedder, specs, message, history, by_sentence=chosen.sentence_cosine) \
        if embedder is not None and (chosen.embedding_weight or all_evidence) else None
    decisions = []
    for spec in specs:
        left_out = raw is not None and spec.name not in raw
        model = raw[spec.name] - baseline[spec.name] if raw is not None and not left_out else None
        cosine = cosines[spec.name] if cosines is not None else None
        score = chosen.score(model, lexical[spec.name], cosine)
        decisions.append(ToolDecision(name=spec.name, selected=False, score=score, model_logodds=model,
                                      raw_logodds=raw[spec.name] if raw is not None and not left_out else None,
                                      lexical=lexical[spec.name], cosine=cosine, shortlisted=not left_out))
    # The list's size sets the threshold (DecisionRule.size_slope), the whole list's, not the shortlist's (as the
    # large-list terms were fitted); a tool the shortlist left out is never selected.
    cut = chosen.threshold_for(len(specs))
    picked = chosen.selects({d.name: d.score for d in decisions if d.shortlisted}, size=len(specs)) \
        if decisions else set()
    for decision in decisions:
        decision.selected = decision.name in picked
        decision.probability = sigmoid(decision.score - cut + chosen.threshold)
    return NltResult(
        mode="score",
        status="ok",
        decisions=decisions,
        selected=[d.name for d in decisions if d.selected],
        threshold=sigmoid(chosen.threshold),
        rule=chosen,
        evidence=chosen.evidence,
        content_free=baseline if asked and calibrate else None,
        calibration_cached=cached,
        shortlist=report,
        usage=usage,
    )


def shortlist_specs(engine: Engine, specs: list[ToolSpec], message: str, context: str | None, history: History,
                    embedder: Embedder | None, size: int | None) -> tuple[list[ToolSpec], Shortlist]:
    """The tools whose YES/NO the model is asked for: a list of up to 32 whose prompt fits whole, else the shortlist
    of `size` (strategies.shortlist) ranked against the message and the last turns."""
    fits = fits_context(engine)
    longest = max(specs, key=lambda s: len(s.name))

    def fit(kept: list[ToolSpec]) -> bool:
        prompt = nlt_prompt(engine, kept, message, context, history).continued(_SKIPPED_THINKING + _tool_line(longest))
        return fits(prompt)

    query = " ".join([*(text for _, text in history[-2:]), message])
    return shortlist(specs, [function_text(s.name, s.description) for s in specs], query, embedder, size, fit,
                     names=[s.name for s in specs])


def page_specs(engine: Engine, specs: list[ToolSpec], message: str, context: str | None, history: History,
               embedder: Embedder, rule: DecisionRule) -> tuple[list[list[ToolSpec]], Shortlist] | None:
    """The pages of a large list the model is asked about (DecisionRule.paged; strategies.shortlist.paged, the
    pages' size and number the rule's, else those fitted for the embedder), each listed as a list of its own; None
    where a page's prompt does not fit the context (the caller shortlists)."""
    fits = fits_context(engine)

    def fit(page: list[ToolSpec]) -> bool:
        longest = max(page, key=lambda s: len(s.name))
        return fits(nlt_prompt(engine, page, message, context, history).continued(_SKIPPED_THINKING
                                                                                  + _tool_line(longest)))

    query = " ".join([*(text for _, text in history[-2:]), message])
    return paged(specs, [function_text(s.name, s.description) for s in specs], query, embedder, rule.page_size,
                 rule.page_seeds, fits=fit, names=[s.name for s in specs])


def check_listing_fits(engine: Engine, mode: str, prompt: Prompt, budget: int, tools: int) -> None:
    """Generate and structured modes list every tool in one prompt and write an answer for each: a list that does
    not fit is refused in one line, before the model is asked."""
    needed = engine.prompt_tokens(prompt) + budget
    if needed > engine.info.n_ctx:
        raise ValidationError(f"{mode} mode lists all {tools} tools in one prompt and needs {needed} tokens, but the "
                              f"context holds {engine.info.n_ctx}: use score mode (it shortlists large tool lists), "
                              "fewer tools or a larger PREFCALL_N_CTX")


def _structured_mode(engine: Engine, specs: list[ToolSpec], message: str, context: str | None,
                     history: History) -> NltResult:
    names = [s.name for s in specs]
    prompt = structured_prompt(engine, specs, message, context, history)
    budget = 16 + sum(engine.count_tokens(json.dumps(n)) + 2 for n in names)
    check_listing_fits(engine, "structured", prompt, budget, len(specs))
    generation = engine.generate(prompt, max_tokens=budget, json_schema=selection_schema(names))
    usage = NltUsage()
    usage.add(generation.usage, generation.completion_tokens)
    try:
        chosen = json.loads(generation.text)["tools"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return NltResult(mode="structured", status="parse_error", missing=names, raw_text=generation.text, usage=usage)
    picked = {n for n in chosen if n in names}
    decisions = [ToolDecision(name=n, selected=n in picked) for n in names]
    return NltResult(
        mode="structured",
        status="ok",
        decisions=decisions,
        selected=[n for n in names if n in picked],
        unknown=[str(n) for n in chosen if n not in names],
        raw_text=generation.text,
        usage=usage,
    )


def select_tools(
    engine: Engine,
    message: str,
    tools: Catalogue | Sequence[ToolSpec | Function | dict[str, Any]],
    *,
    mode: Mode = DEFAULT_MODE,
    context: str | None = None,
    history: History = (),
    threshold: float | None = None,
    calibrate: bool = True,
    rule: DecisionRule | None = None,
    cache: ContentFreeCache | None = None,
    embedder: Embedder | None = None,
    all_evidence: bool = False,
    shortlist_size: int | None = None,
) -> NltResult:
    """Decide YES/NO for every tool. A parse failure or missing tools show in `status`/`missing`.

    `context` describes the setting (a system description, or the earlier conversation as text); `history` is
    earlier turns as (role, text). Score mode (the default) selects a tool when sigmoid(score) > threshold,
    strictly; `threshold=None` uses the rule fitted for the model (`rule_for`), a number overrides only the
    threshold; `calibrate=False` skips the content-free baseline (and the fitted rule). With an `embedder`, the
    cosine of the request and each tool's text is evidence too (the rule fitted for this model and embedder
    weighs it); a rule with model weight 0 decides without calling the model unless `all_evidence`. When the model
    is asked about more than 32 tools (or about a list whose prompt outgrows the context), only a shortlist of
    `shortlist_size` tools (None: the size fitted for the embedder) retrieved for the message reaches it
    (`NltResult.shortlist`); generate and structured modes refuse a list their one prompt cannot hold."""
    if shortlist_size is not None and shortlist_size < 1:
        raise ValidationError(f"shortlist_size {shortlist_size} must be at least 1")
    specs = as_tool_specs(tools)
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise ValidationError(f"threshold {threshold} is outside [0, 1]: pass a probability")
    history = tuple((str(r), str(t)) for r, t in history)
    started = time.perf_counter()
    if mode == "generate":
        result = _generate_mode(engine, specs, message, context, history)
    elif mode == "score":
        result = _score_mode(engine, specs, message, context, history, threshold, calibrate, rule, cache, embedder,
                             all_evidence, shortlist_size)
    elif mode == "structured":
        result = _structured_mode(engine, specs, message, context, history)
    else:
        raise ValidationError(f"unknown NLT mode {mode!r}: use score, generate or structured")
    result.seconds = time.perf_counter() - started
    return result


# -- fitting a rule (on dev items only) ------------------------------------------------------
# tool -> (model_logodds, lexical, cosine); the model's or the embedder's part is None when it was not computed.
Evidence = dict[str, tuple[float | None, float, float | None]]

MODEL_WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0)
LEXICAL_WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)
EMBEDDING_WEIGHTS = (0.0, 2.0, 4.0, 8.0, 16.0, 32.0)


def fit_rule(examples: Sequence[tuple[Evidence, set[str]]], *, source: str = "fitted",
             model_weights: Sequence[float] = MODEL_WEIGHTS,
             lexical_weights: Sequence[float] = LEXICAL_WEIGHTS,
             embedding_weights: Sequence[float] = EMBEDDING_WEIGHTS) -> tuple[DecisionRule, float]:
    """The weights and threshold with the best exact-set accuracy on `examples` (tool evidence, gold set).

    A kind of evidence missing from any example (the model not asked, no embedder) gets weight 0 only.
    Thresholds are searched among midpoints between the observed scores; for each weight triple the threshold is
    the middle of the widest best-scoring run, and ties between triples go to fewer wrong decisions, then to the
    rule that does not call the model, then to the simpler rule (smaller weights). Returns the rule and its
    exact-set accuracy on the examples."""
    if not examples:
        raise ValidationError("no examples to fit an NLT rule on: evaluate the dev split in score mode first")
    has_model = all(m is not None for ev, _ in examples for m, _, _ in ev.values())
    has_cosine = all(c is not None for ev, _ in examples for _, _, c in ev.values())
    names = [sorted(ev) for ev, _ in examples]
    golds = [gold for _, gold in examples]
    columns = [np.array([[ev[n][0] or 0.0, ev[n][1], ev[n][2] or 0.0] for n in ns]).reshape(len(ns), 3)
               for (ev, _), ns in zip(examples, names)]
    best: tuple[tuple[float, ...], DecisionRule] | None = None
    for a in model_weights if has_model else (0.0,):
        for w in lexical_weights:
            for e in embedding_weights if has_cosine else (0.0,):
                if a == 0.0 and w == 0.0 and e == 0.0:
                    continue
                weights = np.array([a, w, e])
                scored = [c @ weights for c in columns]
                values = np.unique(np.concatenate(scored)) if scored else np.zeros(0)
                cuts = np.concatenate([[values[0] - 1.0], (values[1:] + values[:-1]) / 2, [values[-1] + 1.0]])
                exact = np.zeros(len(cuts))
                wrong = np.zeros(len(cuts))
                for sc, ns, gold in zip(scored, names, golds):
                    chosen = sc[None, :] > cuts[:, None]  # cuts x tools
                    truth = np.array([n in gold for n in ns])[None, :]
                    mismatch = (chosen != truth).sum(axis=1)
                    exact += mismatch == 0
                    wrong += mismatch
                top = max(zip(exact, -wrong))
                run = _widest_run([(x, -y) == top for x, y in zip(exact, wrong)])
                t = float(cuts[run[0] + (run[1] - run[0]) // 2])
                key = (float(top[0]), float(top[1]), float(a == 0.0), -(a + w + e))
                if best is None or key > best[0]:
                    best = (key, DecisionRule(model_weight=a, lexical_weight=w, embedding_weight=e,
                                              threshold=round(t, 4), source=source))
    assert best is not None
    return best[1], best[0][0] / len(examples)


# In units of the embedder's cosine weight (4 in the rules fitted so far: a slope of 0.25 moves the threshold by a
# sixteenth of a cosine per unit of ln(tools / 10)); a rule that weighs the model has larger scores, and its grid
# is the same one scaled by its weights (size_grid).
SIZE_SLOPES = (0.0, 0.25, 0.5, 0.75, 1.0)
MARGINS: tuple[float | None, ...] = (None, 0.5, 1.0, 1.5, 2.0, 3.0)
GRID_SCALES = (1.0, 2.0, 4.0)


def size_grid(rule: DecisionRule) -> tuple[list[float], list[float | None]]:
    """The size slopes and margins fit_size_terms tries for `rule`: the grids above, and for a rule that weighs
    the model (whose log-odds spread its scores wider than a cosine) the same grids scaled up to four times."""
    scales = GRID_SCALES if rule.model_weight else (1.0,)
    slopes = sorted({s * k for s in SIZE_SLOPES for k in scales})
    margins = [None, *sorted({m * k for m in MARGINS if m is not None for k in scales})]
    return slopes, margins


def fit_size_terms(examples: Sequence[tuple[Evidence, set[str]]], rule: DecisionRule,
                   sizes: Sequence[int | None] | None = None) -> tuple[DecisionRule, float]:
    """`rule` with the size slope and margin (DecisionRule) that give the best exact-set accuracy on `examples`
    (lists of every size), its weights and threshold kept; ties go to the smaller slope, then to no margin, then
    to the wider margin. `sizes`: each list's size where its evidence holds only the tools a shortlist let the
    model be asked about (None: the evidence's count). Returns the rule and its exact-set accuracy on the
    examples."""
    if not examples:
        raise ValidationError("no examples to fit the size terms on")
    if sizes is not None and len(sizes) != len(examples):
        raise ValidationError(f"{len(sizes)} list sizes for {len(examples)} examples: give one per example")
    scored = [({n: rule.score(*parts) for n, parts in rule.eligible(evidence).items()}, gold, size)
              for (evidence, gold), size in zip(examples, sizes or [None] * len(examples))]
    best: tuple[tuple[float, ...], DecisionRule] | None = None
    slopes, margins = size_grid(rule)
    for slope in slopes:
        for margin in margins:
            candidate = rule.model_copy(update={"size_slope": slope, "margin": margin})
            exact = sum(candidate.selects(scores, size) == gold for scores, gold, size in scored)
            key = (float(exact), -slope, float(margin is None), margin or 0.0)
            if best is None or key > best[0]:
                best = (key, candidate)
    assert best is not None
    return best[1], best[0][0] / len(examples)


def _widest_run(flags: Sequence[bool]) -> tuple[int, int]:
    """(start, end) inclusive of the longest run of True."""
    best, start = (0, 0), None
    for i, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            if i - 1 - start > best[1] - best[0] or not flags[best[0]]:
                best = (start, i - 1)
            start = None
    return best
