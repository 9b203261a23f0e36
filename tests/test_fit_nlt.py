"""`prefcall fit --nlt` (prefcall.evaluation.fit_nlt): the NLT rule fitted on both NLT sets' tune parts only."""

from __future__ import annotations

import json
import math
import re

from prefcall.engine.fake import FakeEmbedder, FakeEngine
from prefcall.evaluation import fit_nlt, splits
from prefcall.strategies.nlt_models import DecisionRule


def test_the_fit_reads_the_tune_parts_of_both_sets_and_never_a_report_item():
    items = fit_nlt.nlt_tune_items()
    by_file: dict[str, set[str]] = {}
    for relative, item in items:
        by_file.setdefault(relative, set()).add(item.id)
    assert set(by_file) == set(fit_nlt.NLT_FILES) == {"tests/data/nlt/dev.jsonl", "tests/data/nlt2/items.jsonl"}
    for relative, ids in by_file.items():
        entry = splits.source_of(fit_nlt.checkout_file(relative))[1]
        assert ids == set(entry.tune) and not ids & set(entry.report)
    # asked for, the selection sets: their tune part's one, none and two of at most ten tools (not the injected
    # ones, not the large lists), never a report item
    chosen = fit_nlt.nlt_tune_items(("select",))
    select = {item.id for _, item in chosen}
    entry = splits.source_of(fit_nlt.checkout_file("tests/data/select/items.jsonl"))[1]
    assert select <= set(entry.tune) and not select & set(entry.report)
    assert select and all(i.rsplit("-", 1)[1] in ("one", "none", "two") for i in select)
    assert all(int(re.search(r"-n(\d+)-", i).group(1)) <= 10 for i in select)


def test_the_fit_takes_the_best_sentence_cosine_where_it_fits_the_tune_items_better():
    # Two tools, each matched by one sentence of a two-part request: the whole request's cosine is lukewarm for
    # both (0.5 against 0.45 for the tool that does not fit), each sentence's best is clear (0.9 against 0.3).
    whole = [({"a": (None, 0.0, 0.5), "b": (None, 0.0, 0.5), "c": (None, 0.0, 0.45)}, {"a", "b"}),
             ({"a": (None, 0.0, 0.45), "b": (None, 0.0, 0.5), "c": (None, 0.0, 0.5)}, {"b"})]
    sentence = [({"a": (None, 0.0, 0.9), "b": (None, 0.0, 0.9), "c": (None, 0.0, 0.3)}, {"a", "b"}),
                ({"a": (None, 0.0, 0.3), "b": (None, 0.0, 0.9), "c": (None, 0.0, 0.3)}, {"b"})]
    fitted = fit_nlt.fit(whole, by_sentence=(sentence, []))
    assert fitted["embedder_only"][0].sentence_cosine and fitted["embedder_only"][1] == 1.0
    assert not fit_nlt.fit(whole)["embedder_only"][0].sentence_cosine
    # a model whose fit gave it no weight takes the new rule without the model, its earlier fit named
    earlier = {"gguf-sha256:m|e": {"model": "m", "model_weight": 0.0, "lexical_weight": 0.25, "fit": {"command": "x"}},
               "gguf-sha256:n|e": {"model": "n", "model_weight": 0.5, "fit": {"command": "y"}}}
    written = fit_nlt.rules_file(earlier, fitted, None, "none", "e", {"command": "now"})
    assert written["gguf-sha256:m|e"]["sentence_cosine"] and written["gguf-sha256:m|e"]["fit"] == {"command": "now"}
    assert written["gguf-sha256:m|e"]["model_fit"]["fit"] == {"command": "x"}
    assert written["gguf-sha256:n|e"] == earlier["gguf-sha256:n|e"]  # a model that earned its weight keeps its rule


def test_collect_records_every_kind_of_evidence_and_the_fit_gives_both_rules():
    items = fit_nlt.nlt_tune_items()[:6]
    examples = fit_nlt.collect(FakeEngine(), FakeEmbedder(), items)
    assert len(examples) == 6
    assert all(m is not None and c is not None for ev, _ in examples for m, _, c in ev.values())
    fitted = fit_nlt.fit(examples)
    assert fitted["without_model"][0].model_weight == 0.0
    assert fitted["with_model"][1] >= fitted["without_model"][1]  # more evidence never fits worse in-sample


