"""Large catalogues: select_tools_nlt and parse_request's stage 1 on 10, 50 and 200 tools (the committed
tests/data/catalogue200; see its build.py), with the shortlist (strategies/shortlist.py) the default settings apply.

Per size: p50/p95 seconds and exact-set accuracy of select_tools_nlt as shipped (the rule fitted for the model and
embedder) and with the model asked (a rule that weighs the model: `model_forced`, the fitted rule's weights with
model weight 1 where it had none), top-1 accuracy and p50/p95 of stage 1 on the requests that need one tool, and
the shortlist's recall@k on 200 tools for the report parts of the frozen split (the catalogue's own requests, the
corpus's and, with ../shared/data, NLSI dev's: evaluation/fit_shortlist.py; the fit read the tune parts).
Targets (issue 32): at 200 tools the p50 is within 2x of the 10-tool figure and exact-set accuracy falls by at
most 0.03. A request's N-tool catalogue is its own domain's 10 tools followed
by the first N - 10 others (the build's README)."""

from __future__ import annotations

import time
from typing import Any

from prefcall.bench.context import REPO_ROOT, BenchContext
from prefcall.bench.stats import ratio, summarize, target
from prefcall.evaluation.metrics.intervals import wilson

DATA = REPO_ROOT / "tests" / "data" / "catalogue200"
SIZES = (10, 50, 200)
RECALL_AT = (4, 8, 12, 16, 24, 32)


