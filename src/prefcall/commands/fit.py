"""`prefcall fit`: fit the grounded filler's combination for the model in use, on the bundled tuning items."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from prefcall.commands.options import add_model_options, settings_from_args

if TYPE_CHECKING:
    from prefcall.config import Settings
    from prefcall.evaluation.fit import StructureFit


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fit", help="fit the model's grounding rule on the tuning split (stored per model file)",
        description="Runs every tuning item of the frozen split (shared NLSI dev and the bundled corpus) through "
        "the pipeline, records the filler's scored candidates and fits, per argument kind, how structure and the "
        "model's log-odds combine. The fit is stored under PREFCALL_DATA_DIR/fits/ for this model file; the "
        "pipeline uses it from then on. See prefcall.evaluation.fit.")
    add_model_options(parser)
    parser.add_argument("--sources", default="nlsi,corpus",
                        help="tuning sources, comma-separated: nlsi (needs ../shared/data), corpus (bundled)")
    parser.add_argument("--subset", type=int, help="at most N items per source (every k-th): a quick fit")
    parser.add_argument("--out", help="folder for rows.jsonl (resumable: a rerun reuses the items done) and "
                        "fit.json; default: PREFCALL_DATA_DIR/fit-runs/<model file hash>")
    parser.add_argument("--min-right", type=int, default=None,
                        help="right values a kind needs to be fitted (default 300; lower only for experiments)")
    parser.add_argument("--dry-run", action="store_true", help="print the fit without storing it for the model")
    parser.add_argument("--structure", action="store_true",
                        help="fit the structure weights instead (model-independent features of every span and "
                        "number candidate; the model is not asked about values): written to OUT/structure.json")
    parser.add_argument("--structure-out", metavar="PATH",
                        help="with --structure: also write a grounding.json with the new structure weights "
                        "(maintainers: src/prefcall/data/grounding.json)")
    parser.add_argument("--selection", action="store_true",
                        help="fit stage 1's rule instead (which function a request is for: the model's calibrated "
                        "score, the request's cosine to each function, the catalogue words it contains); only stage "
                        "1 runs. Stored with the model's fit")
    parser.add_argument("--nlt", action="store_true",
                        help="fit select_tools_nlt's decision rule instead, on the tune parts of both NLT sets "
                        "(a source checkout's tests/data/nlt and tests/data/nlt2), with and without the model")
    parser.add_argument("--nlt-out", metavar="PATH",
                        help="with --nlt: also write the rules into this nlt_rules.json (maintainers: "
                        "src/prefcall/data/nlt_rules.json)")
    parser.set_defaults(handler=run_fit)


def run_fit(args: argparse.Namespace) -> int:
    from prefcall.engine import load_embedder, load_engine
    from prefcall.evaluation import fit
    from prefcall.evaluation.runner import Progress, git_commit
    from prefcall.storage import fits
    from prefcall.strategies.grounded import load_weights
    from prefcall.strategies.pipeline import Pipeline

    settings = settings_from_args(args)
    if args.nlt:
        return _fit_nlt(args, settings)
    sources = [s.strip() for s in args.sources.split(",") if s.strip()]
    items = fit.tune_items(sources, args.subset)
    if args.selection:
        return _fit_selection(args, settings, items)
    engine = load_engine(settings)
    info = engine.info
    fingerprint = fits.engine_fingerprint(engine, settings.data_dir)
    out = Path(args.out) if args.out else settings.data_dir / "fit-runs" / (
        fits.file_name(fingerprint).removesuffix(".json") if fingerprint else "unknown-model")
    out.mkdir(parents=True, exist_ok=True)
    rows_file = out / ("rows-structure.jsonl" if args.structure else "rows.jsonl")
    done = fit.read_rows(rows_file)

    shipped = load_weights(info.model_name)  # rows are collected, and the fit compared, under the shipped rule
    pipeline = Pipeline(engine, load_embedder(settings), fit.value_memories(sources), data_dir=settings.data_dir)
    # The structure fit needs every candidate's features, not the model's view of the values: no value scoring.
    pipeline._weights = shipped.model_copy(update={"use_model": False}) if args.structure else shipped  # noqa: SLF001

    progress = Progress(len(items), sys.stderr, label="fit")
    with rows_file.open("a", encoding="utf-8") as sink:
        def write(item_id: str, rows: list) -> None:
            sink.write(json.dumps({"item": item_id, "rows": [r.model_dump() for r in rows]}) + "\n")
            sink.flush()

        rows = fit.collect(pipeline, items, lambda _: progress.advance(), done, write)
    progress.close()
    counts = dict(Counter(item.source for item in items))
    command = "prefcall fit " + " ".join(sys.argv[2:])
    min_right = args.min_right if args.min_right is not None else fit.MIN_RIGHT
    if args.structure:
        return _write_structure(args, fit.fit_structure(rows, shipped.structure, min_right), out, command,
                                git_commit(), counts)
    report = fit.FitReport(model_name=info.model_name, fingerprint=fingerprint, items=counts,
                           kinds=fit.fit(rows, shipped, min_right))
    stored = None
    earlier = fits.load(fingerprint, settings.data_dir)  # a stage-1 rule fitted before stays
    result = fits.Fit(fingerprint=fingerprint or "", model_name=info.model_name, grounding=report.grounding(),
                      selection=earlier.selection if earlier is not None else None,
                      source={**(earlier.source if earlier is not None and earlier.selection else {}),
                              **fit.source_note(report, command, git_commit())})
    (out / "fit.json").write_text(result.model_dump_json(indent=1, exclude={"origin"}) + "\n", encoding="utf-8")
    if not args.dry_run and fingerprint and report.grounding():
        stored = fits.save(result, settings.data_dir / fits.FITS_DIR)
    summary = {"model": info.model_name, "fingerprint": fingerprint, "items": counts, "rows": len(rows),
               "stored_in": str(stored) if stored else None, "run": str(out),
               "kinds": {k: {"fitted": f.fitted, "right": f.right, "combination": f.combination,
                             "f1_shipped": f.f1_shipped, "f1_fitted": f.f1_fitted, "why": f.why}
                         for k, f in report.kinds.items()}}
    if fingerprint is None:
        summary["note"] = "the model file could not be read to fingerprint it: the fit above is printed only"
    print(json.dumps(summary, indent=1))
    return 0


def _write_structure(args: argparse.Namespace, result: StructureFit, out: Path, command: str, commit: str,
                     counts: dict[str, int]) -> int:
    from importlib import resources

    from prefcall.evaluation import fit

    (out / "structure.json").write_text(result.model_dump_json(indent=1) + "\n", encoding="utf-8")
    if args.structure_out and result.fitted:
        base = json.loads((resources.files("prefcall") / "data" / "grounding.json").read_text(encoding="utf-8"))
        Path(args.structure_out).write_text(
            json.dumps(fit.structure_file(result, base, command, commit, counts), indent=1) + "\n",
            encoding="utf-8")
    print(json.dumps({**result.model_dump(exclude={"weights"}), "items": counts, "run": str(out),
                      "written": args.structure_out if args.structure_out and result.fitted else None}, indent=1))
    return 0


def _fit_selection(args: argparse.Namespace, settings: Settings, items: list) -> int:
    """`prefcall fit --selection`: stage 1's rule (evaluation.fit_selection), stored beside the model's grounding
    fit (the same file; the other rules in it stay)."""
    import datetime as dt

    from prefcall.engine import load_embedder, load_engine
    from prefcall.evaluation import fit_selection
    from prefcall.evaluation.runner import Progress, git_commit
    from prefcall.storage import fits
    from prefcall.strategies.pipeline import Pipeline

    engine = load_engine(settings)
    fingerprint = fits.engine_fingerprint(engine, settings.data_dir)
    pipeline = Pipeline(engine, load_embedder(settings), data_dir=settings.data_dir)
    progress = Progress(len(items), sys.stderr, label="fit --selection")
    rows = fit_selection.collect(pipeline, items, lambda _: progress.advance())
    progress.close()
    result = fit_selection.fit(rows)
    counts = dict(Counter(item.source for item in items))
    note = {"command": "prefcall fit " + " ".join(sys.argv[2:]), "commit": git_commit(),
            "date": dt.date.today().isoformat(), "data": "tune split of prefcall/data/splits.json", "items": counts,
            **result.model_dump(exclude={"weights"})}
    stored = None
    if not args.dry_run and fingerprint and result.fitted:
        earlier = fits.load(fingerprint, settings.data_dir)
        base = earlier or fits.Fit(fingerprint=fingerprint, model_name=engine.info.model_name)
        updated = base.model_copy(update={"selection": result.weights,
                                          "source": {**base.source, "selection": note}})
        stored = fits.save(updated, settings.data_dir / fits.FITS_DIR)
    print(json.dumps({"model": engine.info.model_name, "fingerprint": fingerprint, "weights": result.weights,
                      **note, "stored_in": str(stored) if stored else None}, indent=1))
    return 0


def _fit_nlt(args: argparse.Namespace, settings: Settings) -> int:
    from importlib import resources

    from prefcall.engine import load_embedder, load_engine
    from prefcall.evaluation import fit_nlt
    from prefcall.evaluation.runner import Progress, git_commit
    from prefcall.storage import fits

    items = fit_nlt.nlt_tune_items()
    engine, embedder = load_engine(settings), load_embedder(settings)
    progress = Progress(len(items), sys.stderr, label="fit --nlt")
    examples = fit_nlt.collect(engine, embedder, items, lambda _: progress.advance())
    progress.close()
    fitted = fit_nlt.fit(examples)
    fingerprint = fits.engine_fingerprint(engine, settings.data_dir)
    counts = dict(Counter(relative for relative, _ in items))
    note = {"command": "prefcall fit " + " ".join(sys.argv[2:]), "commit": git_commit(),
            "data": "tune parts of tests/data/nlt and tests/data/nlt2 (prefcall/data/splits.json)", "items": counts}
    if args.nlt_out:
        base = json.loads((resources.files("prefcall") / "data" / "nlt_rules.json").read_text(encoding="utf-8"))
        Path(args.nlt_out).write_text(json.dumps(fit_nlt.rules_file(base, fitted, fingerprint, engine.info.model_name,
                                                                    embedder.name, note), indent=2,
                                                 ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps({"model": engine.info.model_name, "fingerprint": fingerprint, "embedder": embedder.name,
                      "items": counts, "shipped_for_this_model": fit_nlt.chosen(fitted).model_dump(),
                      **{k: {**rule.model_dump(), "exact_set_in_sample": round(accuracy, 4)}
                         for k, (rule, accuracy) in fitted.items()},
                      "written": args.nlt_out}, indent=1))
    return 0
