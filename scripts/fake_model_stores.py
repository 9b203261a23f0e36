#!/usr/bin/env python3
"""Lay out a fake Hugging Face cache, Ollama store and LM Studio folder for trying `prefcall model list`.

    python scripts/fake_model_stores.py /tmp/stores [--real-0.5b FILE] [--real-1.5b FILE]
    eval "$(python scripts/fake_model_stores.py /tmp/stores --exports-only)"

Small well-formed GGUFs (and a truncated one, a missing Ollama blob, a non-GGUF file) in the layouts those
tools use. --real-0.5b / --real-1.5b expose real Qwen2.5-Coder GGUFs through the stores as symlinks (no copy):
the 0.5B in the HF cache (catalogue name qwen2.5-coder-0.5b), the 1.5B as ollama:qwen2.5-coder:1.5b.
Prints the environment variables that point prefcall at the stores.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from prefcall.modelhub.testing import build_fake_stores


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--real-0.5b", dest="real_05", type=Path)
    parser.add_argument("--real-1.5b", dest="real_15", type=Path)
    parser.add_argument("--exports-only", action="store_true")
    args = parser.parse_args()
    real = {k: v for k, v in (("0.5b", args.real_05), ("1.5b", args.real_15)) if v is not None}
    stores = build_fake_stores(args.folder, real_models=real)
    if not args.exports_only:
        print(f"# fake stores in {stores.root}")
    for key, value in stores.env.items():
        print(f"export {key}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
