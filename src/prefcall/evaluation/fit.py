"""`prefcall fit`: fit the grounded filler's combination for one model file, reproducibly, on tuning items only.

What is fitted: for each argument kind (span, number, enum, boolean) the rule that turns a candidate's structural
evidence and the model's log-odds against null into a probability, sigmoid(a * evidence + b * odds + c), for span and
number values + d * length (the value's tokens beyond null's: a small model's log-odds fall with every token of a
value, so that "the drugstore on Elm" loses to "Elm"; strategies.grounding.fill.GroundingWeights). Steps:

1. Tuning items: the tune part of the frozen split (prefcall.evaluation.splits) of the shared NLSI dev file, of
   the bundled generated corpus (prefcall.evaluation.corpus) and of the phrase corpus, whose values are lowercase
   common-noun phrases (prefcall.evaluation.corpus_phrase; `--sources` chooses); `--subset N` takes every k-th
   item so that N remain.
2. Rows: each item runs through the shipped pipeline (`full` config, the gold applicable instructions, value
   memories from the other tuning items); a fixed half of the items (`without_memory`, by a hash of the item id)
   is parsed with no value memory at all, as a catalogue nobody demonstrated is (the generated corpus repeats its
   values across items, so with memory always present the weights learn that a value is one seen before and
   lowercase values unseen before fall under the prune); the filler hands every scored candidate to a recorder
   (`RankRow`); a candidate is right when the item's gold calls give that value to that argument of that
   function (values and names normalised as the NLSI scorer normalises them).
3. Slopes (a, b, and d for span and number): logistic regression (Newton's method, a small ridge) on the
   candidates the model scored.
   Bias c: the value on a 0.25 grid that gives the best argument-level F1 over the rows' decisions (per ranking:
   the most probable candidate is set when it reaches 0.5), the slopes fixed; ties go to the bias nearest the
   logistic one.
4. A kind is fitted only with at least `MIN_RIGHT` (300) right values among its rows; otherwise it keeps the
   shipped combination and the fit says why. The fit reports, per kind, the F1 of the shipped and the fitted
   combination on the same rows.

5. The required floor (`fit_required_floor`): the probability from which a required argument still unset takes its
   most probable free value instead of making the request `ask` (GroundingWeights.required_floor), chosen on
   FLOOR_GRID by argument-level F1 over the required arguments' rankings under the combination the fit keeps. A
   request about a catalogue nobody demonstrated (no value memory) scores new values low, the lowercase and
   common-noun ones most ("near the train station"); the items parsed without memory (step 2) carry them.

6. The phrase combination (`fit_phrase`): span values with no capitalised word ("the guest bathroom") may get a
   combination of their own (GroundingWeights.phrase), the span combination then refitted on the other span
   rows. It is kept only where, in PHRASE_FOLDS folds by item, the two fitted on the other folds give a better
   argument-level F1 on the held-out fold than the one span combination does, and each has MIN_RIGHT right
   values; the floor and the lead (step 5) are then read under both.

The result is stored per model fingerprint (storage.fits): the pipeline then uses it for that model file.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from prefcall.errors import ConfigError
from prefcall.evaluation import corpus, splits
from prefcall.evaluation.data import read_json, read_resumable, shared_data_dir
from prefcall.evaluation.metrics.calls import calls_from_any, load_aliases, normalise_arg, normalise_function, \
    normalise_value
from prefcall.schemas.importers import import_catalogue
from prefcall.schemas.model import Catalogue
from prefcall.strategies.grounding.evidence import FEATURES, Weights, fit_logistic
from prefcall.strategies.grounding.fill import TOP_K, GroundingWeights, RankRow, combine, is_phrase

KINDS = ("span", "number", "enum", "boolean")
LENGTH_KINDS = ("span", "number")  # kinds whose combination weighs the value's length in tokens
MIN_RIGHT = 300
BIAS_GRID = [round(-8.0 + 0.25 * i, 2) for i in range(49)]  # -8 .. 4
SOURCES = ("nlsi", "corpus", "phrase")  # the default (the embedded model's shipped fit; the 1.5B and 0.5B: nlsi,corpus)
# The bundled generated corpora a fit may read, with their catalogues (evaluation.corpus; evaluation.corpus_phrase:
# lowercase common-noun values).
CORPUS_SOURCES = {"corpus": ("items.json", "catalogue.json"),
                  "phrase": ("phrase_items.json", "phrase_catalogue.json")}
# Further tuning sources a fit may be asked to read (`--sources`): the bundled profile corpus and its prose part
# (evaluation.corpus_profile; their catalogue is profile_catalogue.json), each by the tune part of the split file.
PROFILE_SOURCES = {"profile": "profile_items.json", "profile_prose": "profile_prose_items.json"}
KNOWN_SOURCES = (*SOURCES, "phrase", *PROFILE_SOURCES)
MEMORY_DROPOUT = 0.5  # share of tuning items parsed without value memory (see `without_memory`)


@dataclass
class TuneItem:
    id: str
    source: str
    dialogue: str
    instructions: list[str]
    applicable: list[str]
    gold: list[str]
    catalogue: Catalogue


class LabelledRow(BaseModel):
    item: str
    group: int
    kind: str
    function: str
    argument: str
    value: Any
    evidence: float
    odds: float | None
    right: bool
    gold: bool  # the item's gold sets this argument of this function (a miss is a false negative)
    features: list[float] | None = None  # span and number candidates: evidence.FEATURES (the structure fit)
    ranked: bool = True  # False: structure kept it out of the scored top (a structure-fit row only)
    length: float | None = None  # the value's tokens beyond null's, where the model scored it (span and number)
    request: bool = True  # False: a standing instruction's fill (no required floor runs there)


class KindFit(BaseModel):
    kind: str
    rows: int
    scored: int  # rows the model scored (the logistic fit's data)
    right: int
    decisions: int
    fitted: bool
    why: str = ""
    shipped: list[float]
    combination: list[float]
    f1_shipped: float
    f1_fitted: float
    precision: float = 0.0
    recall: float = 0.0


class FitReport(BaseModel):
    model_name: str
    fingerprint: str | None
    items: dict[str, int]
    kinds: dict[str, KindFit] = Field(default_factory=dict)

    def grounding(self) -> dict[str, list[float]]:
        return {k: f.combination for k, f in self.kinds.items() if f.fitted}


# -- items -----------------------------------------------------------------------------------------------------


def source_path(source: str) -> Path:
    """The data file of a fit source (nlsi: the shared dev file; corpus, phrase: the bundled ones)."""
    if source == "nlsi":
        path = shared_data_dir() / "nlsi" / "dev.json"
        if not path.is_file():
            raise ConfigError(f"{path} is missing: fit beside ../shared/data (PREFCALL_SHARED_DATA) or pass "
                              "--sources corpus")
        return path
    if source in CORPUS_SOURCES:
        return corpus.CORPUS_DIR / CORPUS_SOURCES[source][0]
    if source in PROFILE_SOURCES:
        return corpus.CORPUS_DIR / PROFILE_SOURCES[source]
    raise ConfigError(f"unknown fit source {source!r}: use {', '.join(KNOWN_SOURCES)}")


def source_catalogue(source: str) -> Catalogue:
    """The catalogue a fit source's items are written against."""
    from prefcall.schemas.registry import builtin_catalogue

    if source == "nlsi":
        return builtin_catalogue("nlsi")
    if source in PROFILE_SOURCES:
        return import_catalogue(corpus.CORPUS_DIR / "profile_catalogue.json", name="profile")
    source_path(source)  # an unknown source's error
    return import_catalogue(corpus.CORPUS_DIR / CORPUS_SOURCES[source][1], name=source)


