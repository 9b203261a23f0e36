"""This machine: memory, GPU memory, and the n_ctx / n_gpu_layers to recommend for a model on it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

from prefcall.engine.gguf_meta import GGUFInfo, format_size

# prefcall's own prompts (system prompt + catalogue + instructions + dialogue) stay within a few thousand tokens
# for the built-in catalogues; 8192 leaves room for larger catalogues and long dialogues.
PREFERRED_N_CTX = 8192
MIN_N_CTX = 2048
KV_SHARE = 0.25  # at most this share of available memory for the KV cache
GPU_OVERHEAD = 512 * 1024 * 1024  # compute buffers, CUDA context


def total_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def available_memory() -> int | None:
    """MemAvailable on Linux; elsewhere half the physical memory (a conservative guess)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    total = total_memory()
    return total // 2 if total else None


def rss_bytes() -> int | None:
    """Resident memory of this process now."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak_rss_bytes()


def peak_rss_bytes() -> int | None:
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def gpu_backend() -> str:
    """The GPU backend this llama.cpp build offloads to ("cuda", "metal", ...), or "cpu" when it cannot."""
    from prefcall.engine.llama import detect_backend  # llama_cpp is imported only in engine/llama.py and grammar.py

    return detect_backend(-1)


def gpu_memory_free(backend: str) -> tuple[int | None, str]:
    """Free GPU memory in bytes and where the figure comes from (None when unknown)."""
    if backend == "cuda" and shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10, check=True).stdout
            return int(out.split()[0]) * 1024 * 1024, "nvidia-smi (first GPU)"
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return None, "nvidia-smi failed"
    if backend == "metal":
        total = total_memory()
        # Metal's default working-set limit is about two thirds of unified memory on Apple silicon.
        return (int(total * 2 / 3) if total else None), "two thirds of unified memory"
    return None, "unknown"


@dataclass(frozen=True)
class Recommendation:
    value: int
    reason: str


def recommend_n_ctx(info: GGUFInfo | None, available: int | None) -> Recommendation:
    trained = (info.context_length if info else None) or 4096
    per_token = info.kv_bytes_per_token() if info else None
    budget = available * KV_SHARE if available else None
    for n_ctx in (PREFERRED_N_CTX, 4096, MIN_N_CTX):
        if n_ctx > trained:
            continue
        if per_token is None or budget is None or per_token * n_ctx <= budget:
            kv = f"KV cache {format_size(per_token * n_ctx)} at f16" if per_token else "KV size unknown"
            room = f", within {int(KV_SHARE * 100)}% of {format_size(available)} available" if available else ""
            return Recommendation(n_ctx, f"trained for {trained}; {kv}{room}")
    return Recommendation(min(MIN_N_CTX, trained), f"little memory available ({format_size(available)}): "
                          "keep the context small or choose a smaller model")


def recommend_n_gpu_layers(info: GGUFInfo | None, backend: str, gpu_free: int | None, n_ctx: int) -> Recommendation:
    if backend == "cpu":
        return Recommendation(0, "this llama.cpp build has no GPU backend: rebuild llama-cpp-python with "
                                 "CMAKE_ARGS=-DGGML_CUDA=on (NVIDIA) or -DGGML_METAL=on (Apple), see README")
    layers = (info.block_count if info else None) or 0
    size = info.size if info else 0
    kv = (info.kv_bytes_per_token() or 0) * n_ctx if info else 0
    if gpu_free is None:
        return Recommendation(-1, f"{backend} build; GPU memory unknown: -1 offloads every layer, lower it if loading fails")
    need = size + kv + GPU_OVERHEAD
    if need <= gpu_free:
        return Recommendation(-1, f"all {layers} layers fit: {format_size(need)} needed, {format_size(gpu_free)} free")
    if not layers or not size:
        return Recommendation(0, f"model does not fit in {format_size(gpu_free)} of GPU memory")
    fit = int(layers * max(0, gpu_free - kv - GPU_OVERHEAD) / size)
    return Recommendation(max(0, min(layers, fit)), f"{fit} of {layers} layers fit in {format_size(gpu_free)} free "
                                                    f"({format_size(need)} for all)")
