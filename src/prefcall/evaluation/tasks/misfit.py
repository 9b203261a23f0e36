"""Failure class g: values that break the schema are asked about by name; values that fit it are called.

parse_request (as the MCP server runs it: `--config`, default full, refusals allowed, an empty demonstration
store) on the generated misfit corpus (evaluation.corpus_misfit: typed, ranged, patterned, enumerated and
formatted arguments), one part of the frozen split (`--split tune|report`). Per item:

- a request whose value breaks the schema (`expect` ask): `asked` (the answer is ask and the argument is among
  those it asks about), `named` (that question or problem quotes the user's value), `called` (the answer is a call:
  the value was called, dropped or replaced; the failure the issue names), `refused`;
- a request whose values fit (`expect` call): `exact` (the call, values as the schema takes them: a written date
  as its ISO date), `called`, `asked_wrongly` (an ask or a refusal of a request that could be called).

    prefcall eval misfit --split report --out DIR
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

from prefcall.errors import ConfigError
from prefcall.evaluation.corpus import CORPUS_DIR
from prefcall.evaluation.data import read_json
from prefcall.evaluation.metrics.calls import calls_from_any
from prefcall.evaluation.metrics.intervals import proportion
from prefcall.evaluation.metrics.normalise import normalise_argument, normalise_text
from prefcall.evaluation.task import BaseTask, EvalContext, EvalItem, ScoredItem

ITEMS = CORPUS_DIR / "misfit_items.json"
CATALOGUE = CORPUS_DIR / "misfit_catalogue.json"


class MisfitTask(BaseTask):
    name = "misfit"
    description = ("class g: values that break the schema make ask, naming the value; values that fit are called "
                   "(the generated misfit corpus; --split tune|report)")
    primary_score = "right"

    def load(self, args: argparse.Namespace) -> list[EvalItem]:
        path = Path(getattr(args, "data", None) or ITEMS)
        if not path.is_file():
            raise ConfigError(f"{path} is missing: run `prefcall corpus build`")
        return [EvalItem(id=str(r["example_id"]), input={"dialogue": r["user_utterance"]},
                         gold={"expect": r["expect"], "api_calls": r["api_calls"], "argument": r.get("argument", ""),
                               "written": r.get("written", "")},
                         meta={"kind": r["kind"], "function": r["function"], "style": r["style"]})
                for r in read_json(path)]

    def data_files(self, args: argparse.Namespace) -> list[Path]:
        return [Path(getattr(args, "data", None) or ITEMS)]

    def predict(self, item: EvalItem, ctx: EvalContext) -> dict[str, Any]:
        from prefcall.evaluation.tasks.bfcl import BfclTask, pipeline_prediction
        from prefcall.schemas.importers import import_catalogue
        from prefcall.strategies.pipeline_models import get_config

        catalogue = ctx.memo("misfit_catalogue", lambda: import_catalogue(CATALOGUE, name="misfit"))
        pipeline = ctx.memo("pipeline", lambda: BfclTask.pipeline(ctx))
        config = get_config(getattr(ctx.args, "config", None) or "full", allow_refuse=True)  # as the MCP server
        result = pipeline.parse(item.input["dialogue"], [], catalogue, config)
        answer = pipeline_prediction(result)
        answer["missing"] = [m.model_dump() for m in result.missing]
        return answer

    def score(self, item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
        return score(item, prediction)

    def aggregate(self, items: list[ScoredItem]) -> dict[str, Any]:
        return {"n": len(items), **figures(items),
                "by_kind": {kind: figures([i for i in items if i.meta["kind"] == kind])
                            for kind in sorted({i.meta["kind"] for i in items})},
                "by_style": {style: figures([i for i in items if i.meta["style"] == style])
                             for style in sorted({i.meta["style"] for i in items})},
                "kinds": dict(Counter(i.meta["kind"] for i in items))}


def _calls_equal(predicted: list[dict[str, Any]], gold: list[str]) -> bool:
    want = sorted((c.name, sorted((k, str(normalise_argument(v))) for k, v in c.arguments.items()))
                  for c in calls_from_any(gold))
    got = sorted((str(c.get("name")), sorted((k, str(normalise_argument(v)))
                                             for k, v in (c.get("arguments") or {}).items())) for c in predicted)
    return want == got


def score(item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
    """The item's scores (module docstring); a parse failure is wrong on every count and called nothing."""
    ok = prediction.get("status") == "ok"
    decision = prediction.get("decision") if ok else "error"
    if item.gold["expect"] == "call":
        exact = ok and decision == "call" and _calls_equal(prediction.get("calls") or [], item.gold["api_calls"])
        return {"right": float(exact), "exact": float(exact), "called": float(decision == "call"),
                "asked_wrongly": float(decision in ("ask", "refuse"))}
    argument = item.gold["argument"]
    missing = [m for m in prediction.get("missing") or [] if m.get("argument") == argument]
    asked = ok and decision == "ask" and bool(missing)
    written = normalise_text(item.gold["written"])
    said = " ".join(str(part or "") for m in missing for part in (m.get("question"), m.get("problem")))
    named = asked and written in normalise_text(said)
    return {"right": float(asked and named), "asked": float(asked), "named": float(named),
            "called": float(decision == "call"), "refused": float(decision == "refuse")}


def figures(items: list[ScoredItem]) -> dict[str, Any]:
    """Pooled figures with Wilson intervals: on misfits, asked / named / called / refused; on valid requests,
    exact / asked wrongly; and the decision accuracy over both (ask due or call due)."""
    misfits = [i for i in items if i.gold["expect"] == "ask"]
    valid = [i for i in items if i.gold["expect"] == "call"]
    out: dict[str, Any] = {}

    def rate(group: list[ScoredItem], key: str) -> Any:
        return proportion(sum(i.scores.get(key, 0.0) == 1.0 for i in group), len(group))

    if misfits:
        out |= {f"misfit_{k}": rate(misfits, k) for k in ("asked", "named", "called", "refused")}
    if valid:
        out |= {"valid_exact": rate(valid, "exact"), "valid_asked_wrongly": rate(valid, "asked_wrongly")}
    right_decision = sum(i.scores.get("asked", 0.0) == 1.0 for i in misfits) + \
        sum(i.scores.get("called", 0.0) == 1.0 for i in valid)
    if items:
        out["decision_accuracy"] = proportion(right_decision, len(items))
        out["parse_error_rate"] = proportion(sum(i.status == "parse_error" for i in items), len(items))
    return out


TASK = MisfitTask()
