"""`prefcall eval tools`: NLT tool selection on `{id, text, tools: [{name, description}], expected: [names], context?}`.

Data: a JSON list or JSON lines. `expected: []` means no tool should be used. Instead of `text`, a record may
carry the NLT paper's `messages: [{role, content}]` (the last one is the user's turn to decide on; earlier ones
are the conversation so far); `context` is the host's description of the setting.
Modes (--mode): score (the shipped default: calibrated YES/NO log-odds + lexical prior, fitted rule),
generate (the paper), structured (grammar-constrained JSON baseline).
Metrics: exact-set accuracy with a 95% Wilson interval (a parse error or a partial answer scores as wrong),
micro precision/recall/F1 over tool decisions, per-tool precision/recall, parse-error and partial rates, mean
tokens in/out; in score mode also the rule that would fit these items best (fit it on dev items only).
The selection metrics here are shared by the bfcl task.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from prefcall.errors import ConfigError
from prefcall.evaluation.metrics.f1 import prf
from prefcall.evaluation.task import BaseTask, EvalContext, EvalItem, ScoredItem
from prefcall.strategies.nlt import DEFAULT_MODE, MODES, NltResult, fit_rule, select_tools

NLT_MODES = MODES


# -- plain functions (usable without the harness) ------------------------------------------
def read_records(path: str | Path) -> list[dict[str, Any]]:
    """A JSON list, a single JSON object, or JSON lines."""
    text = Path(path).read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):
        return list(json.loads(text))
    try:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is neither a JSON list nor JSON lines ({exc}): fix the file") from exc


def load_items(path: str | Path, answers_path: str | Path | None = None) -> list[EvalItem]:
    items = []
    for n, record in enumerate(read_records(path)):
        if "tools" not in record or ("text" not in record and "messages" not in record):
            raise ConfigError(f"{path} record {n} lacks 'tools' or 'text'/'messages': each needs id, text or "
                              "messages, tools, expected")
        text, history = message_and_history(record, f"{path} record {n}")
        expected = list(record.get("expected") or [])
        meta = {"n_expected": len(expected), "n_tools": len(record["tools"])}
        if record.get("domain"):
            meta["domain"] = str(record["domain"])
        items.append(
            EvalItem(
                id=str(record.get("id", n)),
                input={"text": text, "tools": record["tools"], "context": record.get("context"), "history": history},
                gold=expected,
                meta=meta,
            )
        )
    return items


def message_and_history(record: dict[str, Any], where: str) -> tuple[str, list[list[str]]]:
    """The user's turn to decide on and the earlier turns as [role, text]; `text` is a single-turn record."""
    if "messages" not in record:
        return str(record["text"]), []
    messages = record["messages"]
    if not isinstance(messages, list) or not messages or not all(
        isinstance(m, dict) and m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str)
        for m in messages
    ):
        raise ConfigError(f"{where}: 'messages' must be a non-empty list of {{role: user|assistant, content}}")
    if messages[-1]["role"] != "user":
        raise ConfigError(f"{where}: the last message must be the user's turn to select tools for")
    return messages[-1]["content"], [[m["role"], m["content"]] for m in messages[:-1]]


def tokens_of(result: NltResult) -> dict[str, int]:
    usage = result.usage
    return {
        "prompt_tokens": usage.prompt_tokens,
        "evaluated": usage.evaluated,
        "reused": usage.reused,
        "completion_tokens": usage.completion_tokens,
    }


def selection_prediction(result: NltResult) -> dict[str, Any]:
    return {
        "status": result.status,
        "mode": result.mode,
        "selected": result.selected,
        "missing": result.missing,
        "unknown": result.unknown,
        "probabilities": {d.name: d.probability for d in result.decisions if d.probability is not None},
        "evidence": {d.name: [d.model_logodds, d.lexical] for d in result.decisions if d.model_logodds is not None},
        "rule": result.rule.model_dump() if result.rule else None,
        "calibration_cached": result.calibration_cached,
        "raw": result.raw_text,
        "tokens": tokens_of(result),
        "seconds": round(result.seconds, 4),
    }


def predict(item: EvalItem, engine: Any, mode: str = DEFAULT_MODE, *, threshold: float | None = None,
            calibrate: bool = True) -> dict[str, Any]:
    history = [(str(r), str(t)) for r, t in item.input.get("history") or []]
    result = select_tools(
        engine, item.input["text"], item.input["tools"], mode=mode,  # type: ignore[arg-type]
        context=item.input.get("context"), history=history, threshold=threshold, calibrate=calibrate,
    )
    return selection_prediction(result)


def selection_scores(predicted: Iterable[str] | None, gold: Iterable[str], status: str = "ok") -> dict[str, float]:
    """Exact-set match plus decision counts. Only status "ok" is exactly right (strict); `exact_set_lenient`
    also accepts a partial answer whose unanswered tools, read as NO, give the gold set. A failed parse
    predicts nothing and is wrong in both."""
    gold_set = set(gold)
    pred_set = set(predicted or []) if status in ("ok", "partial") else set()
    return {
        "exact_set": float(status == "ok" and pred_set == gold_set),
        "exact_set_lenient": float(status in ("ok", "partial") and pred_set == gold_set),
        "tp": float(len(pred_set & gold_set)),
        "fp": float(len(pred_set - gold_set)),
        "fn": float(len(gold_set - pred_set)),
    }


