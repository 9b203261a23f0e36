"""`prefcall schema ...`: manage API catalogues (built-ins nlsi and sgd, plus your own)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from prefcall.commands.options import settings_from_args
from prefcall.errors import ValidationError

if TYPE_CHECKING:
    from prefcall.schemas.registry import CatalogueRegistry


def _store(args: argparse.Namespace) -> CatalogueRegistry:
    from prefcall.schemas.registry import CatalogueRegistry

    return CatalogueRegistry.from_settings(settings_from_args(args))


def cmd_add(args):
    path = Path(args.file)
    if not path.is_file():
        raise ValidationError(f"file: {path} not found; give an OpenAI/MCP/BFCL/SGD tool list JSON file")
    from prefcall.strategies.grammars import check_catalogue_grammars, grammar_checker

    with _store(args) as store:  # grammars compiled with llama.cpp now (no model needed): a bad schema fails here
        catalogue = store.add(path, name=args.name, description=args.description, replace=args.replace,
                              check=lambda c: check_catalogue_grammars(c, grammar_checker(None)))
    print(f"added catalogue {catalogue.name} with {len(catalogue.functions)} functions")


def cmd_list(args):
    with _store(args) as store:
        for info in store.list():
            kind = "built-in" if info.builtin else "user"
            print(f"{info.name}\t{info.functions} functions\t{kind}\t{info.description[:80]}")


def cmd_show(args):
    from prefcall.schemas.render import render_catalogue_spec, render_listing

    with _store(args) as store:
        catalogue = store.get(args.name)
        if args.format == "json":
            print(store.export(args.name))
        elif args.format == "spec":
            print(render_catalogue_spec(catalogue))
        else:
            print(render_listing(catalogue))


def cmd_remove(args):
    with _store(args) as store:
        store.remove(args.name)
    print(f"removed catalogue {args.name}")


def register(subparsers: argparse._SubParsersAction) -> None:
    schema = subparsers.add_parser("schema", help="API catalogues")
    sub = schema.add_subparsers(dest="schema_command", metavar="ACTION", required=True)

    def command(name: str, handler, help: str) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, help=help)
        parser.add_argument("--db", help="SQLite database (default: PREFCALL_DB_PATH or the data folder)")
        parser.set_defaults(handler=handler)
        return parser

    add = command("add", cmd_add, "import a catalogue (format auto-detected)")
    add.add_argument("file")
    add.add_argument("--name", help="catalogue name (default: from the file)")
    add.add_argument("--description")
    add.add_argument("--replace", action="store_true", help="overwrite a catalogue of the same name")
    command("list", cmd_list, "list catalogues")
    show = command("show", cmd_show, "print a catalogue")
    show.add_argument("name")
    show.add_argument("--format", choices=("listing", "spec", "json"), default="listing")
    remove = command("remove", cmd_remove, "remove a user catalogue")
    remove.add_argument("name")


