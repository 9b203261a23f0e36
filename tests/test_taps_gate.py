"""Uncertainty measures, the gate decision, and threshold calibration storage."""

from __future__ import annotations

import math

import pytest

from prefcall.engine.base import Generation, PromptUsage, TokenLogprob
from prefcall.errors import ValidationError
from prefcall.evaluation.calibrate import CalibrationItem, sweep_thresholds
from prefcall.strategies.pipeline import get_config
from prefcall.strategies.taps_gate import (
    DEFAULT_GATE_THRESHOLD,
    default_threshold,
    least_confidence,
    margin_at_t,
    save_calibration,
    sequence_margin,
    uncertainty,
)


def gen(*probs: float, rival: float | None = None) -> Generation:
    tokens = [TokenLogprob("x", math.log(p), (("x", math.log(p)), ("y", math.log(rival if rival is not None else (1 - p) / 2))))
              for p in probs]
    return Generation(text="x" * len(probs), tokens=tokens, usage=PromptUsage(), finish_reason="stop")


def test_least_confidence_is_taps_formula_over_all_generations():
    g1, g2 = gen(0.9, 0.5), gen(0.8)
    expected = 1 - math.exp((math.log(0.9) + math.log(0.5) + math.log(0.8)) / 3)
    assert least_confidence([g1, g2]) == pytest.approx(expected)
    assert least_confidence([]) == 1.0


def test_margin_measures():
    certain, unsure = gen(0.9, rival=0.05), gen(0.5, rival=0.45)
    assert margin_at_t([certain]) == pytest.approx(1 - 0.85)
    assert margin_at_t([unsure]) == pytest.approx(1 - 0.05)
    assert sequence_margin([certain]) < sequence_margin([unsure])


def test_every_gate_measure_is_reported_and_unknown_measures_are_refused():
    measures = uncertainty([gen(0.9, 0.9)])
    assert set(measures) == {"least_confidence", "margin_at_t", "sequence_margin"}
    assert measures["least_confidence"] == pytest.approx(0.1)
    assert get_config("taps", gate_measure="margin_at_t").gate_measure == "margin_at_t"
    with pytest.raises(ValidationError, match="gate_measure"):
        get_config("taps", gate_measure="entropy")


def test_sweep_picks_threshold_that_tags_only_the_uncertain_items(tmp_path):
    items = [
        CalibrationItem(id="a", uncertainty={"least_confidence": 0.05}, untagged=(2, 0, 0), tagged=(1, 1, 1)),
        CalibrationItem(id="b", uncertainty={"least_confidence": 0.40}, untagged=(0, 2, 2), tagged=(2, 0, 0)),
    ]
    result = sweep_thresholds(items, "m")
    assert 0.05 <= result.threshold < 0.40 and result.f1 == 1.0 and result.fire_rate == 0.5
    assert result.f1_never < 1.0 and result.f1_always < 1.0
    assert default_threshold("m", tmp_path) == DEFAULT_GATE_THRESHOLD
    save_calibration(tmp_path, result)
    assert default_threshold("m", tmp_path) == result.threshold
    assert default_threshold("other", tmp_path) == DEFAULT_GATE_THRESHOLD


def test_calibrate_command_stores_a_threshold(tmp_path, monkeypatch, capsys):
    import json as _json

    import prefcall.engine as engine_module
    from prefcall.cli import main
    from prefcall.config import Settings
    from prefcall.engine.fake import FakeEmbedder, FakeEngine

    fake = FakeEngine()
    fake.reply("[IN:GET_RESTAURANTS I like [SL:CITY Oakland ]. ]", when="You tag")
    fake.reply('["GetRestaurants"]', when="Functions:\nGetBanks - ")
    fake.reply('[{"city": "Oakland", "cuisine": "Thai"}]', when="- [IN:GET_RESTAURANTS")
    fake.reply('[{"cuisine": "Thai"}]', when="Calls for GetRestaurants:", logprob=-1.5)
    monkeypatch.setattr(engine_module, "load_engine", lambda settings: fake)
    monkeypatch.setattr(engine_module, "load_embedder", lambda settings: FakeEmbedder())
    dev = tmp_path / "dev.json"
    dev.write_text(_json.dumps([{"example_id": 1, "user_utterance": "User: Thai food please",
                                 "all_standing_instructions": ["I like Oakland."],
                                 "applicable_standing_instructions": ["I like Oakland."],
                                 "api_calls": ['GetRestaurants(city="Oakland", cuisine="Thai")']}]))
    assert main(["calibrate", "--data", str(dev), "--limit", "1", "--examples", str(tmp_path / "none.json")]) == 0
    out = _json.loads(capsys.readouterr().out)
    assert out["f1"] == 1.0 and out["f1_never"] < 1.0 and out["model"] == "fake"
    assert default_threshold("fake", Settings().data_dir) == out["threshold"] < 0.78


def test_embedded_model_defaults_to_its_packaged_calibration(tmp_path):
    from prefcall.strategies.taps_gate import DEFAULT_GATE_THRESHOLD, default_threshold, packaged_calibration

    embedded = "Smollm2 135M 8k Lc100K Mix1 Ep2"
    packaged = packaged_calibration()[embedded]["least_confidence"]["threshold"]
    assert default_threshold(embedded, tmp_path) == packaged
    assert default_threshold(embedded, None) == packaged
    assert default_threshold("some other model", tmp_path) == DEFAULT_GATE_THRESHOLD


def test_gate_status_says_whether_the_gate_carries_a_signal(tmp_path):
    import json as _json

    from prefcall.strategies.taps_gate import gate_status

    assert gate_status("unknown-model", None)["calibrated"] is False
    (tmp_path / "calibration.json").write_text(_json.dumps({"m": {"least_confidence": {
        "threshold": 1.0, "f1": 0.04, "f1_never": 0.04, "f1_always": 0.03, "n_items": 12}}, "n": {
        "least_confidence": {"threshold": 0.3, "f1": 0.6, "f1_never": 0.4, "f1_always": 0.5, "n_items": 150}}}))
    none = gate_status("m", tmp_path)
    assert none["signal"] is False and "no signal" in none["note"] and "fewer than 100" in none["note"]
    some = gate_status("n", tmp_path)
    assert some["signal"] is True and some["threshold"] == 0.3 and "fewer than 100" not in some["note"]
