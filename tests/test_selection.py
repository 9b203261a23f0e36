"""Standing-instruction selection: domains, conditions, chains, overrides, ranking, evaluation."""

from __future__ import annotations

import pytest

from prefcall.engine.fake import FakeEmbedder
from prefcall.evaluation.selection import evaluate_selection, nlsi_dialogue
from prefcall.schemas.registry import builtin_catalogue
from prefcall.strategies.selection import SelectionConfig, select_instructions, split_condition

NLSI = builtin_catalogue("nlsi")
PROFILE = [
    "If I ask for Restaurants, my preferred cuisine is Cantonese.",  # 0
    "If cuisine is Cantonese then look for restaurant name as Chef Zhao Kitchen",  # 1 (chain via 0)
    "If I ask for Flights, I fly Delta Airlines",  # 2
    "If I ask for Doctor, my preferred type is Dermatologist",  # 3
    "If cuisine is Sushi then look for price range as moderate",  # 4 (condition never met)
    "If I ask for Travel, then also look at Hotels",  # 5
    "If I ask for Hotels, my preferred hotel name is Novotel",  # 6
]


@pytest.mark.parametrize("embedder", [None, FakeEmbedder()])
def test_domain_and_chained_condition(embedder):
    result = select_instructions("User: Find me restaurants in Mountain View.", PROFILE, NLSI, embedder)
    assert set(result.selected_texts) == {PROFILE[0], PROFILE[1]}
    assert "GetRestaurants" in result.dialogue_domains
    by_index = {s.index: s for s in result.ranking}
    assert by_index[1].via == "chain" and by_index[0].via == "direct"
    assert by_index[4].condition == "sushi" and not by_index[4].condition_met
    assert [s.index for s in result.ranking[:2]] == sorted(s.index for s in result.selected) or len(result.ranking) == 7
    assert min(s.score for s in result.selected) > max(s.score for s in result.ranking if s.index not in {0, 1})


def test_condition_met_by_the_dialogue_itself():
    result = select_instructions("I want some sushi at a restaurant", PROFILE, NLSI)
    by_index = {s.index: s for s in result.ranking}
    assert PROFILE[4] in result.selected_texts and by_index[4].via == "direct"
    no_sushi = select_instructions("I want a restaurant", PROFILE, NLSI)
    assert PROFILE[4] not in no_sushi.selected_texts


def test_chains_pull_in_another_domain():
    result = select_instructions("Show me travel attractions in Paris", PROFILE, NLSI)
    assert PROFILE[5] in result.selected_texts and PROFILE[6] in result.selected_texts
    assert {"GetTravel", "GetHotels"} <= set(result.dialogue_domains)
    off = select_instructions("Show me travel attractions in Paris", PROFILE, NLSI, config=SelectionConfig(use_chains=False))
    assert PROFILE[6] not in off.selected_texts


def test_enum_override_drops_the_replaced_preference():
    result = select_instructions("I need a doctor, a Gynecologist please", PROFILE, NLSI)
    ranked = {s.index: s for s in result.ranking}
    assert PROFILE[3] not in result.selected_texts and ranked[3].overridden_by
    kept = select_instructions("I need a doctor", PROFILE, NLSI)
    assert PROFILE[3] in kept.selected_texts


def test_a_value_two_arguments_share_overrides_nothing_the_filler_decides_which_argument_each_side_sets():
    # Class a: "Bob's savings account" is the recipient's account; "my checking account" the sender's. Both
    # arguments have both values, so the words alone do not say that the user replaced the instruction's value.
    from prefcall.schemas.model import Catalogue, Function

    accounts = {"type": "string", "enum": ["checking", "savings"]}
    transfer = Function(name="TransferMoney", description="Transfer money from one of the user's accounts.",
                        parameters={"type": "object", "properties": {
                            "recipient_name": {"type": "string"}, "account_type": accounts,
                            "recipient_account_type": accounts}})
    catalogue = Catalogue(name="bank", functions=[transfer])
    profile = ["For transfers I always use my checking account."]
    result = select_instructions("Please transfer 200 dollars to Bob's savings account.", profile, catalogue)
    assert result.selected_texts == profile and result.ranking[0].overridden_by is None
    own = Function(name="TransferMoney", description="Transfer money from one of the user's accounts.",
                   parameters={"type": "object", "properties": {"account_type": accounts}})
    single = select_instructions("Please transfer 200 dollars from savings.", profile,
                                 Catalogue(name="bank", functions=[own]))
    assert single.selected == [] and single.ranking[0].overridden_by == "account_type 'saving'"


def test_location_override():
    profile = ["If I ask for Restaurants, my preferred city is Santa Clara", "If I ask for Restaurants, I like Thai food"]
    result = select_instructions("Do you know of any restaurants in Sunnyvale?", profile, NLSI)
    assert result.selected_texts == [profile[1]]
    same = select_instructions("Any restaurants in Santa Clara?", profile, NLSI)
    assert set(same.selected_texts) == set(profile)


