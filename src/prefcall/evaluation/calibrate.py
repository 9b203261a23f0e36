"""Calibrating the TAPS uncertainty gate: an evaluation over dev data (`prefcall calibrate`).

Each dev item is parsed twice, untagged and tagged; the threshold that maximises micro slot F1 when items
above it take their tagged output is the calibrated one (ties: the fewer regenerations). Whether the gate
carries a signal is judged out of sample: two-fold cross-validation picks the threshold on one half of the
items and scores it on the other (`f1_heldout`), against never and always tagging. The result is stored
with `prefcall.strategies.taps_gate.save_calibration`, where the pipeline reads it; `write_report` writes
the per-threshold curve (table and PNG) beside the per-item rows.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from prefcall.errors import ConfigError, ValidationError
from prefcall.evaluation import splits
from prefcall.evaluation.data import read_resumable, shared_data_dir
from prefcall.evaluation.metrics.calls import load_aliases, score_calls
from prefcall.evaluation.metrics.f1 import micro_prf
from prefcall.schemas.calls import parse_call
from prefcall.schemas.model import Call, Catalogue
from prefcall.strategies.pipeline import Pipeline
from prefcall.strategies.pipeline_models import get_config
from prefcall.strategies.taps_gate import GateCalibration, gate_has_signal

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
    sweep = _sweep(items, measure)
    best = _best(sweep)
    return CalibrationResult(
        model=model, measure=measure, threshold=max(0.0, best.threshold), f1=best.f1, fire_rate=best.fire_rate,
        n_items=len(items), f1_never=f1_at(items, 1.0, measure)[0], f1_always=f1_at(items, -1e-9, measure)[0],
        f1_heldout=heldout_f1(items, measure) if len(items) >= 4 else None, sweep=sweep,
    )


def _sweep(items: Sequence[CalibrationItem], measure: str) -> list[SweepPoint]:
    values = sorted({round(i.uncertainty.get(measure, 1.0), 6) for i in items})
    return [SweepPoint(threshold=t, f1=f, fire_rate=r)
            for t in [-1e-9] + values + [1.0] for f, r in [f1_at(items, t, measure)]]


def _best(sweep: Sequence[SweepPoint]) -> SweepPoint:
    return max(sweep, key=lambda p: (round(p.f1, 9), -p.fire_rate))


def heldout_f1(items: Sequence[CalibrationItem], measure: str) -> float:
    """Two-fold cross-validated micro F1: each half takes the threshold fitted on the other half."""
    counts = []
    for fold in (0, 1):
        train = [item for i, item in enumerate(items) if i % 2 != fold]
        threshold = _best(_sweep(train, measure)).threshold
        for item in items[fold::2]:
            tp, fp, fn = item.tagged if item.uncertainty.get(measure, 1.0) > threshold else item.untagged
            counts.append((tp, tp + fp, tp + fn))
    return micro_prf(counts)[2]


def write_report(result: CalibrationResult, out_dir: Path, source: str) -> list[Path]:
    """calibration.json (with the sweep), report.md (the curve as a table) and gate_curve.png in out_dir."""
    from prefcall.evaluation.plots import threshold_curve

    out_dir.mkdir(parents=True, exist_ok=True)
    data = out_dir / "calibration.json"
    data.write_text(json.dumps({**result.model_dump(), "source": source}, indent=1), encoding="utf-8")
    curve = threshold_curve([p.threshold for p in result.sweep], [p.f1 for p in result.sweep],
                            out_dir / "gate_curve.png", f"TAPS gate, {result.model} (n={result.n_items})")
    heldout = "n/a" if result.f1_heldout is None else f"{result.f1_heldout:.3f}"
    lines = [f"# TAPS gate calibration: {result.model}", "", f"Source: {source}", "",
             "| n items | measure | threshold | F1 at threshold (in sample) | F1 held out (2-fold) | F1 never tag | "
             "F1 always tag | fire rate |", "|---|---|---|---|---|---|---|---|",
             f"| {result.n_items} | {result.measure} | {result.threshold:.4f} | {result.f1:.3f} | {heldout} | "
             f"{result.f1_never:.3f} | {result.f1_always:.3f} | {result.fire_rate:.3f} |", "",
             f"Signal: {'yes' if gate_has_signal(result) else 'no'} (held-out F1 against the better of never and "
             "always tagging).", "", "## Calibration curve", "", f"![gate curve]({curve.name})", "",
             "| threshold | micro slot F1 | fire rate |", "|---|---|---|"]
    lines += [f"| {p.threshold:.4f} | {p.f1:.3f} | {p.fire_rate:.3f} |" for p in result.sweep]
    report = out_dir / "report.md"
    report.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [data, curve, report]


def slot_counts(predicted: list[Call], gold: list[Call], aliases: dict[str, str]) -> Counts:
    """(tp, fp, fn) over (function, argument, value) triples, with the NLSI metric's normalisation."""
    s = score_calls(predicted, gold, aliases)
    tp = int(s["tp"])
    return tp, int(s["n_pred"]) - tp, int(s["n_gold"]) - tp


