"""`prefcall bench --only served`: the served engine beside the in-process one, on the raw engine contract.

Three measurements, each side by side in one run:

1. **Latency per call kind** (sequential, interleaved): `generate` with a JSON Schema (argument filling) and
   `score_candidates` over function names (function selection), in-process vs served, on the same model.
2. **Throughput with 1, 4 and 16 concurrent clients** (threads, a different user each): requests per second and
   p95 latency, in-process vs served. The served side is llama-cpp-python's server spawned here on the same GGUF
   (one model, one lock: it serialises like the in-process engine), or the engine PREFCALL_ENGINE names.
3. **Client overhead** against a local stub speaking llama-server's API with a fixed 250 ms per request: the
   served engine's own throughput at 1/4/16 clients. It scales with the clients when nothing on prefcall's side
   serialises requests (no process-wide lock; a pooled HTTP client). The stub runs in this process, so on a
   loaded 2-core machine its own HTTP parsing competes with the clients for the CPU; 250 ms keeps that small.

On a 2-core machine the first two are bounded by the CPU the model gets; their concurrency figures say how the
queue behaves, not how a GPU server would scale (see BENCHMARKS.md, "Scaling out").
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prefcall.bench.context import BenchContext
from prefcall.bench.stats import ratio, summarize
from prefcall.config import Settings
from prefcall.engine.base import Engine, Prompt, Scope

SERVER_MODULES = ("fastapi", "sse_starlette", "starlette_context", "uvicorn", "pydantic_settings")
FUNCTIONS = ["GetRestaurants", "GetFlights", "GetHotels", "GetWeather", "BookRestaurant", "GetMovies"]
CALL_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "enum": FUNCTIONS},
                   "arguments": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                                                  "date": {"type": "string", "maxLength": 12}},
                                 "required": ["city"], "additionalProperties": False}},
    "required": ["name", "arguments"], "additionalProperties": False,
}
SYSTEM = ("You turn a user's request into one API call. Functions: "
          + "; ".join(f"{f}(city, date)" for f in FUNCTIONS) + ". Answer with the call only.")
LEVELS = (1, 4, 16)


def server_extra_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in SERVER_MODULES)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def server_process(command: list[str], url: str, health: str, log: Path, *, what: str, wait_s: float = 120,
                   started: list[subprocess.Popen] | None = None) -> Iterator[str]:
    """A server run as a child process (its output in `log`), waited for until GET `health` answers 200, stopped
    when the block ends; yields `url` (`started` gets the process, for callers that measure it)."""
    import httpx

    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    if started is not None:
        started.append(process)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{what} exited ({process.returncode}): {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}{health}", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start within {wait_s:g} s: {log.read_text()[-2000:]}")
            time.sleep(0.3)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


@contextlib.contextmanager
def llama_cpp_python_server(model: Path, *, threads: int, n_ctx: int, log: Path,
                            started: list[subprocess.Popen] | None = None) -> Iterator[str]:
    """llama-cpp-python's OpenAI-compatible server on 127.0.0.1 (a free port); its URL while the block runs
    (`started` gets its process, for callers that measure it)."""
    port = free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
               "--port", str(port), "--n_threads", str(threads), "--n_threads_batch", str(threads),
               "--n_ctx", str(n_ctx), "--seed", "0"]
    with server_process(command, f"http://127.0.0.1:{port}", "/v1/models", log, what="llama-cpp-python server",
                        started=started) as url:
        yield url


def _prompt(ctx: BenchContext, i: int, prefix: str = "") -> Prompt:
    return Prompt.chat(SYSTEM, ctx.item(i).utterance, prefix=prefix)


def _calls(ctx: BenchContext, max_tokens: int) -> dict[str, Callable[[Engine, int, Scope], Any]]:
    candidates = [" " + f for f in FUNCTIONS]
    return {
        "generate_with_schema": lambda e, i, s: e.generate(_prompt(ctx, i), json_schema=CALL_SCHEMA,
                                                           max_tokens=max_tokens, scope=s),
        "score_candidates": lambda e, i, s: e.score_candidates(_prompt(ctx, i, "Function:"), candidates, scope=s),
    }


def latency(ctx: BenchContext, engines: dict[str, Engine], max_tokens: int) -> dict[str, Any]:
    """Sequential latency per call kind, the engines interleaved call by call."""
    n = 2 if ctx.quick else 4 * max(1, ctx.reps)
    out: dict[str, Any] = {}
    for kind, call in _calls(ctx, max_tokens).items():
        seconds: dict[str, list[float]] = {name: [] for name in engines}
        for i in range(n):
            for name, engine in engines.items():
                started = time.perf_counter()
                call(engine, i, Scope(f"user{i}"))
                seconds[name].append(time.perf_counter() - started)
        out[kind] = {name: summarize(values, scale=1000, digits=1) for name, values in seconds.items()}
        names = list(engines)
        if len(names) == 2:
            out[kind]["served_over_in_process_p50"] = ratio(out[kind][names[1]]["p50"], out[kind][names[0]]["p50"])
    return out


def throughput(ctx: BenchContext, engine: Engine, call: Callable[[Engine, int, Scope], Any],
               levels: tuple[int, ...] = LEVELS, per_client: int = 1) -> dict[str, Any]:
    """Requests per second and latency with N concurrent clients (threads, one user each)."""
    out: dict[str, Any] = {}
    for clients in levels:
        latencies: list[float] = []
        errors: list[str] = []
        lock = threading.Lock()

        def client(index: int, clients: int = clients) -> None:
            for r in range(per_client):
                started = time.perf_counter()
                try:
                    call(engine, index * per_client + r, Scope(f"client{index}"))
                except Exception as exc:  # noqa: BLE001 - counted and reported
                    with lock:
                        errors.append(f"{type(exc).__name__}: {exc}"[:200])
                    continue
                with lock:
                    latencies.append(time.perf_counter() - started)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - started
        out[str(clients)] = {"requests": clients * per_client, "errors": len(errors), "seconds": round(wall, 2),
                             "throughput_rps": round(len(latencies) / wall, 3) if wall > 0 else None,
                             "latency_s": summarize(latencies, digits=3), "first_error": errors[0] if errors else None}
    return out


# -- the client-overhead stub ----------------------------------------------------------------------------------------
class _StubHandler(BaseHTTPRequestHandler):
    delay = 0.25
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet
        return

    def _json(self, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._json({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 64, "model_path": "stub.gguf",
                    "chat_template": None})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/tokenize":
            self._json({"tokens": [100 + (ord(c) % 50) for c in body.get("content", "")[:64]]})
        elif self.path == "/apply-template":
            text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in body["messages"])
            self._json({"prompt": text + "<|im_start|>assistant\n"})
        elif self.path == "/completion":
            time.sleep(self.delay)  # a backend that takes 250 ms per request, whatever else is running
            events = [{"content": "ok", "stop": False, "completion_probabilities": [{"token": "ok", "logprob": -0.1}]},
                      {"content": "", "stop": True, "stop_type": "eos", "timings": {"cache_n": 0}}]
            payload = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()


def client_overhead(ctx: BenchContext) -> dict[str, Any]:
    """The served engine's own concurrency against a 250 ms stub: throughput should grow with the clients."""
    from prefcall.engine.served import load_served_engine

    server = ThreadingHTTPServer(("127.0.0.1", 0), _StubHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        engine = load_served_engine(Settings(engine=f"llama-server:{url}", engine_pool=32))
        call = lambda e, i, s: e.generate(Prompt.chat("S", f"request {i}"), max_tokens=4, scope=s)  # noqa: E731
        call(engine, 0, Scope("warm"))
        levels = throughput(ctx, engine, call, per_client=2 if ctx.quick else 5)
        engine.close()
    finally:
        server.shutdown()
        server.server_close()
    one = levels["1"]["throughput_rps"] or 0.0
    for level in levels.values():
        level["speedup_over_1_client"] = ratio(level["throughput_rps"], one)
    return {"stub_delay_ms": _StubHandler.delay * 1000, "levels": levels}


# -- the section -------------------------------------------------------------------------------------------------------
def section_served(ctx: BenchContext) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    ctx.log("bench: served: client overhead against a 250 ms stub ...")
    figures["client_overhead"] = client_overhead(ctx)
    max_tokens = 24 if ctx.quick else 48
    with contextlib.ExitStack() as stack:
        engines, note = _engines(ctx, stack)
        figures["engines"] = {name: {"backend": e.info.backend, "model": e.info.model_name} for name, e in
                              engines.items()}
        figures["note"] = note
        if len(engines) == 2 and ctx.engine_factory is None:
            ctx.log("bench: served: answer parity on the parity requests (evaluation/parity.py) ...")
            figures["answers"] = answer_parity(ctx, engines)
        if len(engines) == 2:
            ctx.log("bench: served: latency per call kind ...")
            figures["latency_ms"] = latency(ctx, engines, max_tokens)
            ctx.log("bench: served: throughput with 1, 4, 16 clients ...")
            call = _calls(ctx, max_tokens)["generate_with_schema"]
            figures["throughput"] = {name: throughput(ctx, engine, call) for name, engine in engines.items()}
    headline: list[tuple[str, Any]] = []
    for kind, row in figures.get("latency_ms", {}).items():
        headline.append((f"{kind} p50 ms in-process / served",
                         f"{row['in-process'].get('p50')} / {row['served'].get('p50')}"))
    for name, levels in figures.get("throughput", {}).items():
        headline.append((f"{name} rps at 1/4/16 clients",
                         " / ".join(str(levels[str(c)]["throughput_rps"]) for c in LEVELS)))
    answers = figures.get("answers")
    if answers:
        headline.append(("answers the same served (all / clear of the noise)",
                         f"{answers['same']}/{answers['requests']} / {answers['stable_same']}/{answers['stable']}"))
        parse = {name: times.get("parse_request") for name, times in answers.get("seconds", {}).items()}
        if all(parse.values()) and parse:
            headline.append(("parse_request p50 / p95 s in-process; served (MCP, one client)",
                             "; ".join(f"{t['p50']} / {t['p95']}" for t in parse.values())))
    stub = figures["client_overhead"]["levels"]
    headline.append(("client vs 250 ms stub: rps at 1/4/16",
                     " / ".join(str(stub[str(c)]["throughput_rps"]) for c in LEVELS)))
    top = stub[str(LEVELS[-1])]
    # A lock on prefcall's side would hold this at 1x; 4x leaves room for a loaded 2-core machine.
    targets = [{"name": f"served: no client-side serialisation ({LEVELS[-1]} clients vs 1, 250 ms stub)",
                "value": top.get("speedup_over_1_client"), "limit": 4.0,
                "met": (top.get("speedup_over_1_client") or 0) >= 4.0, "unit": "x"}]
    return {"figures": figures, "targets": targets, "headline": headline}


def answer_parity(ctx: BenchContext, engines: dict[str, Engine]) -> dict[str, Any]:
    """The parity requests through MCP on both engines (evaluation.parity.compare): how many answers are the same,
    how many stand clear of the measured score noise, and the score noise itself."""
    import anyio

    from prefcall.evaluation.parity import compare

    settings = ctx.settings.model_copy(update={"engine": None})
    report = anyio.run(compare, engines["in-process"], engines["served"], ctx.embedder(), settings, settings)
    return report.summary()


def _engines(ctx: BenchContext, stack: contextlib.ExitStack) -> tuple[dict[str, Engine], str]:
    if ctx.engine_factory is not None:  # tests: fakes on both sides
        return {"in-process": ctx.engine(), "served": ctx.new_engine()}, "injected engines (tests)"
    from prefcall.engine.llama import LlamaEngine
    from prefcall.engine.resolve import resolve_model_path
    from prefcall.engine.served import load_served_engine, parse_engine_spec

    settings = ctx.settings
    local_settings = settings.model_copy(update={"engine": None})
    local = LlamaEngine(local_settings)
    stack.callback(local.close)
    if parse_engine_spec(settings.engine, settings.engine_model) is not None:
        served = load_served_engine(settings)
        stack.callback(served.close)
        return {"in-process": local, "served": served}, f"served engine from PREFCALL_ENGINE ({settings.engine})"
    if not server_extra_installed():
        return {"in-process": local}, ("skipped the served side: llama-cpp-python's server extra is missing "
                                       "(pip install prefcall[server]) and PREFCALL_ENGINE names no served engine")
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="prefcall-served-")))
    threads = settings.n_threads or 1
    # The server names the file, so the served engine reads its template and its fit (as a user's would).
    url = stack.enter_context(llama_cpp_python_server(resolve_model_path(settings.model), threads=threads,
                                                      n_ctx=local.info.n_ctx, log=folder / "server.log"))
    served = load_served_engine(Settings(engine=f"llama-cpp-python:{url}", n_ctx=local.info.n_ctx,
                                         engine_timeout_s=600))
    stack.callback(served.close)
    return {"in-process": local, "served": served}, (
        f"served: llama-cpp-python server spawned here on the same GGUF, {threads} thread(s), 127.0.0.1")
