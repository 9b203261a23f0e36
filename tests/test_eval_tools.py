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
