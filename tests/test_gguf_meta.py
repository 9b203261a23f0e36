"""The GGUF header reader: metadata without loading weights, and truthful errors for bad files."""

from __future__ import annotations

import struct
from pathlib import Path

from prefcall.engine.gguf_meta import ArraySummary, format_params, format_size, read_gguf_info
from prefcall.engine.embedded import embedded_model_path
from prefcall.modelhub.testing import gguf_bytes, write_gguf


def test_reads_metadata_of_a_written_file(tmp_path: Path):
    path = write_gguf(tmp_path / "m.gguf", architecture="qwen2", name="Test", context_length=32768, file_type=15,
                      block_count=24, vocab=100)
    info = read_gguf_info(path)
    assert info.error is None and info.version == 3 and info.tensor_count == 1
    assert (info.architecture, info.name, info.quantisation, info.context_length, info.block_count) == (
        "qwen2", "Test", "Q4_K_M", 32768, 24)
    assert info.has_chat_template and info.n_params == 800 and info.data_end == info.size
    assert isinstance(info.metadata["tokenizer.ggml.tokens"], ArraySummary)  # long arrays are skipped, not kept
    assert info.metadata["tokenizer.ggml.tokens"].length == 100
    assert info.kv_bytes_per_token() == 24 * 1 * (4 + 4) * 2


def test_missing_template_truncation_and_garbage_are_reported_not_raised(tmp_path: Path):
    assert not read_gguf_info(write_gguf(tmp_path / "n.gguf", chat_template=None)).has_chat_template
    data = gguf_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:-50])
    info = read_gguf_info(cut)
    assert info.truncated and "truncated" in info.error and info.architecture == "llama"
    header_cut = tmp_path / "header.gguf"
    header_cut.write_bytes(data[:40])
    assert "header" in read_gguf_info(header_cut).error
    html = tmp_path / "page.gguf"
    html.write_text("<html>")
    assert "no GGUF magic" in read_gguf_info(html).error
    assert read_gguf_info(tmp_path / "absent.gguf").error.startswith("FileNotFoundError")
    old = tmp_path / "v1.gguf"
    old.write_bytes(b"GGUF" + struct.pack("<I", 1) + b"\0" * 16)
    assert "version 1" in read_gguf_info(old).error


def test_embedded_model_header_matches_what_llama_cpp_reports():
    info = read_gguf_info(embedded_model_path())
    assert info.error is None and info.architecture == "llama" and info.quantisation == "Q4_1"
    assert info.context_length == 8192 and info.block_count == 30 and info.has_chat_template
    assert info.data_end == info.size  # every tensor type known: the whole file is accounted for


def test_formatting():
    assert format_size(98362432) == "98 MB" and format_size(1117320768) == "1.12 GB" and format_size(None) == "?"
    assert format_params(134515008) == "135M" and format_params(1777088000) == "1.8B"
