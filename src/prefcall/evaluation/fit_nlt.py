"""`prefcall fit --nlt`: fit select_tools_nlt's decision rule on the tune parts of both NLT sets.

The two sets (tests/data/nlt: hand-written, one author; tests/data/nlt2: converted from BFCL, SGD and NLSI plus
IDE, home and telecom catalogues written apart) are each split in the frozen split file; the fit reads their tune
parts only, so both report parts stay unread. Every item runs score mode with all evidence recorded (the model's
calibrated YES/NO log-odds, BM25, the embedder's cosine), then `strategies.nlt.fit_rule` picks the weights and
threshold with the best exact-set accuracy, three times: with every kind of evidence, with the model's weight held
at 0 (a rule any model can use with this embedder, and one that never calls the model), and with the embedder's
cosine alone (the baseline every selection report prints beside the shipped rule: `baseline|<embedder>`).
`--embedder-only` does not ask the model: the last two only.

The two rules that do not weigh the model then get their large-list terms (DecisionRule.size_slope and margin):
fitted on the same items plus the tune requests of tests/data/catalogue200 against 10, 50 and 200 of its tools
(no model is asked for those), so that a rule fitted on ten-tool lists keeps its precision on 200.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prefcall.errors import ConfigError
from prefcall.evaluation import splits
from prefcall.evaluation.data import checkout_file, read_resumable
from prefcall.evaluation.task import EvalItem
from prefcall.evaluation.tasks.tools import load_items, message_and_history
from prefcall.strategies.nlt import MODEL_WEIGHTS, Evidence, fit_rule, fit_size_terms, select_tools
from prefcall.strategies.nlt_models import OWN_RULE_FROM, DecisionRule

SETS = {"nlt": "tests/data/nlt/dev.jsonl", "nlt2": "tests/data/nlt2/items.jsonl",
        "select": "tests/data/select/items.jsonl"}
# What the rules without a model are fitted on (`prefcall fit --nlt --nlt-sets`): both NLT sets. With the selection
# sets' tune items as well the embedder's rule fitted them better and the NLT report set worse (RESULTS.md, ninth
# session), so they stay out of that fit. The 1.5B model's own rule reads all three (`--nlt-sets nlt,nlt2,select`,
# eighteenth session): on the selection sets alone its YES/NO earns no weight, on the NLT sets alone a large one.
DEFAULT_SETS = ("nlt", "nlt2")
NLT_FILES = tuple(SETS[name] for name in DEFAULT_SETS)
# The selection sets' items a fit reads when asked to: one, none and two of at most ten tools (larger lists are
# the large-list terms' business).
SELECT_SETS, SELECT_MAX_TOOLS = ("one", "none", "two"), 10
# A rule that calls the model must earn it: its exact-set accuracy on the tune items must beat the rule without
# the model by this much (in-sample gains of a few items did not carry to the other set; RESULTS.md).
MODEL_MARGIN = 0.02


def nlt_tune_items(sets: Sequence[str] = DEFAULT_SETS, subset: int | None = None) -> list[tuple[str, EvalItem]]:
    """(file, item) for every tune item of the named sets (SETS; default both NLT sets), in file order; `subset`
    keeps every k-th item of each set so that at most that many remain (a quick fit of a large model on a CPU)."""
    unknown = [name for name in sets if name not in SETS]
    if unknown:
        raise ConfigError(f"--nlt-sets: unknown set {unknown[0]!r}; choose from {', '.join(SETS)}")
    out = []
    for relative in (SETS[name] for name in sets):
        path = checkout_file(relative)
        keep = splits.tune_keys(path)
        if keep is None:
            raise ConfigError(f"{path} is not a source of the split file: rebuild it with `prefcall split build`")
        items = [item for item in load_items(path) if item.id in keep]
        if relative == SETS["select"]:
            items = [i for i in items if i.meta.get("set") in SELECT_SETS and int(i.meta["n"]) <= SELECT_MAX_TOOLS]
        if subset is not None and 0 < subset < len(items):
            step = len(items) / subset
            items = [items[int(i * step)] for i in range(subset)]
        out += [(relative, item) for item in items]
    return out


# Decides nothing: makes select_tools compute BM25 and the cosine without asking the model (--embedder-only).
NO_MODEL = DecisionRule(model_weight=0.0, lexical_weight=1.0, embedding_weight=1.0, source="evidence only")


def collect(engine: Any, embedder: Any, items: Sequence[tuple[str, EvalItem]],
            progress: Callable[[str], None] | None = None, *, by_sentence: bool = False,
            cache: Path | None = None) -> list[tuple[Evidence, set[str]]]:
    """Every kind of evidence per tool for each item (the model is asked whatever the shipped rule says; with
    `engine` None, BM25 and the cosine only); `by_sentence`: the cosine of the request's best sentence.

    `cache`: a JSON-lines file of the evidence already collected for this model (one row per item: its file, id
    and evidence). Items found there are not asked again and new ones are appended, so an interrupted fit resumes
    and a refit reads the model's answers instead of asking it again."""
    done = read_evidence(cache) if cache is not None else {}
    # an interrupted write left a line without its end: the next row starts on a line of its own
    torn = cache is not None and cache.exists() and not cache.read_bytes().endswith(b"\n") and \
        cache.stat().st_size > 0
    examples: list[tuple[Evidence, set[str]]] = []
    for relative, item in items:
        evidence = done.get((relative, item.id))
        if evidence is None:
            history = [(str(r), str(t)) for r, t in item.input.get("history") or []]
            # the cosine asked for, whatever the model's shipped rule reads (`all_evidence` asks the model anyway)
            rule = NO_MODEL.model_copy(update={"sentence_cosine": by_sentence})
            result = select_tools(engine, item.input["text"], item.input["tools"], context=item.input.get("context"),
                                  history=history, embedder=embedder, all_evidence=engine is not None, rule=rule)
            evidence = {d.name: (d.model_logodds, float(d.lexical or 0.0), d.cosine) for d in result.decisions}
            if cache is not None:
                with cache.open("a", encoding="utf-8") as handle:
                    handle.write(("\n" if torn else "") + json.dumps({"file": relative, "id": item.id,
                                             "evidence": {k: list(v) for k, v in evidence.items()}}) + "\n")
                torn = False
        examples.append((evidence, set(item.gold or [])))
        if progress is not None:
            progress(item.id)
    return examples


