"""Abstention in one run: parse_request (as the MCP server runs it, refusals allowed; `--tool clarify`: clarify, as
the MCP server runs it, whose "limitation" is its refusal) on requests no function fits
and on requests one does, from several sources and authors (evaluation.fit_relevance.SOURCES): BFCL irrelevance
and ACEBench special_irrelevant, the NLT sets' messages that need no tool; BFCL simple, multiple and
live_relevance, ACEBench special_incomplete, NLSI, the first user turn with an intent of SGD dialogues, the bundled
corpus, the NLT sets' other messages.

Figures: the no-call rate on the irrelevant requests, the false refusal rate on the relevant ones and, beside it,
the selection accuracy (the call's, or the ask's, first function is a gold one; a refusal or a wrong function is a
miss), pooled and per source. Each prediction also carries the request's best cosine with its catalogue (the
relevance rule's evidence), so a threshold can be examined without a rerun.

    prefcall eval relevance --config full --split report --per-source 60 --out DIR
    prefcall eval relevance --tool clarify --split report --per-source 60 --out DIR
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

from prefcall.errors import ConfigError
from prefcall.evaluation.fit_relevance import Request, first_per_source, requests
from prefcall.evaluation.splits import Selection
from prefcall.evaluation.metrics.calls import normalise_function
from prefcall.evaluation.metrics.intervals import proportion
from prefcall.evaluation.task import BaseTask, EvalContext, EvalItem, ScoredItem


class RelevanceTask(BaseTask):
    name = "relevance"
    description = ("abstention: no-call on irrelevant requests, false refusals and selection on relevant ones, "
                   "pooled and per source (--split tune|report, --per-source N)")
    primary_score = "right"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--per-source", type=int, default=None, metavar="N",
                            help="the first N requests of each source and kind (relevant, irrelevant)")
        parser.add_argument("--sources", default=None, metavar="A,B",
                            help="only these sources (e.g. nlsi,nlt/nlt,acebench/special_irrelevant)")
        parser.add_argument("--tool", choices=TOOLS, default=TOOLS[0],
                            help="the MCP tool that answers: parse_request (refuse) or clarify (limitation), each "
                                 "with the embedder the server loads")
        parser.add_argument("--cosine-cut", type=float, default=None, metavar="C",
                            help="--tool clarify: judge relevance before the draft by a caller's cosine cut per "
                                 "function instead of the embedder's fitted rule (0.3: clarify's own cut before the "
                                 "thirty-second session)")
        parser.add_argument("--stage-draft", action="store_true",
                            help="--tool clarify: hand clarify parse_request's stage 1 to draft by at every tier "
                                 "(the server does only where the model's fit has a check)")

    def load(self, args: argparse.Namespace) -> list[EvalItem]:
        part = getattr(args, "split", None) or "report"
        part = "tune" if part == "dev" else part  # the NLT task's older name of its tuning part
        if part not in ("tune", "report"):
            raise ConfigError("eval relevance reads one part of the frozen split: --split tune or --split report")
        self._requests: dict[str, Request] = {}
        found = requests(part)
        wanted = [name.strip() for name in (getattr(args, "sources", None) or "").split(",") if name.strip()]
        if wanted:
            known = sorted({r.source for r in found})
            unknown = [name for name in wanted if name not in known]
            if unknown:
                raise ConfigError(f"--sources {','.join(unknown)}: not a source here; use some of {', '.join(known)}")
            found = [r for r in found if r.source in wanted]
        items = []
        for request in (found[i] for i in first_per_source(found, getattr(args, "per_source", None))):
            item_id = f"{request.source}:{request.id}"
            self._requests[item_id] = request
            items.append(EvalItem(id=item_id, input={"text": request.text},
                                  gold={"relevant": request.relevant, "functions": request.gold},
                                  meta={"source": request.source, "key": request.id, "part": part,
                                        "relevant": request.relevant}))
        return items

    def data_files(self, args: argparse.Namespace) -> list[Path]:
        return []  # `load` reads the part itself, source by source (fit_relevance.requests)

    def select_part(self, items: list[EvalItem], limit: int | None) -> tuple[list[EvalItem], Selection]:
        """The runner's split step: `load` already kept one part of each source."""
        kept = items[:limit]
        part = kept[0].meta["part"] if kept else "report"
        return kept, Selection(part=part, sources=dict(Counter(i.meta["source"] for i in kept)))

    def predict(self, item: EvalItem, ctx: EvalContext) -> dict[str, Any]:
        from prefcall.evaluation.tasks.bfcl import BfclTask, pipeline_prediction
        from prefcall.strategies import relevance
        from prefcall.strategies.pipeline_models import get_config

        request = self._requests[item.id]
        if getattr(ctx.args, "tool", TOOLS[0]) == "clarify":
            return clarify_prediction(request, ctx)
        for option in ("cosine_cut", "stage_draft"):
            if getattr(ctx.args, option, None) not in (None, False):
                raise ConfigError(f"--{option.replace('_', '-')} is clarify's: pass --tool clarify")
        config = get_config(ctx.config, allow_refuse=True)  # the MCP server's parse_request default
        pipeline = ctx.memo("pipeline", lambda: BfclTask.pipeline(ctx))
        result = pipeline.parse(request.dialogue, [], request.catalogue, config)
        prediction = pipeline_prediction(result)
        scores = relevance.similarities(ctx.embedder, request.text, request.catalogue.functions)
        prediction["best_cosine"] = round(max(scores.values()), 4) if scores else None
        return prediction

    def score(self, item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
        if prediction.get("status") != "ok":
            return {"right": 0.0, "refused": 0.0} | ({"selected": 0.0} if item.gold["relevant"] else {})
        # parse_request: an answer without a call or a function is a refusal; clarify: its "limitation" alone
        refused = prediction.get("decision") == "refuse" or \
            ("clarify" not in prediction and not (prediction.get("calls") or prediction.get("functions")))
        # clarify with the model's check: whether the embedder's rule alone refused the same request
        alone = {"refused_without_check": float(prediction.get("decision_without_check", prediction.get("decision"))
                                                == "refuse")} if "clarify" in prediction else {}
        if not item.gold["relevant"]:
            return {"right": float(refused), "refused": float(refused), **alone}
        out = {"right": float(not refused), "refused": float(refused), **alone}
        gold = {normalise_function(n) for n in item.gold["functions"]}
        if gold:
            names = [c["name"] for c in prediction.get("calls") or []] or list(prediction.get("functions") or [])
            out["selected"] = float(not refused and bool(names) and normalise_function(names[0]) in gold)
        return out

    def aggregate(self, items: list[ScoredItem]) -> dict[str, Any]:
        return {"n": len(items), **figures(items),
                "by_source": {source: figures([i for i in items if i.meta["source"] == source])
                              for source in dict.fromkeys(i.meta["source"] for i in items)}}


TOOLS = ("parse_request", "clarify")


def clarify_prediction(request: Request, ctx: EvalContext) -> dict[str, Any]:
    """clarify's answer as a pipeline prediction: "limitation" is a refusal, a question an ask and "continue" a
    call, of the drafted function (its first call); a parse failure stays one."""
    from prefcall.evaluation.tasks.bfcl import BfclTask
    from prefcall.strategies.qwn import clarify

    cut = getattr(ctx.args, "cosine_cut", None)
    # as the MCP server's clarify: the model's fitted check where its fit has one (not with a caller's cut)
    pipeline = ctx.memo("pipeline", lambda: BfclTask.pipeline(ctx)) if cut is None else None
    check, stage = pipeline.check_for(request.dialogue, request.catalogue) if pipeline is not None else (None, None)
    if pipeline is not None and stage is None and getattr(ctx.args, "stage_draft", False):
        stage = pipeline.stage_for(request.dialogue, request.catalogue)
    result = clarify(ctx.engine, request.dialogue, request.catalogue, embedder=ctx.embedder,
                     relevance_threshold=cut, check=check, stage=stage)
    decision = DECISIONS[result.decision]
    drafted = [result.draft.name] if result.draft is not None and decision != "refuse" else []
    out = {"status": result.status, "decision": decision, "functions": drafted, "calls": [],
           "clarify": result.decision if result.status == "ok" else result.status, "evidence": result.evidence[:6],
           "usage": result.usage.model_dump(), "seconds": round(result.seconds, 3)}
    if result.decision_without_check is not None:  # the check decided: what the embedder's rule alone gave
        out["decision_without_check"] = DECISIONS[result.decision_without_check]
    return out


DECISIONS = {"limitation": "refuse", "question": "ask", "continue": "call"}


def figures(items: list[ScoredItem]) -> dict[str, Any]:
    irrelevant = [i for i in items if not i.gold["relevant"]]
    relevant = [i for i in items if i.gold["relevant"]]
    selected = [i for i in relevant if "selected" in i.scores]
    out: dict[str, Any] = {}
    if irrelevant:
        out["no_call_rate"] = proportion(sum(i.scores.get("refused", 0.0) == 1.0 for i in irrelevant), len(irrelevant))
    if relevant:
        out["false_refusal_rate"] = proportion(sum(i.scores.get("refused", 0.0) == 1.0 for i in relevant),
                                               len(relevant))
    if selected:
        out["selection_accuracy"] = proportion(sum(i.scores["selected"] == 1.0 for i in selected), len(selected))
    out["parse_error_rate"] = proportion(sum(i.status == "parse_error" for i in items), len(items))
    if any("decision_without_check" in i.prediction for i in items):  # clarify decided by the model's check
        alone = {}
        for name, kind in (("no_call_rate", False), ("false_refusal_rate", True)):
            group = [i for i in items if i.gold["relevant"] == kind]  # as above: a parse failure refused nothing
            if group:
                alone[name] = proportion(sum(i.scores.get("refused_without_check") == 1.0 for i in group), len(group))
        out["without_check"] = alone
    return out


TASK = RelevanceTask()