def test_stated_name_overrides_name_preference():
    profile = ["If I ask for Dentist, my preferred dentist name is A-1 Dental Care"]
    result = select_instructions("Find a dentist, make sure the dentist is called Greenview Dental Care", profile, NLSI)
    assert result.selected == [] and result.ranking[0].overridden_by


def test_unrelated_dialogue_selects_nothing_and_empty_profile():
    assert select_instructions("What is the weather like?", PROFILE[:3], NLSI).selected == []
    assert select_instructions("anything", [], NLSI).ranking == []


def test_split_condition_forms():
    assert split_condition("If cuisine is Sushi then look for X")[0].strip() == "cuisine is Sushi"
    assert split_condition("Look for a moderate price if the cuisine is Thai")[0].strip() == "the cuisine is Thai"
    assert split_condition("Request Restaurants in Oakland.") == (None, "Request Restaurants in Oakland.")


def test_nlsi_dialogue_splits_turns():
    turns = nlsi_dialogue("User: I need a car.\nAgent: From when?\nUser: Tuesday")
    assert [t.role for t in turns] == ["user", "assistant", "user"]


def test_evaluate_selection_metrics():
    items = [
        {"user_utterance": "User: Find me restaurants in Oakland.", "all_standing_instructions": PROFILE,
         "applicable_standing_instructions": [PROFILE[0], PROFILE[1]]},
        {"user_utterance": "User: Book me a flight to Boston.", "all_standing_instructions": PROFILE,
         "applicable_standing_instructions": [PROFILE[2], PROFILE[3]]},
    ]
    metrics = evaluate_selection(items, FakeEmbedder(), NLSI)
    assert metrics["items"] == 2
    assert metrics["precision"] == 1.0 and metrics["recall"] == 0.75 and metrics["exact_match"] == 0.5


CHAINED = [
    "If I ask for Restaurants, my preferred cuisine is Afghan.",  # 0
    "Book the Kabul Guest House if the cuisine is Afghan.",  # 1: "House" names house stays, the condition a cuisine
    "Try the Kabul Guest House if you are looking for Afghan cuisine.",  # 2: the condition clause names the request
    "If I ask for Events, my preferred event type is Sports.",  # 3
    "If you're in the mood for Afghan food, the Kabul Guest House is the one.",  # 4: "mood", "food" name no value
]


def test_a_condition_a_selected_value_meets_chains_even_when_the_value_words_point_elsewhere():
    result = select_instructions("User: Find me restaurants in Fremont.", CHAINED, NLSI)
    ranked = {s.index: s for s in result.ranking}
    assert set(result.selected_texts) == set(CHAINED[:3]) | {CHAINED[4]}
    assert ranked[1].via == "chain" and "GetRestaurants" in ranked[1].domains
    assert ranked[4].via == "chain" and ranked[4].condition == "afghan"
    assert ranked[2].domains == ["GetRestaurants"]  # read off "looking for Afghan cuisine", not the house's name
    # Without the instruction that sets the cuisine, nothing meets the condition and nothing chains.
    alone = select_instructions("User: Find me restaurants in Fremont.", CHAINED[1:], NLSI)
    assert CHAINED[1] not in alone.selected_texts


def test_known_domains_replace_the_request_words():
    words = select_instructions("User: Anything fun going on in Fresno?", CHAINED, NLSI)
    assert CHAINED[3] not in words.selected_texts
    told = select_instructions("User: Anything fun going on in Fresno?", CHAINED, NLSI, domains=["GetEvents"])
    assert told.selected_texts == [CHAINED[3]] and told.dialogue_domains == ["GetEvents"]