def read_evidence(path: Path) -> dict[tuple[str, str], Evidence]:
    """(file, item id) -> evidence from a `collect` cache; a missing file reads as empty, a torn last line (an
    interrupted write) is skipped."""
    def parse(line: str) -> tuple[tuple[str, str], Evidence]:
        row = json.loads(line)
        return (row["file"], row["id"]), {k: (v[0], float(v[1]), v[2]) for k, v in row["evidence"].items()}

    return dict(read_resumable(path, parse))


def with_sentence_cosine(asked: Examples, sentence: Examples) -> list[tuple[Evidence, set[str]]]:
    """The model's log-odds from `asked` with the best sentence's cosine from `sentence` (the same items in the
    same order, collected without the model): the evidence of a rule that weighs the model beside that cosine."""
    return [({name: (m, lex, sentence_evidence[name][2]) for name, (m, lex, _) in evidence.items()}, gold)
            for (evidence, gold), (sentence_evidence, _) in zip(asked, sentence, strict=True)]


LIST_SIZES = (10, 50, 200)
# One list of a large-list fit: each tool's evidence (of the tools the model was asked about, where a shortlist
# reached it; of every tool otherwise), the tools it needs, and the list's size.
SizedList = tuple[Evidence, set[str], int]


def large_list_examples(embedder: Any, progress: Callable[[str], None] | None = None, *,
                        by_sentence: bool = False, engine: Any = None, cache: Path | None = None,
                        paged: bool = False, pages: tuple[int, int] | None = None) -> list[SizedList]:
    """The evidence of the tune requests of tests/data/catalogue200 against 10, 50 and 200 of its tools
    (fit_shortlist.sized): BM25 and the cosine of every tool, or with `engine` the model's calibrated log-odds
    beside them for the tools its shortlist (the size fitted for the embedder) let it be asked about, as
    select_tools asks it; the tools the shortlist left out keep their BM25 and cosine, with no log-odds (None).
    `cache` (with `engine`): a JSON-lines file of the model's answers for the lists already asked (one row per
    request and size), read first and appended to, so that an interrupted fit resumes. `paged`: the model is asked
    page by page (DecisionRule.paged), `pages` (size, seeds) the geometry (None: the embedder's)."""
    from prefcall.evaluation import fit_shortlist

    catalogue, blocks, requests = fit_shortlist.load()
    done = read_sized(cache) if cache is not None and engine is not None else {}
    examples: list[SizedList] = []
    for request in requests:
        if not fit_shortlist.split_side(request["id"], "tune"):
            continue
        message, history = message_and_history(request, request["id"])
        for n in LIST_SIZES:
            listed = fit_shortlist.sized(catalogue, blocks, request["block"], n)
            rule = NO_MODEL.model_copy(update={"sentence_cosine": by_sentence, "paged": paged,
                                               "page_size": pages[0] if pages else None,
                                               "page_seeds": pages[1] if pages else None})
            plain = select_tools(None, message, listed, context=request["context"],  # type: ignore[arg-type]
                                 history=history, embedder=embedder, rule=rule)
            evidence = {d.name: (None, float(d.lexical or 0.0), d.cosine) for d in plain.decisions}
            if engine is not None:
                asked = done.get((request["id"], n))
                if asked is None:
                    result = select_tools(engine, message, listed, context=request["context"], history=history,
                                          embedder=embedder, all_evidence=True, rule=rule)
                    asked = {d.name: (d.model_logodds, float(d.lexical or 0.0), d.cosine)
                             for d in result.decisions if d.shortlisted}
                    if cache is not None:
                        with cache.open("a", encoding="utf-8") as handle:
                            handle.write(json.dumps({"id": request["id"], "size": n,
                                                     "evidence": {k: list(v) for k, v in asked.items()}}) + "\n")
                evidence.update(asked)
            examples.append((evidence, set(request["expected"]), n))
        if progress is not None:
            progress(request["id"])
    return examples


