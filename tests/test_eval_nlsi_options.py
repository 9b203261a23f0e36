"""`--function-selection` on nlsi/dst evals overrides the named pipeline config's stage 1."""

from __future__ import annotations

import argparse

from prefcall.evaluation.tasks.nlsi import add_function_selection_option, config_overrides
from prefcall.strategies.pipeline_models import get_config


def test_function_selection_override_reaches_the_config():
    parser = argparse.ArgumentParser()
    add_function_selection_option(parser)
    assert config_overrides(parser.parse_args([])) == {}
    args = parser.parse_args(["--function-selection", "hybrid"])
    assert get_config("taps", **config_overrides(args)).function_selection == "hybrid"
    assert get_config("taps").function_selection == "generate"
