"""`prefcall eval dst`: SGD dialogue state tracking as function calling (FnCTOD, Table 5).

One item per user turn. The model sees the dialogue up to that turn; earlier system turns carry the GOLD calls of
the preceding user turns (FnCTOD keeps previous calls in the dialogue; using gold ones keeps items independent
and resumable - an "oracle history" setting, stated in every report; `--history predicted` puts the model's own
calls there instead). The scored state is the one parse_request returns (schemas.state: per function, the values
the dialogue's calls and this turn's set); intent = the function this turn called (a turn with no call gets no
intent), slot values = the state's arguments.

Schema: `--schema FILE`, the SGD schema of the split (default: <split>_schema.json, else schema.json, beside
--data: dev_schema.json for the shared dev_dialogues_001.json), is both the
catalogue the model sees and the map from gold (service, intent) names to its functions; a gold service, intent
or slot that the schema lacks stops the run with a one-line error naming it (it would otherwise score 0).
`--sgd-schema` is a deprecated alias of `--schema`.

Metrics per turn: joint goal accuracy, slot precision / recall / F1, intent (function-selection) accuracy;
breakdown by service (domain); the share of turns in each error class (metrics.dst.ERROR_CLASSES: wrong intent,
value lost from an earlier turn, offer missed, value missed, wrong value, extra value). Intervals resample whole
dialogues (the turns of one dialogue are not independent).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from prefcall.errors import ConfigError, ParseError
from prefcall.evaluation.data import import_catalogue_file, read_json, require_data, shared_data_dir
from prefcall.evaluation.metrics.calls import calls_from_any
from prefcall.evaluation.metrics.dst import ERROR_CLASSES, score_turn, turn_errors
from prefcall.evaluation.metrics.intervals import clustered_mean, micro, proportion
from prefcall.evaluation.plots import bar_chart, group_mean
from prefcall.evaluation.task import BaseTask, EvalContext, EvalItem, ScoredItem
from prefcall.evaluation.tasks import tools as selection
from prefcall.evaluation.tasks.nlsi import (
    add_function_selection_option,
    config_overrides,
    prediction_from_result,
    slot_counts,
)
from prefcall.schemas.model import Call, Turn
from prefcall.schemas.state import DialogueState

ZERO = {"joint_goal_accuracy": 0.0, "slot_precision": 0.0, "slot_recall": 0.0, "slot_f1": 0.0, "intent_accuracy": 0.0}
MEAN_KEYS = ("joint_goal_accuracy", "slot_precision", "slot_recall", "slot_f1", "intent_accuracy")


class DstTask(BaseTask):
    name = "dst"
    description = "SGD DST as function calling: joint goal accuracy, slot F1, intent accuracy (FnCTOD)"
    primary_score = "joint_goal_accuracy"
    failure_scores = ("joint_goal_accuracy", "intent_accuracy")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        # The common --schema FILE is the SGD schema of the split: the catalogue AND the gold-name mapping.
        parser.add_argument("--sgd-schema", help=argparse.SUPPRESS)  # deprecated alias of --schema
        parser.add_argument("--dialogues", type=int, help="use only the first N dialogues (all their user turns)")
        parser.add_argument("--history", choices=("oracle", "predicted"), default="oracle",
                            help="earlier turns' calls in the dialogue and the carried state: the gold ones "
                                 "(oracle, items independent) or the model's own predictions for those turns "
                                 "(predicted: a dialogue's turns run in order; a resumed run reads them back "
                                 "from --out's results.jsonl)")

        add_function_selection_option(parser)

    # -- data ---------------------------------------------------------------------------------------------
    def data_files(self, args: argparse.Namespace) -> list[Path]:
        return [require_data(args, shared_data_dir() / "sgd" / "dev_dialogues_001.json")]

    def split_key(self, item: EvalItem) -> str:
        return str(item.meta.get("dialogue_id", item.id))  # a dialogue's turns fall on one side together

    def load(self, args: argparse.Namespace) -> list[EvalItem]:
        data = self.data_files(args)[0]
        dialogues = read_json(data)
        if getattr(args, "dialogues", None):
            dialogues = dialogues[: args.dialogues]
        path = schema_path(args, data)
        schema = sgd_services(read_json(path), path)
        check_gold_names(dialogues, schema, path)
        names = function_names(schema)
        return [item for dialogue in dialogues for item in turn_items(dialogue, names)]

    # -- prediction ---------------------------------------------------------------------------------------
    def predict(self, item: EvalItem, ctx: EvalContext) -> dict[str, Any]:
        from prefcall.strategies.pipeline import Pipeline
        from prefcall.strategies.pipeline_models import get_config

        config = get_config(ctx.config, **config_overrides(ctx.args))
        # No standing instructions in SGD; the embedder is needed only for tagging, demonstrations or the hybrid prior.
        needs = config.use_demos or config.tagging != "off" or config.function_selection == "hybrid"
        embedder = ctx.embedder if needs else None
        pipe = ctx.memo("pipeline", lambda: Pipeline(ctx.engine, embedder, None))
        catalogue = ctx.memo("catalogue", lambda: self.catalogue(ctx.args))
        turns = item.input["dialogue"]
        predicted = getattr(ctx.args, "history", "oracle") == "predicted"
        earlier: list[list[dict[str, Any]]] = []
        if predicted:
            store = ctx.memo("predicted_calls", lambda: stored_predictions(ctx.args))
            missing = [i for i in item.meta.get("earlier", []) if i not in store]
            if missing:
                raise ConfigError(f"predicted history: turn {missing[0]} of this dialogue has no prediction in this "
                                  "run: run the dialogue's turns in order (no --limit cutting a dialogue)")
            earlier = [store[i] for i in item.meta.get("earlier", [])]
            turns = with_history(turns, earlier)
        dialogue = [Turn.model_validate(t) for t in turns]
        result = pipe.parse(dialogue, [], catalogue, config, applicable=None, exclude_demo_ids={item.id})
        prediction = prediction_from_result(result)
        if result.state is not None:
            prediction["state"] = result.state.model_dump()  # what parse_request returns: the scored state
        if predicted:
            store[item.id] = prediction.get("calls", [])
        # the retrieval baselines' choice of functions for this turn (tools.BASELINES), decided at scoring: the
        # user's turn against the catalogue, the earlier turns as the history the selector reads
        history = [(str(t.get("role")), str(t.get("content", ""))) for t in turns[:-1]]
        prediction["baseline_evidence"] = selection.request_baselines(str(turns[-1].get("content", "")),
                                                                      catalogue.functions, ctx.embedder, history)
        return prediction

    def catalogue(self, args: argparse.Namespace) -> Any:
        """The catalogue imported from the same schema file that maps the gold names (see `schema_path`)."""
        return import_catalogue_file(schema_path(args), "sgd")

    def predictions_from_file(self, item: EvalItem, record: dict[str, Any]) -> dict[str, Any]:
        prediction = record.get("prediction", record)
        try:
            calls = [c.model_dump() for c in calls_from_any(prediction.get("calls") or [])]
        except ParseError as exc:
            return {"status": "parse_error", "calls": [], "error": str(exc)}
        return dict(prediction) | {"status": prediction.get("status", "ok"), "calls": calls}

    # -- scoring ------------------------------------------------------------------------------------------
    def score(self, item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
        gold = item.gold["state"]
        if prediction.get("status", "ok") != "ok":
            return dict(ZERO) | {"tp": 0.0, "n_pred": 0.0,
                                 "n_gold": float(sum(len(f["slots"]) for f in gold.values()))}
        calls = calls_from_any(prediction.get("calls"))
        functions = item.meta.get("functions", {})
        services = set(item.input.get("services") or [])
        if "state" in prediction:
            # The state parse_request returned (every function of the conversation with its values so far).
            # Oldest function first, the active one last: on a slot two functions of one service share, the value
            # the conversation is using now wins.
            calls_now = DialogueState.model_validate(prediction["state"]).calls()
            state = predicted_state(list(reversed(calls_now)), functions)
        else:
            # An older run without one: this turn's calls on top of the state the history's calls set.
            source = prediction["carried"] if "carried" in prediction else item.meta.get("carried")
            state = predicted_state(calls, functions, source or {})
        # A service of this dialogue that this turn's gold does not list was set earlier and is not scored here;
        # a service the dialogue never uses was a wrong prediction and stays one (its slots are false positives).
        scored = {s: v for s, v in state.items() if s in gold or s not in services}
        scores = score_turn(scored, gold)
        # Function selection is judged on this turn's calls only: a turn with no call is not credited an intent.
        scores["intent_accuracy"] = score_turn(predicted_state(calls, functions), gold)["intent_accuracy"]
        turns = item.input.get("dialogue") or []
        offered = next((t.get("content", "") for t in reversed(turns[:-1]) if t.get("role") == "assistant"), "")
        said = " ".join(t.get("content", "") for t in turns if t.get("role") == "user")
        errors = turn_errors(scored, gold, carried=item.meta.get("carried") or {}, offered=offered, said=said,
                             intent_right=bool(scores["intent_accuracy"]))
        scores |= {f"error: {e}": float(e in errors) for e in ERROR_CLASSES}
        if prediction.get("baseline_evidence"):
            # the function-selection part: this turn's called functions against its gold calls' (none on a turn
            # without an intent), beside each retrieval baseline's
            wanted = {c["name"] for c in item.gold.get("calls") or []}
            scores["function_set"] = float({c.name for c in calls} == wanted)
            scores |= selection.baseline_scores(prediction["baseline_evidence"], wanted)
        return scores

    def aggregate(self, items: list[ScoredItem]) -> dict[str, Any]:
        n = len(items)
        # Turns of one dialogue are not independent: every per-turn figure's interval resamples whole dialogues.
        dialogues = [i.meta.get("dialogue_id") for i in items]
        metrics: dict[str, Any] = {k: clustered_mean([i.scores.get(k, 0.0) for i in items], dialogues)
                                   for k in MEAN_KEYS} if n else {}
        metrics["slot_micro_f1"] = micro([slot_counts(i) for i in items])[2]
        metrics["parse_error_rate"] = proportion(sum(i.status == "parse_error" for i in items), n)
        metrics["failure_rate"] = proportion(sum(i.status not in ("ok", "parse_error") for i in items), n)
        metrics["dialogues"] = len({i.meta.get("dialogue_id") for i in items})
        predicted = any("carried" in i.prediction for i in items)
        metrics["history"] = ("predicted (the model's own calls of earlier turns in context and in the state)"
                              if predicted else "oracle (gold calls of earlier turns in context)")
        groups: dict[str, list[ScoredItem]] = {}
        for item in items:
            groups.setdefault(item.meta.get("domain", "unknown"), []).append(item)
        metrics["by_domain"] = {
            d: {"n": len(g), **{k: clustered_mean([i.scores.get(k, 0.0) for i in g],
                                                  [i.meta.get("dialogue_id") for i in g]) for k in MEAN_KEYS}}
            for d, g in sorted(groups.items())
        }
        # Share of turns with each error class (a turn may have several; `error: CLASS` per turn in results.jsonl).
        metrics["error_classes"] = {e: clustered_mean([i.scores.get(f"error: {e}", 0.0) for i in items], dialogues)
                                    for e in ERROR_CLASSES} if n else {}
        baselines = selection.baseline_metrics(items, own="function_set", cluster="dialogue_id")
        if baselines:  # each with the answers' own function set on the same turns; intervals by dialogue, as above
            metrics["baselines"] = baselines
        return metrics

    def plots(self, items: list[ScoredItem], out_dir: Path) -> list[Path]:
        values = group_mean(items, lambda i: str(i.meta.get("domain", "unknown")), "joint_goal_accuracy")
        if not values:
            return []
        return [bar_chart(values, out_dir / "dst_jga_by_domain.png", "joint goal accuracy by domain", "JGA")]


def schema_path(args: argparse.Namespace, data: Path | None = None) -> Path:
    """The SGD schema of the split: --schema FILE (--sgd-schema is its deprecated alias), else the split's schema
    beside --data (`default_schemas`). One file gives both the catalogue the model sees and the mapping of gold
    (service, intent) names to its functions, so the two cannot disagree."""
    schema, alias = getattr(args, "schema", None), getattr(args, "sgd_schema", None)
    if getattr(args, "catalogue", None):
        raise ConfigError("eval dst takes its catalogue from the SGD schema of the split: pass --schema FILE, "
                          "not --catalogue")
    if alias:
        if schema and Path(schema) != Path(alias):
            raise ConfigError(f"--sgd-schema {alias} and --schema {schema} differ: pass only --schema FILE")
        sys.stderr.write("warning: --sgd-schema is deprecated; --schema FILE now sets both the catalogue and the "
                         "gold-name mapping\n")
        schema = alias
    if schema:
        path = Path(schema)
        if not path.is_file():
            raise ConfigError(f"SGD schema {path} does not exist; pass the schema of this split with --schema FILE")
        return path
    if data is None:
        data = Path(args.data) if getattr(args, "data", None) else shared_data_dir() / "sgd" / "dev_dialogues_001.json"
    candidates = default_schemas(data)
    for path in candidates:
        if path.is_file():
            return path
    looked = " or ".join(p.name for p in candidates)
    raise ConfigError(f"no SGD schema beside {data} (looked for {looked}); pass the schema of this split with "
                      "--schema FILE")


def default_schemas(data: Path) -> list[Path]:
    """The split's own schema beside its dialogues: <split>_schema.json for <split>_dialogues_NNN.json (the
    shared data's naming), then schema.json (SGD's own layout, one folder per split). Never another split's."""
    names = []
    if "_dialogues" in data.name:
        names.append(data.name.split("_dialogues", 1)[0] + "_schema.json")
    names.append("schema.json")
    return [data.parent / name for name in names]


