"""`prefcall eval bfcl`: Berkeley Function Calling Leaderboard v4 files.

Data: JSON lines `{id, question: [[{role, content}]], function: [...]}`; gold in `possible_answer/<same name>`
(`{id, ground_truth: [{fn: {arg: [acceptable values]}}]}`), found automatically beside --data when --answers
is not given. The irrelevance file has no answers: gold is "no function".

Modes (--mode):
- generate | score | structured: NLT tool selection; exact-set accuracy of the selected names against the
  gold function names (irrelevance: the empty set);
- call: the one-stage baseline: a grammar-constrained call (function name enum, then that function's
  arguments) scored by BFCL's AST match; on irrelevance the score is 1 when no call is made. `--gate MODE`
  first runs NLT selection in that mode and makes no call when nothing is selected (without a gate the call
  predictor always calls).

Pipeline (--config NAME, e.g. `full`, the server's default with grounded values, or `fnctod-full`, free
generation of values): parse_request's pipeline the way the MCP server runs it (`allow_refuse=True`) over the
item's own catalogue and the question's turns, no standing instructions. Scores: on irrelevance items the
no-call rate (decision refuse, or no calls); on simple / multiple items function-selection accuracy (the first
call's name is the gold name; a refusal is wrong) and BFCL's AST match of the first call. A parse error is its
own state: neither a refusal nor a call, wrong everywhere, reported as parse_error_rate. The call baseline
reports the same selection / no-call figures, so the two can be compared side by side.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefcall.errors import ConfigError, PrefcallError
from prefcall.evaluation.metrics.intervals import mean, proportion
from prefcall.evaluation.task import BaseTask, EvalContext, EvalItem, ScoredItem
from prefcall.evaluation.tasks import tools as selection
from prefcall.schemas.importers import import_catalogue
from prefcall.schemas.model import Call, Catalogue, Function, Turn
from prefcall.strategies.nlt import select_tools
from prefcall.strategies.qwn_draft import draft_call

if TYPE_CHECKING:
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.pipeline_models import ParseResult, PipelineConfig

MODES = (*selection.NLT_MODES, "call")


# -- loading ---------------------------------------------------------------------------------
def default_answers_path(data_path: str | Path) -> Path | None:
    path = Path(data_path)
    candidate = path.parent / "possible_answer" / path.name
    return candidate if candidate.is_file() else None


# Categories whose items a function serves but that carry no answer to match (BFCL's live_relevance).
RELEVANCE_ONLY = frozenset({"live_relevance"})


def category_of(item_id: str) -> str:
    return re.sub(r"_\d+(-\d+)*$", "", item_id)


def _flat_turns(question: Any) -> list[dict[str, Any]]:
    return [t for group in question for t in (group if isinstance(group, list) else [group])]


def question_text(question: Any) -> str:
    """BFCL nests turns as [[{role, content}]]; the user's words are what selection sees."""
    return "\n".join(str(t.get("content", "")) for t in _flat_turns(question) if t.get("role") == "user")


def question_turns(question: Any) -> list[dict[str, str]]:
    """The turns of a BFCL question as {role, content} (what the pipeline reads as prefcall Turns)."""
    return [{"role": str(t.get("role", "user")), "content": str(t.get("content", ""))} for t in _flat_turns(question)]


def load_items(path: str | Path, answers_path: str | Path | None = None) -> list[EvalItem]:
    records = selection.read_records(path)
    answers_file = Path(answers_path) if answers_path else default_answers_path(path)
    answers = {str(r["id"]): r["ground_truth"] for r in selection.read_records(answers_file)} if answers_file else {}
    items = []
    for record in records:
        item_id = str(record["id"])
        category = category_of(item_id)
        if category != "irrelevance" and item_id not in answers and answers_file is not None:
            raise ConfigError(f"{answers_file} has no answer for {item_id}: pass the matching --answers file")
        ground_truth = answers.get(item_id, [])
        items.append(
            EvalItem(
                id=item_id,
                input={"question": question_text(record["question"]), "turns": question_turns(record["question"]),
                       "functions": record["function"]},
                gold={"functions": [name for call in ground_truth for name in call], "ground_truth": ground_truth},
                meta={"category": category, "n_functions": len(record["function"])},
            )
        )
    return items


