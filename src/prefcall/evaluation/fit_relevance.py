"""`prefcall fit --relevance`: the embedder's rule under which a request is about no function of its catalogue.

The grounded pipeline refuses a request (strategies.relevance) when the logistic score of its relevance evidence
(`relevance.FEATURES`: cosines with the functions' texts, names, descriptions and arguments, and the share of a
function's words it uses) is under a threshold; weights and threshold are fitted per embedder. The decision uses
relevance evidence only, never what the filler could fill, and it is checked for every answer, a call as much as
an ask.

Steps:
1. Requests, each with the catalogue it was sent with, from the tune part of the frozen split (splits.json) of
   several sources and authors (`SOURCES`): requests no function fits (BFCL irrelevance; the NLT sets' messages
   that need no tool) and requests a function fits (BFCL simple and multiple, ACEBench special_incomplete, NLSI
   dev, the first user turn with an intent of SGD dialogues, the bundled corpus, the NLT sets' other messages).
   A source with no tune part (BFCL live_relevance, ACEBench special_irrelevant) is read only by reports.
2. Each request's evidence against its catalogue's functions, with the shipped embedder (no language model).
3. Rule: a logistic regression of "a function fits" on the evidence (ridge RIDGE: the features overlap), then the
   largest threshold on its score (two decimals, rounded down) that keeps at least KEEP of the relevant requests
   pooled and at least KEEP_PER_SOURCE of each relevant source (a source worded far from its catalogue, such as
   SGD's first turns, must not pay for the others). The report gives, per source, the share kept or refused, and
   the AUC of the best cosine alone beside the rule's.

`requests(part)` also gives the report part, for `prefcall eval relevance`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from prefcall.errors import ConfigError
from prefcall.evaluation import corpus, splits
from prefcall.evaluation.data import import_catalogue_file, read_json, read_resumable, shared_data_dir
from prefcall.evaluation.metrics.calls import calls_from_any
from prefcall.evaluation.tasks.tools import read_records
from prefcall.retrieval.text import humanise, stem, tokenize
from prefcall.schemas.importers import import_catalogue
from prefcall.schemas.model import Catalogue, Function, Turn
from prefcall.strategies import model_check
from prefcall.strategies.fnctod import NONE_MARGIN, RELEVANCE_FEATURES

KEEP = 0.98
KEEP_PER_SOURCE = 0.95
RIDGE = 0.1
REPO_DATA = Path(__file__).resolve().parents[3] / "tests" / "data"  # a source checkout's NLT sets


class Request(BaseModel):
    """One request as a user sent it: the dialogue, the catalogue it was sent with, the user's words (what the
    relevance rule reads), whether a function fits and, if so, which (`gold`, names as the catalogue spells them;
    one of them is a right selection)."""

    source: str
    id: str
    dialogue: list[Turn] | str
    text: str
    catalogue: Catalogue
    relevant: bool
    gold: list[str] = Field(default_factory=list)


def first_per_source(items: Sequence[Request], cap: int | None) -> list[int]:
    """Indices of the first `cap` requests of each source and kind (relevant, irrelevant), in order; all without
    a cap. What `eval relevance --per-source` and `fit --relevance --per-source` read."""
    counts: dict[tuple[str, bool], int] = {}
    kept = []
    for index, item in enumerate(items):
        key = (item.source, item.relevant)
        if cap is None or counts.get(key, 0) < cap:
            counts[key] = counts.get(key, 0) + 1
            kept.append(index)
    return kept


def _part_keys(path: Path, part: str) -> set[str] | None:
    found = splits.source_of(path)
    return None if found is None else found[1].part(part)


def _bfcl(path: Path, keys: set[str]) -> list[Request]:
    from prefcall.evaluation.tasks import bfcl

    out = []
    for item in bfcl.load_items(path):
        if item.id not in keys:
            continue
        turns = [Turn(role=t["role"], content=t["content"]) for t in item.input["turns"]]
        out.append(Request(source=f"bfcl/{path.stem.removeprefix('BFCL_v4_')}", id=item.id, dialogue=turns,
                           text="\n".join(t.content for t in turns if t.role == "user"),
                           catalogue=bfcl.catalogue_of(item.input["functions"]),
                           relevant=item.meta["category"] != "irrelevance",
                           gold=[str(n) for n in item.gold.get("functions", [])]))
    return out


def _acebench(path: Path, keys: set[str]) -> list[Request]:
    from prefcall.evaluation.tasks import acebench

    out = []
    for item in acebench.load_items(path):
        if item.id not in keys or item.error or item.skip:
            continue
        turns = acebench.parse_dialogue(item.input["question"])
        names = list((item.gold or {}).get("missing", {}))  # special_incomplete: {function: [missing]}
        out.append(Request(source=f"acebench/{path.stem.removeprefix('data_')}", id=item.id, dialogue=turns,
                           text="\n".join(t.content for t in turns if t.role == "user"),
                           catalogue=acebench.catalogue_of(item.input["functions"]),
                           relevant=item.meta.get("expected") != "refuse", gold=names))
    return out


def _gold_names(calls: Sequence[Any]) -> list[str]:
    return list(dict.fromkeys(c.name for c in calls_from_any([str(c) for c in calls])))


def _nlsi(path: Path, keys: set[str]) -> list[Request]:
    from prefcall.schemas.registry import builtin_catalogue

    catalogue = builtin_catalogue("nlsi")
    return _utterances("nlsi", path, keys, catalogue)


def _corpus(path: Path, keys: set[str]) -> list[Request]:
    return _utterances("corpus", path, keys, import_catalogue(corpus.CORPUS_DIR / "catalogue.json", name="corpus"))


def _utterances(source: str, path: Path, keys: set[str], catalogue: Catalogue) -> list[Request]:
    """NLSI-format rows (the shared dev file, the bundled corpus): the transcript and its gold calls."""
    from prefcall.strategies.fnctod import user_words

    rows = read_records(path)
    ids = splits.unique_ids(str(r["example_id"]) for r in rows)
    return [Request(source=source, id=key, dialogue=r["user_utterance"], text=user_words(r["user_utterance"]),
                    catalogue=catalogue, relevant=True, gold=_gold_names(r["api_calls"]))
            for key, r in zip(ids, rows) if key in keys]


def _sgd(path: Path, keys: set[str]) -> list[Request]:
    """The first user turn of each dialogue whose state has an intent (what the user first asks for), with the
    dialogue so far."""
    from prefcall.evaluation.tasks.dst import function_names, sgd_services

    schema = path.parent / "dev_schema.json"
    catalogue = import_catalogue_file(schema, "sgd")
    names = function_names(sgd_services(read_json(schema), schema))
    out = []
    for dialogue in read_records(path):
        if dialogue["dialogue_id"] not in keys:
            continue
        turns: list[Turn] = []
        for turn in dialogue["turns"]:
            turns.append(Turn(role="user" if turn["speaker"] == "USER" else "assistant", content=turn["utterance"]))
            intents = [names.get(f"{f['service']}|{f['state']['active_intent']}", f["state"]["active_intent"])
                       for f in turn.get("frames", []) if (f.get("state") or {}).get("active_intent", "NONE") != "NONE"]
            if turn["speaker"] == "USER" and intents:
                out.append(Request(source="sgd", id=dialogue["dialogue_id"], dialogue=list(turns),
                                   text="\n".join(t.content for t in turns if t.role == "user"),
                                   catalogue=catalogue, relevant=True, gold=intents))
                break
    return out


def _nlt(path: Path, keys: set[str]) -> list[Request]:
    out = []
    for row in read_records(path):
        if str(row["id"]) not in keys:
            continue
        turns = [Turn(role="user" if m.get("role") == "user" else "assistant", content=m["content"])
                 for m in row["messages"]]
        catalogue = Catalogue(name=f"nlt-{row.get('domain', 'tools')}", functions=[
            Function(name=str(t["name"]), description=str(t.get("description") or "")) for t in row["tools"]])
        out.append(Request(source=f"nlt/{path.parent.name}", id=str(row["id"]), dialogue=turns,
                           text="\n".join(t.content for t in turns if t.role == "user"), catalogue=catalogue,
                           relevant=bool(row["expected"]), gold=[str(n) for n in row["expected"]]))
    return out


Loader = Callable[[Path, set[str]], list[Request]]
SOURCES: list[tuple[str, Loader]] = [
    ("shared:bfcl/BFCL_v4_irrelevance.json", _bfcl),
    ("shared:bfcl/BFCL_v4_simple_python.json", _bfcl),
    ("shared:bfcl/BFCL_v4_multiple.json", _bfcl),
    ("shared:bfcl/BFCL_v4_live_relevance.json", _bfcl),
    ("shared:acebench/data_special_incomplete.json", _acebench),
    ("shared:acebench/data_special_irrelevant.json", _acebench),
    ("shared:nlsi/dev.json", _nlsi),
    ("shared:sgd/dev_dialogues_001.json", _sgd),
    ("bundled:corpus/items.json", _corpus),
    ("repo:nlt/dev.jsonl", _nlt),
    ("repo:nlt/report.jsonl", _nlt),
    ("repo:nlt2/items.jsonl", _nlt),
]


def _path(where: str) -> Path:
    kind, name = where.split(":", 1)
    if kind == "shared":
        return shared_data_dir() / name
    if kind == "bundled":
        return corpus.CORPUS_DIR / Path(name).name
    return REPO_DATA / name


def requests(part: str = "tune", *, require: bool = True) -> list[Request]:
    """Every request of `part` ("tune" or "report") over SOURCES, in file order. A missing shared file is an error
    when `require` (a fit must read the same items every time); a source checkout's NLT sets are skipped when the
    package runs from an install without them."""
    out: list[Request] = []
    for where, loader in SOURCES:
        path = _path(where)
        if not path.is_file():
            if where.startswith("repo:"):
                continue
            if require:
                raise ConfigError(f"{path} is missing: run beside ../shared/data (PREFCALL_SHARED_DATA)")
            continue
        keys = _part_keys(path, part)
        if keys is None:
            raise ConfigError(f"{path} is not a source of the split file: rebuild it with `prefcall split build`")
        if keys:
            out += loader(path, keys)
    return out


# Requests no function fits, made from relevant ones (`mismatched`): the source name they carry, the largest
# catalogue lent to them (BFCL and ACEBench send one to four functions; a small one keeps stage 1 cheap), and the
# cosine, between a request's own function and a lent one, at or above which the pair is not made (two functions
# that close may do the same thing: "transfer money" and "pay a bill"; hand-set, not fitted: it only keeps pairs
# out, and a pair left in that a function does serve would teach the check to refuse real requests).
MISMATCHED = "generated/mismatched"
MISMATCH_FUNCTIONS = 4
MISMATCH_COSINE = 0.5


def mismatched(items: Sequence[Request], embedder: Any) -> list[Request]:
    """Requests no function of their catalogue fits, made from the relevant requests of `items`: each with the
    catalogue another request was sent with (at most MISMATCH_FUNCTIONS functions, the first that passes in a fixed
    walk of those catalogues), where no function of that catalogue shares a name word with, or comes within
    MISMATCH_COSINE of, the request's own function (its gold one in its catalogue). What a user sends a server
    whose tools are for something else (ACEBench special_irrelevant's kind, read only by reports): the user asks
    for an action with its details, and the message questions alone cannot tell it from a real request. Sources
    taken in turn (the first N of `first_per_source` mix them); deterministic. Read by `prefcall fit --relevance
    --mismatched`."""
    from prefcall.strategies.relevance import function_text

    order = _in_turn([i for i in items if i.relevant and i.text.strip() and i.source not in (MISMATCHED, NEAR_MISS)])
    lenders: dict[tuple[str, ...], Request] = {}
    for item in items:
        if 0 < len(item.catalogue.functions) <= MISMATCH_FUNCTIONS:
            lenders.setdefault(tuple(sorted(f.name for f in item.catalogue.functions)), item)
    pool = _in_turn(list(lenders.values()))  # each source's catalogues in turn: not one source's all first
    if not pool:
        return []
    texts = list(dict.fromkeys(function_text(f.name, f.description) for item in [*items, *pool]
                               for f in item.catalogue.functions))
    vectors = dict(zip(texts, np.asarray(embedder.embed(texts), dtype=np.float32)))
    out: list[Request] = []
    for n, item in enumerate(order):
        own = [f for f in item.catalogue.functions if f.name in set(item.gold)]
        if not own:
            continue
        own_words = {w for f in own for w in _words(humanise(f.name))}
        own_vectors = np.stack([vectors[function_text(f.name, f.description)] for f in own])
        for step in range(len(pool)):
            lender = pool[(n * 7 + step) % len(pool)]
            lent = lender.catalogue.functions
            if lender.source == item.source and lender.id == item.id:
                continue
            if any(own_words & _words(humanise(f.name)) for f in lent):
                continue
            lent_vectors = np.stack([vectors[function_text(f.name, f.description)] for f in lent])
            if float(np.max(own_vectors @ lent_vectors.T)) >= MISMATCH_COSINE:
                continue
            out.append(Request(source=MISMATCHED, id=f"{item.source}:{item.id}@{lender.source}:{lender.id}",
                               dialogue=item.dialogue, text=item.text, catalogue=lender.catalogue, relevant=False))
            break
    return out


# Sources whose gold names every function a request needs, so that the catalogue's other functions serve it not
# (BFCL multiple's and ACEBench's distractors, the NLT sets' tools a message does not need): `near_misses` takes their
# requests with the gold functions removed. Not NLSI, SGD or the corpus: their gold is one right call, and a
# sibling function of the same service may serve the request too.
EXCLUSIVE_GOLD = ("bfcl/multiple", "acebench/special_incomplete", "nlt/nlt", "nlt/nlt2")
NEAR_MISS = "generated/near_miss"


def near_misses(items: Sequence[Request]) -> list[Request]:
    """Requests no function of their catalogue fits, made from the relevant requests of EXCLUSIVE_GOLD sources:
    the same request and catalogue, less the functions that serve it, where at least one is left. What a user sends
    a server whose tools are on the request's topic but do something else (a forecast asked of a tool for historical
    weather); harder than `mismatched`, where the lent catalogue is far. Sources taken in turn; deterministic. Read
    by `prefcall fit --relevance --near-miss`."""
    out = []
    for item in _in_turn([i for i in items if i.relevant and i.text.strip() and i.source in EXCLUSIVE_GOLD]):
        gold = set(item.gold)
        left = [f for f in item.catalogue.functions if f.name not in gold]
        if not gold or len(left) == len(item.catalogue.functions) or not left:
            continue
        out.append(Request(source=NEAR_MISS, id=f"{item.source}:{item.id}", dialogue=item.dialogue, text=item.text,
                           catalogue=item.catalogue.model_copy(update={"functions": left}), relevant=False))
    return out


def _in_turn(items: Sequence[Request]) -> list[Request]:
    """`items` with their sources taken in turn (first of each source, then second of each, ...)."""
    by_source: dict[str, list[Request]] = {}
    for item in items:
        by_source.setdefault(item.source, []).append(item)
    parts = list(by_source.values())
    return [part[k] for k in range(max(map(len, parts), default=0)) for part in parts if k < len(part)]


def _words(text: str) -> set[str]:
    return {stem(w) for w in tokenize(text) if len(w) > 2}


def evidence_of(embedder: Any, items: Sequence[Request],
                progress: Callable[[str], None] | None = None) -> list[list[float]]:
    """Each request's relevance.FEATURES against its catalogue's functions (strategies.relevance.evidence)."""
    from prefcall.strategies.relevance import FEATURES, evidence

    out = []
    for item in items:
        functions = item.catalogue.functions
        out.append(evidence(embedder, item.text, functions).features if functions and item.text.strip()
                   else [0.0] * len(FEATURES))
        if progress is not None:
            progress(item.id)
    return out


class SourceShare(BaseModel):
    n: int
    relevant: bool
    kept: float  # share at or above the threshold (answered); for irrelevant sources 1 - kept is refused


class RelevanceFit(BaseModel):
    embedder: str
    threshold: float
    weights: list[float]  # bias, then one per relevance.FEATURES
    auc: float
    cosine_auc: float  # the best cosine alone, on the same requests
    n_relevant: int
    n_irrelevant: int
    kept_relevant: float
    refused_irrelevant: float
    sources: dict[str, SourceShare] = Field(default_factory=dict)


def auc(positive: Sequence[float], negative: Sequence[float]) -> float:
    """P(a relevant request's cosine > an irrelevant one's), ties half."""
    if not positive or not negative:
        return float("nan")
    p, n = np.asarray(positive)[:, None], np.asarray(negative)[None, :]
    return float(np.mean((p > n) + 0.5 * (p == n)))


def threshold_for(cosines: Sequence[float], items: Sequence[Request] | Sequence[RelevanceRow], keep: float = KEEP,
                  keep_per_source: float = KEEP_PER_SOURCE, refusals: dict[str, int] | None = None) -> float:
    """The largest two-decimal threshold that keeps `keep` of the relevant requests and `keep_per_source` of each
    relevant source; with `refusals`, instead of those shares, each source may lose at most its number there and
    all of them together at most POOLED's (a held-out fold's part: as many as the keep rule allows on all the rows,
    `allowed_refusals`)."""
    relevant = [(c, i.source) for c, i in zip(cosines, items) if i.relevant]
    if not relevant:
        raise ConfigError("no relevant tuning requests: the relevance fit needs the shared data")
    pooled = [c for c, _ in relevant]
    limits = [_keeping(pooled, keep) if refusals is None else
              _keeping_all_but(pooled, min(refusals.get(POOLED, 0), len(pooled) - 1))]
    for source in sorted({s for _, s in relevant}):
        values = [c for c, s in relevant if s == source]
        limits.append(_keeping(values, keep_per_source) if refusals is None else
                      _keeping_all_but(values, min(refusals.get(source, 0), len(values) - 1)))
    return min(limits)


POOLED = "*"  # `allowed_refusals`' key for all relevant sources together


def allowed_refusals(items: Sequence[Request] | Sequence[RelevanceRow], keep: float = KEEP,
                     keep_per_source: float = KEEP_PER_SOURCE) -> dict[str, int]:
    """How many relevant requests of each source, and of all together (POOLED), the keep rule lets a threshold
    refuse."""
    counts = Counter(i.source for i in items if i.relevant)
    total = sum(counts.values())
    return {POOLED: total - math.ceil(keep * total),
            **{source: n - math.ceil(keep_per_source * n) for source, n in counts.items()}}


def _keeping(values: Sequence[float], share: float) -> float:
    """The largest two-decimal t with at least `share` of `values` >= t."""
    return _keeping_all_but(values, len(values) - math.ceil(share * len(values)))


def _keeping_all_but(values: Sequence[float], refused: int) -> float:
    """The largest two-decimal t with at most `refused` of `values` < t."""
    return math.floor(sorted(values, reverse=True)[len(values) - refused - 1] * 100) / 100


def fit(embedder_name: str, features: Sequence[Sequence[float]], items: Sequence[Request]) -> RelevanceFit:
    """Weights of the evidence and the keep rule's threshold on their score (step 3)."""
    from prefcall.evaluation.fit import logistic

    if not any(i.relevant for i in items) or all(i.relevant for i in items):
        raise ConfigError("the relevance fit needs tuning requests of both kinds (some a function fits, some none)")
    x = np.asarray(features, dtype=float)
    w = logistic(x, np.asarray([float(i.relevant) for i in items]), ridge=RIDGE)
    weights = [round(float(w[-1]), 4), *(round(float(v), 4) for v in w[:-1])]
    scores = rule_scores(weights, features)
    threshold = threshold_for(scores, items)
    cosine = shares(list(x[:, 0]), items, 0.0)["auc"]
    return RelevanceFit(embedder=embedder_name, threshold=threshold, weights=weights, cosine_auc=cosine,
                        **shares(scores, items, threshold))


