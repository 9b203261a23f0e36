"""Scored stage-1 function selection (ours): calibration against content-free dialogues, the domain prior,
instruction chains, its prompt layout, and its use by the pipeline's `function_selection` modes."""

from __future__ import annotations

import json
import math

import pytest

from prefcall.engine.fake import FakeEngine, render_fake
from prefcall.schemas.model import Catalogue, Function
from prefcall.strategies.fnctod import (
    CONTENT_FREE_DIALOGUES,
    CallingContext,
    chained_functions,
    content_free_scores,
    domain_log_prior,
    score_functions,
    scoring_prompt,
    select_by_score,
    smoothed,
)
from prefcall.strategies.pipeline import Pipeline
from prefcall.strategies.pipeline_models import get_config

OBJ = {"type": "object", "properties": {"city": {"type": "string"}}}
CATALOGUE = Catalogue(name="t", functions=[
    Function(name="GetBuses", description="bus tickets between cities", parameters=OBJ),
    Function(name="GetRestaurants", description="finding restaurants", parameters=OBJ),
    Function(name="GetTravel", description="attractions to visit", parameters=OBJ),
    Function(name="GetHotels", description="booking hotels", parameters=OBJ),
])
THAI = "User: Thai food in Oakland please"
CHAIN = "If I ask for Travel, then also look at Hotels"


def biased_scorer(prompt: str, candidate: str) -> float:
    """A small model's habit: GetBuses is likely whatever the dialogue says (positional prior, +4), long names
    are unlikely (-1 per 'word'); the dialogue's content adds only +2 to the right name."""
    name = candidate.strip()
    score = -1.0 * len(name) / 5 + (4.0 if name == "GetBuses" else 0.0)
    if "Thai food" in prompt and name == "GetRestaurants":
        score += 2.0
    if "sights" in prompt and name == "GetTravel":
        score += 2.0
    return score


def test_uncalibrated_scores_follow_the_bias_and_calibration_removes_it():
    engine = FakeEngine(scorer=biased_scorer)
    raw = score_functions(engine, CATALOGUE, THAI, calibration=None)
    assert raw.best() == "GetBuses"  # what SmolLM2-135M does with the generated list
    calibration = content_free_scores(engine, CATALOGUE)
    fixed = score_functions(engine, CATALOGUE, THAI, calibration=calibration)
    assert fixed.best() == "GetRestaurants"
    i = fixed.names.index("GetRestaurants")
    assert fixed.combined[i] == pytest.approx(raw.raw[i] - smoothed(calibration)[i])  # raw minus the smoothed prior


def test_scoring_prompt_puts_the_listing_first_and_asks_for_a_name():
    engine = FakeEngine(scorer=biased_scorer)
    score_functions(engine, CATALOGUE, THAI, calibration=None)
    call = engine.calls[-1]
    assert call["kind"] == "score" and call["candidates"] == [" GetBuses", " GetRestaurants", " GetTravel", " GetHotels"]
    prompt = call["prompt"]
    assert prompt.endswith("Function:") and prompt.index("GetHotels - booking hotels") < prompt.index("Thai food")
    # The calibration prompts differ from a request only after the listing: one prefix for the KV cache.
    free = render_fake(scoring_prompt(engine, CATALOGUE, CONTENT_FREE_DIALOGUES[0]))
    assert free.split("Dialogue:")[0] == prompt.split("Dialogue:")[0]


def test_domain_prior_favours_the_domain_the_dialogue_names():
    prior = dict(zip(CATALOGUE.names, domain_log_prior(CATALOGUE, "User: I need a hotel room in Paris")))
    assert prior["GetHotels"] > 0 > prior["GetBuses"]
    assert domain_log_prior(CATALOGUE, "User: hello there") == [0.0] * 4  # no evidence: flat


