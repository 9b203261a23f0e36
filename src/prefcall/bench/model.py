"""Model-bound sections: raw limit and overheads, prefix reuse, NLT modes, FnCTOD stages, the TAPS gate.

Each section measures the things it compares side by side in one run (interleaved where possible), so the
ratios survive a noisy, shared machine better than the absolute seconds do.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from prefcall.bench.context import BenchContext, WorkItem
from prefcall.bench.stats import overhead_ratio, positive_seconds, rate, ratio, raw_seconds, summarize, target
from prefcall.engine.base import Engine, Prompt
from prefcall.strategies.pipeline_models import DEFAULT_CONFIG

# -- raw llama.cpp limit ---------------------------------------------------------------------------
COUNT_REQUEST = "Count from 1 to 300, one number after another, separated by commas."
NUMBERS_SCHEMA = {"type": "object", "properties": {"numbers": {"type": "array", "items": {"type": "integer"}}},
                  "required": ["numbers"]}


def _fresh_prompt(engine: Engine, system: str, user: str) -> Prompt:
    # A unique first line: nothing cached can share more than the BOS token with it.
    return Prompt.chat(f"Run {uuid.uuid4().hex}.\n{system}", user)


def _decode_rate(engine: Engine, prompt: Prompt, max_tokens: int, json_schema: dict[str, Any] | None) -> float:
    """Generated tokens/s, timing decoding itself rather than estimating it.

    A first call (max_tokens=1) evaluates the prompt into the KV cache; the second, on the same prompt, evaluates
    only its last token again and then decodes, so its seconds are the decoding of its tokens (and one more token's
    evaluation: a slight underestimate, never an overestimate). Nothing is subtracted: the former estimate (the
    call's seconds less its prompt at the measured prompt rate) reached zero or below on a loaded machine and left
    no figure at all."""
    engine.generate(prompt, max_tokens=1, json_schema=json_schema)
    g = engine.generate(prompt, max_tokens=max_tokens, json_schema=json_schema)
    if g.completion_tokens == 0:
        raise RuntimeError("the model ended its answer before its first token: no generation rate to measure "
                           "(check the model and its chat template)")
    return rate(g.completion_tokens, g.seconds)


def measure_raw(ctx: BenchContext) -> dict[str, Any]:
    """Prompt-evaluation and generation tokens/s through the engine's lowest-level path (no grammar, no stop).

    Prompt: a fresh ~catalogue-sized prompt, max_tokens=1. Generation: a fresh short prompt asking for a long
    answer, evaluated first, then decoded from the cache (see `_decode_rate`). Every figure is produced: each
    rate is tokens counted over a positive duration."""
    if ctx.raw is not None:
        return ctx.raw
    engine = ctx.engine()
    from prefcall.schemas.render import render_listing

    listing = render_listing(ctx.catalogue())
    prompt_rates, gen_rates, grammar_rates = [], [], []
    n_gen = 16 if ctx.quick else 48
    prompt_tokens = 0
    for _ in range(max(1, ctx.reps)):
        g = engine.generate(_fresh_prompt(engine, listing, "Hello."), max_tokens=1)
        prompt_rates.append(rate(g.usage.evaluated, g.seconds))
        prompt_tokens = g.usage.evaluated
    prompt_tps = float(np.median(prompt_rates))
    for _ in range(max(1, ctx.reps)):
        for schema, rates in ((None, gen_rates), (NUMBERS_SCHEMA, grammar_rates)):
            prompt = _fresh_prompt(engine, "You are a helpful assistant.", COUNT_REQUEST)
            rates.append(_decode_rate(engine, prompt, n_gen, schema))
    ctx.log(f"bench: limit: raw prompt {prompt_rates} tok/s, generation {gen_rates}, with grammar {grammar_rates}")
    gen_tps = float(np.median(gen_rates))
    grammar_tps = float(np.median(grammar_rates))
    ctx.raw = {
        "prompt_tps": round(prompt_tps, 2),
        "prompt_tokens_per_run": prompt_tokens,
        "gen_tps": round(gen_tps, 2),
        "grammar_gen_tps": round(grammar_tps, 2),
        "grammar_token_cost_ratio": ratio(gen_tps, grammar_tps),  # >1: a constrained token costs that much more
        "prompt_tps_runs": [round(r, 2) for r in prompt_rates],
        "gen_tps_runs": [round(r, 2) for r in gen_rates],
        "gen_max_tokens": n_gen,
    }
    return ctx.raw


def micro_costs(ctx: BenchContext) -> dict[str, Any]:
    """Per-call costs outside llama.cpp that every request pays (candidates for slow paths)."""
    engine = ctx.engine()
    from prefcall.schemas.render import render_listing

    listing = render_listing(ctx.catalogue())
    prompt = Prompt.chat(listing, "Find me a flight.")
    n = 5 if ctx.quick else 20
    started = time.perf_counter()
    for _ in range(n):
        tokens = engine.prompt_tokens(prompt)  # renders the template with placeholders and tokenizes the pieces
    tokenize_ms = (time.perf_counter() - started) / n * 1000
    format_ms = tokenize_ms
    vocab = int(engine.info.extra.get("n_vocab", 49152))
    logits = np.random.default_rng(0).standard_normal(vocab).astype(np.float32)
    started = time.perf_counter()
    for _ in range(50):
        shifted = logits - logits.max()
        _ = shifted - np.log(np.exp(shifted).sum())
    softmax_ms = (time.perf_counter() - started) / 50 * 1000
    return {"format_chat_ms": round(format_ms, 3), "tokenize_ms": round(tokenize_ms, 3), "tokenized_tokens": tokens,
            "log_softmax_per_token_ms": round(softmax_ms, 3), "n_vocab": vocab}


def _strategy_run(fn: Callable[[], tuple[int, int]], raw: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    evaluated, generated = fn()
    seconds = positive_seconds(time.perf_counter() - started)
    out = {"seconds": round(seconds, 4), "evaluated": evaluated, "generated": generated}
    if raw.get("gen_tps"):
        out["raw_seconds"] = round(raw_seconds(evaluated, generated, raw["prompt_tps"], raw["gen_tps"]), 4)
        out["overhead_ratio"] = overhead_ratio(seconds, evaluated, generated, raw["prompt_tps"], raw["gen_tps"])
    return out


def _parse_once(ctx: BenchContext, item: WorkItem, pipeline: Any = None, config: str = DEFAULT_CONFIG,
                **overrides: Any) -> Any:
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.pipeline_models import get_config

    pipeline = pipeline or Pipeline(ctx.engine())
    return pipeline.parse(item.dialogue, item.instructions, ctx.catalogue(), get_config(config, **overrides),
                          applicable=item.applicable)


def section_limit(ctx: BenchContext) -> dict[str, Any]:
    raw = measure_raw(ctx)
    figures: dict[str, Any] = {"raw": raw, "micro": micro_costs(ctx), "strategies": {}}
    engine, catalogue = ctx.engine(), ctx.catalogue()

    def parse(item: WorkItem) -> tuple[int, int]:
        r = _parse_once(ctx, item)
        # Scored candidates cost one single-token decode per token after the first: raw llama.cpp would spend the
        # same generating them, so they count with the generated tokens.
        return r.trace.evaluated, r.trace.completion_tokens + r.trace.decoded

    def nlt(item: WorkItem) -> tuple[int, int]:
        from prefcall.strategies.nlt import select_tools

        r = select_tools(engine, item.utterance, catalogue, mode="generate")
        return r.usage.evaluated, r.usage.completion_tokens

    def clarify(item: WorkItem) -> tuple[int, int]:
        from prefcall.strategies.qwn import clarify as qwn_clarify

        r = qwn_clarify(engine, item.dialogue, catalogue, instructions=item.applicable, embedder=ctx.embedder())
        return r.usage.evaluated, r.usage.completion_tokens

    strategies = {"parse_request": parse, "select_tools_nlt": nlt, "clarify": clarify}
    targets = []
    for name, fn in strategies.items():
        runs = []
        for i in range(max(1, ctx.reps)):
            runs.append(_strategy_run(lambda i=i: fn(ctx.item(i)), raw))
            ctx.log(f"bench: limit: {name} run {i + 1}: {runs[-1]}")
        ratios = [r["overhead_ratio"] for r in runs if r.get("overhead_ratio") is not None]
        figures["strategies"][name] = {
            "runs": runs, "seconds": summarize([r["seconds"] for r in runs]),
            "overhead_ratio_p50": round(float(np.median(ratios)), 3) if ratios else None,
        }
    return {"figures": figures, "targets": targets, "headline": _limit_headline(figures)}


def _limit_headline(f: dict[str, Any]) -> list[tuple[str, Any]]:
    raw = f["raw"]
    out = [("prompt tok/s", raw["prompt_tps"]), ("gen tok/s", raw["gen_tps"]),
           ("grammar gen tok/s", raw["grammar_gen_tps"]), ("format_chat ms", f["micro"]["format_chat_ms"])]
    for name, s in f["strategies"].items():
        out.append((f"{name} overhead x", s.get("overhead_ratio_p50", s.get("status"))))
    return out


# -- prefix reuse ----------------------------------------------------------------------------------
def _usage_of(result: Any, seconds: float) -> dict[str, Any]:
    t = result.trace
    return {"seconds": round(seconds, 4), "prompt_tokens": t.prompt_tokens, "evaluated": t.evaluated,
            "reused": t.reused, "completion_tokens": t.completion_tokens, "model_calls": t.model_calls,
            "functions": result.functions}


def section_prefix(ctx: BenchContext) -> dict[str, Any]:
    """The same catalogue twice on a fresh engine: cold request, then a different request for the same function."""
    from prefcall.strategies.pipeline import Pipeline

    pairs = ctx.same_function_pairs()[: max(1, ctx.reps)]
    runs = []
    for first, second in pairs:
        engine = ctx.new_engine()  # empty KV cache and no saved prefixes: a true cold start
        try:
            pipeline = Pipeline(engine)
            from prefcall.strategies.pipeline_models import get_config

            config = get_config(DEFAULT_CONFIG)
            started = time.perf_counter()
            cold = pipeline.parse(first.dialogue, first.instructions, ctx.catalogue(), config, applicable=first.applicable)
            cold_u = _usage_of(cold, time.perf_counter() - started)
            started = time.perf_counter()
            warm = pipeline.parse(second.dialogue, second.instructions, ctx.catalogue(), config,
                                  applicable=second.applicable)
            warm_u = _usage_of(warm, time.perf_counter() - started)
        finally:
            close = getattr(engine, "close", None)
            if callable(close):
                close()
        ctx.log(f"bench: prefix: cold {cold_u}, warm {warm_u}")
        runs.append({"function": first.function, "cold": cold_u, "warm": warm_u,
                     "evaluated_ratio": ratio(cold_u["evaluated"], warm_u["evaluated"]),
                     "latency_ratio": ratio(cold_u["seconds"], warm_u["seconds"])})
    evaluated = float(np.median([r["evaluated_ratio"] for r in runs if r["evaluated_ratio"]] or [0])) or None
    latency = float(np.median([r["latency_ratio"] for r in runs if r["latency_ratio"]] or [0])) or None
    figures = {"catalogue": ctx.catalogue().name, "functions": len(ctx.catalogue().functions), "config": DEFAULT_CONFIG,
               "runs": runs, "evaluated_ratio_p50": evaluated, "latency_ratio_p50": latency}
    targets = [target("prefix: cold/warm prompt tokens evaluated", evaluated, 5.0, higher_is_better=True, unit="x"),
               target("prefix: cold/warm latency", latency, 3.0, higher_is_better=True, unit="x")]
    headline = [("cold evaluated", runs[0]["cold"]["evaluated"]), ("warm evaluated", runs[0]["warm"]["evaluated"]),
                ("cold s", runs[0]["cold"]["seconds"]), ("warm s", runs[0]["warm"]["seconds"]),
                ("evaluated ratio x", evaluated), ("latency ratio x", latency)]
    return {"figures": figures, "targets": targets, "headline": headline}


# -- NLT modes -------------------------------------------------------------------------------------
NLT_MODES = ("generate", "score", "score_model_forced", "structured")


def section_nlt(ctx: BenchContext) -> dict[str, Any]:
    """The modes interleaved on the same messages; a warm-up round first (reported as cold). `score` is what
    select_tools_nlt ships (the rule fitted for the model and embedder: a rule that gives the model no weight does
    not call it); `score_model_forced` decides by the same rule but also asks the model, as a rule with model
    weight would."""
    from prefcall.strategies.nlt import select_tools

    engine, catalogue, embedder = ctx.engine(), ctx.catalogue(), ctx.embedder()
    per_mode: dict[str, list[dict[str, Any]]] = {m: [] for m in NLT_MODES}
    cold: dict[str, dict[str, Any]] = {}
    for round_no in range(max(1, ctx.reps) + 1):
        item = ctx.item(round_no)
        for mode in NLT_MODES:
            started = time.perf_counter()
            scored = mode.startswith("score")
            r = select_tools(engine, item.utterance, catalogue, mode="score" if scored else mode,  # type: ignore[arg-type]
                             embedder=embedder if scored else None, all_evidence=mode == "score_model_forced")
            run = {"seconds": round(time.perf_counter() - started, 4), "prompt_tokens": r.usage.prompt_tokens,
                   "evaluated": r.usage.evaluated, "completion_tokens": r.usage.completion_tokens,
                   "model_calls": r.usage.calls, "status": r.status, "selected": r.selected,
                   "gold": item.function, "evidence": r.evidence}
            if round_no:
                per_mode[mode].append(run)
            else:
                cold[mode] = run
            ctx.log(f"bench: nlt: round {round_no} {mode}: {run['seconds']} s")
    figures: dict[str, Any] = {"cold": cold, "modes": {}}
    for mode, runs in per_mode.items():
        figures["modes"][mode] = {
            "seconds": summarize([r["seconds"] for r in runs]),
            "tokens_in": summarize([r["prompt_tokens"] for r in runs], digits=1),
            "evaluated": summarize([r["evaluated"] for r in runs], digits=1),
            "tokens_out": summarize([r["completion_tokens"] for r in runs], digits=1),
            "gold_selected": sum(r["gold"] in r["selected"] for r in runs), "runs": runs,
        }
    p50 = {m: figures["modes"][m]["seconds"].get("p50") for m in NLT_MODES}
    figures["generate_over_score"] = ratio(p50["generate"], p50["score"])
    figures["structured_over_score"] = ratio(p50["structured"], p50["score"])
    figures["score_over_model_forced"] = ratio(p50["score"], p50["score_model_forced"])
    figures["evidence"] = per_mode["score"][0].get("evidence") if per_mode["score"] else None
    targets = [target("nlt: generation / scoring latency", figures["generate_over_score"], 3.0,
                      higher_is_better=True, unit="x")]
    if figures["evidence"] is not None and "model" not in figures["evidence"]:
        targets.append(target("nlt: shipped rule / model-forced latency (no model call)",
                              figures["score_over_model_forced"], 0.5, unit="x"))
    headline = [(f"{m} s p50", p50[m]) for m in NLT_MODES] + [("generate/score x", figures["generate_over_score"]),
                                                               ("score/model-forced x", figures["score_over_model_forced"])]
    return {"figures": figures, "targets": targets, "headline": headline}


# -- FnCTOD one-stage vs two-stage ------------------------------------------------------------------
def _calling_usage(result: Any, seconds: float) -> dict[str, Any]:
    gens = [s.generation for s in result.stages if s.generation is not None]
    return {"seconds": round(seconds, 4), "prompt_tokens": sum(g.usage.prompt_tokens for g in gens),
            "evaluated": sum(g.usage.evaluated for g in gens), "completion_tokens": sum(g.completion_tokens for g in gens),
            "model_calls": len(gens), "calls": [c.name for c in result.calls], "errors": result.errors}


def section_fnctod(ctx: BenchContext) -> dict[str, Any]:
    """Paper Table 4: prompt length and latency of one-stage (all specs) vs two-stage (listing, then one spec)."""
    from prefcall.strategies import fnctod

    engine, catalogue = ctx.engine(), ctx.catalogue()
    variants = {"one_stage": fnctod.one_stage, "two_stage": fnctod.two_stage}
    per: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    cold: dict[str, dict[str, Any]] = {}
    for round_no in range(max(1, ctx.reps) + 1):
        item = ctx.item(round_no)
        calling = fnctod.CallingContext(dialogue=item.dialogue, instructions=item.applicable)
        for name, fn in variants.items():
            started = time.perf_counter()
            result = fn(engine, catalogue, calling)
            run = _calling_usage(result, time.perf_counter() - started)
            if round_no:
                per[name].append(run)
            else:
                cold[name] = run
            ctx.log(f"bench: fnctod: round {round_no} {name}: {run['seconds']} s, {run['prompt_tokens']} prompt tokens")
    figures: dict[str, Any] = {"cold": cold, "variants": {}}
    for name, runs in per.items():
        figures["variants"][name] = {"seconds": summarize([r["seconds"] for r in runs]),
                                     "prompt_tokens": summarize([r["prompt_tokens"] for r in runs], digits=1),
                                     "evaluated": summarize([r["evaluated"] for r in runs], digits=1),
                                     "completion_tokens": summarize([r["completion_tokens"] for r in runs], digits=1),
                                     "runs": runs}
    v = figures["variants"]
    figures["prompt_tokens_one_over_two"] = ratio(v["one_stage"]["prompt_tokens"].get("p50"),
                                                  v["two_stage"]["prompt_tokens"].get("p50"))
    figures["cold_prompt_tokens_one_over_two"] = ratio(cold["one_stage"]["prompt_tokens"], cold["two_stage"]["prompt_tokens"])
    figures["latency_one_over_two"] = ratio(v["one_stage"]["seconds"].get("p50"), v["two_stage"]["seconds"].get("p50"))
    figures["cold_latency_one_over_two"] = ratio(cold["one_stage"]["seconds"], cold["two_stage"]["seconds"])
    headline = [("one-stage prompt tok", cold["one_stage"]["prompt_tokens"]),
                ("two-stage prompt tok", cold["two_stage"]["prompt_tokens"]),
                ("one-stage s p50 warm", v["one_stage"]["seconds"].get("p50")),
                ("two-stage s p50 warm", v["two_stage"]["seconds"].get("p50")),
                ("latency one/two x", figures["latency_one_over_two"])]
    return {"figures": figures, "targets": [], "headline": headline}


# -- grounded parse_request vs the one-stage baseline ------------------------------------------------
def section_grounded(ctx: BenchContext) -> dict[str, Any]:
    """parse_request as the server runs it (the shipped config, the embedder, refusals allowed) against one
    grammar-constrained generation of the calls (fnctod.one_stage), on the same requests, both warm: the
    cost of grounding. Two grounded variants: `grounded`, a request whose standing instructions are tagged on its
    path (the first request after they were added), and `grounded_stored`, the same request when their tags are
    stored (the server stores the tags a request made, and `tag_profile` makes them ahead: every later request),
    on a second pipeline whose tags were made before the timed rounds. Targets: at most 2x at p50 and 3x at p95
    (issue: latency at the capable tier), for both."""
    from prefcall.strategies import fnctod
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.pipeline_models import get_config

    engine, catalogue = ctx.engine(), ctx.catalogue()
    pipeline = Pipeline(engine, ctx.embedder(), data_dir=ctx.settings.data_dir)
    stored = Pipeline(engine, ctx.embedder(), data_dir=ctx.settings.data_dir)
    config = get_config(DEFAULT_CONFIG, allow_refuse=True)
    rounds = range(max(1, ctx.reps) + 1)  # round 0 fills the caches (calibration, prefixes): cold
    for instruction in dict.fromkeys(i for r in rounds for i in ctx.item(r).applicable):
        stored.tag(instruction, catalogue, config)  # what tag_profile (or an earlier request) stored
    per: dict[str, list[dict[str, Any]]] = {"grounded": [], "one_stage": [], "grounded_stored": []}
    cold: dict[str, dict[str, Any]] = {}

    def parse(which: Pipeline, item: Any) -> dict[str, Any]:
        started = time.perf_counter()
        parsed = which.parse(item.dialogue, item.instructions, catalogue, config, applicable=item.applicable)
        return {"seconds": round(time.perf_counter() - started, 4), "prompt_tokens": parsed.trace.prompt_tokens,
                "evaluated": parsed.trace.evaluated, "model_calls": parsed.trace.model_calls,
                "decision": parsed.decision, "calls": [c.name for c in parsed.calls],
                "steps": dict(parsed.trace.timings)}

    def keep(round_no: int, name: str, run: dict[str, Any]) -> None:
        if round_no:
            per[name].append(run)
        else:
            cold[name] = run
        ctx.log(f"bench: grounded: round {round_no} {name}: {run['seconds']} s, {run['evaluated']} evaluated")

    for round_no in rounds:
        item = ctx.item(round_no)
        keep(round_no, "grounded", parse(pipeline, item))
        started = time.perf_counter()
        keep(round_no, "one_stage", _calling_usage(fnctod.one_stage(engine, catalogue, fnctod.CallingContext(
            dialogue=item.dialogue, instructions=item.applicable)), time.perf_counter() - started))
    # A second pass, so that no request follows itself: the KV state a timed request starts from is the previous
    # request's, as in a server, never its own from the first pass.
    for round_no in rounds:
        keep(round_no, "grounded_stored", parse(stored, ctx.item(round_no)))
    figures: dict[str, Any] = {"config": DEFAULT_CONFIG, "cold": cold, "variants": {}}
    for name, runs in per.items():
        figures["variants"][name] = {"seconds": summarize([r["seconds"] for r in runs]),
                                     "evaluated": summarize([r["evaluated"] for r in runs], digits=1), "runs": runs}
    seconds = {n: figures["variants"][n]["seconds"] for n in per}
    targets, headline = [], [("one-stage s p50", seconds["one_stage"].get("p50"))]
    for name, label in (("grounded", "tags made on the request's path"), ("grounded_stored", "tags stored")):
        for q in ("p50", "p95"):
            figures[f"{q}_{name}_over_one_stage"] = ratio(seconds[name].get(q), seconds["one_stage"].get(q))
            targets.append(target(f"{name}: parse_request ({label}) / one-stage latency, {q}",
                                  figures[f"{q}_{name}_over_one_stage"], 2.0 if q == "p50" else 3.0, unit="x"))
        headline += [(f"{name} s p50", seconds[name].get("p50")),
                     (f"{name} p50 x", figures[f"p50_{name}_over_one_stage"]),
                     (f"{name} p95 x", figures[f"p95_{name}_over_one_stage"])]
    return {"figures": figures, "targets": targets, "headline": headline}


# -- TAPS gate -------------------------------------------------------------------------------------
def section_taps(ctx: BenchContext) -> dict[str, Any]:
    """Gate forced open (threshold 0: tag + regenerate) vs closed (threshold 1), fresh tag cache each time."""
    from prefcall.strategies.pipeline import Pipeline

    engine = ctx.engine()
    _parse_once(ctx, ctx.item(0), config="taps", gate_threshold=1.0)  # warm the catalogue prefixes
    runs: dict[str, list[dict[str, Any]]] = {"not_fired": [], "fired": []}
    for i in range(max(1, ctx.reps)):
        item = ctx.item(i + 1)
        for label, threshold in (("not_fired", 1.0), ("fired", 0.0)):
            started = time.perf_counter()
            r = _parse_once(ctx, item, Pipeline(engine), "taps", gate_threshold=threshold)
            run = _usage_of(r, time.perf_counter() - started)
            run.update(gate_fired=r.gate_fired, tagged=r.tagged, least_confidence=r.least_confidence,
                       instructions=len(r.instructions_used))
            runs[label].append(run)
            ctx.log(f"bench: taps: {label}: {run['seconds']} s, {run['model_calls']} model calls")
    p50 = {k: summarize([r["seconds"] for r in v]).get("p50") for k, v in runs.items()}
    figures = {"runs": runs, "seconds_p50": p50, "fired_over_not": ratio(p50["fired"], p50["not_fired"]),
               "model_calls": {k: [r["model_calls"] for r in v] for k, v in runs.items()},
               "fired_flags": [r["gate_fired"] for r in runs["fired"]],
               "note": "a fresh Pipeline per request: tags are not cached (the first-use cost); stored tags skip tagging"}
    headline = [("not fired s p50", p50["not_fired"]), ("fired s p50", p50["fired"]),
                ("fired/not x", figures["fired_over_not"])]
    return {"figures": figures, "targets": [], "headline": headline}


