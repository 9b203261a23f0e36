"""`prefcall eval acebench`: ACEBench (English) special and preference items, decided by QwN `clarify`.

Data: JSON lines `{id, question: "user: ...", function: [...], time?, profile?}`; gold in
`possible_answer/<same name>`, found beside --data when --answers is not given:
- special_incomplete: `{fn: [missing parameter names]}` -> gold decision "question";
- special_irrelevant: a refusal sentence -> gold decision "limitation";
- normal_preference: `{fn: {arg: value}}` (values come from the user's `profile`) -> gold decision "continue".

Metrics: decision accuracy (call / ask / refuse; a parse error is wrong), missing-parameter recall on
incomplete items (gold names found among the arguments the question names), the decision confusion
counts, and with --with-calls on preference items the drafted call's function and argument accuracy.
--mode picks the clarify policy: combined (default), model (the paper alone) or evidence.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from prefcall.errors import ConfigError, PrefcallError
from prefcall.evaluation.metrics.normalise import normalise_argument
from prefcall.evaluation.task import BaseTask, EvalContext, EvalItem, ScoredItem
from prefcall.evaluation.tasks import tools as selection
from prefcall.schemas.importers import import_catalogue
from prefcall.schemas.model import Catalogue, Function, Turn
from prefcall.strategies.qwn import clarify
from prefcall.strategies.qwn_draft import draft_call

POLICIES = ("combined", "model", "evidence")
_SPEAKER_RE = re.compile(r"^(user|assistant|system)\s*:\s*", re.IGNORECASE | re.MULTILINE)


# -- loading ---------------------------------------------------------------------------------
def parse_dialogue(question: str) -> list[Turn]:
    """'user: ...\\nassistant: ...' text into turns; text without a speaker is one user turn."""
    parts = _SPEAKER_RE.split(question.strip())
    if len(parts) < 3:
        return [Turn(role="user", content=question.strip())]
    turns = []
    for role, content in zip(parts[1::2], parts[2::2]):
        turns.append(Turn(role=role.lower(), content=content.strip()))
    return turns


def gold_of(category: str, answer: Any) -> dict[str, Any]:
    if category == "special_incomplete":
        missing = {fn: [str(p).strip() for p in params] for fn, params in (answer or {}).items()}
        return {"decision": "question", "missing": missing}
    if category == "special_irrelevant":
        return {"decision": "limitation"}
    if category == "normal_preference":
        return {"decision": "continue", "calls": answer or {}}
    raise ConfigError(f"unknown ACEBench category {category!r}: use special_incomplete, special_irrelevant or normal_preference")


def category_of(item_id: str) -> str:
    return re.sub(r"_\d+$", "", item_id)


def load_items(path: str | Path, answers_path: str | Path | None = None) -> list[EvalItem]:
    records = selection.read_records(path)
    answers_file = Path(answers_path) if answers_path else Path(path).parent / "possible_answer" / Path(path).name
    if not answers_file.is_file():
        raise ConfigError(f"no ACEBench answers at {answers_file}: pass --answers possible_answer/<file>")
    answers = {str(r["id"]): r["ground_truth"] for r in selection.read_records(answers_file)}
    items = []
    for record in records:
        item_id = str(record["id"])
        category = category_of(item_id)
        items.append(
            EvalItem(
                id=item_id,
                input={
                    "question": record["question"],
                    "functions": record["function"],
                    "time": record.get("time") or None,
                    "profile": record.get("profile") or None,
                },
                gold=gold_of(category, answers.get(item_id)),
                meta={"category": category, "n_functions": len(record["function"])},
            )
        )
    return items


def catalogue_of(functions: list[dict[str, Any]]) -> Catalogue:
    """The imported catalogue; the raw functions when the importer rejects them."""
    try:
        return import_catalogue(functions, name="acebench", format="functions")
    except PrefcallError:
        return Catalogue(name="acebench", functions=[Function.model_validate(f) for f in functions])


# -- predict and score ------------------------------------------------------------------------
def predict(item: EvalItem, engine: Any, mode: str = "combined", *, embedder: Any = None, with_calls: bool = False) -> dict[str, Any]:
    catalogue = catalogue_of(item.input["functions"])
    instructions = [f"User profile: {item.input['profile'].strip()}"] if item.input.get("profile") else []
    result = clarify(
        engine, parse_dialogue(item.input["question"]), catalogue, instructions=instructions,
        context=item.input.get("time"), policy=mode, embedder=embedder,  # type: ignore[arg-type]
    )
    tokens = selection.tokens_of(result)  # ClarifyResult has the same usage fields as NltResult
    prediction: dict[str, Any] = {
        "status": result.status,
        "decision": result.decision,
        "question": result.question,
        "missing": [m.argument for m in result.missing_arguments],
        "model_said": result.model_said,
        "evidence": result.evidence,
        "draft": result.draft.model_dump() if result.draft else None,
        "tokens": tokens,
        "seconds": round(result.seconds, 4),
    }
    if with_calls and result.decision == "continue" and item.meta.get("category") == "normal_preference":
        draft = draft_call(engine, parse_dialogue(item.input["question"]), catalogue, instructions=instructions,
                           keep_required=True)
        for key in tokens:
            tokens[key] += int(getattr(draft.usage, key, 0))
        prediction["call"] = draft.call.model_dump() if draft.call else None
    return prediction


def missing_recall(predicted: list[str], gold: dict[str, list[str]]) -> float:
    """Share of gold missing-parameter names the question asked about; 1.0 when gold names none."""
    gold_names = {n.lower() for names in gold.values() for n in names}
    if not gold_names:
        return 1.0
    return len(gold_names & {p.lower() for p in predicted}) / len(gold_names)


def argument_scores(call: dict[str, Any] | None, gold_calls: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Function-name match and the share of gold arguments given with the gold value (normalised)."""
    if not gold_calls:
        return {"function_match": float(call is None), "argument_accuracy": float(call is None)}
    gold_name, gold_args = next(iter(gold_calls.items()))
    if not call or call.get("name") != gold_name:
        return {"function_match": 0.0, "argument_accuracy": 0.0}
    arguments = call.get("arguments") or {}
    right = sum(k in arguments and normalise_argument(arguments[k]) == normalise_argument(v)
                for k, v in gold_args.items())
    return {"function_match": 1.0, "argument_accuracy": right / len(gold_args) if gold_args else 1.0}