def test_hybrid_uses_the_prior_when_the_model_cannot_tell():
    engine = FakeEngine(scorer=lambda prompt, candidate: 0.0)  # no signal from the model at all
    ctx = CallingContext(dialogue="User: I need a hotel room in Paris")
    calibration = content_free_scores(engine, CATALOGUE)
    scored = select_by_score(engine, CATALOGUE, ctx, calibration=calibration, use_prior=False)
    hybrid = select_by_score(engine, CATALOGUE, ctx, calibration=calibration, use_prior=True)
    assert scored.value == ["GetBuses"]  # a tie goes to the first name
    assert hybrid.value == ["GetHotels"] and "GetHotels" in json.loads(hybrid.raw)


def test_instruction_chains_add_functions_only_from_the_called_domain():
    assert chained_functions(CATALOGUE, [CHAIN], ["GetTravel"]) == ["GetTravel", "GetHotels"]
    assert chained_functions(CATALOGUE, [CHAIN], ["GetRestaurants"]) == ["GetRestaurants"]
    assert chained_functions(CATALOGUE, ["If I ask for Travel, my city is Rome"], ["GetTravel"]) == ["GetTravel"]
    engine = FakeEngine(scorer=biased_scorer)
    ctx = CallingContext(dialogue="User: what sights should I see in Rome?")
    out = select_by_score(engine, CATALOGUE, ctx, calibration=content_free_scores(engine, CATALOGUE),
                          chain_instructions=[CHAIN], max_calls=2)
    assert out.value == ["GetTravel", "GetHotels"] and out.usage.evaluated + out.usage.reused == out.usage.prompt_tokens


def test_none_candidate_lets_stage_one_refuse():
    engine = FakeEngine(scorer=lambda prompt, candidate: 3.0 if candidate.strip() == "None" and "weather" in prompt
                        else 0.0)
    ctx = CallingContext(dialogue="User: what is the weather like?")
    out = select_by_score(engine, CATALOGUE, ctx, calibration=content_free_scores(engine, CATALOGUE, allow_none=True),
                          allow_none=True)
    assert out.value == []


def _pipeline_engine() -> FakeEngine:
    fake = FakeEngine(scorer=biased_scorer)
    fake.reply('["GetBuses"]', when="Answer with a JSON list of function names")
    fake.reply('[{"city": "Oakland"}]', when="Calls for GetRestaurants:")
    fake.reply('[{"city": "Oakland"}]', when="Calls for GetBuses:")
    return fake


def test_pipeline_modes_and_calibration_computed_once_per_catalogue():
    generated = Pipeline(_pipeline_engine()).parse(THAI, [], CATALOGUE, get_config("default"))
    assert generated.functions == ["GetBuses"]  # paper-faithful generated list kept as the default
    fake = _pipeline_engine()
    pipe = Pipeline(fake)
    config = get_config("default", function_selection="score")
    first = pipe.parse(THAI, [], CATALOGUE, config)
    second = pipe.parse(THAI, [], CATALOGUE, config)
    assert first.functions == second.functions == ["GetRestaurants"]
    free = [c for c in fake.calls if c["kind"] == "score" and "User: N/A" in c["prompt"]]
    assert len(free) == 1  # calibrated once, then cached
    t = second.trace
    assert t.model_calls == 2 and t.prompt_tokens == t.evaluated + t.reused  # the scoring call is metered
    assert get_config("full").function_selection == "hybrid"


def test_gated_regeneration_reuses_the_scored_selection():
    instruction = "If I'm looking for Restaurants, my go-to city is Oakland."
    fake = FakeEngine(scorer=biased_scorer)
    fake.reply(f"[IN:GET_RESTAURANTS {instruction} ]", when="You tag")
    fake.reply('[{"city": "Oakland"}]', when="- [IN:GET_RESTAURANTS")
    fake.reply('[{"city": "Oakland"}]', when="Calls for GetRestaurants:", logprob=-3.0)  # uncertain: gate fires
    result = Pipeline(fake).parse(THAI, [instruction], CATALOGUE,
                                  get_config("taps", function_selection="score", gate_threshold=0.1))
    assert result.gate_fired and result.tagged and result.functions == ["GetRestaurants"]
    request_scores = [c for c in fake.calls if c["kind"] == "score" and "Thai food" in c["prompt"]]
    assert len(request_scores) == 1  # the tagged pass did not score the same dialogue again