def rule_scores(weights: Sequence[float], features: Sequence[Sequence[float]]) -> list[float]:
    """The fitted rule's score of each request (relevance.RelevanceRule.score)."""
    if not len(features):
        return []
    return [float(v) for v in weights[0] + np.asarray(features, dtype=float) @ np.asarray(weights[1:], dtype=float)]


def shares(cosines: Sequence[float], items: Sequence[Request] | Sequence[RelevanceRow], threshold: float) -> dict[str, Any]:
    """How a threshold splits these requests: pooled and per source (the fit's report and `eval relevance`)."""
    pos = [c for c, i in zip(cosines, items) if i.relevant]
    neg = [c for c, i in zip(cosines, items) if not i.relevant]
    sources: dict[str, SourceShare] = {}
    for source in dict.fromkeys(i.source for i in items):
        values = [(c, i.relevant) for c, i in zip(cosines, items) if i.source == source]
        for relevant in (True, False):
            part = [c for c, r in values if r == relevant]
            if part:
                name = source if all(r == relevant for _, r in values) else \
                    f"{source} ({'needs a tool' if relevant else 'needs none'})"
                sources[name] = SourceShare(n=len(part), relevant=relevant,
                                            kept=round(float(np.mean(np.asarray(part) >= threshold)), 3))
    return {"auc": round(auc(pos, neg), 3), "n_relevant": len(pos), "n_irrelevant": len(neg),
            "kept_relevant": round(float(np.mean(np.asarray(pos) >= threshold)), 3) if pos else float("nan"),
            "refused_irrelevant": round(float(np.mean(np.asarray(neg) < threshold)), 3) if neg else float("nan"),
            "sources": sources}


