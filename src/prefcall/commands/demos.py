"""`prefcall demos ...`: the FC-ICL demonstration store."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prefcall.storage.demos import DemoStore


def register(subparsers: argparse._SubParsersAction) -> None:
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


def _store(args: argparse.Namespace) -> DemoStore:
    from prefcall.config import Settings
    from prefcall.storage.demos import DemoStore

    return DemoStore.from_settings(Settings(**({"db_path": args.db} if args.db else {})))


def run_demos_seed(args: argparse.Namespace) -> int:
    from prefcall.strategies.fcicl import seed_from_nlsi

    with _store(args) as store:
        added = seed_from_nlsi(store, args.path, args.catalogue)
        print(json.dumps({"added": added, "total": store.count(args.catalogue)}))
    return 0


def run_demos_count(args: argparse.Namespace) -> int:
    with _store(args) as store:
        print(json.dumps({"count": store.count(args.catalogue)}))
    return 0