def score(item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
    return selection_scores(prediction.get("selected"), item.gold or [], str(prediction.get("status", "ok")))


def precision_recall(tp: float, fp: float, fn: float) -> dict[str, float]:
    """Nothing predicted and nothing expected is perfect; nothing predicted when something was expected is 0."""
    return dict(zip(("precision", "recall", "f1"), prf(tp, tp + fp, tp + fn)))


def per_tool_counts(scored: list[ScoredItem]) -> dict[str, dict[str, float]]:
    counts: dict[str, dict[str, float]] = {}
    for item in scored:
        gold = set(item.gold or [])
        pred = set(item.prediction.get("selected") or []) if item.status in ("ok", "partial") else set()
        for name in gold | pred:
            c = counts.setdefault(name, {"tp": 0.0, "fp": 0.0, "fn": 0.0})
            c["tp"] += name in gold and name in pred
            c["fp"] += name in pred and name not in gold
            c["fn"] += name in gold and name not in pred
    return counts


def wilson_interval(successes: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of a proportion; (0, 1) when there are no items."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def fitted_rule(scored: list[ScoredItem]) -> dict[str, Any] | None:
    """Score mode: the rule that fits these items best (only meaningful on the dev split), or None."""
    examples = []
    for item in scored:
        evidence = item.prediction.get("evidence") if item.status == "ok" else None
        if not evidence:
            return None
        examples.append(({n: (float(v[0]), float(v[1])) for n, v in evidence.items()}, set(item.gold or [])))
    rule, accuracy = fit_rule(examples, source=f"fitted on these {len(examples)} items (in-sample: fit on dev only)")
    return {**rule.model_dump(), "exact_set_accuracy_in_sample": accuracy}


def aggregate(scored: list[ScoredItem], *, per_tool: bool = True) -> dict[str, Any]:
    """Exact-set accuracy (95% Wilson interval), micro P/R/F1, per-tool P/R, failure rates and mean tokens."""
    n = len(scored)
    if n == 0:
        return {"n": 0, "exact_set_accuracy": 0.0}
    totals = {k: sum(i.scores.get(k, 0.0) for i in scored) for k in ("tp", "fp", "fn")}
    exact = sum(i.scores.get("exact_set", 0.0) for i in scored)
    metrics: dict[str, Any] = {"n": n, "exact_set_accuracy": exact / n,
                               "exact_set_ci95": [round(v, 4) for v in wilson_interval(exact, n)]}
    metrics["exact_set_accuracy_lenient"] = sum(i.scores.get("exact_set_lenient", 0.0) for i in scored) / n
    metrics.update(precision_recall(totals["tp"], totals["fp"], totals["fn"]))
    metrics["parse_error_rate"] = sum(i.status in ("parse_error", "error", "missing") for i in scored) / n
    metrics["partial_rate"] = sum(i.status == "partial" for i in scored) / n
    metrics.update(mean_tokens(scored))
    no_tool = [i for i in scored if not i.gold]
    if no_tool:
        metrics["no_tool_accuracy"] = sum(i.scores.get("exact_set", 0.0) for i in no_tool) / len(no_tool)
        metrics["no_tool_n"] = len(no_tool)
    fit = fitted_rule(scored)
    if fit is not None:
        metrics["fitted_rule"] = fit
    if per_tool:
        metrics["per_tool"] = {name: precision_recall(c["tp"], c["fp"], c["fn"]) for name, c in sorted(per_tool_counts(scored).items())}
    return metrics


def mean_tokens(scored: list[ScoredItem]) -> dict[str, float]:
    n = len(scored) or 1
    out = {}
    for key in ("prompt_tokens", "evaluated", "completion_tokens"):
        out[f"mean_{key}"] = sum(i.tokens.get(key, 0) for i in scored) / n
    out["mean_seconds"] = sum(float(i.prediction.get("seconds", i.latency_s) or 0.0) for i in scored) / n
    return out


# -- harness adapter ----------------------------------------------------------------------
def add_nlt_options(parser: argparse.ArgumentParser | Any) -> None:
    parser.add_argument("--threshold", type=float, default=None,
                        help="score mode: select when the decision probability > this (default: the model's fitted rule)")
    parser.add_argument("--calibrate", action=argparse.BooleanOptionalAction, default=True,
                        help="score mode: subtract the content-free baseline (default on; --no-calibrate: raw P(YES) > 0.5)")


def nlt_mode(args: argparse.Namespace, default: str = DEFAULT_MODE) -> str:
    mode = getattr(args, "mode", None) or default
    if mode not in NLT_MODES:
        raise ConfigError(f"--mode {mode!r} is not an NLT mode: use one of {', '.join(NLT_MODES)}")
    return mode


class ToolsTask(BaseTask):
    name = "tools"
    description = "NLT tool selection (--mode score|generate|structured) on {id, text|messages, tools, expected} records"
    primary_score = "exact_set"

    def add_arguments(self, parser: Any) -> None:
        add_nlt_options(parser)

    def load(self, args: argparse.Namespace) -> list[EvalItem]:
        if not getattr(args, "data", None):
            raise ConfigError("eval tools needs --data FILE (JSON list or lines of {id, text, tools, expected})")
        return load_items(args.data, getattr(args, "answers", None))

    def predict(self, item: EvalItem, ctx: EvalContext) -> dict[str, Any]:
        args = ctx.args
        return predict(item, ctx.engine, nlt_mode(args), threshold=getattr(args, "threshold", None),
                       calibrate=bool(getattr(args, "calibrate", True)))

    def score(self, item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
        return score(item, prediction)

    def aggregate(self, items: list[ScoredItem]) -> dict[str, Any]:
        return aggregate(items)


TASK = ToolsTask()
