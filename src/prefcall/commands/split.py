"""`prefcall split build|show`: the frozen tune/report split of the evaluation data (prefcall.evaluation.splits)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("split", help="the frozen tune/report split every fit and report reads")
    actions = parser.add_subparsers(dest="split_command", metavar="ACTION", required=True)
    build = actions.add_parser("build", help="build the split file from ../shared/data and tests/data/nlt "
                               "(deterministic); --check compares it with the shipped one")
    build.add_argument("--data-dir", help="the shared data folder (default: PREFCALL_SHARED_DATA or ../shared/data)")
    build.add_argument("--repo", help="the source checkout holding tests/data/nlt (default: this one)")
    build.add_argument("--out", help="write here (default: print to stdout)")
    build.add_argument("--check", action="store_true",
                       help="exit 1 when the built file differs from the shipped src/prefcall/data/splits.json")
    build.set_defaults(handler=handle_build)
    show = actions.add_parser("show", help="per source: tune, report and retired counts, held-out domains, rule")
    show.set_defaults(handler=handle_show)


def handle_build(args: argparse.Namespace) -> int:
    from prefcall.evaluation import splits
    from prefcall.evaluation.data import shared_data_dir

    repo = Path(args.repo) if args.repo else Path(__file__).resolve().parents[3]
    built = splits.build(Path(args.data_dir) if args.data_dir else shared_data_dir(), repo).dump()
    if args.check:
        shipped = splits.packaged().dump()
        if built != shipped:
            print("prefcall: the shipped split file differs from what `prefcall split build` gives on this data: "
                  "a source changed; rebuild it and say so in RESULTS.md", file=sys.stderr)
            return 1
        print("split file up to date")
        return 0
    if args.out:
        Path(args.out).write_text(built, encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(built)
    return 0


def handle_show(args: argparse.Namespace) -> int:
    from prefcall.evaluation import splits

    print("| source | tune | report | retired | held out | rule |")
    print("|---|---|---|---|---|---|")
    for name, entry in splits.packaged().sources.items():
        print(f"| {name} | {len(entry.tune)} | {len(entry.report)} | {len(entry.retired)} | "
              f"{', '.join(entry.held_out) or '-'} | {entry.rule} |")
    return 0