def tune_large_requests() -> list[str]:
    """The ids of the tune requests of tests/data/catalogue200 (what the large-list fits read)."""
    from prefcall.evaluation import fit_shortlist

    return [r["id"] for r in fit_shortlist.load()[2] if fit_shortlist.split_side(r["id"], "tune")]


def read_sized(path: Path) -> dict[tuple[str, int], Evidence]:
    """(request id, list size) -> evidence from a large_list_examples cache; a missing file reads as empty, a torn
    last line is skipped."""
    def parse(line: str) -> tuple[tuple[str, int], Evidence]:
        row = json.loads(line)
        return (row["id"], int(row["size"])), {k: (v[0], float(v[1]), v[2]) for k, v in row["evidence"].items()}

    return dict(read_resumable(path, parse))


def with_size_terms(rule: DecisionRule, examples: Examples, lists: Sequence[SizedList]) -> DecisionRule:
    """`rule` with its large-list terms fitted (strategies.nlt.fit_size_terms) on `examples` and `lists`, its
    weights and threshold kept."""
    said = f"; size slope and margin on these and {len(lists)} lists of 10, 50 and 200 tools"
    rule = rule.model_copy(update={"source": rule.source.replace(said, "") + said})
    fitted, _ = fit_size_terms([*examples, *((e, g) for e, g, _ in lists)], rule,
                               sizes=[None] * len(examples) + [n for _, _, n in lists])
    return fitted


def large_list_accuracy(rule: DecisionRule, lists: Sequence[SizedList]) -> dict[int, float]:
    """The rule's exact-set accuracy on the lists of each size."""
    out: dict[int, float] = {}
    for n in sorted({size for _, _, size in lists}):
        chosen = [(e, g) for e, g, size in lists if size == n]
        out[n] = round(sum(rule.decide(e, n) == g for e, g in chosen) / len(chosen), 4)
    return out