def test_a_request_far_from_every_function_is_refused_by_the_none_prior_alone():
    from prefcall.engine.fake import FakeEmbedder

    embedder = FakeEmbedder()
    names = [*CATALOGUE.names, "None"]
    joke = dict(zip(names, domain_log_prior(CATALOGUE, "User: tell me a joke", embedder, allow_none=True)))
    hotel = dict(zip(names, domain_log_prior(CATALOGUE, "User: booking hotels in Paris", embedder, allow_none=True)))
    assert joke["None"] > 0 > hotel["None"]
    engine = FakeEngine(scorer=lambda prompt, candidate: 0.0)  # the model has no opinion
    calibration = content_free_scores(engine, CATALOGUE, allow_none=True)
    for dialogue, expected in (("User: tell me a joke", []), ("User: booking hotels in Paris", ["GetHotels"])):
        out = select_by_score(engine, CATALOGUE, CallingContext(dialogue=dialogue), calibration=calibration,
                              embedder=embedder, use_prior=True, allow_none=True)
        assert out.value == expected, dialogue


def test_smoothed_calibration_bounds_the_gain_of_a_name_the_model_never_says_unprompted():
    # Qwen2.5's content-free log P("GetDoctors") was -13.5: unsmoothed, every medical request became GetDoctors.
    calibration = [-13.5, -1.0, -3.0, -3.0]
    floored = smoothed(calibration, -10.0)
    assert -floored[0] < 10.0 and floored[1:] == pytest.approx(calibration[1:], abs=1e-3)
    assert sorted(range(4), key=floored.__getitem__) == sorted(range(4), key=calibration.__getitem__)  # order kept
    engine = FakeEngine(scorer=lambda prompt, c: {" GetBuses": -0.5, " GetRestaurants": -2.5}.get(c, -4.0)
                        if "Thai food" in prompt else  # else: a content-free dialogue
                        {" GetBuses": -1.0, " GetRestaurants": -13.5}.get(c, -3.0))
    table = score_functions(engine, CATALOGUE, THAI, calibration=content_free_scores(engine, CATALOGUE))
    assert table.best() == "GetRestaurants"  # calibration still removes GetBuses' habit ...
    gain = table.combined[table.names.index("GetRestaurants")] - table.raw[table.names.index("GetRestaurants")]
    assert 9.5 < gain < 10  # ... but the rare name gains at most 10 nats (13.5 unsmoothed)


def test_calibration_file_round_trips_and_follows_the_model_file(tmp_path):
    from prefcall.engine.base import EngineInfo
    from prefcall.strategies.fnctod import CalibrationFile

    model = tmp_path / "m.gguf"
    model.write_bytes(b"weights")
    info = EngineInfo(model_path=str(model), model_name="m", backend="cpu", n_ctx=512, n_gpu_layers=0)
    key = ("public", "nlsi", "sha-of-content", True)
    first = CalibrationFile(tmp_path / "data", info, key)
    assert first.read() is None
    first.write([-1.5, -2.0])
    assert CalibrationFile(tmp_path / "data", info, key).read() == [-1.5, -2.0]
    assert CalibrationFile(tmp_path / "data", info, (*key[:3], False)).read() is None  # another candidate set
    model.write_bytes(b"other weights")  # a replaced model file is another model
    assert CalibrationFile(tmp_path / "data", info, key).read() is None
    again = CalibrationFile(tmp_path / "data", info, key)
    again.write([0.0])
    again.path.write_text("{not json", encoding="utf-8")
    assert again.read() is None  # unreadable: recompute, never fail the request


