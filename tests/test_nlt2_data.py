"""The second NLT set (tests/data/nlt2): what its build writes, well formed, the stated mix of no-tool and
multi-tool items, split both ways in the frozen split."""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

from prefcall.errors import ConfigError
from prefcall.evaluation import splits
from prefcall.evaluation.runner import select_split
from prefcall.evaluation.tasks import nlt as nlt_task
from prefcall.evaluation.tasks import tools

NLT2 = Path(__file__).parent / "data" / "nlt2"
ITEMS = NLT2 / "items.jsonl"


def rows() -> list[dict]:
    return [json.loads(line) for line in ITEMS.read_text(encoding="utf-8").splitlines()]


def load_build():
    spec = importlib.util.spec_from_file_location("nlt2_build", NLT2 / "build.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_the_build_gives_the_shipped_bytes(shared_data: Path, tmp_path: Path):
    build = load_build()
    assert build.render(build.records(shared_data)) == ITEMS.read_text(encoding="utf-8"), \
        "tests/data/nlt2/items.jsonl is stale: run PYTHONPATH=src python tests/data/nlt2/build.py"
    out = tmp_path / "items.jsonl"  # and the command writes the same bytes
    assert build.main(["--data-dir", str(shared_data), "--out", str(out)]) == 0
    assert out.read_bytes() == ITEMS.read_bytes()
    assert build.main(["--data-dir", str(shared_data), "--out", str(out), "--check"]) == 0


def test_items_are_well_formed():
    data = rows()
    ids = [r["id"] for r in data]
    assert len(set(ids)) == len(ids)
    assert 300 <= len(data) <= 500
    for r in data:
        assert set(r) == {"id", "domain", "context", "tools", "messages", "expected", "source"}, r["id"]
        names = [t["name"] for t in r["tools"]]
        assert len(set(names)) == len(names) and all(t["description"].strip() for t in r["tools"]), r["id"]
        assert set(r["expected"]) <= set(names) and len(set(r["expected"])) == len(r["expected"]), r["id"]
        assert r["messages"] and r["messages"][-1]["role"] == "user", r["id"]
        assert all(m["content"].strip() for m in r["messages"]), r["id"]
        assert r["context"].strip(), r["id"]
    items = tools.load_items(ITEMS)  # what `prefcall eval nlt --data` reads
    assert len(items) == len(data) and all(i.input["text"].strip() for i in items)


def test_the_mix_is_as_stated():
    data = rows()
    kinds = Counter(min(len(r["expected"]), 2) for r in data)
    assert kinds[2] / len(data) >= 0.25  # two to four tools
    assert kinds[0] / len(data) >= 0.15  # no tool
    assert max(len(r["expected"]) for r in data) == 4
    by_domain = Counter(r["domain"] for r in data)
    assert {"bfcl", "sgd", "nlsi", "ide", "home", "telecom"} == set(by_domain)
    for domain in ("ide", "home", "telecom"):  # hand-written: at least 30 items each, with both kinds
        own = [r for r in data if r["domain"] == domain]
        assert len(own) >= 30 and all(not r["source"] for r in own)
        assert sum(not r["expected"] for r in own) >= 8 and sum(len(r["expected"]) >= 2 for r in own) >= 10
    for domain in ("bfcl", "sgd", "nlsi"):  # converted: each names the shared items it came from
        own = [r for r in data if r["domain"] == domain]
        assert all(r["source"] for r in own)
        assert any(not r["expected"] for r in own) and any(len(r["expected"]) >= 2 for r in own)


def test_the_frozen_split_covers_it_both_ways(shared_data: Path):
    entry = splits.packaged().sources["tests/data/nlt2/items.jsonl"]
    assert entry.sha256 == splits.file_sha256(ITEMS), \
        "rebuild: prefcall split build --out src/prefcall/data/splits.json"
    part = {k: p for p in ("tune", "report", "retired") for k in getattr(entry, p)}
    data = rows()
    assert set(part) == {r["id"] for r in data}
    seen = Counter((part[r["id"]], bool(r["source"]), min(len(r["expected"]), 2)) for r in data)
    for side in ("tune", "report"):  # converted and hand-written items, of every kind, on both sides
        for converted in (True, False):
            for kind in (0, 1, 2):
                assert seen[side, converted, kind] >= 5, (side, converted, kind)
    # A converted item is on the side its shared items are on: a fit on nlt2's tune part reads no reported item.
    shipped = splits.packaged().sources
    for r in data:
        for ref in r["source"]:
            name, _, key = ref.rpartition(":")
            other = "tune" if key in shipped[name].tune else "report" if key in shipped[name].report else "retired"
            assert other == part[r["id"]] or part[r["id"]] == "retired", (r["id"], ref)


def test_nlt_task_reads_it_with_the_split():
    for name, expected in (("tune", "tune"), ("dev", "tune"), ("report", "report")):
        args = argparse.Namespace(data=str(ITEMS), split=name, limit=None)
        kept, selection = select_split(nlt_task.TASK, args, nlt_task.TASK.load(args))
        assert selection.part == expected and len(kept) == selection.sources["tests/data/nlt2/items.jsonl"] > 100
    with pytest.raises(ConfigError, match="either --data"):  # --split with a file outside the split: still an error
        nlt_task.TASK.load(argparse.Namespace(data="x.jsonl", split="report"))