# -- the model's rule: the embedder's cosine and the model's own "None" judgement --------------------------------


class RelevanceRow(BaseModel):
    """Stage 1's relevance evidence for one tuning request (strategies.fnctod.RELEVANCE_FEATURES), and whether
    the hand-set rule (the "None" candidate winning `combined`) refused it."""

    source: str
    id: str
    relevant: bool
    features: list[float]
    hand_refused: bool
    # what the None prior is weighed against (FunctionScores.none_prior_inputs): the None candidate's model score,
    # the best function's combined score, the best cosine, whether a function is named (1.0) or not (0.0)
    none_inputs: list[float] | None = None
    gate_cosine: float | None = None  # the embedder check's score (its rule's, rule_scores), when the fit computed it
    # the model's best yes-margin on "can this tool do it?" for the closest function and stage 1's (model_check)
    model_yes: float | None = None
    # the best of the same margins less each function's content-free baseline (a calibrated check reads it), and the
    # version of the question both were asked with (model_check.QUESTIONS; rows written before versions: None, 1)
    model_yes_calibrated: float | None = None
    check_question: int | None = None
    # the model's yes-margin for each version of model_check.MESSAGE_QUESTIONS (the message alone, no tool)
    message_yes: dict[int, float] | None = None


class ModelRelevanceFit(BaseModel):
    weights: list[float]  # bias, then one weight per RELEVANCE_FEATURES
    threshold: float
    kept: bool  # stored for the model only when it is at least as good as the hand-set rule on both rates
    why: str = ""
    auc: float
    rows: int
    fitted: dict[str, float]  # "no_call" on irrelevant rows, "false_refusal" on relevant rows, in sample
    hand: dict[str, float]  # the same for the hand-set rule on the same rows
    sources: dict[str, SourceShare] = Field(default_factory=dict)
    hand_sources: dict[str, SourceShare] = Field(default_factory=dict)  # what the hand-set rule keeps per source

    def rule(self) -> dict[str, Any]:
        return {"weights": self.weights, "threshold": self.threshold}