def test_a_fitted_rule_ranks_the_functions_and_never_decides_that_none_fits():
    from prefcall.engine.fake import FakeEmbedder
    from prefcall.strategies.fnctod import HAND_RULE, NONE_CANDIDATE, DomainEvidence, SelectionRule

    # Class f: a name word of another function ("bus" in the request about food) makes the hand-set rule's prior
    # pick it; a rule that weighs the cosine to the descriptions picks the function the request is about.
    engine = FakeEngine(scorer=lambda prompt, candidate: 0.0)
    evidence = DomainEvidence(prior=[2.0, -1.0, -1.0, -1.0], cosines=[0.1, 0.6, 0.2, 0.1],
                              parts=[(1.0, 0.0, 0.0), (0.0, 0.5, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)])
    hand = score_functions(engine, CATALOGUE, THAI, calibration=None, evidence=evidence, rule=HAND_RULE)
    assert hand.best() == "GetBuses" and hand.fitted is None
    rule = SelectionRule(weights=[1.0, 0.2, 10.0, 0.5, 1.0, 1.0])
    fitted = score_functions(engine, CATALOGUE, THAI, calibration=None, evidence=evidence, rule=rule)
    assert fitted.best() == "GetRestaurants" and fitted.table()["GetRestaurants"]["fitted"] == 6.3
    assert fitted.features[1] == [0.0, -1.0, 0.6, 0.0, 0.5, 0.0, 0.0]  # a rule fitted before "profile" weighs it 0
    # The user's standing instructions are evidence too: a request between two functions goes to the one the
    # profile speaks of, under a rule that weighs it.
    profiled = evidence.model_copy(update={"prior": [0.0] * 4, "cosines": [0.3, 0.3, 0.3, 0.3],
                                           "parts": [(0.0, 0.0, 0.0)] * 4, "profile": [0.0, 0.0, 1.0, 0.0]})
    blind = score_functions(engine, CATALOGUE, THAI, calibration=None, evidence=profiled, rule=rule)
    told = score_functions(engine, CATALOGUE, THAI, calibration=None, evidence=profiled,
                           rule=SelectionRule(weights=[1.0, 0.2, 10.0, 0.5, 1.0, 1.0, 2.0]))
    assert told.best() == CATALOGUE.names[2] != blind.best()
    # Whether no function fits stays the hand-set rule's call (the None prior is calibrated against it).
    none = DomainEvidence(prior=[-1.0] * 4 + [5.0], cosines=[0.1, 0.6, 0.2, 0.1, 0.0], parts=[(0.0, 0.0, 0.0)] * 5)
    refused = score_functions(engine, CATALOGUE, THAI, calibration=None, evidence=none, rule=rule, allow_none=True)
    assert refused.best() == NONE_CANDIDATE
    kept = DomainEvidence(prior=[-1.0] * 4 + [-5.0], cosines=[0.1, 0.6, 0.2, 0.1, 0.0], parts=[(0.0, 0.0, 0.0)] * 5)
    chosen = score_functions(engine, CATALOGUE, THAI, calibration=None, evidence=kept, rule=rule, allow_none=True)
    assert chosen.best() == "GetRestaurants" and math.isfinite(chosen.fitted[-1])
    with pytest.raises(Exception):
        SelectionRule(weights=[1.0, 1.0])
    assert Pipeline(engine, FakeEmbedder()).selection_rule() == HAND_RULE  # no fit for this model


def test_the_conditional_logit_learns_which_evidence_names_the_function():
    import numpy as np

    from prefcall.evaluation.fit_selection import SelectionRow, accuracy, conditional_logit, fit
    from prefcall.strategies.fnctod import HAND_RULE, SelectionRule

    rng = np.random.default_rng(3)
    rows = []
    for i in range(120):  # the cosine marks the gold function; the prior often points at another one
        gold = int(rng.integers(4))
        features = rng.normal(0, 0.5, size=(4, 7))
        features[:, 2] = rng.uniform(0.1, 0.3, 4)
        features[gold, 2] += 0.3
        features[:, 1] = -1.0
        features[(gold + 1) % 4 if i % 3 else gold, 1] = 2.0
        rows.append(SelectionRow(item=str(i), source="a" if i % 2 else "b", names=list("wxyz"),
                                 features=features.tolist(), gold=gold))
    weights = conditional_logit(rows)
    assert weights[2] > 5 and accuracy(rows, SelectionRule(weights=weights)) > accuracy(rows, HAND_RULE) + 0.3
    result = fit(rows)
    assert result.fitted and result.accuracy_fitted["all"] >= result.accuracy_hand["all"]
    assert set(result.transfer) == {"a->b", "b->a"}
    assert not fit(rows[:20]).fitted  # too few items: the hand-set rule stays
    # A rule that does not travel from one source to the other is not kept: on source "b" the prior is right.
    for r in rows:
        if r.source == "b":
            r.features = [[f[0], 2.0 if i == r.gold else -1.0, 0.2, *f[3:]] for i, f in enumerate(r.features)]
    local = fit(rows)
    assert not local.fitted and "would not travel" in local.why and local.weights == HAND_RULE.weights