# Each way of deciding large lists is kept only where it beats the simpler one on held-out requests (FOLDS folds
# by request, each fitted on the others): size terms against none, then a rule of its own against what was kept.
# It must win by LARGE_RULE_MARGIN in exact set, and by more than chance: of the held-out lists one of the two
# gets right and the other wrong, it must win at least twice the square root of their number more often than it
# loses (a sign test at about 5%). In-sample gains of a few requests did not carry to the report requests, either
# way (RESULTS.md, thirty-first session).
LARGE_RULE_MARGIN = 0.02
FOLDS = 5
WAYS = ("none", "size_terms", "own_rule")


def request_groups(lists: Sequence[SizedList]) -> list[int]:
    """Which request each list belongs to: large_list_examples gives each request's lists in a row, smallest first."""
    smallest = min(n for _, _, n in lists)
    groups, current = [], -1
    for _, _, n in lists:
        current += n == smallest
        groups.append(max(current, 0))
    return groups


def held_out_large(rule: DecisionRule, lists: Sequence[SizedList], way: str) -> list[bool]:
    """Right or not, for each list of OWN_RULE_FROM tools or more (the large lists every way is compared on), in the
    order of `lists`, decided by `rule` (without large-list terms) as it is (way "none"), with its size terms
    ("size_terms") or with its size terms and a rule of its own ("own_rule") fitted on the other folds' requests."""
    groups = request_groups(lists)
    right: dict[int, bool] = {}
    for fold in range(FOLDS):
        train = [x for x, g in zip(lists, groups) if g % FOLDS != fold]
        test = [i for i, g in enumerate(groups) if g % FOLDS == fold and lists[i][2] >= OWN_RULE_FROM]
        if not test or not any(n >= OWN_RULE_FROM for _, _, n in train):
            continue
        fitted = rule if way == "none" else with_size_terms(rule, [], train)
        if way == "own_rule":
            fitted = fit_large_rule(fitted, train)[0]
        right.update({i: fitted.decide(lists[i][0], lists[i][2]) == lists[i][1] for i in test})
    return [right[i] for i in sorted(right)]


def _beats(better: Sequence[bool], simpler: Sequence[bool]) -> tuple[bool, int, int]:
    """Whether `better` beats `simpler` on the same held-out lists (margin and sign test), with its wins and losses."""
    wins = sum(b and not s for b, s in zip(better, simpler))
    losses = sum(s and not b for b, s in zip(better, simpler))
    return (bool(better) and (wins - losses) / len(better) >= LARGE_RULE_MARGIN
            and wins - losses >= 2 * math.sqrt(wins + losses)), wins, losses


def for_large_lists(rule: DecisionRule, examples: Examples, lists: Sequence[SizedList]
                    ) -> tuple[DecisionRule, dict[str, Any]]:
    """A rule made ready for large lists from its evidence on `lists` (the model's answers, where it weighs the
    model): as it is, with its size terms (with_size_terms), or with a rule of its own for them (fit_large_rule),
    each kept only where it beats the simpler one held out (above). Returns the rule and each way's exact set per
    list size in sample and held out on the lists of OWN_RULE_FROM tools or more."""
    start = rule.model_copy(update={"size_slope": 0.0, "margin": None, "large": None})
    terms = with_size_terms(start, examples, lists)
    own, _ = fit_large_rule(terms, lists)
    held = {way: held_out_large(start, lists, way) for way in WAYS}
    kept, tests = "none", {}
    for way in WAYS[1:]:
        won, wins, losses = _beats(held[way], held[kept])
        tests[f"{way}_against_{kept}"] = {"wins": wins, "losses": losses, "kept": won}
        kept = way if won else kept
    chosen = {"none": start, "size_terms": terms, "own_rule": own}[kept]
    report = {"none": large_list_accuracy(start, lists),
              "size_terms": large_list_accuracy(terms, lists), "own_rule": large_list_accuracy(own, lists),
              "held_out_large_lists": {"lists": len(held["none"]),
                                       **{w: round(sum(h) / len(h), 4) if h else None for w, h in held.items()},
                                       **tests},
              "kept": kept}
    return chosen, report


