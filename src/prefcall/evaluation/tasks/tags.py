"""`prefcall eval tags`: TAPS structured tagging of standing instructions ({instruction, tagged} lists).

Metrics (TAPS Table 7): span precision / recall / F1 macro-averaged over slot labels, action (intent)
accuracy, validity rate. Predictions come from `prefcall.strategies.taps_tagger.tag_instruction`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefcall.evaluation.data import load_catalogue, read_json, require_data, shared_data_dir
from prefcall.evaluation.metrics.intervals import macro_over_labels, micro, proportion, statistic
from prefcall.evaluation.metrics.tags import TagParse, read_tags, score_tags, span_counts, span_metrics
from prefcall.evaluation.plots import bar_chart, confidence_scatter, pearson
from prefcall.evaluation.task import BaseTask, EvalContext, EvalItem, ScoredItem, mean_scores

if TYPE_CHECKING:
    from prefcall.strategies.taps_tagger import TagResult


class TagsTask(BaseTask):
    name = "tags"
    description = "TAPS tagging: span F1 (macro over slots), action accuracy, validity"
    primary_score = "span_f1"
    failure_scores = ("span_f1", "action_accuracy", "valid")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--examples", help="tagged few-shot examples (default: shared taps/tags_train.json)")
        parser.add_argument("--shots", type=int, default=None, help="retrieved few-shot examples per instruction (tagger default if unset)")
        parser.add_argument("--tag-mode", choices=("structured", "text", "spans"), default="structured",
                            help="structured (default; what tag_profile and parse_request use): function scored, "
                                 "values chosen among the instruction's spans by the grounded filler; "
                                 "text: the model rewrites the instruction with brackets (TAPS); "
                                 "spans: grammar-constrained JSON of labels and instruction spans")

    def data_files(self, args: argparse.Namespace) -> list[Path]:
        return [require_data(args, shared_data_dir() / "taps" / "tags_dev.json")]

    def load(self, args: argparse.Namespace) -> list[EvalItem]:
        path = self.data_files(args)[0]
        rows = read_json(path)
        return [
            EvalItem(id=str(row.get("id", index)), input={"instruction": row["instruction"]}, gold=row["tagged"])
            for index, row in enumerate(rows)
        ]

    def predict(self, item: EvalItem, ctx: EvalContext) -> dict[str, Any]:
        from prefcall.strategies.taps_tagger import tag_instruction

        catalogue = ctx.memo("catalogue", lambda: load_catalogue(ctx.args, "nlsi"))
        examples = ctx.memo("examples", lambda: self.examples(ctx))
        shots = getattr(ctx.args, "shots", None)
        kwargs = {"k": shots} if shots is not None else {}
        kwargs["mode"] = getattr(ctx.args, "tag_mode", None) or "structured"
        if kwargs["mode"] == "structured":
            from prefcall.strategies.pipeline import Pipeline
            from prefcall.strategies.pipeline_models import get_config

            pipe = ctx.memo("pipeline", lambda: Pipeline(ctx.engine, ctx.embedder))
            return prediction_from_tagger(pipe.tag(item.input["instruction"], catalogue, get_config("full")))
        result = tag_instruction(ctx.engine, item.input["instruction"], catalogue, examples, **kwargs)
        return prediction_from_tagger(result)

    def examples(self, ctx: EvalContext) -> Any:
        from prefcall.strategies.taps_tagger import TagExamples

        given = getattr(ctx.args, "examples", None)
        path = Path(given) if given else shared_data_dir() / "taps" / "tags_train.json"
        if not path.exists():
            return TagExamples.builtin()
        return TagExamples.load(path, ctx.embedder)

    def predictions_from_file(self, item: EvalItem, record: dict[str, Any]) -> dict[str, Any]:
        prediction = record.get("prediction", record)
        if isinstance(prediction, str):
            return {"status": "ok", "tagged": prediction}
        return {"status": prediction.get("status", "ok"), "tagged": prediction.get("tagged", "")} | {
            k: v for k, v in prediction.items() if k not in ("status", "tagged")
        }

    def score(self, item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
        gold = read_tags(str(item.gold))
        scores = score_tags(self.parsed(prediction), gold)
        # Diagnostic only: the spans of output the tagger rejected (e.g. words changed), if it still parses.
        raw = prediction.get("raw") if prediction.get("status") == "invalid" else prediction.get("tagged")
        scores["span_f1_lenient"] = score_tags(read_tags(str(raw or "")), gold)["span_f1"]
        return scores

    def parsed(self, prediction: dict[str, Any]) -> TagParse:
        """The tagger's "invalid" (fails its own validation) and any error count as invalid with no spans."""
        if prediction.get("status", "ok") != "ok" or not prediction.get("tagged"):
            return TagParse(valid=False, error=str(prediction.get("error") or prediction.get("status")))
        return read_tags(str(prediction["tagged"]))

    def aggregate(self, items: list[ScoredItem]) -> dict[str, Any]:
        # Per instruction, per slot label: (tp, n_pred, n_gold); macro over labels and micro, bootstrapped over items.
        rows = [{label: tuple(map(float, c)) for label, c in span_counts([(self.parsed(i.prediction),
                                                                           read_tags(str(i.gold)))]).items()}
                for i in items]
        spans = macro_over_labels(rows)
        totals = [tuple(sum(c[k] for c in row.values()) for k in range(3)) for row in rows]
        means = mean_scores(items)
        empty = proportion(0, 0)
        metrics: dict[str, Any] = {
            "span_f1": spans["span_f1"],
            "span_precision": spans["span_precision"],
            "span_recall": spans["span_recall"],
            "span_micro_f1": micro(totals)[2],
            "action_accuracy": means.get("action_accuracy", empty),
            "validity_rate": means.get("valid", empty),
            "item_span_f1": means.get("span_f1", empty),
            "item_span_f1_lenient": means.get("span_f1_lenient", empty),
        }
        confidence = confidence_pairs(items)
        if confidence:
            correlation = statistic(confidence, lambda pairs: pearson(*zip(*pairs)))
            if correlation is not None:
                metrics["least_confidence_pearson_f1"] = correlation
        metrics["per_slot"] = spans["per_label"]
        return metrics

    def plots(self, items: list[ScoredItem], out_dir: Path) -> list[Path]:
        metrics = span_metrics([(self.parsed(i.prediction), read_tags(str(i.gold))) for i in items])
        paths = []
        per_slot = {label: row["f1"] for label, row in metrics["per_slot"].items()}
        if per_slot:
            paths.append(bar_chart(per_slot, out_dir / "tags_f1_by_slot.png", "span F1 by slot label", "F1"))
        confidence = confidence_pairs(items)
        if len(confidence) >= 2:
            xs, ys = zip(*confidence)
            paths.append(confidence_scatter(xs, ys, out_dir / "tags_confidence_vs_f1.png", "tags:"))
        return paths


def confidence_pairs(items: list[ScoredItem]) -> list[tuple[float, float]]:
    return [
        (float(i.prediction["least_confidence"]), i.scores.get("span_f1", 0.0))
        for i in items
        if isinstance(i.prediction.get("least_confidence"), (int, float))
    ]


def prediction_from_tagger(result: TagResult) -> dict[str, Any]:
    """The tagger's TagResult as JSON: status, tagged, raw, reasons, least_confidence, token counts."""
    data = result.model_dump()
    out: dict[str, Any] = {"status": data["status"], "tagged": data["tagged"] or ""}
    for key in ("raw", "reasons", "least_confidence"):
        if data.get(key) not in (None, "", []):
            out[key] = data[key]
    out["tokens"] = {k: data[k] for k in ("prompt_tokens", "evaluated", "reused", "completion_tokens")}
    return out


TASK = TagsTask()