def test_a_rule_that_calls_the_model_ships_only_when_it_earns_the_margin():
    with_model = DecisionRule(model_weight=0.5, lexical_weight=0.25, threshold=1.0, source="a")
    without = DecisionRule(model_weight=0.0, lexical_weight=0.25, embedding_weight=4.0, threshold=1.5, source="b")
    assert fit_nlt.chosen({"with_model": (with_model, 0.60), "without_model": (without, 0.59)}) is without
    assert fit_nlt.chosen({"with_model": (with_model, 0.62), "without_model": (without, 0.59)}) is with_model
    written = fit_nlt.rules_file({"_about": "x"}, {"with_model": (with_model, 0.60), "without_model": (without, 0.59)},
                                 "gguf-sha256:abc", "m", "all-MiniLM-L6-v2", {"command": "c"})
    assert written["_about"] == "x" and written["*|all-MiniLM-L6-v2"]["embedding_weight"] == 4.0
    assert written["gguf-sha256:abc|all-MiniLM-L6-v2"]["model_weight"] == 0.0
    assert written["gguf-sha256:abc|all-MiniLM-L6-v2"]["fit"] == {"command": "c"}
    entry = written["*|all-MiniLM-L6-v2"]  # what rule_for reads back: the rule's own fields
    assert DecisionRule(**{k: v for k, v in entry.items() if k in DecisionRule.model_fields}) == without
    # A fit with a model writes that model's rule alone: the rules without a model stay as they were shipped.
    shipped = {"*|all-MiniLM-L6-v2": {"threshold": 9.0}, "baseline|all-MiniLM-L6-v2": {"threshold": 8.0}}
    mine = fit_nlt.rules_file(shipped, {"with_model": (with_model, 0.70), "without_model": (without, 0.59),
                                        "embedder_only": (without, 0.5)},
                              "gguf-sha256:abc", "m", "all-MiniLM-L6-v2", {"command": "c"}, model_only=True)
    assert {k: v for k, v in mine.items() if k != "gguf-sha256:abc|all-MiniLM-L6-v2"} == shipped
    assert mine["gguf-sha256:abc|all-MiniLM-L6-v2"]["model_weight"] == 0.5


def test_without_a_model_the_fit_gives_the_rule_for_any_model_and_the_embedder_baseline():
    items = fit_nlt.nlt_tune_items()[:8]
    examples = fit_nlt.collect(None, FakeEmbedder(), items)
    assert all(m is None and c is not None for ev, _ in examples for m, _, c in ev.values())
    fitted = fit_nlt.fit(examples)
    assert set(fitted) == {"without_model", "embedder_only"}
    baseline = fitted["embedder_only"][0]
    assert baseline.model_weight == 0.0 and baseline.lexical_weight == 0.0 and baseline.embedding_weight > 0
    assert fit_nlt.chosen(fitted) is fitted["without_model"][0]
    earlier = {"*|e": {**fitted["without_model"][0].model_dump(), "fit": {"command": "the first fit"}}}
    written = fit_nlt.rules_file(earlier, fitted, None, "none", "e", {"command": "again"})
    assert written["*|e"]["fit"] == {"command": "the first fit"}  # the same rule again: its provenance stays
    assert written["baseline|e"]["fit"] == {"command": "again"} and written["baseline|e"]["lexical_weight"] == 0.0


def test_the_shipped_embedder_baseline_is_read_back_for_its_embedder_only():
    from prefcall.strategies.nlt import baseline_rule

    class MiniLM(FakeEmbedder):
        @property
        def name(self) -> str:
            return "all-MiniLM-L6-v2"

    rule = baseline_rule(MiniLM())
    assert rule is not None and rule.model_weight == 0.0 and rule.lexical_weight == 0.0 and rule.embedding_weight > 0
    assert baseline_rule(FakeEmbedder()) is None and baseline_rule(None) is None


def test_large_list_terms_raise_the_threshold_with_the_list_and_keep_tools_near_the_best():
    rule = DecisionRule(model_weight=0.0, lexical_weight=0.0, embedding_weight=1.0, threshold=0.5, size_slope=1.0,
                        margin=0.3, source="t")
    assert rule.threshold_for(4) == rule.threshold_for(10) == 0.5
    assert abs(rule.threshold_for(100) - (0.5 + math.log(10))) < 1e-9
    small = {"a": 0.9, "b": 0.7, "c": 0.55}
    assert rule.selects(small) == {"a", "b", "c"}  # ten tools or fewer: decided as the rule was fitted
    large = {**small, **{f"x{i}": 0.0 for i in range(20)}}
    flat = rule.model_copy(update={"size_slope": 0.0})
    assert flat.selects(large) == {"a", "b"}  # c passes the threshold, not the margin
    assert rule.selects(large) == set()  # 23 tools: the threshold is 0.5 + ln(2.3) = 1.33, over every score
    assert DecisionRule(threshold=0.5, source="t").selects(large) == {"a", "b", "c"}


