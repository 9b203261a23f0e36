"""`prefcall model list | pull | check`: find, download and check GGUF models (see prefcall/modelhub)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    from prefcall.commands.options import add_model_options

    model = subparsers.add_parser("model", help="find, pull and check GGUF models (list / pull / check)")
    actions = model.add_subparsers(dest="model_command", metavar="ACTION")
    model.set_defaults(handler=lambda args: (model.print_help(), 2)[1])

    listing = actions.add_parser("list", help="models on this machine (HF cache, Ollama, LM Studio) and the catalogue")
    listing.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    listing.add_argument("--model", help="mark this reference as the current model (default: PREFCALL_MODEL)")
    listing.set_defaults(handler=run_list)

    pull = actions.add_parser("pull", help="download a catalogue model or hf:ORG/REPO/FILE.gguf into the HF cache, "
                                           "verified by SHA-256 (the only command that uses the network)")
    pull.add_argument("name", help="catalogue name (prefcall model list) or hf:ORG/REPO/FILE.gguf[@REVISION]")
    pull.add_argument("--revision", help="branch, tag or commit (default: the reference's, else main)")
    pull.add_argument("--force", action="store_true", help="download again even if the file is cached")
    bar = pull.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None,
                     help="always show progress bars (default: when stderr is a terminal)")
    bar.add_argument("--no-progress", dest="progress", action="store_false", help="never show progress bars")
    pull.set_defaults(handler=run_pull)

    check = actions.add_parser("check", help="load a model, check what prefcall needs, run the smoke suite, "
                                             "measure speed, recommend settings; ends with one JSON line")
    check.add_argument("reference", nargs="?", help="model reference (default: --model, PREFCALL_MODEL, embedded)")
    add_model_options(check)
    check.add_argument("--only", action="append", metavar="ID|KIND",
                       help="run only these smoke cases or kinds (parse_request, select_tools, clarify); repeatable")
    check.add_argument("--skip-suite", action="store_true", help="capabilities, speed and recommendations only")
    check.add_argument("--no-embedder", action="store_true", help="run the strategies without the sentence embedder")
    check.add_argument("--config", default="full", help="parse_request pipeline configuration (default: full, "
                                                         "as the MCP tool)")
    check.set_defaults(handler=run_check)


# -- list ----------------------------------------------------------------------------------------------
def run_list(args: argparse.Namespace) -> int:
    from prefcall.config import Settings
    from prefcall.modelhub.stores import discover

    settings = Settings()
    found = discover(args.model or settings.model, settings.lmstudio_dir, settings.model_dirs)
    if args.json:
        print(json.dumps(found.as_json(), indent=2))
        return 0
    print(render_list(found))
    return 0


def render_list(found: Any) -> str:
    from prefcall.engine.gguf_meta import format_params, format_size

    rows = [["", "REFERENCE", "STORE", "SIZE", "QUANT", "ARCH", "PARAMS", "CTX", "TEMPLATE", "CATALOGUE"]]
    paths = []
    for m in found.models:
        info = m.info
        label = (info.metadata.get("general.size_label") if info else None) or format_params(info.n_params if info else None)
        rows.append([
            "*" if m.current else "", m.reference, m.store, format_size(m.size) + (f" ({m.parts} parts)" if m.parts > 1 else ""),
            (info.quantisation if info else None) or "?", (info.architecture if info else None) or "?", str(label),
            str(info.context_length) if info and info.context_length else "?",
            ("yes" if info.has_chat_template else "NO") if info and info.error is None else "?", m.catalogue or "",
        ])
        paths.append((m.path, m.error))
    lines = ["Models on this machine (* = what PREFCALL_MODEL / --model names; pass REFERENCE as --model):", ""]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for number, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if number:
            path, error = paths[number - 1]
            lines.append(f"     path {path}")
            if error:
                lines.append(f"     ! {error}")
    lines += ["", "Stores searched:"]
    for store in found.stores:
        lines.append(f"  {store.store:<15} {store.location}  ({store.found} found{'; ' + store.note if store.note else ''})")
    lines += ["", "Recommended catalogue (prefcall model pull NAME; sha256 pinned only where computed from the file):", ""]
    table = [["NAME", "PARAMS", "QUANT", "SIZE", "LICENCE", "HASH", "SMOKE", "INSTALLED"]]
    for status in found.catalogue:
        m = status.model
        smoke = m.measured.get("smoke", {}).get("pass_rate") if m.measured else None
        table.append([m.name, m.params, m.quantisation or "?", format_size(m.size) if m.size else (m.size_approx or "?"),
                      m.licence, "pinned" if m.verified else "unverified",
                      f"{smoke:.0%}" if isinstance(smoke, (int, float)) else "unmeasured",
                      ("yes" if not status.reason else "CHECK") if status.installed else "no"])
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines += ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in table]
    lines += [f"  ! {s.model.name}: {s.reason}" for s in found.catalogue if s.installed and s.reason]
    return "\n".join(lines)


# -- pull ----------------------------------------------------------------------------------------------
def run_pull(args: argparse.Namespace) -> int:
    from prefcall.modelhub.pull import pull

    result = pull(args.name, revision=args.revision, force=args.force, progress=args.progress)
    verified = " and ".join(n for n, v in (("the hub's LFS hash", result.hub_sha256), ("prefcall's pin", result.pinned_sha256)) if v)
    state = "already downloaded" if result.already_present else (
        f"downloaded {result.downloaded} bytes" + (f" (resumed at {result.resumed_from})" if result.resumed_from else ""))
    print(f"{state}; SHA-256 {result.sha256} matches {verified}")
    print(f"path: {result.path}" + (f" (+{len(result.parts) - 1} more parts)" if len(result.parts) > 1 else ""))
    print(f"use it: --model {result.reference}   or   PREFCALL_MODEL={result.reference}")
    print(json.dumps(result.as_json(), separators=(",", ":")))
    return 0


# -- check ---------------------------------------------------------------------------------------------
def run_check(args: argparse.Namespace) -> int:
    from prefcall.commands.options import settings_from_args
    from prefcall.modelhub.check import run_check as check, write_report

    if args.reference:
        args.model = args.reference
    settings = settings_from_args(args)
    report = check(settings, reference=args.model, use_embedder=not args.no_embedder, only=args.only,
                   run_suite=not args.skip_suite, parse_config=args.config,
                   progress=lambda line: print(line, file=sys.stderr, flush=True))
    write_report(report)
    return 0
