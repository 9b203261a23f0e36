"""`prefcall fit` (prefcall.evaluation.fit) and the fits it stores per model file (prefcall.storage.fits)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from model_files import FileEngine

from prefcall.engine.fake import FakeEmbedder, FakeEngine
from prefcall.errors import StoreError
from prefcall.evaluation import fit, splits
from prefcall.storage import fits
from prefcall.strategies.grounded import load_weights
from prefcall.strategies.grounding.evidence import FEATURES, Weights
from prefcall.strategies.grounding.fill import TOP_K, GroundingWeights, RankRow, combine
from prefcall.strategies.pipeline import Pipeline


def row(group: int, evidence: float, odds: float | None, right: bool, gold: bool = True, kind: str = "span",
        item: str = "i") -> fit.LabelledRow:
    return fit.LabelledRow(item=item, group=group, kind=kind, function="F", argument="a", value=str(group),
                           evidence=evidence, odds=odds, right=right, gold=gold)


def test_logistic_recovers_the_slopes_of_generated_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4000, 2))
    y = (rng.random(4000) < 1 / (1 + np.exp(-(1.5 * x[:, 0] + 0.5 * x[:, 1] - 1.0)))).astype(float)
    a, b, c = fit.logistic(x, y)
    assert abs(a - 1.5) < 0.15 and abs(b - 0.5) < 0.1 and abs(c + 1.0) < 0.15


def test_decisions_count_one_answer_per_ranking():
    rows = [row(1, 2.0, 3.0, True), row(1, 0.0, -1.0, False),  # right value wins: tp
            row(2, 1.0, 2.0, False),  # a wrong value set where gold exists: fp and fn
            row(3, -5.0, None, False, gold=True),  # nothing passes: fn
            row(4, -5.0, -5.0, False, gold=False)]  # nothing passes, nothing expected: nothing
    assert fit.decide(rows, (1.0, 1.0, 0.0)) == (1, 1, 2)
    assert fit.f1(1, 1, 2) == (0.5, 1 / 3, pytest.approx(0.4))
    # group numbers count within one process: a resumed fit's two items may share one, and are two rankings
    resumed = [row(1, 2.0, 3.0, True, item="a"), row(1, 2.0, 4.0, False, item="b")]
    assert fit.decide(resumed, (1.0, 1.0, 0.0)) == (1, 1, 1)


def test_a_kind_is_fitted_only_with_enough_right_values_and_never_scores_worse_on_its_rows():
    rng = np.random.default_rng(1)
    rows = []
    for g in range(800):
        right_odds, wrong_odds = rng.normal(2.0, 1.5), rng.normal(-2.0, 1.5)
        rows += [row(g, rng.normal(0.5, 1), right_odds, True), row(g, rng.normal(-0.5, 1), wrong_odds, False)]
    shipped = (0.5, 0.05, -3.0)  # a poor rule: the model's odds barely count
    fitted = fit.fit_kind("span", rows, shipped, min_right=300)
    assert fitted.fitted and fitted.right == 800
    assert fitted.f1_fitted >= fitted.f1_shipped and fitted.f1_fitted > 0.9
    few = fit.fit_kind("span", rows[:200], shipped, min_right=300)
    assert not few.fitted and few.combination == list(shipped) and "needs 300" in few.why


def test_a_span_fit_weighs_the_values_length_where_the_rows_carry_it():
    # The model's odds fall with every token of a value, whatever its worth: the right values here are the longer
    # ones, and their odds are lower for it. The length weight gives that back; rows without lengths (collected
    # before it was recorded) fit the three-number combination.
    rng = np.random.default_rng(2)
    rows = []
    for g in range(800):
        right_len, wrong_len = float(rng.integers(2, 6)), float(rng.integers(0, 2))
        rows += [fit.LabelledRow(item="i", group=g, kind="span", function="F", argument="a", value="long",
                                 evidence=rng.normal(0.5, 1), odds=rng.normal(1.0, 1.0) - 1.5 * right_len,
                                 right=True, gold=True, length=right_len),
                 fit.LabelledRow(item="i", group=g, kind="span", function="F", argument="a", value="short",
                                 evidence=rng.normal(-0.5, 1), odds=rng.normal(-1.0, 1.0) - 1.5 * wrong_len,
                                 right=False, gold=True, length=wrong_len)]
    shipped = (0.5, 0.5, -1.0)
    fitted = fit.fit_kind("span", rows, shipped, min_right=300)
    assert len(fitted.combination) == 4 and fitted.combination[3] > 0
    assert fitted.f1_fitted > fitted.f1_shipped
    plain = fit.fit_kind("span", [r.model_copy(update={"length": None}) for r in rows], shipped, min_right=300)
    assert len(plain.combination) == 3 and plain.f1_fitted < fitted.f1_fitted
    enum = fit.fit_kind("enum", [r.model_copy(update={"kind": "enum"}) for r in rows], shipped, min_right=300)
    assert len(enum.combination) == 3  # only spans and numbers have a length


def test_the_length_weight_counts_in_the_combination_and_a_wrong_size_is_refused():
    assert combine((1.0, 0.5, -1.0), 2.0, -4.0, 3.0) == pytest.approx(-1.0)  # no length term
    assert combine((1.0, 0.5, -1.0, 0.5), 2.0, -4.0, 3.0) == pytest.approx(0.5)
    weights = load_weights()
    assert weights.model_copy(update={"span": (1.0, 0.5, -1.0, 0.5)}).span[3] == 0.5
    with pytest.raises(ValueError, match="combination"):
        GroundingWeights(structure=weights.structure, span=(1.0, 0.5))


def test_rows_are_labelled_by_the_gold_value_of_that_argument():
    item = fit.TuneItem("1", "nlsi", "User: x", [], [], ['GetRestaurants(city="San Jose", cuisine="Thai")'],
                        catalogue=None)  # type: ignore[arg-type]
    rows = [RankRow(function="GetRestaurants", argument="city", kind="span", group=1, value="san jose",
                    evidence=1.0, odds=2.0),
            RankRow(function="GetRestaurants", argument="city", kind="span", group=1, value="Thai", evidence=0.0,
                    odds=-1.0),
            RankRow(function="GetRestaurants", argument="rating", kind="number", group=2, value=4, evidence=0.0,
                    odds=0.0)]
    labelled = fit.label(item, rows, {})
    assert [(r.right, r.gold) for r in labelled] == [(True, True), (False, True), (False, False)]


def test_tune_items_are_the_tune_split_only():
    items = fit.tune_items(["corpus"])
    entry = splits.packaged().sources["src/prefcall/data/corpus/items.json"]
    assert {i.id for i in items} == set(entry.tune)
    assert len(fit.tune_items(["corpus"], subset=10)) == 10
    with pytest.raises(Exception, match="unknown fit source"):
        fit.tune_items(["elsewhere"])


def test_the_profile_corpus_and_its_prose_part_are_fit_sources_read_by_their_tune_part():
    """`--sources profile,profile_prose`: the tune items of each file, against the profile catalogue, and their
    value memories found under that catalogue's name (so the prose part's items see the main part's values)."""
    packaged = splits.packaged().sources
    for source, name in (("profile", "profile_items.json"), ("profile_prose", "profile_prose_items.json")):
        items = fit.tune_items([source])
        assert {i.id for i in items} == set(packaged[f"src/prefcall/data/corpus/{name}"].tune)
        assert {i.catalogue.name for i in items} == {"profile"}
        assert all(i.catalogue.function(i.gold[0].split("(")[0]) is not None for i in items)
    memory = fit.value_memories(["profile", "profile_prose"])
    assert memory.count("profile") == len(fit.tune_items(["profile", "profile_prose"]))