def sgd_services(schema: Any, path: Path) -> list[dict[str, Any]]:
    """The schema's services; a file that is not an SGD schema (services with intents and slots) is an error."""
    services = schema.get("services", schema) if isinstance(schema, dict) else schema
    if not isinstance(services, list) or not all(
        isinstance(s, dict) and "service_name" in s and "intents" in s for s in services
    ):
        raise ConfigError(f"{path} is not an SGD schema (a list of services with service_name, intents, slots); "
                          "eval dst maps gold names through it: pass the split's schema_*.json with --schema")
    return services


def check_gold_names(dialogues: list[dict[str, Any]], services: list[dict[str, Any]], path: Path) -> None:
    """Every gold service, active intent and slot must exist in the schema; else the split and the schema do not
    match and every such turn would score 0 in silence. One line naming the first unknown name and the count."""
    known = {s["service_name"]: ({i["name"] for i in s.get("intents", [])},
                                 {slot["name"] for slot in s.get("slots", [])}) for s in services}
    unknown: dict[str, str] = {}
    for dialogue in dialogues:
        for index, turn in enumerate(dialogue.get("turns", [])):
            where = f"dialogue {dialogue.get('dialogue_id')} turn {index}"
            for frame in turn.get("frames", []):
                service = frame.get("service")
                if service not in known:
                    unknown.setdefault(f"service {service!r}", where)
                    continue
                intents, slots = known[service]
                state = frame.get("state") or {}
                intent = state.get("active_intent", "NONE")
                if intent != "NONE" and intent not in intents:
                    unknown.setdefault(f"intent {intent!r} of service {service!r}", where)
                for slot in state.get("slot_values", {}):
                    if slot not in slots:
                        unknown.setdefault(f"slot {slot!r} of service {service!r}", where)
    if unknown:
        name, where = next(iter(unknown.items()))
        more = f" (and {len(unknown) - 1} more unknown names)" if len(unknown) > 1 else ""
        raise ConfigError(f"gold {name} ({where}) is not in the SGD schema {path}{more}; pass the schema of this "
                          "split with --schema FILE")


