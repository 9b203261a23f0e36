"""The relevance fit (`prefcall fit --relevance`) and the abstention report (`prefcall eval relevance`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from model_files import FileEngine

from prefcall.engine.fake import FakeEmbedder
from prefcall.evaluation import fit_relevance, splits
from prefcall.evaluation.task import ScoredItem
from prefcall.evaluation.tasks.relevance import TASK as RELEVANCE
from prefcall.schemas.model import Catalogue, Function
from prefcall.strategies import fnctod


def _request(source: str, index: int, relevant: bool) -> fit_relevance.Request:
    catalogue = Catalogue(name="c", functions=[Function(name="f", description="d")])
    return fit_relevance.Request(source=source, id=str(index), dialogue="x", text="x", catalogue=catalogue,
                                 relevant=relevant)


def test_the_threshold_keeps_the_share_of_every_relevant_source_not_only_of_all():
    # 100 requests of one source near their functions, 20 of another worded far from them, 50 that none fits.
    items = [_request("near", i, True) for i in range(100)] + [_request("far", i, True) for i in range(20)] + \
        [_request("none", i, False) for i in range(50)]
    cosines = [0.5 + i / 1000 for i in range(100)] + [0.05 * (i + 1) for i in range(20)] + [0.1] * 50
    threshold = fit_relevance.threshold_for(cosines, items)
    # Pooled, 98% of 120 could be kept above 0.1; the far source alone keeps 95% (19 of 20) only at 0.1 or below.
    assert threshold == 0.1
    far = [c for c, i in zip(cosines, items) if i.source == "far"]
    assert sum(c >= threshold for c in far) >= 19
    report = fit_relevance.fit("emb", cosines, items)
    assert report.sources["far"].kept >= 0.95 and report.sources["none"].relevant is False
    assert report.refused_irrelevant == 0.0  # at 0.1 none of them is under it: the fit says so


def test_a_fit_without_relevant_requests_is_a_one_line_error():
    from prefcall.errors import ConfigError

    with pytest.raises(ConfigError, match="no relevant tuning requests"):
        fit_relevance.threshold_for([0.1], [_request("none", 0, False)])


def test_the_requests_of_each_part_come_from_the_split_and_are_labelled_by_source(shared_data: Path):
    tune, report = fit_relevance.requests("tune"), fit_relevance.requests("report")
    keys = {(r.source, r.id) for r in tune}
    assert keys.isdisjoint({(r.source, r.id) for r in report})
    by_source = {r.source for r in tune}
    assert {"bfcl/irrelevance", "bfcl/simple_python", "nlsi", "sgd", "corpus"} <= by_source
    # Report-only sources are never read by a fit.
    assert not by_source & {"bfcl/live_relevance", "acebench/special_irrelevant"}
    assert all(not r.relevant for r in tune if r.source == "bfcl/irrelevance")
    assert all(r.gold for r in tune if r.source in ("bfcl/simple_python", "nlsi", "sgd", "corpus"))
    # The NLT sets' messages that need no tool are irrelevant requests; the others are relevant with their tools.
    nlt = [r for r in tune if r.source.startswith("nlt/")]
    assert any(not r.relevant for r in nlt) and all(bool(r.gold) == r.relevant for r in nlt)
    nlsi_tune = splits.tune_keys(shared_data / "nlsi" / "dev.json")
    assert {r.id for r in tune if r.source == "nlsi"} <= nlsi_tune
    first_sgd = next(r for r in tune if r.source == "sgd")
    assert first_sgd.dialogue[-1].role == "user" and first_sgd.gold


def test_fit_relevance_command_writes_the_threshold_and_where_it_came_from(shared_data: Path, tmp_path: Path,
                                                                            monkeypatch, capsys):
    from prefcall import cli

    monkeypatch.setattr("prefcall.engine.load_embedder", lambda settings: FakeEmbedder())
    out = tmp_path / "relevance.json"
    assert cli.main(["fit", "--relevance", "--embedder-only", "--relevance-out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["model_rule"] is None
    printed = printed["embedder_threshold"]
    written = json.loads(out.read_text(encoding="utf-8"))
    entry = written[printed["embedder"]]
    assert entry["threshold"] == printed["threshold"]
    assert entry["source"].startswith("prefcall fit --relevance") and "tune part of data/splits.json" in entry["source"]
    assert "all-MiniLM-L6-v2" in written  # the shipped entries of other embedders stay
    assert printed["n_relevant"] > 1000 and printed["n_irrelevant"] > 100


def _scored(prediction: dict, relevant: bool, gold: list[str]) -> ScoredItem:
    from prefcall.evaluation.task import EvalItem

    item = EvalItem(id="s:1", input={}, gold={"relevant": relevant, "functions": gold}, meta={"source": "s"})
    return ScoredItem(id=item.id, input={}, gold=item.gold, meta=item.meta, prediction=prediction,
                      scores=RELEVANCE.score(item, prediction))


def test_an_ask_on_an_irrelevant_request_is_not_an_abstention_and_a_refusal_of_a_relevant_one_is_counted():
    ask = {"status": "ok", "decision": "ask", "calls": [{"name": "f", "arguments": {}}], "functions": ["f"]}
    refuse = {"status": "ok", "decision": "refuse", "calls": [], "functions": []}
    wrong = {"status": "ok", "decision": "call", "calls": [{"name": "g", "arguments": {}}], "functions": ["g"]}
    broken = {"status": "parse_error", "decision": "error", "calls": [], "functions": []}
    items = [_scored(ask, False, []), _scored(refuse, False, []), _scored(refuse, True, ["f"]),
             _scored(ask, True, ["f"]), _scored(wrong, True, ["f"]), _scored(broken, True, ["f"])]
    assert [i.scores["right"] for i in items] == [0.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    metrics = RELEVANCE.aggregate(items)
    assert metrics["no_call_rate"] == 0.5
    assert metrics["false_refusal_rate"] == 0.25  # one refusal of four relevant requests; a parse error is not one
    assert metrics["selection_accuracy"] == 0.25  # only the ask for f chose the gold function
    assert metrics["parse_error_rate"] == pytest.approx(1 / 6)
    assert set(metrics["by_source"]) == {"s"}


def test_eval_relevance_reads_one_part_of_every_source_and_reports_per_source(shared_data: Path, tmp_path: Path):
    from prefcall.engine.fake import FakeEngine
    from prefcall.evaluation.runner import run_eval

    args = argparse.Namespace(split="report", per_source=1, config="full", out=str(tmp_path / "run"), limit=None,
                              predictions=None, argv=[])
    summary = run_eval("relevance", args, engine=FakeEngine(), embedder=FakeEmbedder(),
                       stdout=open(tmp_path / "stdout", "w"), stderr=open(tmp_path / "stderr", "w"))
    rows = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    sources = {r["meta"]["source"] for r in rows}
    assert {"bfcl/live_relevance", "acebench/special_irrelevant", "nlsi", "sgd"} <= sources
    assert summary["split"]["part"] == "report" and all(r["meta"]["part"] == "report" for r in rows)
    assert all(r["prediction"]["best_cosine"] is not None for r in rows if r["prediction"].get("status") == "ok")
    assert set(summary["metrics"]["by_source"]) == sources


def _rows(n: int, relevant: bool, source: str, cosine: float, margin: float) -> list[fit_relevance.RelevanceRow]:
    return [fit_relevance.RelevanceRow(source=source, id=f"{source}{i}", relevant=relevant,
                                       features=[cosine, margin], hand_refused=False)
            for i in range(n)]


def test_the_model_rule_uses_the_models_none_score_where_the_cosine_cannot_tell():
    # Relevant and irrelevant requests share their cosines; only the model's "None" margin separates them.
    rows = _rows(60, True, "a", 0.3, -3.0) + _rows(40, False, "b", 0.3, 2.0)
    result = fit_relevance.fit_rule(rows)
    assert result.weights[2] < 0  # a higher "None" score says no function fits
    assert result.fitted["false_refusal"] <= 0.02 and result.fitted["no_call"] == 1.0
    assert result.hand == {"no_call": 0.0, "false_refusal": 0.0} and result.kept
    # One relevant request looks like the irrelevant ones: the fitted rule refuses it, a hand-set rule that
    # refuses exactly the irrelevant ones is better, and the fitted rule is not kept.
    odd = rows[0].model_copy(update={"features": [0.3, 2.0]})
    hand = [r.model_copy(update={"hand_refused": not r.relevant}) for r in [odd, *rows[1:]]]
    worse = fit_relevance.fit_rule(hand)
    assert worse.fitted["false_refusal"] > 0 and worse.hand["false_refusal"] == 0.0
    assert not worse.kept and "not better on both" in worse.why
    rule = fnctod.AbstentionRule.model_validate(result.rule())
    assert rule.refuses([0.3, 2.0]) and not rule.refuses([0.3, -3.0])


def test_a_refusal_rule_fitted_on_one_kind_of_request_is_a_one_line_error():
    from prefcall.errors import ConfigError

    with pytest.raises(ConfigError, match="both kinds"):
        fit_relevance.fit_rule(_rows(5, True, "a", 0.3, 0.0))


def test_a_fitted_abstention_rule_decides_the_refusal_and_the_ranking_keeps_the_functions():
    scores = fnctod.FunctionScores(names=["f", "g", "None"], raw=[-1.0, -2.0, -3.0], calibration=[0.0] * 3,
                                   prior=[0.0] * 3, combined=[-1.0, -2.0, 5.0],
                                   features=[[-1.0, 0, 0.6, 0, 0, 0], [-2.0, 0, 0.2, 0, 0, 0], [-3.0, 0, 0, 0, 0, 0]])
    assert scores.best() == "None"  # the hand-set combination alone would refuse
    assert scores.relevance_features() == [0.6, -2.0]
    scores.refused = False
    assert scores.ranked() == ["f", "g", "None"]
    scores.refused = True
    assert scores.ranked()[0] == "None" and scores.table()["None"]["refused"] == 1.0


def test_the_pipeline_refuses_or_answers_by_the_models_fitted_rule_when_one_is_stored(
        tmp_path: Path):
    from prefcall.storage import fits
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.pipeline_models import get_config

    catalogue = Catalogue(name="c", functions=[Function(name="get_weather", description="current weather of a city",
                                                        parameters={"type": "object", "properties": {
                                                            "city": {"type": "string"}}, "required": ["city"]})])
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF fake weights")
    engine = FileEngine(model)
    data = tmp_path / "data"
    fingerprint = fits.engine_fingerprint(engine, data)
    assert fingerprint
    config = get_config("full", allow_refuse=True)
    for threshold, decision in ((-100.0, "call"), (100.0, "refuse")):
        fits.save(fits.Fit(fingerprint=fingerprint or "", relevance={"weights": [0.0, 1.0, 0.0],
                                                                     "threshold": threshold}), data / fits.FITS_DIR)
        pipeline = Pipeline(engine, FakeEmbedder(), data_dir=data)
        result = pipeline.parse("What is the weather in Paris?", [], catalogue, config)
        assert result.decision in (("call", "ask") if decision == "call" else ("refuse",)), result.notes
        assert pipeline.abstention_rule().threshold == threshold
    # Without an embedder the rule (it weighs the cosine) is not used.
    assert Pipeline(engine, data_dir=data).abstention_rule() is None
    # A damaged rule is a one-line error that says how to mend it, not a traceback from deep in stage 1.
    from prefcall.errors import StoreError

    fits.save(fits.Fit(fingerprint=fingerprint, relevance={"weights": [1.0], "threshold": 0.0}), data / fits.FITS_DIR)
    with pytest.raises(StoreError, match="refit it with `prefcall fit --relevance`"):
        Pipeline(engine, FakeEmbedder(), data_dir=data).abstention_rule()