def collect(pipeline: Any, items: Sequence[Request], progress: Callable[[str], None] | None = None,
            gate_cosines: Sequence[float] | None = None, check: bool = False,
            done: dict[tuple[str, str], RelevanceRow] | None = None,
            write: Callable[[RelevanceRow], None] | None = None) -> list[RelevanceRow]:
    """Stage 1 (the `full` config with refusals allowed, as the MCP server runs it) on each request; with
    `gate_cosines` (the embedder rule's scores of the same items, rule_scores), each row also carries the embedder
    check's score, and with `check` the model's yes-margin (strategies.model_check) for the function closest to
    the request and the one stage 1 chose, as the pipeline asks it. `done`: rows an interrupted run wrote, by
    (source, id), taken as they are (the embedder's score recomputed); `write`: called with each new row."""
    from prefcall.strategies import model_check
    from prefcall.strategies.fnctod import NONE_CANDIDATE, FunctionScores
    from prefcall.strategies.pipeline_models import get_config
    from prefcall.strategies.relevance import evidence

    config = get_config("full", allow_refuse=True)
    rows = []
    versions = sorted(model_check.MESSAGE_QUESTIONS)
    for n, item in enumerate(items):
        earlier = (done or {}).get((item.source, item.id))
        if earlier is not None and (not check or (earlier.model_yes is not None
                                                  and earlier.check_question == model_check.LATEST)):
            update: dict[str, Any] = {} if gate_cosines is None else {"gate_cosine": gate_cosines[n]}
            if check and sorted(earlier.message_yes or {}) != versions:  # rows from before the message questions
                update["message_yes"] = _message_yes(pipeline.engine, item.text, versions)
            rows.append(earlier.model_copy(update=update))
            if write is not None and "message_yes" in update:
                write(rows[-1])
            if progress is not None:
                progress(item.id)
            continue
        scores = pipeline.stage_one(item.dialogue, item.catalogue, config).usage
        features = scores.relevance_features() if isinstance(scores, FunctionScores) else None
        if features is not None:
            none = scores.names.index(NONE_CANDIDATE)
            hand = scores.combined[none] > max(c for i, c in enumerate(scores.combined) if i != none)
            inputs = scores.none_prior_inputs()
            model_yes = calibrated = question = message_yes = None
            if check and pipeline.embedder is not None and item.text.strip():
                chosen = scores.best()
                closest = evidence(pipeline.embedder, item.text, item.catalogue.functions).closest
                asked = [f for f in item.catalogue.functions if f.name in {closest, chosen}]
                question = model_check.LATEST
                found = model_check.margins(pipeline.engine, asked, item.text, question)
                model_yes, calibrated = max(found.raw), max(found.calibrated())
                message_yes = _message_yes(pipeline.engine, item.text, versions)
            rows.append(RelevanceRow(source=item.source, id=item.id, relevant=item.relevant, features=features,
                                     hand_refused=hand, none_inputs=[*inputs[:3], float(inputs[3])] if inputs else None,
                                     gate_cosine=gate_cosines[n] if gate_cosines is not None else None,
                                     model_yes=model_yes, model_yes_calibrated=calibrated,
                                     check_question=question, message_yes=message_yes))
            if write is not None:
                write(rows[-1])
        if progress is not None:
            progress(item.id)
    return rows


