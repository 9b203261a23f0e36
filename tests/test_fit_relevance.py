"""The relevance fit (`prefcall fit --relevance`) and the abstention report (`prefcall eval relevance`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
from model_files import FileEngine

from prefcall.engine.fake import FakeEmbedder
from prefcall.evaluation import fit_relevance, splits
from prefcall.evaluation.task import ScoredItem
from prefcall.evaluation.tasks.relevance import TASK as RELEVANCE
from prefcall.schemas.model import Catalogue, Function
from prefcall.strategies import fnctod, model_check


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


def _evidence(cosine: float, word_share: float) -> list[float]:
    from prefcall.strategies.relevance import FEATURES

    row = [cosine if name.endswith("cosine") else 0.0 for name in FEATURES]
    row[FEATURES.index("word_share")] = word_share
    return row


def test_the_embedders_rule_weighs_the_evidence_the_best_cosine_cannot_separate():
    # Relevant and irrelevant requests share their cosines; only the share of a function's words tells them apart.
    items = [_request("near", i, True) for i in range(100)] + [_request("far", i, True) for i in range(20)] + \
        [_request("none", i, False) for i in range(50)]
    features = [_evidence(0.2 + (i % 10) / 30, 0.4 + (i % 3) / 10) for i in range(120)] + \
        [_evidence(0.2 + (i % 10) / 30, 0.05 * (i % 2)) for i in range(50)]
    report = fit_relevance.fit("emb", features, items)
    assert report.cosine_auc == 0.5 and report.auc == 1.0
    scores = fit_relevance.rule_scores(report.weights, features)
    assert all(s >= report.threshold for s in scores[:120])
    assert report.refused_irrelevant == 1.0 and report.sources["none"].relevant is False
    assert report.sources["far"].kept == 1.0


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
    from prefcall.errors import ConfigError

    args.sources, args.out = "nlsi, acebench/special_irrelevant", str(tmp_path / "some")
    run_eval("relevance", args, engine=FakeEngine(), embedder=FakeEmbedder(),
             stdout=open(tmp_path / "stdout", "w"), stderr=open(tmp_path / "stderr", "w"))
    some = [json.loads(line) for line in (tmp_path / "some" / "results.jsonl").read_text().splitlines()]
    assert {r["meta"]["source"] for r in some} == {"nlsi", "acebench/special_irrelevant"}
    args.sources = "nlsi,bfcl"
    with pytest.raises(ConfigError, match="--sources bfcl: not a source here"):
        RELEVANCE.load(args)


def test_a_clarify_question_without_a_draft_is_not_a_refusal_and_its_limitation_is():
    question = {"status": "ok", "decision": "ask", "clarify": "question", "calls": [], "functions": []}
    limitation = {"status": "ok", "decision": "refuse", "clarify": "limitation", "calls": [], "functions": []}
    items = [_scored(question, True, ["f"]), _scored(limitation, True, ["f"]), _scored(limitation, False, [])]
    assert [i.scores["refused"] for i in items] == [0.0, 1.0, 1.0]
    assert items[0].scores["selected"] == 0.0  # no drafted function: not a right selection either


def test_the_relevance_report_gives_clarify_s_figures_without_the_check_on_the_same_requests():
    """Where the model's check decided, the report adds the no-call and false refusal rates that the embedder's
    rule alone gave on the same requests; without a check there is no such figure."""
    from prefcall.evaluation.tasks.relevance import figures

    refused = {"status": "ok", "decision": "refuse", "clarify": "limitation", "calls": [], "functions": []}
    answered = {"status": "ok", "decision": "call", "clarify": "continue", "calls": [], "functions": ["f"]}
    items = [_scored(refused | {"decision_without_check": "call"}, False, []),  # the check refused it
             _scored(refused | {"decision_without_check": "refuse"}, False, []),
             _scored(answered | {"decision_without_check": "refuse"}, True, ["f"])]  # the check kept it
    found = figures(items)
    assert (found["no_call_rate"], found["false_refusal_rate"]) == (1.0, 0.0)
    assert (found["without_check"]["no_call_rate"], found["without_check"]["false_refusal_rate"]) \
        == (0.5, 1.0)
    assert "without_check" not in figures([_scored(answered, True, ["f"])])


def test_eval_relevance_runs_clarify_with_the_embedders_rule_or_a_callers_cosine_cut(shared_data: Path,
                                                                                    tmp_path: Path, monkeypatch):
    from prefcall.engine.fake import FakeEngine
    from prefcall.evaluation.runner import run_eval
    from prefcall.strategies import relevance

    def run(name: str, cut: float | None, stage_draft: bool = False) -> list[dict]:
        args = argparse.Namespace(split="report", per_source=1, config="full", out=str(tmp_path / name), limit=None,
                                  predictions=None, argv=[], tool="clarify", cosine_cut=cut, stage_draft=stage_draft)
        engine = FakeEngine().reply("Continue", when="Before calling a tool").reply("{}", when="fill in the arguments")
        run_eval("relevance", args, engine=engine, embedder=FakeEmbedder(),
                 stdout=open(tmp_path / "stdout", "w"), stderr=open(tmp_path / "stderr", "w"))
        rows = [json.loads(line) for line in (tmp_path / name / "results.jsonl").read_text().splitlines()]
        assert rows and all(r["prediction"]["status"] == "ok" for r in rows)
        return rows

    def rule(threshold: float) -> None:
        monkeypatch.setattr(relevance, "ask_rule", lambda e: relevance.RelevanceRule(embedder=e.name,
                                                                                     threshold=threshold))

    rule(2.0)  # a rule every request is under: clarify's limitation, said to be the rule's
    refusing = run("refusing", None)
    assert all(r["prediction"]["clarify"] == "limitation" for r in refusing)
    assert all(any(n.startswith("relevance (closest") for n in r["prediction"]["evidence"]) for r in refusing)
    rule(-100.0)  # a rule no request is under: no limitation
    assert not any(r["prediction"]["clarify"] == "limitation" for r in run("keeping", None))
    # a caller's cosine cut replaces the rule before the draft (the earlier clarify: 0.3)
    cut = run("cut", 2.0)
    assert all(r["prediction"]["clarify"] == "limitation" for r in cut)
    assert all(any("cosine cut 2.00" in n for n in r["prediction"]["evidence"]) for r in cut)
    # --stage-draft: clarify drafts stage 1's choice at a tier without a check (the embedded model's)
    from prefcall.strategies import model_check
    from prefcall.strategies.pipeline import Pipeline

    monkeypatch.setattr(Pipeline, "stage_for", lambda self, dialogue, catalogue, profile=(): lambda: (
        model_check.StageView(None, [catalogue.functions[-1].name])))
    staged = run("staged", None, stage_draft=True)
    notes = [(r, n) for r in staged for n in r["prediction"]["evidence"] if n.startswith("draft: ")]
    assert notes  # some request's stage 1 chose another function than the embedder's closest
    assert all(r["prediction"]["functions"] == [n.removeprefix("draft: ").split(",")[0]] for r, n in notes)
    assert not any(n.startswith("draft: ") for r in run("closest", None) for n in r["prediction"]["evidence"])


def test_the_cosine_cut_is_clarifys_and_parse_request_says_so(monkeypatch):
    from prefcall.engine.fake import FakeEngine
    from prefcall.errors import ConfigError
    from prefcall.evaluation.task import EvalContext, EvalItem

    monkeypatch.setattr(RELEVANCE, "_requests", {"s:1": _request("s", 1, True)}, raising=False)
    ctx = EvalContext(argparse.Namespace(tool="parse_request", cosine_cut=0.3, config="full"), engine=FakeEngine(),
                      embedder=FakeEmbedder())
    with pytest.raises(ConfigError, match="--tool clarify"):
        RELEVANCE.predict(EvalItem(id="s:1", input={}, gold={}, meta={}), ctx)
    ctx = EvalContext(argparse.Namespace(tool="parse_request", stage_draft=True, config="full"), engine=FakeEngine(),
                      embedder=FakeEmbedder())
    with pytest.raises(ConfigError, match="--stage-draft is clarify's"):
        RELEVANCE.predict(EvalItem(id="s:1", input={}, gold={}, meta={}), ctx)


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


def _weather_model(tmp_path: Path) -> tuple[Catalogue, FileEngine, Path, str]:
    """A one-function catalogue, a fake engine naming a model file, a data folder and the model's fingerprint."""
    from prefcall.storage import fits

    catalogue = Catalogue(name="c", functions=[Function(name="get_weather", description="current weather of a city",
                                                        parameters={"type": "object", "properties": {
                                                            "city": {"type": "string"}}, "required": ["city"]})])
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF fake weights")
    engine = FileEngine(model)
    data = tmp_path / "data"
    fingerprint = fits.engine_fingerprint(engine, data)
    assert fingerprint
    return catalogue, engine, data, fingerprint


