"""Model references resolve from the stores on disk only: HF cache, Ollama store, LM Studio folder, catalogue."""

from __future__ import annotations

from pathlib import Path

import pytest

from prefcall.config import Settings
from prefcall.engine.recommended import find_recommended, recommended_models
from prefcall.engine.references import parse_reference, resolve_reference
from prefcall.engine.embedded import embedded_model_path
from prefcall.engine.resolve import resolve_model_path
from prefcall.errors import ConfigError, InvalidModelError, ModelNotFoundError
from prefcall.modelhub.testing import add_hf_file, add_ollama_model, build_fake_stores, gguf_bytes, write_gguf


@pytest.fixture
def stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    stores = build_fake_stores(tmp_path / "stores")
    for key, value in stores.env.items():
        monkeypatch.setenv(key, value)
    for key in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(key, raising=False)
    return stores


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


# -- parsing -------------------------------------------------------------------------------------------
def test_parse_forms():
    hf = parse_reference("hf:Qwen/Qwen2.5-1.5B-Instruct-GGUF/qwen2.5-1.5b-instruct-q4_k_m.gguf@v1.0")
    assert (hf.kind, hf.repo_id, hf.filename, hf.revision) == (
        "hf", "Qwen/Qwen2.5-1.5B-Instruct-GGUF", "qwen2.5-1.5b-instruct-q4_k_m.gguf", "v1.0")
    nested = parse_reference("hf:org/repo/sub/dir/m.gguf")
    assert nested.filename == "sub/dir/m.gguf" and nested.revision is None
    assert parse_reference("hf:org/repo/m.gguf@refs/pr/1").revision == "refs/pr/1"
    plain = parse_reference("ollama:qwen2.5")
    assert (plain.host, plain.namespace, plain.name, plain.tag) == ("registry.ollama.ai", "library", "qwen2.5", "latest")
    tagged = parse_reference("ollama:qwen2.5:1.5b-instruct-q4_K_M")
    assert (tagged.name, tagged.tag) == ("qwen2.5", "1.5b-instruct-q4_K_M")
    user = parse_reference("ollama:someone/model:7b")
    assert (user.namespace, user.name, user.tag) == ("someone", "model", "7b")
    hosted = parse_reference("ollama:hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M")
    assert (hosted.host, hosted.namespace, hosted.name, hosted.tag) == (
        "hf.co", "bartowski", "Llama-3.2-1B-Instruct-GGUF", "Q4_K_M")
    assert str(hosted) == "ollama:hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"
    studio = parse_reference("lmstudio:pub/repo/file.gguf")
    assert (studio.kind, studio.filename) == ("lmstudio", "pub/repo/file.gguf")
    assert parse_reference("qwen2.5-1.5b").kind == "catalogue"
    assert parse_reference("QWEN2.5-1.5B").kind == "catalogue"
    assert parse_reference("embedded").kind == "embedded"
    assert parse_reference("models/x.gguf").kind == "path"
    assert parse_reference(Path("/abs/x.gguf")).kind == "path"


@pytest.mark.parametrize("bad", ["hf:nope", "hf:org/repo/file.bin", "ollama:", "ollama:a/b/c/d", "lmstudio:x.gguf",
                                 "lmstudio:pub/repo/../x.gguf", "   "])
def test_malformed_references_say_how_to_write_them(bad):
    with pytest.raises(ConfigError) as err:
        parse_reference(bad)
    assert "\n" not in str(err.value)


def test_unknown_name_lists_the_forms_and_the_catalogue():
    with pytest.raises(ModelNotFoundError) as err:
        parse_reference("no-such-model")
    message = one_line(err)
    assert "hf:ORG/REPO/FILE.gguf" in message and "ollama:NAME" in message and "qwen2.5-1.5b" in message


# -- resolution ----------------------------------------------------------------------------------------
def test_hf_reference_resolves_from_the_cache_by_branch_tag_and_commit(stores):
    resolved = resolve_reference("hf:someone/tiny-GGUF/tiny-q8_0.gguf")
    assert resolved.store == "hf" and resolved.path.read_bytes()[:4] == b"GGUF"
    assert "snapshots" in resolved.path.parts
    commit = resolved.path.parent.name
    assert resolve_reference("hf:someone/tiny-GGUF/tiny-q8_0.gguf@v1").path == resolved.path
    assert resolve_reference(f"hf:someone/tiny-GGUF/tiny-q8_0.gguf@{commit}").path == resolved.path
    assert resolve_reference(f"hf:someone/tiny-GGUF/tiny-q8_0.gguf@{commit[:10]}").path == resolved.path


def test_hf_without_main_ref_takes_the_newest_cached_snapshot(stores):
    add_hf_file(stores.hf_cache, "org/pinned-GGUF", "m.gguf", data=gguf_bytes(), commit="c" * 40, refs=())
    resolved = resolve_reference("hf:org/pinned-GGUF/m.gguf")
    assert resolved.path.parent.name == "c" * 40 and "newest cached snapshot" in resolved.detail


