"""stdio end to end: the demo client (clients/demo_stdio.py) against a spawned server process.

The first test spawns a server with the fake engine (fast, every CI run); the `model` test spawns the
real `prefcall serve` with the embedded GGUF model and the packaged embedder (one pass over every tool).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import anyio
import pytest
from mcp import StdioServerParameters

import prefcall
from prefcall.demo import DEMO_CLIENT

SUPPORT = Path(__file__).with_name("test_server_support.py")
SOURCE = Path(prefcall.__file__).resolve().parents[1]  # the prefcall under test, for spawned processes too


def load_demo_client() -> ModuleType:
    """clients/demo_stdio.py as a module (it is a script beside the package, not part of it)."""
    spec = importlib.util.spec_from_file_location("prefcall_demo_stdio", DEMO_CLIENT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_demo_against(parameters: StdioServerParameters) -> dict:
    demo = load_demo_client()
    lines: list[str] = []
    summary = anyio.run(demo.run_demo, parameters, lines.append)
    summary["output"] = "\n".join(lines)
    return summary


def test_the_demo_client_exercises_every_tool_over_stdio(tmp_path: Path) -> None:
    parameters = StdioServerParameters(
        command=sys.executable, args=[str(SUPPORT), str(tmp_path / "stdio.db")],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT.parent), str(SOURCE)])},
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


def test_prefcall_demo_runs_the_client_in_its_own_process(tmp_path: Path) -> None:
    from prefcall.demo import run
    from prefcall.errors import ConfigError

    class Args:
        model, n_gpu_layers, n_ctx, threads = None, None, None, 1

    client = tmp_path / "client.py"
    client.write_text("import sys\nraise SystemExit(3 if sys.argv[1:] == ['--server-arg=--threads=1'] else 1)\n")
    assert run(Args(), client) == 3
    with pytest.raises(ConfigError, match="demo client not found"):
        run(Args(), tmp_path / "missing.py")


@pytest.mark.model
def test_prefcall_serve_with_the_embedded_model_end_to_end(tmp_path: Path) -> None:
    demo = load_demo_client()
    parameters = demo.server_parameters(tmp_path / "e2e.db", [])
    summary = run_demo_against(parameters)
    assert summary["ok"], summary["output"]
    assert demo.EXPECTED_TOOLS <= {s["step"] for s in summary["steps"]}
