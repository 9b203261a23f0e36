"""The frozen split (prefcall.evaluation.splits): built reproducibly, read by every report, no leak into NLSI's
demonstrations, held-out domains never tuned on."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from prefcall.cli import main
from prefcall.errors import ConfigError
from prefcall.evaluation import splits
from prefcall.evaluation.runner import run_eval
from prefcall.evaluation.task import EvalItem
from prefcall.evaluation.tasks.nlsi import TASK as NLSI
from prefcall.evaluation.tasks.nlsi import demo_pool

REPO = Path(__file__).resolve().parents[1]


def test_the_shipped_split_is_what_the_build_command_gives(shared_data: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["split", "build", "--data-dir", str(shared_data), "--repo", str(REPO), "--check"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_check_fails_when_a_source_changed(shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    changed = tmp_path / "shared"
    for path in shared_data.rglob("*"):
        if path.is_file():
            target = changed / path.relative_to(shared_data)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    rows = json.loads((changed / "nlsi" / "dev.json").read_text())
    (changed / "nlsi" / "dev.json").write_text(json.dumps(rows[:-1]))
    assert main(["split", "build", "--data-dir", str(changed), "--repo", str(REPO), "--check"]) == 1
    assert "differs" in capsys.readouterr().err


def test_parts_are_disjoint_and_cover_every_item(shared_data: Path):
    shipped = splits.packaged()
    assert len(shipped.sources) >= 10
    for name, entry in shipped.sources.items():
        tune, report, retired = set(entry.tune), set(entry.report), set(entry.retired)
        assert not (tune & report) and not (tune & retired) and not (report & retired), name
        assert len(tune) == len(entry.tune) and len(report) == len(entry.report), name
        file = splits.resolve(entry.path, shared_data, REPO)
        assert splits.file_sha256(file) == entry.sha256, name
        rows = splits._keys_and_domains(splits.RULES[entry.path], splits._records(file))
        assert {key for key, _ in rows} == tune | report | retired, name


def test_items_a_fit_already_read_are_never_reported():
    nlsi = splits.packaged().sources["nlsi/dev.json"]
    rows = json.loads((REPO.parent / "shared" / "data" / "nlsi" / "dev.json").read_text()) \
        if (REPO.parent / "shared").is_dir() else pytest.skip("no shared data")
    keys = splits.unique_ids(str(r["example_id"]) for r in rows)
    read = [k for i, k in enumerate(keys) if i < 50 or 100 <= i < 220 or i >= 300]  # inspected, gate, grounding
    assert not set(read) & set(nlsi.report)
    relevance_fit = [f"irrelevance_{i}" for i in range(50, 150)] + [f"simple_python_{i}" for i in range(50, 100)]
    reported = set(splits.packaged().sources["bfcl/BFCL_v4_irrelevance.json"].report) | set(
        splits.packaged().sources["bfcl/BFCL_v4_simple_python.json"].report)
    assert not set(relevance_fit) & reported
    ace = splits.packaged().sources["acebench/data_special_incomplete.json"]
    assert not {f"special_incomplete_{i}" for i in range(30, 50)} & set(ace.report)
    assert len(splits.packaged().sources["acebench/data_normal_preference.json"].report) == 50  # report-only source


def test_no_tuning_item_touches_a_held_out_domain(shared_data: Path):
    for entry in splits.packaged().sources.values():
        if not entry.held_out:
            continue
        rule = splits.RULES[entry.path]
        rows = dict(splits._keys_and_domains(rule, splits._records(splits.resolve(entry.path, shared_data, REPO))))
        assert not any(rows[k] & set(entry.held_out) for k in entry.tune), entry.path
        assert any(rows[k] & set(entry.held_out) for k in entry.report), entry.path  # the report holds them


def test_select_defaults_to_report_for_a_split_source_and_to_everything_otherwise(shared_data: Path, tmp_path: Path):
    data = shared_data / "bfcl" / "BFCL_v4_irrelevance.json"
    items = [EvalItem(id=f"irrelevance_{i}", input={}) for i in range(240)]
    kept, selection = splits.select(items, [data], None, lambda i: i.id)
    assert [i.id for i in kept] == [f"irrelevance_{i}" for i in range(150, 240)]
    assert selection.part == "report" and selection.sources == {"bfcl/BFCL_v4_irrelevance.json": 90}
    tune, _ = splits.select(items, [data], "tune", lambda i: i.id)
    assert len(tune) == 150
    everything, selection = splits.select(items, [data], "all", lambda i: i.id)
    assert len(everything) == 240 and "not a report figure" in selection.note
    window, selection = splits.select(items, [data], "tune", lambda i: i.id, offset=60, limit=30)
    assert [i.id for i in window] == [f"irrelevance_{i}" for i in range(60, 90)]  # tune items 61..90, counted
    assert selection.sources == {"bfcl/BFCL_v4_irrelevance.json": 30}
    assert [i.id for i in splits.select(items, [data], None, lambda i: i.id, offset=85)[0]] == [
        f"irrelevance_{i}" for i in range(235, 240)]

    fixture = tmp_path / "BFCL_v4_irrelevance.json"  # same name, other content: not the split source
    fixture.write_text(data.read_text().splitlines()[0] + "\n")
    kept, selection = splits.select(items[:1], [fixture], None, lambda i: i.id)
    assert len(kept) == 1 and selection.part == "all" and selection.unsplit == [str(fixture)]
    with pytest.raises(ConfigError, match="not a source of the split file"):
        splits.select(items[:1], [fixture], "report", lambda i: i.id)
    with pytest.raises(ConfigError, match="evaluate them apart"):
        splits.select(items, [data, fixture], None, lambda i: i.id)


def test_dst_splits_by_dialogue_so_a_dialogue_never_straddles(shared_data: Path):
    from prefcall.evaluation.tasks.dst import TASK as DST

    args = argparse.Namespace(data=str(shared_data / "sgd" / "dev_dialogues_001.json"), dialogues=None,
                              schema=None, sgd_schema=None)
    items = DST.load(args)
    report, _ = splits.select(items, DST.data_files(args), "report", DST.split_key)
    tune, _ = splits.select(items, DST.data_files(args), "tune", DST.split_key)
    report_dialogues = {i.meta["dialogue_id"] for i in report}
    assert report and tune and not report_dialogues & {i.meta["dialogue_id"] for i in tune}
    assert len(report) + len(tune) == len(items)  # nothing retired: no inspected dialogue is RideSharing


def test_nlsi_demonstrations_come_from_the_tune_split_only(shared_data: Path, tmp_path: Path):
    data = shared_data / "nlsi" / "dev.json"
    args = argparse.Namespace(data=str(data), demos=None)
    path, keep, line = demo_pool(args, data)
    entry = splits.packaged().sources["nlsi/dev.json"]
    assert path == data and keep == set(entry.tune) and "tune split of nlsi/dev.json" in line
    assert not keep & set(entry.report)
    # The evaluated file itself, when it is not a split source, is refused as a pool.
    own = tmp_path / "mine.json"
    own.write_text(json.dumps(json.loads(data.read_text())[:5]))
    with pytest.raises(ConfigError, match="is the evaluated file"):
        demo_pool(argparse.Namespace(data=str(own), demos=str(own)), own)


def test_an_nlsi_report_run_reads_only_tune_demonstrations(shared_data: Path, fake_engine, fake_embedder,
                                                           tmp_path: Path):
    """Through the runner: the report split is evaluated, the pipeline's store (demonstrations and the grounding's
    value memory) holds tune items only, and the report names the pool and the split."""
    from prefcall.evaluation.task import EvalContext
    from prefcall.strategies.pipeline_models import get_config

    data = shared_data / "nlsi" / "dev.json"
    args = argparse.Namespace(data=str(data), demos=None, config="full", mode=None, limit=2, out=str(tmp_path),
                              predictions=None, split=None, locations=None, gold_selection=False,
                              function_selection=None, catalogue=None, schema=None)
    entry = splits.packaged().sources["nlsi/dev.json"]
    pipe = NLSI.pipeline(EvalContext(args, engine=fake_engine, embedder=fake_embedder), get_config("full"))
    stored = {d.id for d in pipe.demos.all("nlsi")}
    assert stored == set(entry.tune)

    summary = run_eval(NLSI, args, engine=fake_engine, embedder=fake_embedder, stdout=io.StringIO(),
                       stderr=io.StringIO())
    assert summary["split"]["part"] == "report"
    assert summary["pools"]["demonstrations and value memories"].startswith("the tune split of nlsi/dev.json")
    results = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["id"] for r in results] == entry.report[:2]
    report = (tmp_path / "report.md").read_text()
    assert "report split of nlsi/dev.json: 2" in report and "tune split of nlsi/dev.json" in report
