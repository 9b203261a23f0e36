"""`prefcall fit --selection`: fit stage 1's rule (which function a request is for) for one model, on tuning items.

Stage 1 scores every function of the catalogue with evidence of several kinds (strategies.fnctod.SELECTION_FEATURES):
the model's calibrated log P(name), the domain prior of the hand-set rule, the request's cosine to each function's
"name: description", and the catalogue words the request contains, split into name words, description words and
parameter or enum words. The hand-set rule adds the first two: a name word in the request ("order" in "play it in
order", "bank" in "won't break the bank", "call" in "remind me to call my mother") makes its function the domain
outright. The fitted rule weighs all six.

Steps:
1. Items: the tune part of the frozen split of each source (as `prefcall fit`: NLSI dev and the bundled corpus);
   only stage 1 runs (one scoring prompt per item after the catalogue's calibration), with no "None" candidate.
2. Rows: per item, every function's features and the gold first function (names normalised as the scorer does).
3. Profile dropout: a fixed share of the items (`PROFILE_DROPOUT`, by a hash of the item id) is seen a second
   time as from a user whose standing instructions do not speak of the requested function (`uncovered`: its
   "profile" feature off, as many other functions' on). NLSI builds every profile around the request's function
   (all 244 tune items; 171 of the corpus's 208), so without it the rule learns that the profile names the
   function: with the profile off for the asked function, the embedded model's earlier rule picked NLSI's tune
   functions 0.79 of the time against 0.95 ("Remind me to call my mother" went to send_email for a user with an
   email instruction). A user writes instructions about some of their tools and asks for all of them. The
   feature itself is weighed by how few functions the profile speaks of (fnctod.profile_value, log(N / k)): the
   tune profiles speak of 6 of 17 functions (NLSI) or 4 of 16 (corpus), a user with an instruction per tool of
   most of them, where being spoken of says little (forty-ninth session).
4. Fit: a conditional logit (softmax over the item's functions, Newton's method, a small ridge). The rule is kept
   only when its top-1 accuracy on the rows is at least the hand-set rule's, and when a rule fitted on one source
   alone is at least as accurate as the hand-set rule on each other source (it travels to data it was not fitted
   on); the report gives the accuracies per source and those transfers, on the rows as collected and on them with
   every profile uncovered (`accuracy_uncovered`, other draws than the fit's).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from prefcall.evaluation.fit import TuneItem
from prefcall.evaluation.metrics.calls import calls_from_any, normalise_function
from prefcall.strategies.fnctod import (HAND_RULE, NONE_CANDIDATE, SELECTION_FEATURES, FunctionScores, SelectionRule,
                                       profile_value, smoothed)

RIDGE = 1e-2
# Share of the tuning items also seen with their profile uncovered (step 3). Chosen on the embedded model's tune
# rows (NLSI and corpus, 452; forty-third session, `fit(rows, share)`): top-1 on the rows as collected / with every
# profile uncovered is 0.962 / 0.843 with none, 0.962 / 0.898 at 0.125, 0.958 / 0.920 at 0.25, 0.951 / 0.923 at 0.5
# and 0.949 / 0.931 at 1.0: a quarter buys most of the robustness for two of the 452 rows.
PROFILE_DROPOUT = 0.25
PROFILE = SELECTION_FEATURES.index("profile")


class SelectionRow(BaseModel):
    item: str
    source: str
    names: list[str]
    features: list[list[float]]
    gold: int  # index into names
    # the model's raw log P(name) and the content-free scores before smoothing: the "model" feature under any floor
    raw: list[float] | None = None
    content_free: list[float] | None = None


class SelectionFit(BaseModel):
    rows: int
    fitted: bool
    why: str = ""
    weights: list[float]
    accuracy_hand: dict[str, float]  # per source and "all"
    accuracy_fitted: dict[str, float]
    transfer: dict[str, float]  # "A->B": fitted on source A alone, top-1 on source B
    # the same, every row's profile uncovered (`uncovered`): a user whose instructions are about other functions
    accuracy_uncovered_hand: dict[str, float] = {}
    accuracy_uncovered_fitted: dict[str, float] = {}
    profile_dropout: float = 0.0


def gold_function(item: TuneItem) -> str | None:
    calls = calls_from_any(item.gold)
    return normalise_function(calls[0].name) if calls else None


def collect(pipeline: Any, items: Sequence[TuneItem], progress: Callable[[str], None] | None = None,
            done: dict[str, SelectionRow | None] | None = None,
            sink: Callable[[str, SelectionRow | None], None] | None = None) -> list[SelectionRow]:
    """Stage 1 on each item (the pipeline's `full` selection: calibrated scores and the domain evidence). Items in
    `done` (a resumed fit: their row, or None where the item gave none) are not run again; each new item's row is
    handed to `sink`."""
    from prefcall.strategies.pipeline_models import get_config

    config = get_config("full")
    rows = []
    for item in items:
        if done is not None and item.id in done:
            if (kept := done[item.id]) is not None:
                rows.append(kept)
            if progress is not None:
                progress(item.id)
            continue
        row = None
        output = pipeline.stage_one(item.dialogue, item.catalogue, config, profile=item.instructions)
        scores = output.usage
        gold = gold_function(item)
        if isinstance(scores, FunctionScores) and gold is not None:
            names = [normalise_function(n) for n in scores.names]
            if gold in names:
                row = SelectionRow(item=item.id, source=item.source, names=scores.names, features=scores.features,
                                   gold=names.index(gold), raw=scores.raw, content_free=scores.content_free or None)
                rows.append(row)
        if sink is not None:
            sink(item.id, row)
        if progress is not None:
            progress(item.id)
    return rows


def read_rows(path: Path) -> dict[str, SelectionRow | None]:
    """The rows a `collect` run wrote (one JSON line per item: its id and its row or null), by item id."""
    if not path.exists():
        return {}
    out: dict[str, SelectionRow | None] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            out[record["item"]] = SelectionRow(**record["row"]) if record.get("row") else None
    return out


def best_index(row: SelectionRow, rule: SelectionRule) -> int:
    """The function the rule puts first on this row's evidence (never the "None" candidate)."""
    return max((i for i, name in enumerate(row.names) if name != NONE_CANDIDATE),
               key=lambda i: rule.score(row.features[i]))


def accuracy(rows: Sequence[SelectionRow], rule: SelectionRule) -> float:
    if not rows:
        return 0.0
    hits = sum(best_index(r, rule) == r.gold for r in rows)
    return hits / len(rows)


def conditional_logit(rows: Sequence[SelectionRow], ridge: float = RIDGE, steps: int = 100) -> list[float]:
    """Weights maximising sum log softmax(w . x)[gold] - ridge/2 |w|^2 (Newton's method with step halving: the
    rows are nearly separable, and a full step can overshoot)."""
    d = len(SELECTION_FEATURES)
    matrices = [np.asarray(r.features, dtype=np.float64) for r in rows]
    golds = [r.gold for r in rows]

    def objective(w: np.ndarray) -> float:
        total = -0.5 * ridge * float(w @ w)
        for x, g in zip(matrices, golds):
            z = x @ w
            total += float(z[g] - z.max() - np.log(np.exp(z - z.max()).sum()))
        return total

    w = np.zeros(d)
    current = objective(w)
    for _ in range(steps):
        gradient = -ridge * w
        hessian = -ridge * np.eye(d)
        for x, g in zip(matrices, golds):
            z = x @ w
            p = np.exp(z - z.max())
            p /= p.sum()
            mean = p @ x
            gradient += x[g] - mean
            hessian -= (x * p[:, None]).T @ x - np.outer(mean, mean)
        step = np.linalg.solve(hessian - 1e-9 * np.eye(d), gradient)
        size = 1.0
        while size > 1e-6:
            candidate = w - size * step
            value = objective(candidate)
            if value >= current:
                break
            size /= 2
        else:
            break
        w, improved, current = candidate, value - current, value
        if improved < 1e-9:
            break
    return [round(float(v), 4) for v in w]


def uncovered(row: SelectionRow, draw: str = "fit") -> SelectionRow:
    """The row as from a user whose standing instructions do not speak of the requested function: its "profile"
    feature off, as many other functions' on as the row had (chosen by a hash of the item id and `draw`, so the
    fit's copies and the report's are other draws)."""
    count = int(sum(f[PROFILE] > 0 for f in row.features))
    others = [i for i, name in enumerate(row.names) if i != row.gold and name != NONE_CANDIDATE]
    on = set(random.Random(f"{draw}:{row.item}").sample(others, min(count, len(others))))
    value = profile_value(len(others) + 1, len(on))
    return row.model_copy(update={"features": [[*f[:PROFILE], value if i in on else 0.0, *f[PROFILE + 1:]]
                                               for i, f in enumerate(row.features)]})


def dropped_profile(item_id: str, share: float = PROFILE_DROPOUT) -> bool:
    """Is this item also seen with its profile uncovered? Fixed by a hash of its id (the same items every run)."""
    return hashlib.sha256(f"profile:{item_id}".encode("utf-8")).digest()[0] < share * 256


def with_profile_dropout(rows: Sequence[SelectionRow], share: float = PROFILE_DROPOUT) -> list[SelectionRow]:
    """The rows, and an uncovered copy of those `dropped_profile` picks (step 3)."""
    return [*rows, *(uncovered(r) for r in rows if dropped_profile(r.item, share))]


def _accuracies(rows: Sequence[SelectionRow], rule: SelectionRule, sources: Sequence[str]) -> dict[str, float]:
    out = {s: round(accuracy([r for r in rows if r.source == s], rule), 4) for s in sources}
    out["all"] = round(accuracy(rows, rule), 4)
    return out


def fit(rows: Sequence[SelectionRow], profile_dropout: float = PROFILE_DROPOUT) -> SelectionFit:
    sources = sorted({r.source for r in rows})
    by_source = {s: [r for r in rows if r.source == s] for s in sources}
    hand = _accuracies(rows, HAND_RULE, sources)
    shifted = [uncovered(r, "report") for r in rows]
    common = {"rows": len(rows), "accuracy_hand": hand, "profile_dropout": profile_dropout,
              "accuracy_uncovered_hand": _accuracies(shifted, HAND_RULE, sources)}
    if len(rows) < 50:
        return SelectionFit(**common, fitted=False, why=f"{len(rows)} items (needs 50): the hand-set rule stays",
                            weights=HAND_RULE.weights, accuracy_fitted=hand, transfer={})
    rule = SelectionRule(weights=conditional_logit(with_profile_dropout(rows, profile_dropout)))
    fitted = _accuracies(rows, rule, sources)
    common["accuracy_uncovered_fitted"] = _accuracies(shifted, rule, sources)
    transfer = {}
    for a in sources:
        for b in sources:
            if a != b and len(by_source[a]) >= 50:
                alone = SelectionRule(weights=conditional_logit(with_profile_dropout(by_source[a], profile_dropout)))
                transfer[f"{a}->{b}"] = round(accuracy(by_source[b], alone), 4)
    if fitted["all"] < hand["all"] or any(math.isnan(v) for v in rule.weights):
        return SelectionFit(**common, fitted=False, why=f"top-1 {fitted['all']} under the hand-set rule's "
                            f"{hand['all']}: the hand-set rule stays", weights=HAND_RULE.weights,
                            accuracy_fitted=fitted, transfer=transfer)
    worse = [k for k, v in transfer.items() if v < hand[k.split("->")[1]]]
    if worse:
        return SelectionFit(**common, fitted=False, why=f"fitted on one source alone, the rule is worse than "
                            f"the hand-set one on the other ({', '.join(worse)}): it would not travel to a catalogue "
                            "nobody tuned on, so the hand-set rule stays", weights=HAND_RULE.weights,
                            accuracy_fitted=fitted, transfer=transfer)
    return SelectionFit(**common, fitted=True, weights=rule.weights, accuracy_fitted=fitted, transfer=transfer)


# -- stage 1's calibration floor (fnctod.smoothed) ---------------------------------------------------------------
FLOORS = (-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0, -8.0, -9.0, -10.0, -11.0, -12.0, -13.0, -14.0, -16.0, -20.0)


class FloorFit(BaseModel):
    floor: float
    hand_floor: float
    kept: bool  # stored only when the hand-set rule selects better with it and no source worse
    why: str = ""
    rows: int
    accuracy: dict[str, dict[str, float]]  # floor -> source (and "all") -> top-1 of the hand-set rule


def with_floor(rows: Sequence[SelectionRow], floor: float) -> list[SelectionRow]:
    """The rows with their "model" feature recomputed under this floor (rows without raw scores stay as they are)."""
    out = []
    for row in rows:
        if row.raw is None or not row.content_free:
            out.append(row)
            continue
        model = [r - c for r, c in zip(row.raw, smoothed(row.content_free, floor))]
        out.append(row.model_copy(update={"features": [[m, *f[1:]] for m, f in zip(model, row.features)]}))
    return out


def fit_floor(rows: Sequence[SelectionRow]) -> FloorFit:
    """The floor under which the hand-set rule (calibrated model score plus domain prior) picks the gold function
    most often on the tune rows, among floors under which no source does worse than under the hand-set floor. Ties
    go to the floor nearest the hand-set one. Kept only when it is better pooled."""
    from prefcall.strategies.fnctod import CALIBRATION_FLOOR

    usable = [r for r in rows if r.raw is not None and r.content_free]
    sources = sorted({r.source for r in usable})

    def table(floor: float) -> dict[str, float]:
        moved = with_floor(usable, floor)
        out = {s: round(accuracy([r for r in moved if r.source == s], HAND_RULE), 4) for s in sources}
        out["all"] = round(accuracy(moved, HAND_RULE), 4)
        return out

    tables = {str(f): table(f) for f in sorted({*FLOORS, CALIBRATION_FLOOR})}
    hand = tables[str(CALIBRATION_FLOOR)]
    best = CALIBRATION_FLOOR
    for floor in FLOORS:
        found = tables[str(floor)]
        if any(found[s] < hand[s] for s in sources):
            continue
        if (found["all"], -abs(floor - CALIBRATION_FLOOR)) > (tables[str(best)]["all"], -abs(best - CALIBRATION_FLOOR)):
            best = floor
    kept = bool(usable) and tables[str(best)]["all"] > hand["all"]
    why = "" if kept else ("no floor selects better than the hand-set one on the tune rows without a source doing "
                           "worse" if usable else "no rows with the model's raw scores")
    return FloorFit(floor=best if kept else CALIBRATION_FLOOR, hand_floor=CALIBRATION_FLOOR, kept=kept, why=why,
                    rows=len(usable), accuracy=tables)
