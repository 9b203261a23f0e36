"""Stage 1's per-model calibration does not let one function swallow another (issue 28, point 4).

A calibration of one function that moves (its content-free score, its prior) can turn every reservation request
into a search, and nothing else would catch it: the answers stay valid calls. This runs stage 1, as parse_request
runs it, on the first request of each SGD dialogue of the tune split (per gold function, the first few) and fails
when a function is not chosen for most of its own requests or another one takes a large share of them. The
embedded model always; other models when PREFCALL_TEST_MODELS names their files (colon-separated paths)."""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from prefcall.schemas.model import Turn

PER_FUNCTION = 8  # first requests per gold function: enough to see a swallowed function, cheap on a CPU
RIGHT_AT_LEAST = 0.6  # a function is chosen for at least this share of its own requests
TAKEN_AT_MOST = 0.4  # and no other function takes more than this share of them


def _first_requests(shared: Path) -> dict[str, list[str]]:
    """Gold function -> the first user turn with an active intent of each tune dialogue (at most PER_FUNCTION)."""
    from importlib import resources

    from prefcall.evaluation.tasks import dst

    schema_path = shared / "sgd" / "dev_schema.json"
    names = dst.function_names(dst.sgd_services(json.loads(schema_path.read_text(encoding="utf-8")), schema_path))
    splits = json.loads((resources.files("prefcall") / "data" / "splits.json").read_text(encoding="utf-8"))
    tune = set(splits["sources"]["sgd/dev_dialogues_001.json"]["tune"])
    requests: dict[str, list[str]] = defaultdict(list)
    for dialogue in json.loads((shared / "sgd" / "dev_dialogues_001.json").read_text(encoding="utf-8")):
        if dialogue["dialogue_id"] not in tune:
            continue
        item = next((i for i in dst.turn_items(dialogue, names) if i.gold["calls"]), None)
        if item is not None and len(requests[item.gold["calls"][0]["name"]]) < PER_FUNCTION:
            requests[item.gold["calls"][0]["name"]].append(item.input["dialogue"][-1]["content"])
    return dict(requests)


def _check(engine, embedder, shared: Path) -> None:
    from prefcall.evaluation.data import import_catalogue_file
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.pipeline_models import get_config

    catalogue = import_catalogue_file(shared / "sgd" / "dev_schema.json", "sgd")
    pipeline = Pipeline(engine, embedder)
    requests = _first_requests(shared)
    assert len(requests) >= 2 and all(len(r) >= 5 for r in requests.values()), requests
    for gold, texts in requests.items():
        chosen = Counter((pipeline.stage_one([Turn(role="user", content=t)], catalogue, get_config("full")).value
                          or ["none"])[0] for t in texts)
        right = chosen[gold] / len(texts)
        other, taken = max(((f, n) for f, n in chosen.items() if f != gold), key=lambda x: x[1], default=("-", 0))
        assert right >= RIGHT_AT_LEAST and taken / len(texts) <= TAKEN_AT_MOST, (
            f"{engine.info.model_name}: stage 1 chose {gold} for {right:.0%} of its {len(texts)} requests and "
            f"{other} for {taken / len(texts):.0%}: {dict(chosen)}")


@pytest.mark.model
def test_each_models_stage_one_keeps_each_function_its_own_requests(real_engine, real_embedder, shared_data):
    from prefcall.config import Settings
    from prefcall.engine.llama import LlamaEngine

    _check(real_engine, real_embedder, shared_data)  # the embedded model, always
    for path in (p for p in os.environ.get("PREFCALL_TEST_MODELS", "").split(":") if p):
        engine = LlamaEngine(Settings(model=path, n_ctx=4096))
        try:
            _check(engine, real_embedder, shared_data)
        finally:
            engine.close()


def test_the_check_fails_when_one_function_swallows_another(shared_data):
    from prefcall.engine.fake import FakeEmbedder, FakeEngine

    def prefers_search(prompt: str, candidate: str) -> float:  # a calibration gone wrong: search wins everything
        return -0.1 if candidate.strip() == "FindRestaurants" else -9.0

    with pytest.raises(AssertionError, match="stage 1 chose ReserveRestaurant for 0%"):
        _check(FakeEngine(scorer=prefers_search), FakeEmbedder(), shared_data)