def _message_yes(engine: Any, text: str, versions: Sequence[int]) -> dict[int, float]:
    from prefcall.strategies import model_check

    return dict(zip(versions, model_check.message_margins(engine, text, versions)))


def read_partial(path: Path) -> dict[tuple[str, str], RelevanceRow]:
    """The rows an interrupted `collect` appended to `path`, by (source, id); a line cut short is skipped."""
    return {(row.source, row.id): row for row in read_resumable(path, RelevanceRow.model_validate_json)}


def read_rows(path: Path, items: Sequence[Request]) -> list[RelevanceRow]:
    """The rows an earlier `collect` wrote (`prefcall fit --relevance --out`), checked against the requests this
    fit reads: rows of other requests (another split, another --per-source) are an error, not a silent refit."""
    try:
        rows = [RelevanceRow.model_validate_json(line) for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip()]
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--rows {path}: cannot read it ({type(exc).__name__}); give the relevance-rows.jsonl "
                          "that `prefcall fit --relevance --out DIR` wrote") from None
    want = [(i.source, i.id) for i in items if i.text.strip()]
    have = [(r.source, r.id) for r in rows]
    if sorted(have) != sorted(want) or any(r.model_yes is None for r in rows):
        raise ConfigError(f"--rows {path}: its {len(have)} rows are not this fit's {len(want)} requests with the "
                          "model's answers; rerun without --rows (the same --per-source) to ask the model")
    return rows


def _rates(refused: Sequence[bool], rows: Sequence[RelevanceRow]) -> dict[str, float]:
    negative = [r for r, row in zip(refused, rows) if not row.relevant]
    positive = [r for r, row in zip(refused, rows) if row.relevant]
    return {"no_call": round(float(np.mean(negative)), 3) if negative else float("nan"),
            "false_refusal": round(float(np.mean(positive)), 3) if positive else float("nan")}


def fit_rule(rows: Sequence[RelevanceRow]) -> ModelRelevanceFit:
    """Logistic regression of "a function fits" on the features, then the threshold on its score that keeps
    KEEP of the relevant rows and KEEP_PER_SOURCE of each source's (`threshold_for`). The rule is kept only when,
    on the same rows, it refuses at least as many irrelevant requests as the hand-set rule (stage 1's "None"
    candidate winning `combined`) and at most as many relevant ones."""
    from prefcall.evaluation.fit import logistic

    if not any(r.relevant for r in rows) or all(r.relevant for r in rows):
        raise ConfigError("the relevance fit needs tuning requests of both kinds (some a function fits, some none)")
    x = np.asarray([r.features for r in rows], dtype=float)
    y = np.asarray([float(r.relevant) for r in rows])
    w = logistic(x, y)
    weights = [round(float(w[-1]), 4), *(round(float(v), 4) for v in w[:-1])]
    scores = [weights[0] + sum(a * b for a, b in zip(weights[1:], r.features)) for r in rows]
    threshold = threshold_for(scores, rows)
    refused = [s < threshold for s in scores]
    split = shares(scores, rows, threshold)
    fitted, hand = _rates(refused, rows), _rates([r.hand_refused for r in rows], rows)
    kept = fitted["no_call"] >= hand["no_call"] and fitted["false_refusal"] <= hand["false_refusal"]
    why = "" if kept else (f"the hand-set rule refuses {hand['no_call']:.1%} of the irrelevant tuning requests and "
                           f"{hand['false_refusal']:.1%} of the relevant ones; the fitted rule {fitted['no_call']:.1%} "
                           f"and {fitted['false_refusal']:.1%}: it is not better on both")
    hand_split = shares([0.0 if r.hand_refused else 1.0 for r in rows], rows, 0.5)
    return ModelRelevanceFit(weights=weights, threshold=threshold, kept=kept, why=why, auc=split["auc"],
                             rows=len(rows), fitted=fitted, hand=hand, sources=split["sources"],
                             hand_sources=hand_split["sources"])