def test_a_condition_that_names_the_request_by_its_function_s_verb_is_no_value_condition():
    """"Whenever I transfer money, go with my checking account": "transfer" is TransferMoney's own verb, so the
    clause says which request it is about; "Send some money to my landlord" is that request."""
    from prefcall.schemas.model import Catalogue, Function
    from prefcall.strategies.selection import DomainModel, condition_values

    transfer = Function(name="TransferMoney", description="Move money between bank accounts.", parameters={
        "type": "object", "properties": {"recipient_name": {"type": "string"},
                                         "account_type": {"enum": ["checking", "savings"]}}})
    parking = Function(name="ReserveParking", description="Reserve a parking spot.", parameters={
        "type": "object", "properties": {"location": {"type": "string"}}})
    catalogue = Catalogue(name="errands", functions=[transfer, parking])
    model = DomainModel.build(catalogue)
    def needs(instruction: str) -> list[str]:
        return condition_values(split_condition(instruction)[0] or "", model)

    assert needs("Whenever I transfer money, go with my checking account.") == []
    assert needs("If I reserve parking at the airport, I want four hours.") == ["airport"]
    instruction = "Whenever I transfer money, go with my checking account."
    chosen = select_instructions("User: Send some money to my landlord for $50.", [instruction], catalogue,
                                 FakeEmbedder())
    assert [s.text for s in chosen.selected] == [instruction]
    # In another form of the name's word too: "ordering" is order_food's "order", "reserving" ReserveParking's.
    food = Function(name="order_food", description="Order food for delivery from a restaurant.", parameters={
        "type": "object", "properties": {"restaurant": {"type": "string"}, "dish": {"type": "string"}}})
    catalogue = Catalogue(name="errands", functions=[transfer, parking, food])
    model = DomainModel.build(catalogue)
    assert needs("When ordering food, I usually get it from Golden Dragon.") == []
    assert needs("When reserving parking at the stadium, I want four hours.") == ["stadium"]
    assert needs("If I order food from Luigi's, I want the pad thai.") == ["luigi"]  # a value stays one
    instruction = "When ordering food, I usually get it from Golden Dragon."
    chosen = select_instructions("User: Order two pad thai.", [instruction], catalogue, FakeEmbedder())
    assert [s.text for s in chosen.selected] == [instruction]


def test_a_condition_naming_two_requests_is_about_the_one_it_names_first():
    """"looking for a restaurant that won't break the bank": the request's object is named first; the idiom's
    "bank" names the banking function only by accident, though "bank" is the rarer catalogue word."""
    from prefcall.schemas.model import Catalogue, Function
    from prefcall.strategies.selection import DomainModel, instruction_domains

    def function(name: str, description: str) -> Function:
        return Function(name=name, description=description,
                        parameters={"type": "object", "properties": {"city": {"type": "string"}}})

    catalogue = Catalogue(name="t", functions=[
        function("OpenBankAccount", "Open an account at a bank."),
        function("FindRestaurants", "Find a restaurant to eat at."),
        function("BookRestaurantTable", "Book a table at a restaurant."),
        function("FindDentists", "Find a dentist.")])
    model = DomainModel.build(catalogue)
    text = "If you're looking for a restaurant that won't break the bank, check out Isla Filipino Restaurant."
    assert "OpenBankAccount" not in instruction_domains(model, text, None, SelectionConfig())
    assert instruction_domains(model, "If I ask for a bank account, use savings.", None,
                               SelectionConfig()) == ["OpenBankAccount"]


def test_a_condition_that_names_a_flag_conditions_on_that_flag():
    """"if you want a unisex style": "unisex" names is_unisex, so the condition is on the flag's value (met where
    the dialogue or a selected instruction says it), not a word of the request's domain that meets nothing."""
    from prefcall.strategies.selection import DomainModel, condition_values

    profile = ["Request an unisex Salon when making your appointment.",
               "Search for the stylist name Dukes and Dolls Salon if you want a unisex style."]
    model = DomainModel.build(NLSI)
    assert "unisex" in condition_values(split_condition(profile[1])[0] or "", model)
    assert "music" not in model.flag_words  # has_live_music's "music" also names GetMusic: a domain word
    chained = select_instructions("User: Can you help me locate a salon in Milpitas?", profile, NLSI)
    assert set(chained.selected_texts) == set(profile)
    alone = select_instructions("User: Can you help me locate a salon in Milpitas?", profile[1:], NLSI)
    assert alone.selected_texts == []
    said = select_instructions("User: A unisex salon in Milpitas, please.", profile[1:], NLSI)
    assert said.selected_texts == profile[1:]


def test_an_adjective_of_nationality_after_in_is_no_place_that_the_user_s_city_overrides():
    """"I'm usually interested in Brazilian food" sets no city, so a request in San Leandro keeps it; "Request
    Restaurants located in Palo Alto" does set one, and the user's city replaces it."""
    from prefcall.strategies.selection import DomainModel, find_place

    model = DomainModel.build(NLSI)
    assert find_place("I'm usually interested in Brazilian food.", model) is None
    assert find_place("a table in Japanese style", model) is None
    assert find_place("a restaurant in Palo Alto.", model) == "Palo Alto"
    assert find_place("flights in Japan next week", model) == "Japan"
    profile = ["When I'm looking for a restaurant, I'm usually interested in Brazilian food.",
               "Request Restaurants located in Palo Alto."]
    result = select_instructions("User: Can you track down a restaurant in San Leandro?", profile, NLSI)
    assert result.selected_texts == profile[:1]


