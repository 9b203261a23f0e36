"""The generated corpus (prefcall.evaluation.corpus): reproducible, typed gold that its own catalogue accepts, every
example type on both sides of the split, held-out functions and styles never tuned on."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from prefcall.cli import main
from prefcall.evaluation import corpus, corpus_profile, splits
from prefcall.evaluation.metrics.calls import calls_from_any
from prefcall.schemas.importers import import_catalogue
from prefcall.schemas.validation import validate_call

ITEMS = corpus.CORPUS_DIR / "items.json"
CATALOGUE = corpus.CORPUS_DIR / "catalogue.json"


@pytest.fixture(scope="module")
def items() -> list[dict]:
    return json.loads(ITEMS.read_text(encoding="utf-8"))


def test_the_shipped_corpus_is_what_the_build_command_gives(capsys: pytest.CaptureFixture[str]):
    assert main(["corpus", "build", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_check_notices_a_changed_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]):
    copy = tmp_path / "corpus"
    copy.mkdir()
    (copy / "catalogue.json").write_bytes(CATALOGUE.read_bytes())
    (copy / "items.json").write_text(ITEMS.read_text(encoding="utf-8").replace("Portland", "Salem"))
    monkeypatch.setattr(corpus, "CORPUS_DIR", copy)
    assert main(["corpus", "build", "--check"]) == 1
    assert "items.json" in capsys.readouterr().err


def test_every_gold_call_is_valid_against_the_catalogue_with_its_types(items: list[dict]):
    catalogue = import_catalogue(CATALOGUE)
    assert len(catalogue.functions) == 16
    kinds: Counter[str] = Counter()
    for item in items:
        for call in calls_from_any(item["api_calls"]):
            function = catalogue.function(call.name)
            assert function is not None, call
            problems = validate_call(call, function, strict=True)
            assert not problems, (item["example_id"], call, problems)
            for argument, value in call.arguments.items():
                schema = function.properties[argument]
                kinds["enum" if "enum" in schema else schema["type"]] += 1
    # typed arguments, not strings only
    assert kinds["integer"] > 100 and kinds["boolean"] > 100 and kinds["enum"] > 200 and kinds["number"] > 20


def test_numbers_written_as_words_are_typed_numbers_in_the_gold(items: list[dict]):
    worded = [i for i in items if "b:number-words" in i["classes"]]
    assert len(worded) > 40
    item = next(i for i in worded if " three " in f" {i['user_utterance'].lower()} " and "=3" in " ".join(i["api_calls"]))
    assert '="three"' not in " ".join(item["api_calls"])


def test_every_example_type_is_on_both_sides_and_held_out_parts_only_report(items: list[dict]):
    entry = splits.packaged().sources["src/prefcall/data/corpus/items.json"]
    by_id = {i["example_id"]: i for i in items}
    tune = [by_id[k] for k in entry.tune]
    report = [by_id[k] for k in entry.report]
    assert len(tune) + len(report) == len(items)
    types = {i["example_type"] for i in items}
    assert types == {"none", "simple", "multiple", "override", "conditional", "multi_value", "chain"}
    assert {i["example_type"] for i in tune} == types and {i["example_type"] for i in report} == types
    assert not any(i["function"] in corpus.REPORT_FUNCTIONS or i["style"] in corpus.REPORT_STYLES for i in tune)
    assert {i["function"] for i in report} >= set(corpus.REPORT_FUNCTIONS)
    assert len({i["function"] for i in tune}) >= 10  # a fit sees at least ten catalogues' functions
    assert set(corpus.REPORT_FUNCTIONS) == set(splits.CORPUS_HELD_OUT_FUNCTIONS)
    assert set(corpus.REPORT_STYLES) == set(splits.CORPUS_HELD_OUT_STYLES)


def test_chained_calls_take_their_values_from_the_request(items: list[dict]):
    chains = [i for i in items if i["example_type"] == "chain"]
    assert chains
    for item in chains:
        first, second = calls_from_any(item["api_calls"])
        assert second.arguments and set(map(str, second.arguments.values())) <= set(map(str, first.arguments.values()))
        text = item["user_utterance"].lower()
        assert all(str(v).lower() in text for v in second.arguments.values())


def test_an_overridden_or_unmet_instruction_is_listed_but_not_applicable(items: list[dict]):
    for item in items:
        assert set(item["applicable_standing_instructions"]) <= set(item["all_standing_instructions"])
        if item["example_type"] in ("override", "conditional"):
            extra = set(item["all_standing_instructions"]) - set(item["applicable_standing_instructions"])
            assert extra, item["example_id"]
        if item["example_type"] == "multi_value":
            assert len(item["api_calls"]) == 2 and len(item["applicable_standing_instructions"]) == 2


# ---------------------------------------------------------------------------- the profile corpus
PROFILE_ITEMS = corpus.CORPUS_DIR / "profile_items.json"
PROFILE_CATALOGUE = corpus.CORPUS_DIR / "profile_catalogue.json"


PROSE_ITEMS = corpus.CORPUS_DIR / "profile_prose_items.json"


@pytest.mark.parametrize(("path", "count"), [(PROFILE_ITEMS, 240), (PROSE_ITEMS, 80)])
def test_profile_items_have_valid_gold_whose_personal_values_only_the_profile_or_request_writes(path, count):
    items = json.loads(path.read_text(encoding="utf-8"))
    catalogue = import_catalogue(PROFILE_CATALOGUE)
    assert len(catalogue.functions) == 10 and len(items) == count
    for item in items:
        # The applicable instructions are the profile's own texts, not other phrasings of them.
        assert set(item["applicable_standing_instructions"]) <= set(item["all_standing_instructions"]), \
            item["example_id"]
        [call] = calls_from_any(item["api_calls"])
        assert validate_call(call, catalogue) == [], item["example_id"]
        function = catalogue.function(call.name)
        assert set(function.required) <= set(call.arguments), item["example_id"]
        said = item["user_utterance"] + " ".join(item["applicable_standing_instructions"])
        for value in call.arguments.values():  # every value is written where the item says it comes from
            assert isinstance(value, (bool, int)) or str(value) in said, (item["example_id"], value)
        records = [s for s in item["all_standing_instructions"] if s not in item["applicable_standing_instructions"]
                   and "history" in s]
        if item["example_type"] != "back_reference":
            assert not set(item["applicable_standing_instructions"]) & set(records)


def test_profile_items_split_with_held_out_functions_and_style_only_in_report():
    items = {i["example_id"]: i for i in json.loads(PROFILE_ITEMS.read_text(encoding="utf-8"))}
    entry = splits.packaged().sources["src/prefcall/data/corpus/profile_items.json"]
    tune, report = [items[k] for k in entry.tune], [items[k] for k in entry.report]
    assert len(tune) + len(report) == len(items) and len(tune) >= 60
    assert not any(i["function"] in corpus_profile.REPORT_FUNCTIONS or i["style"] in corpus_profile.REPORT_STYLES
                   for i in tune)
    assert {i["example_type"] for i in tune} == {i["example_type"] for i in report} == set(corpus_profile.KINDS)
    assert set(corpus_profile.REPORT_FUNCTIONS) == set(splits.PROFILE_HELD_OUT_FUNCTIONS)
    assert set(corpus_profile.REPORT_STYLES) == set(splits.PROFILE_HELD_OUT_STYLES)


def test_the_prose_part_writes_facts_without_a_key_and_holds_its_held_out_functions_in_report():
    from prefcall.strategies import statements

    items = {i["example_id"]: i for i in json.loads(PROSE_ITEMS.read_text(encoding="utf-8"))}
    entry = splits.packaged().sources["src/prefcall/data/corpus/profile_prose_items.json"]
    tune, report = [items[k] for k in entry.tune], [items[k] for k in entry.report]
    assert len(tune) + len(report) == len(items) and {i["style"] for i in items.values()} == {"prose"}
    assert not any(i["function"] in corpus_profile.REPORT_FUNCTIONS for i in tune)
    assert {i["function"] for i in report} >= set(corpus_profile.REPORT_FUNCTIONS)
    # Its facts have no key ("Text me on 555-0142."): none is read by the keyed forms, every one by its value's form.
    texts = {t for i in items.values() for t in i["all_standing_instructions"] if "ago" not in t}
    assert texts and all((f := statements.fact_of(t)) is not None and f.keyless for t in texts)


# ---------------------------------------------------------------------------- the misfit corpus (class g)
MISFIT_ITEMS = corpus.CORPUS_DIR / "misfit_items.json"
MISFIT_CATALOGUE = corpus.CORPUS_DIR / "misfit_catalogue.json"


def _as_typed(written: str, schema: dict) -> object:
    if schema.get("type") in ("integer", "number"):
        number = float(written)
        return int(number) if number.is_integer() else number
    return written


def test_misfit_items_break_the_schema_only_where_they_say_and_valid_items_call_within_it():
    import jsonschema

    from prefcall.schemas.formats import normalise

    items = json.loads(MISFIT_ITEMS.read_text(encoding="utf-8"))
    catalogue = import_catalogue(MISFIT_CATALOGUE)
    assert len(catalogue.functions) == 10 and len(items) == 200
    kinds = Counter(i["kind"] for i in items)
    assert kinds["valid"] == 100 and {"enum", "range", "type", "pattern", "date", "time"} <= set(kinds)
    for item in items:
        [call] = calls_from_any(item["api_calls"])
        function = catalogue.function(call.name)
        problems = validate_call(call, function, strict=True)  # a misfit's own argument is left out of its call
        assert [p for p in problems if p.argument != item["argument"] or p.kind != "missing_required"] == [], \
            item["example_id"]
        for argument, value in call.arguments.items():
            schema = function.properties[argument]
            if "format" in schema:  # a written date or time is called in the schema's form, normalised
                assert normalise(str(value), schema["format"])[0] is not None, (item["example_id"], value)
        if item["expect"] == "call":
            assert item["kind"] == "valid" and set(function.required) <= set(call.arguments), item["example_id"]
            continue
        schema = function.properties[item["argument"]]
        assert item["argument"] not in call.arguments and item["written"] in item["user_utterance"]
        if item["kind"] in ("date", "time"):
            assert normalise(item["written"], schema["format"])[1] is not None, item["example_id"]
        else:
            bare = {k: v for k, v in schema.items() if k not in ("description", "format")}
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(_as_typed(item["written"], schema), bare)


def test_misfit_items_split_with_held_out_functions_and_style_only_in_report():
    from prefcall.evaluation import corpus_misfit

    items = {i["example_id"]: i for i in json.loads(MISFIT_ITEMS.read_text(encoding="utf-8"))}
    entry = splits.packaged().sources["src/prefcall/data/corpus/misfit_items.json"]
    tune, report = [items[k] for k in entry.tune], [items[k] for k in entry.report]
    assert len(tune) + len(report) == len(items) and len(tune) >= 50 and len(report) >= 100
    assert not any(i["function"] in corpus_misfit.REPORT_FUNCTIONS or i["style"] in corpus_misfit.REPORT_STYLES
                   for i in tune)
    assert {i["expect"] for i in tune} == {i["expect"] for i in report} == {"call", "ask"}
    assert set(corpus_misfit.REPORT_FUNCTIONS) == set(splits.MISFIT_HELD_OUT_FUNCTIONS)
    assert set(corpus_misfit.REPORT_STYLES) == set(splits.MISFIT_HELD_OUT_STYLES)


def test_phrase_items_hold_lowercase_phrase_values_and_split_with_held_out_functions_and_styles():
    """The phrase corpus (class b): most gold string values are lowercase phrases of several words, read from the
    request or an instruction as written; its three held-out functions and the corpus's report styles only in
    report."""
    from prefcall.evaluation import corpus, corpus_phrase

    path = corpus.CORPUS_DIR / "phrase_items.json"
    items = {i["example_id"]: i for i in json.loads(path.read_text(encoding="utf-8"))}
    entry = splits.packaged().sources["src/prefcall/data/corpus/phrase_items.json"]
    tune, report = [items[k] for k in entry.tune], [items[k] for k in entry.report]
    assert len(tune) + len(report) == len(items) and len(tune) >= 100 and len(report) >= 100
    assert not any(i["function"] in corpus_phrase.REPORT_FUNCTIONS or i["style"] in corpus_phrase.REPORT_STYLES
                   for i in tune)
    assert set(corpus_phrase.REPORT_FUNCTIONS) == set(splits.PHRASE_HELD_OUT_FUNCTIONS)
    assert {f.function for f in corpus_phrase.DOMAINS}.isdisjoint(d.function for d in corpus.DOMAINS)
    values = [v for i in tune for v in corpus._strings(i["api_calls"])]  # noqa: SLF001
    phrases = [v for v in values if " " in v and v == v.lower()]
    assert len(phrases) >= 300 and len(phrases) > len(values) / 2
    for item in tune:
        text = " ".join([item["user_utterance"], *item["applicable_standing_instructions"]]).lower()
        assert all(v.lower() in text for v in corpus._strings(item["api_calls"])), item["example_id"]  # noqa: SLF001
        assert ("b:lowercase-phrase" in item["classes"]) == any(
            " " in v and v == v.lower() for v in corpus._strings(item["api_calls"]))  # noqa: SLF001
