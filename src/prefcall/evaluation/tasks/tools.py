"""`prefcall eval tools`: NLT tool selection on `{id, text, tools: [{name, description}], expected: [names], context?}`.

Data: a JSON list or JSON lines. `expected: []` means no tool should be used. Instead of `text`, a record may
carry the NLT paper's `messages: [{role, content}]` (the last one is the user's turn to decide on; earlier ones
are the conversation so far); `context` is the host's description of the setting.
Modes (--mode): score (the shipped default: calibrated YES/NO log-odds + lexical prior, fitted rule),
generate (the paper), structured (grammar-constrained JSON baseline).
Metrics: exact-set accuracy with a 95% Wilson interval (a parse error or a partial answer scores as wrong),
micro precision/recall/F1 over tool decisions, per-tool precision/recall, parse-error and partial rates, mean
tokens in/out; in score mode also the rule that would fit these items best (fit it on dev items only).
Baselines on the same items, in the same run, whenever an embedder is loaded (`baselines/...`): BM25 top-k and the
embedder's top-k with k the gold count (oracles: they are told how many tools to pick; items with a gold tool
only), and the embedder with its fitted threshold (every tool whose cosine passes the embedder-only rule that
`prefcall fit --nlt` fitted on the tune parts: `baseline|<embedder>` in data/nlt_rules.json). `model_based` says
whether the rule that decided weighs the model.
The selection metrics here are shared by the bfcl task.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from prefcall.errors import ConfigError
from prefcall.evaluation.metrics.f1 import prf
from prefcall.evaluation.metrics.intervals import Metric, clustered_mean, mean, micro, proportion
from prefcall.evaluation.task import BaseTask, EvalContext, EvalItem, ScoredItem
from prefcall.strategies.nlt import baseline_rule, embedding_scores, fit_rule, lexical_scores, select_tools
from prefcall.strategies.nlt_models import DEFAULT_MODE, MODES, DecisionRule, NltResult, as_tool_specs

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
        # a selection-set item's kind, catalogue size and injected tool (tests/data/select)
        meta.update({k: record[k] for k in ("set", "n", "injected") if k in record})
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
        "evidence": {d.name: [d.model_logodds, d.lexical, d.cosine] for d in result.decisions
                     if d.lexical is not None},
        "decided_by": result.evidence,
        "rule": result.rule.model_dump() if result.rule else None,
        "calibration_cached": result.calibration_cached,
        "raw": result.raw_text,
        "tokens": tokens_of(result),
        "seconds": round(result.seconds, 4),
    }


def predict(item: EvalItem, engine: Any, mode: str = DEFAULT_MODE, *, threshold: float | None = None,
            calibrate: bool = True, rule: DecisionRule | None = None, embedder: Any = None,
            all_evidence: bool = False, baseline_embedder: Any = None) -> dict[str, Any]:
    history = [(str(r), str(t)) for r, t in item.input.get("history") or []]
    result = select_tools(
        engine, item.input["text"], item.input["tools"], mode=mode,  # type: ignore[arg-type]
        context=item.input.get("context"), history=history, threshold=threshold, calibrate=calibrate, rule=rule,
        embedder=embedder, all_evidence=all_evidence,
    )
    prediction = selection_prediction(result)
    if baseline_embedder is not None:
        prediction["baseline_evidence"] = baseline_evidence(item, baseline_embedder)
    return prediction


# -- retrieval baselines on the same items ---------------------------------------------------------
BASELINES = ("bm25_topk_oracle", "embedder_topk_oracle", "embedder_threshold")


def baseline_evidence(item: EvalItem, embedder: Any) -> dict[str, Any]:
    """`request_baselines` of an NLT item (its text, tools and history)."""
    history = [(str(r), str(t)) for r, t in item.input.get("history") or []]
    return request_baselines(item.input["text"], item.input["tools"], embedder, history)


def request_baselines(text: str, tools: Any, embedder: Any, history: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """What the baselines decide by, for one request against its catalogue (an NLT item's tools, a task's
    functions as `{name, description}`): each tool's BM25 and cosine with the request (as select_tools computes
    them) and the embedder-only rule fitted for this embedder (None when none is)."""
    specs = as_tool_specs(tools)
    lexical = lexical_scores(specs, text, history)
    rule = baseline_rule(embedder)
    # the cosine the fitted baseline decides by (the request's best sentence when its rule says so)
    cosine = embedding_scores(embedder, specs, text, history, by_sentence=rule is not None and rule.sentence_cosine)
    return {"tools": {s.name: [lexical[s.name], cosine[s.name]] for s in specs},
            "threshold_rule": rule.model_dump() if rule is not None else None}


def baseline_scores(evidence: dict[str, Any] | None, gold: Iterable[str]) -> dict[str, float]:
    """`baseline/<name>`: 1.0 where a baseline selects exactly the gold set (empty: no tool), for each baseline
    that applies to the item (`baseline_selections`); nothing without evidence."""
    if not evidence:
        return {}
    gold_set = set(gold)
    return {f"baseline/{name}": float(set(selected) == gold_set)
            for name, selected in baseline_selections(evidence, len(gold_set)).items() if selected is not None}


def baseline_selections(evidence: dict[str, Any], gold_count: int) -> dict[str, list[str] | None]:
    """Each baseline's selected tools; None where a baseline does not apply (an oracle on an item without a gold
    tool, the threshold baseline without a fitted rule)."""
    tools = evidence["tools"]

    def top(column: int) -> list[str] | None:
        return sorted(tools, key=lambda n: (-tools[n][column], n))[:gold_count] if gold_count else None

    rule = evidence.get("threshold_rule")
    threshold = None
    if rule is not None:  # the fitted rule decides, its large-list terms included
        threshold = sorted(DecisionRule.model_validate(rule).decide({n: (None, lex, cos)
                                                                     for n, (lex, cos) in tools.items()}))
    return {"bm25_topk_oracle": top(0), "embedder_topk_oracle": top(1), "embedder_threshold": threshold}


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
    scores = selection_scores(prediction.get("selected"), item.gold or [], str(prediction.get("status", "ok")))
    return scores | baseline_scores(prediction.get("baseline_evidence"), item.gold or [])


def precision_recall(tp: float, fp: float, fn: float) -> dict[str, float]:
    """Nothing predicted and nothing expected is perfect; nothing predicted when something was expected is 0."""
    return dict(zip(("precision", "recall", "f1"), prf(tp, tp + fp, tp + fn)))


def micro_precision_recall(rows: list[tuple[float, float, float]]) -> dict[str, Metric]:
    """Micro P/R/F1 of per-item (tp, fp, fn), each with a bootstrap interval over items."""
    return dict(zip(("precision", "recall", "f1"), micro([(tp, tp + fp, tp + fn) for tp, fp, fn in rows])))


def tool_rows(item: ScoredItem) -> dict[str, tuple[float, float, float]]:
    """Per tool named in gold or prediction: this item's (tp, fp, fn) for that tool."""
    gold = set(item.gold or [])
    pred = set(item.prediction.get("selected") or []) if item.status in ("ok", "partial") else set()
    return {name: (float(name in gold and name in pred), float(name in pred and name not in gold),
                   float(name in gold and name not in pred)) for name in gold | pred}