def score(item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
    gold = item.gold or {}
    ok = prediction.get("status", "ok") == "ok"
    decided = prediction.get("decision") if ok else None
    scores = {"decision_correct": float(decided == gold.get("decision"))}
    if "missing" in gold:
        asked = prediction.get("missing") or [] if decided == "question" else []
        scores["missing_recall"] = missing_recall(asked, gold["missing"])
    if "calls" in gold and "call" in prediction:
        scores.update(argument_scores(prediction.get("call") if ok else None, gold["calls"]))
    return scores


def aggregate(scored: list[ScoredItem]) -> dict[str, Any]:
    n = len(scored)
    if n == 0:
        return {"n": 0, "decision_accuracy": 0.0}
    metrics: dict[str, Any] = {"n": n, "decision_accuracy": sum(i.scores.get("decision_correct", 0.0) for i in scored) / n}
    for key in ("missing_recall", "function_match", "argument_accuracy"):
        values = [i.scores[key] for i in scored if key in i.scores]
        if values:
            metrics[key] = sum(values) / len(values)
    by_category: dict[str, list[float]] = {}
    confusion: dict[str, int] = {}
    for item in scored:
        by_category.setdefault(str(item.meta.get("category")), []).append(item.scores.get("decision_correct", 0.0))
        said = item.prediction.get("decision") if item.status == "ok" else item.status
        pair = f"{(item.gold or {}).get('decision')}->{said}"
        confusion[pair] = confusion.get(pair, 0) + 1
    metrics["decision_accuracy_by_category"] = {c: sum(v) / len(v) for c, v in sorted(by_category.items())}
    metrics["confusion"] = dict(sorted(confusion.items()))
    metrics["parse_error_rate"] = sum(i.status != "ok" for i in scored) / n
    metrics.update(selection.mean_tokens(scored))
    return metrics


class AceBenchTask(BaseTask):
    name = "acebench"
    description = "ACEBench: QwN clarify decisions (--mode combined|model|evidence) and missing-parameter recall"
    primary_score = "decision_correct"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--embedder-relevance", action="store_true",
                            help="judge relevance by embedding similarity instead of NLT scoring")
        parser.add_argument("--with-calls", action="store_true", help="preference items: also draft the call and score its arguments")

    def load(self, args: argparse.Namespace) -> list[EvalItem]:
        if not getattr(args, "data", None):
            raise ConfigError("eval acebench needs --data data_<category>.json (answers are found in possible_answer/)")
        return load_items(args.data, getattr(args, "answers", None))

    def predict(self, item: EvalItem, ctx: EvalContext) -> dict[str, Any]:
        args = ctx.args
        mode = getattr(args, "mode", None) or "combined"
        if mode not in POLICIES:
            raise ConfigError(f"--mode {mode!r}: use one of {', '.join(POLICIES)}")
        embedder = ctx.embedder if getattr(args, "embedder_relevance", False) else None
        return predict(item, ctx.engine, mode, embedder=embedder, with_calls=bool(getattr(args, "with_calls", False)))

    def score(self, item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
        return score(item, prediction)

    def aggregate(self, items: list[ScoredItem]) -> dict[str, Any]:
        return aggregate(items)


TASK = AceBenchTask()