def fit_large_rule(rule: DecisionRule, lists: Sequence[SizedList]) -> tuple[DecisionRule, float]:
    """`rule` with a rule of its own for large lists (DecisionRule.large): the weights and threshold with the best
    exact-set accuracy on the lists of OWN_RULE_FROM tools or more (strategies.nlt.fit_rule, each model
    weight tried on the tools that weight lets it select: with the model, the shortlist it was asked about), then
    its size terms. Ties go to the rule that does not ask the model. Returns the rule and that accuracy."""
    large = [(e, g, n) for e, g, n in lists if n >= OWN_RULE_FROM]
    if not large:
        raise ConfigError(f"no list of {OWN_RULE_FROM} tools or more to fit a large-list rule on")
    source = f"prefcall fit --nlt --large-lists: its own weights on {len(large)} lists of {OWN_RULE_FROM} tools or more"
    best: tuple[tuple[float, float], DecisionRule] | None = None
    for weight in MODEL_WEIGHTS:
        probe = DecisionRule(model_weight=weight, source=source)
        if weight and any(all(v[0] is None for v in e.values()) for e, _, _ in large):
            continue  # the model was not asked about these lists
        found, _ = fit_rule([(probe.eligible(e), g) for e, g, _ in large], source=source, model_weights=(weight,))
        # asked as the lists it was fitted on were asked (page by page or one shortlist)
        found = found.model_copy(update={"sentence_cosine": rule.sentence_cosine, "paged": rule.paged,
                                         "page_size": rule.page_size, "page_seeds": rule.page_seeds})
        found, _ = fit_size_terms([(e, g) for e, g, _ in large], found, sizes=[n for _, _, n in large])
        exact = sum(found.decide(e, n) == g for e, g, n in large) / len(large)
        key = (exact, -weight)
        if best is None or key > best[0]:
            best = (key, found)
    assert best is not None
    return rule.model_copy(update={"large": best[1]}), best[0][0]


Examples = Sequence[tuple[Evidence, set[str]]]


def fit(examples: Examples, large: Sequence[SizedList] = (), *,
        by_sentence: tuple[Examples, Sequence[SizedList]] | None = None
        ) -> dict[str, tuple[DecisionRule, float]]:
    """{"with_model": (rule, in-sample exact set), "without_model": ..., "embedder_only": ...}: the best rule on
    every kind of evidence (when the model was asked), the best that gives the model no weight, and the best on
    the embedder's cosine alone; the last two with their large-list terms fitted on `examples` and `large`
    (the accuracy given is on `examples`, as the first's, so that `chosen` compares like with like).

    `by_sentence`: the same items and lists with the cosine of the request's best sentence
    (DecisionRule.sentence_cosine); each of the last two rules takes the cosine that fits the tune items better
    (a tie keeps the whole request's)."""
    source = f"prefcall fit --nlt: the tune parts of its sets ({len(examples)} items)"
    asked = all(m is not None for evidence, _ in examples for m, _, _ in evidence.values())
    out: dict[str, tuple[DecisionRule, float]] = {}
    if asked:
        out["with_model"] = fit_rule(examples, source=source)
        if by_sentence:  # the model beside the best sentence's cosine; a tie keeps the whole request's
            rule, accuracy = fit_rule(with_sentence_cosine(examples, by_sentence[0]),
                                      source=source + "; the cosine of the request's best sentence")
            if accuracy > out["with_model"][1]:
                out["with_model"] = (rule.model_copy(update={"sentence_cosine": True}), accuracy)
    kinds = {"without_model": (", model weight 0", {"model_weights": (0.0,)}),
             "embedder_only": (", the embedder's cosine alone (a baseline)",
                               {"model_weights": (0.0,), "lexical_weights": (0.0,)})}
    variants = [(False, examples, large)] + ([(True, *by_sentence)] if by_sentence else [])
    for key, (label, grid) in kinds.items():
        best: tuple[DecisionRule, float] | None = None
        for sentence, items, lists in variants:
            rule, _ = fit_rule(items, source=source + label + ("; the cosine of the request's best sentence"
                                                               if sentence else ""), **grid)
            rule = rule.model_copy(update={"sentence_cosine": sentence})
            if lists:  # the rule without the model: the large-list way that holds out; the baseline: size terms
                rule = for_large_lists(rule, items, lists)[0] if key == "without_model" else \
                    with_size_terms(rule, items, lists)
            accuracy = exact_set(rule, items)
            if best is None or accuracy > best[1]:
                best = (rule, accuracy)
        assert best is not None
        out[key] = best
    return out


