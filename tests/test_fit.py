"""`prefcall fit` (prefcall.evaluation.fit) and the fits it stores per model file (prefcall.storage.fits)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from prefcall.engine.fake import FakeEmbedder, FakeEngine
from prefcall.errors import StoreError
from prefcall.evaluation import fit, splits
from prefcall.storage import fits
from prefcall.strategies.grounded import load_weights
from prefcall.strategies.grounding.fill import RankRow
from prefcall.strategies.pipeline import Pipeline


def row(group: int, evidence: float, odds: float | None, right: bool, gold: bool = True, kind: str = "span",
        item: str = "i") -> fit.LabelledRow:
    return fit.LabelledRow(item=item, group=group, kind=kind, function="F", argument="a", value=str(group),
                           evidence=evidence, odds=odds, right=right, gold=gold)


def test_logistic_recovers_the_slopes_of_generated_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4000, 2))
    y = (rng.random(4000) < 1 / (1 + np.exp(-(1.5 * x[:, 0] + 0.5 * x[:, 1] - 1.0)))).astype(float)
    a, b, c = fit.logistic(x, y)
    assert abs(a - 1.5) < 0.15 and abs(b - 0.5) < 0.1 and abs(c + 1.0) < 0.15


def test_decisions_count_one_answer_per_ranking():
    rows = [row(1, 2.0, 3.0, True), row(1, 0.0, -1.0, False),  # right value wins: tp
            row(2, 1.0, 2.0, False),  # a wrong value set where gold exists: fp and fn
            row(3, -5.0, None, False, gold=True),  # nothing passes: fn
            row(4, -5.0, -5.0, False, gold=False)]  # nothing passes, nothing expected: nothing
    assert fit.decide(rows, (1.0, 1.0, 0.0)) == (1, 1, 2)
    assert fit.f1(1, 1, 2) == (0.5, 1 / 3, pytest.approx(0.4))


def test_a_kind_is_fitted_only_with_enough_right_values_and_never_scores_worse_on_its_rows():
    rng = np.random.default_rng(1)
    rows = []
    for g in range(800):
        right_odds, wrong_odds = rng.normal(2.0, 1.5), rng.normal(-2.0, 1.5)
        rows += [row(g, rng.normal(0.5, 1), right_odds, True), row(g, rng.normal(-0.5, 1), wrong_odds, False)]
    shipped = (0.5, 0.05, -3.0)  # a poor rule: the model's odds barely count
    fitted = fit.fit_kind("span", rows, shipped, min_right=300)
    assert fitted.fitted and fitted.right == 800
    assert fitted.f1_fitted >= fitted.f1_shipped and fitted.f1_fitted > 0.9
    few = fit.fit_kind("span", rows[:200], shipped, min_right=300)
    assert not few.fitted and few.combination == list(shipped) and "needs 300" in few.why


def test_rows_are_labelled_by_the_gold_value_of_that_argument():
    item = fit.TuneItem("1", "nlsi", "User: x", [], [], ['GetRestaurants(city="San Jose", cuisine="Thai")'],
                        catalogue=None)  # type: ignore[arg-type]
    rows = [RankRow(function="GetRestaurants", argument="city", kind="span", group=1, value="san jose",
                    evidence=1.0, odds=2.0),
            RankRow(function="GetRestaurants", argument="city", kind="span", group=1, value="Thai", evidence=0.0,
                    odds=-1.0),
            RankRow(function="GetRestaurants", argument="rating", kind="number", group=2, value=4, evidence=0.0,
                    odds=0.0)]
    labelled = fit.label(item, rows, {})
    assert [(r.right, r.gold) for r in labelled] == [(True, True), (False, True), (False, False)]


def test_tune_items_are_the_tune_split_only():
    items = fit.tune_items(["corpus"])
    entry = splits.packaged().sources["src/prefcall/data/corpus/items.json"]
    assert {i.id for i in items} == set(entry.tune)
    assert len(fit.tune_items(["corpus"], subset=10)) == 10
    with pytest.raises(Exception, match="unknown fit source"):
        fit.tune_items(["elsewhere"])


def test_collect_records_the_fillers_candidates_through_the_pipeline():
    engine = FakeEngine()
    items = fit.tune_items(["corpus"], subset=3)
    pipeline = Pipeline(engine, FakeEmbedder())
    done: list[str] = []
    rows = fit.collect(pipeline, items, done.append)
    assert done == [i.id for i in items]
    assert rows and {r.item for r in rows} <= {i.id for i in items}
    assert pipeline.record is None  # the recorder is removed after each item
    assert any(r.right for r in rows)  # gold values are among the candidates the filler scored


def test_a_stored_fit_is_used_for_that_model_file_only(tmp_path: Path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF fake weights")
    other = tmp_path / "n.gguf"
    other.write_bytes(b"GGUF other weights")
    data = tmp_path / "data"
    fingerprint = fits.file_fingerprint(model, data)
    assert fingerprint and fingerprint.startswith("gguf-sha256:") and fits.file_fingerprint(other, data) != fingerprint
    assert json.loads((data / fits.FINGERPRINTS).read_text())  # cached by path, size and mtime
    fits.save(fits.Fit(fingerprint=fingerprint, model_name="m", grounding={"span": [1.0, 2.0, -3.0]}), data / "fits")
    found = fits.load(fingerprint, data)
    assert found is not None and found.origin == "user" and found.grounding["span"] == [1.0, 2.0, -3.0]
    assert fits.load(fits.file_fingerprint(other, data), data) is None
    weights = load_weights("m", fitted=found.grounding)
    assert weights.span == (1.0, 2.0, -3.0) and weights.enum == load_weights("m").enum

    class FileEngine(FakeEngine):
        @property
        def info(self):
            return dataclasses.replace(super().info, model_path=str(model))

    pipeline = Pipeline(FileEngine(), data_dir=data)
    assert pipeline.fit() is not None and pipeline.fit().grounding == {"span": [1.0, 2.0, -3.0]}
    pipeline._grounder(fit.tune_items(["corpus"], subset=1)[0].catalogue, frozenset())  # noqa: SLF001
    assert pipeline._weights.span == (1.0, 2.0, -3.0)  # noqa: SLF001


def test_a_damaged_or_foreign_fit_file_is_a_one_line_error(tmp_path: Path):
    fingerprint = "gguf-sha256:" + "a" * 64
    path = tmp_path / "fits" / fits.file_name(fingerprint)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(StoreError, match="damaged"):
        fits.load(fingerprint, tmp_path)
    path.write_text(json.dumps({"fingerprint": "gguf-sha256:" + "a" * 63 + "b"}))
    with pytest.raises(StoreError, match="another model"):
        fits.load(fingerprint, tmp_path)


def test_an_unwritable_fingerprint_cache_costs_time_not_the_request(tmp_path: Path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF weights")
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("x")  # the cache's folder is a file: every write fails
    first = fits.file_fingerprint(model, blocked)
    assert first is not None and first == fits.file_fingerprint(model, None)