def test_the_size_terms_are_fitted_on_lists_of_every_size_and_left_off_when_they_do_not_help():
    from prefcall.strategies.nlt import fit_size_terms

    rule = DecisionRule(model_weight=0.0, lexical_weight=0.0, embedding_weight=1.0, threshold=0.5, source="t")
    small = [({"a": (None, 0.0, 0.9), "b": (None, 0.0, 0.2)}, {"a"})] * 3
    fitted, accuracy = fit_size_terms(small, rule)
    assert (fitted.size_slope, fitted.margin) == (0.0, None) and accuracy == 1.0  # nothing to gain: left as it was
    # A 200-tool list where distractors pass the ten-tool threshold by chance, far under the right tool.
    large = [({"a": (None, 0.0, 2.0), **{f"x{i}": (None, 0.0, 0.6) for i in range(199)}}, {"a"})] * 3
    fitted, accuracy = fit_size_terms([*small, *large], rule)
    assert accuracy == 1.0 and (fitted.size_slope > 0 or fitted.margin is not None)
    assert (fitted.threshold, fitted.embedding_weight) == (0.5, 1.0)  # the weights stay


def test_the_large_list_examples_read_the_tune_requests_only():
    from prefcall.evaluation import fit_shortlist

    examples = fit_nlt.large_list_examples(FakeEmbedder())
    _, _, requests = fit_shortlist.load()
    tune = [r for r in requests if fit_shortlist.split_side(r["id"], "tune")]
    assert 0 < len(tune) < len(requests) and len(examples) == len(tune) * len(fit_nlt.LIST_SIZES)
    assert sorted({len(evidence) for evidence, _, _ in examples}) == list(fit_nlt.LIST_SIZES)
    assert all(len(evidence) == size for evidence, _, size in examples)  # without the model: every tool's


