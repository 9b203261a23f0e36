"""Uncertainty measures, the gate decision, and threshold calibration storage."""

from __future__ import annotations

import math

import pytest

from prefcall.engine.base import Generation, PromptUsage, TokenLogprob
from prefcall.errors import ValidationError
from prefcall.evaluation.calibrate import CalibrationItem, sweep_thresholds
from prefcall.strategies.pipeline_models import get_config
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


def _items(helps: list[int]) -> list[CalibrationItem]:
    """Eight items in rising uncertainty; tagging helps where `helps` is 1 and hurts elsewhere."""
    levels = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    return [CalibrationItem(id=str(i), uncertainty={"least_confidence": u}, untagged=(1, 1, 1),
                            tagged=(2, 0, 0) if h else (0, 2, 2)) for i, (u, h) in enumerate(zip(levels, helps))]


def test_signal_is_judged_on_held_out_items_not_on_the_sweep_that_fitted_the_threshold():
    from prefcall.strategies.taps_gate import gate_has_signal

    noise = sweep_thresholds(_items([1, 0, 0, 1, 1, 0, 0, 1]), "m")
    assert noise.f1 > max(noise.f1_never, noise.f1_always)  # the in-sample sweep finds a threshold by chance
    assert noise.f1_heldout is not None and noise.f1_heldout <= max(noise.f1_never, noise.f1_always)
    assert gate_has_signal(noise) is False
    real = sweep_thresholds(_items([0, 0, 0, 0, 1, 1, 1, 1]), "m")
    assert real.f1_heldout is not None and real.f1_heldout > max(real.f1_never, real.f1_always)
    assert gate_has_signal(real) is True
    assert gate_has_signal({"f1": 0.6, "f1_never": 0.5, "f1_always": 0.4}) is True  # older entries: in sample


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
    report = tmp_path / "report"
    command = ["calibrate", "--data", str(dev), "--limit", "1", "--examples", str(tmp_path / "none.json"),
               "--out", str(report)]
    assert main(command) == 0
    out = _json.loads(capsys.readouterr().out)
    assert out["f1"] == 1.0 and out["f1_never"] < 1.0 and out["model"] == "fake"
    assert default_threshold("fake", Settings().data_dir) == out["threshold"] < 0.78
    # The report carries the calibration curve, and a rerun resumes from the stored rows without the model.
    assert "## Calibration curve" in (report / "report.md").read_text()
    assert (report / "gate_curve.png").stat().st_size > 0
    assert len(_json.loads((report / "calibration.json").read_text())["sweep"]) >= 2
    assert len((report / "items.jsonl").read_text().splitlines()) == 1
    calls = len(fake.calls)
    assert main(command) == 0
    assert len(fake.calls) == calls and len((report / "items.jsonl").read_text().splitlines()) == 1
    assert _json.loads(capsys.readouterr().out)["f1"] == 1.0


def test_calibrate_offset_skips_the_first_items(tmp_path, monkeypatch, capsys):
    import json as _json

    import prefcall.engine as engine_module
    from prefcall.cli import main
    from prefcall.engine.fake import FakeEmbedder, FakeEngine

    fake = FakeEngine()
    fake.reply('["GetRestaurants"]', when="Functions:\nGetBanks - ")
    fake.reply('[{"city": "Oakland"}]', when="Calls for GetRestaurants:")
    monkeypatch.setattr(engine_module, "load_engine", lambda settings: fake)
    monkeypatch.setattr(engine_module, "load_embedder", lambda settings: FakeEmbedder())
    dev = tmp_path / "dev.json"
    dev.write_text(_json.dumps([{"example_id": n, "user_utterance": "User: hi", "all_standing_instructions": [],
                                 "applicable_standing_instructions": [],
                                 "api_calls": ['GetRestaurants(city="Oakland")']} for n in range(3)]))
    assert main(["calibrate", "--data", str(dev), "--offset", "1", "--limit", "5", "--dry-run",
                 "--examples", str(tmp_path / "none.json"), "--out", str(tmp_path / "r")]) == 0
    rows = [_json.loads(line)["id"] for line in (tmp_path / "r" / "items.jsonl").read_text().splitlines()]
    assert rows == ["1", "2"] and _json.loads(capsys.readouterr().out)["n_items"] == 2


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
