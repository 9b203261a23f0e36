"""Calibrating the TAPS uncertainty gate: an evaluation over dev data (`prefcall calibrate`).

Each dev item is parsed twice, untagged and tagged; the threshold that maximises micro slot F1 when items
above it take their tagged output is the calibrated one (ties: the fewer regenerations). The result is
stored with `prefcall.strategies.taps_gate.save_calibration`, where the pipeline reads it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from prefcall.errors import ConfigError, ValidationError
from prefcall.evaluation.data import shared_data_dir
from prefcall.evaluation.metrics.calls import load_aliases, score_calls
from prefcall.evaluation.metrics.f1 import micro_prf
from prefcall.schemas.calls import parse_call
from prefcall.schemas.model import Call, Catalogue
from prefcall.strategies.pipeline import Pipeline, get_config
from prefcall.strategies.taps_gate import GateCalibration

Counts = tuple[int, int, int]  # true positives, false positives, false negatives


class CalibrationItem(BaseModel):
    """One dev item's outcome both ways: slot counts of the untagged and of the tagged output."""

    id: str
    uncertainty: dict[str, float]
    untagged: Counts
    tagged: Counts


class SweepPoint(BaseModel):
    threshold: float
    f1: float
    fire_rate: float


class CalibrationResult(GateCalibration):
    sweep: list[SweepPoint] = Field(default_factory=list)


def f1_at(items: Sequence[CalibrationItem], threshold: float, measure: str) -> tuple[float, float]:
    """Micro slot F1 when items above the threshold take their tagged output; and the fire rate."""
    counts = []
    fired = 0
    for item in items:
        use_tagged = item.uncertainty.get(measure, 1.0) > threshold
        fired += use_tagged
        tp, fp, fn = item.tagged if use_tagged else item.untagged
        counts.append((tp, tp + fp, tp + fn))
    return micro_prf(counts)[2], fired / max(1, len(items))


def sweep_thresholds(items: Sequence[CalibrationItem], model: str, measure: str = "least_confidence") -> CalibrationResult:
    """Try every distinct uncertainty value as a threshold; keep the best F1 (ties: fewer regenerations)."""
    if not items:
        raise ValidationError("calibration needs at least one dev item: raise --limit")
    values = sorted({round(i.uncertainty.get(measure, 1.0), 6) for i in items})
    candidates = [-1e-9] + values + [1.0]
    sweep = [SweepPoint(threshold=t, f1=f, fire_rate=r) for t in candidates for f, r in [f1_at(items, t, measure)]]
    best = max(sweep, key=lambda p: (round(p.f1, 9), -p.fire_rate))
    return CalibrationResult(
        model=model, measure=measure, threshold=max(0.0, best.threshold), f1=best.f1, fire_rate=best.fire_rate,
        n_items=len(items), f1_never=f1_at(items, 1.0, measure)[0], f1_always=f1_at(items, -1e-9, measure)[0],
        sweep=sweep,
    )


def slot_counts(predicted: list[Call], gold: list[Call], aliases: dict[str, str]) -> Counts:
    """(tp, fp, fn) over (function, argument, value) triples, with the NLSI metric's normalisation."""
    s = score_calls(predicted, gold, aliases)
    tp = int(s["tp"])
    return tp, int(s["n_pred"]) - tp, int(s["n_gold"]) - tp


def load_dev_items(path: Path, limit: int) -> list[dict[str, Any]]:
    if not path.exists():
        raise ConfigError(f"dev file {path} not found: pass --data or set PREFCALL_SHARED_DATA")
    return json.loads(path.read_text(encoding="utf-8"))[:limit]


def calibrate_gate(pipeline: Pipeline, items: Sequence[dict[str, Any]], catalogue: Catalogue, *, config: str = "taps",
                   measure: str = "least_confidence",
                   progress: Callable[[int, int, float], None] | None = None) -> CalibrationResult:
    """Parse every NLSI-style item untagged and tagged with `config`, then sweep the threshold."""
    locations = shared_data_dir() / "taps" / "locations.json"
    aliases = load_aliases(locations) if locations.exists() else {}
    untagged_config = get_config(config, tagging="off")
    tagged_config = get_config(config, tagging="always")
    rows: list[CalibrationItem] = []
    started = time.perf_counter()
    for index, item in enumerate(items):
        gold = [parse_call(c) for c in item["api_calls"]]
        common = dict(applicable=item["applicable_standing_instructions"])
        plain = pipeline.parse(item["user_utterance"], item["all_standing_instructions"], catalogue, untagged_config,
                               **common)
        tagged = pipeline.parse(item["user_utterance"], item["all_standing_instructions"], catalogue, tagged_config,
                                **common)
        rows.append(CalibrationItem(
            id=str(item.get("example_id", index)), uncertainty=plain.uncertainty,
            untagged=slot_counts(plain.calls if plain.status == "ok" else [], gold, aliases),
            tagged=slot_counts(tagged.calls if tagged.status == "ok" else [], gold, aliases),
        ))
        if progress is not None:
            progress(index + 1, len(items), time.perf_counter() - started)
    return sweep_thresholds(rows, pipeline.engine.info.model_name, measure)
