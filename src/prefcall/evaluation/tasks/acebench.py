"""`prefcall eval acebench`: every ACEBench (English) category of the public format.

Data: JSON lines `{id, question, function, time?, profile?}` in `data_<category>.json`, gold in
`possible_answer/data_<category>.json` beside it (or --answers FILE). `--data` may also be a folder: every
`data_*.json` in it is read, with its answers from `<folder>/possible_answer/`. The category comes from
--category, else the file name, else the item id. `question` is "user: ..." text; multi-turn categories hold a
whole dialogue there ("user: ... / system: ..." lines, earlier calls written as `system: [f(a=1)]`).

What each category expects (the decision is call / ask / refuse; QwN's continue / question / limitation and
ACEBench's reply texts map onto it):
- special_incomplete -> ask, naming the missing required parameters (gold `{function: [names]}`);
- special_error_param -> ask about the wrong value (gold `{parameter: [wrong values]}`);
- special_irrelevant -> refuse (no function fits);
- normal_* (single_turn_single_function, single_turn_parallel_function, multi_turn_user_adjust,
  multi_turn_user_switch, similar_api, preference, atom_bool|enum|number|list|object_deep|object_short) -> call,
  with the argument values scored against possible_answer (metrics/acebench.py);
- agent_* (multi_turn, multi_step: `initial_config`, `involved_classes`, `mile_stone`) need ACEBench's
  executable environment and a simulated user: loaded, counted and reported as "not scorable here".

Metrics: decision accuracy (a parse error is wrong), per category; missing-parameter recall (incomplete) and
wrong-value recall (error_param): the gold names (or wrong values) found among the arguments the question flags
or in its text; on normal items with calls: function match, argument accuracy and exact calls; the decision
confusion counts; each figure with n and a 95% interval. --mode picks the clarify policy: combined (default),
model (the paper alone) or evidence. On a call decision for a normal item the call is drafted (one call; the
parallel categories expect several, so their exact-call scores stay low by construction) unless --no-calls.

Stored predictions (--predictions): results.jsonl lines, `{id, decision, calls, question, missing}` records,
or ACEBench's own output `{id, result: "[f(a=1)]" | "Missing necessary parameters ..." | ...}`.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from pathlib import Path
from typing import Any

from prefcall.errors import ConfigError, ParseError, PrefcallError
from prefcall.evaluation.metrics.acebench import best_alternative, gold_alternatives, mentioned
from prefcall.evaluation.metrics.intervals import mean, proportion
from prefcall.evaluation.task import BaseTask, EvalContext, EvalItem, ScoredItem
from prefcall.evaluation.tasks import tools as selection
from prefcall.retrieval.text import split_identifier
from prefcall.schemas.calls import parse_calls
from prefcall.schemas.importers import import_catalogue
from prefcall.schemas.model import Call, Catalogue, Function, Turn
from prefcall.strategies.qwn import clarify
from prefcall.strategies.qwn_draft import draft_call

POLICIES = ("combined", "model", "evidence")
# What answers an item: clarify (QwN's decision, then a drafted call) or parse_request (the shipped pipeline, with
# the item's user profile as the user's standing instructions: `profile_instructions`).
TOOLS = ("clarify", "parse_request")
SPECIAL = {"special_incomplete": "ask", "special_error_param": "ask", "special_irrelevant": "refuse"}
NORMAL = ("normal_single_turn_single_function", "normal_single_turn_parallel_function",
          "normal_multi_turn_user_adjust", "normal_multi_turn_user_switch", "normal_similar_api",
          "normal_preference", "normal_atom_bool", "normal_atom_enum", "normal_atom_number", "normal_atom_list",
          "normal_atom_object_deep", "normal_atom_object_short")
AGENT = ("agent_multi_turn", "agent_multi_step")
AGENT_SKIP = "agent category: needs ACEBench's executable environment (initial_config, mile_stone) and a simulated user"
# The decision vocabulary: QwN's (continue / question / limitation) and the pipeline's (call / ask / refuse).
DECISIONS = {"call": "call", "continue": "call", "ask": "ask", "question": "ask", "refuse": "refuse",
             "limitation": "refuse"}
# ACEBench's reply texts for the special categories (eval_main.py special_eval).
ACE_TEXTS = (("missing necessary parameters", "ask"), ("there is incorrect value", "ask"),
             ("the limitations of the function", "refuse"), ("limitation of toolset", "refuse"))

_SPEAKER_RE = re.compile(r"^(user|assistant|system)\s*:\s*", re.IGNORECASE | re.MULTILINE)
_ID_INDEX = re.compile(r"(_\d+)+$")


# -- categories and loading ------------------------------------------------------------------
def known_category(category: str) -> str:
    """The category if this harness knows it (normal_* beyond the public list are read as call categories)."""
    if category in SPECIAL or category in AGENT or category.startswith("normal_"):
        return category
    known = ", ".join([*SPECIAL, *NORMAL, *AGENT])
    raise ConfigError(f"unknown ACEBench category {category!r}: pass --category with one of {known}")


def category_of(item_id: str) -> str:
    """normal_multi_turn_user_adjust_3_1 -> normal_multi_turn_user_adjust."""
    return _ID_INDEX.sub("", item_id)


def category_of_file(path: Path) -> str | None:
    """data_<category>.json -> <category> (None for other names)."""
    match = re.fullmatch(r"data_(.+)\.jsonl?", path.name)
    return match.group(1) if match else None


def expected_decision(category: str) -> str:
    return SPECIAL.get(category, "call")


def parse_dialogue(question: str) -> list[Turn]:
    """'user: ...\\nsystem: ...' text into turns (ACEBench's "system" is the assistant; a `[f(a=1)]` reply is
    that turn's calls); text without a speaker is one user turn."""
    parts = _SPEAKER_RE.split(question.strip())
    if len(parts) < 3:
        return [Turn(role="user", content=question.strip())]
    turns = []
    for role, content in zip(parts[1::2], parts[2::2]):
        role, content = role.lower(), content.strip()
        if role == "user":
            turns.append(Turn(role="user", content=content))
            continue
        calls = _calls_in(content)
        turns.append(Turn(role="assistant", content="" if calls else content, calls=calls))
    return turns


def _calls_in(text: str) -> list[Call]:
    if not (text.startswith("[") and text.endswith("]")):
        return []
    try:
        return parse_calls(text[1:-1])
    except ParseError:
        return []


def gold_of(category: str, answer: Any, functions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The expected decision and what else a category's answer says (missing names, wrong values, calls)."""
    decision = expected_decision(category)
    if category == "special_incomplete":
        if not isinstance(answer, dict):
            raise ValueError("special_incomplete answer must be {function: [missing parameter names]}")
        return {"decision": decision,
                "missing": {fn: [str(p).strip() for p in params] for fn, params in answer.items()}}
    if category == "special_error_param":
        if not isinstance(answer, dict):
            raise ValueError("special_error_param answer must be {parameter: [wrong values]}")
        return {"decision": decision, "wrong": {p: [str(v) for v in (vs if isinstance(vs, list) else [vs])]
                                                for p, vs in answer.items()}}
    if category == "special_irrelevant":
        return {"decision": decision}
    if answer is None:
        raise ValueError("no possible answer for this id")
    names = [str(f.get("name")) for f in functions or []]
    return {"decision": decision, "answers": gold_alternatives(answer, names)}


def data_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.glob("data_*.json*") if p.is_file())
        if not files:
            raise ConfigError(f"no data_<category>.json files in {path}: pass an ACEBench data folder or file")
        return files
    if not path.is_file():
        raise ConfigError(f"ACEBench data {path} does not exist; pass --data data_<category>.json or its folder")
    return [path]


def load_items(path: str | Path, answers_path: str | Path | None = None, category: str | None = None
               ) -> list[EvalItem]:
    """Every item of a data file (or of every data_*.json in a folder), its gold from possible_answer."""
    files = data_files(Path(path))
    if len(files) > 1 and (answers_path or category):
        raise ConfigError("--answers and --category name one file's answers and category: pass --data FILE")
    items: list[EvalItem] = []
    for file in files:
        items.extend(load_file(file, answers_path, category))
    return items


def load_file(path: Path, answers_path: str | Path | None, category: str | None) -> list[EvalItem]:
    records = selection.read_records(path)
    file_category = category or category_of_file(path)
    answers_file = Path(answers_path) if answers_path else path.parent / "possible_answer" / path.name
    answers: dict[str, Any] = {}
    if answers_file.is_file():
        answers = {str(r.get("id")): r.get("ground_truth") for r in selection.read_records(answers_file)}
    elif answers_path:
        raise ConfigError(f"ACEBench answers {answers_file} do not exist; pass --answers possible_answer/<file>")
    items = []
    for index, record in enumerate(records):
        item_id = str(record.get("id", f"{path.stem}_{index}")) if isinstance(record, dict) else f"{path.stem}_{index}"
        cat = known_category(file_category or category_of(item_id))
        if not answers and cat not in AGENT and cat != "special_irrelevant":
            raise ConfigError(f"no ACEBench answers at {answers_file}: pass --answers possible_answer/<file>")
        items.append(make_item(record, item_id, cat, answers.get(item_id)))
    return items


def make_item(record: Any, item_id: str, category: str, answer: Any) -> EvalItem:
    """One item; an unreadable record or answer is an error item (one error row), an agent one is skipped."""
    meta: dict[str, Any] = {"category": category, "expected": expected_decision(category) if category not in AGENT
                            else "agent"}
    if not isinstance(record, dict):
        return EvalItem(id=item_id, input={"record": record}, meta=meta, error="record is not a JSON object")
    functions = record.get("function")
    if category in AGENT:
        return EvalItem(id=item_id, input={"question": record.get("question"),
                                           "involved_classes": record.get("involved_classes")},
                        meta=meta, skip=AGENT_SKIP)
    source = {"question": record.get("question"), "functions": functions, "time": record.get("time") or None,
              "profile": record.get("profile") or None}
    if not isinstance(record.get("question"), str) or not isinstance(functions, list):
        return EvalItem(id=item_id, input=source, meta=meta,
                        error="record lacks a text 'question' or a 'function' list")
    meta |= {"n_functions": len(functions), "turns": sum(1 for t in parse_dialogue(record["question"])
                                                         if t.role == "user")}
    try:
        gold = gold_of(category, answer, functions)
    except (ValueError, TypeError, AttributeError) as exc:
        return EvalItem(id=item_id, input=source, meta=meta, error=f"possible answer unreadable: {exc}")
    return EvalItem(id=item_id, input=source, gold=gold, meta=meta)


def catalogue_of(functions: list[dict[str, Any]]) -> Catalogue:
    """The imported catalogue; the raw functions when the importer rejects them."""
    try:
        return import_catalogue(functions, name="acebench", format="functions")
    except PrefcallError:
        return Catalogue(name="acebench", functions=[Function.model_validate(f) for f in functions])


def profile_instructions(profile: Any) -> list[str]:
    """An ACEBench user profile as standing instructions, one per fact, as a user of prefcall would store them:
    each basic feature as "My <feature's words> is <value>." ("UserHomeLocation" -> "My user home location is
    Chicago, IL.") and each entry of a history as "From my <kind> history: <entry>.". The profile is a dict or its
    Python-literal (or JSON) text; one that cannot be read is one instruction holding its text."""
    data = profile
    if isinstance(profile, str):
        text = profile.strip().rstrip(".").strip()
        for reader in (ast.literal_eval, json.loads):
            try:
                data = reader(text)
                break
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
    if not isinstance(data, dict):
        return [f"User profile: {str(profile).strip()}"] if str(profile).strip() else []
    out: list[str] = []
    for section, facts in data.items():
        if isinstance(facts, dict) and "history" in str(section).lower():
            for kind, entries in facts.items():
                for entry in entries if isinstance(entries, list) else [entries]:
                    out.append(f"From my {split_identifier(str(kind)).lower()} history: "
                               f"{str(entry).strip().rstrip('.')}.")
        elif isinstance(facts, dict):
            out.extend(f"My {split_identifier(str(k)).lower()} is {str(v).strip()}." for k, v in facts.items())
        else:
            out.append(f"My {split_identifier(str(section)).lower()} is {str(facts).strip()}.")
    return out


def parse_request_prediction(item: EvalItem, ctx: EvalContext) -> dict[str, Any]:
    """parse_request's answer (the shipped pipeline; `--config`, default full, refusals allowed as the MCP server
    allows them), with the item's profile as the user's standing instructions (`profile_instructions`)."""
    from prefcall.evaluation.tasks.bfcl import BfclTask, pipeline_prediction
    from prefcall.strategies.pipeline_models import get_config

    catalogue = catalogue_of(item.input["functions"])
    instructions = profile_instructions(item.input["profile"]) if item.input.get("profile") else []
    config = get_config(getattr(ctx.args, "config", None) or "full", allow_refuse=True)
    pipeline = ctx.memo("pipeline", lambda: BfclTask.pipeline(ctx))
    result = pipeline.parse(parse_dialogue(item.input["question"]), instructions, catalogue, config)
    answer = pipeline_prediction(result)
    decision = DECISIONS.get(str(answer["decision"]), answer["decision"])
    return {"status": answer["status"], "decision": decision, "question": answer["question"],
            "missing": [m.argument for m in result.missing] if decision == "ask" else [],
            "calls": answer["calls"] if decision == "call" else [],
            "functions": answer["functions"] if decision != "refuse" else [],
            "instructions": len(instructions), "instructions_used": result.instructions_used,
            "error": answer["error"], "tokens": answer["tokens"], "seconds": answer["seconds"]}


# -- predict --------------------------------------------------------------------------------------
def predict(item: EvalItem, engine: Any, mode: str = "combined", *, embedder: Any = None,
            with_calls: bool = True, pipeline: Any = None) -> dict[str, Any]:
    catalogue = catalogue_of(item.input["functions"])
    instructions = [f"User profile: {str(item.input['profile']).strip()}"] if item.input.get("profile") else []
    dialogue = parse_dialogue(item.input["question"])
    # as the MCP server's clarify: the model's fitted check (from `pipeline`, the server's) beside the embedder
    check, stage = pipeline.check_for(dialogue, catalogue, instructions) if pipeline is not None and \
        embedder is not None else (None, None)
    result = clarify(
        engine, dialogue, catalogue, instructions=instructions, context=item.input.get("time"), policy=mode,
        embedder=embedder, check=check, stage=stage,  # type: ignore[arg-type]
    )
    tokens = selection.tokens_of(result)  # ClarifyResult has the same usage fields as NltResult
    decision = DECISIONS.get(result.decision, result.decision)
    prediction: dict[str, Any] = {
        "status": result.status,
        "decision": decision,
        "question": result.question,
        "missing": [m.argument for m in result.missing_arguments],
        "model_said": result.model_said,
        "evidence": result.evidence,
        "tokens": tokens,
        "seconds": round(result.seconds, 4),
        # the function the answer is about (clarify's draft); none for a limitation
        "functions": [result.draft.name] if result.draft is not None and decision != "refuse" else [],
    }
    if result.decision_without_check is not None:  # the model's check decided: the embedder's rule alone gave this
        prediction["decision_without_check"] = DECISIONS.get(result.decision_without_check,
                                                             result.decision_without_check)
    if with_calls and str(item.meta.get("category", "")).startswith("normal_"):
        calls: list[dict[str, Any]] = []
        if result.status == "ok" and decision == "call":
            draft = draft_call(engine, dialogue, catalogue, instructions=instructions,
                               context=item.input.get("time"), keep_required=True)
            for key in tokens:
                tokens[key] += int(getattr(draft.usage, key, 0))
            if draft.call is None:
                return prediction | {"status": "parse_error", "calls": [], "raw": draft.raw_text,
                                     "error": "the drafted call's arguments did not parse"}
            calls = [draft.call.model_dump()]
        prediction["calls"] = calls
    return prediction


def prediction_from_record(record: dict[str, Any]) -> dict[str, Any]:
    """A stored prediction: our own fields, or ACEBench's `result` text (calls, or a special reply)."""
    prediction = record.get("prediction", record)
    if not isinstance(prediction, dict):
        prediction = {"result": prediction}
    if "decision" not in prediction and "calls" not in prediction and "call" not in prediction:
        if "result" not in prediction:
            return {"status": "parse_error", "error": "record has no decision, calls or ACEBench result"}
        return from_acebench_text(prediction["result"])
    out = {k: v for k, v in prediction.items() if k != "call"}
    if "call" in prediction:  # the older single-call field
        out["calls"] = [prediction["call"]] if prediction["call"] else []
    if "calls" in out:
        out["calls"] = [c.model_dump() for c in _as_calls(out["calls"])]
    decision = prediction.get("decision")
    out["decision"] = DECISIONS.get(str(decision), decision) if decision else ("call" if out.get("calls") else None)
    out["status"] = prediction.get("status", "ok")
    return out


def _as_calls(raw: Any) -> list[Call]:
    out = []
    for entry in raw or []:
        if isinstance(entry, str):
            out.extend(parse_calls(entry.strip().strip("[]")))
        elif isinstance(entry, dict) and "name" in entry:
            out.append(Call(name=str(entry["name"]), arguments=dict(entry.get("arguments") or {})))
        elif isinstance(entry, dict) and len(entry) == 1:  # ACEBench style {function: {argument: value}}
            name, arguments = next(iter(entry.items()))
            out.append(Call(name=str(name), arguments=dict(arguments or {})))
        else:
            raise ParseError(f"cannot read a call from {str(entry)[:80]!r}")
    return out


def from_acebench_text(result: Any) -> dict[str, Any]:
    """ACEBench's model output: a special reply ("Missing necessary parameters (x) for the api (f)", "There is
    incorrect value (v) for the parameters (p)", "... the limitations of the function ...") or `[f(a=1), ...]`."""
    text = str(result).strip()
    lowered = text.lower()
    for marker, decision in ACE_TEXTS:
        if marker in lowered:
            return {"status": "ok", "decision": decision, "question": text, "missing": []}
    try:
        calls = parse_calls(text[1:-1] if text.startswith("[") and text.endswith("]") else text)
    except ParseError as exc:
        return {"status": "parse_error", "raw": text[:500], "error": f"ACEBench result is neither a special reply "
                f"nor calls: {exc}"}
    return {"status": "ok", "decision": "call", "calls": [c.model_dump() for c in calls]}


# -- score and aggregate ----------------------------------------------------------------------------
def missing_recall(predicted: list[str], gold: dict[str, list[str]], text: str | None = None) -> float:
    """Share of gold missing-parameter names the question asked about; 1.0 when gold names none."""
    return mentioned([n for names in gold.values() for n in names], predicted, text)


def score(item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
    gold = item.gold or {}
    ok = prediction.get("status", "ok") == "ok"
    decided = DECISIONS.get(str(prediction.get("decision")), prediction.get("decision")) if ok else None
    scores = {"decision_correct": float(decided == gold.get("decision"))}
    asked = decided == "ask"
    flagged = list(prediction.get("missing") or []) if asked else []
    text = prediction.get("question") if asked else None
    if "missing" in gold:
        scores["missing_recall"] = missing_recall(flagged, gold["missing"], text) if asked else 0.0
    if "wrong" in gold:
        # the wrong parameter flagged or named, or its wrong value quoted back (ACEBench checks the value)
        hits = [float(asked and (mentioned([p], flagged, text) == 1.0
                                 or any(mentioned([v], [], text) == 1.0 for v in values)))
                for p, values in gold["wrong"].items()]
        scores["wrong_value_recall"] = sum(hits) / len(hits) if hits else 1.0
    if "answers" in gold and "calls" in prediction:
        calls = _as_calls(prediction.get("calls")) if ok and decided == "call" else []
        scores |= best_alternative([c.model_dump() for c in calls], gold["answers"])
    wanted = gold_functions(item)
    if wanted is not None and prediction.get("baseline_evidence"):
        # the function set the answer is about (its calls, else its draft; none for a refusal) beside the
        # baselines' on the same request
        named = {c.name for c in _as_calls(prediction.get("calls"))} if prediction.get("calls") else \
            set(prediction.get("functions") or [])
        scores["function_set"] = float(ok and set(named if decided != "refuse" else ()) == set(wanted))
        scores |= selection.baseline_scores(prediction["baseline_evidence"], wanted)
    return scores


def gold_functions(item: EvalItem) -> list[str] | None:
    """The functions a right answer is about: none where no function fits (special_irrelevant), the ones missing
    parameters (special_incomplete), the first alternative's calls (normal categories); None where the gold
    names none (special_error_param, agent categories)."""
    gold = item.gold or {}
    if gold.get("decision") == "refuse":
        return []
    if "missing" in gold:
        return sorted(gold["missing"])
    if gold.get("answers"):
        return sorted({c["name"] for c in gold["answers"][0]})
    return None


def aggregate(scored: list[ScoredItem]) -> dict[str, Any]:
    n = len(scored)
    metrics: dict[str, Any] = {"n": n, "decision_accuracy": mean(i.scores.get("decision_correct", 0.0) for i in scored)}
    for key in ("missing_recall", "wrong_value_recall", "function_match", "argument_accuracy", "call_exact"):
        values = [i.scores[key] for i in scored if key in i.scores]
        if values:
            metrics[key] = mean(values)
    groups: dict[str, list[ScoredItem]] = {}
    confusion: dict[str, int] = {}
    for item in scored:
        groups.setdefault(str(item.meta.get("category")), []).append(item)
        said = DECISIONS.get(str(item.prediction.get("decision")), item.prediction.get("decision")) \
            if item.status == "ok" else item.status
        pair = f"{(item.gold or {}).get('decision')}->{said}"
        confusion[pair] = confusion.get(pair, 0) + 1
    metrics["decision_accuracy_by_category"] = {
        c: mean(i.scores.get("decision_correct", 0.0) for i in g) for c, g in sorted(groups.items())}
    by_category: dict[str, dict[str, Any]] = {}
    for c, g in sorted(groups.items()):
        row: dict[str, Any] = {"n": len(g), "expected": expected_decision(c)}
        for key in ("decision_correct", "missing_recall", "wrong_value_recall", "argument_accuracy", "call_exact"):
            values = [i.scores[key] for i in g if key in i.scores]
            if values:
                row["decision_accuracy" if key == "decision_correct" else key] = mean(values)
        by_category[c] = row
    metrics["by_category"] = by_category
    metrics["confusion"] = dict(sorted(confusion.items()))
    metrics["parse_error_rate"] = proportion(sum(i.status != "ok" for i in scored), n)
    baselines = selection.baseline_metrics(scored, own="function_set")
    if baselines:  # each with the answers' own function set on the same items (`rule_exact_set_accuracy`)
        metrics["baselines"] = baselines
    metrics.update(selection.mean_tokens(scored))
    return metrics


class AceBenchTask(BaseTask):
    name = "acebench"
    description = ("ACEBench, every category: decisions (call / ask / refuse), missing and wrong parameters, "
                   "argument values against possible_answer; agent categories are counted as not scorable here")
    primary_score = "decision_correct"
    failure_scores = ("decision_correct", "call_exact")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--category", help="the ACEBench category of --data (default: from data_<category>.json)")
        parser.add_argument("--embedder-relevance", action="store_true",
                            help="judge relevance by the embedder's fitted relevance rule (as the MCP server "
                                 "does) instead of NLT scoring")
        parser.add_argument("--no-calls", action="store_true",
                            help="normal categories: score the decision only, do not draft the call")
        parser.add_argument("--with-calls", action="store_true", help=argparse.SUPPRESS)  # now the default
        parser.add_argument("--tool", choices=TOOLS, default=TOOLS[0],
                            help="what answers: clarify (its decision, then a drafted call; the default) or "
                                 "parse_request (the pipeline of --config, default full, with the item's user "
                                 "profile as standing instructions, one per fact)")

    def data_files(self, args: argparse.Namespace) -> list[Path]:
        return data_files(Path(args.data)) if getattr(args, "data", None) else []

    def load(self, args: argparse.Namespace) -> list[EvalItem]:
        if not getattr(args, "data", None):
            raise ConfigError("eval acebench needs --data data_<category>.json or a folder of them "
                              "(answers are found in possible_answer/)")
        return load_items(args.data, getattr(args, "answers", None), getattr(args, "category", None))

    def predict(self, item: EvalItem, ctx: EvalContext) -> dict[str, Any]:
        args = ctx.args
        mode = getattr(args, "mode", None) or "combined"
        if mode not in POLICIES:
            raise ConfigError(f"--mode {mode!r}: use one of {', '.join(POLICIES)}")
        embedder = ctx.embedder if getattr(args, "embedder_relevance", False) else None
        from prefcall.evaluation.tasks.bfcl import BfclTask

        if getattr(args, "tool", TOOLS[0]) == "parse_request":
            for option in ("mode", "embedder_relevance", "no_calls"):
                if getattr(args, option, None) not in (None, False):
                    raise ConfigError(f"--{option.replace('_', '-')} is clarify's: pass --tool clarify, or leave "
                                      "it out (parse_request runs the pipeline of --config)")
            prediction = parse_request_prediction(item, ctx)
        else:
            prediction = predict(item, ctx.engine, mode, embedder=embedder,
                                 with_calls=not getattr(args, "no_calls", False),
                                 pipeline=ctx.memo("pipeline", lambda: BfclTask.pipeline(ctx)))
        if gold_functions(item) is not None:  # the retrieval baselines on the same request, decided at scoring
            turns = parse_dialogue(item.input["question"])
            words = "\n".join(t.content for t in turns if t.role == "user") or str(item.input["question"])
            prediction["baseline_evidence"] = selection.request_baselines(words, item.input["functions"],
                                                                          ctx.embedder)
        return prediction

    def predictions_from_file(self, item: EvalItem, record: dict[str, Any]) -> dict[str, Any]:
        try:
            return prediction_from_record(record)
        except ParseError as exc:
            return {"status": "parse_error", "error": str(exc)}

    def score(self, item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
        return score(item, prediction)

    def aggregate(self, items: list[ScoredItem]) -> dict[str, Any]:
        return aggregate(items)


TASK = AceBenchTask()
