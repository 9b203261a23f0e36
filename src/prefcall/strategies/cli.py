"""`prefcall tag` (TAPS tagger), `prefcall calibrate` (gate threshold per model), `prefcall demos` (FC-ICL store)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    from prefcall.cli import add_model_options

    tag = subparsers.add_parser("tag", help="tag standing instructions with TAPS structured tags")
    add_model_options(tag)
    tag.add_argument("instruction", nargs="+", help="instruction text(s)")
    _catalogue_options(tag)
    tag.add_argument("--examples", help="tagged few-shot examples, e.g. taps/tags_train.json (default: shared data, else built-in)")
    tag.add_argument("--shots", type=int, default=4, help="retrieved examples per instruction")
    tag.set_defaults(handler=run_tag)

    cal = subparsers.add_parser("calibrate", help="calibrate the TAPS uncertainty-gate threshold for the model on dev data")
    add_model_options(cal)
    cal.add_argument("--data", help="NLSI-style dev file (default: shared nlsi/dev.json)")
    cal.add_argument("--limit", type=int, default=50, help="dev items to use (each costs two pipeline runs)")
    cal.add_argument("--measure", default="least_confidence", choices=["least_confidence", "margin_at_t", "sequence_margin"])
    cal.add_argument("--config", default="taps", help="pipeline config whose untagged/tagged passes are compared")
    cal.add_argument("--examples", help="tagged few-shot examples (default: shared taps/tags_train.json)")
    cal.add_argument("--dry-run", action="store_true", help="print the result without storing it")
    _catalogue_options(cal)
    cal.set_defaults(handler=run_calibrate)

    demos = subparsers.add_parser("demos", help="FC-ICL demonstration store")
    demos_sub = demos.add_subparsers(dest="demos_command", metavar="ACTION", required=True)
    seed = demos_sub.add_parser("seed", help="load demonstrations from an NLSI-style JSON file")
    seed.add_argument("path", help="e.g. ../shared/data/nlsi/dev.json (read in place, never copied into the repo)")
    seed.add_argument("--catalogue", default="nlsi", help="catalogue name the demonstrations belong to")
    seed.add_argument("--db", help="SQLite file (default: PREFCALL_DB_PATH or DATA_DIR/prefcall.db)")
    seed.set_defaults(handler=run_demos_seed)
    count = demos_sub.add_parser("count", help="how many demonstrations are stored")
    count.add_argument("--catalogue", default=None)
    count.add_argument("--db")
    count.set_defaults(handler=run_demos_count)


def _catalogue_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--catalogue", default="nlsi", help="built-in catalogue name (default nlsi)")
    parser.add_argument("--schema", help="catalogue file instead of a built-in one")


def shared_data_dir() -> Path:
    override = os.environ.get("PREFCALL_SHARED_DATA")
    return Path(override) if override else Path.cwd().parent / "shared" / "data"


def load_catalogue(args: argparse.Namespace):
    from prefcall.evaluation.data import load_catalogue as harness_load

    return harness_load(args, "nlsi")


def _tag_examples(path: str | None, embedder: Any):
    from prefcall.strategies.taps_tagger import TagExamples

    default = shared_data_dir() / "taps" / "tags_train.json"
    chosen = Path(path) if path else default
    if chosen.exists():
        return TagExamples.load(chosen, embedder)
    return TagExamples.builtin()


def run_tag(args: argparse.Namespace) -> int:
    from prefcall.cli import settings_from_args
    from prefcall.engine import load_embedder, load_engine
    from prefcall.strategies.taps_tagger import tag_instruction

    settings = settings_from_args(args)
    engine = load_engine(settings)
    catalogue = load_catalogue(args)
    examples = _tag_examples(args.examples, load_embedder(settings))
    failed = 0
    for instruction in args.instruction:
        result = tag_instruction(engine, instruction, catalogue, examples, k=args.shots)
        failed += result.status != "ok"
        print(result.model_dump_json())
    return 1 if failed else 0


def _nlsi_items(path: Path, limit: int) -> list[dict[str, Any]]:
    from prefcall.errors import ConfigError

    if not path.exists():
        raise ConfigError(f"dev file {path} not found: pass --data or set PREFCALL_SHARED_DATA")
    return json.loads(path.read_text(encoding="utf-8"))[:limit]


def slot_counts(predicted: list, gold: list, aliases: dict[str, str]) -> tuple[int, int, int]:
    """(tp, fp, fn) over (function, argument, value) triples, with the eval harness's normalisation."""
    from prefcall.evaluation.metrics.calls import score_calls

    s = score_calls(predicted, gold, aliases)
    tp = int(s["tp"])
    return tp, int(s["n_pred"]) - tp, int(s["n_gold"]) - tp


