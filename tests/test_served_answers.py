"""Answer parity: a served engine gives the answers the in-process engine gives (evaluation/parity.py).

llama-cpp-python's server runs the embedded SmolLM2 (the file the in-process engine loads, at its context size);
28 requests go through MCP to both: parse_request (call, ask, refuse, preferences, two calls), select_tools_nlt,
clarify and tag_profile. Each in-process answer is tested against the score noise measured between the two engines
in the same run: an answer that holds under it must be identical when served; the others are listed in the report
(PREFCALL_PARITY_ANSWERS=/path/file.json keeps it), never hidden.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest

from prefcall.bench.served import llama_cpp_python_server
from prefcall.config import Settings
from prefcall.evaluation.parity import compare, parity_cases
from prefcall.storage import fits

pytestmark = pytest.mark.model

for _module in ("fastapi", "sse_starlette", "starlette_context", "uvicorn", "pydantic_settings"):
    pytest.importorskip(_module, reason="llama-cpp-python's server extra is not installed (pip install prefcall[server])")

N_CTX = 4096  # the in-process test engine's (conftest.real_engine)


@pytest.fixture(scope="module")
def served(real_engine, tmp_path_factory):
    from prefcall.engine import load_engine
    from prefcall.engine.embedded import embedded_model_path

    log = tmp_path_factory.mktemp("lcp-answers") / "server.log"
    with llama_cpp_python_server(embedded_model_path(), threads=1, n_ctx=N_CTX, log=log) as url:
        engine = load_engine(Settings(engine=f"llama-cpp-python:{url}", n_ctx=N_CTX, engine_timeout_s=120))
        try:
            yield engine
        finally:
            engine.close()


def test_a_served_llama_cpp_server_on_the_same_file_reads_its_template_and_its_fit(real_engine, served, tmp_path):
    info = served.info
    assert info.model_file == str(Path(real_engine.info.model_path).resolve())
    assert info.chat_template == real_engine.info.chat_template  # read from the GGUF: the server does not expose it
    assert info.model_name == real_engine.info.model_name
    assert fits.engine_fingerprint(served, tmp_path) == fits.engine_fingerprint(real_engine, tmp_path)
    assert fits.load(fits.engine_fingerprint(served, tmp_path), tmp_path) is not None  # the shipped fit applies


def test_served_engine_answers_as_in_process(real_engine, real_embedder, served, tmp_path):
    settings = Settings(data_dir=tmp_path / "data")
    report = anyio.run(compare, real_engine, served, real_embedder, settings, settings)
    summary = report.summary()
    target = os.environ.get("PREFCALL_PARITY_ANSWERS")
    if target:
        Path(target).write_text(json.dumps([r.as_json() for r in report.rows] + [summary], indent=1))
    _, cases = parity_cases()
    assert len(report.rows) == len(cases) >= 20
    assert {r.tool for r in report.rows} == {"parse_request", "select_tools_nlt", "clarify", "tag_profile"}
    assert not any(r.error for r in report.rows), [r.as_json() for r in report.rows if r.error]
    decisions = {r.local.get("decision") for r in report.rows if r.tool == "parse_request"}
    assert {"call", "ask", "refuse"} <= decisions, decisions
    noise = report.noise
    assert noise.compared > 100 and noise.median < 0.1 and noise.p95 < 0.5, summary["score_noise"]
    # Most answers stand clear of the noise; every one of those is the same when served.
    assert summary["stable"] >= 0.6 * len(report.rows), summary
    assert not report.failures, json.dumps([r.as_json() for r in report.failures], indent=1)
