"""`prefcall eval stage1`: which function a request is for (stage 1 alone), with the user's profile as written and
as from a user whose standing instructions are about other functions.

Data and items as `eval nlsi` (NLSI-format files, the report split unless `--split` says otherwise; `--data` and
`--schema` for the bundled corpora). Per item, stage 1 runs once (`Pipeline.stage_one`, the item's standing
instructions as the profile) and its fitted rule decides twice on the same evidence:

- `top1`: the function chosen against the gold's first call, the profile as written;
- `top1_uncovered`: the same, with the profile uncovered (`evaluation.fit_selection.uncovered`: the "profile"
  feature off for the requested function and on for as many others as the profile spoke of). NLSI builds every
  profile around the request's function, so `top1` alone cannot show what a user whose instructions speak of
  their other tools gets; stage 1's fit sees a share of its items uncovered for this reason (PROFILE_DROPOUT).

Both are rates with Wilson intervals; `covered` says on how many items the profile spoke of the requested function.
A model without a fitted stage-1 rule decides by the hand-set rule, which does not read the profile: both figures
are then the same.
"""

from __future__ import annotations

import argparse
from typing import Any

from prefcall.evaluation.metrics.calls import normalise_function
from prefcall.evaluation.metrics.intervals import proportion
from prefcall.evaluation.task import BaseTask, EvalContext, EvalItem, ScoredItem
from prefcall.evaluation.tasks.nlsi import NlsiTask, gold_calls


class StageOneTask(NlsiTask):
    name = "stage1"
    description = "stage 1 alone: top-1 function with the profile as written and uncovered (NLSI-format data)"
    primary_score = "top1"
    failure_scores = ("top1",)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--locations", default=None, help=argparse.SUPPRESS)

    def predict(self, item: EvalItem, ctx: EvalContext) -> dict[str, Any]:
        from prefcall.evaluation.data import load_catalogue
        from prefcall.evaluation.fit_selection import PROFILE, SelectionRow, best_index, uncovered
        from prefcall.strategies.fnctod import HAND_RULE, FunctionScores
        from prefcall.strategies.pipeline import Pipeline
        from prefcall.strategies.pipeline_models import get_config

        pipe = ctx.memo("pipeline", lambda: Pipeline(ctx.engine, ctx.embedder))
        catalogue = ctx.memo("catalogue", lambda: load_catalogue(ctx.args, "nlsi"))
        output = pipe.stage_one(item.input["dialogue"], catalogue, get_config("full"),
                                profile=item.input["instructions"])
        scores = output.usage
        if not isinstance(scores, FunctionScores):
            return {"status": "parse_error", "error": "stage 1 gave no score table"}
        rule = pipe.selection_rule()
        names = [normalise_function(n) for n in scores.names]
        gold = _gold_function(item)
        row = SelectionRow(item=item.id, source="", names=scores.names, features=scores.features,
                           gold=names.index(gold) if gold in names else 0)
        shifted = uncovered(row, "report") if gold in names else row
        return {"status": "ok", "chosen": names[best_index(row, rule)], "uncovered": names[best_index(shifted, rule)],
                "gold_function": gold, "covered": gold in names and row.features[row.gold][PROFILE] > 0,
                "rule": "hand-set" if rule == HAND_RULE else "fitted"}

    def score(self, item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
        if prediction.get("status", "ok") != "ok":
            return {"top1": 0.0, "top1_uncovered": 0.0}
        gold = _gold_function(item)
        return {"top1": float(prediction.get("chosen") == gold),
                "top1_uncovered": float(prediction.get("uncovered") == gold),
                "covered": float(bool(prediction.get("covered")))}

    def aggregate(self, items: list[ScoredItem]) -> dict[str, Any]:
        n = len(items)
        metrics: dict[str, Any] = {key: proportion(sum(i.scores.get(key, 0.0) for i in items), n)
                                   for key in ("top1", "top1_uncovered", "covered")}
        covered = [i for i in items if i.scores.get("covered")]
        metrics["top1_where_covered"] = proportion(sum(i.scores.get("top1", 0.0) for i in covered), len(covered))
        metrics["parse_error_rate"] = proportion(sum(i.status == "parse_error" for i in items), n)
        return metrics

    def predictions_from_file(self, item: EvalItem, record: dict[str, Any]) -> dict[str, Any]:
        """A results.jsonl line of an earlier stage1 run (its "prediction"), not NLSI calls."""
        return BaseTask.predictions_from_file(self, item, record)

    def plots(self, items: list[ScoredItem], out_dir: Any) -> list[Any]:
        return []

    def report_sections(self, items: list[ScoredItem], metrics: dict[str, Any]) -> list[str]:
        return []


def _gold_function(item: EvalItem) -> str | None:
    calls = gold_calls(item.gold["api_calls"])
    return normalise_function(calls[0].name) if calls else None


TASK = StageOneTask()
