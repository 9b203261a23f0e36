"""`prefcall corpus build`: the generated NLSI-style corpus (prefcall.evaluation.corpus) into src/prefcall/data/corpus."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("corpus", help="the generated tuning/report corpus (typed catalogues, several "
                                   "instruction styles, chains, multi-instruction items)")
    actions = parser.add_subparsers(dest="corpus_command", metavar="ACTION", required=True)
    build = actions.add_parser("build", help="write catalogue.json and items.json, and the profile corpus's "
                              "profile_catalogue.json and profile_items.json, and the misfit corpus's "
                              "misfit_catalogue.json and misfit_items.json, and the phrase corpus's "
                              "phrase_catalogue.json and phrase_items.json (deterministic)")
    build.add_argument("--out", help="folder (default: the package's data/corpus)")
    build.add_argument("--check", action="store_true", help="exit 1 when the shipped corpus differs from a rebuild")
    build.set_defaults(handler=handle_build)


def handle_build(args: argparse.Namespace) -> int:
    from prefcall.evaluation import corpus, corpus_misfit, corpus_phrase, corpus_profile

    def build(out: Path) -> list[Path]:
        return corpus.build(out) + corpus_profile.build(out) + corpus_misfit.build(out) + corpus_phrase.build(out)

    if args.check:
        with tempfile.TemporaryDirectory() as folder:
            built = build(Path(folder))
            stale = [p.name for p in built if not (corpus.CORPUS_DIR / p.name).is_file()
                     or (corpus.CORPUS_DIR / p.name).read_bytes() != p.read_bytes()]
        if stale:
            print(f"prefcall: the shipped corpus differs from a rebuild ({', '.join(stale)}): run "
                  "`prefcall corpus build`, then `prefcall split build --out src/prefcall/data/splits.json`",
                  file=sys.stderr)
            return 1
        print("corpus up to date")
        return 0
    for path in build(Path(args.out) if args.out else corpus.CORPUS_DIR):
        print(f"wrote {path}", file=sys.stderr)
    return 0