def function_names(schema: list[dict[str, Any]]) -> dict[str, str]:
    """(service, intent) -> catalogue function name, the schemas importer's rule: intent names shared by
    several services are qualified as Service_Intent. Returned as {"Service|Intent": name}."""
    counts = Counter(intent["name"] for service in schema for intent in service.get("intents", []))
    out = {}
    for service in schema:
        for intent in service.get("intents", []):
            name = intent["name"]
            out[f"{service['service_name']}|{name}"] = f"{service['service_name']}_{name}" if counts[name] > 1 else name
    return out


def gold_frames(turn: dict[str, Any]) -> dict[str, dict[str, Any]]:
    state = {}
    for frame in turn.get("frames", []):
        if "state" not in frame:
            continue
        state[frame["service"]] = {"intent": frame["state"].get("active_intent", "NONE"),
                                   "slots": {k: list(v) for k, v in frame["state"].get("slot_values", {}).items()}}
    return state


def gold_calls(state: dict[str, dict[str, Any]], names: dict[str, str]) -> list[Call]:
    calls = []
    for service, frame in state.items():
        if frame["intent"] == "NONE":
            continue
        name = names.get(f"{service}|{frame['intent']}", frame["intent"])
        calls.append(Call(name=name, arguments={k: v[0] for k, v in frame["slots"].items() if v}))
    return calls