def per_tool_counts(scored: list[ScoredItem]) -> dict[str, dict[str, float]]:
    counts: dict[str, dict[str, float]] = {}
    for item in scored:
        for name, (tp, fp, fn) in tool_rows(item).items():
            c = counts.setdefault(name, {"tp": 0.0, "fp": 0.0, "fn": 0.0})
            c["tp"] += tp
            c["fp"] += fp
            c["fn"] += fn
    return counts


def fitted_rule(scored: list[ScoredItem]) -> dict[str, Any] | None:
    """Score mode: the rule that fits these items best (only meaningful on the dev split), or None."""
    examples = []
    for item in scored:
        evidence = item.prediction.get("evidence") if item.status == "ok" else None
        if not evidence:
            return None
        examples.append(({n: (_number(v[0]), float(v[1]), _number(v[2] if len(v) > 2 else None))
                          for n, v in evidence.items()}, set(item.gold or [])))
    source = f"fitted on these {len(examples)} items (in-sample: fit on a tune split only)"
    rule, accuracy = fit_rule(examples, source=source)
    out = {**rule.model_dump(), "exact_set_accuracy_in_sample": accuracy}
    if rule.model_weight:  # the best rule that never calls the model, beside it (any model can use it)
        alone, alone_accuracy = fit_rule(examples, source=source + ", model weight 0", model_weights=(0.0,))
        out["without_model"] = {**alone.model_dump(), "exact_set_accuracy_in_sample": alone_accuracy}
    return out


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def aggregate(scored: list[ScoredItem], *, per_tool: bool = True) -> dict[str, Any]:
    """Exact-set accuracy, micro P/R/F1, per-tool P/R, failure rates and mean tokens, each with its interval."""
    n = len(scored)
    if n == 0:
        return {"n": 0, "exact_set_accuracy": proportion(0, 0)}
    metrics: dict[str, Any] = {"n": n, "exact_set_accuracy": mean(i.scores.get("exact_set", 0.0) for i in scored)}
    metrics["exact_set_accuracy_lenient"] = mean(i.scores.get("exact_set_lenient", 0.0) for i in scored)
    metrics.update(micro_precision_recall([tuple(i.scores.get(k, 0.0) for k in ("tp", "fp", "fn")) for i in scored]))
    metrics["parse_error_rate"] = proportion(sum(i.status in ("parse_error", "error", "missing") for i in scored), n)
    metrics["partial_rate"] = proportion(sum(i.status == "partial" for i in scored), n)
    metrics.update(mean_tokens(scored))
    no_tool = [i for i in scored if not i.gold]
    if no_tool:
        metrics["no_tool_accuracy"] = proportion(sum(i.scores.get("exact_set", 0.0) for i in no_tool), len(no_tool))
        metrics["no_tool_n"] = len(no_tool)
    fit = fitted_rule(scored)
    if fit is not None:
        metrics["fitted_rule"] = fit
    baselines = baseline_metrics(scored)
    if baselines:
        metrics["baselines"] = baselines
    rules = [i.prediction.get("rule") for i in scored if i.prediction.get("rule")]
    if rules:
        metrics["model_based"] = any(float(r.get("model_weight") or 0.0) > 0 for r in rules)
    if per_tool:
        rows = [tool_rows(i) for i in scored]
        metrics["per_tool"] = {name: micro_precision_recall([r.get(name, (0.0, 0.0, 0.0)) for r in rows])
                               for name in sorted(per_tool_counts(scored))}
    return metrics


