"""`prefcall model check`: does this GGUF do what prefcall needs, how well, and how fast, on this machine?

1. Load it (time, memory) with the usual settings (--threads, --n-ctx, --n-gpu-layers).
2. Capabilities prefcall relies on, each pass/fail with the reason: a chat template (in the GGUF, rendering
   system + user turns), grammar-constrained JSON (parses and fits the schema), per-token logprobs (finite,
   <= 0, ranked alternatives), candidate scoring (ranks the obvious answer first).
3. The smoke suite (data/smoke_suite.json): parse_request, select_tools (NLT) and clarify (QwN) on requests
   with known answers, through the strategies the MCP tools use, scored per case (modelhub/smoke.py).
4. Throughput: prompt and generated tokens per second on a fresh prompt.
5. Recommended n_ctx and n_gpu_layers for this machine, and a verdict with stated thresholds.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from prefcall.bench.stats import rate
from prefcall.engine.gguf_meta import GGUFInfo, format_params, format_size, read_gguf_info
from prefcall.modelhub import system
from prefcall.modelhub.smoke import CaseOutcome, SmokeCase, SmokeSuite, builtin_suite, score

# Verdict thresholds (smoke-suite pass rate), stated in the output.
GOOD = 0.80
USABLE = 0.50
SLOW_TOKENS_PER_SECOND = 5.0
REQUIRED = ("chat_template", "json_grammar", "logprobs", "candidate_scoring")

JSON_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "nights": {"type": "integer"}},
    "required": ["city", "nights"],
    "additionalProperties": False,
}


@dataclass
class Capability:
    name: str
    passed: bool
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


@dataclass
class CheckReport:
    reference: str
    path: str
    model_name: str
    gguf: GGUFInfo | None
    backend: str
    n_gpu_layers: int
    n_gpu_layers_offloaded: int | None
    n_ctx: int
    threads: int | None
    load_seconds: float | None
    model_rss: int | None  # resident memory the model load added
    capabilities: list[Capability] = field(default_factory=list)
    cases: list[CaseOutcome] = field(default_factory=list)
    prompt_tps: float | None = None
    gen_tps: float | None = None
    peak_rss: int | None = None
    embedder: str | None = None
    parse_config: str = "full"
    recommended_n_ctx: system.Recommendation | None = None
    recommended_n_gpu_layers: system.Recommendation | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def pass_rate(self) -> float | None:
        return sum(c.passed for c in self.cases) / len(self.cases) if self.cases else None

    def kind_rates(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for kind in ("parse_request", "select_tools", "clarify"):
            mine = [c for c in self.cases if c.case.kind == kind]
            if mine:
                out[kind] = f"{sum(c.passed for c in mine)}/{len(mine)}"
        return out

    def kind_seconds(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for kind in ("parse_request", "select_tools", "clarify"):
            mine = [c.seconds for c in self.cases if c.case.kind == kind]
            if mine:
                out[kind] = round(sum(mine) / len(mine), 2)
        return out

    @property
    def verdict(self) -> tuple[str, str]:
        failed = [c.name for c in self.capabilities if not c.passed and c.name in REQUIRED]
        if failed:
            return "not recommended", f"missing what prefcall needs: {', '.join(failed)}"
        rate = self.pass_rate
        if rate is None:
            return "capable", "capabilities pass; smoke suite not run"
        if rate >= GOOD:
            return "good", f"smoke pass rate {rate:.0%} >= {GOOD:.0%}"
        if rate >= USABLE:
            return "usable", f"smoke pass rate {rate:.0%} >= {USABLE:.0%} (good needs {GOOD:.0%})"
        return "not recommended", f"smoke pass rate {rate:.0%} < {USABLE:.0%}"

    def as_json(self) -> dict[str, Any]:
        verdict, why = self.verdict
        info = self.gguf
        return {
            "model": self.reference, "path": self.path, "name": self.model_name,
            "architecture": info.architecture if info else None, "quantisation": info.quantisation if info else None,
            "size": info.size if info else None, "params": info.n_params if info else None,
            "verdict": verdict, "verdict_reason": why,
            "pass_rate": None if self.pass_rate is None else round(self.pass_rate, 3),
            "passed": sum(c.passed for c in self.cases), "cases": len(self.cases), "by_kind": self.kind_rates(),
            "mean_seconds_by_kind": self.kind_seconds(),
            "capabilities": {c.name: c.passed for c in self.capabilities},
            "prompt_tokens_per_s": _round(self.prompt_tps), "generated_tokens_per_s": _round(self.gen_tps),
            "load_seconds": _round(self.load_seconds), "model_rss": self.model_rss, "peak_rss": self.peak_rss,
            "backend": self.backend, "n_gpu_layers": self.n_gpu_layers,
            "n_gpu_layers_offloaded": self.n_gpu_layers_offloaded, "n_ctx": self.n_ctx, "threads": self.threads,
            "recommended_n_ctx": self.recommended_n_ctx.value if self.recommended_n_ctx else None,
            "recommended_n_gpu_layers": self.recommended_n_gpu_layers.value if self.recommended_n_gpu_layers else None,
            "parse_config": self.parse_config, "embedder": self.embedder, "seconds": round(self.seconds, 1),
            "failed_cases": [c.case.id for c in self.cases if not c.passed],
        }


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


# -- capabilities ---------------------------------------------------------------------------------------
def chat_prompt(engine: Any, system: str | None, user: str) -> Any:
    """A chat prompt in pieces (the engine keeps the template's tokens apart from the text)."""
    from prefcall.engine import base

    return base.Prompt.chat(system, user)


def _rendered(engine: Any, prompt: Any) -> str | None:
    if isinstance(prompt, str):
        return prompt
    render = getattr(engine, "render", None)
    return render(prompt) if callable(render) else None


def check_capabilities(engine: Any, gguf: GGUFInfo | None) -> list[Capability]:
    out = [_template_capability(engine, gguf)]

    # Grammar-constrained JSON, and the logprobs of that generation.
    generation = None
    try:
        prompt = chat_prompt(engine, None, "Book a hotel in Lisbon for 3 nights. Answer with JSON with the keys city "
                                           "and nights.")
        generation = engine.generate(prompt, max_tokens=48, json_schema=JSON_SCHEMA, top_logprobs=3)
        value = json.loads(generation.text)
        problems = _schema_problems(value)
        content = f"city={value.get('city')!r} nights={value.get('nights')!r}" if isinstance(value, dict) else ""
        out.append(Capability("json_grammar", not problems, "; ".join(problems) or f"valid JSON for the schema ({content})"))
    except Exception as exc:
        out.append(Capability("json_grammar", False, f"{type(exc).__name__}: {str(exc)[:100]}"))
    out.append(_logprobs_capability(generation))

    # Candidate scoring: the obvious answer must come first.
    try:
        question = chat_prompt(engine, None, "What is the capital of France? Answer with one word.")
        scores = engine.score_candidates(question, ["Paris", "London", "Banana"])
        finite = all(math.isfinite(x) and x <= 1e-6 for x in scores.logprobs)
        best = scores.best()
        shown = ", ".join(f"{c} {lp:.2f}" for c, lp in zip(scores.candidates, scores.logprobs))
        out.append(Capability("candidate_scoring", finite and best == "Paris",
                              f"best {best!r} ({shown})" + ("" if finite else "; logprobs not finite or > 0")))
    except Exception as exc:
        out.append(Capability("candidate_scoring", False, f"{type(exc).__name__}: {str(exc)[:100]}"))
    return out


def _template_capability(engine: Any, gguf: GGUFInfo | None) -> Capability:
    """The GGUF's own chat template (the engine falls back to ChatML without one, which suits few models),
    rendering a system and a user turn."""
    try:
        rendered = _rendered(engine, chat_prompt(engine, "SYSTEM-MARK rules", "USER-MARK hi"))
        if rendered is None:
            render_ok, render_detail = True, "prompt accepted"
        else:
            render_ok = "SYSTEM-MARK" in rendered and "USER-MARK" in rendered
            render_detail = "renders system + user turns" if render_ok else "drops the system or user turn"
    except Exception as exc:  # a template that rejects a system turn raises here
        render_ok, render_detail = False, f"rendering failed: {type(exc).__name__}: {str(exc)[:80]}"
    extra = engine.info.extra if isinstance(engine.info.extra, dict) else {}
    if extra.get("template_pieces") is False:
        render_detail += "; the template does not copy message text verbatim"
    if gguf is not None and gguf.error is None:
        present = gguf.has_chat_template
        detail = ("tokenizer.chat_template present" if present else
                  "no tokenizer.chat_template in the GGUF (prefcall would fall back to ChatML)") + f"; {render_detail}"
        return Capability("chat_template", present and render_ok, detail)
    return Capability("chat_template", render_ok, f"GGUF header not read; {render_detail}")


def _schema_problems(value: Any) -> list[str]:
    if not isinstance(value, dict):
        return [f"not a JSON object: {value!r}"[:80]]
    problems = [f"missing {key}" for key in JSON_SCHEMA["required"] if key not in value]
    if "city" in value and not isinstance(value["city"], str):
        problems.append("city is not a string")
    if "nights" in value and (not isinstance(value["nights"], int) or isinstance(value["nights"], bool)):
        problems.append("nights is not an integer")
    extra = set(value) - set(JSON_SCHEMA["properties"])
    if extra:
        problems.append(f"extra keys {sorted(extra)}")
    return problems


def _logprobs_capability(generation: Any) -> Capability:
    if generation is None or not generation.tokens:
        return Capability("logprobs", False, "no generated tokens to read logprobs from")
    values = [t.logprob for t in generation.tokens]
    if not all(math.isfinite(v) and v <= 1e-6 for v in values):
        return Capability("logprobs", False, f"logprobs not finite or > 0: {values[:5]}")
    ranked = [t.top for t in generation.tokens if t.top]
    ordered = all(all(a[1] >= b[1] for a, b in zip(top, top[1:])) for top in ranked)
    if not ranked or not ordered:
        return Capability("logprobs", False, "no ranked alternatives (top_logprobs) per token")
    forced = sum(bool(getattr(t, "forced", False)) for t in generation.tokens)
    return Capability("logprobs", True, f"{len(values)} tokens, mean logprob {sum(values) / len(values):.3f}, "
                                        f"{len(ranked[0])} alternatives each" + (f", {forced} forced" if forced else ""))


# -- throughput ----------------------------------------------------------------------------------------
def measure_throughput(engine: Any) -> tuple[float | None, float | None, str]:
    """Prompt tokens/s on a fresh ~300-token prompt, then generated tokens/s continuing from it."""
    nonce = f"{time.time_ns()}"
    filler = " ".join(f"item {i} is a {('red', 'green', 'blue', 'small', 'large')[i % 5]} box;" for i in range(45))
    prompt = chat_prompt(engine, None, f"Note {nonce}. {filler}\nNow count from 1 to 100, separated by commas.")
    first = engine.generate(prompt, max_tokens=1)
    # Tokens over a positive duration (at least one clock tick): a figure whenever something was counted.
    prompt_tps = rate(first.usage.evaluated, first.seconds) if first.usage.evaluated else None
    second = engine.generate(prompt, max_tokens=64)  # the prompt is cached now: this is decoding
    tokens = second.completion_tokens
    gen_tps = rate(tokens, second.seconds) if tokens else None
    detail = f"{first.usage.evaluated} prompt tokens in {first.seconds:.2f} s; {tokens} tokens in {second.seconds:.2f} s"
    return prompt_tps, gen_tps, detail


# -- smoke suite ---------------------------------------------------------------------------------------
class SuiteRunner:
    """Runs cases through the strategies (imported here, from where they live today)."""

    def __init__(self, engine: Any, embedder: Any, suite: SmokeSuite, *, parse_config: str = "full",
                 data_dir: Any = None) -> None:
        from prefcall.schemas.model import Catalogue

        self.engine, self.embedder, self.suite = engine, embedder, suite
        self.parse_config = parse_config
        self.data_dir = data_dir
        self.catalogues = {key: Catalogue.model_validate(value) for key, value in suite.catalogues.items()}
        self._pipeline: Any = None

    def run(self, case: SmokeCase) -> CaseOutcome:
        started = time.perf_counter()
        try:
            got = getattr(self, f"_{case.kind}")(case)
        except Exception as exc:  # the model produced something a strategy could not handle
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
            return CaseOutcome(case, False, f"error: {error}", {}, time.perf_counter() - started, error)
        passed, detail = score(case, got)
        return CaseOutcome(case, passed, detail, got, time.perf_counter() - started)

    def pipeline(self) -> Any:
        """The pipeline the MCP server would build for this engine (its fit read once)."""
        from prefcall.strategies.pipeline import Pipeline

        if self._pipeline is None:
            self._pipeline = Pipeline(self.engine, embedder=self.embedder, data_dir=self.data_dir)
        return self._pipeline

    def _parse_request(self, case: SmokeCase) -> dict[str, Any]:
        from prefcall.strategies.pipeline_models import get_config

        config = get_config(self.parse_config, allow_refuse=True)  # as the MCP tool's default
        result = self.pipeline().parse(case.dialogue, list(case.instructions), self.catalogues[case.catalogue], config)
        return {"decision": result.decision, "status": result.status, "question": result.question,
                "calls": [c.model_dump() for c in result.calls]}

    def _select_tools(self, case: SmokeCase) -> dict[str, Any]:
        from prefcall.strategies.nlt import select_tools

        # As the MCP tool answers by default: score mode, with the embedder and the rule fitted for the model
        result = select_tools(self.engine, case.message, self.catalogues[case.catalogue], embedder=self.embedder)
        return {"selected": list(result.selected), "status": result.status, "evidence": result.evidence}

    def _clarify(self, case: SmokeCase) -> dict[str, Any]:
        from prefcall.strategies.qwn import clarify

        # As the MCP tool answers: with the model's fitted check where its fit has one (as parse_request)
        catalogue = self.catalogues[case.catalogue]
        check, stage = self.pipeline().check_for(case.dialogue, catalogue, list(case.instructions))
        result = clarify(self.engine, case.dialogue, catalogue, instructions=list(case.instructions),
                         embedder=self.embedder, check=check, stage=stage)
        return {"decision": result.decision, "status": result.status, "question": result.question}


# -- the whole check -----------------------------------------------------------------------------------
def run_check(settings: Any, *, reference: str | None = None, engine: Any = None, embedder: Any = None,
              use_embedder: bool = True, suite: SmokeSuite | None = None, only: list[str] | None = None,
              run_suite: bool = True, parse_config: str = "full",
              progress: Callable[[str], None] | None = None) -> CheckReport:
    """Load (unless an engine is given), check, run the suite, measure, recommend."""
    say = progress or (lambda line: None)
    started = time.perf_counter()
    notes: list[str] = []
    load_seconds = model_rss = None
    if engine is None:
        from prefcall.engine import load_engine

        say(f"loading {settings.model or 'the embedded model'} ...")
        before = system.rss_bytes()
        load_started = time.perf_counter()
        engine = load_engine(settings)
        load_seconds = time.perf_counter() - load_started
        after = system.rss_bytes()
        model_rss = after - before if after is not None and before is not None else None
    info = engine.info
    path = Path(info.model_path)
    gguf = read_gguf_info(path) if path.is_file() else None
    embedder_name = getattr(embedder, "name", None) if embedder is not None else None
    if embedder is None and use_embedder:
        try:
            from prefcall.engine import load_embedder

            say("loading the sentence embedder ...")
            embedder = load_embedder(settings)
            embedder.embed(["warm up"])
            embedder_name = getattr(settings, "embedder", None) or "all-MiniLM-L6-v2 (embedded)"
        except Exception as exc:  # the check still runs, as the strategies do, without one
            notes.append(f"embedder unavailable ({type(exc).__name__}: {exc}); strategies ran without it")
            embedder = None
    offloaded = info.extra.get("n_gpu_layers_offloaded") if isinstance(info.extra, dict) else None
    if offloaded is None and info.backend == "cpu":
        offloaded = 0
    report = CheckReport(
        reference=reference or settings.model or "embedded", path=str(info.model_path), model_name=info.model_name,
        gguf=gguf, backend=info.backend, n_gpu_layers=info.n_gpu_layers, n_gpu_layers_offloaded=offloaded,
        n_ctx=info.n_ctx, threads=getattr(settings, "n_threads", None), load_seconds=load_seconds,
        model_rss=model_rss, embedder=embedder_name,
        parse_config=parse_config, notes=notes,
    )
    say("checking capabilities ...")
    report.capabilities = check_capabilities(engine, gguf)
    for cap in report.capabilities:
        say(f"  {'pass' if cap.passed else 'FAIL'}  {cap.name}: {cap.detail}")
    say("measuring throughput ...")
    try:
        report.prompt_tps, report.gen_tps, detail = measure_throughput(engine)
        say(f"  {detail}")
    except Exception as exc:
        notes.append(f"throughput not measured: {type(exc).__name__}: {exc}")
    if run_suite:
        suite = suite or builtin_suite()
        runner = SuiteRunner(engine, embedder, suite, parse_config=parse_config,
                             data_dir=getattr(settings, "data_dir", None))
        cases = suite.select(only)
        for number, case in enumerate(cases, 1):
            outcome = runner.run(case)
            report.cases.append(outcome)
            say(f"  [{number}/{len(cases)}] {'pass' if outcome.passed else 'FAIL'}  {case.id} "
                f"({outcome.seconds:.1f} s): {outcome.detail}")
    backend = _gpu_backend(info.backend)
    gpu_free, source = system.gpu_memory_free(backend) if backend != "cpu" else (None, "")
    report.recommended_n_ctx = system.recommend_n_ctx(gguf, system.available_memory())
    report.recommended_n_gpu_layers = system.recommend_n_gpu_layers(gguf, backend, gpu_free,
                                                                    report.recommended_n_ctx.value)
    if source and gpu_free is not None:
        notes.append(f"GPU memory from {source}")
    report.peak_rss = system.peak_rss_bytes()
    report.seconds = time.perf_counter() - started
    return report


def _gpu_backend(engine_backend: str) -> str:
    if engine_backend in ("fake",):
        return "cpu"
    try:
        return system.gpu_backend()
    except Exception:  # llama_cpp not importable: no GPU to recommend for
        return "cpu"


# -- output --------------------------------------------------------------------------------------------
def render(report: CheckReport) -> str:
    verdict, why = report.verdict
    g = report.gguf
    lines = [
        f"prefcall model check: {report.reference}",
        f"  file     {report.path}",
        f"  model    {report.model_name}" + (f"  {g.architecture}, {g.quantisation}, {format_params(g.n_params)} params, "
                                             f"{format_size(g.size)}, trained context {g.context_length}" if g else ""),
        f"  run      backend {report.backend}, n_gpu_layers {report.n_gpu_layers} "
        f"(offloaded: {'?' if report.n_gpu_layers_offloaded is None else report.n_gpu_layers_offloaded}), "
        f"n_ctx {report.n_ctx}, threads {report.threads or 'default'}, parse config {report.parse_config}, "
        f"embedder {report.embedder or 'none'}",
        "",
        "capabilities",
    ]
    lines += [f"  {'pass' if c.passed else 'FAIL'}  {c.name:<18} {c.detail}" for c in report.capabilities]
    if report.cases:
        lines += ["", f"smoke suite  {sum(c.passed for c in report.cases)}/{len(report.cases)} passed  "
                      + "  ".join(f"{k} {v}" for k, v in report.kind_rates().items())]
        for outcome in report.cases:
            lines.append(f"  {'pass' if outcome.passed else 'FAIL'}  {outcome.case.id:<32} {outcome.seconds:6.1f} s  "
                         f"{outcome.detail[:90]}")
    lines += [
        "",
        "speed and memory",
        f"  prompt {_fmt(report.prompt_tps)} tok/s, generated {_fmt(report.gen_tps)} tok/s; mean s/request "
        + (", ".join(f"{k} {v}" for k, v in report.kind_seconds().items()) or "-"),
        f"  load {_fmt(report.load_seconds)} s, +{format_size(report.model_rss)} RSS from loading (weights, KV cache, "
        f"buffers), peak process RSS {format_size(report.peak_rss)}",
    ]
    if report.recommended_n_ctx and report.recommended_n_gpu_layers:
        lines += [
            f"  recommended n_ctx {report.recommended_n_ctx.value}: {report.recommended_n_ctx.reason}",
            f"  recommended n_gpu_layers {report.recommended_n_gpu_layers.value}: {report.recommended_n_gpu_layers.reason}",
        ]
    lines += [f"  note: {n}" for n in report.notes]
    lines += ["", f"verdict: {verdict.upper()} ({why}; thresholds: good >= {GOOD:.0%}, usable >= {USABLE:.0%} of the "
                  "smoke suite, and every capability must pass)"]
    if report.gen_tps is not None and report.gen_tps < SLOW_TOKENS_PER_SECOND:
        lines.append(f"speed: slow here ({report.gen_tps:.1f} generated tok/s < {SLOW_TOKENS_PER_SECOND:.0f}); a GPU or "
                     "a smaller model answers faster")
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}"


def write_report(report: CheckReport, out: Any = None) -> None:
    out = out or sys.stdout
    print(render(report), file=out)
    print(json.dumps(report.as_json(), separators=(",", ":")), file=out)


__all__ = ["CheckReport", "Capability", "run_check", "render", "write_report", "check_capabilities"]