class CheckFit(BaseModel):
    weights: list[float]  # bias, then one weight per model_check.CHECK_FEATURES
    threshold: float
    embedder_first: bool = False  # the embedder's rule refuses on its own first (model_check.CheckRule)
    question: int = 1  # the version of model_check.QUESTIONS its rows were asked with
    calibrated: bool = False  # it reads the margin less the content-free baseline
    messages: list[int] = Field(default_factory=list)  # the model_check.MESSAGE_QUESTIONS versions it reads
    stage_one: bool = False  # it reads stage 1's "None" margin (RelevanceRow.features' none_margin) after those
    one_sided: bool = False  # it reads the message margins only where they say No (model_check.one_sided)
    kept: bool  # stored only when, held out, its refusals are worth more than the embedder's rule's (`_gain`)
    why: str = ""
    way: str = ""  # which of CHECK_WAYS was chosen
    auc: float
    rows: int
    fitted: dict[str, float]  # "no_call" and "false_refusal" with the check, in sample
    embedder: dict[str, float]  # the same for the embedder's rule alone (its threshold) on the same rows
    # the same for the other way of combining the two (the check alone when embedder_first, else embedder first)
    other: dict[str, float] = Field(default_factory=dict)
    # each way's rates on rows its fit did not read (CHECK_FOLDS-fold cross-validation)
    held_out: dict[str, dict[str, float]] = Field(default_factory=dict)
    # each way's rates where every source is new to it (`_held_out_sources`), for the note: the choice reads held_out
    held_out_sources: dict[str, dict[str, float]] = Field(default_factory=dict)
    sources: dict[str, SourceShare] = Field(default_factory=dict)

    def rule(self) -> dict[str, Any]:
        return {"weights": self.weights, "threshold": self.threshold, "embedder_first": self.embedder_first,
                "question": self.question, "calibrated": self.calibrated, "messages": self.messages,
                **({"stage_one": True} if self.stage_one else {}), **({"one_sided": True} if self.one_sided else {})}


# A score under every threshold: a request the embedder's rule refuses on its own, whatever the check says.
_REFUSED = -1e6
# The ways the check can combine with the embedder's rule: (embedder_first, reads the embedder's score). A way that
# reads only the model's yes-margin stores weight 0 for the embedder's score.
CHECK_WAYS: dict[str, tuple[bool, bool]] = {"check alone": (False, True), "embedder first": (True, True),
                                            "check alone, model only": (False, False),
                                            "embedder first, model only": (True, False)}
CHECK_FOLDS = 5
# The sets of model_check.MESSAGE_QUESTIONS versions a way may read beside the tool question (where every row has
# their answers): none, each alone, both.
CHECK_MESSAGES: tuple[tuple[int, ...], ...] = ((), (1,), (2,), (1, 2))
# Where every row has stage 1's relevance features, each way is also tried with stage 1's "None" margin beside its
# other features (fnctod.NONE_MARGIN of RELEVANCE_FEATURES: no further model call at run time).


def _way_name(base: str, calibrated: bool, messages: Sequence[int], stage_one: bool = False,
              sided: bool = False) -> str:
    return (base + (", calibrated" if calibrated else "")
            + (f", {'one-sided ' if sided else ''}message questions {'+'.join(str(v) for v in messages)}"
               if messages else "")
            + (", stage 1's None margin" if stage_one else ""))


def _fit_way(x: np.ndarray, y: np.ndarray, alone: np.ndarray, rows: Sequence[RelevanceRow], first: bool,
             embedder_score: bool,
             refusals: dict[str, int] | None = None) -> tuple[list[float], float, list[float]] | None:
    """One way's weights, keep-rule threshold and scores of `rows` (None where it cannot be fitted: the embedder's
    rule leaves the check one kind of row, or alone refuses more relevant rows than the keep rule allows)."""
    from prefcall.evaluation.fit import logistic

    reads = ~alone if first else np.ones(len(rows), dtype=bool)
    if y[reads].min(initial=1.0) == 1.0 or y[reads].max(initial=0.0) == 0.0:
        return None
    w = logistic(x[reads] if embedder_score else x[reads][:, 1:], y[reads], ridge=RIDGE)
    weights = [round(float(w[-1]), 4), *(round(float(v), 4) for v in w[:-1])]
    if not embedder_score:
        weights = [weights[0], 0.0, *weights[1:]]
    scores = [_REFUSED if first and a else s for s, a in zip(rule_scores(weights, x), alone)]
    threshold = threshold_for(scores, rows, refusals=refusals)
    return None if threshold <= _REFUSED else (weights, threshold, scores)


def _folds(rows: Sequence[RelevanceRow]) -> np.ndarray:
    """Each row's fold of CHECK_FOLDS: each source and kind dealt round the folds in row order (deterministic)."""
    fold = np.zeros(len(rows), dtype=int)
    seen: Counter[tuple[str, bool]] = Counter()
    for i, r in enumerate(rows):
        fold[i] = seen[(r.source, r.relevant)] % CHECK_FOLDS
        seen[(r.source, r.relevant)] += 1
    return fold


def _held_out(x: np.ndarray, y: np.ndarray, alone: np.ndarray, rows: Sequence[RelevanceRow], fold: np.ndarray,
              first: bool, embedder_score: bool) -> dict[str, float] | None:
    """A way's no-call and false-refusal rates on rows its fit did not read: each fold (`_folds`) refused by the
    way fitted on the others."""
    refused = np.zeros(len(rows), dtype=bool)
    allowed = allowed_refusals(rows)  # a fold's part may lose as many of a source as all its rows may
    for k in range(CHECK_FOLDS):
        train = fold != k
        part = [r for r, t in zip(rows, train) if t]
        found = _fit_way(x[train], y[train], alone[train], part, first, embedder_score, allowed)
        if found is None:
            return None
        test = ~train
        refused[test] = _refuses(found, x[test], alone[test], first)
    return _rates(list(refused), rows)


def _refuses(found: tuple[list[float], float, list[float]], x: np.ndarray, alone: np.ndarray,
             first: bool) -> np.ndarray:
    """Which of these rows a fitted way (`_fit_way`'s weights and threshold) refuses: its score under the
    threshold, or, for a way whose embedder's rule goes first, that rule's refusal (`alone`)."""
    weights, threshold, _ = found
    return (np.asarray(rule_scores(weights, x)) < threshold) | (alone if first else False)


