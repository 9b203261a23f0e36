"""`prefcall demo`: run clients/demo_stdio.py against `prefcall serve` (stdio, embedded model, temporary DB)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from prefcall.errors import ConfigError

DEMO_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "demo_stdio.py"


def load_demo_client(path: Path = DEMO_CLIENT) -> ModuleType:
    """The demo client module, loaded from the source checkout (it doubles as an example host)."""
    if not path.is_file():
        raise ConfigError(f"demo client not found at {path}: run `prefcall demo` from a source checkout "
                          "(git clone) or run clients/demo_stdio.py directly")
    spec = importlib.util.spec_from_file_location("prefcall_demo_stdio", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def server_args(args: argparse.Namespace) -> list[str]:
    """Model options given to `prefcall demo` are passed on to `prefcall serve`."""
    options = {"--model": "model", "--n-gpu-layers": "n_gpu_layers", "--n-ctx": "n_ctx", "--threads": "threads"}
    out = []
    for flag, attribute in options.items():
        value = getattr(args, attribute, None)
        if value is not None:
            out.append(f"--server-arg={flag}={value}")
    return out


def run(args: argparse.Namespace) -> int:
    client = load_demo_client()
    return int(client.main(server_args(args)))
