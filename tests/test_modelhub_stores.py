"""`prefcall model list`: models found in a fake HF cache, Ollama store and LM Studio folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefcall.cli import main
from prefcall.modelhub.stores import discover
from prefcall.modelhub.testing import build_fake_stores, write_gguf


@pytest.fixture
def stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    stores = build_fake_stores(tmp_path / "stores")
    for key, value in stores.env.items():
        monkeypatch.setenv(key, value)
    for key in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "PREFCALL_MODEL", "PREFCALL_MODEL_DIRS"):
        monkeypatch.delenv(key, raising=False)
    return stores


def test_discover_finds_every_store_with_metadata_and_errors(stores):
    found = discover()
    by_ref = {m.reference: m for m in found.models}
    assert by_ref["embedded"].current and by_ref["embedded"].catalogue == "smollm2-135m"
    qwen = by_ref["hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf"]
    assert (qwen.store, qwen.info.architecture, qwen.info.context_length, qwen.catalogue) == (
        "hf", "qwen2", 32768, "qwen2.5-0.5b")
    tiny = by_ref["hf:someone/tiny-GGUF/tiny-q8_0.gguf"]
    assert tiny.info.quantisation == "Q8_0" and not tiny.info.has_chat_template
    assert "truncated" in by_ref["hf:someone/broken-GGUF/broken-q4_k_m.gguf"].error
    assert by_ref["ollama:smollm-fake:135m"].info.quantisation == "Q4_1"
    assert "blob missing" in by_ref["ollama:gone"].error
    studio = by_ref["lmstudio:lmstudio-community/Qwen2.5-1.5B-Instruct-GGUF/Qwen2.5-1.5B-Instruct-Q4_K_M.gguf"]
    assert studio.info.name.startswith("Qwen2.5 1.5B")
    assert "no GGUF magic" in by_ref["lmstudio:lmstudio-community/notes/README.gguf"].error
    stores_seen = {s.store for s in found.stores}
    assert {"embedded", "hf", "ollama", "lmstudio"} <= stores_seen
    installed = {c.model.name for c in found.catalogue if c.installed}
    assert installed == {"smollm2-135m", "qwen2.5-0.5b"}


def test_current_model_is_marked_and_a_plain_path_is_added(stores, tmp_path):
    found = discover("ollama:smollm-fake:135m")
    assert [m.reference for m in found.models if m.current] == ["ollama:smollm-fake:135m"]
    elsewhere = write_gguf(tmp_path / "mine" / "own.gguf")
    found = discover(str(elsewhere))
    assert [(m.store, m.current) for m in found.models if m.path == elsewhere] == [("path", True)]
    found = discover("hf:org/absent/x.gguf")
    assert any(s.store == "PREFCALL_MODEL" and "does not resolve" in s.note for s in found.stores)


def test_split_files_are_listed_once_and_model_dirs_are_scanned(stores, tmp_path):
    folder = tmp_path / "gguf"
    for part in (1, 2):
        write_gguf(folder / f"big-q4_k_m-0000{part}-of-00002.gguf")
    found = discover(model_dirs=str(folder))
    rows = [m for m in found.models if m.store == "folder"]
    assert len(rows) == 1 and rows[0].parts == 2 and rows[0].size == 2 * (folder / "big-q4_k_m-00001-of-00002.gguf").stat().st_size


def test_model_list_command_prints_tables_and_json(stores, capsys):
    assert main(["model", "list"]) == 0
    out = capsys.readouterr().out
    assert "hf:someone/tiny-GGUF/tiny-q8_0.gguf" in out and "ollama:smollm-fake:135m" in out
    assert "Recommended catalogue" in out and "unverified" in out and "pinned" in out
    assert "truncated" in out and "blob missing" in out
    assert main(["model", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"models", "stores", "catalogue"} <= set(data)
    assert any(m["reference"] == "embedded" and m["current"] for m in data["models"])


def test_a_pinned_catalogue_file_of_the_wrong_size_is_flagged(stores, capsys):
    from prefcall.engine.recommended import find_recommended
    from prefcall.modelhub.testing import add_hf_file, gguf_bytes

    entry = find_recommended("qwen2.5-coder-0.5b")
    add_hf_file(stores.hf_cache, entry.repo, entry.file, data=gguf_bytes(name="not the real file"))
    status = next(c for c in discover().catalogue if c.model.name == entry.name)
    assert status.installed is not None and "differs from the catalogue's" in status.reason
    assert main(["model", "list"]) == 0
    assert f"! {entry.name}: size" in capsys.readouterr().out