def test_the_pipeline_refuses_or_answers_by_the_models_fitted_rule_when_one_is_stored(
        tmp_path: Path):
    from prefcall.storage import fits
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.pipeline_models import get_config

    catalogue, engine, data, fingerprint = _weather_model(tmp_path)
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


def _stage_one_rows(n: int, relevant: bool, source: str, cosines: tuple[float, float], named: bool = False,
                    none_model: float = 0.0, best: float = 0.0, gate: float = 0.5) -> list[fit_relevance.RelevanceRow]:
    low, high = cosines
    return [fit_relevance.RelevanceRow(
        source=source, id=f"{source}{i}", relevant=relevant, features=[0.0, 0.0], hand_refused=False,
        none_inputs=[none_model, best, low + (high - low) * i / max(1, n - 1), float(named)], gate_cosine=gate)
        for i in range(n)]


def test_the_none_prior_fit_refuses_more_irrelevant_requests_and_never_more_of_any_relevant_source():
    # Irrelevant requests come to 0.20-0.40 of a function; relevant ones from 0.45 up, except one source worded
    # far from its functions (0.33-0.60), of which the hand-set prior (positive under 0.30) refuses none.
    rows = (_stage_one_rows(50, False, "noise", (0.20, 0.40)) + _stage_one_rows(80, True, "close", (0.45, 0.90))
            + _stage_one_rows(20, True, "far", (0.33, 0.60)))
    hand = fit_relevance.prior_refusals(rows, fnctod.HAND_NONE_PRIOR)
    assert hand[:50].mean() < 0.6 and not hand[50:].any()
    result = fit_relevance.fit_none_prior(rows)
    prior = fnctod.NonePrior.model_validate(result.prior)
    assert result.kept and result.fitted["no_call"] > result.hand["no_call"] and result.fitted["false_refusal"] == 0.0
    assert 0.30 < prior.cosine <= 0.33 + 1e-9  # as far as the far source allows, no further
    assert result.sources["far"].kept == 1.0 and result.hand_sources["far"].kept == 1.0
    # Naming a function outright counts against "None": a named relevant source keeps its requests at a higher
    # prior cosine when the named constant takes the difference back.
    named = (_stage_one_rows(50, False, "noise", (0.20, 0.40))
             + _stage_one_rows(20, True, "named", (0.30, 0.40), named=True)
             + _stage_one_rows(80, True, "close", (0.45, 0.90)))
    wide = fit_relevance.fit_none_prior(named)
    assert wide.kept and wide.fitted["no_call"] == 1.0 and wide.fitted["false_refusal"] == 0.0
    assert fnctod.NonePrior.model_validate(wide.prior).named > 0


def test_the_none_prior_fit_counts_the_embedder_check_and_keeps_the_hand_prior_when_nothing_is_better():
    rows = _stage_one_rows(30, False, "noise", (0.10, 0.20)) + _stage_one_rows(30, True, "close", (0.50, 0.90))
    # Every irrelevant request is already refused (by the prior, or by the embedder check at 0.25): nothing to gain.
    for gate in (None, 0.25):
        result = fit_relevance.fit_none_prior(rows, gate)
        assert not result.kept and result.prior == fnctod.HAND_NONE_PRIOR.model_dump() and "no prior" in result.why
        assert result.hand == {"no_call": 1.0, "false_refusal": 0.0} and result.gate_threshold == gate
    gated = [r.model_copy(update={"gate_cosine": 0.0 if not r.relevant else 0.5}) for r in rows]
    assert fit_relevance.prior_refusals(gated, fnctod.NonePrior(cosine=0.0, slope=0.0, named=0.0), 0.25)[:30].all()
    from prefcall.errors import ConfigError

    with pytest.raises(ConfigError, match="both kinds"):
        fit_relevance.fit_none_prior(rows[:30])


def test_the_pipeline_weighs_none_with_the_models_fitted_prior_when_one_is_stored(tmp_path: Path):
    from prefcall.errors import StoreError
    from prefcall.storage import fits
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.pipeline_models import get_config

    catalogue, engine, data, fingerprint = _weather_model(tmp_path)
    config = get_config("full", allow_refuse=True)
    assert Pipeline(engine, FakeEmbedder(), data_dir=data).none_prior() == fnctod.HAND_NONE_PRIOR  # never fitted
    answered = Pipeline(engine, FakeEmbedder(), data_dir=data).parse("What is the weather in Paris?", [], catalogue,
                                                                     config)
    assert answered.decision in ("call", "ask")
    fits.save(fits.Fit(fingerprint=fingerprint, none_prior={"cosine": 5.0, "slope": 40.0, "named": 0.0}),
              data / fits.FITS_DIR)
    pipeline = Pipeline(engine, FakeEmbedder(), data_dir=data)
    assert pipeline.none_prior() == fnctod.NonePrior(cosine=5.0, slope=40.0, named=0.0)
    refused = pipeline.parse("What is the weather in Paris?", [], catalogue, config)
    assert refused.decision == "refuse" and refused.functions == []
    assert any(n.startswith("refuse: the request is not about the catalogue (stage 1 scored \"None\"")
               for n in refused.notes), refused.notes
    assert not any(n.startswith("refuse") for n in answered.notes)
    fits.save(fits.Fit(fingerprint=fingerprint, none_prior={"cosine": 0.3, "slope": -1.0, "named": 0.0}),
              data / fits.FITS_DIR)
    with pytest.raises(StoreError, match="refit it with `prefcall fit --relevance`"):
        Pipeline(engine, FakeEmbedder(), data_dir=data).none_prior()