def test_a_value_a_relative_clause_asks_of_the_request_is_a_condition_and_visiting_names_the_request():
    """"a restaurant that serves Szechuan cuisine": the request, then a value it must have, which a request for
    Chinese food does not meet; "when visiting the salon" only says which request it is."""
    profile = ["If you're looking for a restaurant that serves Szechuan cuisine, try Rice Bowl.",
               "Request that your preferred stylist name be About Time Barber Shop when visiting the salon."]
    chinese = select_instructions("User: Search for a nice restaurant, and make sure it's Chinese food.", profile,
                                  NLSI)
    assert chinese.selected_texts == []
    szechuan = select_instructions("User: Find a restaurant with Szechuan cuisine.", profile, NLSI)
    assert szechuan.selected_texts == profile[:1]
    salon = select_instructions("User: Do you know a good salon in Danville?", profile, NLSI)
    assert salon.selected_texts == profile[1:]
    # An idiom in a relative clause names no value the catalogue can check: the condition only says the request.
    idiom = "If you're looking for a restaurant that won't break the bank, check out Isla Filipino Restaurant."
    assert select_instructions("User: Find me a restaurant in Fremont.", [idiom], NLSI).selected_texts == [idiom]


def test_a_word_inside_another_function_s_parameter_phrase_names_nothing_of_its_own():
    """"a place that has live music" names has_live_music of GetRestaurants; its "music" is not GetMusic's, nor the
    Music value of GetEvents' event type. "When I request Music" still names GetMusic."""
    from prefcall.strategies.selection import DomainModel, SelectionConfig, instruction_domains

    model = DomainModel.build(NLSI)
    text = "If you're in the mood for burgers, then you might like a place that has live music."
    assert instruction_domains(model, text, None, SelectionConfig()) == ["GetRestaurants"]
    assert instruction_domains(model, "When I request Music, play it through my TV.", None,
                               SelectionConfig()) == ["GetMusic"]


def _rides():
    from prefcall.schemas.model import Catalogue, Function

    seats = {"type": "string", "enum": ["standard", "premium"]}
    ferry = Function(name="BookFerry", description="Book a ferry crossing.", parameters={
        "type": "object", "properties": {"destination": {"type": "string"}, "date": {"type": "string"},
                                         "cabin": seats}})
    taxi = Function(name="BookTaxi", description="Book a taxi ride.", parameters={
        "type": "object", "properties": {"dropoff": {"type": "string"}, "passengers": {"type": "integer"},
                                         "vehicle": {"type": "string", "enum": ["standard", "xl", "premium"]}}})
    return Catalogue(name="rides", functions=[ferry, taxi])


def test_a_condition_on_one_value_is_not_met_where_the_request_states_another_value_of_that_parameter():
    """"When the request is in standard seating": a request "in premium seating" shares "seating" with it, but
    states another cabin, so only the premium instruction applies; a request naming no cabin meets neither."""
    profile = ["When the request is in premium seating, use next Monday.",
               "When the request is in standard seating, use next Friday."]
    premium = select_instructions("User: Book a ferry to Victoria in premium seating.", profile, _rides())
    assert premium.selected_texts == profile[:1]
    standard = select_instructions("User: Book a ferry to Victoria in standard seating.", profile, _rides())
    assert standard.selected_texts == profile[1:]
    plain = select_instructions("User: Book a ferry to Victoria.", profile, _rides())
    assert plain.selected_texts == []


def test_a_value_after_the_named_request_is_a_condition_but_a_word_that_names_a_request_or_is_stated_is_none():
    """"If I book a taxi in a premium car": the request (a taxi), then a value of its vehicle it must have. "Music"
    in "If I ask for Music" names the request, and "Sports" in "My preferred category when I request Events is
    Sports" is the instruction's own value: neither is a condition."""
    from prefcall.strategies.preferences import preference_from_tags
    from prefcall.strategies.selection import DomainModel, condition_values
    from prefcall.tagging.tags import parse_tags

    profile = ["If I book a taxi in a premium car, I want 1 passengers.",
               "If I book a taxi in a xl car, I want 5 passengers."]
    xl = select_instructions("User: Book a taxi to the stadium in an xl car.", profile, _rides())
    assert xl.selected_texts == profile[1:]
    assert select_instructions("User: Book a taxi to the stadium.", profile, _rides()).selected_texts == []
    tagged = preference_from_tags(profile[0], parse_tags(
        "[IN:BOOK_TAXI If I book a taxi in a [SL:VEHICLE premium ] car, I want [SL:PASSENGERS 1 ] passengers. ]"),
        _rides())
    assert tagged is not None and tagged.conditions == {"vehicle": "premium"}
    assert tagged.actions == {"passengers": ["1"]}
    model = DomainModel.build(NLSI)
    assert condition_values(split_condition("If I ask for Music, my preferred artist is Lorde.")[0] or "", model) == []
    stated = "My preferred category when I request Events is Sports."
    assert condition_values(split_condition(stated)[0] or "", model) == []
    assert select_instructions("User: Find me an event in Seattle.", [stated], NLSI).selected_texts == [stated]
