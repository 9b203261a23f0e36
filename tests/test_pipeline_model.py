"""The real embedded model through the pipeline (few and small: SmolLM2-135M on CPU)."""

from __future__ import annotations

import jsonschema
import pytest

from prefcall.schemas.registry import builtin_catalogue
from prefcall.schemas.render import arguments_schema
from prefcall.strategies.pipeline import Pipeline, get_config
from prefcall.strategies.taps_tagger import tag_instruction


@pytest.mark.model
def test_full_pipeline_calls_validate_against_the_catalogue(real_engine, real_embedder):
    catalogue = builtin_catalogue("nlsi")
    result = Pipeline(real_engine, real_embedder).parse(
        "User: I'm looking for a spot to grab some grub. I definitely want Ethiopian food.",
        ["If I'm looking for Restaurants, my go-to city is San Fran.", "If I ask for Banks, my preferred account type is checking"],
        catalogue, get_config("full", use_demos=False, gate_threshold=1.0),
    )
    assert result.status == "ok" and result.decision in ("call", "ask") and result.calls
    for call in result.calls:
        function = catalogue.function(call.name)
        assert function is not None
        jsonschema.validate(call.arguments, arguments_schema(function, enforce_required=False))
    assert result.trace.model_calls >= 2 and result.trace.prompt_tokens > 0


@pytest.mark.model
def test_tagger_output_is_either_valid_or_explicitly_invalid(real_engine):
    catalogue = builtin_catalogue("nlsi")
    result = tag_instruction(real_engine, "If I ask for Restaurants, my preferred city is Oakland.", catalogue, k=3)
    assert result.status in ("ok", "invalid")
    assert (result.status == "ok") == (result.reasons == []) and result.completion_tokens > 0
