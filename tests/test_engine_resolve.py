from pathlib import Path

import pytest

from prefcall.config import Settings
from prefcall.engine.embedded import embedded_model_path
from prefcall.engine.resolve import resolve_model_path
from prefcall.errors import InvalidModelError, ModelNotFoundError


def test_embedded_default_is_the_packaged_smollm2():
    path = resolve_model_path(None)
    assert path == embedded_model_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.read_bytes()[:4] == b"GGUF"


def test_explicit_path_wins(tmp_path: Path):
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 16)
    assert resolve_model_path(model) == model


def test_settings_read_model_from_environment(monkeypatch, tmp_path: Path):
    model = tmp_path / "env.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setenv("PREFCALL_MODEL", str(model))
    monkeypatch.setenv("PREFCALL_N_GPU_LAYERS", "-1")
    settings = Settings()
    assert settings.model == str(model) and settings.n_gpu_layers == -1
    assert resolve_model_path(settings.model) == model


def test_missing_file_says_what_to_do(tmp_path: Path):
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model_path(tmp_path / "nope.gguf")
    message = str(err.value)
    assert "model file not found" in message and "PREFCALL_MODEL" in message and "\n" not in message


def test_non_gguf_file_is_rejected(tmp_path: Path):
    bogus = tmp_path / "model.gguf"
    bogus.write_text("<html>not a model</html>")
    with pytest.raises(InvalidModelError, match="not a GGUF model file"):
        resolve_model_path(bogus)


def test_directory_is_rejected(tmp_path: Path):
    with pytest.raises(InvalidModelError, match="not a file"):
        resolve_model_path(tmp_path)


def test_truncated_file_is_rejected_before_llama_cpp_sees_it(tmp_path: Path):
    from prefcall.modelhub.testing import gguf_bytes

    data = gguf_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:-64])
    with pytest.raises(InvalidModelError, match="truncated.*pull"):
        resolve_model_path(cut)