def turn_items(dialogue: dict[str, Any], names: dict[str, str]) -> list[EvalItem]:
    """One item per user turn; the dialogue so far, with gold calls on the system turns (oracle history)."""
    items: list[EvalItem] = []
    history: list[dict[str, Any]] = []
    pending: list[Call] = []
    carried: dict[str, dict[str, Any]] = {}  # state set by the calls already in the history
    earlier: list[str] = []  # ids of the dialogue's earlier user turns (predicted history replays them)
    services = dialogue.get("services", [])
    functions = {name: key.split("|")[0] for key, name in names.items() if key.split("|")[0] in services}
    for index, turn in enumerate(dialogue["turns"]):
        if turn["speaker"] == "USER":
            history.append({"role": "user", "content": turn["utterance"]})
            state = gold_frames(turn)
            calls = gold_calls(state, names)
            items.append(EvalItem(
                id=f"{dialogue['dialogue_id']}:{index}",
                input={"dialogue": [dict(t) for t in history], "services": services},
                gold={"state": state, "calls": [c.model_dump() for c in calls]},
                meta={"dialogue_id": dialogue["dialogue_id"], "domain": "+".join(sorted(state)) or "none",
                      "functions": functions, "carried": {k: dict(v) for k, v in carried.items()},
                      "earlier": list(earlier)},
            ))
            earlier.append(items[-1].id)
            pending = calls
            carried = predicted_state(calls, functions, carried)
        else:
            history.append({"role": "assistant", "content": turn["utterance"],
                            "calls": [c.model_dump() for c in pending]})
            pending = []
    return items