def test_the_phrase_corpus_is_a_fit_source_read_by_its_tune_part():
    """`--sources ...,phrase` (lowercase common-noun values): its tune items, against its own catalogue, with value
    memories under that catalogue's name; none of its held-out functions."""
    from prefcall.evaluation import corpus_phrase

    assert "phrase" in fit.KNOWN_SOURCES
    items = fit.tune_items(["phrase"])
    entry = splits.packaged().sources["src/prefcall/data/corpus/phrase_items.json"]
    assert {i.id for i in items} == set(entry.tune) and len(items) >= 100
    assert {i.catalogue.name for i in items} == {"phrase"}
    assert all(i.catalogue.function(g.split("(")[0]) is not None for i in items for g in i.gold)
    assert not any(g.startswith(corpus_phrase.REPORT_FUNCTIONS) for i in items for g in i.gold)
    assert fit.value_memories(["phrase"]).count("phrase") == len(items)


def test_collect_records_the_fillers_candidates_through_the_pipeline():
    engine = FakeEngine()
    items = fit.tune_items(["corpus"], subset=3)
    pipeline = Pipeline(engine, FakeEmbedder())
    done: list[str] = []
    rows = fit.collect(pipeline, items, done.append)
    assert done == [i.id for i in items]
    assert rows and {r.item for r in rows} <= {i.id for i in items}
    assert pipeline.record is None  # the recorder is removed after each item
    assert any(r.right for r in rows)  # gold values are among the candidates the filler scored


