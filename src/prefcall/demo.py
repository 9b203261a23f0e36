"""`prefcall demo`: an MCP host in miniature. It spawns `prefcall serve` over stdio (embedded model, temporary
database), creates a demo user with standing instructions and a small catalogue, calls every tool, resource and
prompt, and CHECKS THE ANSWERS: each step says what a user would expect (the calls, the refusal, the question,
the selected tool, the tags) and the demo exits non-zero when an answer is wrong, not only when a call fails.

    prefcall demo                       # from an installed package
    python -m prefcall.demo             # the same
    python clients/demo_stdio.py        # the example host script in a source checkout (calls this module)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp_types import ElicitResult

USER = "demo-user"
CATALOGUE = "demo-travel"
INSTRUCTIONS = [
    "When I book flights, I always fly with Delta Airlines.",
    "If I look for hotels, I want a 4 star rating.",
    "When I search for restaurants, I like Italian food.",
]
# An MCP tools/list, the way a host would hand its tools to prefcall.
TOOLS = [
    {
        "name": "GetFlights",
        "description": "Search flights to a destination city, optionally on a given airline.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "destination_city": {"type": "string", "description": "city to fly to"},
                "origin_city": {"type": "string", "description": "city to fly from"},
                "airlines": {"type": "string", "description": "airline name"},
            },
            "required": ["destination_city"],
        },
    },
    {
        "name": "GetHotels",
        "description": "Search hotels in a city.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "city of the hotel"},
                "star_rating": {"type": "string", "description": "number of stars"},
            },
            "required": ["location"],
        },
    },
    {
        "name": "GetRestaurants",
        "description": "Search restaurants in a city by cuisine.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "city of the restaurant"},
                "cuisine": {"type": "string", "description": "type of food"},
            },
            "required": ["city"],
        },
    },
]
# What a user expects from each answer (`prefcall demo` fails when one differs).
EXPECTED_SLOTS = {  # instruction -> the slot its tag must carry
    INSTRUCTIONS[0]: "[SL:AIRLINES Delta Airlines ]",
    INSTRUCTIONS[1]: "[SL:STAR_RATING 4 ]",
    INSTRUCTIONS[2]: "[SL:CUISINE Italian ]",
}
FLIGHT_CALL = {"name": "GetFlights", "arguments": {"destination_city": "Chicago", "airlines": "Delta Airlines"}}
EXPECTED_TOOLS = {
    "parse_request", "select_tools_nlt", "clarify", "tag_profile", "create_profile", "add_instruction",
    "remove_instruction", "list_instructions", "list_catalogues", "import_catalogue", "report_feedback",
}  # fmt: skip


def server_parameters(db_path: Path, extra_args: list[str] | None = None,
                      env: dict[str, str] | None = None) -> StdioServerParameters:
    """`python -m prefcall.cli serve` (this Python, this installed prefcall) with its own database (the demo never
    touches your profiles)."""
    environment = {**os.environ, "PREFCALL_DB_PATH": str(db_path), **(env or {})}
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "prefcall.cli", "serve", *(extra_args or [])],
        env=environment,
    )


class Demo:
    """Runs the steps, prints each result readably, and records what happened for the summary."""

    def __init__(self, client: Client, out: Callable[[str], None]) -> None:
        self.client = client
        self.out = out
        self.steps: list[dict[str, Any]] = []

    async def call(self, tool: str, arguments: dict[str, Any], *, expect_error: bool = False) -> dict[str, Any]:
        started = time.perf_counter()
        result = await self.client.call_tool(tool, arguments)
        seconds = time.perf_counter() - started
        text = result.content[0].text if result.content else ""
        ok = result.is_error == expect_error
        self.steps.append({"step": tool, "ok": ok, "seconds": round(seconds, 2), "error": result.is_error})
        mark = "ok " if ok else "FAIL"
        if result.is_error:
            kind = "expected error" if expect_error else "error"
            self.out(f"[{mark}] {tool} ({seconds:.1f}s) -> {kind}: {text}")
            return {}
        if expect_error:
            self.out(f"[{mark}] {tool} ({seconds:.1f}s) -> succeeded but should have failed")
            return result.structured_content or {}
        self.out(f"[{mark}] {tool} ({seconds:.1f}s)")
        return result.structured_content or {}

    def note(self, step: str, ok: bool, detail: str) -> None:
        self.steps.append({"step": step, "ok": ok, "seconds": 0.0, "error": not ok})
        self.out(f"[{'ok ' if ok else 'FAIL'}] {step}: {detail}")

    def expect(self, step: str, expected: Any, got: Any) -> bool:
        """An answer check: the step's answer must equal what a user would expect, or the demo fails."""
        ok = got == expected
        self.steps.append({"step": f"answer: {step}", "ok": ok, "seconds": 0.0, "error": False, "answer": True})
        self.out(f"[{'ok ' if ok else 'FAIL'}] answer: {step}: "
                 + (f"{json.dumps(got, ensure_ascii=False)}" if ok else
                    f"expected {json.dumps(expected, ensure_ascii=False)}, got {json.dumps(got, ensure_ascii=False)}"))
        return ok