def value_memories(sources: Sequence[str]) -> Any:
    """A DemoStore of the sources' tune items, as the pipeline's value memories (an item leaves itself out when
    it is parsed: `collect` passes its id as excluded)."""
    from prefcall.storage.demos import DemoStore
    from prefcall.strategies.fcicl import load_nlsi_demonstrations

    store = DemoStore(None)
    for source in sources:
        path = source_path(source)
        keep = splits.tune_keys(path) or set()
        store.add_many([d for d in load_nlsi_demonstrations(path, source_catalogue(source).name) if d.id in keep])
    return store


def tune_items(sources: Sequence[str] = SOURCES, subset: int | None = None, part: str = "tune") -> list[TuneItem]:
    """The tune part of each source (`part`: another part, for a report), in file order; `subset` keeps every
    k-th item of each source."""
    items: list[TuneItem] = []
    for source in sources:
        path = source_path(source)
        catalogue = source_catalogue(source)
        found = splits.source_of(path)
        if found is None:
            raise ConfigError(f"{path} is not a source of the split file: rebuild it with `prefcall split build`")
        keep = found[1].part(part)
        rows = read_json(path)
        keys = splits.unique_ids(str(r["example_id"]) for r in rows)
        chosen = [TuneItem(key, source, r["user_utterance"], list(r.get("all_standing_instructions") or []),
                           list(r.get("applicable_standing_instructions") or []), [str(c) for c in r["api_calls"]],
                           catalogue)
                  for key, r in zip(keys, rows) if key in keep]
        if subset is not None and 0 < subset < len(chosen):
            step = len(chosen) / subset
            chosen = [chosen[int(i * step)] for i in range(subset)]
        items += chosen
    return items


