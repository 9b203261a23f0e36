"""The composed pipeline with fakes: named configs, instruction selection, demos, every tagging mode
(the gate's both branches), post-checks, traces and explicit parse errors."""

from __future__ import annotations

import pytest

from prefcall.engine.fake import FakeEmbedder, FakeEngine, render_fake
from prefcall.errors import ValidationError
from prefcall.schemas.model import Call, Catalogue, Function
from prefcall.storage.demos import Demonstration, DemoStore
from prefcall.strategies.pipeline import Pipeline, merge_tag_slots
from prefcall.strategies.pipeline_models import CONFIGS, get_config
from prefcall.strategies.taps_tagger import TagResult
from prefcall.tagging.tags import SlotFill, TaggedInstruction

CATALOGUE = Catalogue(name="t", functions=[
    Function(name="GetRestaurants", description="finding restaurants", parameters={"type": "object", "properties": {
        "city": {"type": "string"}, "cuisine": {"type": "string"}}}),
    Function(name="GetBanks", description="banking", parameters={"type": "object", "properties": {
        "recipient_account_type": {"type": "string", "enum": ["checking", "savings"]}, "amount": {"type": "string"}},
        "required": ["amount"]}),
])
DIALOGUE = "User: I want Ethiopian food at a restaurant."
CITY = "If I'm looking for Restaurants, my go-to city is San Fran."
BANK = "If I ask for Banks, my preferred account type is checking"
TAGGED_CITY = "[IN:GET_RESTAURANTS If I'm looking for Restaurants, my go-to city is [SL:CITY San Fran ]. ]"


def engine(args: str = '[{"cuisine": "Ethiopian"}]', *, logprob: float = -0.01, tagged_args: str | None = None,
           tagger: str = TAGGED_CITY) -> FakeEngine:
    fake = FakeEngine()
    fake.reply(tagger, when="You tag")
    fake.reply('["GetRestaurants"]', when="Functions:\nGetRestaurants - ")
    fake.reply(tagged_args or '[{"city": "San Fran", "cuisine": "Ethiopian"}]', when="- [IN:GET_RESTAURANTS")
    fake.reply(args, when="Calls for GetRestaurants:", logprob=logprob)
    return fake


def kinds(fake: FakeEngine) -> list[str]:
    out = []
    for prompt in fake.prompts:
        out.append("tag" if "You tag" in prompt else "select" if "Functions:\nGetRestaurants - " in prompt
                   else "args-tagged" if "- [IN:" in prompt else "args")
    return out


def test_configs_and_overrides():
    assert set(CONFIGS) == {"default", "ext-tag", "joint-tag", "taps", "fnctod-full", "full"}
    assert get_config("taps", gate_threshold=0.3).gate_threshold == 0.3
    assert CONFIGS["taps"].gate_threshold is None  # overrides never touch the shared config
    with pytest.raises(ValidationError, match="default, ext-tag, joint-tag, taps, fnctod-full, full"):
        get_config("fastest")
    with pytest.raises(ValidationError):
        get_config("full", n_demos=-1)
    with pytest.raises(ValidationError):
        get_config("full", no_such_field=1)


def test_default_config_with_applicable_instructions():
    fake = engine()
    result = Pipeline(fake).parse(DIALOGUE, [CITY, BANK], CATALOGUE, get_config("default", two_stage=True), applicable=[CITY])
    assert result.status == "ok" and result.decision == "call"
    assert result.calls == [Call(name="GetRestaurants", arguments={"cuisine": "Ethiopian"})]
    assert result.instructions_used == [CITY] and BANK not in fake.prompts[-1]
    assert kinds(fake) == ["select", "args"] and not result.tagged and not result.gate_fired
    t = result.trace
    assert t.model_calls == 2 and t.prompt_tokens == t.evaluated + t.reused and t.completion_tokens > 0
    assert {"generate", "total"} <= set(t.timings)


def test_gate_fires_on_uncertain_calls_and_regenerates_with_tags():
    fake = engine(logprob=-2.0)  # least confidence 1 - e^-2 = 0.86
    result = Pipeline(fake).parse(DIALOGUE, [CITY], CATALOGUE, get_config("taps", two_stage=True, gate_threshold=0.5))
    assert result.gate_fired and result.tagged
    assert kinds(fake) == ["select", "args", "tag", "select", "args-tagged"]
    assert result.calls == [Call(name="GetRestaurants", arguments={"cuisine": "Ethiopian", "city": "San Fran"})]
    assert result.least_confidence == pytest.approx(0.8647, abs=1e-3)
    assert result.tags[0].status == "ok" and len(result.raw) == 4  # both passes' raw outputs kept
    assert "regenerate_tagged" in result.trace.timings and result.trace.model_calls == 5