def test_hf_missing_says_where_it_looked_and_what_to_run(stores):
    with pytest.raises(ModelNotFoundError) as err:
        resolve_reference("hf:org/absent-GGUF/m.gguf")
    message = one_line(err)
    assert str(stores.hf_cache) in message and "prefcall model pull hf:org/absent-GGUF/m.gguf" in message
    with pytest.raises(ModelNotFoundError) as err:
        resolve_reference("hf:someone/tiny-GGUF/tiny-q8_0.gguf@v9")
    assert "models--someone--tiny-GGUF" in one_line(err)


def test_hf_cache_location_follows_hf_hub_cache(stores, monkeypatch, tmp_path):
    other = tmp_path / "elsewhere"
    add_hf_file(other, "org/else-GGUF", "e.gguf", data=gguf_bytes())
    monkeypatch.setenv("HF_HUB_CACHE", str(other))
    assert resolve_reference("hf:org/else-GGUF/e.gguf").path.is_file()


def test_ollama_reference_resolves_to_the_blob_without_copying(stores):
    resolved = resolve_reference("ollama:smollm-fake:135m")
    assert resolved.store == "ollama"
    assert resolved.path.parent == stores.ollama / "blobs" and resolved.path.name.startswith("sha256-")
    assert resolved.path.read_bytes()[:4] == b"GGUF"
    assert resolve_reference("ollama:SmolLM-Fake:135M").path == resolved.path  # Ollama names are case-insensitive


def test_ollama_latest_tag_namespaces_and_errors(stores):
    add_ollama_model(stores.ollama, "plain", data=gguf_bytes(name="plain"))
    add_ollama_model(stores.ollama, "model", "7b", namespace="someone", data=gguf_bytes(name="ns"))
    assert resolve_reference("ollama:plain").path.is_file()
    assert resolve_reference("ollama:someone/model:7b").path.is_file()
    with pytest.raises(ModelNotFoundError) as err:
        resolve_reference("ollama:absent:1b")
    message = one_line(err)
    assert "ollama pull absent:1b" in message and str(stores.ollama) in message
    with pytest.raises(ModelNotFoundError, match="blob .* is missing"):
        resolve_reference("ollama:gone")
    manifest = stores.ollama / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text('{"layers": [{"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:00"}]}')
    with pytest.raises(ConfigError, match="no model layer"):
        resolve_reference("ollama:broken")


def test_lmstudio_reference_and_setting(stores, monkeypatch, tmp_path):
    ref = "lmstudio:lmstudio-community/Qwen2.5-1.5B-Instruct-GGUF/Qwen2.5-1.5B-Instruct-Q4_K_M.gguf"
    assert resolve_reference(ref).store == "lmstudio"
    monkeypatch.delenv("PREFCALL_LMSTUDIO_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(ModelNotFoundError) as err:
        resolve_reference(ref)
    message = one_line(err)
    assert ".lmstudio/models" in message and "lm-studio/models" in message and "PREFCALL_LMSTUDIO_DIR" in message
    write_gguf(tmp_path / "home" / ".cache" / "lm-studio" / "models" / "a" / "b" / "c.gguf")
    assert resolve_reference("lmstudio:a/b/c.gguf").path.is_file()  # the older default folder


def test_catalogue_names_resolve_through_the_hf_cache_or_a_pinned_ollama_blob(stores):
    assert resolve_reference("qwen2.5-0.5b").path.name == "qwen2.5-0.5b-instruct-q4_k_m.gguf"
    with pytest.raises(ModelNotFoundError) as err:
        resolve_reference("qwen2.5-7b")
    assert "prefcall model pull qwen2.5-7b" in one_line(err)
    entry = find_recommended("qwen2.5-coder-1.5b")
    data = gguf_bytes(name="pinned stand-in")
    add_ollama_model(stores.ollama, "qwen2.5-coder", "1.5b", data=data, sha256=entry.sha256)
    resolved = resolve_reference("qwen2.5-coder-1.5b")
    assert resolved.store == "ollama" and resolved.path.name == f"sha256-{entry.sha256}"
    assert resolve_reference("embedded").path == embedded_model_path()
    assert resolve_reference("smollm2-135m").path == embedded_model_path()


def test_resolve_model_path_accepts_references_everywhere_a_model_is_named(stores, monkeypatch):
    assert resolve_model_path("ollama:smollm-fake:135m").read_bytes()[:4] == b"GGUF"
    monkeypatch.setenv("PREFCALL_MODEL", "hf:someone/tiny-GGUF/tiny-q8_0.gguf@v1")
    settings = Settings()
    assert settings.model == "hf:someone/tiny-GGUF/tiny-q8_0.gguf@v1"
    assert resolve_model_path(settings.model).name == "tiny-q8_0.gguf"
    with pytest.raises(InvalidModelError):  # a resolved file must still be GGUF
        add_ollama_model(stores.ollama, "notgguf", data=b"<html>")
        resolve_model_path("ollama:notgguf")


def test_catalogue_entries_are_complete_and_pins_are_only_where_verified():
    models = recommended_models()
    assert len(models) >= 6 and len({m.name for m in models}) == len(models)
    for m in models:
        assert m.repo and m.file and m.licence and m.params
        if m.sha256 is not None:
            assert len(m.sha256) == 64 and m.size  # pinned entries carry the exact size too
    pinned = {m.name for m in models if m.verified}
    assert pinned == {"smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
