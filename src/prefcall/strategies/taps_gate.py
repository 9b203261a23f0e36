"""TAPS uncertainty gate: measure how unsure the model was of its calls; above a threshold, regenerate with tags.

Measures (higher = less certain, all in [0, 1]):
- least_confidence (TAPS): 1 - exp(mean token logprob) over every generated token of the calls.
- margin_at_t: 1 - mean over tokens of (p_top1 - p_top2), from Generation.tokens[i].top (top_logprobs=2).
- sequence_margin: 1 - (P(sequence) - P(best one-token deviation)), i.e. how close the runner-up
  sequence that differs in the single most contested token comes to the greedy sequence.
The threshold is calibrated per model (`prefcall calibrate`, `prefcall.evaluation.calibrate`) and stored in
DATA_DIR/calibration.json; the pipeline compares the measure with it (`Pipeline._gate`).
"""

from __future__ import annotations

import json
from importlib import resources
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from prefcall.engine.base import Generation
from prefcall.errors import StoreError

Measure = Literal["least_confidence", "margin_at_t", "sequence_margin"]
MEASURES: tuple[str, ...] = ("least_confidence", "margin_at_t", "sequence_margin")
# Used for a model with neither a user calibration nor a packaged one (data/calibration.json). An uncalibrated
# guess: least confidence is measured on raw (unconstrained) token probabilities, and grammar-forced tokens make
# it run high (0.34-0.99 for SmolLM2-135M on NLSI), so 0.15 fires on nearly every request.
DEFAULT_GATE_THRESHOLD = 0.15
CALIBRATION_FILE = "calibration.json"


def _tokens(generations: Sequence[Generation]):
    return [t for g in generations for t in g.tokens]


def least_confidence(generations: Sequence[Generation]) -> float:
    tokens = _tokens(generations)
    if not tokens:
        return 1.0
    return 1.0 - math.exp(sum(t.logprob for t in tokens) / len(tokens))


def _token_margin(token) -> float:
    p1 = math.exp(token.logprob)
    if len(token.top) >= 2:
        top = sorted((math.exp(lp) for _, lp in token.top), reverse=True)
        # Under a grammar the chosen token may not be the unconstrained top-1; use the best rival.
        rival = top[1] if abs(top[0] - p1) < 1e-9 else top[0]
        return max(0.0, p1 - rival)
    if len(token.top) == 1:
        rival = math.exp(token.top[0][1])
        return max(0.0, p1 - (0.0 if abs(rival - p1) < 1e-9 else rival))
    return p1  # no runner-up known: the margin is at most p1


def margin_at_t(generations: Sequence[Generation]) -> float:
    tokens = _tokens(generations)
    if not tokens:
        return 1.0
    return 1.0 - sum(_token_margin(t) for t in tokens) / len(tokens)


def sequence_margin(generations: Sequence[Generation]) -> float:
    tokens = _tokens(generations)
    if not tokens:
        return 1.0
    log_p = sum(t.logprob for t in tokens)
    # Best single-token deviation keeps every other token: P(seq) * p_rival / p_chosen at the tightest token.
    ratios = [1.0 - _token_margin(t) / math.exp(t.logprob) for t in tokens if t.logprob > -50]
    worst = max(ratios, default=0.0)
    return 1.0 - math.exp(log_p) * (1.0 - worst)


def uncertainty(generations: Sequence[Generation]) -> dict[str, float]:
    return {
        "least_confidence": least_confidence(generations),
        "margin_at_t": margin_at_t(generations),
        "sequence_margin": sequence_margin(generations),
    }


class GateCalibration(BaseModel):
    """A calibrated threshold as stored in DATA_DIR/calibration.json (`prefcall calibrate` measures it)."""

    model: str
    measure: str
    threshold: float
    f1: float
    fire_rate: float
    n_items: int
    f1_never: float  # never tag (threshold = 1)
    f1_always: float  # always tag (threshold below every value)
    f1_heldout: float | None = None  # two-fold cross-validated F1 of the fitted gate (None: older calibrations)
    # measured on logprobs renormalised over what the grammar allowed (the in-process engine, vLLM), or on raw ones
    # (llama.cpp servers, Ollama): a threshold holds only on the kind it was measured on (`gate_mismatch`)
    renormalised: bool = True