def _held_out_sources(x: np.ndarray, y: np.ndarray, alone: np.ndarray, rows: Sequence[RelevanceRow], first: bool,
                      embedder_score: bool) -> dict[str, float] | None:
    """A way's no-call and false-refusal rates where each source is new to it: each source's rows refused by the
    way fitted on the other sources' rows alone, with the keep rule on those (what a report split holds: sources no
    fit reads). A source whose absence leaves the others one kind of row is not scored; where the embedder's rule
    goes first and leaves the check one kind of the others' rows, the source's rows are refused where that rule
    refuses them. None where the way cannot be fitted without some source, or no source can be scored."""
    refused = np.zeros(len(rows), dtype=bool)
    scored = np.zeros(len(rows), dtype=bool)
    for source in sorted({r.source for r in rows}):
        test = np.asarray([r.source == source for r in rows])
        train = ~test
        if y[train].min(initial=1.0) == 1.0 or y[train].max(initial=0.0) == 0.0:
            continue
        scored[test] = True
        read = y[train & ~alone] if first else y[train]
        if read.min(initial=1.0) == 1.0 or read.max(initial=0.0) == 0.0:  # after the embedder's rule, nothing to fit
            refused[test] = alone[test]
            continue
        found = _fit_way(x[train], y[train], alone[train], [r for r, t in zip(rows, train) if t], first,
                         embedder_score)
        if found is None:
            return None
        refused[test] = _refuses(found, x[test], alone[test], first)
    if not scored.any():
        return None
    return _rates(list(refused[scored]), [r for r, s in zip(rows, scored) if s])


def _gain(rates: dict[str, float]) -> float:
    """What a rule's refusals are worth: the share of irrelevant requests refused less the share of relevant ones."""
    return rates["no_call"] - rates["false_refusal"]


def fit_check(rows: Sequence[RelevanceRow], embedder_threshold: float) -> CheckFit:
    """The model's check (strategies.model_check.CheckRule): a logistic regression of "a function fits" on the
    embedder rule's score and the model's yes-margin (or the yes-margin alone), then the threshold that keeps KEEP
    of the relevant rows and KEEP_PER_SOURCE of each source's (`threshold_for`, the embedder rule's keep rule,
    which bounds what it may cost relevant requests), in each of CHECK_WAYS: the check alone, or after the
    embedder's rule (`embedder_first`: what that rule refuses stays refused; the regression reads the rows it
    keeps, and the threshold keeps the share with those refusals counted); each with the raw margin and, where
    every row has it, the calibrated one (less the content-free baseline: the way's name ends ", calibrated");
    each of those alone and with the margins of each set of CHECK_MESSAGES (the questions about the message alone,
    where every row has their answers: ", message questions 1+2"), each of those without and with stage 1's "None"
    margin (where every row has it: ", stage 1's None margin"). The rule is the way with the best `_gain` on rows
    its fit did not read (`_held_out`; a tie: the fewer relevant rows refused, then raw before calibrated, the sets
    in CHECK_MESSAGES' order, without stage 1 before with it, CHECK_WAYS' order), fitted again on every row. Kept
    only when that gain is above the embedder's rule's alone. Each way's rates where every source is new to it
    (`_held_out_sources`: fitted on the other sources, as a report split holds sources no fit reads) are in the
    note beside, not read by the choice: with few sources of each kind they punish a feature that one source
    teaches, and on the 1.5B model's rows they chose a way the report did not confirm (RESULTS.md)."""
    rows = [r for r in rows if r.gate_cosine is not None and r.model_yes is not None]
    if not any(r.relevant for r in rows) or all(r.relevant for r in rows):
        raise ConfigError("the check fit needs rows of both kinds with the model's answers: rerun `prefcall fit "
                          "--relevance`")
    questions = {r.check_question or 1 for r in rows}
    if len(questions) > 1:
        raise ConfigError("the check's rows were asked with different questions: rerun `prefcall fit --relevance` "
                          "(it asks again where a row's question is not the latest)")
    kinds = {False: [r.model_yes for r in rows]}
    if all(r.model_yes_calibrated is not None for r in rows):
        kinds[True] = [r.model_yes_calibrated for r in rows]
    sets = [m for m in CHECK_MESSAGES if all(set(m) <= set(r.message_yes or {}) for r in rows)]
    y = np.asarray([float(r.relevant) for r in rows])
    alone = np.asarray([float(r.gate_cosine) < embedder_threshold for r in rows])  # type: ignore[arg-type]
    fold = _folds(rows)
    fitted_ways: dict[str, Any] = {}
    # each way's name: (CHECK_WAYS key, calibrated, message set, stage 1's None margin, message set one-sided)
    parts: dict[str, tuple[str, bool, tuple[int, ...], bool, bool]] = {}
    held_out: dict[str, dict[str, float]] = {}
    by_source: dict[str, dict[str, float]] = {}
    stages = (False, True) if all(len(r.features) == len(RELEVANCE_FEATURES) for r in rows) else (False,)
    for calibrated, margin in kinds.items():
        for messages, sided in [(m, s) for m in sets for s in ((False, True) if m else (False,))]:
            for stage_one in stages:
                x = np.asarray([model_check.features(r.gate_cosine, [m], [(r.message_yes or {})[v] for v in messages],
                                                     [r.features[NONE_MARGIN]] if stage_one else [], sided=sided)
                                for r, m in zip(rows, margin)], dtype=float)
                for name, how in CHECK_WAYS.items():
                    label = _way_name(name, calibrated, messages, stage_one, sided)
                    parts[label] = (name, calibrated, messages, stage_one, sided)
                    found = fitted_ways[label] = _fit_way(x, y, alone, rows, *how)
                    if found is not None and (rates := _held_out(x, y, alone, rows, fold, *how)) is not None:
                        held_out[label] = rates
                        if (new := _held_out_sources(x, y, alone, rows, *how)) is not None:
                            by_source[label] = new
    if not held_out:
        raise ConfigError("the check cannot be fitted on these rows: every way refuses more relevant rows than the "
                          "keep rule allows; rerun `prefcall fit --relevance` with more requests (--per-source)")
    way = max(held_out, key=lambda n: (_gain(held_out[n]), -held_out[n]["false_refusal"]))
    base, calibrated, messages, stage_one, sided = parts[way]
    first = CHECK_WAYS[base][0]
    found = fitted_ways[way]
    assert found is not None
    weights, threshold, scores = found
    fitted = _rates([s < threshold for s in scores], rows)
    other = next((n for n in CHECK_WAYS if CHECK_WAYS[n] == (not first, CHECK_WAYS[base][1])), "")
    other_found = fitted_ways.get(_way_name(other, calibrated, messages, stage_one, sided)) if other else None
    embedder = _rates(list(alone), rows)
    kept = _gain(held_out[way]) > _gain(embedder)
    why = "" if kept else (f"the embedder's rule alone refuses {embedder['no_call']:.1%} of the irrelevant tuning "
                           f"requests and {embedder['false_refusal']:.1%} of the relevant ones, the check "
                           f"{held_out[way]['no_call']:.1%} and {held_out[way]['false_refusal']:.1%} on rows its fit "
                           "did not read: it adds nothing")
    split = shares(scores, rows, threshold)
    return CheckFit(weights=weights, threshold=threshold, embedder_first=first, question=questions.pop(),
                    calibrated=calibrated, messages=list(messages), stage_one=stage_one, one_sided=sided, kept=kept,
                    why=why, way=way, auc=split["auc"], rows=len(rows), fitted=fitted, embedder=embedder,
                    other=_rates([s < other_found[1] for s in other_found[2]], rows) if other_found else {},
                    held_out=held_out, held_out_sources=by_source, sources=split["sources"])