def baseline_metrics(scored: list[ScoredItem], own: str = "exact_set", cluster: str | None = None) -> dict[str, Any]:
    """Per baseline: exact-set accuracy on the items it applies to, and the decided rule's on the same items (the
    score `own` of each item: the selector's exact set, or a task's own function set). `cluster`: the meta key of
    items that are not independent (a dialogue's turns), whose intervals then resample whole clusters."""
    def average(values: list[float], rows: list[ScoredItem]) -> Metric:
        return mean(values) if cluster is None else clustered_mean(values, [i.meta.get(cluster) for i in rows])

    out: dict[str, Any] = {}
    for name in BASELINES:
        key = f"baseline/{name}"
        rows = [i for i in scored if key in i.scores]
        if not rows:
            continue
        out[name] = {"n": len(rows), "exact_set_accuracy": average([i.scores[key] for i in rows], rows),
                     "rule_exact_set_accuracy": average([i.scores.get(own, 0.0) for i in rows], rows)}
        no_tool = [i for i in rows if not i.gold]
        if no_tool:
            out[name]["no_tool_accuracy"] = proportion(sum(i.scores[key] for i in no_tool), len(no_tool))
    return out


def mean_tokens(scored: list[ScoredItem]) -> dict[str, Metric]:
    out = {}
    for key in ("prompt_tokens", "evaluated", "completion_tokens"):
        out[f"mean_{key}"] = mean((i.tokens.get(key, 0) for i in scored), binary_is_proportion=False)
    out["mean_seconds"] = mean((float(i.prediction.get("seconds", i.latency_s) or 0.0) for i in scored),
                               binary_is_proportion=False)
    return out