def with_history(turns: list[dict[str, Any]], earlier: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The dialogue with the model's own calls on the assistant turns that answered each earlier user turn."""
    out, answered = [], 0
    for turn in turns:
        turn = dict(turn)
        if turn.get("role") == "assistant":
            turn["calls"] = list(earlier[answered]) if answered < len(earlier) else []
            answered += 1
        out.append(turn)
    return out


def stored_predictions(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Calls already predicted in --out's results.jsonl (a resumed run replays them as history)."""
    import json

    out = getattr(args, "out", None)
    path = Path(out) / "results.jsonl" if out else None
    store: dict[str, list[dict[str, Any]]] = {}
    if path is not None and path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            prediction = record.get("prediction") or {}
            if "id" in record and prediction.get("status", "ok") == "ok":
                store[str(record["id"])] = list(prediction.get("calls") or [])
    return store


def predicted_state(
    calls: list[Call], functions: dict[str, str], carried: dict[str, dict[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    """Calls -> {service: {intent, slots}} on top of the carried state; Service_Intent names and plain intent
    names both resolve. A call's arguments update its service's slots (models often repeat only new ones)."""
    state: dict[str, dict[str, Any]] = {
        s: {"intent": f.get("intent"), "slots": dict(f.get("slots") or {})} for s, f in (carried or {}).items()
    }
    for call in calls:
        service = functions.get(call.name)
        intent = call.name
        if service is None:
            # A qualified name for a service outside this dialogue, or an unknown function: keep it as a
            # false positive under its own name so extra slots are still counted.
            service = call.name
        elif call.name.startswith(service + "_"):
            intent = call.name[len(service) + 1:]
        frame = state.setdefault(service, {"intent": intent, "slots": {}})
        frame["intent"] = intent
        frame["slots"].update({k: v for k, v in call.arguments.items() if v not in (None, "")})
    return state


TASK = DstTask()