# -- rows ------------------------------------------------------------------------------------------------------


def with_flags(items: Sequence[TuneItem]) -> list[TuneItem]:
    """The items whose gold calls a function with a boolean argument (the unnamed-flag fit's items)."""
    out = []
    for item in items:
        flagged = {normalise_function(f.name) for f in item.catalogue.functions
                   if any(spec.get("type") == "boolean" for spec in f.properties.values())}
        if any(normalise_function(c.name) in flagged for c in calls_from_any(item.gold)):
            out.append(item)
    return out


def gold_values(item: TuneItem, aliases: dict[str, str]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for call in calls_from_any(item.gold):
        function = normalise_function(call.name)
        for argument, value in call.arguments.items():
            out.setdefault((function, normalise_arg(argument, function)), set()).add(
                normalise_value(value, aliases))
    return out


def label(item: TuneItem, rows: Iterable[RankRow], aliases: dict[str, str]) -> list[LabelledRow]:
    gold = gold_values(item, aliases)
    out = []
    for row in rows:
        function = normalise_function(row.function)
        key = (function, normalise_arg(row.argument, function))
        values = gold.get(key, set())
        out.append(LabelledRow(item=item.id, group=row.group, kind=row.kind, function=row.function,
                               argument=row.argument, value=row.value, evidence=row.evidence, odds=row.odds,
                               right=normalise_value(row.value, aliases) in values, gold=bool(values),
                               features=row.features, ranked=row.ranked, length=row.length,
                               request=row.request))
    return out


def without_memory(item_id: str, share: float = MEMORY_DROPOUT) -> bool:
    """Is this tuning item parsed with no value memory? Fixed by a hash of its id (the same items every run)."""
    return hashlib.sha256(item_id.encode("utf-8")).digest()[0] < share * 256


def collect(pipeline: Any, items: Sequence[TuneItem], progress: Callable[[str], None] | None = None,
            done: dict[str, list[LabelledRow]] | None = None,
            sink: Callable[[str, list[LabelledRow]], None] | None = None) -> list[LabelledRow]:
    """Run each item through the `full` pipeline with a recorder on the filler; rows of items in `done` are
    reused (a resumed fit), new ones are handed to `sink` as each item finishes. An item that `without_memory`
    picks leaves out every demonstration, so it sees no value memory."""
    from prefcall.strategies.pipeline_models import get_config

    config = get_config("full")
    loc = shared_data_dir() / "taps" / "locations.json"
    aliases = load_aliases(loc if loc.exists() else None)
    out: list[LabelledRow] = []
    for item in items:
        if done is not None and item.id in done:
            out += done[item.id]
        else:
            recorded: list[RankRow] = []
            pipeline.record = recorded.append
            exclude = {item.id}
            if without_memory(item.id) and pipeline.demos is not None:
                exclude |= {d.id for d in pipeline.demos.all(item.catalogue.name)}
            try:
                pipeline.parse(item.dialogue, item.instructions, item.catalogue, config, applicable=item.applicable,
                               exclude_demo_ids=exclude)
            finally:
                pipeline.record = None
            rows = label(item, recorded, aliases)
            out += rows
            if sink is not None:
                sink(item.id, rows)
        if progress is not None:
            progress(item.id)
    return out


# -- fitting ---------------------------------------------------------------------------------------------------


def logistic(x: np.ndarray, y: np.ndarray, ridge: float = 1e-2, steps: int = 50) -> np.ndarray:
    """Weights (slopes..., intercept) of a logistic regression by Newton's method with a small ridge on the
    slopes (separable data stays finite)."""
    design = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(design.shape[1])
    penalty = np.diag([ridge] * x.shape[1] + [0.0])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(design @ w, -40, 40)))
        gradient = design.T @ (p - y) + penalty @ w
        hessian = design.T @ (design * (p * (1 - p))[:, None]) + penalty + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    return w


