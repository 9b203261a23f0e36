"""stdio end to end: the demo client (prefcall.demo) against a spawned server process.

The first test spawns a server with the fake engine (fast, every CI run); the `model` test spawns the
real `prefcall serve` with the embedded GGUF model and the packaged embedder (one pass over every tool).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
from mcp import StdioServerParameters

import prefcall
from prefcall import demo

SUPPORT = Path(__file__).with_name("test_server_support.py")
SOURCE = Path(prefcall.__file__).resolve().parents[1]  # the prefcall under test, for spawned processes too


def run_demo_against(parameters: StdioServerParameters) -> dict:
    lines: list[str] = []
    summary = anyio.run(demo.run_demo, parameters, lines.append)
    summary["output"] = "\n".join(lines)
    return summary


def test_the_demo_exercises_every_tool_over_stdio_and_fails_on_wrong_answers(tmp_path: Path) -> None:
    # The fake engine answers every request with the smallest valid JSON: the protocol steps all work, but the
    # answers are not what a user expects, and the demo must say so (and `prefcall demo` exit non-zero).
    parameters = StdioServerParameters(
        command=sys.executable, args=[str(SUPPORT), str(tmp_path / "stdio.db")],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT.parent), str(SOURCE)])},
    )
    summary = run_demo_against(parameters)
    protocol = [s for s in summary["steps"] if not s.get("answer")]
    assert all(s["ok"] for s in protocol), summary["output"]
    steps = {s["step"] for s in summary["steps"]}
    assert demo.EXPECTED_TOOLS <= steps
    assert {"resource profiles://", "resource schemas://", "prompt use_prefcall"} <= steps
    assert summary["log_messages"] > 0  # MCP logging notifications arrived for the opted-in client
    answers = [s["step"] for s in summary["steps"] if s.get("answer")]
    assert len(answers) == 6 and summary["wrong_answers"] and not summary["ok"]
    assert "answer: weather request -> refuse (no tool fits)" in answers
    assert demo.report(summary) == 1
    assert demo.report({**summary, "ok": True, "failed": []}) == 0


def test_prefcall_demo_passes_model_options_to_the_server() -> None:
    class Args:
        model, n_gpu_layers, n_ctx, threads = None, -1, None, 2

    assert demo.server_args(Args()) == ["--n-gpu-layers=-1", "--threads=2"]
    parameters = demo.server_parameters(Path("x.db"), demo.server_args(Args()))
    assert parameters.command == sys.executable
    assert parameters.args == ["-m", "prefcall.cli", "serve", "--n-gpu-layers=-1", "--threads=2"]

    class Served(Args):  # `prefcall demo --engine KIND:URL` runs the demo through that served engine
        engine = "llama-cpp-python:http://127.0.0.1:8000"

    assert demo.server_args(Served()) == ["--n-gpu-layers=-1", "--threads=2",
                                          "--engine=llama-cpp-python:http://127.0.0.1:8000"]


def test_prefcall_demo_reports_and_exits_with_the_runs_outcome(tmp_path: Path) -> None:
    class Args:
        model, n_gpu_layers, n_ctx, threads = None, None, None, 1

    seen = {}

    async def fake_runner(parameters):
        seen["args"] = parameters.args
        return {"ok": False, "steps": [{"step": "answer: x", "ok": False, "answer": True}], "failed": ["answer: x"],
                "wrong_answers": ["answer: x"], "log_messages": 0, "seconds": 0.0}

    assert demo.run(Args(), db=tmp_path / "d.db", runner=fake_runner) == 1
    assert seen["args"][-1] == "--threads=1"


@pytest.mark.model
def test_prefcall_serve_with_the_embedded_model_end_to_end(tmp_path: Path) -> None:
    parameters = demo.server_parameters(tmp_path / "e2e.db", [])
    summary = run_demo_against(parameters)
    assert summary["ok"], summary["output"]  # every step worked AND every answer is the expected one
    assert demo.EXPECTED_TOOLS <= {s["step"] for s in summary["steps"]}
