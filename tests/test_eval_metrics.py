"""Hand-computed cases for the metrics the evaluation harness owns: NLSI calls, TAPS tags, SGD DST."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefcall.evaluation.metrics.calls import load_aliases, normalise_value, score_calls, score_selection
from prefcall.evaluation.metrics.dst import score_turn
from prefcall.evaluation.metrics.f1 import set_prf
from prefcall.evaluation.metrics.tags import read_tags, score_tags, span_metrics
from prefcall.evaluation.plots import gate_f1_at_thresholds, pearson
from prefcall.schemas.calls import parse_call
from prefcall.schemas.model import Call

ALIASES = {"san fran": "sfo", "san francisco": "sfo", "sf": "sfo", "new york, ny": "nyc", "new york ny": "nyc"}


def call(text: str) -> Call:
    return parse_call(text)


# -- value normalisation ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  Ethiopian ", "ethiopian"),
        ("Rock-n-Roll!", "rocknroll"),
        ("mariners versus rangers", "mariners vs rangers"),
        ("San  Fran", "sfo"),  # whitespace collapsed, then aliased
        ("San Francisco", "sfo"),
        ("New York, NY", "nyc"),
        (True, "true"),
    ],
)
def test_normalise_value(raw, expected):
    assert normalise_value(raw, ALIASES) == expected


def test_city_aliases_from_the_taps_file(shared_data: Path):
    aliases = load_aliases(shared_data / "taps" / "locations.json")
    assert normalise_value("Sydney, Australia", aliases) == normalise_value("SYD", aliases) == "syd"
    # keys with leading spaces and punctuation still match
    assert normalise_value("Atlanta, GA", aliases) == "atl"


# -- call metrics ----------------------------------------------------------------------------------------
def test_perfect_match_despite_case_punctuation_and_alias():
    gold = [call('GetRestaurants(city="San Fran", cuisine="Ethiopian")')]
    pred = [call('GetRestaurants(cuisine="ethiopian.", city="San Francisco")')]
    scores = score_calls(pred, gold, ALIASES)
    assert scores["exact_match"] == 1.0 and scores["slot_f1"] == 1.0


def test_partial_triples_hand_computed():
    gold = [call('GetEvents(city="Seattle", category="Music", date="today")')]
    pred = [call('GetEvents(city="seattle", category="Sports")')]
    scores = score_calls(pred, gold, {})
    # tp = 1 (city); precision 1/2, recall 1/3, F1 = 2*(1/2)(1/3)/(1/2+1/3) = 0.4
    assert scores["slot_precision"] == pytest.approx(0.5)
    assert scores["slot_recall"] == pytest.approx(1 / 3)
    assert scores["slot_f1"] == pytest.approx(0.4)
    assert scores["exact_match"] == 0.0


def test_event_type_and_subcategory_unified_and_any_dropped():
    gold = [call('GetEvents(event_type="Music", city="any")')]
    pred = [call('GetEvents(category="music")')]
    assert score_calls(pred, gold, {})["exact_match"] == 1.0


def test_empty_prediction_against_gold_scores_zero():
    gold = [call('GetHotels(location="Paris")')]
    scores = score_calls([], gold, {})
    assert scores["slot_f1"] == 0.0 and scores["exact_match"] == 0.0 and scores["n_gold"] == 1.0


def test_empty_gold_and_empty_prediction_is_perfect_but_extra_call_is_not():
    assert score_calls([], [], {})["exact_match"] == 1.0
    assert score_calls([], [], {})["slot_f1"] == 1.0
    extra = score_calls([call('GetHotels(location="Paris")')], [], {})
    assert extra["exact_match"] == 0.0 and extra["slot_precision"] == 0.0


def test_duplicate_call_breaks_exact_match_but_not_set_f1():
    gold = [call('GetHotels(location="Paris")')]
    pred = gold + gold
    scores = score_calls(pred, gold, {})
    assert scores["exact_match"] == 0.0  # multiset of calls differs (TAPS: number of calls differs)
    assert scores["slot_f1"] == 1.0  # triples are compared as sets, as TAPS does


def test_two_calls_order_free():
    gold = [call('GetEvents(city="Oakland")'), call('GetRestaurants(cuisine="Thai")')]
    pred = list(reversed(gold))
    assert score_calls(pred, gold, {})["exact_match"] == 1.0


def test_function_name_counts_in_triples():
    gold = [call('GetHotels(location="Paris")')]
    pred = [call('GetHouseStays(location="Paris")')]
    scores = score_calls(pred, gold, {})
    assert scores["slot_f1"] == 0.0 and scores["function_f1"] == 0.0


def test_set_prf_degenerate_cases():
    assert set_prf(set(), set()) == (1.0, 1.0, 1.0)
    assert set_prf({1}, set()) == (0.0, 0.0, 0.0)
    assert set_prf(set(), {1}) == (0.0, 0.0, 0.0)
    assert set_prf({1, 2}, {2, 3, 4}) == pytest.approx((0.5, 1 / 3, 0.4))


def test_selection_scores_normalise_trailing_period():
    scores = score_selection(["If I ask for Events, my city is NYC."], ["if I ask for events, my city is NYC", "x"])
    assert scores["selection_precision"] == 1.0 and scores["selection_recall"] == 0.5


# -- tags ------------------------------------------------------------------------------------------------
GOLD_TAG = "[IN:GET_EVENTS If I ask for events, I like [SL:CATEGORY Music ] in [SL:CITY New York ]. ]"


def test_tag_parse_spans_and_intents():
    parsed = read_tags(GOLD_TAG)
    assert parsed.valid and parsed.intents == ["GET_EVENTS"]
    assert sorted(parsed.spans) == [("CATEGORY", "music"), ("CITY", "new york")]


@pytest.mark.parametrize(
    "bad",
    ["[IN:GET_EVENTS unclosed [SL:CITY Paris ]", "plain text, no tags", "[SL:CITY Paris ]", "oops ] [IN:X y ]"],
)
def test_invalid_tags_are_invalid(bad):
    assert not read_tags(bad).valid


def test_space_after_label_colon_in_gold_is_tolerated():
    assert read_tags("[IN:GET_EVENTS for [SL: CITY Portland ] ]").spans == [("CITY", "portland")]


def test_score_tags_item_level():
    pred = read_tags("[IN:GET_EVENTS If I ask for events, I like [SL:CATEGORY music ] in New York. ]")
    scores = score_tags(pred, read_tags(GOLD_TAG))
    # tp 1, pred 1, gold 2 -> P 1, R 0.5, F1 2/3
    assert scores["span_f1"] == pytest.approx(2 / 3)
    assert scores["action_accuracy"] == 1.0 and scores["valid"] == 1.0


def test_invalid_prediction_scores_zero_and_wrong_action():
    scores = score_tags(read_tags("[IN:GET_EVENTS broken"), read_tags(GOLD_TAG))
    assert scores == {"action_accuracy": 0.0, "span_f1": 0.0, "valid": 0.0}


def test_span_metrics_macro_over_slot_labels():
    gold_a = read_tags("[IN:A x [SL:CITY Paris ] [SL:CUISINE Thai ] ]")
    pred_a = read_tags("[IN:A x [SL:CITY Paris ] [SL:CUISINE Lao ] ]")
    gold_b = read_tags("[IN:A y [SL:CITY Rome ] ]")
    pred_b = read_tags("[IN:A y [SL:CITY Rome ] ]")
    metrics = span_metrics([(pred_a, gold_a), (pred_b, gold_b)])
    # CITY: tp 2/2 -> F1 1; CUISINE: tp 0, pred 1, gold 1 -> F1 0; macro = 0.5; micro: tp 2, pred 3, gold 3 -> 2/3
    assert metrics["span_f1"] == pytest.approx(0.5)
    assert metrics["span_micro_f1"] == pytest.approx(2 / 3)
    assert metrics["per_slot"]["CITY"]["support"] == 2


def test_span_metrics_nothing_to_find_is_perfect():
    empty = read_tags("[IN:GET_HOTELS also check hotels ]")
    assert span_metrics([(empty, empty)])["span_f1"] == 1.0


# -- DST -------------------------------------------------------------------------------------------------
GOLD_STATE = {"Restaurants_2": {"intent": "ReserveRestaurant",
                                "slots": {"time": ["11:30 am", "half past 11"], "number_of_seats": ["2"]}}}


def test_jga_accepts_any_listed_value():
    pred = {"Restaurants_2": {"intent": "ReserveRestaurant", "slots": {"time": "Half past 11", "number_of_seats": "2"}}}
    scores = score_turn(pred, GOLD_STATE)
    assert scores["joint_goal_accuracy"] == 1.0 and scores["slot_f1"] == 1.0 and scores["intent_accuracy"] == 1.0


def test_jga_fails_on_extra_or_missing_slot_and_f1_is_partial():
    pred = {"Restaurants_2": {"intent": "ReserveRestaurant", "slots": {"time": "11:30 am", "location": "Paris"}}}
    scores = score_turn(pred, GOLD_STATE)
    assert scores["joint_goal_accuracy"] == 0.0
    # tp 1, pred 2, gold 2 -> 0.5
    assert scores["slot_f1"] == pytest.approx(0.5)


def test_wrong_intent_and_empty_turns():
    pred = {"Restaurants_2": {"intent": "FindRestaurants", "slots": {"time": "11:30 am", "number_of_seats": "2"}}}
    assert score_turn(pred, GOLD_STATE)["intent_accuracy"] == 0.0
    assert score_turn(pred, GOLD_STATE)["joint_goal_accuracy"] == 1.0  # JGA is about slots only
    none_gold = {"Restaurants_2": {"intent": "NONE", "slots": {}}}
    assert score_turn({}, none_gold)["joint_goal_accuracy"] == 1.0
    assert score_turn({}, none_gold)["slot_f1"] == 1.0
    assert score_turn({}, GOLD_STATE)["joint_goal_accuracy"] == 0.0


# -- analysis helpers ------------------------------------------------------------------------------------
def test_pearson_and_gate_curve():
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 1, 1], [1, 2, 3]) is None
    # gate uses the tagged answer when confidence > threshold
    f1s = gate_f1_at_thresholds([0.1, 0.9], [1.0, 0.0], [0.0, 1.0], [0.0, 0.5, 1.0])
    assert f1s == pytest.approx([0.5, 1.0, 0.5])


def test_every_nlsi_gold_call_parses(shared_data: Path):
    rows = json.loads((shared_data / "nlsi" / "dev.json").read_text())
    calls = [parse_call(c) for row in rows for c in row["api_calls"]]
    assert len(calls) == 410 and all(c.name.startswith("Get") for c in calls)


# -- gold typos aliased to the schema's names (ours, documented in metrics/calls.py) ---------------------------
def test_gold_typo_getdenists_scores_a_schema_correct_prediction_right():
    gold = [call('GetDenists(city="Danville", dentist_name="Craig Wilson Msd")')]
    predicted = [call('GetDentists(city="Danville", dentist_name="Craig Wilson Msd")')]
    scores = score_calls(predicted, gold)
    assert scores["exact_match"] == 1.0 and scores["slot_f1"] == 1.0 and scores["function_f1"] == 1.0
    literal = score_calls(predicted, gold, schema_aliases=False)
    assert literal["exact_match"] == 0.0 and literal["slot_f1"] == 0.0
    # Applied to both sides: the typo in a prediction is not punished either, other names stay apart.
    assert score_calls(gold, predicted)["exact_match"] == 1.0
    assert score_calls([call('GetDoctors(city="Danville")')], [call('GetDenists(city="Danville")')])["slot_f1"] == 0.0


def test_gold_argument_names_of_older_sgd_versions_are_aliased_per_function():
    gold = [call('GetEvents(category="Music", city_of_event="NYC")')]
    assert score_calls([call('GetEvents(event_type="Music", city="NYC")')], gold)["exact_match"] == 1.0
    cars = [call('GetRentalCars(pickup_city="London", type="Standard")')]
    assert score_calls([call('GetRentalCars(pickup_city="London", car_type="Standard")')], cars)["slot_f1"] == 1.0
    # `type` is only an alias for rental cars: GetDoctors keeps its own `type` argument.
    doctors = [call('GetDoctors(type="Dermatologist")')]
    assert score_calls([call('GetDoctors(car_type="Dermatologist")')], doctors)["slot_f1"] == 0.0
