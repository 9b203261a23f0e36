"""Dialogue state tracking metrics on SGD, the way FnCTOD reports them (Table 5).

A turn's gold is, per service frame, the active intent and the cumulative slot values (each slot may list
several acceptable surface values). A prediction is, per service, an intent and slot values (from the call made
at that turn). Per turn:
- joint goal accuracy: every gold frame's slot values matched exactly (no missing, no extra, value in the list);
- slot precision / recall / F1 over (service, slot, value) with a value counted right if it matches any
  acceptable gold value after normalisation;
- intent accuracy: every gold frame with an active intent has a predicted call of that intent (FnCTOD's
  function-selection accuracy); frames whose intent is NONE need no call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefcall.evaluation.metrics.f1 import prf
from prefcall.evaluation.metrics.normalise import normalise_text

GoldState = dict[str, dict[str, Any]]  # service -> {"intent": str, "slots": {slot: [values]}}
PredState = dict[str, dict[str, Any]]  # service -> {"intent": str | None, "slots": {slot: value}}


def value_matches(predicted: Any, acceptable: list[Any]) -> bool:
    norm = normalise_text(predicted)
    return any(norm == normalise_text(v) for v in acceptable)


def frame_correct(pred_slots: Mapping[str, Any], gold_slots: Mapping[str, list[Any]]) -> bool:
    if set(pred_slots) != set(gold_slots):
        return False
    return all(value_matches(pred_slots[s], gold_slots[s]) for s in gold_slots)


def score_turn(predicted: PredState, gold: GoldState) -> dict[str, float]:
    tp = n_pred = n_gold = 0
    joint = True
    intents_right = True
    for service, frame in gold.items():
        pred = predicted.get(service) or {}
        pred_slots = pred.get("slots") or {}
        gold_slots = frame.get("slots") or {}
        joint = joint and frame_correct(pred_slots, gold_slots)
        n_gold += len(gold_slots)
        tp += sum(1 for s, v in pred_slots.items() if s in gold_slots and value_matches(v, gold_slots[s]))
        gold_intent = frame.get("intent") or "NONE"
        if gold_intent != "NONE" and pred.get("intent") != gold_intent:
            intents_right = False
    # Slots predicted for services with no gold frame this turn are all false positives.
    n_pred = sum(len((p.get("slots") or {})) for p in predicted.values())
    precision, recall, f1 = prf(tp, n_pred, n_gold)
    return {
        "joint_goal_accuracy": float(joint),
        "slot_precision": precision,
        "slot_recall": recall,
        "slot_f1": f1,
        "intent_accuracy": float(intents_right),
        "tp": float(tp),
        "n_pred": float(n_pred),
        "n_gold": float(n_gold),
    }


# Why a turn's state is wrong, per gold slot it misses or gets wrong (a turn may have several): the intent of this
# turn's call is not the gold one; a value an earlier turn's gold state already held is missing (lost from an earlier
# turn); a value the assistant's last turn offered, and the user did not write, is missing (offer missed); any other
# missing value (value missed); a slot with another value (wrong value); a slot the gold does not have (extra value).
ERROR_CLASSES = ("wrong intent", "value lost", "offer missed", "value missed", "wrong value", "extra value")


def turn_errors(predicted: PredState, gold: GoldState, *, carried: Mapping[str, Any], offered: str, said: str,
                intent_right: bool) -> list[str]:
    """The ERROR_CLASSES of one turn. `carried`: the gold state before this turn ({service: {"slots": {slot:
    value}}}); `offered`: the assistant's turn before it; `said`: the user's turns so far."""
    errors = set() if intent_right else {"wrong intent"}
    offered_text, said_text = normalise_text(offered), normalise_text(said)
    for service, frame in gold.items():
        pred = (predicted.get(service) or {}).get("slots") or {}
        before = (carried.get(service) or {}).get("slots") or {}
        wanted = frame.get("slots") or {}
        for slot, acceptable in wanted.items():
            if slot in pred:
                if not value_matches(pred[slot], acceptable):
                    errors.add("wrong value")
            elif slot in before and value_matches(before[slot], acceptable):
                errors.add("value lost")
            elif any((v := normalise_text(a)) and v in offered_text and v not in said_text for a in acceptable):
                errors.add("offer missed")
            else:
                errors.add("value missed")
        if set(pred) - set(wanted):
            errors.add("extra value")
    return [e for e in ERROR_CLASSES if e in errors]