def test_the_stage_one_fit_does_not_learn_that_a_profile_names_the_requested_function():
    # NLSI builds every profile around the request's function. Fitted on such rows alone, the rule learns that the
    # profile decides and gives a request for another function to a function the user's instructions speak of;
    # the profile dropout fits it on copies whose profile is about other functions too.
    import numpy as np

    from prefcall.evaluation.fit_selection import (PROFILE, SelectionRow, accuracy, conditional_logit, fit,
                                                   uncovered, with_profile_dropout)
    from prefcall.strategies.fnctod import SelectionRule, profile_value

    rng = np.random.default_rng(5)
    rows = []
    for i in range(200):  # the name words point at the gold function 80% of the time; the profile always does
        gold = int(rng.integers(5))
        features = np.zeros((5, 7))
        features[:, 2] = rng.uniform(0.1, 0.3, 5)
        named = gold if rng.random() < 0.8 else int(rng.integers(5))
        features[named, 3] = 1.0
        features[gold, PROFILE] = profile_value(5, 2)
        features[(gold + 2) % 5, PROFILE] = profile_value(5, 2)
        rows.append(SelectionRow(item=str(i), source="a" if i % 2 else "b", names=list("vwxyz"),
                                 features=features.tolist(), gold=gold))
    copy = uncovered(rows[0])
    assert copy.features[rows[0].gold][PROFILE] == 0.0
    assert sorted(f[PROFILE] for f in copy.features) == [0.0, 0.0, 0.0, profile_value(5, 2), profile_value(5, 2)]
    assert uncovered(rows[0]).features == copy.features and rows[0].features[rows[0].gold][PROFILE] > 0.0
    assert len(with_profile_dropout(rows, 0.0)) == 200 and 200 < len(with_profile_dropout(rows, 0.25)) < 300
    shifted = [uncovered(r, "report") for r in rows]
    naive = SelectionRule(weights=conditional_logit(rows))
    result = fit(rows)
    robust = SelectionRule(weights=result.weights)
    assert result.fitted and result.profile_dropout == 0.25
    assert robust.weights[PROFILE] < naive.weights[PROFILE] / 2
    assert accuracy(shifted, robust) > accuracy(shifted, naive) + 0.2
    assert result.accuracy_uncovered_fitted["all"] == round(accuracy(shifted, robust), 4)
    assert result.accuracy_fitted["all"] >= 0.8  # as the name words alone read the rows as collected


def test_a_request_names_a_function_through_another_form_of_its_words_and_the_model_tells_two_named_ones_apart():
    # Class f: "Remind me to call my mother" names SetReminder ("remind" / "reminder") as much as CallContact
    # ("call"): the domain prior stays flat and the model's reading of the request decides.
    from prefcall.retrieval.text import stem

    assert [stem(w) for w in ("remind", "reminder", "reserve", "reservation", "rental", "booking")] == \
        ["remind", "remind", "reserv", "reserv", "rent", "book"]
    assert [stem(w) for w in ("news", "need", "water")] == ["news", "need", "water"]  # short words stay whole
    obj = {"type": "object", "properties": {"text": {"type": "string"}}}
    catalogue = Catalogue(name="r", functions=[
        Function(name="SetReminder", description="Create a reminder at a time.", parameters=obj),
        Function(name="CallContact", description="Phone call to one of the user's contacts.", parameters=obj)])
    dialogue = "User: Remind me to call my mother."
    assert domain_log_prior(catalogue, dialogue) == [0.0, 0.0]
    engine = FakeEngine(scorer=lambda prompt, c: (0.7 if c == " SetReminder" else -2.2) if "mother" in prompt else
                        -1.0)
    out = select_by_score(engine, catalogue, CallingContext(dialogue=dialogue),
                          calibration=content_free_scores(engine, catalogue), use_prior=True)
    assert out.value == ["SetReminder"]
    assert domain_log_prior(catalogue, "User: Call my mother.")[1] > 0  # only one of them named: the prior says so


