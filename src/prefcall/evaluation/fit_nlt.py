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

from collections.abc import Callable, Sequence
from typing import Any

from prefcall.errors import ConfigError
from prefcall.evaluation import splits
from prefcall.evaluation.data import checkout_file
from prefcall.evaluation.task import EvalItem
from prefcall.evaluation.tasks.tools import load_items, message_and_history
from prefcall.strategies.nlt import Evidence, fit_rule, fit_size_terms, select_tools
from prefcall.strategies.nlt_models import DecisionRule

NLT_FILES = ("tests/data/nlt/dev.jsonl", "tests/data/nlt2/items.jsonl")
# A rule that calls the model must earn it: its exact-set accuracy on the tune items must beat the rule without
# the model by this much (in-sample gains of a few items did not carry to the other set; RESULTS.md).
MODEL_MARGIN = 0.02


def nlt_tune_items() -> list[tuple[str, EvalItem]]:
    """(file, item) for every tune item of both NLT sets, in file order."""
    out = []
    for relative in NLT_FILES:
        path = checkout_file(relative)
        keep = splits.tune_keys(path)
        if keep is None:
            raise ConfigError(f"{path} is not a source of the split file: rebuild it with `prefcall split build`")
        out += [(relative, item) for item in load_items(path) if item.id in keep]
    return out


# Decides nothing: makes select_tools compute BM25 and the cosine without asking the model (--embedder-only).
NO_MODEL = DecisionRule(model_weight=0.0, lexical_weight=1.0, embedding_weight=1.0, source="evidence only")


def collect(engine: Any, embedder: Any, items: Sequence[tuple[str, EvalItem]],
            progress: Callable[[str], None] | None = None) -> list[tuple[Evidence, set[str]]]:
    """Every kind of evidence per tool for each item (the model is asked whatever the shipped rule says; with
    `engine` None, BM25 and the cosine only)."""
    examples: list[tuple[Evidence, set[str]]] = []
    for _, item in items:
        history = [(str(r), str(t)) for r, t in item.input.get("history") or []]
        result = select_tools(engine, item.input["text"], item.input["tools"], context=item.input.get("context"),
                              history=history, embedder=embedder, all_evidence=engine is not None,
                              rule=NO_MODEL if engine is None else None)
        examples.append(({d.name: (d.model_logodds, float(d.lexical or 0.0), d.cosine) for d in result.decisions},
                         set(item.gold or [])))
        if progress is not None:
            progress(item.id)
    return examples


LIST_SIZES = (10, 50, 200)


def large_list_examples(embedder: Any, progress: Callable[[str], None] | None = None
                        ) -> list[tuple[Evidence, set[str]]]:
    """BM25 and the cosine (no model) for the tune requests of tests/data/catalogue200 against 10, 50 and 200 of
    its tools (fit_shortlist.sized)."""
    from prefcall.evaluation import fit_shortlist

    catalogue, blocks, requests = fit_shortlist.load()
    examples: list[tuple[Evidence, set[str]]] = []
    for request in requests:
        if not fit_shortlist.split_side(request["id"], "tune"):
            continue
        message, history = message_and_history(request, request["id"])
        for n in LIST_SIZES:
            result = select_tools(None, message,  # type: ignore[arg-type]
                                  fit_shortlist.sized(catalogue, blocks, request["block"], n),
                                  context=request["context"], history=history, embedder=embedder, rule=NO_MODEL)
            examples.append(({d.name: (None, float(d.lexical or 0.0), d.cosine) for d in result.decisions},
                             set(request["expected"])))
        if progress is not None:
            progress(request["id"])
    return examples


def fit(examples: Sequence[tuple[Evidence, set[str]]],
        large: Sequence[tuple[Evidence, set[str]]] = ()) -> dict[str, tuple[DecisionRule, float]]:
    """{"with_model": (rule, in-sample exact set), "without_model": ..., "embedder_only": ...}: the best rule on
    every kind of evidence (when the model was asked), the best that gives the model no weight, and the best on
    the embedder's cosine alone; the last two with their large-list terms fitted on `examples` and `large`
    (the accuracy given is on `examples`, as the first's, so that `chosen` compares like with like)."""
    source = f"prefcall fit --nlt: the tune parts of both NLT sets ({len(examples)} items)"
    asked = all(m is not None for evidence, _ in examples for m, _, _ in evidence.values())
    out = {"with_model": fit_rule(examples, source=source)} if asked else {}
    out["without_model"] = fit_rule(examples, source=source + ", model weight 0", model_weights=(0.0,))
    out["embedder_only"] = fit_rule(examples, source=source + ", the embedder's cosine alone (a baseline)",
                                    model_weights=(0.0,), lexical_weights=(0.0,))
    if large:
        note = f"; size slope and margin on these and {len(large)} lists of 10, 50 and 200 tools"
        for key in ("without_model", "embedder_only"):
            rule = out[key][0].model_copy(update={"source": out[key][0].source + note})
            fitted_rule, _ = fit_size_terms([*examples, *large], rule)
            out[key] = (fitted_rule, exact_set(fitted_rule, examples))
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
               model: str, embedder: str, note: dict[str, Any]) -> dict[str, Any]:
    """nlt_rules.json with this model's rule for this embedder (`<fingerprint>|<embedder>`) and the rule for any
    model with this embedder (`*|<embedder>`, model weight 0), each saying where it came from."""
    out = dict(base)
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
    return out
