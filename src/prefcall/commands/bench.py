"""`prefcall bench`: speed figures for this machine; a table on stderr, then one JSON object as the LAST stdout line."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from prefcall.commands.options import add_model_options, settings_from_args


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser(
        "bench", help="measure speed: raw limit, prefix reuse, NLT, FnCTOD, TAPS gate, retrieval, server, served engine",
        description="Every figure is a ratio or a pair measured side by side in this one run (shared machines are "
                    "noisy). The last stdout line is one JSON object with every figure.")
    add_model_options(bench)
    bench.add_argument("--out", help="folder for bench.json, bench.md and plots")
    bench.add_argument("--quick", action="store_true", help="small sizes and one repetition (tests, CI)")
    bench.add_argument("--only", help="comma-separated sections: limit,prefix,nlt,fnctod,grounded,taps,dialogue,catalogue,"
                                      "retrieval,server,served")
    bench.add_argument("--reps", type=int, help="repetitions per measurement (default 1 with --quick, else 3)")
    bench.add_argument("--split", choices=("tune", "report"),
                       help="the catalogue section runs only this part's requests of the frozen split (report: what "
                       "no fit read); default every request, with the report part's figures also given apart")
    bench.set_defaults(handler=run_bench_command)


def model_args(args: argparse.Namespace) -> list[str]:
    """The model options, passed on to the `prefcall serve` processes the server section spawns."""
    flags = {"--model": "model", "--n-gpu-layers": "n_gpu_layers", "--n-ctx": "n_ctx", "--threads": "threads"}
    out: list[str] = []
    for flag, attribute in flags.items():
        value = getattr(args, attribute, None)
        if value is not None:
            out += [flag, str(value)]
    return out


def run_bench_command(args: argparse.Namespace, *, context_overrides: dict[str, Any] | None = None) -> int:
    from prefcall.bench.context import BenchContext
    from prefcall.bench.report import render_table, write_outputs
    from prefcall.bench.runner import parse_only, run_bench
    from prefcall.errors import ValidationError

    names = parse_only(args.only)
    reps = args.reps if args.reps is not None else (1 if args.quick else 3)
    if reps < 1:
        raise ValidationError(f"--reps {reps}: give at least 1")
    ctx = BenchContext(settings=settings_from_args(args), quick=args.quick, reps=reps, model_args=model_args(args),
                       split=getattr(args, "split", None), **(context_overrides or {}))
    def save_partial(partial: dict[str, Any]) -> None:
        # A long run on a loaded machine may be cut short: keep what each finished section measured.
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / "bench.partial.json").write_text(json.dumps(partial, indent=1, default=str))

    report = run_bench(ctx, names, on_section=save_partial)
    print(render_table(report), file=sys.stderr, flush=True)
    if args.out:
        command = "prefcall bench " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 1 else ""
        for path in write_outputs(report, Path(args.out), command):
            print(f"bench: wrote {path}", file=sys.stderr)
    sys.stdout.write(json.dumps(report, default=str, separators=(",", ":")) + "\n")  # the contract: last line
    sys.stdout.flush()
    failed = [n for n, s in report["sections"].items() if s["status"] == "error"]
    return 1 if failed else 0
