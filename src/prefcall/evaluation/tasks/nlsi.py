"""`prefcall eval nlsi`: NLSI standing instructions -> API calls, scored the way TAPS scores them.

Data: the NLSI JSON list (user_utterance, all_standing_instructions, applicable_standing_instructions, api_calls,
example_type). Predictions: `prefcall.strategies.pipeline.Pipeline.parse` with `--config`. Demonstrations and the
grounding's value memory come from the tune split of the shared nlsi/dev.json (`demo_pool`), never from the
evaluated items; the report names the pool. Items: the report split of a split source unless `--split` says
otherwise (prefcall.evaluation.splits).

Metrics: exact match, slot precision / recall / F1 over (function, argument, value) triples (macro over items, as
TAPS; micro too), function F1, selection precision / recall when the pipeline reports the instructions it used,
breakdowns by example_type and by domain (and, for the generated corpus, by failure class and by instruction
phrasing style), parse-error rate, least-confidence/F1 correlation and, when a
prediction carries both untagged and tagged variants, the F1 the uncertainty gate would give at each threshold.
Every figure carries n and a 95% interval (metrics/intervals.py). A record or gold call that cannot be read
(a malformed call string) is one error row of the report, left out of the metrics; the call parser reads a
quote between two letters (`o"clock`, an export artefact of the test split) as the apostrophe it was.
Gold typos (GetDenists, city_of_event, rental-car `type`) are aliased to the schema's names on both sides
(metrics/calls.py); `exact_match_literal` / `slot_f1_literal` give the unaliased scores beside them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefcall.errors import ConfigError, ParseError
from prefcall.evaluation import splits
from prefcall.evaluation.data import load_catalogue, read_json, require_data, shared_data_dir
from prefcall.evaluation.metrics.calls import calls_from_any, load_aliases, score_calls, score_selection
from prefcall.evaluation.metrics.intervals import Metric, mean, micro, proportion, statistic
from prefcall.evaluation.plots import bar_chart, confidence_scatter, group_mean, pearson, threshold_curve
from prefcall.evaluation.splits import unique_ids
from prefcall.evaluation.task import BaseTask, EvalContext, EvalItem, ScoredItem
from prefcall.evaluation.tasks import tools as selection
from prefcall.schemas.model import Call

if TYPE_CHECKING:
    from prefcall.strategies.pipeline_models import ParseResult

ZERO_SCORES = {"exact_match": 0.0, "slot_precision": 0.0, "slot_recall": 0.0, "slot_f1": 0.0, "function_f1": 0.0}
MEAN_KEYS = ("exact_match", "slot_precision", "slot_recall", "slot_f1", "function_f1",
             "selection_precision", "selection_recall", "selection_f1", "exact_match_literal", "slot_f1_literal")
GATE_THRESHOLDS = [round(0.05 * i, 2) for i in range(0, 21)]


class NlsiTask(BaseTask):
    name = "nlsi"
    description = "NLSI: exact match and slot P/R/F1 over (function, argument, value) triples (TAPS scoring)"
    primary_score = "slot_f1"
    failure_scores = ("exact_match",)
    _aliases: dict[str, str] | None = None

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--locations", default=None,
                            help="city alias map for value normalisation (default: shared taps/locations.json)")
        parser.add_argument("--demos", help="NLSI-format file of demonstrations and value memories (default: the "
                            "tune split of the shared nlsi/dev.json; a split source gives only its tune items; "
                            "never the evaluated file)")
        parser.add_argument("--gold-selection", action="store_true",
                            help="give the pipeline the gold applicable instructions (interpretation only)")
        add_function_selection_option(parser)

    def data_files(self, args: argparse.Namespace) -> list[Path]:
        return [require_data(args, shared_data_dir() / "nlsi" / "dev.json")]

    def load(self, args: argparse.Namespace) -> list[EvalItem]:
        rows = read_json(self.data_files(args)[0])
        # score() sees only the item and prediction, so the run's alias map is fixed here, once per run.
        self._aliases = self.aliases(args)
        # Keyed by id and position together: NLSI dev repeats one example_id (the second is id#2, as in the split).
        raw = [str(row.get("example_id", index)) if isinstance(row, dict) else str(index)
               for index, row in enumerate(rows)]
        return [self.item(row, index, item_id) for (index, row), item_id in zip(enumerate(rows), unique_ids(raw))]

    @staticmethod
    def item(row: Any, index: int, item_id: str | None = None) -> EvalItem:
        """One item; a record without the NLSI fields becomes an error item (one error row), not a crash."""
        item_id = item_id or (str(row.get("example_id", index)) if isinstance(row, dict) else str(index))
        try:
            return NlsiTask._item(row, item_id)
        except (KeyError, TypeError, AttributeError) as exc:
            return EvalItem(id=item_id, input={"record": row}, error=f"record {index} is not an NLSI example "
                            f"(needs user_utterance and api_calls): {type(exc).__name__}: {exc}")

    @staticmethod
    def _item(row: dict[str, Any], item_id: str) -> EvalItem:
        calls = [str(c) for c in row.get("api_calls") or []]
        return EvalItem(
            id=item_id,
            input={"dialogue": row["user_utterance"], "instructions": list(row.get("all_standing_instructions") or [])},
            gold={"api_calls": calls, "applicable": list(row.get("applicable_standing_instructions") or [])},
            meta={"example_type": row.get("example_type", "unknown"), "domain": domain_of(calls),
                  # the generated corpus names the failure classes an item exercises and its instructions' phrasing
                  **({"classes": [str(c) for c in row["classes"]]} if isinstance(row.get("classes"), list) else {}),
                  **({"style": str(row["style"])} if row.get("style") else {})},
        )

    # -- prediction ---------------------------------------------------------------------------------
    def predict(self, item: EvalItem, ctx: EvalContext) -> dict[str, Any]:
        from prefcall.strategies.pipeline_models import get_config

        config = get_config(ctx.config, **config_overrides(ctx.args))
        pipe = ctx.memo("pipeline", lambda: self.pipeline(ctx, config))
        catalogue = ctx.memo("catalogue", lambda: load_catalogue(ctx.args, "nlsi"))
        applicable = item.gold["applicable"] if getattr(ctx.args, "gold_selection", False) else None
        result = pipe.parse(item.input["dialogue"], item.input["instructions"], catalogue, config,
                            applicable=applicable, exclude_demo_ids={item.id})
        prediction = prediction_from_result(result)
        # Selection is only scored when the config chose the instructions itself.
        prediction["selected_by_model"] = bool(config.select_instructions and applicable is None)
        # the retrieval baselines' choice of functions for the same request (tools.BASELINES), decided at scoring
        prediction["baseline_evidence"] = selection.request_baselines(str(item.input["dialogue"]), catalogue.functions,
                                                                      ctx.embedder)
        return prediction

    def pipeline(self, ctx: EvalContext, config: Any) -> Any:
        """Load only what the config uses: the embedder for demonstrations, selection or tag examples."""
        from prefcall.storage.demos import DemoStore
        from prefcall.strategies.fcicl import load_nlsi_demonstrations
        from prefcall.strategies.pipeline import Pipeline
        from prefcall.strategies.taps_tagger import TagExamples

        needs_embedder = (config.use_demos or config.select_instructions or config.tagging != "off"
                          or config.function_selection == "hybrid")  # the domain prior's cosine evidence
        embedder = ctx.embedder if needs_embedder else None
        store = None
        if config.use_demos:
            store = DemoStore(None)
            pool = demo_pool(ctx.args, self.data_files(ctx.args)[0])
            if pool is not None:
                path, keep, _ = pool
                catalogue = getattr(ctx.args, "catalogue", None) or "nlsi"
                store.add_many([d for d in load_nlsi_demonstrations(path, catalogue) if keep is None or d.id in keep])
        examples = None
        train = shared_data_dir() / "taps" / "tags_train.json"
        if config.tagging != "off" and train.exists():
            examples = TagExamples.load(train, embedder)
        return Pipeline(ctx.engine, embedder, store, tag_examples=examples)

    def pools(self, args: argparse.Namespace) -> dict[str, str]:
        from prefcall.strategies.pipeline_models import get_config

        if not get_config(getattr(args, "config", None) or "default", **config_overrides(args)).use_demos:
            return {"demonstrations and value memories": "none (the config uses no demonstrations)"}
        pool = demo_pool(args, self.data_files(args)[0])
        return {"demonstrations and value memories": "none (no tune split to draw on)" if pool is None else pool[2]}

    def predictions_from_file(self, item: EvalItem, record: dict[str, Any]) -> dict[str, Any]:
        """Accept results.jsonl lines, {"id", "calls": [...]} or NLSI rows (api_calls strings)."""
        prediction = record.get("prediction", record)
        raw = prediction.get("calls", prediction.get("api_calls"))
        if raw is None:
            return {"status": prediction.get("status", "parse_error"), "calls": [], "error": "no calls in record"}
        try:
            calls = [c.model_dump() for c in calls_from_any(raw)]
        except ParseError as exc:
            return {"status": "parse_error", "calls": [], "raw": raw, "error": str(exc)}
        out = {k: v for k, v in prediction.items() if k not in ("api_calls", "user_utterance")}
        return out | {"status": prediction.get("status", "ok"), "calls": calls}

    # -- scoring ----------------------------------------------------------------------------------------
    def aliases(self, args: argparse.Namespace | None = None) -> dict[str, str]:
        path = getattr(args, "locations", None) if args is not None else None
        default = shared_data_dir() / "taps" / "locations.json"
        return load_aliases(path or (default if default.exists() else None))

    def score(self, item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
        gold = gold_calls(item.gold["api_calls"])
        if self._aliases is None:
            self._aliases = self.aliases()
        aliases = self._aliases
        if prediction.get("status", "ok") != "ok":
            # A parse error or failure is wrong, never an empty valid answer (even when gold is empty).
            scores = dict(ZERO_SCORES) | {"tp": 0.0, "n_pred": 0.0, "n_gold": float(len(gold)),
                                          "exact_match_literal": 0.0, "slot_f1_literal": 0.0}
        else:
            predicted = calls_from_any(prediction.get("calls"))
            scores = score_calls(predicted, gold, aliases)
            # Without the gold-typo aliases (GetDenists, city_of_event, type): the TAPS-literal score, for reference.
            literal = score_calls(predicted, gold, aliases, schema_aliases=False)
            scores |= {"exact_match_literal": literal["exact_match"], "slot_f1_literal": literal["slot_f1"]}
        if isinstance(prediction.get("instructions_used"), list) and prediction.get("selected_by_model", True):
            scores |= score_selection(prediction["instructions_used"], item.gold["applicable"])
        for variant, calls in (prediction.get("variants") or {}).items():
            scores[f"slot_f1_{variant}"] = score_calls(calls_from_any(calls), gold, aliases)["slot_f1"]
        if prediction.get("baseline_evidence"):
            # the function-selection part: the functions the answer calls against the gold calls' (a failed
            # answer chose none), beside each retrieval baseline's on the same request
            wanted = {c.name for c in gold}
            called = {c.name for c in calls_from_any(prediction.get("calls"))} \
                if prediction.get("status", "ok") == "ok" else None
            scores["function_set"] = float(called == wanted)
            scores |= selection.baseline_scores(prediction["baseline_evidence"], wanted)
        return scores

    def aggregate(self, items: list[ScoredItem]) -> dict[str, Any]:
        n = len(items)
        metrics: dict[str, Any] = {}
        for key in MEAN_KEYS:
            values = [i.scores[key] for i in items if key in i.scores]
            if values:
                metrics[key] = mean(values)
        precision, recall, f1 = micro(slot_counts(i) for i in items)
        metrics["slot_micro_precision"] = precision
        metrics["slot_micro_recall"] = recall
        metrics["slot_micro_f1"] = f1
        metrics["parse_error_rate"] = proportion(sum(i.status == "parse_error" for i in items), n)
        metrics["failure_rate"] = proportion(sum(i.status not in ("ok", "parse_error") for i in items), n)
        decisions = [i.prediction.get("decision") for i in items if i.prediction.get("decision")]
        if decisions:
            metrics["decisions"] = {d: {"share": proportion(decisions.count(d), n)} for d in sorted(set(decisions))}
        gates = [bool(i.prediction["gate_fired"]) for i in items if "gate_fired" in i.prediction]
        if gates:
            metrics["gate_fired_rate"] = proportion(sum(gates), len(gates))
        confidence = confidence_pairs(items)
        if len(confidence) >= 2:
            correlation = statistic(confidence, lambda rows: pearson(*zip(*rows)))
            if correlation is not None:
                metrics["least_confidence_pearson_f1"] = correlation
        gate = gate_curve(items)
        if gate:
            metrics["gate_f1_by_threshold"] = {str(t): {"slot_f1": f} for t, f in gate}
        baselines = selection.baseline_metrics(items, own="function_set")
        if baselines:  # each with the answers' own function set on the same items (`rule_exact_set_accuracy`)
            metrics["baselines"] = baselines
        metrics["by_type"] = breakdown(items, "example_type")
        metrics["by_domain"] = breakdown(items, "domain")
        if any("classes" in i.meta for i in items):
            metrics["by_class"] = breakdown(items, "classes")
        if any("style" in i.meta for i in items):
            metrics["by_style"] = breakdown(items, "style")
        return metrics

    def plots(self, items: list[ScoredItem], out_dir: Path) -> list[Path]:
        paths = []
        for key, title in (("example_type", "by example type"), ("domain", "by domain")):
            values = group_mean(items, lambda i, key=key: str(i.meta.get(key, "unknown")), "slot_f1")
            if values:
                paths.append(bar_chart(values, out_dir / f"nlsi_slot_f1_{key}.png", f"slot F1 {title}", "slot F1"))
        confidence = confidence_pairs(items)
        if len(confidence) >= 2:
            xs, ys = zip(*confidence)
            paths.append(confidence_scatter(xs, ys, out_dir / "nlsi_confidence_vs_f1.png", "nlsi:"))
        gate = gate_curve(items)
        if gate:
            ts, fs = zip(*gate)
            paths.append(threshold_curve(ts, fs, out_dir / "nlsi_gate_thresholds.png"))
        return paths

    def report_sections(self, items: list[ScoredItem], metrics: dict[str, Any]) -> list[str]:
        errors = [i for i in items if i.status != "ok"]
        if not errors:
            return []
        lines = ["## Items without a valid prediction", "", "| id | status | error |", "|---|---|---|"]
        for item in errors[:20]:
            error = str(item.prediction.get("error") or item.prediction.get("raw") or "")[:120].replace("|", "/")
            lines.append(f"| {item.id} | {item.status} | {error} |")
        return ["\n".join(lines) + "\n"]


def demo_pool(args: argparse.Namespace, evaluated: Path) -> tuple[Path, set[str] | None, str] | None:
    """Where an NLSI evaluation's demonstrations and value memories come from: (file, the ids it may use or None
    for all, one line for the report). Never an evaluated item: the default is the tune split of the evaluated
    file when it is a split source (the shared nlsi/dev.json, the generated corpus), else of the shared
    nlsi/dev.json; a --demos file that is a split source gives its tune items only; another file gives all its
    items. None when there is nothing to draw on (no shared data and no --demos)."""
    given = getattr(args, "demos", None)
    own = None if given else splits.source_of(evaluated)  # a split source is its own pool: its tune part
    path = Path(given) if given else evaluated if own else shared_data_dir() / "nlsi" / "dev.json"
    if not path.is_file():
        if given:
            raise ConfigError(f"demonstrations file {path} does not exist; pass an NLSI-format --demos FILE")
        return None
    found = own or splits.source_of(path)
    if found is not None:
        name, entry = found
        return path, set(entry.tune), f"the tune split of {name} ({len(entry.tune)} items, prefcall/data/splits.json)"
    if evaluated.is_file() and splits.file_sha256(evaluated) == splits.file_sha256(path):
        raise ConfigError(f"--demos {path} is the evaluated file: demonstrations must not come from the items "
                          "being evaluated; pass a tuning file, or leave --demos out for the tune split")
    return path, None, f"all items of {path} (not a split source: it must share no item with the evaluated data)"


def gold_calls(raw: list[Any]) -> list[Call]:
    """The gold calls; a malformed one raises a ParseError naming it (the runner makes the item an error row)."""
    calls = []
    for entry in raw:
        try:
            calls.extend(calls_from_any([entry]))
        except ParseError as exc:
            raise ParseError(f"gold call {str(entry)[:120]!r} is malformed: {exc}") from exc
    return calls


def add_function_selection_option(parser: Any) -> None:
    parser.add_argument("--function-selection", choices=("generate", "score", "hybrid"),
                        help="override the config's stage-1 function selection (FnCTOD generate / scored / hybrid)")


def config_overrides(args: Any) -> dict[str, Any]:
    """PipelineConfig fields set on the command line (recorded in the run's args, so reports can say so)."""
    mode = getattr(args, "function_selection", None)
    return {"function_selection": mode} if mode else {}


def slot_counts(item: ScoredItem) -> tuple[float, float, float]:
    """(tp, n_pred, n_gold) of one item's slot triples, for micro sums."""
    return item.scores.get("tp", 0.0), item.scores.get("n_pred", 0.0), item.scores.get("n_gold", 0.0)


def domain_of(calls: list[str]) -> str:
    names = sorted({c.split("(", 1)[0].strip() for c in calls})
    return "+".join(names) if names else "none"


def confidence_pairs(items: list[ScoredItem]) -> list[tuple[float, float]]:
    return [
        (float(i.prediction["least_confidence"]), i.scores.get("slot_f1", 0.0))
        for i in items
        if isinstance(i.prediction.get("least_confidence"), (int, float))
    ]


def gate_curve(items: list[ScoredItem]) -> list[tuple[float, Metric]]:
    """(threshold, mean slot F1) pairs, only when every item has both variants and a confidence."""
    usable = [i for i in items if "slot_f1_untagged" in i.scores and "slot_f1_tagged" in i.scores
              and isinstance(i.prediction.get("least_confidence"), (int, float))]
    if not usable or len(usable) != len(items):
        return []
    curve = []
    for t in GATE_THRESHOLDS:  # the item's tagged F1 when its least confidence is above t (TAPS's gate)
        chosen = [i.scores["slot_f1_tagged"] if float(i.prediction["least_confidence"]) > t
                  else i.scores["slot_f1_untagged"] for i in usable]
        curve.append((t, mean(chosen)))
    return curve


def breakdown(items: list[ScoredItem], key: str) -> dict[str, dict[str, Any]]:
    """Exact match and slot F1 per value of meta[key]; a list value (an item's failure classes) puts the item in
    each of its groups, and an empty list in "none"."""
    groups: dict[str, list[ScoredItem]] = {}
    for item in items:
        value = item.meta.get(key, "unknown")
        for name in (value or ["none"]) if isinstance(value, list) else [value]:
            groups.setdefault(str(name), []).append(item)
    return {
        name: {"n": len(group),
               "exact_match": mean(i.scores.get("exact_match", 0.0) for i in group),
               "slot_f1": mean(i.scores.get("slot_f1", 0.0) for i in group)}
        for name, group in sorted(groups.items())
    }


def prediction_from_result(result: ParseResult) -> dict[str, Any]:
    """The pipeline's ParseResult as JSON: status, decision, calls, selection, gate, trace (tokens, timings).
    Optional `variants` ({"untagged": calls, "tagged": calls}) feeds the gate-threshold analysis."""
    data = result.model_dump()
    out: dict[str, Any] = {"status": data["status"], "decision": data["decision"], "calls": data["calls"]}
    for key in ("instructions_used", "least_confidence", "gate_fired", "gate_threshold", "tagged", "functions",
                "question", "notes", "demos", "raw", "errors", "variants"):
        if data.get(key) not in (None, [], ""):
            out[key] = data[key]
    if out["status"] != "ok" and data["errors"]:
        out["error"] = "; ".join(map(str, data["errors"]))[:500]
    out["trace"] = data["trace"]
    return out


TASK = NlsiTask()