def exact_set(rule: DecisionRule, examples: Sequence[tuple[Evidence, set[str]]]) -> float:
    """The rule's exact-set accuracy on the examples."""
    hits = sum(rule.decide(evidence) == gold for evidence, gold in examples)
    return hits / len(examples) if examples else 0.0


def chosen(fitted: dict[str, tuple[DecisionRule, float]]) -> DecisionRule:
    """The rule to ship for this model: with the model only when it beats the rule without by MODEL_MARGIN."""
    without, b = fitted["without_model"]
    if "with_model" not in fitted:
        return without
    with_model, a = fitted["with_model"]
    return with_model if with_model.model_weight and a >= b + MODEL_MARGIN else without


def rules_file(base: dict[str, Any], fitted: dict[str, tuple[DecisionRule, float]], fingerprint: str | None,
               model: str, embedder: str, note: dict[str, Any], *, model_only: bool = False) -> dict[str, Any]:
    """nlt_rules.json with this model's rule for this embedder (`<fingerprint>|<embedder>`) and the rule for any
    model with this embedder (`*|<embedder>`, model weight 0), each saying where it came from. `model_only`: write
    the model's own rule alone (a fit with a model does not try the best sentence's cosine, which only the fit
    without one does, so it leaves the rules without the model as they are)."""
    out = dict(base)
    if model_only:
        if fingerprint and "with_model" in fitted:
            rule = chosen(fitted)
            accuracy = fitted["with_model" if rule is fitted["with_model"][0] else "without_model"][1]
            out[f"{fingerprint}|{embedder}"] = {"model": model, **rule.model_dump(),
                                                "exact_set_in_sample": round(accuracy, 4), "fit": note}
        return out
    without, without_accuracy = fitted["without_model"]
    earlier = out.get(f"*|{embedder}") or {}
    if any(earlier.get(k) != v for k, v in without.model_dump(exclude={"source"}).items()):  # a rule that changed
        out[f"*|{embedder}"] = {"model": f"any model, with the embedder {embedder}", **without.model_dump(),
                                "exact_set_in_sample": round(without_accuracy, 4), "fit": note}
    if "embedder_only" in fitted:
        baseline, baseline_accuracy = fitted["embedder_only"]
        out[f"baseline|{embedder}"] = {"model": f"none: the embedder {embedder} with its fitted threshold, the "
                                                "baseline of every selection report", **baseline.model_dump(),
                                       "exact_set_in_sample": round(baseline_accuracy, 4), "fit": note}
    if fingerprint and "with_model" in fitted:
        rule = chosen(fitted)
        accuracy = fitted["with_model" if rule is fitted["with_model"][0] else "without_model"][1]
        out[f"{fingerprint}|{embedder}"] = {"model": model, **rule.model_dump(),
                                            "exact_set_in_sample": round(accuracy, 4), "fit": note}
    # A model whose own fit gave it no weight (the model earned nothing over BM25 and the cosine) decides by the
    # rule without the model: it takes the new one, which says so (its earlier fit stays named in `model_fit`).
    for key, entry in base.items():
        if key.endswith(f"|{embedder}") and not key.startswith(("*|", "baseline|")) and \
                key != f"{fingerprint}|{embedder}" and isinstance(entry, dict) and not entry.get("model_weight"):
            out[key] = {"model": entry.get("model", key.split("|")[0]), **without.model_dump(),
                        "exact_set_in_sample": round(without_accuracy, 4), "fit": note,
                        "model_fit": entry.get("model_fit") or {
                            "why": "its fit gave the model weight 0, so it decides by the rule without the model",
                            "fit": entry.get("fit")}}
    return out
