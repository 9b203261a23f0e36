"""Large lists asked page by page (DecisionRule.paged; strategies.shortlist.pages and paged): the catalogue is cut
once into pages of similar tools, and the model is asked about the pages that hold the tools retrieval ranks best
for the request, each page listed as a small list is. A page is the same for every request, so a tool is asked
about beside the same neighbours, and the page's prompt prefix and content-free calibration are reused; a shortlist
of the best-ranked tools changes its listing with every request."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from prefcall.engine.fake import FakeEmbedder, FakeEngine
from prefcall.strategies import nlt
from prefcall.strategies.nlt_models import DecisionRule, ToolSpec
from prefcall.strategies.relevance import function_text
from prefcall.strategies.shortlist import PAGE_SEEDS, PAGE_SIZE, pages, paged

TOPICS = ["ferry harbour crossing", "thermostat heating room", "invoice billing payment", "parcel courier delivery",
          "playlist music song", "dentist appointment teeth"]
PAGED = DecisionRule(model_weight=1.0, threshold=0.0, paged=True, source="test")


def catalogue(n: int = 60) -> list[ToolSpec]:
    """n tools over six topics, the topics interleaved in catalogue order."""
    return [ToolSpec(name=f"{TOPICS[i % 6].split()[0]}_tool_{i:03d}",
                     description=f"Handles {TOPICS[i % 6]} requests, variant {i}.") for i in range(n)]


def texts(specs: list[ToolSpec]) -> list[str]:
    return [function_text(s.name, s.description) for s in specs]


def yes_for(word: str):
    """A model that says YES to the tool lines naming `word`."""
    def scorer(prompt: str, candidate: str) -> float:
        p = 0.9 if prompt.rsplit("\n", 1)[-1].startswith(word) else 0.1
        return math.log(p if candidate == " YES" else 1 - p)
    return scorer


def test_pages_cover_every_tool_once_and_gather_similar_tools():
    specs = catalogue()
    cut = pages(texts(specs), FakeEmbedder(), 10)
    assert sorted(i for page in cut for i in page) == list(range(60))
    assert all(len(page) <= 10 and page == sorted(page) for page in cut)
    # the interleaved topics come apart: each page holds one topic
    assert all(len({specs[i].name.split("_")[0] for i in page}) == 1 for page in cut)
    assert cut == pages(texts(specs), FakeEmbedder(), 10)  # the same cut every time


def test_a_request_is_asked_about_the_pages_of_its_best_tools_each_listed_alone():
    specs = catalogue()
    engine = FakeEngine(scorer=yes_for("ferry"))
    result = nlt.select_tools(engine, "book a ferry harbour crossing", specs, rule=PAGED, embedder=FakeEmbedder(),
                              calibrate=False)
    assert result.shortlist is not None and 1 <= result.shortlist.pages <= PAGE_SEEDS
    assert result.selected and all(name.startswith("ferry") for name in result.selected)
    asked = {d.name for d in result.decisions if d.shortlisted}
    page_sets = [{specs[i].name for i in page} for page in pages(texts(specs), FakeEmbedder(), PAGE_SIZE)]
    listed = []
    for call in engine.calls:  # every prompt lists one page, whole
        listed.append({s.name for s in specs if f"- {s.name}:" in call["prompt"]})
        assert listed[-1] in page_sets
    assert asked == set().union(*listed) and len(asked) == PAGE_SIZE * result.shortlist.pages  # whole pages only


def test_two_requests_on_the_same_page_share_its_prompt_and_calibration():
    specs = catalogue()
    engine = FakeEngine(scorer=yes_for("ferry"))
    cache = nlt.ContentFreeCache()
    first = nlt.select_tools(engine, "book a ferry harbour crossing", specs, rule=PAGED, embedder=FakeEmbedder(),
                             cache=cache)
    second = nlt.select_tools(engine, "a ferry crossing from the harbour, please", specs, rule=PAGED,
                              embedder=FakeEmbedder(), cache=cache)
    assert first.calibration_cached is False and second.calibration_cached is True
    assert set(second.content_free) <= set(first.content_free)


def test_a_page_whose_prompt_does_not_fit_falls_back_to_the_shortlist():
    specs = catalogue()
    found = paged(specs, texts(specs), "ferry crossing", FakeEmbedder(), 8, 2, fits=lambda page: len(page) < 3)
    assert found is None
    engine = FakeEngine(scorer=yes_for("ferry"), n_ctx=500)  # a page of ten tools outgrows it, a trimmed list not
    result = nlt.select_tools(engine, "book a ferry harbour crossing", specs, rule=PAGED, embedder=FakeEmbedder(),
                              calibrate=False)
    assert result.shortlist is not None and result.shortlist.pages == 0 and result.shortlist.applied


def test_a_list_that_is_listed_whole_is_never_paged():
    specs = catalogue(20)
    engine = FakeEngine(scorer=yes_for("ferry"))
    result = nlt.select_tools(engine, "book a ferry harbour crossing", specs, rule=PAGED, embedder=FakeEmbedder(),
                              calibrate=False)
    assert result.shortlist is not None and not result.shortlist.applied and result.shortlist.pages == 0


def test_the_page_geometry_is_the_one_asking_fewest_tools_that_keeps_the_shortlists_recall():
    from prefcall.evaluation.fit_shortlist import fit_pages

    curve = {(8, 1): (0.80, 8.0), (8, 3): (0.95, 20.0), (10, 2): (0.96, 17.0), (10, 4): (0.99, 30.0)}
    assert (fit_pages(curve, floor=0.95).size, fit_pages(curve, floor=0.95).seeds) == (10, 2)
    assert (fit_pages(curve, floor=0.98).size, fit_pages(curve, floor=0.98).seeds) == (10, 4)
    best = fit_pages(curve, floor=0.999)  # none reaches it: the best recall
    assert (best.size, best.seeds, best.recall) == (10, 4, 0.99) and best.grid["8/3"] == {"recall": 0.95, "asked": 20.0}


def test_the_page_geometry_is_read_from_the_embedders_shortlist_fit(monkeypatch):
    from prefcall.strategies import shortlist

    entry = {"size": 16, "dense_weight": 0.85, "pages": {"size": 12, "seeds": 2}, "source": {"command": "x"}}
    monkeypatch.setattr(shortlist, "_packaged_rules", lambda: {FakeEmbedder().name: entry})
    rule = shortlist.rule_for(FakeEmbedder())
    assert (rule.page_size, rule.page_seeds) == (12, 2)
    specs = catalogue()
    found = paged(specs, texts(specs), "ferry harbour crossing", FakeEmbedder())
    assert found is not None and found[1].size == 12 and found[1].pages <= 2 and len(found[1].ranked) == 2


@pytest.fixture
def model_file(tmp_path, monkeypatch) -> Path:
    """A model file the CLI loads as a fake engine (its fingerprint is the file's), with the fake embedder."""
    from model_files import FileEngine

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF fake weights")
    monkeypatch.setattr("prefcall.engine.load_embedder", lambda settings: FakeEmbedder())
    monkeypatch.setattr("prefcall.engine.load_engine", lambda settings: FileEngine(model))
    monkeypatch.setenv("PREFCALL_DATA_DIR", str(tmp_path / "data"))
    return model


def test_the_large_list_fit_asks_page_by_page_when_told_and_the_rule_keeps_it(tmp_path, model_file, capsys):
    from prefcall import cli
    from prefcall.evaluation import fit_nlt
    from prefcall.storage import fits

    model = model_file
    run, written = tmp_path / "run", tmp_path / "nlt_rules.json"
    assert cli.main(["fit", "--nlt", "--large-lists", "--paged", "--out", str(run), "--nlt-out", str(written)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["rule"]["paged"] is True and "page by page" in printed["data"]
    cache = next(run.glob("nlt-large-lists-*-paged-*.jsonl"))
    rows = [json.loads(line) for line in cache.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == len(fit_nlt.tune_large_requests()) * len(fit_nlt.LIST_SIZES)
    # ten tools are listed whole; a larger list is asked about whole pages of PAGE_SIZE tools
    assert all(len(r["evidence"]) == 10 if r["size"] == 10 else len(r["evidence"]) % PAGE_SIZE == 0 for r in rows)
    entry = json.loads(written.read_text(encoding="utf-8"))[f"{fits.file_fingerprint(model, tmp_path / 'data')}|"
                                                            f"{FakeEmbedder().name}"]
    assert entry["paged"] is True and DecisionRule.from_entry(entry).paged


def test_the_large_list_fit_weighs_page_geometries_on_the_models_answers_and_keeps_the_best(tmp_path, model_file,
                                                                                            capsys):
    from prefcall import cli

    run = tmp_path / "run"
    assert cli.main(["fit", "--nlt", "--large-lists", "--paged", "--pages", "8/2,12/3", "--out", str(run)]) == 0
    printed = json.loads(capsys.readouterr().out)
    weighed = printed["exact_set_in_sample"]["pages_weighed"]
    assert set(weighed) == {"8/2", "12/3"}
    kept = f"{printed['rule']['page_size']}/{printed['rule']['page_seeds']}"
    assert weighed[kept] == max(weighed.values())
    cached = {p.name.split("-pages")[1] for p in run.glob("nlt-large-lists-*-pages*.jsonl")}
    assert cached == {"8x2.jsonl", "12x3.jsonl"}
    assert cli.main(["fit", "--nlt", "--large-lists", "--paged", "--pages", "8/x", "--out", str(run)]) != 0


def test_a_large_lists_own_rule_is_asked_as_the_lists_it_was_fitted_on():
    from prefcall.evaluation import fit_nlt

    rule = PAGED.model_copy(update={"page_size": 12, "page_seeds": 2})
    lists = [({"a": (2.0, 1.0, 0.5), "b": (-2.0, 0.0, 0.1)}, {"a"}, 50), ({"a": (-1.0, 0.0, 0.1)}, set(), 200)]
    large = fit_nlt.fit_large_rule(rule, lists)[0].large
    assert large is not None and large.paged and (large.page_size, large.page_seeds) == (12, 2)