def test_gate_does_not_fire_on_confident_calls():
    fake = engine(logprob=-0.01)
    result = Pipeline(fake).parse(DIALOGUE, [CITY], CATALOGUE, get_config("taps", two_stage=True, gate_threshold=0.5))
    assert not result.gate_fired and not result.tagged and kinds(fake) == ["select", "args"]
    assert result.gate_threshold == 0.5 and result.confidence > 0.98


def test_gate_uses_stored_calibration_when_no_threshold_given(tmp_path):
    from prefcall.strategies.taps_gate import GateCalibration, save_calibration

    save_calibration(tmp_path, GateCalibration(model="fake", measure="least_confidence", threshold=0.9, f1=1, fire_rate=0,
                                                 n_items=1, f1_never=1, f1_always=0))
    result = Pipeline(engine(logprob=-2.0), data_dir=tmp_path).parse(DIALOGUE, [CITY], CATALOGUE, get_config("taps"))
    assert result.gate_threshold == 0.9 and not result.gate_fired


def test_a_threshold_calibrated_on_renormalised_logprobs_is_not_applied_to_raw_ones(tmp_path):
    # A llama.cpp server reports raw logprobs; the threshold measured in-process (renormalised over what the
    # grammar allowed) would fire on other requests there: the gate is off, and the result says why in one line.
    from dataclasses import replace

    from prefcall.engine.base import Capabilities
    from prefcall.strategies.taps_gate import GateCalibration, save_calibration

    save_calibration(tmp_path, GateCalibration(model="fake", measure="least_confidence", threshold=0.5, f1=1,
                                               fire_rate=0, n_items=1, f1_never=1, f1_always=0))
    raw = engine(logprob=-2.0)  # least confidence 0.86: over the threshold
    raw.capabilities = replace(Capabilities(), renormalised_logprobs=False)
    result = Pipeline(raw, data_dir=tmp_path).parse(DIALOGUE, [CITY], CATALOGUE, get_config("taps"))
    assert not result.gate_fired and not result.tagged
    assert any(n.startswith("TAPS gate off: its threshold was calibrated on renormalised logprobs") for n in
               result.notes) and all("\n" not in n for n in result.notes)
    fired = Pipeline(engine(logprob=-2.0), data_dir=tmp_path).parse(DIALOGUE, [CITY], CATALOGUE, get_config("taps"))
    assert fired.gate_fired  # the same calibration on an engine of its kind fires


def test_invalid_tagging_is_not_used_and_is_reported():
    fake = engine(logprob=-2.0, tagger="[IN:GET_RESTAURANTS If I'm looking for Restaurants, [SL:CITY San Fran ]. ]")
    result = Pipeline(fake).parse(DIALOGUE, [CITY], CATALOGUE, get_config("taps", gate_threshold=0.1))
    assert result.gate_fired and not result.tagged  # nothing valid to regenerate with
    assert result.tags[0].status == "invalid" and any("tagging" in e for e in result.errors)
    assert "args-tagged" not in kinds(fake)


def test_ext_tag_always_tags_and_caches_tags():
    fake = engine()
    pipeline = Pipeline(fake)
    first = pipeline.parse(DIALOGUE, [CITY], CATALOGUE, get_config("ext-tag"))
    assert first.tagged and kinds(fake) == ["tag", "select", "args-tagged"]
    pipeline.parse(DIALOGUE, [CITY], CATALOGUE, get_config("ext-tag"))
    assert kinds(fake).count("tag") == 1  # second request reused the cached tags


def test_pre_tagged_instructions_skip_the_tagger_but_are_validated():
    fake = engine()
    good = TaggedInstruction(instruction=CITY, tagged=TAGGED_CITY, status="ok")
    result = Pipeline(fake).parse(DIALOGUE, [good], CATALOGUE, get_config("ext-tag"))
    assert "tag" not in kinds(fake) and result.tagged
    bad = TaggedInstruction(instruction=CITY, tagged="[IN:GET_FLIGHTS " + CITY + " ]", status="ok")
    result = Pipeline(engine()).parse(DIALOGUE, [bad], CATALOGUE, get_config("ext-tag"))
    assert result.tags[0].status == "invalid" and any("unknown API" in e for e in result.errors)


