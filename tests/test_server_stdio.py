"""stdio end to end: the demo client (clients/demo_stdio.py) against a spawned server process.

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

from prefcall.demo import DEMO_CLIENT, load_demo_client

SUPPORT = Path(__file__).with_name("test_server_support.py")


def run_demo_against(parameters: StdioServerParameters) -> dict:
    demo = load_demo_client()
    lines: list[str] = []
    summary = anyio.run(demo.run_demo, parameters, lines.append)
    summary["output"] = "\n".join(lines)
    return summary


def test_the_demo_client_exercises_every_tool_over_stdio(tmp_path: Path) -> None:
    parameters = StdioServerParameters(
        command=sys.executable, args=[str(SUPPORT), str(tmp_path / "stdio.db")],
        env={**os.environ, "PYTHONPATH": str(SUPPORT.parent)},
    )
    summary = run_demo_against(parameters)
    assert summary["ok"], summary["output"]
    steps = {s["step"] for s in summary["steps"]}
    demo = load_demo_client()
    assert demo.EXPECTED_TOOLS <= steps
    assert {"resource profiles://", "resource schemas://", "prompt use_prefcall"} <= steps
    assert summary["log_messages"] > 0  # MCP logging notifications arrived for the opted-in client
    assert "GetFlights" in summary["output"]


def test_prefcall_demo_finds_its_client() -> None:
    assert DEMO_CLIENT.is_file()
    from prefcall.demo import server_args

    class Args:
        model, n_gpu_layers, n_ctx, threads = None, -1, None, 2

    assert server_args(Args()) == ["--server-arg=--n-gpu-layers=-1", "--server-arg=--threads=2"]


@pytest.mark.model
def test_prefcall_serve_with_the_embedded_model_end_to_end(tmp_path: Path) -> None:
    demo = load_demo_client()
    parameters = demo.server_parameters(tmp_path / "e2e.db", [])
    summary = run_demo_against(parameters)
    assert summary["ok"], summary["output"]
    assert demo.EXPECTED_TOOLS <= {s["step"] for s in summary["steps"]}
