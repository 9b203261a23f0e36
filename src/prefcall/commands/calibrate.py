"""`prefcall calibrate`: calibrate the TAPS uncertainty-gate threshold for the model on dev data."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from prefcall.commands.options import add_model_options, settings_from_args
from prefcall.commands.tag import add_catalogue_options, tag_examples
from prefcall.strategies.taps_gate import MEASURES


def register(subparsers: argparse._SubParsersAction) -> None:
    cal = subparsers.add_parser("calibrate", help="calibrate the TAPS uncertainty-gate threshold for the model on dev data")
    add_model_options(cal)
    cal.add_argument("--data", help="NLSI-style dev file (default: shared nlsi/dev.json)")
    cal.add_argument("--offset", type=int, default=0,
                     help="skip the first N items (of the tune split, for the shared nlsi/dev.json: a calibration "
                          "never reads a report item)")
    cal.add_argument("--limit", type=int, default=50, help="dev items to use (each costs two pipeline runs)")
    cal.add_argument("--out", help="folder for items.jsonl (resumable), calibration.json, report.md and the "
                                   "calibration curve gate_curve.png")
    cal.add_argument("--measure", default="least_confidence", choices=MEASURES)
    cal.add_argument("--config", default="taps", help="pipeline config whose untagged/tagged passes are compared")
    cal.add_argument("--examples", help="tagged few-shot examples (default: shared taps/tags_train.json)")
    cal.add_argument("--dry-run", action="store_true", help="print the result without storing it")
    add_catalogue_options(cal)
    cal.set_defaults(handler=run_calibrate)


def run_calibrate(args: argparse.Namespace) -> int:
    from prefcall.engine import load_embedder, load_engine
    from prefcall.evaluation.calibrate import calibrate_gate, load_dev_items, write_report
    from prefcall.evaluation.data import load_catalogue, shared_data_dir
    from prefcall.strategies.pipeline import Pipeline
    from prefcall.strategies.taps_gate import save_calibration

    settings = settings_from_args(args)
    engine = load_engine(settings)
    embedder = load_embedder(settings)
    catalogue = load_catalogue(args, "nlsi")
    data = Path(args.data) if args.data else shared_data_dir() / "nlsi" / "dev.json"
    items = load_dev_items(data, args.limit, args.offset)
    out = Path(args.out) if args.out else None
    pipeline = Pipeline(engine, embedder, tag_examples=tag_examples(args.examples, embedder), data_dir=settings.data_dir)

    def progress(done: int, total: int, seconds: float) -> None:
        print(f"\r{done}/{total} items, {seconds:.0f}s", end="", file=sys.stderr)

    result = calibrate_gate(pipeline, items, catalogue, config=args.config, measure=args.measure,
                            rows_file=out / "items.jsonl" if out else None, progress=progress)
    print(file=sys.stderr)
    summary = result.model_dump(exclude={"sweep"})
    if out is not None:
        source = (f"prefcall calibrate --data {data.name} (tune split where it is a split source) "
                  f"--offset {args.offset} --limit {args.limit} "
                  f"--config {args.config} --measure {args.measure}")
        summary["report"] = str(write_report(result, out, source)[-1])
    if not args.dry_run:
        summary["stored_in"] = str(save_calibration(settings.data_dir, result))
    print(json.dumps(summary, indent=1))
    return 0