def test_the_calibration_floor_is_fitted_on_the_tune_rows_and_kept_only_when_it_selects_better():
    from prefcall.evaluation.fit_selection import SelectionRow, fit_floor, with_floor
    from prefcall.strategies.fnctod import CALIBRATION_FLOOR

    # A name the model never says unprompted (content-free -13) gains up to 13 nats under no floor: with the
    # hand-set floor (-10) it still wins requests for the other function (by 3.95 nats); at -5 it gains 5 and no
    # longer does, and -5 is the nearest such floor to the hand-set one.
    def row(i: int, source: str, gold: int) -> SelectionRow:
        raw = [-1.0, -5.0] if gold == 0 else [-5.5, -1.0]  # the model reads the request
        content_free = [-2.0, -13.0]
        return SelectionRow(item=f"{source}{i}", source=source, names=["Common", "Rare"],
                            features=[[0.0] * 6, [0.0] * 6], gold=gold, raw=raw, content_free=content_free)

    rows = [row(i, "a", 0) for i in range(20)] + [row(i, "b", 1) for i in range(20)]
    moved = with_floor(rows, -6.0)
    assert moved[0].features[0][0] == pytest.approx(-1.0 - math.log(math.exp(-2.0) + math.exp(-6.0)))
    found = fit_floor(rows)
    assert found.accuracy[str(CALIBRATION_FLOOR)]["a"] == 0.0 and found.accuracy[str(CALIBRATION_FLOOR)]["b"] == 1.0
    assert found.kept and found.floor == -5.0 and found.accuracy["-5.0"]["all"] == 1.0
    assert found.accuracy["-4.0"]["all"] == 1.0 and found.accuracy["-6.0"]["a"] == 0.0
    # Rows the floor does not move keep the hand-set floor, and rows without raw scores cannot be refitted.
    same = [row(i, "b", 1) for i in range(20)]
    assert not fit_floor(same).kept and fit_floor(same).floor == CALIBRATION_FLOOR
    bare = [r.model_copy(update={"raw": None}) for r in rows]
    assert not fit_floor(bare).kept and "no rows" in fit_floor(bare).why


def test_the_pipeline_bounds_the_calibration_with_the_models_fitted_floor(tmp_path):
    from model_files import FileEngine

    from prefcall.engine.fake import FakeEmbedder
    from prefcall.storage import fits
    from prefcall.strategies.fnctod import CALIBRATION_FLOOR

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF fake weights")
    engine = FileEngine(model)
    data = tmp_path / "data"
    assert Pipeline(engine, FakeEmbedder(), data_dir=data).calibration_floor() == CALIBRATION_FLOOR
    fits.save(fits.Fit(fingerprint=fits.engine_fingerprint(engine, data) or "", calibration_floor=-6.0),
              data / fits.FITS_DIR)
    pipeline = Pipeline(engine, FakeEmbedder(), data_dir=data)
    assert pipeline.calibration_floor() == -6.0
    scores = pipeline.stage_one("User: Thai food in Oakland please", CATALOGUE, get_config("full")).usage
    assert scores.calibration == pytest.approx(smoothed(scores.content_free, -6.0))