def gate_has_signal(entry: GateCalibration | dict[str, Any]) -> bool:
    """The gate helps when its F1 beats both never and always tagging: out of sample when the calibration has a
    held-out figure (an in-sample sweep over many items almost always beats a constant by chance)."""
    data = entry.model_dump() if isinstance(entry, GateCalibration) else entry
    best_constant = max(float(data.get("f1_never", 0.0)), float(data.get("f1_always", 0.0)))
    heldout = data.get("f1_heldout")
    return float(heldout if heldout is not None else data.get("f1", 0.0)) > best_constant


def calibration_path(data_dir: Path) -> Path:
    return Path(data_dir) / CALIBRATION_FILE


def load_calibration(data_dir: Path) -> dict[str, dict]:
    path = calibration_path(data_dir)
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise StoreError(f"cannot read {path}: {exc}: delete it and run `prefcall calibrate` again") from exc


def save_calibration(data_dir: Path, result: GateCalibration) -> Path:
    stored = load_calibration(data_dir)
    entry = result.model_dump(include=set(GateCalibration.model_fields))
    stored.setdefault(result.model, {})[result.measure] = entry
    path = calibration_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stored, indent=2), encoding="utf-8")
    return path


def packaged_calibration() -> dict[str, dict]:
    """Thresholds calibrated for the embedded models, shipped with the package."""
    text = resources.files("prefcall").joinpath("data", CALIBRATION_FILE).read_text(encoding="utf-8")
    return json.loads(text)


def default_threshold(model_name: str, data_dir: Path | None, measure: str = "least_confidence") -> float:
    """The user's calibration for this model, else the packaged one, else DEFAULT_GATE_THRESHOLD."""
    stored = load_calibration(data_dir) if data_dir is not None else {}
    entry = stored.get(model_name, {}).get(measure) or packaged_calibration().get(model_name, {}).get(measure)
    return float(entry["threshold"]) if entry else DEFAULT_GATE_THRESHOLD


def gate_mismatch(model_name: str, data_dir: Path | None, renormalised: bool,
                  measure: str = "least_confidence") -> str | None:
    """Why the calibrated threshold does not hold on this engine (one line), or None when it does: it was measured
    on renormalised logprobs and the engine reports raw ones, or the other way round. An uncalibrated model keeps
    DEFAULT_GATE_THRESHOLD either way."""
    stored = load_calibration(data_dir) if data_dir is not None else {}
    entry = stored.get(model_name, {}).get(measure) or packaged_calibration().get(model_name, {}).get(measure)
    if not entry or bool(entry.get("renormalised", True)) == renormalised:
        return None
    kinds = ("renormalised", "raw") if renormalised else ("raw", "renormalised")
    return (f"TAPS gate off: its threshold was calibrated on {kinds[1]} logprobs and this engine gives {kinds[0]} "
            "ones; calibrate it on this engine (prefcall calibrate --engine ...)")


def gate_status(model_name: str, data_dir: Path | None, measure: str = "least_confidence") -> dict[str, Any]:
    """What `prefcall info` says about the TAPS gate for this model: calibrated or not, on how many items, and
    whether it carries a signal (its F1 beats both never and always regenerating with tags)."""
    stored = load_calibration(data_dir) if data_dir is not None else {}
    entry = stored.get(model_name, {}).get(measure) or packaged_calibration().get(model_name, {}).get(measure)
    if not entry:
        return {"calibrated": False, "threshold": DEFAULT_GATE_THRESHOLD,
                "note": "not calibrated for this model: run `prefcall calibrate` on dev items (100 or more)"}
    signal = gate_has_signal(entry)
    n_items = int(entry.get("n_items", 0))
    note = ("carries a signal" if signal else
            "carries no signal for this model: its F1 is no better than never or always tagging"
            + (" on held-out items" if entry.get("f1_heldout") is not None else "")) + (
            f"; calibrated on {n_items} items (fewer than 100: recalibrate with `prefcall calibrate`)"
            if n_items < 100 else f"; calibrated on {n_items} items")
    return {"calibrated": True, "threshold": float(entry["threshold"]), "signal": signal, "n_items": n_items,
            "note": note + ". The default configuration `full` tags every applicable instruction and does not use "
                           "the gate."}
