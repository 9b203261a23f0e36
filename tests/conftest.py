"""Shared fixtures: the shared data folder, fakes, and the real embedded model (loaded once per session)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from prefcall.config import Settings
from prefcall.engine.fake import FakeEmbedder, FakeEngine

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """../shared/data beside the checkout (as CI lays it out), or PREFCALL_SHARED_DATA."""
    override = os.environ.get("PREFCALL_SHARED_DATA")
    return Path(override) if override else REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    folder = shared_data_dir()
    if not folder.is_dir():
        pytest.skip(f"shared data not found at {folder}: clone with ../shared beside the repo")
    return folder


@pytest.fixture(autouse=True)
def _isolated_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No test may touch the user's real ~/.local/share/prefcall.
    monkeypatch.setenv("PREFCALL_DATA_DIR", str(tmp_path / "prefcall-data"))


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data")


@pytest.fixture
def fake_engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def fake_embedder() -> FakeEmbedder:
    return FakeEmbedder()


@pytest.fixture(scope="session")
def real_engine():
    """The embedded SmolLM2-135M through llama.cpp, shared by every model test."""
    from prefcall.engine.llama import LlamaEngine

    engine = LlamaEngine(Settings(n_ctx=4096))
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def real_embedder():
    from prefcall.engine.embedder import SentenceEmbedder

    return SentenceEmbedder().load()