# -- harness adapter ----------------------------------------------------------------------
def add_nlt_options(parser: argparse.ArgumentParser | Any) -> None:
    parser.add_argument("--threshold", type=float, default=None,
                        help="score mode: select when the decision probability > this (default: the model's fitted rule)")
    parser.add_argument("--calibrate", action=argparse.BooleanOptionalAction, default=True,
                        help="score mode: subtract the content-free baseline (default on; --no-calibrate: raw P(YES) > 0.5)")
    parser.add_argument("--all-evidence", action="store_true",
                        help="score mode: ask the model too when the rule gives it no weight, so that the run's "
                        "fitted_rule may weigh model, lexical and embedding evidence (for fitting on a tune split)")
    parser.add_argument("--no-embedder", action="store_true",
                        help="score mode: decide without the embedder's cosine (the rule fitted without it)")
    parser.add_argument("--rule", metavar="A,W,T",
                        help="score mode: decide with this rule instead of the model's shipped one: select when "
                        "A * model log-odds + W * BM25 (+ E * cosine with A,W,E,T) > T")
    parser.add_argument("--rule-from", metavar="RUN_DIR",
                        help="score mode: decide with the rule another run fitted (its metrics.json fitted_rule), "
                        "e.g. fit on one NLT set's tune part and report on the other set")


def rule_option(args: argparse.Namespace) -> DecisionRule | None:
    """The rule --rule or --rule-from names (None: the model's shipped rule)."""
    text, run = getattr(args, "rule", None), getattr(args, "rule_from", None)
    if text and run:
        raise ConfigError("pass --rule or --rule-from, not both")
    if text:
        try:
            numbers = [float(v) for v in text.split(",")]
        except ValueError as exc:
            raise ConfigError(f"--rule {text!r}: give numbers A,W,T or A,W,E,T (e.g. 0.5,0.25,0.7)") from exc
        if len(numbers) not in (3, 4):
            raise ConfigError(f"--rule {text!r}: give three numbers A,W,T or four A,W,E,T")
        a, w, e, t = numbers if len(numbers) == 4 else (numbers[0], numbers[1], 0.0, numbers[2])
        return DecisionRule(model_weight=a, lexical_weight=w, embedding_weight=e, threshold=t,
                            source=f"--rule {text}")
    if run:
        path = Path(run) / "metrics.json"
        try:
            fitted = json.loads(path.read_text(encoding="utf-8"))["metrics"]["fitted_rule"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"--rule-from {run}: no fitted_rule in {path} (run a score-mode `prefcall eval nlt "
                              "--split tune --out DIR` first)") from exc
        return DecisionRule(model_weight=float(fitted["model_weight"]), lexical_weight=float(fitted["lexical_weight"]),
                            embedding_weight=float(fitted.get("embedding_weight", 0.0)),
                            threshold=float(fitted["threshold"]), source=f"fitted by the run in {run}")
    return None


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
        mode = nlt_mode(args)
        embedder = ctx.embedder if mode == "score" and not getattr(args, "no_embedder", False) else None
        return predict(item, ctx.engine, mode, threshold=getattr(args, "threshold", None),
                       calibrate=bool(getattr(args, "calibrate", True)), rule=rule_option(args), embedder=embedder,
                       all_evidence=bool(getattr(args, "all_evidence", False)), baseline_embedder=ctx.embedder)

    def score(self, item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
        return score(item, prediction)

    def aggregate(self, items: list[ScoredItem]) -> dict[str, Any]:
        return aggregate(items)


TASK = ToolsTask()