def run_calibrate(args: argparse.Namespace) -> int:
    from prefcall.cli import settings_from_args
    from prefcall.engine import load_embedder, load_engine
    from prefcall.evaluation.metrics.calls import load_aliases
    from prefcall.strategies.fcicl import parse_call_string
    from prefcall.strategies.pipeline import Pipeline, get_config
    from prefcall.strategies.taps_gate import CalibrationItem, save_calibration, sweep_thresholds

    settings = settings_from_args(args)
    engine = load_engine(settings)
    embedder = load_embedder(settings)
    catalogue = load_catalogue(args)
    items = _nlsi_items(Path(args.data) if args.data else shared_data_dir() / "nlsi" / "dev.json", args.limit)
    aliases = load_aliases(shared_data_dir() / "taps" / "locations.json") if (shared_data_dir() / "taps" / "locations.json").exists() else {}
    pipeline = Pipeline(engine, embedder, tag_examples=_tag_examples(args.examples, embedder), data_dir=settings.data_dir)
    untagged_config = get_config(args.config, tagging="off")
    tagged_config = get_config(args.config, tagging="always")
    rows: list[CalibrationItem] = []
    started = time.perf_counter()
    for index, item in enumerate(items):
        gold = [parse_call_string(c) for c in item["api_calls"]]
        common = dict(applicable=item["applicable_standing_instructions"])
        plain = pipeline.parse(item["user_utterance"], item["all_standing_instructions"], catalogue, untagged_config, **common)
        tagged = pipeline.parse(item["user_utterance"], item["all_standing_instructions"], catalogue, tagged_config, **common)
        rows.append(CalibrationItem(
            id=str(item.get("example_id", index)), uncertainty=plain.uncertainty,
            untagged=slot_counts(plain.calls if plain.status == "ok" else [], gold, aliases),
            tagged=slot_counts(tagged.calls if tagged.status == "ok" else [], gold, aliases),
        ))
        print(f"\r{index + 1}/{len(items)} items, {time.perf_counter() - started:.0f}s", end="", file=sys.stderr)
    print(file=sys.stderr)
    result = sweep_thresholds(rows, engine.info.model_name, args.measure)
    summary = result.model_dump(exclude={"sweep"})
    if not args.dry_run:
        summary["stored_in"] = str(save_calibration(settings.data_dir, result))
    print(json.dumps(summary, indent=1))
    return 0


def _store(args: argparse.Namespace):
    from prefcall.config import Settings
    from prefcall.strategies.fcicl import DemoStore

    settings = Settings(**({"db_path": args.db} if args.db else {}))
    return DemoStore(settings.database_path())


def run_demos_seed(args: argparse.Namespace) -> int:
    from prefcall.strategies.fcicl import seed_from_nlsi

    store = _store(args)
    added = seed_from_nlsi(store, args.path, args.catalogue)
    print(json.dumps({"added": added, "total": store.count(args.catalogue)}))
    return 0


def run_demos_count(args: argparse.Namespace) -> int:
    print(json.dumps({"count": _store(args).count(args.catalogue)}))
    return 0