def decide(rows: Sequence[LabelledRow], combination: Sequence[float],
           phrase: Sequence[float] | None = None) -> tuple[int, int, int]:
    """(tp, fp, fn) over the rankings: the most probable candidate of each is set when it reaches 0.5 (a pruned
    or unscored candidate counts with odds 0 and length 0, as the filler treats it). `combination`: (a, b, c) or
    (a, b, c, length weight), as fill.combine reads it; `phrase`: the one a span row with no capitalised word
    is scored by instead (GroundingWeights.phrase), None for none."""
    groups: dict[tuple[str, int], list[LabelledRow]] = {}
    for row in rows:  # group numbers count within one process: a resumed fit's rows come from two
        groups.setdefault((row.item, row.group), []).append(row)
    tp = fp = fn = 0
    for members in groups.values():
        scored = [(probability(phrase if phrase is not None and phrase_row(r) else combination, r), r)
                  for r in members]
        best_p, best = max(scored, key=lambda t: t[0])
        if best_p >= 0.5:
            if best.right:
                tp += 1
            else:
                fp += 1
                fn += int(best.gold)
        elif members[0].gold:
            fn += 1
    return tp, fp, fn


def probability(combination: Sequence[float], row: LabelledRow) -> float:
    """The row's probability under `combination`, as the filler computes it (a candidate the model did not score
    counts with odds 0 and length 0)."""
    return 1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, combine(combination, row.evidence, row.odds or 0.0,
                                                                row.length or 0.0)))))