def test_joint_tag_generates_tags_and_calls_in_one_pass():
    fake = FakeEngine()
    fake.reply('["GetRestaurants"]', when="Functions:\nGetRestaurants - ")
    fake.reply('{"tags": ["' + TAGGED_CITY + '"], "calls": [{"city": "San Fran"}]}', when="Calls for GetRestaurants:")
    result = Pipeline(fake).parse(DIALOGUE, [CITY], CATALOGUE, get_config("joint-tag", two_stage=True))
    assert result.calls == [Call(name="GetRestaurants", arguments={"city": "San Fran"})]
    assert result.tagged and result.tags[0].status == "ok" and "tags" in str(fake.calls[1]["json_schema"])


def test_full_config_uses_demos_with_leave_one_out_selection_and_post_checks():
    store = DemoStore(None)
    store.add_many([Demonstration(id="7", dialogue="User: Ethiopian food at a restaurant", instructions=[CITY], catalogue="t",
                                  calls=[Call(name="GetRestaurants", arguments={"cuisine": "Ethiopian"})]),
                    Demonstration(id="8", dialogue="User: a restaurant for Thai food", instructions=[], catalogue="t",
                                  calls=[Call(name="GetRestaurants", arguments={"cuisine": "Thai"})])])
    fake = engine(args='[{"cuisine": "Ethiopian"}]', logprob=-0.01)
    result = Pipeline(fake, FakeEmbedder(), store).parse(
        DIALOGUE, [CITY, BANK], CATALOGUE, get_config("fnctod-full", gate_threshold=0.5), exclude_demo_ids={"7"})
    assert result.demos == ["8"] and "Thai food" in fake.prompts[-1]
    assert result.instructions_used == [CITY]  # the banking instruction is about another domain
    assert result.decision == "call"


def test_missing_required_argument_makes_the_decision_ask():
    fake = FakeEngine()
    fake.reply('["GetBanks"]', when="Functions:\nGetRestaurants - ")
    fake.reply('[{"recipient_account_type": "checking"}]', when="Calls for GetBanks:")
    result = Pipeline(fake).parse("User: send money", [BANK], CATALOGUE, get_config("default", post_check=True))
    assert result.decision == "ask" and result.missing[0].argument == "amount" and "amount" in result.question


def test_parse_error_is_explicit():
    fake = FakeEngine()
    fake.reply('["GetRestaurants"]', when="Functions:\nGetRestaurants - ")
    original = fake.generate

    def cut(prompt, **kwargs):
        if "Calls for GetRestaurants:" in render_fake(prompt):
            kwargs["json_schema"] = None
        return original(prompt, **kwargs)

    fake.reply('[{"city": "San', when="Calls for GetRestaurants:")
    fake.generate = cut
    result = Pipeline(fake).parse(DIALOGUE, [CITY], CATALOGUE, get_config("default"))
    assert result.status == "parse_error" and result.calls == [] and '[{"city": "San' in result.raw


def test_one_stage_with_instruction_selection_and_merge():
    fake = FakeEngine().reply('[{"name": "GetRestaurants", "arguments": {"cuisine": "Ethiopian"}}]')
    config = get_config("default", two_stage=False, select_instructions=True)
    result = Pipeline(fake).parse(DIALOGUE, [CITY, BANK], CATALOGUE, config)
    assert result.calls[0].name == "GetRestaurants" and result.trace.model_calls == 1
    # The selector (no embedder: lexical evidence) keeps the restaurant instruction and drops the banking one,
    # and only the kept one reaches the prompt.
    assert result.instructions_used == [CITY]
    assert CITY in fake.prompts[0] and BANK not in fake.prompts[0]
    tag = TagResult(instruction=CITY, status="ok", triples=[SlotFill(function="GetRestaurants", slot="city", value="SF")])
    merged = merge_tag_slots([Call(name="GetRestaurants", arguments={"city": "Oakland", "cuisine": "Thai"}),
                              Call(name="GetRestaurants", arguments={})], [tag])
    assert merged[0].arguments["city"] == "Oakland" and merged[1].arguments == {"city": "SF"}


def test_record_variants_runs_tagged_pass_without_using_it():
    fake = engine(logprob=-0.01)
    result = Pipeline(fake).parse(DIALOGUE, [CITY], CATALOGUE,
                                  get_config("taps", two_stage=True, gate_threshold=0.5, record_variants=True))
    assert not result.gate_fired and not result.tagged
    assert result.calls == result.variants["untagged"] != result.variants["tagged"]
    assert result.variants["tagged"][0].arguments["city"] == "San Fran"
