"""`prefcall demo`: run clients/demo_stdio.py against `prefcall serve` (stdio, embedded model, temporary DB)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from prefcall.errors import ConfigError

DEMO_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "demo_stdio.py"


def server_args(args: argparse.Namespace) -> list[str]:
    """Model options given to `prefcall demo` are passed on to `prefcall serve`."""
    options = {"--model": "model", "--n-gpu-layers": "n_gpu_layers", "--n-ctx": "n_ctx", "--threads": "threads"}
    out = []
    for flag, attribute in options.items():
        value = getattr(args, attribute, None)
        if value is not None:
            out.append(f"--server-arg={flag}={value}")
    return out


def run(args: argparse.Namespace, client: Path = DEMO_CLIENT) -> int:
    """The demo client (it doubles as an example host) in its own process, with this Python."""
    if not client.is_file():
        raise ConfigError(f"demo client not found at {client}: run `prefcall demo` from a source checkout "
                          "(git clone) or run clients/demo_stdio.py directly")
    return subprocess.call([sys.executable, str(client), *server_args(args)])
