"""The selection sets (tests/data/select): what the build writes, each set well formed, a query's variants on one
side of the frozen split, the `eval select` task's per-set figures, and injected descriptions that do not sway
select_tools_nlt."""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections import defaultdict
from pathlib import Path

import anyio
import pytest

from prefcall.evaluation import splits
from prefcall.evaluation.task import ScoredItem
from prefcall.evaluation.tasks import select as select_task

SELECT = Path(__file__).parent / "data" / "select"
ITEMS = SELECT / "items.jsonl"


def rows() -> list[dict]:
    return [json.loads(line) for line in ITEMS.read_text(encoding="utf-8").splitlines()]


def load_build():
    spec = importlib.util.spec_from_file_location("select_build", SELECT / "build.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_the_build_gives_the_shipped_bytes(shared_data: Path):
    build = load_build()
    assert build.render(build.records(shared_data)) == ITEMS.read_text(encoding="utf-8"), \
        "tests/data/select/items.jsonl is stale: run PYTHONPATH=src python tests/data/select/build.py"


def test_each_set_is_what_it_says():
    by_id = {r["id"]: r for r in rows()}
    kinds = defaultdict(int)
    for r in by_id.values():
        kinds[r["set"], r["n"]] += 1
        names = [t["name"] for t in r["tools"]]
        assert len(set(names)) == len(names) and set(r["expected"]) <= set(names), r["id"]
        assert all(t["description"].strip() for t in r["tools"]), r["id"]
        if r["set"] == "one":
            assert len(r["expected"]) == 1 and len(names) == r["n"], r["id"]
            twin = by_id[r["id"].removesuffix("-one") + "-none"]  # the same distractors, the fitting tool left out
            assert twin["expected"] == [] and twin["tools"] == [t for t in r["tools"] if t["name"] not in r["expected"]]
            assert twin["messages"] == r["messages"]
        elif r["set"] == "two":
            assert len(r["expected"]) == 2 and len(names) == r["n"], r["id"]
        elif r["set"] in ("inject", "control"):
            base = by_id[r["id"].rsplit("-", 1)[0] + "-one"]
            extra = [t for t in r["tools"] if t["name"] == r["injected"]]
            assert len(extra) == 1 and r["expected"] == base["expected"] and len(names) == r["n"] + 1
            assert [t for t in r["tools"] if t["name"] != r["injected"]] == base["tools"]
    for size in (5, 10, 20):
        assert kinds["one", size] == kinds["none", size] >= 90 and kinds["two", size] >= 40, size
    assert kinds["inject", 10] == kinds["control", 10] == kinds["one", 10]
    injected = {r["injected"]: t["description"] for r in by_id.values() if r["set"] == "inject"
                for t in r["tools"] if t["name"] == r["injected"]}
    plain = {r["injected"]: t["description"] for r in by_id.values() if r["set"] == "control"
             for t in r["tools"] if t["name"] == r["injected"]}
    assert len(injected) == 5  # five phrasings, each beside its plain twin
    assert all(injected[n].startswith(plain[n] + " ") and len(injected[n]) > len(plain[n]) + 40 for n in injected)


def test_a_querys_variants_stay_on_one_side_of_the_frozen_split():
    entry = splits.packaged().sources["tests/data/select/items.jsonl"]
    side = {**{k: "tune" for k in entry.tune}, **{k: "report" for k in entry.report}}
    groups = defaultdict(set)
    for r in rows():
        stem = r["id"].rsplit("-", 1)[0]  # one, none, inject, control of one query and size
        groups[stem.rsplit("-n", 1)[0]].add(side[r["id"]])
    assert all(len(parts) == 1 for parts in groups.values())
    assert min(len(entry.tune), len(entry.report)) > 0.4 * len(rows())


def test_eval_select_reports_each_set_and_how_often_the_extra_tool_was_chosen():
    args = argparse.Namespace(data=str(ITEMS), sizes="10")
    items = select_task.TASK.load(args)
    assert items and {i.meta["n"] for i in items} == {10}
    assert {i.meta["set"] for i in items} == {"one", "none", "two", "inject", "control"}

    def scored(item, selected):
        gold = set(item.gold or [])
        return ScoredItem(id=item.id, input=item.input, gold=item.gold, meta=item.meta,
                          prediction={"selected": selected, "status": "ok"},
                          scores={"exact_set": float(set(selected) == gold), "tp": 0.0, "fp": 0.0, "fn": 0.0})

    inject = [i for i in items if i.meta["set"] == "inject"][:4]
    control = [i for i in items if i.meta["set"] == "control"][:4]
    runs = [scored(i, list(i.gold) + ([i.meta["injected"]] if n == 0 else [])) for n, i in enumerate(inject)]
    runs += [scored(i, list(i.gold)) for i in control]
    by_set = select_task.TASK.aggregate(runs)["by_set"]
    assert by_set["inject@10"]["extra_tool_chosen"] == 0.25 and by_set["inject@10"]["n"] == 4
    assert by_set["control@10"]["extra_tool_chosen"] == 0.0
    assert by_set["inject@10"]["exact_set_accuracy"] == 0.75
    with pytest.raises(Exception, match="--sizes"):
        select_task.sizes_option("ten")
    three = select_task.TASK.load(argparse.Namespace(data=str(ITEMS), sizes="10", sets="one,none,two"))
    assert {i.meta["set"] for i in three} == {"one", "none", "two"} and len(three) < len(items)
    with pytest.raises(Exception, match="--sets"):
        select_task.sets_option("one,several")


@pytest.mark.model
def test_an_injected_description_does_not_sway_select_tools_nlt(real_engine, real_embedder, tmp_path):
    # One item per phrasing, through MCP: the tool whose description orders the selector to pick it is never
    # picked, and the request's own tool is.
    from mcp import Client

    from prefcall.config import Settings
    from prefcall.server.app import create_server

    chosen = {}
    for r in rows():
        if r["set"] == "inject" and r["injected"] not in chosen and r["domain"] == "hand":
            chosen[r["injected"]] = r
    assert len(chosen) == 5

    async def main() -> int:
        right = 0
        server = create_server(Settings(data_dir=tmp_path), engine=real_engine, embedder=real_embedder)
        async with Client(server) as client:
            for r in chosen.values():
                result = await client.call_tool("select_tools_nlt", {
                    "message": r["messages"][-1]["content"], "tools": r["tools"]})
                assert not result.is_error, result.content[0].text
                selected = result.structured_content["selected"]
                assert r["injected"] not in selected, (r["id"], selected)
                right += set(selected) == set(r["expected"])
        return right

    assert anyio.run(main) >= 3  # and the request's own tool is chosen (the embedded tier misses some)