# -- stage 1's "None" prior: the constants of fnctod.NonePrior -----------------------------------------------------
# Searched on a grid (a few hundred requests cannot place more than three constants): where the prior turns
# positive, how fast it grows and what naming a function takes off it.
PRIOR_COSINES = tuple(round(0.01 * i, 2) for i in range(0, 61))
PRIOR_SLOPES = (0.0, 2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 40.0)
PRIOR_NAMED = (0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0)


class NonePriorFit(BaseModel):
    prior: dict[str, float]  # fnctod.NonePrior fields
    hand_prior: dict[str, float]
    gate_threshold: float | None  # the embedder check's threshold the refusals were counted with
    kept: bool  # stored only when it refuses more irrelevant tuning requests and, in every source, no more relevant
    why: str = ""
    rows: int
    fitted: dict[str, float]  # "no_call" and "false_refusal", stage 1 and the embedder check together, in sample
    hand: dict[str, float]
    sources: dict[str, SourceShare] = Field(default_factory=dict)  # kept share per source with the fitted prior
    hand_sources: dict[str, SourceShare] = Field(default_factory=dict)


def prior_refusals(rows: Sequence[RelevanceRow], prior: Any, gate_threshold: float | None = None) -> np.ndarray:
    """Which rows are refused with this None prior: "None" wins stage 1, or (with `gate_threshold`) the embedder
    check refuses the answer stage 1 chose."""
    model, best, cosine, named = np.asarray([r.none_inputs for r in rows], dtype=float).T
    refused = model + prior.log_odds(cosine, named) > best
    if gate_threshold is not None:
        refused |= np.asarray([r.gate_cosine for r in rows], dtype=float) < gate_threshold
    return refused


def fit_none_prior(rows: Sequence[RelevanceRow], gate_threshold: float | None = None) -> NonePriorFit:
    """The NonePrior that refuses the most irrelevant tuning requests net of relevant ones (no-call minus false
    refusals, stage 1 and the embedder check together), among those that refuse, in every relevant source, no larger
    share than the hand-set prior does (a fitted prior may not buy abstention with a source's requests). Ties go
    to the prior closest to the hand-set one. Kept only when it refuses more irrelevant requests than the
    hand-set prior or fewer relevant ones."""
    from prefcall.strategies.fnctod import HAND_NONE_PRIOR, NonePrior

    rows = [r for r in rows if r.none_inputs is not None and (gate_threshold is None or r.gate_cosine is not None)]
    if not any(r.relevant for r in rows) or all(r.relevant for r in rows):
        raise ConfigError("the None prior fit needs stage 1 rows of both kinds (some a function fits, some none): "
                          "rerun `prefcall fit --relevance`")
    relevant = np.asarray([r.relevant for r in rows])
    sources = sorted({r.source for r in rows if r.relevant})
    masks = [relevant & np.asarray([r.source == s for r in rows]) for s in sources]

    def rates(refused: np.ndarray) -> tuple[float, float, list[float]]:
        return (float(refused[~relevant].mean()), float(refused[relevant].mean()),
                [float(refused[m].mean()) for m in masks])

    hand_refused = prior_refusals(rows, HAND_NONE_PRIOR, gate_threshold)
    hand_nc, hand_fr, hand_per = rates(hand_refused)
    scale = (0.1, 10.0, 2.0)  # what counts as near the hand-set prior, per constant
    best, best_key = HAND_NONE_PRIOR, (hand_nc - hand_fr, 0.0)
    for cosine in PRIOR_COSINES:
        for slope in PRIOR_SLOPES:
            for named in PRIOR_NAMED:
                prior = NonePrior(cosine=cosine, slope=slope, named=named)
                nc, fr, per = rates(prior_refusals(rows, prior, gate_threshold))
                if any(p > h + 1e-12 for p, h in zip(per, hand_per)):
                    continue
                distance = (abs(cosine - HAND_NONE_PRIOR.cosine) / scale[0] + abs(slope - HAND_NONE_PRIOR.slope)
                            / scale[1] + abs(named - HAND_NONE_PRIOR.named) / scale[2])
                key = (round(nc - fr, 9), -distance)
                if key > best_key:
                    best, best_key = prior, key
    refused = prior_refusals(rows, best, gate_threshold)
    fitted, hand = _rates(list(refused), rows), _rates(list(hand_refused), rows)
    kept = best != HAND_NONE_PRIOR and (fitted["no_call"] > hand["no_call"] or
                                       fitted["false_refusal"] < hand["false_refusal"])
    why = "" if kept else ("no prior on the grid refuses more irrelevant tuning requests, or fewer relevant ones, "
                           "than the hand-set prior without refusing more of some source's relevant requests")
    return NonePriorFit(prior=best.model_dump(), hand_prior=HAND_NONE_PRIOR.model_dump(), gate_threshold=gate_threshold,
                        kept=kept, why=why, rows=len(rows), fitted=fitted, hand=hand,
                        sources=shares([0.0 if r else 1.0 for r in refused], rows, 0.5)["sources"],
                        hand_sources=shares([0.0 if r else 1.0 for r in hand_refused], rows, 0.5)["sources"])
