"""`prefcall profile ...`: manage users' standing instructions; evaluate instruction selection."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from prefcall.commands.options import settings_from_args
from prefcall.errors import ValidationError

if TYPE_CHECKING:
    from prefcall.storage.profiles import ProfileStore


def _store(args: argparse.Namespace) -> ProfileStore:
    from prefcall.storage.profiles import ProfileStore

    return ProfileStore.from_settings(settings_from_args(args))


def _print_instructions(profile) -> None:
    for ins in profile.instructions:
        tag = "" if ins.tags is None else ("  [tags stale]" if ins.stale else "  [tagged]")
        print(f"{ins.position}. {ins.text}{tag}")


def cmd_create(args):
    with _store(args) as store:
        store.create_user(args.user)
    print(f"created user {args.user}")


def cmd_add(args):
    with _store(args) as store:
        added = store.add_instruction(args.user, args.text, position=args.position)
    print(f"{added.position}. {added.text}")


def cmd_edit(args):
    with _store(args) as store:
        target = store.instruction_at(args.user, args.position)
        edited = store.edit_instruction(target.id, args.text, user_id=args.user)
    print(f"{edited.position}. {edited.text}")


def cmd_remove(args):
    with _store(args) as store:
        target = store.instruction_at(args.user, args.position)
        store.remove_instruction(target.id, user_id=args.user)
    print(f"removed {args.position}. {target.text}")


def cmd_list(args):
    with _store(args) as store:
        if args.user:
            _print_instructions(store.get_profile(args.user))
        else:
            for user in store.list_users():
                print(user)


def cmd_show(args):
    with _store(args) as store:
        profile = store.get_profile(args.user)
    print(json.dumps(profile.model_dump(), indent=1, ensure_ascii=False))


def cmd_import(args):
    path = Path(args.file)
    if not path.is_file():
        raise ValidationError(f"file: {path} not found; give the path of a profile JSON file")
    with _store(args) as store:
        profile = store.import_profile(path.read_text(encoding="utf-8"), user_id=args.user, replace=args.replace)
    print(f"imported {len(profile.instructions)} instructions for {profile.user_id}")


def cmd_export(args):
    with _store(args) as store:
        text = store.export_profile_json(args.user)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)


def cmd_delete(args):
    with _store(args) as store:
        removed = store.delete_user(args.user)
    print(f"deleted user {args.user} and {removed} instructions")


def cmd_evaluate_selection(args):
    from prefcall.evaluation.selection import evaluate_selection, load_items
    from prefcall.schemas.registry import CatalogueRegistry

    if not Path(args.data).is_file():
        raise ValidationError(f"data: {args.data} not found; give NLSI dev.json")
    items = load_items(args.data, args.limit)
    settings = settings_from_args(args)
    embedder = None
    if not args.bm25_only:
        from prefcall.engine import load_embedder

        embedder = load_embedder(settings)
    with CatalogueRegistry.from_settings(settings) as catalogues:
        catalogue = catalogues.get(args.catalogue)
    metrics = evaluate_selection(items, embedder, catalogue)
    metrics["mode"] = "bm25" if args.bm25_only else "hybrid"
    print(json.dumps(metrics), file=sys.stdout)


def register(subparsers: argparse._SubParsersAction) -> None:
    profile = subparsers.add_parser("profile", help="users' standing instructions")
    sub = profile.add_subparsers(dest="profile_command", metavar="ACTION", required=True)

    def command(name: str, handler, help: str, *, user: str | None = "required") -> argparse.ArgumentParser:
        parser = sub.add_parser(name, help=help)
        parser.add_argument("--db", help="SQLite database (default: PREFCALL_DB_PATH or the data folder)")
        if user == "required":
            parser.add_argument("user", help="user id")
        elif user == "optional":
            parser.add_argument("user", nargs="?", help="user id (omit to list users)")
        parser.set_defaults(handler=handler)
        return parser

    command("create", cmd_create, "create a user")
    add = command("add", cmd_add, "add a standing instruction")
    add.add_argument("text")
    add.add_argument("--position", type=int, help="insert at this 1-based position (default: append)")
    edit = command("edit", cmd_edit, "replace the text of instruction N")
    edit.add_argument("position", type=int, help="1-based number shown by `profile list USER`")
    edit.add_argument("text")
    remove = command("remove", cmd_remove, "remove instruction N")
    remove.add_argument("position", type=int, help="1-based number shown by `profile list USER`")
    command("list", cmd_list, "list users, or one user's instructions", user="optional")
    command("show", cmd_show, "a user's profile with ids and tags, as JSON")
    imp = command("import", cmd_import, "create a user from a profile JSON file", user=None)
    imp.add_argument("file")
    imp.add_argument("--user", help="user id (default: the file's user_id)")
    imp.add_argument("--replace", action="store_true", help="overwrite an existing user's instructions")
    exp = command("export", cmd_export, "write a user's profile as JSON")
    exp.add_argument("--output", "-o", help="file (default: stdout)")
    command("delete", cmd_delete, "delete a user and all their instructions")
    ev = command("evaluate-selection", cmd_evaluate_selection, "instruction selection on NLSI data", user=None)
    ev.add_argument("--data", required=True, help="NLSI dev.json")
    ev.add_argument("--limit", type=int, help="first N items only")
    ev.add_argument("--bm25-only", action="store_true", help="no embedder: lexical evidence only")
    ev.add_argument("--catalogue", default="nlsi", help="catalogue for domain detection (default: nlsi)")