def test_collect_records_every_span_candidates_features_and_which_ones_were_scored():
    items = fit.tune_items(["corpus"], subset=3)
    rows = fit.collect(Pipeline(FakeEngine(), FakeEmbedder()), items)
    spans = [r for r in rows if r.kind in ("span", "number")]
    assert spans and all(r.features is not None and len(r.features) == len(FEATURES) for r in spans)
    assert any(not r.ranked for r in spans)  # candidates structure kept out of the scored top are rows too
    for group in {r.group for r in spans}:  # the best TOP_K, and spans coordinated with them
        assert sum(r.ranked for r in spans if r.group == group) <= 2 * TOP_K
    assert all(r.features is None and r.ranked for r in rows if r.kind in ("enum", "boolean"))


def test_half_the_tuning_items_are_parsed_without_any_value_memory():
    # A new user's catalogue has no demonstrations: the weights must see that case, not only values seen before.
    items = fit.tune_items(["corpus"], subset=40)
    picked = [i.id for i in items if fit.without_memory(i.id)]
    assert 10 <= len(picked) <= 30 and picked == [i.id for i in items if fit.without_memory(i.id)]
    pipeline = Pipeline(FakeEngine(), FakeEmbedder(), fit.value_memories(["corpus"]))
    rows = fit.collect(pipeline, [i for i in items if i.id in picked][:2] + [i for i in items if i.id not in picked][:2])
    has_memory = FEATURES.index("has_memory")
    with_memory = {r.item for r in rows if r.features is not None and r.features[has_memory] > 0}
    assert with_memory and not with_memory & set(picked)