def test_fit_relevance_with_a_model_fits_the_none_prior_beside_the_rule_and_writes_its_rows(tmp_path: Path,
                                                                                         monkeypatch, capsys):
    from prefcall import cli
    from prefcall.storage import fits

    def weather(i: int) -> Catalogue:
        return Catalogue(name="w", functions=[
            Function(name="get_weather", description="current weather of a city"),
            Function(name="book_table", description="reserve a table at a restaurant")])

    items = [fit_relevance.Request(source="rel", id=f"r{i}", dialogue=f"User: weather in city {i}",
                                   text=f"weather in city {i}", catalogue=weather(i), relevant=True, gold=["get_weather"])
             for i in range(12)]
    items += [fit_relevance.Request(source="irr", id=f"i{i}", dialogue=f"User: sing me song {i}",
                                    text=f"sing me song {i}", catalogue=weather(i), relevant=False) for i in range(8)]
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF fake weights")
    monkeypatch.setattr(fit_relevance, "requests", lambda part: items)
    monkeypatch.setattr("prefcall.engine.load_embedder", lambda settings: FakeEmbedder())
    monkeypatch.setattr("prefcall.engine.load_engine", lambda settings: FileEngine(model))
    data, out = tmp_path / "data", tmp_path / "run"
    monkeypatch.setenv("PREFCALL_DATA_DIR", str(data))
    assert cli.main(["fit", "--relevance", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)["model_rule"]
    prior = printed["none_prior"]
    assert prior["hand_prior"] == fnctod.HAND_NONE_PRIOR.model_dump() and prior["rows"] == 20
    assert prior["gate_threshold"] is not None
    rows = [fit_relevance.RelevanceRow.model_validate_json(line)
            for line in (out / "relevance-rows.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 20 and all(r.none_inputs is not None and r.gate_cosine is not None for r in rows)
    # The embedder check already refuses every irrelevant request here: no prior can do better, nothing is stored.
    assert prior["hand"]["no_call"] == 1.0 and not prior["kept"]
    stored = fits.load(printed["fingerprint"], data)
    assert stored is None or stored.none_prior is None
    # A prior that is better is stored with the model's fit, with where it came from; other fitted rules stay.
    fits.save(fits.Fit(fingerprint=printed["fingerprint"], selection=[1.0] * 6), data / fits.FITS_DIR)
    better = fit_relevance.fit_none_prior(rows).model_copy(update={"kept": True, "prior": {
        "cosine": 0.4, "slope": 5.0, "named": 1.0}})
    monkeypatch.setattr(fit_relevance, "fit_none_prior", lambda rows, threshold: better)
    assert cli.main(["fit", "--relevance"]) == 0
    capsys.readouterr()
    stored = fits.load(printed["fingerprint"], data)
    assert stored.none_prior == {"cosine": 0.4, "slope": 5.0, "named": 1.0} and stored.selection == [1.0] * 6
    assert stored.source["none_prior"]["command"] == "prefcall fit --relevance"
    # A subset for a large model: the model runs on the first N requests of each source and kind.
    few = tmp_path / "few"
    assert cli.main(["fit", "--relevance", "--per-source", "3", "--dry-run", "--out", str(few)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["model_rule"]["items"] == {"rel (relevant)": 3, "irr (irrelevant)": 3}
    assert printed["embedder_threshold"]["n_relevant"] == 12  # the threshold still reads every request
    ids = [json.loads(line)["id"] for line in (few / "relevance-rows.jsonl").read_text(encoding="utf-8").splitlines()]
    assert ids == ["r0", "r1", "r2", "i0", "i1", "i2"]
    # A refit from those rows asks the model nothing and fits the same rules; rows of other requests are refused.
    engines: list[FileEngine] = []
    monkeypatch.setattr("prefcall.engine.load_engine",
                        lambda settings: engines.append(FileEngine(model)) or engines[-1])
    rows_file = str(few / "relevance-rows.jsonl")
    assert cli.main(["fit", "--relevance", "--per-source", "3", "--dry-run", "--rows", rows_file]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["model_rule"]["check"]["weights"] == printed["model_rule"]["check"]["weights"]
    assert again["model_rule"]["none_prior"]["prior"] == printed["model_rule"]["none_prior"]["prior"]
    assert not [c for e in engines for c in e.calls]
    assert cli.main(["fit", "--relevance", "--per-source", "2", "--dry-run", "--rows", rows_file]) != 0
    assert "rerun without --rows" in capsys.readouterr().err
    # A run cut short resumes: the answers it appended are kept, only the other requests are asked.
    cut = tmp_path / "cut"
    cut.mkdir()
    lines = (few / "relevance-rows.jsonl").read_text(encoding="utf-8").splitlines()
    (cut / "relevance-rows.jsonl").write_text("\n".join(lines[:4]) + "\n" + lines[4][:20], encoding="utf-8")
    engines.clear()
    assert cli.main(["fit", "--relevance", "--per-source", "3", "--dry-run", "--out", str(cut)]) == 0
    resumed = json.loads(capsys.readouterr().out)
    assert resumed["model_rule"]["check"]["weights"] == printed["model_rule"]["check"]["weights"]
    asked = {c["prompt"] for e in engines for c in e.calls if "prompt" in c}
    assert not any("weather in city 0" in p or "weather in city 2" in p for p in asked)
    assert any("sing me song 1" in p for p in asked)
    assert (cut / "relevance-rows.jsonl").read_text(encoding="utf-8").splitlines() == lines
    # Rows written before the questions about the message alone: only those questions are asked, once per request.
    from prefcall.strategies import model_check

    old = tmp_path / "old"
    old.mkdir()
    stripped = [json.dumps({k: v for k, v in json.loads(line).items() if k != "message_yes"}) for line in lines]
    (old / "relevance-rows.jsonl").write_text("\n".join(stripped) + "\n", encoding="utf-8")
    engines.clear()
    assert cli.main(["fit", "--relevance", "--per-source", "3", "--dry-run", "--out", str(old)]) == 0
    capsys.readouterr()
    asked = [c["prompt"] for e in engines for c in e.calls if "prompt" in c]
    questions = [q.question for q in model_check.MESSAGE_QUESTIONS.values()]
    assert len(asked) == 6 * len(questions) and all(any(q in p for q in questions) for p in asked)
    refreshed = [fit_relevance.RelevanceRow.model_validate_json(line)
                 for line in (old / "relevance-rows.jsonl").read_text(encoding="utf-8").splitlines()]
    assert all(sorted(r.message_yes or {}) == sorted(model_check.MESSAGE_QUESTIONS) for r in refreshed)


def _check_rows(n: int, relevant: bool, source: str, gate: float, yes: float) -> list[fit_relevance.RelevanceRow]:
    return [fit_relevance.RelevanceRow(source=source, id=f"{source}{i}", relevant=relevant, features=[0.5, 0.0],
                                       hand_refused=False, gate_cosine=gate + 0.01 * i, model_yes=yes + 0.1 * (i % 5))
            for i in range(n)]


def test_the_models_check_is_kept_only_when_its_answers_refuse_more_than_the_embedder_alone():
    # On-topic requests no function serves: the embedder's score cannot tell them from relevant ones (both clear
    # its threshold 0.0), the model's yes-margin can.
    rows = (_check_rows(40, True, "a", 0.5, 2.0) + _check_rows(40, True, "b", 0.3, 1.5)
            + _check_rows(30, False, "n", 0.4, -1.0) + _check_rows(10, False, "n2", -0.5, 0.0))
    found = fit_relevance.fit_check(rows, embedder_threshold=0.0)
    assert found.kept and found.embedder == {"no_call": 0.25, "false_refusal": 0.0}
    assert found.fitted["no_call"] > 0.9 and found.fitted["false_refusal"] <= 0.02
    assert found.weights[2] > 0  # a larger yes-margin keeps
    # A model that says yes to everything adds nothing: not kept, and says why.
    blind = [r.model_copy(update={"model_yes": 2.0}) for r in rows]
    noise = fit_relevance.fit_check(blind, embedder_threshold=0.0)
    assert not noise.kept and "adds nothing" in noise.why
    with pytest.raises(Exception, match="rerun `prefcall fit"):
        fit_relevance.fit_check([r.model_copy(update={"model_yes": None}) for r in rows], 0.0)


def test_the_check_goes_after_the_embedders_rule_when_that_refuses_more_within_the_keep_rule():
    # Chatter far from every function (the embedder's score under its threshold 0.0) that the model still says
    # yes to, beside on-topic requests only the model turns down: neither alone refuses both kinds.
    rows = (_check_rows(40, True, "a", 0.5, 2.0) + _check_rows(40, True, "b", 0.0, 1.5)
            + _check_rows(20, False, "topic", 0.4, -1.0) + _check_rows(20, False, "chatter", -0.3, 4.0))
    found = fit_relevance.fit_check(rows, embedder_threshold=0.0)
    assert found.embedder_first and found.kept and found.rule()["embedder_first"] is True
    assert found.fitted["no_call"] == 1.0 and found.fitted["false_refusal"] <= 0.02
    assert found.other["no_call"] < found.fitted["no_call"]  # the check alone, fitted the same way
    assert found.sources["chatter"].kept == 0.0
    # Where the embedder's rule alone already refuses more relevant rows than the keep rule allows, it cannot
    # go first: the check alone is the rule.
    costly = [r.model_copy(update={"gate_cosine": -1.0}) if r.source == "b" and r.id < "b2" else r for r in rows]
    assert not fit_relevance.fit_check(costly, embedder_threshold=0.0).embedder_first


def test_the_pipeline_asks_the_model_whether_the_tool_can_do_it_when_its_fit_has_a_check(tmp_path: Path,
                                                                                        monkeypatch):
    from prefcall.storage import fits
    from prefcall.strategies import model_check, relevance
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.pipeline_models import get_config

    catalogue, _, data, _ = _weather_model(tmp_path)
    model = tmp_path / "m.gguf"

    def scorer(prompt: str, candidate: str) -> float:
        if model_check.QUESTIONS[1].question in prompt:  # the model reads the request: only weather is weather
            return {"Yes": 0.0, "No": -3.0}[candidate] if "rain" in prompt else {"Yes": -3.0, "No": 0.0}[candidate]
        return -1.0

    engine = FileEngine(model, scorer=scorer)
    fingerprint = fits.engine_fingerprint(engine, data)
    # The embedder's rule keeps both requests (a threshold no score is under): alone it refuses neither.
    monkeypatch.setattr(relevance, "ask_rule", lambda embedder: relevance.RelevanceRule(
        embedder=embedder.name, threshold=-10.0))
    config = get_config("full", allow_refuse=True)

    def parse(text: str):
        return Pipeline(engine, FakeEmbedder(), data_dir=data).parse(f"User: {text}", [], catalogue, config)

    assert parse("What is the weather like today?").decision != "refuse"
    fits.save(fits.Fit(fingerprint=fingerprint, check={"weights": [0.0, 0.0, 1.0], "threshold": 0.0}),
              data / fits.FITS_DIR)
    off = parse("What is the weather like on Mars, scientifically speaking?")
    assert off.decision == "refuse" and any("yes-margin -3.00" in n for n in off.notes), off.notes
    unchecked = Pipeline(engine, FakeEmbedder(), data_dir=data).parse(
        "User: Will it rain in Paris?", [], catalogue, get_config("full", allow_refuse=True, ask_relevance=False))
    checked = parse("Will it rain in Paris?")
    assert checked.decision != "refuse"
    assert checked.trace.prompt_tokens > unchecked.trace.prompt_tokens  # the question's tokens are in the trace
    prompts = [c["prompt"] for c in engine.calls if model_check.QUESTIONS[1].question in c.get("prompt", "")]
    assert prompts and all("User request:\nWill it rain in Paris?" in p or "Mars" in p for p in prompts)
    # Fitted to go after the embedder's rule: what that rule refuses is refused without asking the model.
    monkeypatch.setattr(relevance, "ask_rule", lambda embedder: relevance.RelevanceRule(
        embedder=embedder.name, threshold=10.0))
    fits.save(fits.Fit(fingerprint=fingerprint, check={"weights": [0.0, 0.0, 1.0], "threshold": 0.0,
                                                       "embedder_first": True}), data / fits.FITS_DIR)
    asked = len(engine.calls)
    first = parse("Will it rain in Paris?")
    assert first.decision == "refuse" and any("the model was not asked" in n for n in first.notes), first.notes
    assert not [c for c in engine.calls[asked:] if model_check.QUESTIONS[1].question in c.get("prompt", "")]
    # Without an embedder the check (it weighs the embedder's score) is not used; a damaged one says how to mend it.
    assert Pipeline(engine, data_dir=data).check_rule() is None
    from prefcall.errors import StoreError

    fits.save(fits.Fit(fingerprint=fingerprint, check={"weights": [1.0], "threshold": 0.0}), data / fits.FITS_DIR)
    with pytest.raises(StoreError, match="refit it with `prefcall fit --relevance`"):
        Pipeline(engine, FakeEmbedder(), data_dir=data).check_rule()


def test_the_check_s_way_is_chosen_on_rows_its_fit_did_not_read():
    """Every way of combining the check with the embedder's rule is scored on held-out folds; the chosen one has
    the best held-out gain (irrelevant rows refused less relevant ones), and a way that reads only the model's
    yes-margin stores weight 0 for the embedder's score."""
    rows = (_check_rows(40, True, "a", 0.5, 2.0) + _check_rows(40, True, "b", 0.3, 1.5)
            + _check_rows(30, False, "n", 0.4, -1.0) + _check_rows(10, False, "n2", -0.5, 0.0))
    found = fit_relevance.fit_check(rows, embedder_threshold=0.0)
    stage = ", stage 1's None margin"
    # no calibrated rows: the ways and each with stage 1's margin (every row has it)
    assert {k.removesuffix(stage) for k in found.held_out} <= set(fit_relevance.CHECK_WAYS)
    assert found.way in found.held_out and any(k.endswith(stage) for k in found.held_out)
    gain = {k: v["no_call"] - v["false_refusal"] for k, v in found.held_out.items()}
    assert gain[found.way] == max(gain.values())
    assert found.embedder_first == fit_relevance.CHECK_WAYS[found.way.removesuffix(stage)][0]
    assert not found.stage_one  # the same margin on every row tells nothing: a tie goes to the way without it
    # A way that reads only the model's yes-margin weighs the embedder's score 0 in the stored rule.
    import numpy as np

    x = np.asarray([[r.gate_cosine, r.model_yes] for r in rows])
    y = np.asarray([float(r.relevant) for r in rows])
    weights, threshold, _ = fit_relevance._fit_way(x, y, np.zeros(len(rows), dtype=bool), rows, False, False)
    assert weights[1] == 0.0 and weights[2] > 0 and threshold > -1e6


def test_a_calibrated_check_is_chosen_where_the_content_free_baseline_tells_the_requests_apart():
    """A model that says Yes to one catalogue's tool whatever is asked: its raw margin keeps that catalogue's
    off-topic messages; less the tool's content-free baseline it refuses them. The fit tries both and keeps the
    calibrated way, and says which question the rows were asked with."""
    rows = (_check_rows(40, True, "a", 0.5, 2.0) + _check_rows(40, True, "b", 0.3, 1.5)
            + _check_rows(30, False, "n", 0.4, 2.0) + _check_rows(10, False, "n2", 0.4, 1.5))
    baseline = {"a": 0.0, "b": 0.0, "n": 3.0, "n2": 3.0}  # the tools of n and n2 get Yes for "N/A" too
    rows = [r.model_copy(update={"model_yes_calibrated": r.model_yes - baseline[r.source], "check_question": 2})
            for r in rows]
    found = fit_relevance.fit_check(rows, embedder_threshold=0.0)
    assert found.calibrated and found.way.endswith(", calibrated") and found.kept
    assert found.rule()["calibrated"] is True and found.rule()["question"] == 2
    assert found.held_out[found.way]["no_call"] > found.held_out["check alone"]["no_call"]
    # Without calibrated margins only the raw ways are fitted; rows asked with two questions are refused.
    raw = fit_relevance.fit_check([r.model_copy(update={"model_yes_calibrated": None}) for r in rows], 0.0)
    assert not raw.calibrated and {k.removesuffix(", stage 1's None margin") for k in raw.held_out} <= set(
        fit_relevance.CHECK_WAYS)
    with pytest.raises(Exception, match="different questions"):
        fit_relevance.fit_check([*rows[:-1], rows[-1].model_copy(update={"check_question": 1})], 0.0)


def test_the_calibrated_check_asks_each_tools_content_free_baseline_once(tmp_path: Path):
    """The content-free request is asked once per engine, question and function (cached, floats only), in the
    same batch as the request; the calibrated margin is the request's less the baseline, and the prompt says
    which question it is."""
    from prefcall.schemas.model import Function
    from prefcall.strategies import model_check
    from prefcall.strategies.nlt import ContentFreeCache

    def scorer(prompt: str, candidate: str) -> float:
        said_yes = 0.0 if ("N/A" in prompt or "turn the lamp on" in prompt) else -2.0
        return said_yes if candidate == "Yes" else -1.0

    engine = FileEngine(tmp_path / "m.gguf", scorer=scorer)
    lamp = Function(name="lamp_on", description="switch a lamp on", parameters={"type": "object", "properties": {}})
    cache = ContentFreeCache()
    first = model_check.margins(engine, [lamp], "turn the lamp on", 2, cache=cache)
    assert first.raw == [1.0] and first.content_free == [1.0] and first.calibrated() == [0.0]
    asked = [c["prompt"] for c in engine.calls if "prompt" in c]
    assert any("N/A" in p for p in asked) and all(model_check.QUESTIONS[2].question in p for p in asked)
    assert all("User message:" in p for p in asked)
    before = len(engine.calls)
    second = model_check.margins(engine, [lamp], "what is a lumen?", 2, cache=cache)
    assert second.calibrated() == [-2.0]  # log P(Yes) - log P(No) = -2 - (-1), less the cached baseline 1
    assert not any("N/A" in c.get("prompt", "") for c in engine.calls[before:])
    with pytest.raises(Exception, match="question version 9"):
        model_check.CheckRule(weights=[0.0, 0.0, 1.0], threshold=0.0, question=9)


def test_a_fold_may_refuse_as_many_of_a_source_as_the_keep_rule_allows_on_all_its_rows():
    """The keep rule lets a threshold refuse 1 of a source's 20 relevant rows; a fold's part holds 16 of them, of
    which 5% is none. The embedder's rule refusing one relevant row of each source must not make every way that
    goes after it unscorable held out: a fold's part may refuse as many as the whole source may."""
    rows = (_check_rows(20, True, "a", 0.5, 2.0) + _check_rows(20, True, "b", 0.3, 1.5)
            + _check_rows(60, True, "c", 0.5, 2.0)
            + _check_rows(20, False, "topic", 0.4, -1.0) + _check_rows(20, False, "chatter", -0.3, 4.0))
    rows = [r.model_copy(update={"gate_cosine": -1.0}) if r.id in ("a0", "b0") else r for r in rows]
    assert fit_relevance.allowed_refusals(rows) == {"*": 2, "a": 1, "b": 1, "c": 3}
    found = fit_relevance.fit_check(rows, embedder_threshold=0.0)
    assert {"embedder first", "check alone"} <= set(found.held_out)
    assert found.held_out["embedder first"]["no_call"] == 1.0
    assert found.held_out["embedder first"]["false_refusal"] <= 0.05
    # The shares themselves are unchanged: 19 of 20 kept, and a source may never lose every row.
    values = [float(i) for i in range(20)]
    assert fit_relevance.threshold_for(values, rows[:20], keep=0.95) == 1.0
    assert fit_relevance.threshold_for(values, rows[:20], refusals={"*": 25, "a": 25}) == 19.0
    assert fit_relevance.threshold_for(values, rows[:20], refusals={"a": 25}) == 0.0  # none of all may go


def _thanks_rows() -> list[fit_relevance.RelevanceRow]:
    """Relevant requests of two sources; remarks on the topic that only the tool question turns down ("topic"),
    thanks that only the message question 1 does ("thanks")."""
    rows = (_check_rows(40, True, "a", 0.5, 2.0) + _check_rows(40, True, "b", 0.3, 1.5)
            + _check_rows(20, False, "topic", 0.4, -1.0) + _check_rows(20, False, "thanks", 0.4, 2.0))
    asks = {"a": 2.0, "b": 1.0, "topic": 1.0, "thanks": -2.0}
    return [r.model_copy(update={"message_yes": {1: asks[r.source] + 0.05 * (int(r.id[-1]) % 3), 2: 0.0}})
            for r in rows]


def test_the_check_reads_the_questions_about_the_message_where_they_refuse_what_the_tool_question_keeps():
    """Thanks and remarks on the tools' topic: the tool question says Yes to them as to the relevant requests, the
    question about the message alone says No. The fit tries the message questions beside the tool question and
    keeps the set that refuses them held out; without their answers it fits the tool question alone."""
    rows = _thanks_rows()
    found = fit_relevance.fit_check(rows, embedder_threshold=0.0)
    assert found.kept and 1 in found.messages and found.rule()["messages"] == found.messages
    assert len(found.weights) == 3 + len(found.messages) and found.weights[3 + found.messages.index(1)] > 0
    assert found.held_out[found.way]["no_call"] == 1.0 and found.held_out["check alone"]["no_call"] <= 0.5
    assert found.sources["thanks"].kept == 0.0
    bare = fit_relevance.fit_check([r.model_copy(update={"message_yes": None}) for r in rows], 0.0)
    assert bare.messages == [] and {k.removesuffix(", stage 1's None margin") for k in bare.held_out} <= set(
        fit_relevance.CHECK_WAYS)


def _task_rows() -> list[fit_relevance.RelevanceRow]:
    """Relevant requests whose tool margins spread wide and whose messages ask for something; thanks on the topic
    (the tool question says Yes, the message question says No); tasks sent to tools that do something else (the
    tool question says No, the message question a loud Yes). A sum of the two margins cannot turn down both kinds
    (a weight on the message that refuses the thanks lets the tasks through); the message read only where it says
    No can."""
    def rows(n: int, relevant: bool, source: str, tool: tuple[float, float], asks: tuple[float, float]):
        return [fit_relevance.RelevanceRow(
            source=source, id=f"{source}{i}", relevant=relevant, features=[0.5, 0.0], hand_refused=False,
            gate_cosine=0.5, model_yes=tool[0] + (tool[1] - tool[0]) * ((7 * i) % n) / (n - 1),
            message_yes={1: asks[0] + (asks[1] - asks[0]) * ((3 * i) % n) / (n - 1), 2: 0.0}) for i in range(n)]

    return (rows(40, True, "a", (0.5, 2.5), (0.0, 2.0)) + rows(20, False, "thanks", (0.5, 2.5), (-4.0, -2.0))
            + rows(20, False, "tasks", (-2.0, 0.3), (3.0, 6.0)))


def test_a_message_that_asks_for_something_cannot_lift_a_tool_that_cannot_do_it():
    """The fit tries the message questions read one-sided beside the plain ones and keeps the way that, held out,
    refuses both the thanks and the tasks; the rule it stores says so, and at run time a loud Yes to the message
    question reads as nothing."""
    found = fit_relevance.fit_check(_task_rows(), embedder_threshold=0.0)
    assert found.kept and found.one_sided and found.rule()["one_sided"] is True, found.way
    assert "one-sided message questions 1" in found.way
    assert found.held_out[found.way]["no_call"] == 1.0 and found.held_out[found.way]["false_refusal"] <= 0.05
    plain = found.way.replace("one-sided ", "")
    assert found.held_out[plain]["no_call"] < found.held_out[found.way]["no_call"]
    rule = model_check.CheckRule(**found.rule())
    task = model_check.features(0.5, [-1.0], [5.0] if rule.messages == [1] else [5.0, 0.0], sided=True)
    assert rule.refuses(task)
    two_sided = fit_relevance.fit_check([r.model_copy(update={"message_yes": None}) for r in _task_rows()], 0.0)
    assert not two_sided.one_sided and "one_sided" not in two_sided.rule()


def test_a_check_rule_has_one_weight_per_message_question_it_reads():
    from prefcall.strategies import model_check

    rule = model_check.CheckRule(weights=[0.0, 0.0, 1.0, 2.0], threshold=0.0, messages=[1])
    assert rule.score(model_check.features(0.3, [0.5, -1.0], [0.25])) == 1.0
    sided = rule.model_copy(update={"one_sided": True})
    assert sided.score(model_check.features(0.3, [0.5], [3.0], sided=True)) == 0.5
    assert sided.score(model_check.features(0.3, [0.5], [-1.0], sided=True)) == -1.5
    with pytest.raises(Exception, match="has 4 weights, not 3"):
        model_check.CheckRule(weights=[0.0, 0.0, 1.0], threshold=0.0, messages=[1])
    with pytest.raises(Exception, match="message question versions \\[9\\]"):
        model_check.CheckRule(weights=[0.0, 0.0, 1.0, 1.0], threshold=0.0, messages=[9])


def _checked(tmp_path: Path, monkeypatch, scorer: Any, check: dict) -> tuple[FileEngine, Any]:
    """A fake engine answering by `scorer`, the weather catalogue, an embedder's rule that refuses nothing on its own
    and `check` stored as the model's fitted check: the engine and a parse of one user turn (refusals allowed)."""
    from prefcall.storage import fits
    from prefcall.strategies import relevance
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.pipeline_models import get_config

    catalogue, _, data, _ = _weather_model(tmp_path)
    engine = FileEngine(tmp_path / "m.gguf", scorer=scorer)
    monkeypatch.setattr(relevance, "ask_rule", lambda embedder: relevance.RelevanceRule(
        embedder=embedder.name, threshold=-10.0))
    fits.save(fits.Fit(fingerprint=fits.engine_fingerprint(engine, data), check=check), data / fits.FITS_DIR)
    config = get_config("full", allow_refuse=True)

    def parse(text: str):
        return Pipeline(engine, FakeEmbedder(), data_dir=data).parse(f"User: {text}", [], catalogue, config)

    return engine, parse


def test_the_pipeline_asks_about_the_message_alone_when_its_check_reads_it(tmp_path: Path, monkeypatch):
    """A thank-you on the tool's topic: the tool question says Yes, the question about the message alone says No;
    a rule reading both refuses it and names both margins, and the message prompt holds no tool."""
    message = model_check.MESSAGE_QUESTIONS[1].question

    def scorer(prompt: str, candidate: str) -> float:
        if message in prompt:
            asks = "thank" not in prompt
            return {"Yes": 0.0 if asks else -4.0, "No": -1.0}[candidate]
        if model_check.QUESTIONS[2].question in prompt:
            return {"Yes": 0.0, "No": -2.0}[candidate]
        return -1.0

    engine, parse = _checked(tmp_path, monkeypatch, scorer,
                             {"weights": [0.0, 0.0, 0.0, 1.0], "threshold": 0.0, "question": 2, "messages": [1]})

    thanks = parse("thank you, the weather report was great")
    assert thanks.decision == "refuse", thanks.notes
    assert any("the message question 1's yes-margin -3.00" in n for n in thanks.notes), thanks.notes
    assert parse("What is the weather like in Paris today?").decision != "refuse"
    prompts = [c["prompt"] for c in engine.calls if message in c.get("prompt", "")]
    assert prompts and not any("get_weather" in p for p in prompts)


def test_the_pipeline_reads_a_one_sided_message_question_only_where_it_says_no(tmp_path: Path, monkeypatch):
    """A task the weather tool cannot do, on its topic (stage 1 takes it for the tool): the tool question says No,
    the message question a loud Yes. Read two-sided, the Yes lifts the answer over the threshold; a rule fitted
    one-sided refuses it."""
    message = model_check.MESSAGE_QUESTIONS[1].question

    def scorer(prompt: str, candidate: str) -> float:
        if message in prompt:
            return {"Yes": 0.0, "No": -4.0}[candidate]
        if model_check.QUESTIONS[2].question in prompt:
            return {"Yes": -2.0, "No": 0.0}[candidate]
        return -1.0

    rule = {"weights": [0.0, 0.0, 1.0, 1.0], "threshold": 0.0, "question": 2, "messages": [1]}
    (tmp_path / "two").mkdir()
    (tmp_path / "one").mkdir()
    _, parse = _checked(tmp_path / "two", monkeypatch, scorer, rule)
    kept = parse("What will the weather be like in Paris in ten years?")
    assert kept.decision != "refuse", kept.notes
    assert any(n.startswith("kept: the request is about the catalogue") and "check's score 2.00 >= 0.00" in n
               for n in kept.notes), kept.notes
    _, parse = _checked(tmp_path / "one", monkeypatch, scorer, {**rule, "one_sided": True})
    task = parse("What will the weather be like in Paris in ten years?")
    assert task.decision == "refuse", task.notes
    assert any("the message question 1's yes-margin 4.00" in n and "check's score -2.00" in n for n in task.notes)


def _catalogue(*functions: tuple[str, str]) -> Catalogue:
    return Catalogue(name="c", functions=[Function(name=n, description=d) for n, d in functions])


def test_mismatched_requests_lend_a_far_catalogue_never_one_with_a_function_like_their_own(monkeypatch):
    weather = _catalogue(("get_weather", "current weather of a city"))
    forecast = _catalogue(("weather_forecast", "weather of a city for the next days"))  # shares a name word
    tides = _catalogue(("meteo_status", "current weather of a city today"))  # no name word shared, close by cosine
    songs = _catalogue(("play_song", "play a song by an artist"))
    big = _catalogue(*((f"tool_{i}", f"does thing {i}") for i in range(fit_relevance.MISMATCH_FUNCTIONS + 1)))
    items = [fit_relevance.Request(source="a", id="1", dialogue="weather in Oslo", text="weather in Oslo",
                                   catalogue=weather, relevant=True, gold=["get_weather"]),
             fit_relevance.Request(source="b", id="2", dialogue="x", text="x", catalogue=forecast, relevant=True,
                                   gold=["weather_forecast"]),
             fit_relevance.Request(source="c", id="3", dialogue="y", text="y", catalogue=tides, relevant=False),
             fit_relevance.Request(source="d", id="4", dialogue="z", text="z", catalogue=big, relevant=False),
             fit_relevance.Request(source="e", id="5", dialogue="play Hello", text="play Hello", catalogue=songs,
                                   relevant=True, gold=["play_song"])]
    made = fit_relevance.mismatched(items, FakeEmbedder())
    by_text = {m.text: m for m in made}
    # The weather request gets the song catalogue: the forecast shares a name word, the meteo status is too close,
    # the five-tool catalogue is too big to lend.
    assert [f.name for f in by_text["weather in Oslo"].catalogue.functions] == ["play_song"]
    assert all(not m.relevant and m.source == fit_relevance.MISMATCHED and not m.gold for m in made)
    assert all("tool_0" not in {f.name for f in m.catalogue.functions} for m in made)
    # A request never gets its own catalogue back, and the walk is the same every time.
    assert all(m.catalogue.functions != next(i for i in items if i.text == m.text).catalogue.functions
               for m in made)
    assert [m.id for m in fit_relevance.mismatched(items, FakeEmbedder())] == [m.id for m in made]
    # Sources are taken in turn, so a cap of one per source still mixes them.
    assert [m.id.split(":")[0] for m in made] == ["a", "b", "e"]
    monkeypatch.setattr(fit_relevance, "MISMATCH_COSINE", 1.01)  # without the cosine's bound, the close one is lent
    assert [f.name for f in fit_relevance.mismatched(items, FakeEmbedder())[0].catalogue.functions] == ["meteo_status"]


def _fit_with_made(tmp_path: Path, monkeypatch, capsys, items: list, *flags: str) -> tuple[dict, list]:
    """`prefcall fit --relevance FLAGS --dry-run --out DIR` on `items` with a fake model and embedder: what it
    printed and the model's rows it wrote."""
    from prefcall import cli

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF fake weights")
    monkeypatch.setattr(fit_relevance, "requests", lambda part: items)
    monkeypatch.setattr("prefcall.engine.load_embedder", lambda settings: FakeEmbedder())
    monkeypatch.setattr("prefcall.engine.load_engine", lambda settings: FileEngine(model))
    monkeypatch.setenv("PREFCALL_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / "run"
    assert cli.main(["fit", "--relevance", *flags, "--dry-run", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    rows = [fit_relevance.RelevanceRow.model_validate_json(line)
            for line in (out / "relevance-rows.jsonl").read_text(encoding="utf-8").splitlines()]
    return printed, rows


def test_fit_relevance_mismatched_adds_made_requests_to_the_models_rows_only(tmp_path: Path, monkeypatch, capsys):
    weather = _catalogue(("get_weather", "current weather of a city"), ("book_table", "reserve a restaurant table"))
    songs = _catalogue(("play_song", "play a song by an artist"))
    items = [fit_relevance.Request(source="rel", id=f"r{i}", dialogue=f"User: weather in city {i}",
                                   text=f"weather in city {i}", catalogue=weather, relevant=True, gold=["get_weather"])
             for i in range(10)]
    items += [fit_relevance.Request(source="music", id=f"m{i}", dialogue=f"User: play song {i}",
                                    text=f"play song {i}", catalogue=songs, relevant=True, gold=["play_song"])
              for i in range(6)]
    items += [fit_relevance.Request(source="irr", id=f"i{i}", dialogue=f"User: tell me a joke {i}",
                                    text=f"tell me a joke {i}", catalogue=weather, relevant=False) for i in range(8)]
    printed, rows = _fit_with_made(tmp_path, monkeypatch, capsys, items, "--mismatched", "--per-source", "3")
    # The embedder's rule reads the 24 requests of the sources, as without the flag.
    assert (printed["embedder_threshold"]["n_relevant"], printed["embedder_threshold"]["n_irrelevant"]) == (16, 8)
    made = [r for r in rows if r.source == fit_relevance.MISMATCHED]
    # The model's rows: three of each source and kind, the made ones capped as a source, each a request no
    # function fits (the weather requests with the song catalogue, the song requests with the weather one).
    assert len(rows) == 12 and len(made) == 3 and not any(r.relevant for r in made)
    assert {r.id.split(":")[0] for r in made} == {"rel", "music"}
    # Only the made requests the model's rows read are scored by the embedder (the others are never read).
    assert printed["items"][f"{fit_relevance.MISMATCHED} (irrelevant)"] == 3


def test_near_misses_drop_the_functions_that_serve_a_request_where_the_gold_names_them_all():
    banking = _catalogue(("get_balance", "the balance of an account"), ("freeze_card", "freeze a card"),
                         ("pay_bill", "pay a bill"))
    items = [fit_relevance.Request(source="nlt/nlt", id="1", dialogue="my balance?", text="my balance?",
                                   catalogue=banking, relevant=True, gold=["get_balance"]),
             fit_relevance.Request(source="nlt/nlt", id="2", dialogue="all of it", text="all of it", catalogue=banking,
                                   relevant=True, gold=["get_balance", "freeze_card", "pay_bill"]),  # nothing left
             fit_relevance.Request(source="nlsi", id="3", dialogue="pay it", text="pay it", catalogue=banking,
                                   relevant=True, gold=["pay_bill"]),  # a sibling may serve it: not made
             fit_relevance.Request(source="bfcl/multiple", id="4", dialogue="freeze", text="freeze",
                                   catalogue=banking, relevant=True, gold=["freeze_card"]),
             fit_relevance.Request(source="nlt/nlt", id="5", dialogue="hi", text="hi", catalogue=banking,
                                   relevant=False)]
    made = fit_relevance.near_misses(items)
    assert [(m.id, [f.name for f in m.catalogue.functions]) for m in made] == [
        ("nlt/nlt:1", ["freeze_card", "pay_bill"]), ("bfcl/multiple:4", ["get_balance", "pay_bill"])]
    assert all(m.source == fit_relevance.NEAR_MISS and not m.relevant and m.text for m in made)
    assert [f.name for f in items[0].catalogue.functions] == ["get_balance", "freeze_card", "pay_bill"]  # untouched


def test_fit_relevance_near_miss_adds_the_requests_less_their_functions_to_the_models_rows(tmp_path: Path,
                                                                                          monkeypatch, capsys):
    weather = _catalogue(("get_weather", "current weather of a city"), ("book_table", "reserve a restaurant table"))
    items = [fit_relevance.Request(source="nlt/nlt", id=f"r{i}", dialogue=f"User: weather in city {i}",
                                   text=f"weather in city {i}", catalogue=weather, relevant=True, gold=["get_weather"])
             for i in range(10)]
    items += [fit_relevance.Request(source="irr", id=f"i{i}", dialogue=f"User: tell me a joke {i}",
                                    text=f"tell me a joke {i}", catalogue=weather, relevant=False) for i in range(8)]
    _, rows = _fit_with_made(tmp_path, monkeypatch, capsys, items, "--near-miss", "--per-source", "4")
    made = [r for r in rows if r.source == fit_relevance.NEAR_MISS]
    assert len(rows) == 12 and [r.id for r in made] == [f"nlt/nlt:r{i}" for i in range(4)]
    assert not any(r.relevant for r in made)


def test_the_check_reads_stage_one_s_none_margin_where_the_tool_question_passes_a_near_miss():
    # Near misses: the tool question says yes as for relevant requests, stage 1's "None" margin (features[1]) is high.
    def rows(n: int, relevant: bool, source: str, none: float) -> list[fit_relevance.RelevanceRow]:
        return [r.model_copy(update={"features": [0.5, none + 0.05 * (i % 7)]})
                for i, r in enumerate(_check_rows(n, relevant, source, 0.5, 1.0))]

    found = fit_relevance.fit_check(rows(40, True, "a", -3.0) + rows(40, False, "near", 1.0), embedder_threshold=0.0)
    assert found.stage_one and found.way.endswith(", stage 1's None margin") and found.kept
    assert len(found.weights) == 4 and found.weights[-1] < 0  # a larger None margin refuses
    assert found.rule()["stage_one"] is True and found.held_out[found.way]["no_call"] > 0.9
    rule = model_check.CheckRule(**found.rule())
    assert rule.refuses(model_check.features(0.5, [1.0], [], [1.0]))
    assert not rule.refuses(model_check.features(0.5, [1.0], [], [-3.0]))
    with pytest.raises(ValueError, match="and stage 1 has 4 weights"):
        model_check.CheckRule(**{**found.rule(), "weights": found.weights[:3]})


def test_the_pipeline_reads_stage_one_s_none_margin_when_its_check_does(tmp_path: Path, monkeypatch):
    """A near miss: the tool question says Yes for both requests; stage 1, seeing the list, puts "None" first for
    the one about past weather. A rule reading stage 1's None margin refuses it, names the margin, and asks the model
    nothing more for it than the tool question."""
    def scorer(prompt: str, candidate: str) -> float:
        if model_check.QUESTIONS[2].question in prompt:
            return {"Yes": 0.0, "No": -2.0}[candidate]
        if candidate.strip().startswith(fnctod.NONE_CANDIDATE):  # content-free prompts (no "Paris") at -3.0
            return -3.0 if "Paris" not in prompt else -4.0 if "last year" in prompt else -12.0
        return -1.0  # calibrated, "None" stays under the function both times: stage 1 alone refuses neither

    _, parse = _checked(tmp_path, monkeypatch, scorer,
                        {"weights": [0.0, 0.0, 0.0, -1.0], "threshold": 5.0, "question": 2, "stage_one": True})

    past = parse("What was the weather in Paris on this day last year?")
    assert past.decision == "refuse", past.notes
    assert any("stage 1's None margin" in n for n in past.notes), past.notes
    assert parse("What is the weather like in Paris today?").decision != "refuse"


def test_a_check_is_credited_on_a_source_only_for_what_the_other_sources_taught_it():
    """Each kind of irrelevant request here comes from one source only: remarks on the topic that only the tool
    question turns down, thanks that only the message question does. Held out by source (what a report split
    holds: sources no fit reads), neither is refused, as the rule fitted without a source never learnt its kind;
    held out by fold, where the same source's other rows taught it, both are."""
    rows = _thanks_rows()
    found = fit_relevance.fit_check(rows, embedder_threshold=0.0)
    way = "check alone, message questions 1"
    assert found.held_out[way]["no_call"] == 1.0
    assert found.held_out_sources[way]["no_call"] == 0.0
    assert set(found.held_out_sources) <= set(found.held_out) and found.way in found.held_out_sources
    assert found.way == way and found.kept  # the choice reads the folds: this rule refuses both kinds it was shown


def _clarifier(tmp_path: Path, monkeypatch, scorer: Any, check: dict, embedder_threshold: float = -10.0):
    """clarify on the weather catalogue as the MCP server runs it: a fake engine answering the check by `scorer`,
    the embedder's rule at `embedder_threshold` and `check` stored as the model's fitted check, read from the fit
    the pipeline loads for the engine."""
    from prefcall.engine.fake import FakeEngine
    from prefcall.storage import fits
    from prefcall.strategies import relevance
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.qwn import clarify

    catalogue, _, data, _ = _weather_model(tmp_path)
    engine = FileEngine(tmp_path / "m.gguf", scorer=scorer)
    FakeEngine.reply(engine, "Continue", when="Before calling a tool")
    FakeEngine.reply(engine, '{"city": "Paris"}', when="fill in the arguments")
    monkeypatch.setattr(relevance, "ask_rule", lambda embedder: relevance.RelevanceRule(
        embedder=embedder.name, threshold=embedder_threshold))
    fits.save(fits.Fit(fingerprint=fits.engine_fingerprint(engine, data), check=check), data / fits.FITS_DIR)
    pipeline = Pipeline(engine, FakeEmbedder(), data_dir=data)
    assert pipeline.check_rule() is not None

    def ask(text: str, *, with_stage: bool = True, **options: Any):
        rule, stage = pipeline.check_for(f"User: {text}", catalogue)
        return clarify(engine, f"User: {text}", catalogue, embedder=FakeEmbedder(), check=rule,
                       stage=stage if with_stage else None, **options)

    return engine, ask


def _weather_check(prompt: str, candidate: str) -> float:
    """The model's reading: only a question about rain is one the weather tool can answer."""
    if model_check.QUESTIONS[1].question in prompt:
        return {"Yes": 0.0, "No": -3.0}[candidate] if "rain" in prompt else {"Yes": -3.0, "No": 0.0}[candidate]
    return -1.0


def test_clarify_refuses_by_the_models_check_where_its_fit_has_one_as_parse_request_does(tmp_path: Path,
                                                                                          monkeypatch):
    """The embedder's rule alone keeps both requests; the check refuses the one the model says the tool cannot do,
    names its margin and says what the embedder's rule alone gave."""
    engine, ask = _clarifier(tmp_path, monkeypatch, _weather_check, {"weights": [0.0, 0.0, 1.0], "threshold": 0.0})
    off = ask("What is the weather like on Mars, scientifically speaking, in Paris?")
    assert off.decision == "limitation" and off.decision_without_check == "continue", off.evidence
    assert any("the model's check (refused)" in n and "yes-margin -3.00" in n for n in off.evidence), off.evidence
    kept = ask("Will it rain in Paris?")
    assert kept.decision == "continue" and kept.decision_without_check == "continue", kept.evidence
    assert any("the model's check (passed)" in n for n in kept.evidence)
    assert kept.usage.prompt_tokens > ask("Will it rain in Paris?", check_relevance=False).usage.prompt_tokens
    # a caller's cosine cut replaces the fitted rules: the model is not asked
    asked = len(engine.calls)
    cut = ask("What is the weather like on Mars, scientifically speaking, in Paris?", relevance_threshold=-1.0)
    assert cut.decision == "continue" and cut.decision_without_check is None
    assert not [c for c in engine.calls[asked:] if model_check.QUESTIONS[1].question in c.get("prompt", "")]


def test_the_check_keeps_in_clarify_a_request_the_embedders_rule_alone_would_refuse(tmp_path: Path, monkeypatch):
    """A check not fitted to go after the embedder's rule decides in its place (the embedder's score is one of its
    features): the request is drafted and kept; fitted `embedder_first`, that rule refuses without asking."""
    engine, ask = _clarifier(tmp_path, monkeypatch, _weather_check, {"weights": [0.0, 0.0, 1.0], "threshold": 0.0},
                             embedder_threshold=10.0)
    kept = ask("Will it rain in Paris?")
    assert kept.decision == "continue" and kept.decision_without_check == "limitation", kept.evidence
    assert kept.draft is not None and kept.draft.name == "get_weather"
    assert any("the embedder's rule alone would refuse" in n for n in kept.evidence), kept.evidence
    engine, ask = _clarifier(tmp_path, monkeypatch, _weather_check,
                             {"weights": [0.0, 0.0, 1.0], "threshold": 0.0, "embedder_first": True},
                             embedder_threshold=10.0)
    asked = len(engine.calls)
    first = ask("Will it rain in Paris?")
    assert first.decision == "limitation" and first.decision_without_check is None, first.evidence
    assert not [c for c in engine.calls[asked:] if model_check.QUESTIONS[1].question in c.get("prompt", "")]


def test_clarify_runs_stage_one_for_a_check_that_reads_its_none_margin_and_else_leaves_it_to_the_embedder(
        tmp_path: Path, monkeypatch):
    """A check fitted on stage 1's "None" margin (the 0.5B model's): clarify runs parse_request's stage 1 when the
    check asks for it (`Pipeline.check_for`) and refuses the near miss that margin tells apart; a caller that cannot
    run stage 1 leaves relevance to the embedder's rule, and the model is not asked."""
    def scorer(prompt: str, candidate: str) -> float:
        if model_check.QUESTIONS[2].question in prompt:
            return {"Yes": 0.0, "No": -2.0}[candidate]
        if candidate.strip().startswith(fnctod.NONE_CANDIDATE):  # content-free prompts (no "Paris") at -3.0
            return -3.0 if "Paris" not in prompt else -4.0 if "last year" in prompt else -12.0
        return -1.0

    check = {"weights": [0.0, 0.0, 0.0, -1.0], "threshold": 5.0, "question": 2, "stage_one": True}
    engine, ask = _clarifier(tmp_path, monkeypatch, scorer, check)
    past = ask("What was the weather in Paris on this day last year?")
    assert past.decision == "limitation" and past.decision_without_check == "continue", past.evidence
    assert any("stage 1's None margin" in n for n in past.evidence), past.evidence
    assert ask("What is the weather like in Paris today?").decision == "continue"
    asked = len(engine.calls)
    alone = ask("What was the weather in Paris on this day last year?", with_stage=False)
    assert alone.decision == "continue" and alone.decision_without_check is None, alone.evidence
    assert not [c for c in engine.calls[asked:] if model_check.QUESTIONS[2].question in c.get("prompt", "")]
    engine, ask = _clarifier(tmp_path, monkeypatch, scorer, check, embedder_threshold=10.0)
    assert ask("What is the weather like in Paris today?", with_stage=False).decision == "limitation"


def test_the_check_also_asks_about_the_function_stage_one_chose_where_the_closest_is_another(monkeypatch):
    """clarify drafts the function closest by the embedder; the check was fitted on the functions parse_request
    asks about, the closest and stage 1's choice. Given stage 1's view, the model is asked about its function
    too (and the request kept, where only that one fits); stage 1 runs only when the model is asked."""
    from prefcall.engine.fake import FakeEngine
    from prefcall.engine.base import PromptUsage
    from prefcall.strategies import relevance

    catalogue = _catalogue(("get_weather", "current weather of a city"), ("find_events", "concerts in a city"))

    def scorer(prompt: str, candidate: str) -> float:
        if model_check.QUESTIONS[2].question in prompt:
            return {"Yes": 0.0, "No": -3.0}[candidate] if "find_events" in prompt else \
                {"Yes": -3.0, "No": 0.0}[candidate]
        return -1.0

    engine = FakeEngine(scorer=scorer)
    monkeypatch.setattr(relevance, "ask_rule", lambda embedder: relevance.RelevanceRule(embedder=embedder.name,
                                                                                        threshold=-10.0))
    rule = model_check.CheckRule(weights=[0.0, 0.0, 1.0], threshold=0.0, question=2)
    request = "what is the weather for the concert tonight"
    closest = relevance.judged(FakeEmbedder(), request, catalogue.functions).closest
    assert closest == "get_weather"  # the embedder's closest is the wrong one here
    other = "find_events"
    runs: list[int] = []

    def stage() -> model_check.StageView:
        runs.append(1)
        return model_check.StageView(None, [other])

    alone = model_check.verdict(engine, FakeEmbedder(), rule, request, catalogue.functions, [closest], PromptUsage())
    both = model_check.verdict(engine, FakeEmbedder(), rule, request, catalogue.functions, [closest], PromptUsage(),
                               stage)
    assert alone is not None and both is not None and runs == [1]
    assert (alone.refused, both.refused) == (True, False) and both.asked == 2
    first = model_check.CheckRule(weights=[0.0, 0.0, 1.0], threshold=0.0, question=2, embedder_first=True)
    monkeypatch.setattr(relevance, "ask_rule", lambda embedder: relevance.RelevanceRule(embedder=embedder.name,
                                                                                        threshold=10.0))
    refused = model_check.verdict(engine, FakeEmbedder(), first, request, catalogue.functions, [closest],
                                  PromptUsage(), stage)
    assert refused is not None and refused.refused and runs == [1]  # the embedder's rule refused first


def test_clarify_drafts_the_function_stage_one_chose_and_runs_stage_one_once(monkeypatch):
    """Given parse_request's stage 1 (the server hands it where the check runs it), clarify drafts the function
    stage 1 chose (the one parse_request calls), not the embedder's closest, and stage 1 runs once for the draft
    and the check; stage 1 choosing no function, or no stage given, leaves the embedder's closest drafted."""
    from prefcall.engine.fake import FakeEngine
    from prefcall.strategies import relevance
    from prefcall.strategies.qwn import clarify

    catalogue = _catalogue(("get_weather", "current weather of a city"), ("find_events", "concerts in a city"))

    def scorer(prompt: str, candidate: str) -> float:
        if model_check.QUESTIONS[2].question in prompt:
            return {"Yes": 0.0, "No": -3.0}[candidate]
        return -1.0

    engine = FakeEngine(scorer=scorer)
    FakeEngine.reply(engine, "Continue", when="Before calling a tool")
    FakeEngine.reply(engine, "{}", when="fill in the arguments")
    monkeypatch.setattr(relevance, "ask_rule", lambda embedder: relevance.RelevanceRule(embedder=embedder.name,
                                                                                        threshold=-10.0))
    rule = model_check.CheckRule(weights=[0.0, 0.0, 1.0], threshold=-1.0, question=2)
    request = "User: what is the weather for the concert tonight"
    runs: list[str] = []

    def stage_choosing(*chosen: str):
        def stage() -> model_check.StageView:
            runs.append("stage")
            return model_check.StageView(None, list(chosen))
        return stage

    for checked in (rule, None):  # a caller may hand stage 1 without a check (`eval relevance --stage-draft`)
        runs.clear()
        staged = clarify(engine, request, catalogue, embedder=FakeEmbedder(), check=checked,
                         stage=stage_choosing("find_events"))
        assert staged.draft is not None and staged.draft.name == "find_events", staged.evidence
        assert runs == ["stage"], runs
        assert any("the function stage 1 chose" in n and "get_weather" in n for n in staged.evidence)
    for stage in (stage_choosing(), None):
        closest = clarify(engine, request, catalogue, embedder=FakeEmbedder(), check=rule, stage=stage)
        assert closest.draft is not None and closest.draft.name == "get_weather", closest.evidence