def show(out: Callable[[str], None], label: str, value: Any) -> None:
    out(f"      {label}: {json.dumps(value, ensure_ascii=False)}")


async def run_steps(demo: Demo) -> None:
    out = demo.out
    listed = await demo.client.list_tools()
    names = {t.name for t in listed.tools}
    demo.note("tools/list", EXPECTED_TOOLS <= names, f"{len(names)} tools, all with output schemas: "
              f"{all(t.output_schema for t in listed.tools)}")

    await demo.call("create_profile", {"user_id": USER})
    for text in INSTRUCTIONS:
        await demo.call("add_instruction", {"user_id": USER, "text": text})
    imported = await demo.call("import_catalogue", {"name": CATALOGUE, "tools": TOOLS, "replace": True,
                                                    "description": "demo travel tools"})
    show(out, "catalogue", imported.get("functions"))
    catalogues = await demo.call("list_catalogues", {})
    show(out, "catalogues", [c["name"] for c in catalogues.get("catalogues", [])])

    tagged = await demo.call("tag_profile", {"user_id": USER, "catalogue": CATALOGUE})
    for item in tagged.get("instructions", []):
        show(out, f"tags ({item['status']})", item.get("tags") or item.get("errors"))
    tags = {item["text"]: item.get("tags") or "" for item in tagged.get("instructions", [])}
    demo.expect("tag_profile slots", EXPECTED_SLOTS,
                {text: slot for text, slot in EXPECTED_SLOTS.items() if slot in tags.get(text, "")})

    request = "I need a flight to Chicago next week."
    parsed = await demo.call("parse_request", {"user_id": USER, "dialogue": request, "catalogue": CATALOGUE,
                                               "config": "full"})
    show(out, "decision", parsed.get("decision"))
    show(out, "calls", parsed.get("calls"))
    show(out, "instructions used", parsed.get("instructions_used"))
    trace = parsed.get("trace", {})
    show(out, "trace", {k: trace.get(k) for k in ("seconds", "evaluated", "reused", "model_calls")})
    demo.expect("flight request -> one call, the airline from the standing instruction",
                {"decision": "call", "calls": [FLIGHT_CALL]},
                {"decision": parsed.get("decision"), "calls": parsed.get("calls")})

    weather = await demo.call("parse_request", {"user_id": USER, "dialogue": "What's the weather like tomorrow?",
                                                "catalogue": CATALOGUE})
    demo.expect("weather request -> refuse (no tool fits)", {"decision": "refuse", "calls": []},
                {"decision": weather.get("decision"), "calls": weather.get("calls")})

    hotel = await demo.call("parse_request", {"user_id": USER, "dialogue": "Find me a hotel.", "catalogue": CATALOGUE})
    show(out, "question", hotel.get("question"))
    demo.expect("hotel request without a city -> ask for the location, stars from the instruction",
                {"decision": "ask", "missing": ["location"], "calls": [{"name": "GetHotels",
                                                                        "arguments": {"star_rating": "4"}}]},
                {"decision": hotel.get("decision"), "missing": [m["argument"] for m in hotel.get("missing", [])],
                 "calls": hotel.get("calls")})

    selection = await demo.call("select_tools_nlt", {"message": "Book me a hotel in Paris", "catalogue": CATALOGUE,
                                                     "mode": "score"})
    show(out, "NLT selected", selection.get("selected"))
    show(out, "P(YES)", {d["name"]: round(d["probability"] or 0, 3) for d in selection.get("decisions", [])})
    demo.expect("select_tools_nlt hotel request -> the hotel tool only", ["GetHotels"], selection.get("selected"))

    clarified = await demo.call("clarify", {"user_id": USER, "dialogue": "Find me a hotel.", "catalogue": CATALOGUE})
    show(out, "clarify", {k: clarified.get(k) for k in ("decision", "question", "elicited", "answer")})
    asked = clarified.get("answer") or {m["argument"]: None for m in clarified.get("missing_arguments", [])}
    demo.expect("clarify a hotel request without a city -> the location is asked for", ["location"], sorted(asked))

    if parsed.get("calls"):
        feedback = await demo.call("report_feedback", {"user_id": USER, "dialogue": request, "catalogue": CATALOGUE,
                                                       "calls": parsed["calls"], "outcome": "accepted",
                                                       "instructions_used": parsed.get("instructions_used")})
    else:
        feedback = await demo.call("report_feedback", {"user_id": USER, "dialogue": request, "catalogue": CATALOGUE,
                                                       "outcome": "corrected", "calls": [
                                                           {"name": "GetFlights", "arguments": {
                                                               "destination_city": "Chicago", "airlines": "Delta"}}]})
    show(out, "demonstration", feedback.get("demonstration_id"))

    # Bad input is a tool error with one actionable line, and the server keeps serving.
    await demo.call("parse_request", {"user_id": "nobody-here", "dialogue": request, "catalogue": CATALOGUE},
                    expect_error=True)
    await demo.call("parse_request", {"user_id": USER, "dialogue": "", "catalogue": CATALOGUE}, expect_error=True)

    profile = await demo.client.read_resource(f"profiles://{USER}")
    count = len(json.loads(profile.contents[0].text)["instructions"])
    demo.note("resource profiles://", count == len(INSTRUCTIONS), f"{count} instructions")
    schema = await demo.client.read_resource(f"schemas://{CATALOGUE}")
    demo.note("resource schemas://", CATALOGUE in schema.contents[0].text, "catalogue JSON read")
    prompt = await demo.client.get_prompt("use_prefcall", {"user_id": USER, "catalogue": CATALOGUE})
    demo.note("prompt use_prefcall", bool(prompt.messages), f"{len(prompt.messages)} message(s)")

    listed_instructions = await demo.call("list_instructions", {"user_id": USER})
    last = listed_instructions.get("instructions", [])[-1]
    removed = await demo.call("remove_instruction", {"user_id": USER, "instruction_id": last["id"]})
    show(out, "instructions left", removed.get("instructions"))