def load_dev_items(path: Path, limit: int, offset: int = 0) -> list[dict[str, Any]]:
    """Items offset..offset+limit of an NLSI-style file; of a split source (the shared nlsi/dev.json), of its tune
    part only: a calibration never reads a report item (prefcall.evaluation.splits)."""
    if not path.exists():
        raise ConfigError(f"dev file {path} not found: pass --data or set PREFCALL_SHARED_DATA")
    rows = json.loads(path.read_text(encoding="utf-8"))
    tune = splits.tune_keys(path)
    if tune is not None:
        keys = splits.unique_ids(str(r.get("example_id", i)) for i, r in enumerate(rows))
        rows = [r for r, key in zip(rows, keys) if key in tune]
    return rows[offset:offset + limit]


def read_rows(path: Path | None) -> dict[str, CalibrationItem]:
    """Rows a previous, interrupted run stored (one JSON object per line); a torn last line is dropped."""
    return {row.id: row for row in read_resumable(path, CalibrationItem.model_validate_json)}


def calibrate_gate(pipeline: Pipeline, items: Sequence[dict[str, Any]], catalogue: Catalogue, *, config: str = "taps",
                   measure: str = "least_confidence", rows_file: Path | None = None,
                   progress: Callable[[int, int, float], None] | None = None) -> CalibrationResult:
    """Parse every NLSI-style item untagged and tagged with `config`, then sweep the threshold. With `rows_file`,
    each item's row is appended as it is measured and a rerun resumes from the rows already there."""
    locations = shared_data_dir() / "taps" / "locations.json"
    aliases = load_aliases(locations) if locations.exists() else {}
    untagged_config = get_config(config, tagging="off")
    tagged_config = get_config(config, tagging="always")
    done = read_rows(rows_file)
    rows: list[CalibrationItem] = []
    started = time.perf_counter()
    for index, item in enumerate(items):
        item_id = str(item.get("example_id", index))
        if item_id in done:
            rows.append(done[item_id])
            continue
        gold = [parse_call(c) for c in item["api_calls"]]
        common = dict(applicable=item["applicable_standing_instructions"])
        plain = pipeline.parse(item["user_utterance"], item["all_standing_instructions"], catalogue, untagged_config,
                               **common)
        tagged = pipeline.parse(item["user_utterance"], item["all_standing_instructions"], catalogue, tagged_config,
                                **common)
        row = CalibrationItem(
            id=item_id, uncertainty=plain.uncertainty,
            untagged=slot_counts(plain.calls if plain.status == "ok" else [], gold, aliases),
            tagged=slot_counts(tagged.calls if tagged.status == "ok" else [], gold, aliases),
        )
        rows.append(row)
        if rows_file is not None:
            rows_file.parent.mkdir(parents=True, exist_ok=True)
            with rows_file.open("a", encoding="utf-8") as handle:
                handle.write(row.model_dump_json() + "\n")
        if progress is not None:
            progress(index + 1, len(items), time.perf_counter() - started)
    result = sweep_thresholds(rows, pipeline.engine.info.model_name, measure)
    return result.model_copy(update={"renormalised": pipeline.engine.info.capabilities.renormalised_logprobs})