def test_a_chain_names_its_target_by_a_word_of_the_target_s_own_name():
    """"Green Basket is also fine for grocery orders" is no chain to OrderFood: "orders" is a word of the grocery
    function's own name. "I prefer pickup in store" names no function, though a description mentions a store.
    "also check parking" chains to ReserveParking."""
    def function(name: str, description: str) -> Function:
        return Function(name=name, description=description, parameters={"type": "object", "properties": {}})

    catalogue = Catalogue(name="errands", functions=[
        function("OrderGroceries", "Order groceries from a store for delivery."),
        function("OrderFood", "Order food from a restaurant."),
        function("RefillPrescription", "Refill a prescription at a pharmacy."),
        function("ReserveParking", "Reserve a parking spot."),
        function("BookFitnessClass", "Book a class at a gym.")])
    assert chained_functions(catalogue, ["Green Basket is also fine for grocery orders."], ["OrderGroceries"]) == [
        "OrderGroceries"]
    assert chained_functions(catalogue, ["When I refill a prescription, I want pickup in store too."],
                             ["RefillPrescription"]) == ["RefillPrescription"]
    assert chained_functions(catalogue, ["If I ask for Fitness Classes, also check parking."],
                             ["BookFitnessClass"]) == ["BookFitnessClass", "ReserveParking"]
    assert chained_functions(catalogue, ["Whenever I order groceries, also order food."],
                             ["OrderGroceries"]) == ["OrderGroceries", "OrderFood"]


def test_the_profile_feature_marks_the_functions_the_users_instructions_speak_of():
    from prefcall.strategies.fnctod import domain_evidence

    profile = ["If I ask for Hotels, my preferred hotel is the Ritz.", "When I take a bus, I like the window seat."]
    found = domain_evidence(CATALOGUE, "User: anything fun to do in Chicago?", profile=profile)
    # two of the four functions spoken of: each log(4 / 2)
    assert dict(zip(CATALOGUE.names, found.profile)) == {"GetBuses": math.log(2), "GetRestaurants": 0.0,
                                                         "GetTravel": 0.0, "GetHotels": math.log(2)}
    assert domain_evidence(CATALOGUE, "User: anything fun to do in Chicago?").profile == [0.0] * 4


def test_a_profile_that_speaks_of_more_of_the_catalogue_says_less_of_each_function():
    # A user with an instruction for every tool of theirs says nothing of which one they ask for now; one with a
    # single instruction points at that function (the hand-written set's users speak of 8 of 13 functions).
    from prefcall.strategies.fnctod import domain_evidence

    request = "User: anything fun to do in Chicago?"
    one = domain_evidence(CATALOGUE, request, profile=["When I take a bus, I like the window seat."])
    three = domain_evidence(CATALOGUE, request, profile=["When I take a bus, I like the window seat.",
                                                         "If I ask for Hotels, my preferred hotel is the Ritz.",
                                                         "For restaurants I like Thai food."])
    every = domain_evidence(CATALOGUE, request, profile=["When I take a bus, I like the window seat.",
                                                         "If I ask for Hotels, my preferred hotel is the Ritz.",
                                                         "For restaurants I like Thai food.",
                                                         "When I travel, I like museums."])
    buses = CATALOGUE.names.index("GetBuses")
    assert one.profile[buses] == pytest.approx(math.log(4))
    assert 0.0 < three.profile[buses] < one.profile[buses] and sum(v > 0 for v in three.profile) == 3
    assert every.profile == [0.0] * 4  # spoken of alike, no function is told apart


def test_parse_gives_stage_one_the_whole_profile_not_only_the_instructions_selected(monkeypatch):
    from prefcall.engine.fake import FakeEmbedder
    from prefcall.strategies import fnctod
    from prefcall.strategies.pipeline_models import get_config

    seen = []
    real = fnctod.select_by_score

    def spy(engine, catalogue, ctx, **kwargs):
        seen.append(list(ctx.profile))
        return real(engine, catalogue, ctx, **kwargs)

    monkeypatch.setattr(fnctod, "select_by_score", spy)
    profile = ["If I ask for Hotels, my preferred hotel is the Ritz.", "When I take a bus, I like the window seat."]
    pipeline = Pipeline(FakeEngine(scorer=lambda prompt, candidate: 0.0), FakeEmbedder())
    pipeline.parse(THAI, profile, CATALOGUE, get_config("full"))
    assert seen == [profile]
    staged = pipeline.stage_one(THAI, CATALOGUE, get_config("full"), profile=profile[:1]).usage
    assert [f[-1] for f in staged.features] == [0.0, 0.0, 0.0, math.log(4)]  # one of four functions spoken of