def structure_rows(n_groups: int, seed: int = 2) -> list[fit.LabelledRow]:
    """Rankings of 6 candidates where feature 0 marks the right one (noisily) and the others are noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(n_groups):
        for j in range(6):
            features = rng.normal(size=len(FEATURES))
            features[0] += 2.5 if j == 0 else 0.0
            rows.append(fit.LabelledRow(item=str(g), group=g, kind="span", function="F", argument="a", value=j,
                                        evidence=0.0, odds=None, right=j == 0, gold=True,
                                        features=[float(f) for f in features], ranked=j < 3))
    return rows


def test_the_structure_fit_learns_the_feature_that_marks_right_values_and_needs_enough_of_them():
    shipped = Weights(tuple([0.0] * len(FEATURES)), tuple([1.0] * len(FEATURES)),
                      tuple([0.0] * (len(FEATURES) - 1) + [1.0]), 0.0)  # looks at a noise feature only
    result = fit.fit_structure(structure_rows(400), shipped, min_right=300)
    assert result.fitted and result.right == 400 and result.rankings == 400
    assert result.top1_fitted > 0.75 > result.top1_shipped
    assert result.topk_fitted >= result.top1_fitted
    weights = result.weights["weights"]
    assert weights[0] == max(weights, key=abs)
    few = fit.fit_structure(structure_rows(100), shipped, min_right=300)
    assert not few.fitted and "needs 300" in few.why and few.weights["weights"] == list(shipped.weights)


def test_a_structure_file_keeps_the_combinations_and_says_where_the_weights_came_from(tmp_path: Path):
    shipped = load_weights().structure
    result = fit.fit_structure(structure_rows(400), shipped, min_right=300)
    base = json.loads(Path(fit.__file__).parent.parent.joinpath("data", "grounding.json").read_text())
    written = fit.structure_file(result, base, "prefcall fit --structure", "abc1234", {"corpus": 208})
    assert written["combination"] == base["combination"]
    assert written["source"]["structure"]["command"] == "prefcall fit --structure"
    assert written["source"]["structure"]["commit"] == "abc1234" and written["structure"]["features"] == list(FEATURES)
    path = tmp_path / "grounding.json"
    path.write_text(json.dumps(written))
    assert load_weights(path=path).structure.weights == tuple(result.weights["weights"])


def phrase_rows(groups: int, seed: int, lowered: float) -> list[fit.LabelledRow]:
    """Two candidates per ranking, one capitalised and one with no capitals; the gold is the capitalised one in
    half the rankings (right at 4 nats over null, the phrase beside it wrong at -2) and the lowercase one in the
    other half, right at 4 - `lowered` nats beside a wrong name at 1.5."""
    rng = np.random.default_rng(seed)
    capitals = FEATURES.index("capitals")

    def candidate(g: int, caps: float, odds: float, right: bool) -> fit.LabelledRow:
        features = [0.0] * len(FEATURES)
        features[capitals] = caps
        return fit.LabelledRow(item=f"i{g}", group=g, kind="span", function="F", argument="a", value=f"{g}{caps}",
                               evidence=rng.normal(0.0, 0.5), odds=odds, right=right, gold=True, features=features,
                               length=1.0)

    rows = []
    for g in range(groups):
        if g % 2:  # the gold is the name
            rows += [candidate(g, 1.0, rng.normal(4.0, 1.0), True), candidate(g, 0.0, rng.normal(-2.0, 1.0), False)]
        else:  # the gold is the common phrase
            rows += [candidate(g, 0.0, rng.normal(4.0 - lowered, 1.0), True),
                     candidate(g, 1.0, rng.normal(1.5, 1.0), False)]
    return rows


def test_a_phrase_combination_is_kept_only_where_held_out_it_beats_the_one_span_combination():
    """Right lowercase values the model scores 3 nats under right names, under the wrong name beside them: one
    combination cannot set both, two can, and held out they do better (kept); under MIN_RIGHT right values of
    either it is not fitted."""
    rows = phrase_rows(800, 3, 3.0)
    lowered = fit.fit_phrase(rows, min_right=300)
    assert lowered.fitted and lowered.kept and lowered.right == 400 and lowered.rest_right == 400
    assert lowered.f1_split_held_out > lowered.f1_shared_held_out + 0.05
    assert lowered.phrase[2] > lowered.span[2]  # the phrase's bias gives its lower odds back
    assert fit.decide(rows, lowered.span, lowered.phrase)[0] > fit.decide(rows, lowered.span)[0]
    alike = fit.fit_phrase(phrase_rows(800, 4, 0.0), min_right=300)
    assert alike.fitted and alike.f1_split_held_out <= alike.f1_shared_held_out + 0.01
    few = fit.fit_phrase(phrase_rows(400, 3, 3.0), min_right=300)
    assert not few.fitted and not few.kept and "needs 300" in few.why


def test_the_combination_fit_reads_only_the_scored_top():
    rows = [row(1, 2.0, 3.0, True), row(1, 9.0, None, False)]
    rows[1].ranked = False  # never scored: not a decision the combination makes
    assert fit.decide([r for r in rows if r.ranked], (1.0, 1.0, 0.0)) == (1, 0, 0)
    assert fit.fit_kind("span", rows, (1.0, 1.0, 0.0), min_right=300).decisions == 1
    assert fit.fit_kind("span", rows, (1.0, 1.0, 0.0), min_right=300).f1_shipped == 1.0


def test_the_required_floor_is_the_one_with_the_best_f1_on_required_arguments_and_a_stored_one_is_read():
    """Rankings of a required argument whose right value sits at p 0.27 (under 0.5) are set from a floor of 0.2;
    one whose best is wrong at p 0.12 stays unset there; optional arguments' rankings are not read."""
    def ranking(group: int, odds: float, right: bool, argument: str = "a") -> fit.LabelledRow:
        return row(group, 0.0, odds, right).model_copy(update={"argument": argument})

    rows = [ranking(g, -1.0, True) for g in range(6)] + [ranking(g, -2.0, False) for g in range(6, 8)]
    rows += [ranking(g, -1.0, False, argument="b") for g in range(8, 20)]  # optional: would pull the floor up
    result = fit.fit_required_floor(rows, {"span": (0.0, 1.0, 0.0)}, {("F", "a")})
    assert result.floor == 0.2 and result.f1_with > result.f1_without == 0.0
    assert fit.fit_required_floor(rows[:6], {"span": (0.0, 1.0, 5.0)}, {("F", "a")}).floor is None  # all pass 0.5
    assert load_weights("m", fitted={"required_floor": 0.2}).required_floor == 0.2
    assert load_weights("m").required_floor is None
    # rows with no capitalised word are read under the phrase combination where the filler has one
    lowercase = [r.model_copy(update={"features": [0.0] * len(FEATURES)}) for r in rows]
    assert fit.fit_required_floor(lowercase, {"span": (0.0, 1.0, -9.0)}, {("F", "a")}).floor is None  # none passes
    assert fit.fit_required_floor(lowercase, {"span": (0.0, 1.0, -9.0), "phrase": (0.0, 1.0, 0.0)},
                                  {("F", "a")}).floor == 0.2