def section_catalogue(ctx: BenchContext) -> dict[str, Any]:
    from prefcall.strategies.nlt import rule_for, select_tools
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.pipeline_models import get_config
    from prefcall.evaluation import fit_shortlist
    from prefcall.evaluation.tasks.tools import message_and_history
    from prefcall.strategies.shortlist import rule_for as shortlist_rule

    if not DATA.exists():
        return {"skipped": f"needs a source checkout: {DATA} not found", "figures": {}, "targets": [], "headline": []}
    catalogue, blocks, requests = fit_shortlist.load()
    sized = fit_shortlist.sized
    if ctx.split is not None:  # one part of the frozen split (report: what no fit read)
        requests = [r for r in requests if fit_shortlist.split_side(r["id"], ctx.split)]
    if ctx.quick:  # twelve, spread over the three domains
        requests = requests[:: max(1, len(requests) // 12)][:12]
    reported = [fit_shortlist.split_side(r["id"], "report") for r in requests]
    engine, embedder = ctx.engine(), ctx.embedder()
    shipped = rule_for(engine, True, embedder)
    # The model asked at every size: the shipped rule's own weights for ten tools (not its rule for large lists),
    # with model weight 1 where it has none.
    base = shipped.model_copy(update={"large": None})
    forced = base.model_copy(update={"model_weight": base.model_weight or 1.0,
                                     "source": base.source + ("; model weight 1 (forced)" if not base.model_weight
                                                              else "; its ten-tool weights at every size")})
    listing = shortlist_rule(embedder, ctx.settings.shortlist_size)
    size = listing.size
    config = get_config("full").model_copy(update={"shortlist_size": size, "allow_refuse": False})
    pipeline = Pipeline(engine, embedder, data_dir=ctx.settings.data_dir)
    # The shipped rule without its large-list terms or rule, decided on the answers of the run that has them (the
    # forced rule's where it weighs the model; no model call of its own): what the large-list fit changed.
    bare = base.model_copy(update={"size_slope": 0.0, "margin": None}) \
        if shipped.size_slope or shipped.margin is not None or shipped.large is not None else None
    figures: dict[str, Any] = {"requests": len(requests), "split": ctx.split or "all",
                               "report_requests": sum(reported), "shortlist": listing.model_dump(),
                               "rule": shipped.model_dump(), "sizes": {}}
    for n in SIZES:
        runs: dict[str, list[dict[str, Any]]] = {"nlt": [], "nlt_model_forced": [], "stage1": [],
                                                 **({"nlt_without_large_list_terms": []} if bare else {})}
        for request, on_report in zip(requests, reported):
            listed = sized(catalogue, blocks, request["block"], n)
            message, history = message_and_history(request, request["id"])
            gold = sorted(request["expected"])
            results = {}
            for name, rule in (("nlt", shipped), ("nlt_model_forced", forced)):
                if name == "nlt_model_forced" and shipped.model_weight and shipped.for_size(n) is shipped:
                    # the shipped rule asks the model at this size: the forced rule is the same, and not run twice
                    runs[name].append(runs["nlt"][-1])
                    results[name] = results["nlt"]
                    continue
                started = time.perf_counter()
                result = select_tools(engine, message, listed, context=request["context"], history=history,
                                      embedder=embedder, rule=rule, shortlist_size=size)
                runs[name].append({"seconds": time.perf_counter() - started, "exact": sorted(result.selected) == gold,
                                   "report": on_report,
                                   "no_tool": not gold, "evaluated": result.usage.evaluated,
                                   "shortlisted": len(result.shortlist.kept) if result.shortlist else n})
                results[name] = result
            if bare is not None:
                answered = "nlt_model_forced" if bare.model_weight else "nlt"
                picked = bare.decide({d.name: (d.model_logodds, d.lexical or 0.0, d.cosine)
                                      for d in results[answered].decisions if d.shortlisted}, n)
                runs["nlt_without_large_list_terms"].append({**runs[answered][-1], "exact": sorted(picked) == gold})
            if len(gold) == 1:
                dialogue = "\n".join(f"{'User' if r == 'user' else 'Assistant'}: {t}" for r, t in history)
                dialogue = (dialogue + "\n" if dialogue else "") + f"User: {message}"
                started = time.perf_counter()
                stage = pipeline.stage_one(dialogue, listed, config)
                runs["stage1"].append({"seconds": time.perf_counter() - started, "report": on_report,
                                       "exact": (stage.value or [None])[0] == gold[0]})
            ctx.log(f"bench: catalogue: {n} tools, {request['id']}")
        figures["sizes"][n] = {name: _summary(rs) for name, rs in runs.items()}
        if ctx.split is None:  # the report part apart: the requests no fit read
            for name, rs in runs.items():
                figures["sizes"][n][name]["report_part"] = _summary([r for r in rs if r["report"]])
    report = fit_shortlist.tune_requests(catalogue, part="report")
    pooled, per_source = fit_shortlist.recall_curve(catalogue, report, embedder, RECALL_AT, listing.dense_weight)
    figures["recall_at_k_200"] = pooled
    figures["recall_at_k_200_per_source"] = per_source
    figures["recall_requests"] = {s: sum(r.source == s for r in report) for s in per_source}
    small, large = figures["sizes"][SIZES[0]], figures["sizes"][SIZES[-1]]
    targets = []
    if bare is not None:
        for suffix, pick in (("", lambda d: d), ("_report_part", lambda d: d.get("report_part") or {})):
            low = pick(small["nlt_without_large_list_terms"]).get("accuracy")
            high = pick(large["nlt_without_large_list_terms"]).get("accuracy")
            figures[f"nlt_without_large_list_terms_accuracy_drop_10_to_200{suffix}"] = \
                None if low is None or high is None else round(low - high, 3)
    for name in ("nlt", "nlt_model_forced", "stage1"):
        slow = ratio(large[name]["seconds"].get("p50"), small[name]["seconds"].get("p50"))
        figures[f"{name}_p50_200_over_10"] = slow
        targets.append(target(f"catalogue: {name} p50 at 200 tools / at 10", slow, 2.0, unit="x"))
        drop = None if large[name]["accuracy"] is None else round(small[name]["accuracy"] - large[name]["accuracy"], 3)
        figures[f"{name}_accuracy_drop_10_to_200"] = drop
        targets.append(target(f"catalogue: {name} accuracy drop from 10 to 200 tools", drop, 0.03))
        if ctx.split is None:
            low, high = small[name]["report_part"]["accuracy"], large[name]["report_part"]["accuracy"]
            figures[f"{name}_accuracy_drop_10_to_200_report_part"] = \
                None if low is None or high is None else round(low - high, 3)
    headline = [(f"{name} p50 s at {n}", figures["sizes"][n][name]["seconds"].get("p50"))
                for name in ("nlt", "nlt_model_forced", "stage1") for n in SIZES]
    headline += [(f"{name} accuracy at {n}", figures["sizes"][n][name]["accuracy"])
                 for name in ("nlt", "nlt_model_forced", "stage1") + (("nlt_without_large_list_terms",) if bare else ())
                 for n in SIZES]
    headline += [(f"recall@{k} at 200", v) for k, v in figures["recall_at_k_200"].items()]
    return {"figures": figures, "targets": targets, "headline": headline}


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    hits = sum(r["exact"] for r in runs)
    out: dict[str, Any] = {"n": len(runs), "seconds": summarize([r["seconds"] for r in runs]),
                           "accuracy": round(hits / len(runs), 3) if runs else None,
                           "interval": [round(x, 3) for x in wilson(hits, len(runs))] if runs else None}
    if runs and "no_tool" in runs[0]:
        none = [r for r in runs if r["no_tool"]]
        out["no_tool_accuracy"] = round(sum(r["exact"] for r in none) / len(none), 3) if none else None
        out["evaluated"] = summarize([r["evaluated"] for r in runs], digits=1)
        out["shortlisted"] = summarize([r["shortlisted"] for r in runs], digits=1)
    return out
