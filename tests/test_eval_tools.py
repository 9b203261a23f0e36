"""The `tools` eval task: loading, selection metrics (hand-computed, degenerate cases), a harness run."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from prefcall.engine.fake import FakeEngine
from prefcall.errors import ConfigError
from prefcall.evaluation.runner import run_eval
from prefcall.evaluation.task import EvalItem, ScoredItem
from prefcall.evaluation.tasks import nlt as nlt_task
from prefcall.evaluation.tasks import tools

TOOLS = [{"name": "a", "description": "Does A."}, {"name": "b", "description": "Does B."}]


def _scored(gold: list[str], selected: list[str] | None, status: str = "ok") -> ScoredItem:
    item = EvalItem(id="x", input={}, gold=gold)
    prediction = {"status": status, "selected": selected}
    return ScoredItem(id="x", gold=gold, input={}, prediction=prediction, scores=tools.score(item, prediction))


@pytest.mark.parametrize(
    ("pred", "gold", "status", "expected"),
    [
        (["a"], ["a"], "ok", {"exact_set": 1.0, "exact_set_lenient": 1.0, "tp": 1.0, "fp": 0.0, "fn": 0.0}),
        (["a", "b"], ["a"], "ok", {"exact_set": 0.0, "exact_set_lenient": 0.0, "tp": 1.0, "fp": 1.0, "fn": 0.0}),
        ([], [], "ok", {"exact_set": 1.0, "exact_set_lenient": 1.0, "tp": 0.0, "fp": 0.0, "fn": 0.0}),
        ([], ["a"], "ok", {"exact_set": 0.0, "exact_set_lenient": 0.0, "tp": 0.0, "fp": 0.0, "fn": 1.0}),
        # never "right by silence":
        (None, [], "parse_error", {"exact_set": 0.0, "exact_set_lenient": 0.0, "tp": 0.0, "fp": 0.0, "fn": 0.0}),
        (["a"], ["a"], "partial", {"exact_set": 0.0, "exact_set_lenient": 1.0, "tp": 1.0, "fp": 0.0, "fn": 0.0}),
    ],
)
def test_selection_scores(pred, gold, status, expected) -> None:
    assert tools.selection_scores(pred, gold, status) == expected


def test_precision_recall_degenerate_cases() -> None:
    assert tools.precision_recall(0, 0, 0) == {"precision": 1.0, "recall": 1.0, "f1": 1.0}
    assert tools.precision_recall(0, 0, 2) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    assert tools.precision_recall(0, 2, 0) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    assert tools.precision_recall(1, 1, 2) == pytest.approx({"precision": 0.5, "recall": 1 / 3, "f1": 0.4})


def test_aggregate_hand_computed() -> None:
    scored = [_scored(["a"], ["a"]), _scored(["a"], ["a", "b"]), _scored([], []), _scored(["b"], None, "parse_error")]
    metrics = tools.aggregate(scored)
    assert metrics["n"] == 4
    assert metrics["exact_set_accuracy"] == pytest.approx(0.5)
    assert metrics["exact_set_accuracy_lenient"] == pytest.approx(0.5)
    # tp=2 (a, a), fp=1 (b), fn=1 (b of the parse error)
    assert metrics["precision"] == pytest.approx(2 / 3) and metrics["recall"] == pytest.approx(2 / 3)
    assert metrics["parse_error_rate"] == pytest.approx(0.25)
    assert metrics["per_tool"]["a"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0}
    assert metrics["per_tool"]["b"]["precision"] == 0.0 and metrics["per_tool"]["b"]["recall"] == 0.0
    assert tools.aggregate([]) == {"n": 0, "exact_set_accuracy": 0.0}


def test_load_json_list_and_lines(tmp_path: Path) -> None:
    records = [{"id": 1, "text": "do a", "tools": TOOLS, "expected": ["a"]}, {"id": 2, "text": "hi", "tools": TOOLS, "expected": []}]
    as_list = tmp_path / "l.json"
    as_list.write_text(json.dumps(records))
    as_lines = tmp_path / "l.jsonl"
    as_lines.write_text("\n".join(json.dumps(r) for r in records))
    for path in (as_list, as_lines):
        items = tools.load_items(path)
        assert [i.id for i in items] == ["1", "2"] and items[1].gold == []
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"id": 1, "tools": TOOLS}]))
    with pytest.raises(ConfigError):
        tools.load_items(bad)


def test_harness_run_with_fake_engine(tmp_path: Path) -> None:
    data = tmp_path / "tools.json"
    data.write_text(json.dumps([
        {"id": "1", "text": "do a", "tools": TOOLS, "expected": ["a"]},
        {"id": "2", "text": "nothing", "tools": TOOLS, "expected": []},
    ]))
    engine = FakeEngine()
    engine.reply("Thinking: a\na - YES\nb - NO", when="Message: do a")
    engine.reply("Thinking: none\na - NO\nb - NO", when="Message: nothing")
    args = argparse.Namespace(data=str(data), answers=None, limit=None, out=str(tmp_path / "out"), predictions=None,
                              mode="generate", config=None, threshold=0.5, calibrate=False)
    summary = run_eval(tools.TASK, args, engine=engine, stdout=io.StringIO(), stderr=io.StringIO())
    assert summary["metrics"]["exact_set_accuracy"] == 1.0
    assert summary["metrics"]["mean_prompt_tokens"] > 0 and summary["metrics"]["mean_completion_tokens"] > 0
    assert (tmp_path / "out" / "results.jsonl").is_file()


def test_unknown_mode_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        tools.nlt_mode(argparse.Namespace(mode="telepathy"))


# -- the NLT set (tests/data/nlt) and the `nlt` task ----------------------------------------------
NLT_DIR = Path(__file__).parent / "data" / "nlt"


def test_messages_records_give_the_last_user_turn_and_the_history(tmp_path: Path) -> None:
    data = tmp_path / "m.jsonl"
    data.write_text(json.dumps({"id": "x", "context": "A shop.", "tools": TOOLS, "expected": ["a"], "messages": [
        {"role": "user", "content": "I need A."}, {"role": "assistant", "content": "Shall I do A?"},
        {"role": "user", "content": "Yes."}]}))
    item = tools.load_items(data)[0]
    assert item.input["text"] == "Yes." and item.input["context"] == "A shop."
    assert item.input["history"] == [["user", "I need A."], ["assistant", "Shall I do A?"]]
    for bad in ([], [{"role": "assistant", "content": "hi"}], [{"role": "system", "content": "x"}]):
        data.write_text(json.dumps({"id": "y", "tools": TOOLS, "expected": [], "messages": bad}))
        with pytest.raises(ConfigError):
            tools.load_items(data)


def test_nlt_splits_are_disjoint_well_formed_and_what_build_py_writes() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("nlt_build", NLT_DIR / "build.py")
    build = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(build)
    rows = build.records()
    splits = {name: nlt_task.split_path(name) for name in nlt_task.SPLITS}
    ids: dict[str, set[str]] = {}
    for name, path in splits.items():
        expected = [{k: v for k, v in r.items() if k != "split"} for r in rows if r["split"] == name]
        assert tools.read_records(path) == expected, f"{path} is stale: run python tests/data/nlt/build.py"
        items = tools.load_items(path)
        ids[name] = {i.id for i in items}
        assert len(ids[name]) == len(items)
        for item in items:
            assert set(item.gold) <= {t["name"] for t in item.input["tools"]}
        no_tool = sum(not i.gold for i in items) / len(items)
        assert 0.25 <= no_tool <= 0.45 and any(len(i.gold) == 2 for i in items)
        assert len({i.meta["domain"] for i in items}) >= 8
    assert not ids["dev"] & ids["report"]
    assert 0.35 <= len(ids["dev"]) / (len(ids["dev"]) + len(ids["report"])) <= 0.45


def test_nlt_task_split_and_data_options(tmp_path: Path) -> None:
    parser = argparse.Namespace(data=None, split="dev")
    assert len(nlt_task.TASK.load(parser)) == len(tools.read_records(NLT_DIR / "dev.jsonl"))
    with pytest.raises(ConfigError, match="either --data"):
        nlt_task.TASK.load(argparse.Namespace(data="x.jsonl", split="dev"))
    with pytest.raises(ConfigError, match="is not here"):
        nlt_task.split_path("dev", root=tmp_path)
    with pytest.raises(ConfigError):
        nlt_task.split_path("test")


def test_nlt_task_score_mode_reports_interval_and_the_rule_fitted_on_these_items(tmp_path: Path) -> None:
    import math

    # A model with no signal: YES at 0.9 for everything. The lexical prior has to carry the decision.
    engine = FakeEngine(scorer=lambda prompt, c: math.log(0.9 if c == " YES" else 0.1))
    args = argparse.Namespace(data=None, split="dev", answers=None, limit=12, out=str(tmp_path / "out"),
                              predictions=None, mode=None, config=None, threshold=None, calibrate=True)
    summary = run_eval(nlt_task.TASK, args, engine=engine, stdout=io.StringIO(), stderr=io.StringIO())
    metrics = summary["metrics"]
    assert metrics["n"] == 12 and metrics["parse_error_rate"] == 0.0
    interval = summary["intervals"]["exact_set_accuracy"]
    assert interval["method"] == "wilson" and interval["lo"] <= metrics["exact_set_accuracy"] <= interval["hi"]
    fit = metrics["fitted_rule"]
    assert fit["model_weight"] == 0.0 and fit["lexical_weight"] > 0
    assert fit["exact_set_accuracy_in_sample"] >= metrics["exact_set_accuracy"]
    lines = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert all(set(r["prediction"]["evidence"]) == {t["name"] for t in r["input"]["tools"]} for r in lines)


def test_a_rule_fitted_by_one_run_decides_another(tmp_path: Path) -> None:
    """Fit on one set, report on the other: --rule-from reads the fitted_rule a score-mode run wrote."""
    from prefcall.strategies.nlt_models import DecisionRule

    run = tmp_path / "fit-run"
    run.mkdir()
    run.joinpath("metrics.json").write_text(json.dumps({"metrics": {"fitted_rule": {
        "model_weight": 0.5, "lexical_weight": 2.0, "threshold": 1.25, "source": "x"}}}))
    rule = tools.rule_option(argparse.Namespace(rule=None, rule_from=str(run)))
    assert (rule.model_weight, rule.lexical_weight, rule.threshold) == (0.5, 2.0, 1.25) and str(run) in rule.source
    assert tools.rule_option(argparse.Namespace(rule="1,0.25,-0.5", rule_from=None)) == DecisionRule(
        model_weight=1.0, lexical_weight=0.25, threshold=-0.5, source="--rule 1,0.25,-0.5")
    assert tools.rule_option(argparse.Namespace(rule=None, rule_from=None)) is None
    for bad in (argparse.Namespace(rule="1,2", rule_from=None), argparse.Namespace(rule="1,2,3", rule_from=str(run)),
                argparse.Namespace(rule=None, rule_from=str(tmp_path / "nowhere"))):
        with pytest.raises(ConfigError):
            tools.rule_option(bad)


def test_the_rule_given_decides_the_selection(tmp_path: Path) -> None:
    data = tmp_path / "tools.json"
    data.write_text(json.dumps([{"id": "1", "text": "do a please", "tools": TOOLS, "expected": ["a"]}]))
    item = tools.load_items(data)[0]
    engine = FakeEngine()
    everything = tools.predict(item, engine, "score", rule=DecisionRuleFor(-100.0))
    nothing = tools.predict(item, engine, "score", rule=DecisionRuleFor(100.0))
    assert set(everything["selected"]) == {t["name"] for t in TOOLS} and nothing["selected"] == []


def DecisionRuleFor(threshold: float):  # noqa: N802 - a rule that decides by its threshold alone
    from prefcall.strategies.nlt_models import DecisionRule

    return DecisionRule(model_weight=0.0, lexical_weight=0.0, threshold=threshold, source="test")


# -- retrieval baselines in the same run ---------------------------------------------------------------
def test_baselines_pick_the_top_k_or_pass_the_fitted_threshold() -> None:
    evidence = {"tools": {"a": [2.0, 0.1], "b": [0.5, 0.6], "c": [0.0, 0.5]},
                "threshold_rule": {"model_weight": 0.0, "lexical_weight": 0.0, "embedding_weight": 2.0,
                                   "threshold": 0.9, "source": "test"}}
    picked = tools.baseline_selections(evidence, gold_count=1)
    assert picked == {"bm25_topk_oracle": ["a"], "embedder_topk_oracle": ["b"], "embedder_threshold": ["b", "c"]}
    none = tools.baseline_selections(evidence, gold_count=0)
    assert none["bm25_topk_oracle"] is None and none["embedder_topk_oracle"] is None  # oracles need a gold tool
    assert tools.baseline_selections({**evidence, "threshold_rule": None}, 1)["embedder_threshold"] is None


def test_every_report_prints_the_baselines_on_the_same_items(tmp_path: Path) -> None:
    from prefcall.engine.fake import FakeEmbedder

    engine = FakeEngine()
    for _ in range(12):  # the structured baseline's answer: no tool (the baselines do not depend on it)
        engine.reply('{"tools": []}')
    args = argparse.Namespace(data=None, split="dev", answers=None, limit=12, out=str(tmp_path / "out"),
                              predictions=None, mode="structured", config=None, threshold=None, calibrate=True)
    summary = run_eval(nlt_task.TASK, args, engine=engine, embedder=FakeEmbedder(), stdout=io.StringIO(),
                       stderr=io.StringIO())
    baselines = summary["metrics"]["baselines"]
    gold_items = sum(1 for r in (tmp_path / "out" / "results.jsonl").read_text().splitlines()
                     if json.loads(r)["gold"])
    assert baselines["bm25_topk_oracle"]["n"] == baselines["embedder_topk_oracle"]["n"] == gold_items
    assert "rule_exact_set_accuracy" in baselines["bm25_topk_oracle"]
    assert "baselines/embedder_topk_oracle/exact_set_accuracy" in summary["intervals"]


def test_model_based_says_whether_the_rule_that_decided_weighs_the_model() -> None:
    def scored(weight: float) -> ScoredItem:
        prediction = {"status": "ok", "selected": [], "rule": {"model_weight": weight}}
        item = EvalItem(id="x", input={}, gold=[])
        return ScoredItem(id="x", gold=[], input={}, prediction=prediction, scores=tools.score(item, prediction))

    assert tools.aggregate([scored(0.0)], per_tool=False)["model_based"] is False
    assert tools.aggregate([scored(0.5)], per_tool=False)["model_based"] is True


def test_the_threshold_baseline_decides_with_its_rule_s_large_list_terms() -> None:
    rule = {"model_weight": 0.0, "lexical_weight": 0.0, "embedding_weight": 1.0, "threshold": 0.3, "margin": 0.2,
            "source": "test"}
    tools_evidence = {"a": [0.0, 0.9], "b": [0.0, 0.6], **{f"x{i}": [0.0, 0.0] for i in range(12)}}
    large = tools.baseline_selections({"tools": tools_evidence, "threshold_rule": rule}, gold_count=1)
    assert large["embedder_threshold"] == ["a"]  # b passes the threshold, not the margin under a
    small = {"a": [0.0, 0.9], "b": [0.0, 0.6]}
    assert tools.baseline_selections({"tools": small, "threshold_rule": rule}, 1)["embedder_threshold"] == ["a", "b"]