def test_the_required_lead_sets_the_most_right_values_minus_wrong_at_its_precision_on_request_fills_only():
    """Open required rankings (under the floor): where the model's best leads the next by 6 nats it is right (6
    rankings), by 2 nats wrong (3): of the leads that set most right minus wrong the largest (6) is kept. Rankings of an
    instruction's fill, or decided by the floor, are not read."""
    def ranking(group: int, best: float, lead: float, right: bool, **more: object) -> list[fit.LabelledRow]:
        top = row(group, 0.0, best, right).model_copy(update={"argument": "a", **more})
        return [top, row(group, 0.0, best - lead, False).model_copy(update={"argument": "a", **more})]

    rows = [r for g in range(6) for r in ranking(g, -3.0, 6.0, True)]
    rows += [r for g in range(6, 9) for r in ranking(g, -3.0, 2.0, False)]
    rows += [r for g in range(9, 20) for r in ranking(g, -3.0, 2.0, False, request=False)]  # not a request's fill
    rows += [r for g in range(20, 30) for r in ranking(g, 3.0, 2.0, False)]  # decided: p over the floor
    result = fit.fit_required_lead(rows, (0.0, 1.0, 0.0), {("F", "a")}, 0.3)
    assert result.rankings == 9 and result.lead == 6.0 and (result.set_right, result.set_wrong) == (6, 0)
    assert fit.fit_required_lead(rows[:4], (0.0, 1.0, 0.0), {("F", "a")}, 0.3).lead is None  # too few right
    assert load_weights("m", fitted={"required_lead": 6.0}).required_lead == 6.0


