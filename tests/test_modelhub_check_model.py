"""`prefcall model check` on the real embedded model (capabilities, throughput and one case of each kind)."""

from __future__ import annotations

import json

import pytest

from prefcall.config import Settings
from prefcall.modelhub.check import render, run_check


@pytest.mark.model
def test_embedded_model_has_every_capability_prefcall_needs(real_engine, tmp_path):
    report = run_check(Settings(data_dir=tmp_path, n_threads=1), reference="embedded", engine=real_engine,
                       use_embedder=False, only=["parse-weather", "nlt-timer", "clarify-banking-limitation"])
    assert {c.name: c.passed for c in report.capabilities} == {
        "chat_template": True, "json_grammar": True, "logprobs": True, "candidate_scoring": True}
    assert [c.case.id for c in report.cases] == ["parse-weather", "nlt-timer", "clarify-banking-limitation"]
    assert all(c.error is None for c in report.cases), [c.detail for c in report.cases]
    assert report.prompt_tps and report.prompt_tps > 0 and report.gen_tps and report.gen_tps > 0
    assert report.recommended_n_ctx.value == 8192 and report.recommended_n_gpu_layers.value == 0
    data = json.loads(json.dumps(report.as_json()))
    assert data["architecture"] == "llama" and data["quantisation"] == "Q4_1" and data["backend"] == "cpu"
    assert "verdict:" in render(report)
