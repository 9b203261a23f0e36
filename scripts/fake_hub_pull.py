#!/usr/bin/env python3
"""Run `prefcall model pull` against a local stand-in for the Hugging Face hub (127.0.0.1 only).

    python scripts/fake_hub_pull.py WORKDIR [--real-0.5b FILE]

Starts prefcall.modelhub.testing.FakeHub, sets HF_ENDPOINT to it and HF_HOME to WORKDIR/hf, then runs, as a
user would (each a `prefcall model pull` subprocess):
1. a small GGUF whose bytes match the hub's LFS hash (installed);
2. the same pull again (already downloaded: verified, not fetched);
3. a file whose served bytes do not match the advertised hash (refused, deleted, exit status 2);
4. an interrupted pull: a partial file left in the cache, then the pull resumes with a Range request;
5. with --real-0.5b: a copy of the real Qwen2.5-Coder-0.5B file with one byte flipped, advertised under the real
   hash (refused), then the real file as the catalogue's qwen2.5-coder-0.5b (verified against the hub's hash and
   prefcall's pin, installed).
Prints every command, its output and exit status, and what the fake hub saw.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from prefcall.engine.recommended import find_recommended
from prefcall.modelhub.testing import FakeHub, gguf_bytes, sha256_of


def run(args: list[str], env: dict[str, str]) -> int:
    print(f"$ prefcall {' '.join(args)}", flush=True)
    done = subprocess.run([sys.executable, "-m", "prefcall.cli", *args], env=env, capture_output=True, text=True)
    for stream in (done.stdout, done.stderr):
        if stream.strip():
            print("\n".join("  " + line for line in stream.rstrip().splitlines()))
    print(f"  [exit status {done.returncode}]\n", flush=True)
    return done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--real-0.5b", dest="real", type=Path)
    args = parser.parse_args()
    hf_home = args.workdir / "hf"
    with FakeHub() as hub:
        good = gguf_bytes(name="Demo Q4_K_M", architecture="qwen2", context_length=32768)
        hub.add("demo/Demo-GGUF", "demo-q4_k_m.gguf", good)
        hub.add("demo/Demo-GGUF", "demo-q8_0.gguf", gguf_bytes(name="Demo Q8_0 (corrupted in transit)"),
                advertise_sha256=sha256_of(b"the bytes the uploader hashed"))
        big = gguf_bytes(name="Demo resumable", vocab=50_000)
        hub.add("demo/Demo-GGUF", "demo-f16.gguf", big)
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(hf_home), "HF_HUB_DISABLE_TELEMETRY": "1",
               "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
            env.pop(name, None)
        print(f"# fake hub at {hub.url}; HF_HOME={hf_home}\n")
        run(["model", "pull", "hf:demo/Demo-GGUF/demo-q4_k_m.gguf", "--no-progress"], env)
        run(["model", "pull", "hf:demo/Demo-GGUF/demo-q4_k_m.gguf", "--no-progress"], env)
        run(["model", "pull", "hf:demo/Demo-GGUF/demo-q8_0.gguf", "--no-progress"], env)
        partial = hf_home / "hub" / "models--demo--Demo-GGUF" / "blobs" / f"{sha256_of(big)}.incomplete"
        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(big[: len(big) // 3])
        print(f"# simulated interruption: {partial.name} holds {len(big) // 3} of {len(big)} bytes\n")
        run(["model", "pull", "hf:demo/Demo-GGUF/demo-f16.gguf", "--progress"], env)
        if args.real is not None:
            entry = find_recommended("qwen2.5-coder-0.5b")
            data = args.real.read_bytes()
            flipped = bytearray(data)
            flipped[len(flipped) // 2] ^= 0xFF
            # First a tampered copy (one byte flipped) that the hub advertises under the real hash: refused.
            hub.add(entry.repo, entry.file, bytes(flipped), revisions=("tampered",), commit="f" * 40,
                    advertise_sha256=entry.sha256)
            run(["model", "pull", "qwen2.5-coder-0.5b", "--revision", "tampered", "--no-progress"], env)
            # Then the real file: verified against the hub's hash and prefcall's pin, installed.
            hub.add(entry.repo, entry.file, data)
            run(["model", "pull", "qwen2.5-coder-0.5b", "--no-progress"], env)
        run(["model", "list"], {**env, "OLLAMA_MODELS": str(args.workdir / "no-ollama"),
                                "PREFCALL_LMSTUDIO_DIR": str(args.workdir / "no-lmstudio")})
        print("# what the fake hub saw (method, path, Range):")
        for request in hub.requests:
            print(f"  {request['method']:<4} {request['path']}  {request['range'] or ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
