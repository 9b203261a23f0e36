"""Bench section `dialogue`: a conversation turn by turn, the state sent back against the whole dialogue re-sent.

Each dialogue (SGD dev, the report part of the frozen split, else a built-in one) is run twice, turn by turn, on the
built-in SGD catalogue with the shipped configuration: `resend` sends the whole dialogue so far with the model's
own earlier calls on the assistant turns (what a stateless host without prefcall's state does), `state` sends the
assistant's last turn and the user's new one with the state the previous turn returned (what `conversation_id`
does inside the server). Reported per mode: seconds and evaluated prompt tokens per turn (p50, p95), for every
turn and for the later turns (the second on), and how often both modes give the same calls (functions and
values) and the same functions. Target: the state
makes later turns no dearer than re-sending (p50 ratio <= 1).
"""

from __future__ import annotations

import json
import time
from typing import Any

from prefcall.bench.context import BenchContext
from prefcall.bench.stats import ratio, summarize, target
from prefcall.evaluation.data import shared_data_dir
from prefcall.schemas.model import Turn

MAX_TURNS = 6  # user turns per dialogue
FALLBACK_DIALOGUES = [
    [("user", "I'd like to book a table at a restaurant."),
     ("assistant", "Which restaurant, and in which city?"),
     ("user", "Chez Panisse in Berkeley, please."),
     ("assistant", "Please confirm: a table at Chez Panisse in Berkeley for 2 people today at 7 pm."),
     ("user", "Yes, that's great.")],
    [("user", "Find me a bus from Sacramento to San Francisco."),
     ("assistant", "What date are you leaving?"),
     ("user", "On March 8th, for two people.")],
]


def dialogues(count: int) -> tuple[list[list[tuple[str, str]]], str]:
    """The first `count` SGD dev dialogues of the report split (user and assistant turns), or the built-in ones."""
    from prefcall.evaluation import splits

    path = shared_data_dir() / "sgd" / "dev_dialogues_001.json"
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
        found = splits.source_of(path)
    except (OSError, json.JSONDecodeError):
        return FALLBACK_DIALOGUES[:count], "built-in dialogues (shared data not found)"
    report = found[1].part("report") if found is not None else set()
    out = [[("user" if t["speaker"] == "USER" else "assistant", t["utterance"]) for t in row["turns"]]
           for row in rows if not report or row["dialogue_id"] in report]
    return out[:count], f"{path} (report part of the frozen split)"


def section_dialogue(ctx: BenchContext) -> dict[str, Any]:
    from prefcall.schemas.registry import builtin_catalogue
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.pipeline_models import DEFAULT_CONFIG, get_config

    catalogue = builtin_catalogue("sgd")
    config = get_config(DEFAULT_CONFIG, allow_refuse=True)
    pipeline = Pipeline(ctx.engine(), ctx.embedder(), data_dir=ctx.settings.data_dir)
    chosen, source = dialogues(1 if ctx.quick else max(2, ctx.reps + 1))
    pipeline.parse([Turn(role="user", content=chosen[0][0][1])], [], catalogue, config)  # warm: calibration, prefix
    runs: dict[str, list[dict[str, Any]]] = {"resend": [], "state": []}
    same = same_functions = 0
    for turns in chosen:
        history: list[Turn] = []
        state = None
        user_turn = 0
        for index, (role, text) in enumerate(turns):
            if role != "user":
                history.append(Turn(role="assistant", content=text))
                continue
            if user_turn >= MAX_TURNS:
                break
            new = Turn(role="user", content=text)
            started = time.perf_counter()
            whole = pipeline.parse([*history, new], [], catalogue, config)
            runs["resend"].append(_run(whole, started, user_turn))
            last = [history[-1]] if history and history[-1].role == "assistant" else []
            started = time.perf_counter()
            kept = pipeline.parse([*last, new], [], catalogue, config, state=state)
            runs["state"].append(_run(kept, started, user_turn))
            same += [c.model_dump() for c in whole.calls] == [c.model_dump() for c in kept.calls]
            same_functions += [c.name for c in whole.calls] == [c.name for c in kept.calls]
            state = kept.state
            if history and history[-1].role == "assistant":
                history[-1] = history[-1].model_copy(update={"calls": list(whole.calls)})
            history.append(new)
            user_turn += 1
            ctx.log(f"bench: dialogue: turn {user_turn}: resend {runs['resend'][-1]['seconds']} s, "
                    f"state {runs['state'][-1]['seconds']} s")
    figures: dict[str, Any] = {"config": DEFAULT_CONFIG, "catalogue": "sgd", "dialogues": len(chosen),
                               "source": source, "same_calls": round(same / max(1, len(runs["state"])), 3),
                               "same_functions": round(same_functions / max(1, len(runs["state"])), 3)}
    for mode, rows in runs.items():
        later = [r for r in rows if r["turn"] > 0]
        figures[mode] = {"seconds": summarize([r["seconds"] for r in rows]),
                         "later_seconds": summarize([r["seconds"] for r in later]),
                         "evaluated": summarize([r["evaluated"] for r in rows], digits=1),
                         "later_evaluated": summarize([r["evaluated"] for r in later], digits=1), "runs": rows}
    later_ratio = ratio(figures["state"]["later_seconds"].get("p50"), figures["resend"]["later_seconds"].get("p50"))
    figures["later_p50_state_over_resend"] = later_ratio
    return {"figures": figures,
            "targets": [target("later turns: state / re-sent dialogue latency, p50", later_ratio, 1.0, unit="x")],
            "headline": [("resend later s p50", figures["resend"]["later_seconds"].get("p50")),
                         ("state later s p50", figures["state"]["later_seconds"].get("p50")),
                         ("state / resend p50 x", later_ratio), ("same calls", figures["same_calls"]),
                         ("same functions", figures["same_functions"])]}


def _run(result: Any, started: float, turn: int) -> dict[str, Any]:
    return {"turn": turn, "seconds": round(time.perf_counter() - started, 4), "evaluated": result.trace.evaluated,
            "prompt_tokens": result.trace.prompt_tokens, "decision": result.decision,
            "calls": [c.name for c in result.calls]}