def test_a_stored_fit_is_used_for_that_model_file_only(tmp_path: Path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF fake weights")
    other = tmp_path / "n.gguf"
    other.write_bytes(b"GGUF other weights")
    data = tmp_path / "data"
    fingerprint = fits.file_fingerprint(model, data)
    assert fingerprint and fingerprint.startswith("gguf-sha256:") and fits.file_fingerprint(other, data) != fingerprint
    assert json.loads((data / fits.FINGERPRINTS).read_text())  # cached by path, size and mtime
    fits.save(fits.Fit(fingerprint=fingerprint, model_name="m", grounding={"span": [1.0, 2.0, -3.0]}), data / "fits")
    found = fits.load(fingerprint, data)
    assert found is not None and found.origin == "user" and found.grounding["span"] == [1.0, 2.0, -3.0]
    assert fits.load(fits.file_fingerprint(other, data), data) is None
    weights = load_weights("m", fitted=found.grounding)
    assert weights.span == (1.0, 2.0, -3.0) and weights.enum == load_weights("m").enum

    pipeline = Pipeline(FileEngine(model), data_dir=data)
    assert pipeline.fit() is not None and pipeline.fit().grounding == {"span": [1.0, 2.0, -3.0]}
    pipeline._grounder(fit.tune_items(["corpus"], subset=1)[0].catalogue, frozenset())  # noqa: SLF001
    assert pipeline._weights.span == (1.0, 2.0, -3.0)  # noqa: SLF001
    # A stage-1 rule stored for the model is used with an embedder (it weighs the cosine), never without one.
    from prefcall.strategies.fnctod import HAND_RULE

    fits.save(found.model_copy(update={"selection": [0.5, 1.0, 6.0, 1.0, 0.5, 1.0]}), data / "fits")
    # a rule stored before the profile feature existed weighs it 0
    assert Pipeline(FileEngine(model), FakeEmbedder(), data_dir=data).selection_rule().weights == [0.5, 1.0, 6.0, 1.0, 0.5,
                                                                                            1.0, 0.0]
    assert Pipeline(FileEngine(model), data_dir=data).selection_rule() == HAND_RULE
    # Every request's view shares the rules the parent read once (no fit file read per request).
    from prefcall.engine.base import LOCAL

    parent = Pipeline(FileEngine(model), FakeEmbedder(), data_dir=data)
    view = parent.scoped(LOCAL)
    assert view.selection_rule() is parent.selection_rule() and view.grounding_weights() is parent.grounding_weights()


def test_a_damaged_or_foreign_fit_file_is_a_one_line_error(tmp_path: Path):
    fingerprint = "gguf-sha256:" + "a" * 64
    path = tmp_path / "fits" / fits.file_name(fingerprint)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(StoreError, match="damaged"):
        fits.load(fingerprint, tmp_path)
    path.write_text(json.dumps({"fingerprint": "gguf-sha256:" + "a" * 63 + "b"}))
    with pytest.raises(StoreError, match="another model"):
        fits.load(fingerprint, tmp_path)


def test_an_unwritable_fingerprint_cache_costs_time_not_the_request(tmp_path: Path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF weights")
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("x")  # the cache's folder is a file: every write fails
    first = fits.file_fingerprint(model, blocked)
    assert first is not None and first == fits.file_fingerprint(model, None)


class ServedStub(FakeEngine):
    """A served engine as the pipeline sees it: EngineInfo names a URL, the tokenizer is the server's."""

    def __init__(self, model: str = "qwen2.5-coder:1.5b", template: str = "{{ messages }}", scale: int = 1) -> None:
        super().__init__()
        self.model, self.template, self.scale = model, template, scale

    @property
    def info(self):
        return dataclasses.replace(super().info, model_name=self.model, backend="llama-server",
                                   chat_template=self.template, extra={"url": "http://127.0.0.1:9"})

    def count_tokens(self, text: str) -> int:
        return super().count_tokens(text) * self.scale


def test_a_served_model_is_known_by_its_id_template_and_tokenizer(tmp_path: Path):
    base = fits.engine_fingerprint(ServedStub())
    assert base is not None and base.startswith("served-sha256:") and base == fits.engine_fingerprint(ServedStub())
    others = {fits.engine_fingerprint(ServedStub(model="llama3.1:8b")),
              fits.engine_fingerprint(ServedStub(template="{{ other }}")),
              fits.engine_fingerprint(ServedStub(scale=2))}  # same name and template, another tokenizer
    assert base not in others and len(others) == 3
    fits.save(fits.Fit(fingerprint=base, model_name="qwen", grounding={"span": [0.9, 0.8, -1.0]}), tmp_path / "fits")
    pipeline = Pipeline(ServedStub(), data_dir=tmp_path)
    assert pipeline.fit() is not None and pipeline.fit().grounding == {"span": [0.9, 0.8, -1.0]}
    assert Pipeline(ServedStub(scale=2), data_dir=tmp_path).fit() is None
    assert fits.engine_fingerprint(FakeEngine()) is None  # no file, no URL: nothing to know it by


def test_fit_selection_stores_the_stage_one_rule_beside_the_grounding_fit(tmp_path: Path, monkeypatch, capsys):
    import prefcall.engine as engines
    from prefcall.cli import main

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF fake weights")

    def scorer(prompt: str, candidate: str) -> float:  # a model that reads the request: the named function wins
        request = prompt.rsplit("Dialogue:", 1)[-1].lower()
        words = [w.lower() for w in re.findall(r"[A-Z][a-z]+", candidate.strip())[1:]]
        return 2.0 if any(w.rstrip("s") in request for w in words) else 0.0

    monkeypatch.setattr(engines, "load_engine", lambda settings: FileEngine(model, scorer=scorer))
    monkeypatch.setattr(engines, "load_embedder", lambda settings: FakeEmbedder())
    monkeypatch.setenv("PREFCALL_DATA_DIR", str(tmp_path / "data"))
    fingerprint = fits.file_fingerprint(model, tmp_path / "data")
    fits.save(fits.Fit(fingerprint=fingerprint, model_name="m", grounding={"span": [1.0, 2.0, -3.0]}),
              tmp_path / "data" / "fits")
    assert main(["fit", "--selection", "--sources", "corpus", "--subset", "60"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["items"] == {"corpus": 60} and report["rows"] == 60 and len(report["weights"]) == 7
    stored = fits.load(fingerprint, tmp_path / "data")
    assert stored.grounding == {"span": [1.0, 2.0, -3.0]}  # the grounding fit stays
    assert report["fitted"] == (stored.selection is not None)
    from prefcall.commands.engine import fit_status  # what `prefcall info` shows

    assert fit_status(FileEngine(model), tmp_path / "data")["selection"]["fitted"] == report["fitted"]
    assert report["accuracy_fitted"]["all"] >= report["accuracy_hand"]["all"] or not report["fitted"]
    floor = report["calibration_floor"]  # the same rows fit stage 1's calibration floor
    assert floor["hand_floor"] == -10.0 and floor["rows"] == 60 and "-10.0" in floor["accuracy"]
    assert stored.calibration_floor == (floor["floor"] if floor["kept"] else None)
    assert fit_status(FileEngine(model), tmp_path / "data")["calibration_floor"] == stored.calibration_floor
    assert report["profile_dropout"] == 0.25 and set(report["accuracy_uncovered_fitted"]) == {"corpus", "all"}
    # The rows were kept in the fit's run folder: a rerun reads them and asks the model nothing.
    run = tmp_path / "data" / "fit-runs" / fits.file_name(fingerprint).removesuffix(".json")
    assert len((run / "rows-selection.jsonl").read_text().splitlines()) == 60

    def no_model(prompt: str, candidate: str) -> float:
        raise AssertionError("a resumed fit asked the model")

    monkeypatch.setattr(engines, "load_engine", lambda settings: FileEngine(model, scorer=no_model))
    assert main(["fit", "--selection", "--sources", "corpus", "--subset", "60", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["weights"] == report["weights"]


def test_eval_stage1_scores_the_function_with_the_profile_as_written_and_uncovered(tmp_path: Path, monkeypatch,
                                                                                    capsys):
    # A stage-1 rule that lets the profile decide is right where the profile speaks of the requested function and
    # wrong where it speaks of others: `eval stage1` shows both on the same items.
    import prefcall.engine as engines
    from prefcall.cli import main

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF fake weights")
    monkeypatch.setattr(engines, "load_engine", lambda settings: FileEngine(model, scorer=lambda p, c: 0.0))
    monkeypatch.setattr(engines, "load_embedder", lambda settings: FakeEmbedder())
    monkeypatch.setenv("PREFCALL_DATA_DIR", str(tmp_path / "data"))
    fingerprint = fits.file_fingerprint(model, tmp_path / "data")
    fits.save(fits.Fit(fingerprint=fingerprint, model_name="m", selection=[0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 10.0]),
              tmp_path / "data" / "fits")
    corpus = Path(__file__).resolve().parents[1] / "src" / "prefcall" / "data" / "corpus"
    assert main(["eval", "stage1", "--data", str(corpus / "items.json"), "--schema", str(corpus / "catalogue.json"),
                 "--split", "tune", "--limit", "40", "--out", str(tmp_path / "run")]) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]
    assert metrics["covered"] > 0.5 and metrics["top1_where_covered"] >= 0.9
    assert metrics["top1_uncovered"] < metrics["top1"] - 0.3
    rows = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert {r["prediction"]["rule"] for r in rows} == {"fitted"}


def flag(odds: float, right: bool) -> fit.LabelledRow:
    return fit.LabelledRow(item="i", group=0, kind="unnamed_flag", function="F", argument="is_unisex", value=True,
                           evidence=0.0, odds=odds, right=right, gold=right)


def test_the_unnamed_flag_rule_is_kept_only_with_enough_right_flags_set_precisely():
    few = fit.fit_unnamed_flag([flag(5.0, True), flag(4.0, True), flag(-1.0, False)])
    assert few.threshold is None and few.combination is None and "2 right values" in few.why
    rows = [flag(5.0, True), flag(4.5, True), flag(3.2, True), flag(2.9, False), flag(1.0, True),
            flag(0.5, False), flag(0.2, False), flag(-2.0, False)]
    kept = fit.fit_unnamed_flag(rows)
    # Above 3.0 three right and none wrong; lower thresholds add as many wrong flags as right ones.
    assert (kept.threshold, kept.set_right, kept.set_wrong) == (3.0, 3, 0)
    assert kept.combination == [1.0, -3.0]  # sigmoid(odds - 3) >= 0.5 exactly above the threshold
    # A model that likes true for flags nobody asked for as much as for the asked ones is never read.
    noisy = fit.fit_unnamed_flag([flag(4.0, True), flag(4.0, False)] * 3 + [flag(3.0, False)])
    assert noisy.threshold is None and "precision" in noisy.why
    # The false value's rows and the named flags' rows are no evidence of this rule.
    other = [r.model_copy(update={"kind": "boolean"}) for r in rows] + [
        r.model_copy(update={"value": False}) for r in rows]
    assert fit.fit_unnamed_flag(other).rows == 0


def test_fit_flags_stores_the_rule_beside_the_other_parts_and_drops_one_not_kept(tmp_path: Path, monkeypatch,
                                                                                 capsys):
    import prefcall.engine as engines
    from prefcall.cli import main

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF fake weights")

    def scorer(prompt: str, candidate: str) -> float:  # says true to every flag: never read
        return 3.0 if candidate.strip() == "true" else 0.0

    monkeypatch.setattr(engines, "load_engine", lambda settings: FileEngine(model, scorer=scorer))
    monkeypatch.setattr(engines, "load_embedder", lambda settings: FakeEmbedder())
    monkeypatch.setenv("PREFCALL_DATA_DIR", str(tmp_path / "data"))
    fingerprint = fits.file_fingerprint(model, tmp_path / "data")
    fits.save(fits.Fit(fingerprint=fingerprint, model_name="m", calibration_floor=-4.0,
                       grounding={"span": [1.0, 2.0, -3.0], "unnamed_flag": [1.0, -2.0]}), tmp_path / "data" / "fits")
    assert main(["fit", "--flags", "--sources", "corpus", "--subset", "40", "--out", str(tmp_path / "run")]) == 0
    report = json.loads(capsys.readouterr().out)
    flagged = len(fit.with_flags(fit.tune_items(["corpus"], 40)))
    assert report["items"] == {"corpus": flagged} and 0 < flagged < 40
    assert report["rows"] > 0 and report["unnamed_flag"] is None and report["threshold"] is None
    stored = fits.load(fingerprint, tmp_path / "data")
    assert stored.grounding == {"span": [1.0, 2.0, -3.0]} and stored.calibration_floor == -4.0
    assert stored.source["unnamed_flag"]["rows"] == report["rows"] and "commit" in stored.source["unnamed_flag"]
    assert (tmp_path / "run" / "rows-flags.jsonl").is_file()


def test_fit_propose_collects_rows_with_the_models_proposals_and_stores_the_choice(tmp_path: Path, monkeypatch,
                                                                                   capsys):
    import prefcall.engine as engines
    from prefcall.cli import main

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF fake weights")
    engines_made: list[FileEngine] = []

    def make(settings):  # likes null for every value: nothing structure ranks passes, so the model is asked
        engines_made.append(FileEngine(model, scorer=lambda p, c: 0.0 if c.strip() == "null" else -9.0))
        return engines_made[-1]

    monkeypatch.setattr(engines, "load_engine", make)
    monkeypatch.setattr(engines, "load_embedder", lambda settings: FakeEmbedder())
    monkeypatch.setenv("PREFCALL_DATA_DIR", str(tmp_path / "data"))
    fingerprint = fits.file_fingerprint(model, tmp_path / "data")
    run = ["fit", "--sources", "corpus", "--subset", "4", "--min-right", "1"]

    def proposals() -> int:
        return sum(c["kind"] == "generate" and c["prompt"].rstrip().endswith(":") for c in engines_made[-1].calls)

    assert main([*run, "--propose", "on", "--out", str(tmp_path / "a")]) == 0
    assert fits.load(fingerprint, tmp_path / "data").grounding["propose"] == 1.0 and proposals() > 0
    assert main([*run, "--out", str(tmp_path / "b")]) == 0  # a later fit keeps the choice, and collects with it
    assert fits.load(fingerprint, tmp_path / "data").grounding["propose"] == 1.0 and proposals() > 0
    assert main([*run, "--propose", "off", "--out", str(tmp_path / "c")]) == 0
    assert "propose" not in fits.load(fingerprint, tmp_path / "data").grounding and proposals() == 0
    capsys.readouterr()


def test_fit_stores_a_phrase_combination_it_keeps_with_the_span_one_beside_it_and_drops_one_it_does_not(
        tmp_path: Path, monkeypatch, capsys):
    import prefcall.engine as engines
    from prefcall.cli import main

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF fake weights")
    monkeypatch.setattr(engines, "load_engine", lambda settings: FileEngine(model))
    monkeypatch.setattr(engines, "load_embedder", lambda settings: FakeEmbedder())
    monkeypatch.setenv("PREFCALL_DATA_DIR", str(tmp_path / "data"))
    fingerprint = fits.file_fingerprint(model, tmp_path / "data")
    kept = fit.PhraseFit(rows=400, right=320, rest_right=400, fitted=True, kept=True, span=[1.0, 0.5, -2.5, 0.2],
                         phrase=[0.9, 0.5, 0.75, 0.2], f1_shared_held_out=0.48, f1_split_held_out=0.51)
    monkeypatch.setattr(fit, "fit_phrase", lambda rows, min_right: kept)
    run = ["fit", "--sources", "corpus", "--subset", "2", "--min-right", "1"]
    assert main([*run, "--out", str(tmp_path / "a")]) == 0
    stored = fits.load(fingerprint, tmp_path / "data")
    assert stored.grounding["span"] == kept.span and stored.grounding["phrase"] == kept.phrase
    assert stored.source["phrase"]["f1_split_held_out"] == 0.51
    weights = load_weights("m", fitted=stored.grounding)
    assert weights.phrase == (0.9, 0.5, 0.75, 0.2) and weights.span == (1.0, 0.5, -2.5, 0.2)
    assert json.loads(capsys.readouterr().out)["phrase"]["kept"] is True
    monkeypatch.setattr(fit, "fit_phrase", lambda rows, min_right: kept.model_copy(update={"kept": False}))
    assert main([*run, "--out", str(tmp_path / "b")]) == 0
    assert "phrase" not in fits.load(fingerprint, tmp_path / "data").grounding
    capsys.readouterr()