def test_the_evidence_cache_resumes_without_asking_the_model_again(tmp_path):
    items = fit_nlt.nlt_tune_items()[:4]
    cache = tmp_path / "evidence.jsonl"
    first = fit_nlt.collect(FakeEngine(), FakeEmbedder(), items[:2], cache=cache)
    with cache.open("a", encoding="utf-8") as handle:
        handle.write('{"file": "torn')  # an interrupted write is skipped, never a failed fit

    class Refusing(FakeEngine):
        def score_candidates(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
            raise AssertionError("a cached item asked the model again")

        score_batch = score_candidates

    again = fit_nlt.collect(Refusing(), FakeEmbedder(), items[:2], cache=cache)
    assert again == first
    both = fit_nlt.collect(FakeEngine(), FakeEmbedder(), items, cache=cache)  # the new items are asked and kept
    assert both[:2] == first and len(fit_nlt.read_evidence(cache)) == 4


def test_the_model_rule_takes_the_best_sentence_cosine_where_it_fits_better():
    whole = [({"a": (1.0, 0.0, 0.5), "b": (1.0, 0.0, 0.5), "c": (-1.0, 0.0, 0.45)}, {"a", "b"}),
             ({"a": (1.0, 0.0, 0.5), "b": (1.0, 0.0, 0.5), "c": (-1.0, 0.0, 0.5)}, {"b"})]  # a, b alike
    sentence = [({"a": (None, 0.0, 0.9), "b": (None, 0.0, 0.9), "c": (None, 0.0, 0.3)}, {"a", "b"}),
                ({"a": (None, 0.0, 0.3), "b": (None, 0.0, 0.9), "c": (None, 0.0, 0.3)}, {"b"})]
    merged = fit_nlt.with_sentence_cosine(whole, sentence)
    assert merged[1][0]["a"] == (1.0, 0.0, 0.3)  # the model's log-odds kept, the sentence's cosine taken
    fitted = fit_nlt.fit(whole, by_sentence=(sentence, []))
    assert fitted["with_model"][0].sentence_cosine and fitted["with_model"][1] == 1.0
    assert not fit_nlt.fit(whole)["with_model"][0].sentence_cosine


def test_a_shortlisted_list_is_decided_by_the_whole_list_size():
    rule = DecisionRule(model_weight=1.0, threshold=0.5, size_slope=1.0, margin=None, source="t")
    scored = {f"t{i}": 1.0 for i in range(16)}  # the 16 tools a shortlist let the model be asked about
    assert rule.selects(scored) == set(scored)  # 16 tools: 0.5 + ln(1.6) = 0.97 < 1.0
    assert rule.selects(scored, size=200) == set()  # of 200: 0.5 + ln(20) = 3.5


def test_the_model_rule_gets_large_list_terms_from_its_own_answers_and_the_fit_resumes(tmp_path, monkeypatch, capsys):
    from model_files import FileEngine

    from prefcall import cli
    from prefcall.storage import fits
    from prefcall.strategies.shortlist import rule_for as shortlist_rule

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF fake weights")
    monkeypatch.setattr("prefcall.engine.load_embedder", lambda settings: FakeEmbedder())
    monkeypatch.setattr("prefcall.engine.load_engine", lambda settings: FileEngine(model))
    monkeypatch.setenv("PREFCALL_DATA_DIR", str(tmp_path / "data"))
    run, written = tmp_path / "run", tmp_path / "nlt_rules.json"
    assert cli.main(["fit", "--nlt", "--large-lists", "--out", str(run), "--nlt-out", str(written)]) == 0
    printed = json.loads(capsys.readouterr().out)
    tune = fit_nlt.tune_large_requests()
    assert printed["lists"] == len(tune) * len(fit_nlt.LIST_SIZES)
    accuracy = printed["exact_set_in_sample"]
    assert all(set(accuracy[k]) == {str(n) for n in fit_nlt.LIST_SIZES} for k in fit_nlt.WAYS)
    # ten tools are decided as before; on the large lists the way kept can only gain over the rule without terms
    assert accuracy["size_terms"]["10"] == accuracy["own_rule"]["10"] == accuracy["none"]["10"]
    kept = accuracy[accuracy["kept"]]
    assert kept["50"] + kept["200"] >= accuracy["none"]["50"] + accuracy["none"]["200"]
    assert (printed["rule"]["large"] is not None) == (accuracy["kept"] == "own_rule")
    # the model was asked as select_tools asks it: of a large list only the shortlist, each tool with its log-odds
    cache = next(run.glob("nlt-large-lists-*.jsonl"))
    rows = [json.loads(line) for line in cache.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == printed["lists"] and {r["size"] for r in rows} == set(fit_nlt.LIST_SIZES)
    size = shortlist_rule(FakeEmbedder()).size
    assert all(len(r["evidence"]) == 10 if r["size"] == 10 else len(r["evidence"]) <= size for r in rows)
    assert all(v[0] is not None for r in rows for v in r["evidence"].values())
    rules = json.loads(written.read_text(encoding="utf-8"))
    entry = rules[f"{fits.file_fingerprint(model, tmp_path / 'data')}|{FakeEmbedder().name}"]
    assert entry["large_list_fit"]["lists"] == printed["lists"] and entry["size_slope"] == printed["rule"]["size_slope"]
    assert entry["large"] == printed["rule"]["large"]
    said = {"none": "no terms", "size_terms": "size terms", "own_rule": "its own rule"}[accuracy["kept"]]
    assert f"large lists: {said}" in entry["source"]  # the source says which way was kept
    assert "*|all-MiniLM-L6-v2" in rules  # the other rules are kept

    class Refusing(FileEngine):
        def score_candidates(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
            raise AssertionError("a cached list asked the model again")

        score_batch = score_candidates

    monkeypatch.setattr("prefcall.engine.load_engine", lambda settings: Refusing(model))
    assert cli.main(["fit", "--nlt", "--large-lists", "--out", str(run)]) == 0
    assert json.loads(capsys.readouterr().out)["rule"] == printed["rule"]


def test_large_lists_without_the_model_refit_the_rule_every_model_without_its_own_decides_by(tmp_path, monkeypatch,
                                                                                              capsys):
    from prefcall import cli
    from prefcall.retrieval.vectors import TOOL_VECTORS

    class MiniLM(FakeEmbedder):
        @property
        def name(self) -> str:
            return "all-MiniLM-L6-v2"

    monkeypatch.setattr("prefcall.engine.load_embedder", lambda settings: MiniLM())
    monkeypatch.setenv("PREFCALL_DATA_DIR", str(tmp_path / "data"))
    written = tmp_path / "nlt_rules.json"
    TOOL_VECTORS.clear()  # tool vectors are cached by the embedder's name, which this fake borrows
    try:
        assert cli.main(["fit", "--nlt", "--large-lists", "--embedder-only", "--nlt-out", str(written)]) == 0
    finally:
        TOOL_VECTORS.clear()
    printed = json.loads(capsys.readouterr().out)
    shipped = json.loads((fit_nlt.checkout_file("src/prefcall/data/nlt_rules.json")).read_text(encoding="utf-8"))
    rules = json.loads(written.read_text(encoding="utf-8"))
    # the rule for any model, and the models' entries that decide by it; never a rule that weighs the model
    assert "*|all-MiniLM-L6-v2" in printed["entries"] and all(not rules[k]["model_weight"] for k in printed["entries"])
    weighing = [k for k, v in shipped.items() if isinstance(v, dict) and v.get("model_weight")]
    assert weighing and all(rules[k] == shipped[k] for k in weighing) and "baseline|all-MiniLM-L6-v2" not in \
        printed["entries"]
    for key in printed["entries"]:  # the ten-tool weights stay; the large-list part is the fit's
        kept = {f: rules[key][f] for f in ("model_weight", "lexical_weight", "embedding_weight", "threshold")}
        assert kept == {f: shipped[key][f] for f in kept} and rules[key]["large"] == printed["rule"]["large"]
        assert rules[key]["large_list_fit"]["lists"] == printed["lists"]


def test_a_rule_of_its_own_decides_large_lists_and_does_not_ask_the_model_when_it_gives_it_no_weight(monkeypatch):
    from prefcall.schemas.model import Function
    from prefcall.strategies import nlt

    own = DecisionRule(model_weight=0.0, lexical_weight=1.0, threshold=0.5, source="large")
    rule = DecisionRule(model_weight=1.0, threshold=0.0, large=own, source="t")
    assert rule.for_size(10) is rule and rule.for_size(33) is own and own.for_size(200) is own
    asked: list[int] = []
    ask = nlt.tool_yes_logodds
    monkeypatch.setattr(nlt, "tool_yes_logodds", lambda engine, specs, *a, **k: asked.append(len(specs))
                        or ask(engine, specs, *a, **k))
    tools = [Function(name=f"tool_{i}", description=f"does thing number {i}") for i in range(40)]
    tools.append(Function(name="get_weather", description="the weather forecast for a city"))
    large = nlt.select_tools(FakeEngine(), "what is the weather forecast in Paris", tools, rule=rule)
    assert asked == [] and large.rule.source == "large" and large.selected == ["get_weather"]
    nlt.select_tools(FakeEngine(), "what is the weather forecast in Paris", tools[-10:], rule=rule)
    assert asked and asked[0] == 10  # ten tools: the rule itself, which weighs the model


def test_the_large_list_rule_drops_the_model_where_its_answers_on_large_lists_do_not_carry():
    rule = DecisionRule(model_weight=1.0, lexical_weight=0.0, embedding_weight=0.0, threshold=0.0, source="t")
    lists = []
    for i in range(12):  # the model says yes to a wrong tool of the shortlist; the cosine ranks the right one first
        right, wrong = f"r{i}", f"w{i}"
        evidence = {right: (-1.0, 0.0, 0.9), wrong: (3.0, 0.0, 0.2),
                    **{f"x{j}": (None, 0.0, 0.1) for j in range(48)}}
        lists.append(({right: (2.0, 0.0, 0.9), wrong: (-2.0, 0.0, 0.2)}, {right}, 10))
        lists.append((evidence, {right}, 50))
    fitted, accuracy = fit_nlt.fit_large_rule(rule, lists)
    assert accuracy == 1.0 and fitted.large is not None and fitted.large.model_weight == 0.0
    assert fitted.model_weight == 1.0 and fitted.threshold == 0.0  # ten tools: decided as before
    assert fit_nlt.request_groups(lists) == [i // 2 for i in range(24)]
    chosen, report = fit_nlt.for_large_lists(rule, [], lists)
    assert report["kept"] == "own_rule" and chosen.large == fitted.large
    held = report["held_out_large_lists"]  # chosen on requests each fold's fit did not read
    assert held["own_rule"] == 1.0 and held["size_terms"] < 1.0 and held["lists"] == 12
    test = next(v for k, v in held.items() if k.startswith("own_rule_against"))
    assert test["kept"] and test["wins"] - test["losses"] >= 2 * math.sqrt(test["wins"] + test["losses"])
    assert report["own_rule"][50] == 1.0 and report["none"][50] == 0.0
    assert report["own_rule"][10] == report["none"][10] == 1.0


def test_a_rule_of_its_own_that_wins_only_in_sample_is_not_kept(monkeypatch):
    rule = DecisionRule(model_weight=1.0, lexical_weight=0.0, embedding_weight=0.0, threshold=0.0, source="t")
    lists = []
    for i in range(12):  # the model says yes to a wrong tool of the shortlist; the cosine ranks the right one first
        lists.append(({"r": (2.0, 0.0, 0.9), "w": (-2.0, 0.0, 0.2)}, {"r"}, 10))
        lists.append(({"r": (-1.0, 0.0, 0.9), "w": (3.0, 0.0, 0.2), **{f"x{j}": (None, 0.0, 0.1) for j in range(48)}},
                      {"r"}, 50))
    chosen, report = fit_nlt.for_large_lists(rule, [], lists)
    assert report["own_rule"][50] == 1.0 and report["kept"] == "own_rule"
    # the same in-sample win, but held out the rule of its own wins no more often than chance: not kept
    held = {"none": [True, False] * 6, "size_terms": [True, False] * 6, "own_rule": [False, True] * 6}
    monkeypatch.setattr(fit_nlt, "held_out_large", lambda rule, lists, way: held[way])
    chosen, report = fit_nlt.for_large_lists(rule, [], lists)
    assert report["own_rule"][50] == 1.0 and report["kept"] == "none" and chosen.large is None
    assert (chosen.size_slope, chosen.margin) == (0.0, None)  # nor did the size terms: the rule as it was
    held = {"none": [True] * 4 + [False] * 8, "size_terms": [True] * 4 + [False] * 8,
            "own_rule": [True] * 7 + [False] * 5}  # 3 wins, none lost: 3 < 2 * sqrt(3)
    chosen, report = fit_nlt.for_large_lists(rule, [], lists)
    assert report["held_out_large_lists"]["own_rule_against_none"]["wins"] == 3 and report["kept"] == "none"
    held = {"none": [False] * 12, "size_terms": [True] * 12, "own_rule": [True] * 12}  # the terms are enough
    assert fit_nlt.for_large_lists(rule, [], lists)[1]["kept"] == "size_terms"
    held = {"none": [False] * 12, "size_terms": [False] * 12, "own_rule": [True] * 12}
    assert fit_nlt.for_large_lists(rule, [], lists)[1]["kept"] == "own_rule"


def test_a_rule_of_its_own_decides_only_lists_a_shortlist_would_cut():
    from prefcall.strategies.nlt_models import OWN_RULE_FROM
    from prefcall.strategies.shortlist import WHOLE_UP_TO

    own = DecisionRule(model_weight=0.0, embedding_weight=1.0, threshold=0.9, source="large")
    rule = DecisionRule(model_weight=0.0, embedding_weight=1.0, threshold=0.5, size_slope=0.1, large=own, source="t")
    assert OWN_RULE_FROM == WHOLE_UP_TO + 1
    assert rule.for_size(11) is rule and rule.for_size(WHOLE_UP_TO) is rule and rule.for_size(OWN_RULE_FROM) is own
    eleven = {"a": (None, 0.0, 0.7), **{f"x{i}": (None, 0.0, 0.0) for i in range(10)}}
    assert rule.decide(eleven, 11) == {"a"}  # the size terms: 0.5 + 0.1 ln 1.1 < 0.7
    assert rule.decide({**eleven, **{f"y{i}": (None, 0.0, 0.0) for i in range(40)}}, 51) == set()


def test_a_subset_keeps_every_kth_tune_item_of_each_set():
    whole = fit_nlt.nlt_tune_items(("nlt", "nlt2"))
    part = fit_nlt.nlt_tune_items(("nlt", "nlt2"), subset=5)
    assert [f for f, _ in part] == ["tests/data/nlt/dev.jsonl"] * 5 + ["tests/data/nlt2/items.jsonl"] * 5
    assert {(f, i.id) for f, i in part} <= {(f, i.id) for f, i in whole}
    assert len({i.id for f, i in part if f.endswith("nlt2/items.jsonl")}) == 5