def f1(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def phrase_row(row: LabelledRow) -> bool:
    """A span row with no capitalised word: what GroundingWeights.phrase scores (fill.is_phrase)."""
    return row.kind == "span" and row.features is not None and is_phrase(row.features)


def _combination(rows: Sequence[LabelledRow], lengths: bool) -> tuple[list[float], list[float], float]:
    """(slopes, length weight or nothing, intercept) of the logistic fit on the rows the model scored."""
    scored = [r for r in rows if r.odds is not None]
    x = np.array([[r.evidence, r.odds, *([r.length] if lengths else [])] for r in scored], dtype=np.float64)
    y = np.array([float(r.right) for r in scored])
    a, b, *rest, intercept = (float(v) for v in logistic(x, y))
    return [round(a, 3), round(b, 3)], [round(v, 3) for v in rest], intercept


def _best_bias(score: Callable[[float], float], intercept: float) -> float:
    """The bias on BIAS_GRID with the best score (ties: the one nearest the logistic intercept)."""
    return max(BIAS_GRID, key=lambda c: (score(c), -abs(c - intercept)))


def _fit_combination(rows: Sequence[LabelledRow], lengths: bool) -> list[float]:
    """A kind's combination on these rows (step 3): the logistic slopes, then the bias by F1 over their rankings."""
    slopes, tail, intercept = _combination(rows, lengths)
    return [*slopes, _best_bias(lambda c: f1(*decide(rows, (*slopes, c, *tail)))[2], intercept), *tail]


def fit_kind(kind: str, rows: Sequence[LabelledRow], shipped: Sequence[float], min_right: int = MIN_RIGHT,
             shipped_phrase: Sequence[float] | None = None) -> KindFit:
    """`shipped_phrase`: the shipped rule's phrase combination (span rows with no capitals), None for none."""
    mine = [r for r in rows if r.kind == kind and r.ranked]
    scored = [r for r in mine if r.odds is not None]
    right = sum(r.right for r in mine)
    decisions = len({(r.item, r.group) for r in mine})
    base = f1(*decide(mine, shipped, shipped_phrase if kind == "span" else None))[2] if mine else 0.0
    common = dict(kind=kind, rows=len(mine), scored=len(scored), right=right, decisions=decisions,
                  shipped=list(shipped), f1_shipped=round(base, 4))
    positives = sum(r.right for r in scored)
    if right < min_right or positives < 2 or positives == len(scored):
        return KindFit(**common, fitted=False, combination=list(shipped), f1_fitted=round(base, 4),
                       why=f"{right} right values (needs {min_right}): the shipped combination stays")
    # Span and number values also weigh their length in tokens (fill.GroundingWeights.span), where every scored
    # row has it (rows collected before the length was recorded fit the three-number combination).
    lengths = kind in LENGTH_KINDS and all(r.length is not None for r in scored)
    combination = _fit_combination(mine, lengths)
    precision, recall, score = f1(*decide(mine, combination))
    return KindFit(**common, fitted=True, combination=combination, f1_fitted=round(score, 4),
                   precision=round(precision, 4), recall=round(recall, 4))


def fit(rows: Sequence[LabelledRow], weights: GroundingWeights, min_right: int = MIN_RIGHT) -> dict[str, KindFit]:
    shipped = {"span": weights.span, "number": weights.number or weights.span, "enum": weights.enum,
               "boolean": weights.boolean}
    return {kind: fit_kind(kind, rows, shipped[kind], min_right, weights.phrase)
            for kind in KINDS if any(r.kind == kind for r in rows)}


PHRASE_FOLDS = 5  # folds by item of the held-out check that decides whether a phrase combination is kept


class PhraseFit(BaseModel):
    """Whether span values with no capitalised word get a combination of their own (GroundingWeights.phrase), the
    other span values then the span combination refitted without them. Kept only where, held out (PHRASE_FOLDS
    folds by item, each fitted on the others), the two together give a better argument-level F1 over the span
    rankings than the one span combination fitted on all of them, and each has at least MIN_RIGHT right values."""

    rows: int  # ranked span rows with no capitalised word
    right: int  # of them, right
    rest_right: int  # right span rows with a capital
    fitted: bool = False
    kept: bool = False
    why: str = ""
    span: list[float] = Field(default_factory=list)  # the span combination beside it (fitted on the other rows)
    phrase: list[float] = Field(default_factory=list)
    f1_shared_held_out: float = 0.0  # one span combination, fitted fold by fold
    f1_split_held_out: float = 0.0  # the two, fitted fold by fold
    f1_shared: float = 0.0  # in sample, on every row
    f1_split: float = 0.0


def _split_span(rows: Sequence[LabelledRow], lengths: bool) -> tuple[list[float], list[float]]:
    """(span, phrase): each one's slopes on its own rows; the span bias by the F1 over the other rows, then the
    phrase bias by the F1 of the two together over every ranking."""
    low = [r for r in rows if phrase_row(r)]
    span = _fit_combination([r for r in rows if not phrase_row(r)], lengths)
    slopes, tail, intercept = _combination(low, lengths)
    bias = _best_bias(lambda c: f1(*decide(rows, span, (*slopes, c, *tail)))[2], intercept)
    return span, [*slopes, bias, *tail]


def fit_phrase(rows: Sequence[LabelledRow], min_right: int = MIN_RIGHT) -> PhraseFit:
    span_rows = [r for r in rows if r.kind == "span" and r.ranked]
    low = [r for r in span_rows if phrase_row(r)]
    right, rest_right = sum(r.right for r in low), sum(r.right for r in span_rows if not phrase_row(r))
    common = dict(rows=len(low), right=right, rest_right=rest_right)
    if min(right, rest_right) < min_right:
        return PhraseFit(**common, why=f"{right} right lowercase and {rest_right} other right span values (needs "
                                       f"{min_right} each): the one span combination stays")
    lengths = all(r.length is not None for r in span_rows if r.odds is not None)
    items = sorted({r.item for r in span_rows}, key=lambda i: hashlib.sha256(i.encode()).hexdigest())
    fold = {item: k % PHRASE_FOLDS for k, item in enumerate(items)}
    shared_total, split_total = [0, 0, 0], [0, 0, 0]
    for k in range(PHRASE_FOLDS):
        train = [r for r in span_rows if fold[r.item] != k]
        test = [r for r in span_rows if fold[r.item] == k]
        shared_counts = decide(test, _fit_combination(train, lengths))
        split_counts = decide(test, *_split_span(train, lengths))
        shared_total = [a + b for a, b in zip(shared_total, shared_counts)]
        split_total = [a + b for a, b in zip(split_total, split_counts)]
    held_shared, held_split = f1(*shared_total)[2], f1(*split_total)[2]
    span, phrase = _split_span(span_rows, lengths)
    kept = held_split > held_shared
    return PhraseFit(**common, fitted=True, kept=kept, span=span, phrase=phrase,
                     why="" if kept else "held out, the two combinations do not beat the one: it stays",
                     f1_shared_held_out=round(held_shared, 4), f1_split_held_out=round(held_split, 4),
                     f1_shared=round(f1(*decide(span_rows, _fit_combination(span_rows, lengths)))[2], 4),
                     f1_split=round(f1(*decide(span_rows, span, phrase))[2], 4))


FLOOR_GRID = (0.5, 0.4, 0.3, 0.2, 0.15, 0.1, 0.07, 0.05, 0.03, 0.02)  # 0.5: no floor (a value must reach 0.5)


class FloorFit(BaseModel):
    """The probability at which a required argument still unset takes its best value (GroundingWeights.
    required_floor): the floor on FLOOR_GRID with the best argument-level F1 over the required span and number
    arguments' rankings, under the combination the fit keeps (ties: the higher floor); None where 0.5 wins."""

    rankings: int
    right: int  # rankings whose gold sets the argument
    floor: float | None = None
    f1_without: float = 0.0
    f1_with: float = 0.0
    by_floor: dict[str, float] = Field(default_factory=dict)


def fit_required_floor(rows: Sequence[LabelledRow], combination: dict[str, Sequence[float]],
                       required: set[tuple[str, str]]) -> FloorFit:
    """`combination`: per kind (span, number, and phrase where the filler has one) the combination the filler will
    use; `required`: (function, argument) pairs the catalogues require."""
    mine = [r for r in rows if r.kind in ("span", "number") and r.ranked and (r.function, r.argument) in required]
    by_kind: dict[str, list[LabelledRow]] = {}
    for r in mine:
        by_kind.setdefault(r.kind, []).append(r)

    def shifted(combination: Sequence[float], shift: float) -> tuple[float, ...]:
        a, b, c, *rest = combination
        return (a, b, c + shift, *rest)

    phrase = combination.get("phrase")
    scores = {}
    for floor in FLOOR_GRID:
        shift = -math.log(floor / (1 - floor))  # the bias that moves the floor's log-odds to 0.5's
        tp = fp = fn = 0
        for kind, members in by_kind.items():
            t, f, n = decide(members, shifted(combination[kind], shift),
                             shifted(phrase, shift) if phrase is not None and kind == "span" else None)
            tp, fp, fn = tp + t, fp + f, fn + n
        scores[floor] = f1(tp, fp, fn)[2]
    best = max(FLOOR_GRID, key=lambda fl: (round(scores[fl], 4), fl))
    return FloorFit(rankings=len({(r.item, r.group) for r in mine}), right=len({(r.item, r.group) for r in mine
                                                                                 if r.gold}),
                    floor=None if best == 0.5 else best, f1_without=round(scores[0.5], 4),
                    f1_with=round(scores[best], 4), by_floor={str(k): round(v, 4) for k, v in scores.items()})


LEAD_GRID = tuple(round(0.5 * i, 1) for i in range(2, 41))  # 1 .. 20 nats of the model's log-probability
LEAD_MIN_RIGHT = 5  # right values the rule must set on the tune rows to be kept at all
LEAD_PRECISION = 0.8  # and, at its lead, at least this share of what it sets right


class LeadFit(BaseModel):
    """The lead by which a required span argument that no value reached the floor for takes the scored candidate
    the model likes best (GroundingWeights.required_lead): the lead on LEAD_GRID that sets the most right values
    minus wrong ones with precision >= LEAD_PRECISION and at least LEAD_MIN_RIGHT right (ties: the larger lead);
    None when none does. Read on the request's fills only (an instruction's fill has no required rule)."""

    rankings: int  # required span rankings of a request that no value decided (under 0.5 and under the floor),
    # with at least two candidates the model scored (a lead needs a second)
    right: int  # of them, where the gold sets the argument
    lead: float | None = None
    set_right: int = 0
    set_wrong: int = 0
    by_lead: dict[str, list[int]] = Field(default_factory=dict)  # lead -> [set right, set wrong]


def fit_required_lead(rows: Sequence[LabelledRow], combination: Sequence[float], required: set[tuple[str, str]],
                      floor: float | None, phrase: Sequence[float] | None = None) -> LeadFit:
    """`combination`: the span combination the filler will use (`phrase`: its phrase combination, None for none);
    `floor`: the required floor it will use (None: 0.5); `required`: (function, argument) pairs the catalogues
    require."""
    groups: dict[tuple[str, int], list[LabelledRow]] = {}
    for r in rows:
        if r.kind == "span" and r.request and r.ranked and (r.function, r.argument) in required:
            groups.setdefault((r.item, r.group), []).append(r)
    cut = 0.5 if floor is None else floor
    open_: list[tuple[float, LabelledRow]] = []  # (lead, the model's best) of each ranking left open
    gold = 0
    for members in groups.values():
        if max(probability(phrase if phrase is not None and phrase_row(r) else combination, r)
               for r in members) >= cut:
            continue  # decided before the lead is read
        scored = sorted((r for r in members if r.odds is not None), key=lambda r: -(r.odds or 0.0))
        if len(scored) >= 2:
            open_.append(((scored[0].odds or 0.0) - (scored[1].odds or 0.0), scored[0]))
            gold += int(members[0].gold)
    counts = {lead: [sum(r.right for m, r in open_ if m >= lead), sum(not r.right for m, r in open_ if m >= lead)]
              for lead in LEAD_GRID}
    good = [lead for lead, (right, wrong) in counts.items()
            if right >= LEAD_MIN_RIGHT and right >= LEAD_PRECISION * (right + wrong)]
    best = max(good, key=lambda lead: (counts[lead][0] - counts[lead][1], lead)) if good else None
    return LeadFit(rankings=len(open_), right=gold, lead=best,
                   set_right=counts[best][0] if best is not None else 0,
                   set_wrong=counts[best][1] if best is not None else 0,
                   by_lead={str(k): v for k, v in counts.items()})


# -- the structure weights -------------------------------------------------------------------------------------


FLAG_GRID = [round(0.25 * i, 2) for i in range(41)]  # 0 .. 10 nats over null
FLAG_MIN_RIGHT = 3  # flags the text does not name that the gold sets: a rule needs at least these to be read
FLAG_PRECISION = 0.8  # and, at its threshold, at least this share of what it sets right


class FlagFit(BaseModel):
    """Whether, and from what odds over null, the model reads a flag the text does not name as true
    (strategies.grounding.fill.GroundingWeights.unnamed_flag): the threshold on the grid that sets the most right
    flags minus wrong ones with precision >= FLAG_PRECISION (ties: the higher threshold); None when none does."""

    rows: int  # unnamed flags scored (their true value)
    right: int  # of them, set true by the gold
    threshold: float | None = None
    set_right: int = 0
    set_wrong: int = 0
    why: str = ""

    @property
    def combination(self) -> list[float] | None:
        return None if self.threshold is None else [1.0, -self.threshold]


def fit_unnamed_flag(rows: Sequence[LabelledRow]) -> FlagFit:
    """The unnamed-flag rule from the true value's rows of kind "unnamed_flag" (the model's odds of true over null)."""
    mine = [r for r in rows if r.kind == "unnamed_flag" and r.value is True and r.odds is not None]
    right = sum(r.right for r in mine)
    result = FlagFit(rows=len(mine), right=right)
    if right < FLAG_MIN_RIGHT:
        return result.model_copy(update={"why": f"{right} right values (needs {FLAG_MIN_RIGHT})"})
    best: tuple[int, float, int, int] | None = None
    for threshold in FLAG_GRID:
        hit = sum(r.right for r in mine if r.odds > threshold)  # type: ignore[operator]
        miss = sum(not r.right for r in mine if r.odds > threshold)  # type: ignore[operator]
        if hit == 0 or hit / (hit + miss) < FLAG_PRECISION:
            continue
        if best is None or hit - miss >= best[0]:
            best = (hit - miss, threshold, hit, miss)
    if best is None or best[0] <= 0:
        return result.model_copy(update={"why": f"no threshold sets flags with precision >= {FLAG_PRECISION}"})
    return result.model_copy(update={"threshold": best[1], "set_right": best[2], "set_wrong": best[3]})


class StructureFit(BaseModel):
    """The structure weights (evidence.Weights over evidence.FEATURES) fitted on every span and number candidate,
    and how often each set of weights puts a right value first and in the top the model scores (TOP_K), over the
    rankings that hold one."""

    rows: int
    right: int
    rankings: int
    fitted: bool
    why: str = ""
    top1_shipped: float
    top1_fitted: float
    topk_shipped: float
    topk_fitted: float
    weights: dict[str, Any]


def weights_dict(weights: Weights) -> dict[str, Any]:
    return {"features": list(FEATURES), "mean": list(weights.mean), "scale": list(weights.scale),
            "weights": list(weights.weights), "bias": weights.bias}


def _ranking_hits(groups: Sequence[list[int]], right: np.ndarray, logits: np.ndarray) -> tuple[float, float]:
    """(share of rankings whose best candidate is right, share with a right one among the TOP_K best)."""
    top1 = topk = 0
    for members in groups:
        order = sorted(members, key=lambda i: -logits[i])
        top1 += bool(right[order[0]])
        topk += any(right[i] for i in order[:TOP_K])
    return (top1 / len(groups), topk / len(groups)) if groups else (0.0, 0.0)


def fit_structure(rows: Sequence[LabelledRow], shipped: Weights, min_right: int = MIN_RIGHT) -> StructureFit:
    """Logistic weights (evidence.fit_logistic: standardised features, right values up-weighted) on the span and
    number candidates' features; fitted only with at least `min_right` right values."""
    mine = [r for r in rows if r.kind in ("span", "number") and r.features is not None]
    x = np.array([r.features for r in mine], dtype=np.float32).reshape(len(mine), len(FEATURES))
    y = np.array([float(r.right) for r in mine])
    by_group: dict[int, list[int]] = {}
    for i, r in enumerate(mine):
        by_group.setdefault(r.group, []).append(i)
    groups = [g for g in by_group.values() if any(y[i] for i in g)]
    top1_s, topk_s = _ranking_hits(groups, y, shipped.logits(x))
    right = int(y.sum())
    common = dict(rows=len(mine), right=right, rankings=len(groups), top1_shipped=round(top1_s, 4),
                  topk_shipped=round(topk_s, 4))
    if right < min_right or right == len(mine):
        return StructureFit(**common, fitted=False, why=f"{right} right values (needs {min_right}): the shipped "
                            "structure weights stay", top1_fitted=round(top1_s, 4), topk_fitted=round(topk_s, 4),
                            weights=weights_dict(shipped))
    fitted = fit_logistic(x, y)
    top1_f, topk_f = _ranking_hits(groups, y, fitted.logits(x))
    return StructureFit(**common, fitted=True, top1_fitted=round(top1_f, 4), topk_fitted=round(topk_f, 4),
                        weights=weights_dict(fitted))


def structure_file(fit: StructureFit, base: dict[str, Any], command: str, commit: str,
                   items: dict[str, int]) -> dict[str, Any]:
    """The shipped grounding.json with the structure weights replaced by `fit`'s, and where they came from."""
    source = dict(base.get("source", {}))
    source["structure"] = {"command": command, "commit": commit, "date": dt.date.today().isoformat(),
                           "data": "tune split of prefcall/data/splits.json", "items": items,
                           **fit.model_dump(exclude={"weights"})}
    return {**base, "source": source, "structure": fit.weights}


def read_rows(path: Path) -> dict[str, list[LabelledRow]]:
    """Rows stored by an earlier (maybe interrupted) fit, by item; a torn last line is dropped."""
    def parse(line: str) -> tuple[str, list[LabelledRow]]:
        record = json.loads(line)
        return record["item"], [LabelledRow.model_validate(r) for r in record["rows"]]

    return dict(read_resumable(path, parse))


def source_note(report: FitReport, command: str, commit: str) -> dict[str, Any]:
    return {"command": command, "commit": commit, "date": dt.date.today().isoformat(), "items": report.items,
            "data": "tune split of prefcall/data/splits.json",
            "kinds": {k: f.model_dump(exclude={"kind"}) for k, f in report.kinds.items()}}