async def answer_elicitation(context: Any, params: Any) -> ElicitResult:
    """What a user would type into the host's form: every asked field answered with a plausible value."""
    fields = (params.requested_schema or {}).get("properties", {})
    content = {name: ("Paris" if "location" in name or "city" in name else "4") for name in fields}
    print(f"      (elicitation) {params.message} -> {content}", flush=True)
    return ElicitResult(action="accept", content=content)


async def run_demo(parameters: StdioServerParameters, out: Callable[[str], None] = print) -> dict[str, Any]:
    """Connect, run every step, return a summary {ok, steps, failed, seconds}."""
    started = time.perf_counter()
    logs: list[str] = []

    async def on_log(params: Any) -> None:
        logs.append(str(params.data))

    async with Client(parameters, elicitation_callback=answer_elicitation, logging_callback=on_log,
                      log_level="info", read_timeout_seconds=600) as client:
        demo = Demo(client, out)
        await run_steps(demo)
    failed = [s["step"] for s in demo.steps if not s["ok"]]
    wrong = [s["step"] for s in demo.steps if not s["ok"] and s.get("answer")]
    return {"ok": not failed, "steps": demo.steps, "failed": failed, "wrong_answers": wrong,
            "log_messages": len(logs), "seconds": round(time.perf_counter() - started, 1)}


def server_args(args: argparse.Namespace) -> list[str]:
    """Model options given to `prefcall demo` are passed on to `prefcall serve`."""
    options = {"--model": "model", "--n-gpu-layers": "n_gpu_layers", "--n-ctx": "n_ctx", "--threads": "threads",
               "--engine": "engine"}
    out = []
    for flag, attribute in options.items():
        value = getattr(args, attribute, None)
        if value is not None:
            out.append(f"{flag}={value}")
    return out


def report(summary: dict[str, Any]) -> int:
    passed = sum(s["ok"] for s in summary["steps"])
    answers = [s for s in summary["steps"] if s.get("answer")]
    right = sum(s["ok"] for s in answers)
    print(f"\nprefcall demo: {passed}/{len(summary['steps'])} steps ok ({right}/{len(answers)} answers right) in "
          f"{summary['seconds']}s, {summary['log_messages']} log notifications received"
          + (f"; FAILED: {', '.join(summary['failed'])}" if summary["failed"] else ""))
    return 0 if summary["ok"] else 1


def run(args: argparse.Namespace, *, db: Path | None = None,
        runner: Callable[..., Awaitable[dict[str, Any]]] = run_demo) -> int:
    """`prefcall demo`: spawn the server with this Python and the given model options, run, report."""
    with tempfile.TemporaryDirectory(prefix="prefcall-demo-") as folder:
        path = db or Path(folder) / "demo.db"
        print(f"prefcall demo: starting `prefcall serve` over stdio (database {path}) ...", flush=True)
        summary = anyio.run(runner, server_parameters(path, server_args(args)))
    return report(summary)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="database to use (default: a temporary one, deleted afterwards)")
    for flag in ("--model", "--n-gpu-layers", "--n-ctx", "--threads", "--engine"):
        parser.add_argument(flag, help=f"passed to `prefcall serve {flag}`")
    args = parser.parse_args(argv)
    return run(args, db=Path(args.db) if args.db else None)


if __name__ == "__main__":
    raise SystemExit(main())
