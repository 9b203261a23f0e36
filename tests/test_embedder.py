"""The default embedder runs the packaged all-MiniLM-L6-v2 on numpy: the same vectors as sentence-transformers,
without importing torch."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from prefcall.engine import bert_numpy
from prefcall.engine.embedder import SentenceEmbedder
from prefcall.engine.embedded import embedded_embedder_path
from prefcall.errors import ModelNotFoundError

pytestmark = pytest.mark.embedder

TEXTS = ["Find hotels in Paris.", "When I book flights, I always fly with Delta Airlines.", "", "hello",
         "a long request " * 120, "Ünïcödé ☃ 東京 café"]


def test_numpy_vectors_match_sentence_transformers():
    numpy_side = SentenceEmbedder(backend="numpy")
    torch_side = SentenceEmbedder(backend="sentence-transformers")
    a, b = numpy_side.embed(TEXTS), torch_side.embed(TEXTS)
    assert numpy_side.backend == "numpy" and torch_side.backend == "sentence-transformers"
    assert a.shape == b.shape == (len(TEXTS), 384) and a.dtype == np.float32
    assert np.abs(a - b).max() < 1e-5
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    # Order is kept although texts are batched by length, and a batch gives what one text alone gives.
    assert np.abs(numpy_side.embed([TEXTS[1]])[0] - a[1]).max() < 1e-5
    assert numpy_side.embed([]).shape == (0, 384)


def test_the_default_embedder_loads_without_importing_torch():
    code = ("import sys; from prefcall.engine.embedder import SentenceEmbedder; e = SentenceEmbedder(); "
            "v = e.embed(['hello']); print(e.backend, v.shape[1], 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"HF_HUB_OFFLINE": "1", "PATH": ""}).stdout.split()
    assert out == ["numpy", "384", "False"]


def test_a_folder_numpy_cannot_run_goes_to_sentence_transformers_or_fails_when_numpy_is_forced(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("config.json", "modules.json", "tokenizer.json", "model.safetensors"):
        (folder / name).write_bytes((embedded_embedder_path() / name).read_bytes())
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    assert bert_numpy.supports(embedded_embedder_path()) and not bert_numpy.supports(folder)
    with pytest.raises(ModelNotFoundError, match="EMBEDDER_BACKEND=sentence-transformers"):
        SentenceEmbedder(folder, backend="numpy").load()