def catalogue_of(functions: list[dict[str, Any]]) -> Catalogue:
    """The BFCL importer's catalogue (BFCL type names mapped to JSON Schema); the raw functions when the
    importer rejects the record (the grammar cleaner maps BFCL's type names too)."""
    try:
        return import_catalogue(functions, name="bfcl", format="bfcl")
    except PrefcallError:
        return Catalogue(name="bfcl", functions=[Function.model_validate(f) for f in functions])


# -- BFCL AST match --------------------------------------------------------------------------
_BFCL_STRIP = re.compile(r"[ ,./\-_*^]")


def standardise_string(value: str) -> str:
    """BFCL's normalisation: drop spaces and , . / - _ * ^, lower-case, single quotes as double."""
    return _BFCL_STRIP.sub("", value).lower().replace("'", '"')


def _same(value: Any, acceptable: Any) -> bool:
    if isinstance(acceptable, str):
        return isinstance(value, str) and standardise_string(value) == standardise_string(acceptable)
    if isinstance(acceptable, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(acceptable, bool) and value == acceptable
    if isinstance(acceptable, (int, float)):
        return isinstance(value, (int, float)) and float(value) == float(acceptable)  # BFCL accepts int for float
    if isinstance(acceptable, list):
        return isinstance(value, list) and len(value) == len(acceptable) and all(map(_same, value, acceptable))
    if isinstance(acceptable, dict):
        return isinstance(value, dict) and _dict_matches(value, acceptable)
    return value == acceptable


def _dict_matches(value: dict[str, Any], acceptable: dict[str, Any]) -> bool:
    """Nested dicts in BFCL answers map each key to a list of acceptable values ("" = may be left out)."""
    for key, options in acceptable.items():
        options = options if isinstance(options, list) else [options]
        if key not in value:
            if "" not in options:
                return False
        elif not any(_same(value[key], o) for o in options if o != ""):
            return False
    return all(key in acceptable for key in value)


def value_matches(value: Any, acceptable: list[Any]) -> bool:
    return any(_same(value, option) for option in acceptable if option != "")


def ast_match(call: Call | None, ground_truth: list[dict[str, Any]], function: Function | None) -> tuple[bool, str]:
    """BFCL's simple-function AST check of one call against the first gold call: (match, reason)."""
    if not ground_truth:
        return call is None, "no call expected" if call is None else "called a function although none fits"
    if call is None:
        return False, "no call made"
    gold_name, gold_args = next(iter(ground_truth[0].items()))
    if call.name != gold_name:
        return False, f"wrong function {call.name} (expected {gold_name})"
    required = function.required if function else []
    for name in required:
        if name not in call.arguments:
            return False, f"missing required parameter {name}"
    for name, value in call.arguments.items():
        if name not in gold_args:
            return False, f"unexpected parameter {name}"
        if not value_matches(value, gold_args[name]):
            return False, f"wrong value for {name}: {value!r}"
    for name, options in gold_args.items():
        if name not in call.arguments and "" not in options:
            return False, f"missing parameter {name}"
    return True, "match"


# -- predictors ------------------------------------------------------------------------------
def predict_selection(item: EvalItem, engine: Any, mode: str, *, threshold: float = 0.5, calibrate: bool = False) -> dict[str, Any]:
    catalogue = catalogue_of(item.input["functions"])
    result = select_tools(engine, item.input["question"], catalogue, mode=mode,  # type: ignore[arg-type]
                          threshold=threshold, calibrate=calibrate)
    return selection.selection_prediction(result)


def predict_call(item: EvalItem, engine: Any, *, gate: str | None = None, threshold: float = 0.5, calibrate: bool = False) -> dict[str, Any]:
    catalogue = catalogue_of(item.input["functions"])
    tokens = {"prompt_tokens": 0, "evaluated": 0, "reused": 0, "completion_tokens": 0}
    candidates = None
    if gate:
        gated = select_tools(engine, item.input["question"], catalogue, mode=gate,  # type: ignore[arg-type]
                             threshold=threshold, calibrate=calibrate)
        _add(tokens, selection.tokens_of(gated))
        if gated.status == "parse_error":
            return {"status": "parse_error", "raw": gated.raw_text, "tokens": tokens, "stage": "gate"}
        if not gated.selected:
            return {"status": "ok", "call": None, "tokens": tokens}
        candidates = gated.selected
    draft = draft_call(engine, item.input["question"], catalogue, candidates=candidates, keep_required=True)
    _add(tokens, draft.usage.model_dump())
    if draft.call is None:
        return {"status": "parse_error", "raw": draft.raw_text, "tokens": tokens, "stage": "arguments"}
    return {"status": "ok", "call": draft.call.model_dump(), "tokens": tokens, "seconds": round(draft.seconds, 4)}


def predict_pipeline(item: EvalItem, pipeline: Pipeline, config: PipelineConfig) -> dict[str, Any]:
    """parse_request's pipeline over the item's own catalogue (no standing instructions), as the server runs it."""
    catalogue = catalogue_of(item.input["functions"])
    turns = [Turn.model_validate(t) for t in item.input.get("turns") or [{"role": "user", "content": item.input["question"]}]]
    result = pipeline.parse(turns, [], catalogue, config)
    return pipeline_prediction(result)


def pipeline_prediction(result: ParseResult) -> dict[str, Any]:
    calls = [c.model_dump() for c in result.calls]
    trace = result.trace
    return {
        "status": result.status, "decision": result.decision, "config": result.config,
        "calls": calls, "call": calls[0] if calls else None, "functions": result.functions,
        "question": result.question, "errors": result.errors, "notes": result.notes,
        "error": "; ".join(result.errors) if result.status != "ok" else None,
        "confidence": round(result.confidence, 4), "selection_scores": _selection_table(result.raw),
        "tokens": {"prompt_tokens": trace.prompt_tokens, "evaluated": trace.evaluated, "reused": trace.reused,
                   "completion_tokens": trace.completion_tokens},
        "seconds": round(trace.timings.get("total", 0.0), 4),
    }


def _selection_table(raw: list[str]) -> dict[str, Any] | None:
    """Stage 1's per-function score table (scored selection writes it as the first raw output), for analysis
    of refusals ("None" among the candidates); None when stage 1 generated names instead."""
    try:
        table = json.loads(raw[0]) if raw else None
    except (TypeError, ValueError):
        return None
    return table if isinstance(table, dict) and all(isinstance(v, dict) for v in table.values()) else None


def _add(total: dict[str, int], part: dict[str, Any]) -> None:
    for key in total:
        total[key] += int(part.get(key, 0))


def predict(item: EvalItem, engine: Any, mode: str, **options: Any) -> dict[str, Any]:
    if mode == "call":
        return predict_call(item, engine, **options)
    options.pop("gate", None)
    return predict_selection(item, engine, mode, **options)


def _is_call_prediction(prediction: dict[str, Any], mode: str | None) -> bool:
    if mode is not None:
        return mode == "call"
    return "call" in prediction or "calls" in prediction or bool(prediction.get("stage"))


def made_no_call(prediction: dict[str, Any]) -> bool:
    """A valid answer with no call: the pipeline's refusal (or an empty call list), the baseline's `call: null`."""
    if str(prediction.get("status", "ok")) != "ok":
        return False  # a parse error is neither a refusal nor a call
    if prediction.get("decision") == "refuse":
        return True
    return not prediction.get("call") and not prediction.get("calls")


def call_scores(item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
    """Irrelevance: no_call (and ast_match, the same). Relevant items: selection (the first call's name is the
    gold name) and ast_match of the first call. A parse error or a refusal scores 0. With the retrieval baselines'
    evidence (pipeline configs), `function_set` (the functions the answer calls or asks about are the gold set;
    none on an irrelevant request) beside each baseline's (`baseline_scores`)."""
    gold = item.gold or {}
    ground_truth = gold.get("ground_truth", [])
    ok = str(prediction.get("status", "ok")) == "ok"
    no_call = made_no_call(prediction)
    if item.meta.get("category") in RELEVANCE_ONLY:
        # A function serves the request but BFCL gives no answer to match: any call or question is right, a
        # refusal is a false refusal, a parse error is neither.
        served = float(ok and not no_call)
        return {"served": served, "no_call": float(no_call)} | _served_baseline(prediction, served)
    base = _function_set_scores(prediction, gold.get("functions", []), ok and not no_call)
    if not ground_truth:
        return {"ast_match": float(no_call), "no_call": float(no_call)} | base
    if not ok or no_call:
        return {"ast_match": 0.0, "selection": 0.0, "no_call": float(no_call)} | base
    call = Call.model_validate(prediction["call"] if prediction.get("call") else prediction["calls"][0])
    function = catalogue_of(item.input["functions"]).function(call.name)
    match, _ = ast_match(call, ground_truth, function)
    gold_name = next(iter(ground_truth[0]))
    return {"ast_match": float(match), "selection": float(call.name == gold_name), "no_call": 0.0} | base


def _function_set_scores(prediction: dict[str, Any], gold: list[str], answered: bool) -> dict[str, float]:
    """The answer's function set against the gold one, and each baseline's; nothing without baseline evidence."""
    evidence = prediction.get("baseline_evidence")
    if not evidence:
        return {}
    named = {c["name"] for c in prediction.get("calls") or []} or set(prediction.get("functions") or [])
    own = float(set(named if answered else ()) == set(gold) and str(prediction.get("status", "ok")) == "ok")
    return {"function_set": own} | selection.baseline_scores(evidence, gold)


def _served_baseline(prediction: dict[str, Any], served: float) -> dict[str, float]:
    """A request a function serves with no gold function named (live_relevance): the threshold baseline is right
    where it selects any function, as the answer is where it calls or asks (the oracles need a gold count)."""
    evidence = prediction.get("baseline_evidence")
    chosen = selection.baseline_selections(evidence, 0)["embedder_threshold"] if evidence else None
    return {} if chosen is None else {"function_set": served, "baseline/embedder_threshold": float(bool(chosen))}


def score(item: EvalItem, prediction: dict[str, Any], mode: str | None = None) -> dict[str, float]:
    """Call scores (call mode and pipeline configs; inferred from the prediction when mode is None), else the
    NLT selection scores."""
    gold = item.gold or {}
    status = str(prediction.get("status", "ok"))
    if _is_call_prediction(prediction, mode):
        return call_scores(item, prediction)
    return selection.selection_scores(prediction.get("selected"), gold.get("functions", []), status)


def aggregate(scored: list[ScoredItem]) -> dict[str, Any]:
    if not any("ast_match" in i.scores or "served" in i.scores for i in scored):
        return selection.aggregate(scored, per_tool=False)
    n = len(scored)
    served = [i for i in scored if "served" in i.scores]  # relevance-only items (live_relevance)
    irrelevant = [i for i in scored if "selection" not in i.scores and "served" not in i.scores]
    relevant = [i for i in scored if "selection" in i.scores]
    metrics: dict[str, Any] = {"n": n}
    if irrelevant:
        metrics["irrelevance_no_call_rate"] = proportion(sum(i.scores.get("no_call", 0.0) == 1.0 for i in irrelevant),
                                                         len(irrelevant))
    if relevant:
        metrics["selection_accuracy"] = proportion(sum(i.scores["selection"] == 1.0 for i in relevant), len(relevant))
        metrics["relevant_ast_accuracy"] = proportion(sum(i.scores.get("ast_match", 0.0) == 1.0 for i in relevant),
                                                      len(relevant))
        metrics["false_refusal_rate"] = proportion(sum(i.scores.get("no_call", 0.0) == 1.0 for i in relevant),
                                                   len(relevant))
    if served:
        metrics["false_refusal_rate"] = proportion(
            sum(i.scores.get("no_call", 0.0) == 1.0 for i in relevant + served), len(relevant) + len(served))
        metrics["served_rate"] = proportion(sum(i.scores["served"] == 1.0 for i in served), len(served))
    if any("ast_match" in i.scores for i in scored):
        metrics["ast_accuracy"] = mean(i.scores["ast_match"] for i in scored if "ast_match" in i.scores)
    metrics["parse_error_rate"] = proportion(sum(i.status == "parse_error" for i in scored), n)
    metrics["failure_rate"] = proportion(sum(i.status not in ("ok", "parse_error") for i in scored), n)
    metrics["no_call_rate"] = proportion(sum(made_no_call(i.prediction) for i in scored), n)
    decisions = [str(i.prediction["decision"]) for i in scored if i.prediction.get("decision")]
    if decisions:
        metrics["decisions"] = {d: {"share": proportion(decisions.count(d), n)} for d in sorted(set(decisions))}
    baselines = selection.baseline_metrics(scored, own="function_set")
    if baselines:  # each with the answers' own function set on the same items (`rule_exact_set_accuracy`)
        metrics["baselines"] = baselines
    metrics.update(selection.mean_tokens(scored))
    return metrics


def _calls_section(items: list[ScoredItem], *, irrelevant: bool, limit: int = 15) -> str:
    if irrelevant:
        rows = [i for i in items if i.scorable and "selection" not in i.scores and "no_call" in i.scores
                and i.scores["no_call"] < 1.0]
        title, header = "Irrelevant requests that got no refusal", "| id | request | status / decision | called |"
    else:
        rows = [i for i in items if i.scorable and i.scores.get("selection", 1.0) < 1.0]
        title, header = "Relevant requests with a wrong selection", "| id | request | status / decision | called (gold) |"
    if not rows:
        return ""
    lines = [f"## {title} ({len(rows)})", "", header, "|---|---|---|---|"]
    for item in rows[:limit]:
        p = item.prediction
        called = ", ".join(_short_call(c) for c in p.get("calls") or ([p["call"]] if p.get("call") else [])) or "-"
        if not irrelevant:
            called += f" ({', '.join((item.gold or {}).get('functions', []))})"
        state = f"{p.get('status', 'ok')} / {p.get('decision', '-')}"
        request = str(item.input.get("question", ""))[:90]
        lines.append("| " + " | ".join(x.replace("|", "/").replace("\n", " ") for x in (item.id, request, state, called))
                     + " |")
    return "\n".join(lines) + "\n"


def _short_call(call: dict[str, Any]) -> str:
    arguments = ", ".join(f"{k}={v!r}" for k, v in (call.get("arguments") or {}).items())
    return f"{call.get('name')}({arguments})"[:120]


class BfclTask(BaseTask):
    name = "bfcl"
    description = ("BFCL v4: NLT selection (--mode generate|score|structured), the one-stage call baseline "
                   "(--mode call) or parse_request's pipeline (--config full|fnctod-full|...)")
    primary_score = "exact_set"

    def add_arguments(self, parser: Any) -> None:
        selection.add_nlt_options(parser)
        parser.add_argument("--gate", choices=selection.NLT_MODES, help="call mode: select with NLT first; no call when none")

    def load(self, args: argparse.Namespace) -> list[EvalItem]:
        if getattr(args, "config", None) and getattr(args, "mode", None):
            raise ConfigError("eval bfcl takes --config NAME (the pipeline) or --mode MODE, not both")
        # score() needs the mode for failed predictions; a pipeline config scores like the call baseline.
        self.mode = "call" if getattr(args, "config", None) else (getattr(args, "mode", None) or "generate")
        if not getattr(args, "data", None):
            raise ConfigError("eval bfcl needs --data BFCL_v4_<category>.json (answers are found in possible_answer/)")
        return load_items(args.data, getattr(args, "answers", None))

    def predict(self, item: EvalItem, ctx: EvalContext) -> dict[str, Any]:
        args = ctx.args
        if getattr(args, "config", None):
            from prefcall.strategies.pipeline_models import get_config

            config = get_config(args.config, allow_refuse=True)  # the MCP server's parse_request default
            prediction = predict_pipeline(item, ctx.memo("pipeline", lambda: self.pipeline(ctx)), config)
            # the retrieval baselines on the same request (selection.BASELINES), decided at scoring
            prediction["baseline_evidence"] = selection.request_baselines(item.input["question"],
                                                                          item.input["functions"], ctx.embedder)
            return prediction
        mode = getattr(args, "mode", None) or "generate"
        if mode not in MODES:
            raise ConfigError(f"--mode {mode!r}: use one of {', '.join(MODES)}")
        return predict(item, ctx.engine, mode, threshold=getattr(args, "threshold", 0.5),
                       calibrate=bool(getattr(args, "calibrate", False)), gate=getattr(args, "gate", None))

    @staticmethod
    def pipeline(ctx: EvalContext) -> Pipeline:
        """Built like the server's (services._get_pipeline): the engine, the embedder, an empty demonstration
        store (BFCL catalogues have none) and the built-in tag examples; calibrations under the data dir."""
        from prefcall.storage.demos import DemoStore
        from prefcall.strategies.pipeline import Pipeline
        from prefcall.strategies.taps_tagger import BUILTIN_EXAMPLES, TagExamples

        embedder = ctx.embedder
        return Pipeline(ctx.engine, embedder=embedder, demos=DemoStore(None),
                        tag_examples=TagExamples(list(BUILTIN_EXAMPLES), embedder), data_dir=ctx.settings.data_dir)

    def score(self, item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
        return score(item, prediction, getattr(self, "mode", None))

    def report_sections(self, items: list[ScoredItem], metrics: dict[str, Any]) -> list[str]:
        """What was called on irrelevant requests, and the wrong or refused selections on relevant ones."""
        return [s for s in (_calls_section(items, irrelevant=True), _calls_section(items, irrelevant=False)) if s]

    def aggregate(self, items: list[ScoredItem]) -> dict[str, Any]:
        return aggregate(items)


TASK = BfclTask()
