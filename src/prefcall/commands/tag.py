"""`prefcall tag`: tag standing instructions with TAPS structured tags."""

from __future__ import annotations

import argparse
from pathlib import Path

from prefcall.commands.options import add_model_options, settings_from_args
from prefcall.engine.base import Embedder


def register(subparsers: argparse._SubParsersAction) -> None:
    tag = subparsers.add_parser("tag", help="tag standing instructions with TAPS structured tags")
    add_model_options(tag)
    tag.add_argument("instruction", nargs="+", help="instruction text(s)")
    add_catalogue_options(tag)
    tag.add_argument("--examples", help="tagged few-shot examples, e.g. taps/tags_train.json (default: shared data, else built-in)")
    tag.add_argument("--shots", type=int, default=4, help="retrieved examples per instruction")
    tag.set_defaults(handler=run_tag)


def add_catalogue_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--catalogue", default="nlsi", help="built-in catalogue name (default nlsi)")
    parser.add_argument("--schema", help="catalogue file instead of a built-in one")


def tag_examples(path: str | None, embedder: Embedder | None):  # -> TagExamples
    """The given tagged set, else the shared taps/tags_train.json when present, else the built-in examples."""
    from prefcall.evaluation.data import shared_data_dir
    from prefcall.strategies.taps_tagger import TagExamples

    chosen = Path(path) if path else shared_data_dir() / "taps" / "tags_train.json"
    if chosen.exists():
        return TagExamples.load(chosen, embedder)
    return TagExamples.builtin()


def run_tag(args: argparse.Namespace) -> int:
    from prefcall.engine import load_embedder, load_engine
    from prefcall.evaluation.data import load_catalogue
    from prefcall.strategies.taps_tagger import tag_instruction

    settings = settings_from_args(args)
    engine = load_engine(settings)
    catalogue = load_catalogue(args, "nlsi")
    examples = tag_examples(args.examples, load_embedder(settings))
    failed = 0
    for instruction in args.instruction:
        result = tag_instruction(engine, instruction, catalogue, examples, k=args.shots)
        failed += result.status != "ok"
        print(result.model_dump_json())
    return 1 if failed else 0
