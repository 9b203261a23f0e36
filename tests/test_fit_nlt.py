"""`prefcall fit --nlt` (prefcall.evaluation.fit_nlt): the NLT rule fitted on both NLT sets' tune parts only."""

from __future__ import annotations

from prefcall.engine.fake import FakeEmbedder, FakeEngine
from prefcall.evaluation import fit_nlt, splits
from prefcall.strategies.nlt_models import DecisionRule


def test_the_fit_reads_the_tune_parts_of_both_sets_and_never_a_report_item():
    items = fit_nlt.nlt_tune_items()
    by_file: dict[str, set[str]] = {}
    for relative, item in items:
        by_file.setdefault(relative, set()).add(item.id)
    assert set(by_file) == set(fit_nlt.NLT_FILES)
    for relative, ids in by_file.items():
        entry = splits.source_of(fit_nlt.checkout_file(relative))[1]
        assert ids == set(entry.tune) and not ids & set(entry.report)


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
