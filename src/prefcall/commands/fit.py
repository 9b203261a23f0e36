"""`prefcall fit`: fit the grounded filler's combination for the model in use, on the bundled tuning items."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefcall.commands.options import add_model_options, settings_from_args
from prefcall.errors import ConfigError

if TYPE_CHECKING:
    from prefcall.config import Settings
    from prefcall.evaluation.fit import StructureFit


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fit", help="fit the model's grounding rule on the tuning split (stored per model file)",
        description="Runs every tuning item of the frozen split (shared NLSI dev, the bundled corpus and the phrase "
        "corpus) through the pipeline, records the filler's scored candidates and fits, per argument kind, how "
        "structure and the model's log-odds combine. The fit is stored under PREFCALL_DATA_DIR/fits/ for this "
        "model file; the pipeline uses it from then on. See prefcall.evaluation.fit.")
    add_model_options(parser)
    parser.add_argument("--sources", default="nlsi,corpus,phrase",
                        help="tuning sources, comma-separated: nlsi (needs ../shared/data), corpus, phrase, profile, "
                        "profile_prose (bundled: the generated corpus, the phrase corpus of lowercase common-noun "
                        "values, the profile corpus and its prose part); default nlsi,corpus,phrase (the embedded "
                        "model's shipped fit; the 1.5B and 0.5B fits were made on nlsi,corpus)")
    parser.add_argument("--subset", type=int, help="at most N items per source (every k-th): a quick fit; with "
                        "--nlt, at most N tune items of each set")
    parser.add_argument("--out", help="folder for rows.jsonl (rows-selection.jsonl with --selection; resumable: a "
                        "rerun reuses the items done) and fit.json; default: PREFCALL_DATA_DIR/fit-runs/<model file "
                        "hash>")
    parser.add_argument("--min-right", type=int, default=None,
                        help="right values a kind needs to be fitted (default 300; lower only for experiments)")
    parser.add_argument("--dry-run", action="store_true", help="print the fit without storing it for the model")
    parser.add_argument("--propose", choices=("on", "off"), default=None,
                        help="the model proposes a span where none of structure's best passes (GroundingWeights."
                        "propose): the rows are collected with it and the fit stores it; default: as the model's "
                        "earlier fit has it (off for a first fit)")
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
    parser.add_argument("--relevance", action="store_true",
                        help="fit whether any function fits a request instead: the embedder's rule for models without "
                        "one (weights of the request's relevance evidence and a threshold) and the model's rule (its "
                        "own 'None' score with the embedder's; stage 1 runs on every request, stored with the "
                        "model's fit), on the tune parts of "
                        "BFCL, ACEBench, NLSI, SGD, the corpus and the NLT sets")
    parser.add_argument("--per-source", type=int, default=None, metavar="N",
                        help="with --relevance: run the model on the first N tune requests of each source and kind "
                        "only (a subset for a large model on a CPU; the embedder's threshold still reads them all)")
    parser.add_argument("--mismatched", action="store_true",
                        help="with --relevance: the model's rules also read requests that no function fits made from "
                        "the relevant tune requests, each sent with another request's small catalogue whose "
                        "functions are far from its own (fit_relevance.mismatched; --per-source caps them as a "
                        "source); the embedder's rule reads the sources alone")
    parser.add_argument("--near-miss", action="store_true",
                        help="with --relevance: the model's rules also read requests of sources whose gold names every "
                        "function they need (BFCL multiple, ACEBench, the NLT sets) sent with their catalogue less "
                        "those functions (fit_relevance.near_misses; capped by --per-source as a source)")
    parser.add_argument("--rows", metavar="FILE",
                        help="with --relevance: read the model's answers from the relevance-rows.jsonl an earlier run "
                        "wrote with --out (the same requests and --per-source) instead of asking the model again: "
                        "refits the model's rules in seconds after a change to how they are fitted")
    parser.add_argument("--embedder-only", action="store_true",
                        help="with --relevance: fit only the embedder's threshold; with --nlt: only the rules that "
                        "do not weigh the model (the rule for any model and the embedder baseline); no language "
                        "model runs")
    parser.add_argument("--relevance-out", metavar="PATH",
                        help="with --relevance: also write the threshold into this relevance.json (maintainers: "
                        "src/prefcall/data/relevance.json)")
    parser.add_argument("--nlt", action="store_true",
                        help="fit select_tools_nlt's decision rule instead, on the tune parts of both NLT sets "
                        "(a source checkout's tests/data/nlt and tests/data/nlt2), with and without the model")
    parser.add_argument("--nlt-sets", metavar="SETS",
                        help="with --nlt: the tune parts it reads, of nlt, nlt2 and select (default: nlt,nlt2)")
    parser.add_argument("--nlt-out", metavar="PATH",
                        help="with --nlt: also write the rules into this nlt_rules.json (maintainers: "
                        "src/prefcall/data/nlt_rules.json)")
    parser.add_argument("--paged", action="store_true",
                        help="with --nlt and a model: the model is asked about a large list page by page (pages of "
                        "similar tools cut once per catalogue, those of the best-retrieved tools asked; their size "
                        "and number as `fit --shortlist` fitted them) instead of one shortlist that changes with every "
                        "request; the rule keeps it (DecisionRule.paged)")
    parser.add_argument("--pages", metavar="SIZE/SEEDS,...",
                        help="with --nlt --large-lists --paged: page geometries to weigh on the model's own answers "
                        "(e.g. 10/4,16/3: pages of SIZE tools, those of the SEEDS best-retrieved tools asked); the "
                        "one whose exact set on the tune lists of 33 tools or more is best is kept in the model's "
                        "rule (default: the geometry fitted for the embedder by fit --shortlist)")
    parser.add_argument("--large-lists", action="store_true",
                        help="with --nlt: fit only how a shipped rule decides lists of more than ten tools (size "
                        "terms, or a rule of its own for them where that fits better; its ten-tool weights kept) on "
                        "the tune requests of tests/data/catalogue200 against 10, 50 and 200 tools: with a model whose "
                        "rule asks it, that rule on the model's answers (kept in --out, so an interrupted fit "
                        "resumes); with --embedder-only, the rule without the model. A full --nlt fit does this too")
    parser.add_argument("--flags", action="store_true",
                        help="fit whether the model reads a flag the text does not name (\"for both men and women\" "
                        "of is_unisex) instead: the tune items whose function has a boolean argument run with those "
                        "flags scored; the odds over null from which true is set, stored with the model's fit (none "
                        "where the model does not read them reliably: they stay unset)")
    parser.add_argument("--shortlist", action="store_true",
                        help="fit how large catalogues are shortlisted instead (the shortlist's size and the dense "
                        "ranking's weight, per embedder; no language model runs): tune requests of the corpus, NLSI "
                        "and the NLT set ranked against a source checkout's tests/data/catalogue200")
    parser.add_argument("--shortlist-out", metavar="PATH",
                        help="with --shortlist: also write the fit into this shortlist.json (maintainers: "
                        "src/prefcall/data/shortlist.json)")
    parser.set_defaults(handler=run_fit)


def run_fit(args: argparse.Namespace) -> int:
    from prefcall.engine import load_embedder, load_engine
    from prefcall.evaluation import fit
    from prefcall.evaluation.runner import git_commit
    from prefcall.storage import fits
    from prefcall.strategies.grounded import load_weights
    from prefcall.strategies.pipeline import Pipeline

    settings = settings_from_args(args)
    if args.shortlist:
        return _fit_shortlist(args, settings)
    if args.nlt:
        return _fit_nlt(args, settings)
    if args.relevance:
        return _fit_relevance(args, settings)
    sources = [s.strip() for s in args.sources.split(",") if s.strip()]
    items = fit.tune_items(sources, args.subset)
    if args.selection:
        return _fit_selection(args, settings, items)
    if args.flags:
        return _fit_flags(args, settings, fit.with_flags(items))
    engine = load_engine(settings)
    info = engine.info
    fingerprint = fits.engine_fingerprint(engine, settings.data_dir)
    out = _run_dir(args, settings, fingerprint)
    shipped = load_weights(info.model_name)  # rows are collected, and the fit compared, under the shipped rule
    earlier = fits.load(fingerprint, settings.data_dir) or fits.Fit(fingerprint=fingerprint or "")
    propose = bool(earlier.grounding.get("propose")) if args.propose is None else args.propose == "on"
    shipped = shipped.model_copy(update={"propose": propose and not args.structure})
    pipeline = Pipeline(engine, load_embedder(settings), fit.value_memories(sources), data_dir=settings.data_dir)
    # The structure fit needs every candidate's features, not the model's view of the values: no value scoring.
    pipeline._weights = shipped.model_copy(update={"use_model": False}) if args.structure else shipped  # noqa: SLF001
    rows = _collect_rows(pipeline, items, out / ("rows-structure.jsonl" if args.structure else "rows.jsonl"), "fit")
    counts = dict(Counter(item.source for item in items))
    command = "prefcall fit " + " ".join(sys.argv[2:])
    min_right = args.min_right if args.min_right is not None else fit.MIN_RIGHT
    if args.structure:
        return _write_structure(args, fit.fit_structure(rows, shipped.structure, min_right), out, command,
                                git_commit(), counts)
    report = fit.FitReport(model_name=info.model_name, fingerprint=fingerprint, items=counts,
                           kinds=fit.fit(rows, shipped, min_right))
    stored = None
    # Every other part fitted before stays: stage 1's rule and floor, the relevance rules, the check, the flags.
    grounding: dict[str, Any] = dict(report.grounding())
    if propose:
        grounding["propose"] = 1.0
    if "unnamed_flag" in earlier.grounding:  # `fit --flags` fits it
        grounding["unnamed_flag"] = earlier.grounding["unnamed_flag"]
    # Span values with no capital: a combination of their own where, held out, it beats the one span combination.
    phrase = fit.fit_phrase(rows, min_right)
    if phrase.kept:
        grounding["span"], grounding["phrase"] = phrase.span, phrase.phrase
    # The floor of a required argument, under the combination the filler will use (the fitted one, else shipped;
    # a phrase combination only as this fit keeps it: the stored grounding replaces the earlier one).
    kept = {"span": shipped.span, "number": shipped.number or shipped.span,
            **{k: v for k, v in grounding.items() if k in ("span", "number", "phrase")}}
    required = {(f.name, a) for item in items for f in item.catalogue.functions for a in f.required}
    floor = fit.fit_required_floor(rows, kept, required)
    if floor.floor is not None:
        grounding["required_floor"] = floor.floor
    # Then the lead over the other spans by which one that no value reached the floor for takes the model's best.
    lead = fit.fit_required_lead(rows, kept["span"], required, floor.floor, kept.get("phrase"))
    if lead.lead is not None:
        grounding["required_lead"] = lead.lead
    note = {**fit.source_note(report, command, git_commit()), "phrase": phrase.model_dump(),
            "required_floor": floor.model_dump(), "required_lead": lead.model_dump()}
    result = earlier.model_copy(update={"fingerprint": fingerprint or "", "model_name": info.model_name,
                                        "grounding": grounding, "source": {**earlier.source, **note}})
    (out / "fit.json").write_text(result.model_dump_json(indent=1, exclude={"origin"}) + "\n", encoding="utf-8")
    if not args.dry_run and fingerprint and grounding:
        stored = fits.save(result, settings.data_dir / fits.FITS_DIR)
    summary = {"model": info.model_name, "fingerprint": fingerprint, "items": counts, "rows": len(rows),
               "stored_in": str(stored) if stored else None, "run": str(out),
               "kinds": {k: {"fitted": f.fitted, "right": f.right, "combination": f.combination,
                             "f1_shipped": f.f1_shipped, "f1_fitted": f.f1_fitted, "why": f.why}
                         for k, f in report.kinds.items()},
               "phrase": {"kept": phrase.kept, "right": phrase.right, "span": phrase.span, "phrase": phrase.phrase,
                          "f1_shared_held_out": phrase.f1_shared_held_out,
                          "f1_split_held_out": phrase.f1_split_held_out, "why": phrase.why},
               "required_floor": {"floor": floor.floor, "f1_without": floor.f1_without, "f1_with": floor.f1_with},
               "required_lead": {"lead": lead.lead, "rankings": lead.rankings, "set_right": lead.set_right,
                                 "set_wrong": lead.set_wrong}}
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
    rows_file = _run_dir(args, settings, fingerprint) / "rows-selection.jsonl"
    progress = Progress(len(items), sys.stderr, label="fit --selection")
    with rows_file.open("a", encoding="utf-8") as sink:
        def write(item_id: str, row: fit_selection.SelectionRow | None) -> None:
            sink.write(json.dumps({"item": item_id, "row": row.model_dump() if row else None}) + "\n")
            sink.flush()

        rows = fit_selection.collect(pipeline, items, lambda _: progress.advance(),
                                     fit_selection.read_rows(rows_file), write)
    progress.close()
    floor = fit_selection.fit_floor(rows)
    result = fit_selection.fit(fit_selection.with_floor(rows, floor.floor))  # the rule under the floor it will meet
    counts = dict(Counter(item.source for item in items))
    header = {"command": "prefcall fit " + " ".join(sys.argv[2:]), "commit": git_commit(),
              "date": dt.date.today().isoformat(), "data": "tune split of prefcall/data/splits.json", "items": counts}
    note = {**header, **result.model_dump(exclude={"weights"}), "floor": floor.floor}
    fields: dict[str, Any] = {}
    notes: dict[str, Any] = {}
    if result.fitted:
        fields["selection"], notes["selection"] = result.weights, note
    if floor.kept:
        fields["calibration_floor"], notes["calibration_floor"] = floor.floor, {**header, **floor.model_dump()}
    stored = None if args.dry_run else _store_parts(settings, engine, fingerprint, fields, notes)
    print(json.dumps({"model": engine.info.model_name, "fingerprint": fingerprint, "weights": result.weights,
                      **note, "calibration_floor": floor.model_dump(), "stored_in": str(stored) if stored else None},
                     indent=1))
    return 0


def _fit_flags(args: argparse.Namespace, settings: Settings, items: list) -> int:
    """`prefcall fit --flags`: the unnamed-flag rule (evaluation.fit.fit_unnamed_flag), stored in the model's fit
    beside its grounding combination (the other parts stay); a rule not kept removes an earlier one."""
    import datetime as dt

    from prefcall.engine import load_embedder, load_engine
    from prefcall.evaluation import fit
    from prefcall.evaluation.runner import git_commit
    from prefcall.storage import fits
    from prefcall.strategies.grounded import load_weights
    from prefcall.strategies.pipeline import Pipeline

    engine = load_engine(settings)
    fingerprint = fits.engine_fingerprint(engine, settings.data_dir)
    out = _run_dir(args, settings, fingerprint)
    sources = [s.strip() for s in args.sources.split(",") if s.strip()]
    earlier = fits.load(fingerprint, settings.data_dir) if fingerprint else None
    weights = load_weights(engine.info.model_name, fitted=earlier.grounding if earlier is not None else None)
    pipeline = Pipeline(engine, load_embedder(settings), fit.value_memories(sources), data_dir=settings.data_dir)
    pipeline._weights = weights.model_copy(update={"unnamed_flag": (1.0, 0.0)})  # noqa: SLF001 (score them all)
    rows = _collect_rows(pipeline, items, out / "rows-flags.jsonl", "fit --flags")
    result = fit.fit_unnamed_flag(rows)
    counts = dict(Counter(item.source for item in items))
    note = {"command": "prefcall fit " + " ".join(sys.argv[2:]), "commit": git_commit(),
            "date": dt.date.today().isoformat(), "data": "tune split of prefcall/data/splits.json", "items": counts,
            **result.model_dump()}
    stored = None
    if not args.dry_run and fingerprint:
        grounding = {k: v for k, v in (earlier.grounding if earlier is not None else {}).items() if k != "unnamed_flag"}
        if result.combination is not None:
            grounding["unnamed_flag"] = result.combination
        stored = _store_parts(settings, engine, fingerprint, {"grounding": grounding}, {"unnamed_flag": note})
    print(json.dumps({"model": engine.info.model_name, "fingerprint": fingerprint, "unnamed_flag": result.combination,
                      **note, "run": str(out), "stored_in": str(stored) if stored else None}, indent=1))
    return 0


def _run_dir(args: argparse.Namespace, settings: Settings, fingerprint: str | None) -> Path:
    """--out, or PREFCALL_DATA_DIR/fit-runs/<model file hash>: where a fit keeps its recorded rows (made)."""
    from prefcall.storage import fits

    out = Path(args.out) if args.out else settings.data_dir / "fit-runs" / (
        fits.file_name(fingerprint).removesuffix(".json") if fingerprint else "unknown-model")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _collect_rows(pipeline: Any, items: list, rows_file: Path, label: str) -> list:
    """The filler's labelled rows of every item (evaluation.fit.collect), resumed from and appended to `rows_file`."""
    from prefcall.evaluation import fit
    from prefcall.evaluation.runner import Progress

    progress = Progress(len(items), sys.stderr, label=label)
    with rows_file.open("a", encoding="utf-8") as sink:
        def write(item_id: str, rows: list) -> None:
            sink.write(json.dumps({"item": item_id, "rows": [r.model_dump() for r in rows]}) + "\n")
            sink.flush()

        rows = fit.collect(pipeline, items, lambda _: progress.advance(), fit.read_rows(rows_file), write)
    progress.close()
    return rows


def _store_parts(settings: Settings, engine: object, fingerprint: str | None, fields: dict[str, Any],
                 notes: dict[str, Any]) -> Path | None:
    """Store the kept parts of a fit (`fields`, each with its note under the same name in `source`) in the model's
    fit file; the parts fitted before stay. None when nothing was kept or the model has no fingerprint."""
    from prefcall.storage import fits

    if not fingerprint or not fields:
        return None
    earlier = fits.load(fingerprint, settings.data_dir)
    base = earlier or fits.Fit(fingerprint=fingerprint, model_name=engine.info.model_name)  # type: ignore[attr-defined]
    return fits.save(base.model_copy(update={**fields, "source": {**base.source, **notes}}),
                     settings.data_dir / fits.FITS_DIR)


def _fit_relevance(args: argparse.Namespace, settings: Settings) -> int:
    """`prefcall fit --relevance`: the embedder's rule (evaluation.fit_relevance: weights and threshold), printed;
    with --relevance-out, written into a relevance.json (the shipped one's other embedders stay)."""
    import datetime as dt
    from importlib import resources

    from prefcall.engine import load_embedder
    from prefcall.evaluation import fit_relevance
    from prefcall.evaluation.runner import Progress, git_commit
    from prefcall.strategies import relevance

    requests = fit_relevance.requests("tune")
    embedder = load_embedder(settings)
    # the made requests (--mismatched, --near-miss) join the model's rows only: the embedder's rule reads the sources
    # alone, as the shipped one did, so the check reads the score the pipeline will give them
    made = ((fit_relevance.mismatched(requests, embedder) if args.mismatched else [])
            + (fit_relevance.near_misses(requests) if args.near_miss else []))
    items = requests + [made[i] for i in fit_relevance.first_per_source(made, args.per_source)]  # only what is read
    progress = Progress(len(items), sys.stderr, label="fit --relevance")
    features = fit_relevance.evidence_of(embedder, items, lambda _: progress.advance())
    progress.close()
    result = fit_relevance.fit(embedder.name, features[:len(requests)], requests)
    scores = fit_relevance.rule_scores(result.weights, features)
    counts = dict(Counter(f"{i.source} ({'relevant' if i.relevant else 'irrelevant'})" for i in items))
    command = "prefcall " + " ".join(getattr(args, "argv", sys.argv[1:]))
    subset = fit_relevance.first_per_source(items, args.per_source)
    model = None if args.embedder_only else _fit_model_relevance(
        args, settings, embedder, [items[i] for i in subset], command,
        dict(Counter(f"{items[i].source} ({'relevant' if items[i].relevant else 'irrelevant'})" for i in subset)),
        [scores[i] for i in subset], result.threshold)
    source = (f"{command} ({dt.date.today().isoformat()}, commit {git_commit()}): "
              f"the tune part of data/splits.json, {result.n_relevant} requests a function fits and "
              f"{result.n_irrelevant} that none fits, from {len(result.sources)} sources; AUC {result.auc} (the best "
              f"cosine alone {result.cosine_auc}); keeps "
              f"{result.kept_relevant:.1%} of the fitting requests (at least {fit_relevance.KEEP_PER_SOURCE:.0%} of "
              f"each source), refuses {result.refused_irrelevant:.1%} of the others on those items")
    if args.relevance_out:
        base = json.loads((resources.files("prefcall") / "data" / "relevance.json").read_text(encoding="utf-8"))
        base[embedder.name] = {"threshold": result.threshold, "weights": result.weights,
                               "features": list(relevance.FEATURES), "source": source,
                               "sources": {k: v.model_dump() for k, v in result.sources.items()}}
        Path(args.relevance_out).write_text(json.dumps(base, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({"embedder_threshold": {**result.model_dump(), "source": source, "written": args.relevance_out},
                      "model_rule": model, "items": counts}, indent=1))
    return 0


def _fit_model_relevance(args: argparse.Namespace, settings: Settings, embedder: object, items: list,
                         command: str, counts: dict[str, int], cosines: list[float], threshold: float) -> dict:
    """The model's rule (fit_relevance.fit_rule), stage 1's None prior (fit_relevance.fit_none_prior, counted
    with the embedder check at `threshold`) and the model's check (fit_relevance.fit_check: its yes/no reading
    beside the embedder's score) from stage 1 and the check question on every request; each is stored with the
    model's fit only when it is better than the hand-set one (the check: than the embedder's rule alone, held out)."""
    import datetime as dt

    from prefcall.engine import load_engine
    from prefcall.evaluation import fit_relevance
    from prefcall.evaluation.runner import Progress, git_commit
    from prefcall.storage import fits
    from prefcall.strategies.pipeline import Pipeline

    engine = load_engine(settings)
    fingerprint = fits.engine_fingerprint(engine, settings.data_dir)
    pipeline = Pipeline(engine, embedder, data_dir=settings.data_dir)
    rows_file = Path(args.out) / "relevance-rows.jsonl" if args.out else None
    if args.rows:
        rows = fit_relevance.read_rows(Path(args.rows), items)
    else:
        # with --out, each answer is appended as it comes: an interrupted run resumes where it stopped
        done = fit_relevance.read_partial(rows_file) if rows_file is not None else {}
        if rows_file is not None:
            rows_file.parent.mkdir(parents=True, exist_ok=True)
        progress = Progress(len(items), sys.stderr, label="fit --relevance (stage 1)")
        with (rows_file.open("a", encoding="utf-8") if rows_file is not None else contextlib.nullcontext()) as sink:
            def write(row: Any) -> None:
                if sink is not None:
                    sink.write(row.model_dump_json() + "\n")
                    sink.flush()
            rows = fit_relevance.collect(pipeline, items, lambda _: progress.advance(), gate_cosines=cosines,
                                         check=True, done=done, write=write)
        progress.close()
    if rows_file is not None:  # the rows of this fit's requests, in their order (what --rows reads)
        rows_file.write_text("".join(r.model_dump_json() + "\n" for r in rows), encoding="utf-8")
    result = fit_relevance.fit_rule(rows)
    header = {"command": command, "commit": git_commit(), "date": dt.date.today().isoformat(),
              "data": "tune split of prefcall/data/splits.json", "items": counts}

    def note_of(found: Any, exclude: set[str]) -> dict[str, Any]:
        return {**header, **found.model_dump(exclude=exclude | {"sources", "hand_sources"}),
                "sources": {k: v.model_dump() for k, v in found.sources.items()},
                "hand_sources": {k: v.model_dump() for k, v in found.hand_sources.items()}}

    note = note_of(result, {"weights", "threshold"})
    prior = fit_relevance.fit_none_prior(rows, threshold)
    prior_note = note_of(prior, set())
    fields: dict[str, Any] = {}
    notes: dict[str, Any] = {}
    if result.kept:
        fields["relevance"], notes["relevance"] = result.rule(), note
    if prior.kept:
        fields["none_prior"], notes["none_prior"] = prior.prior, prior_note
    check = fit_relevance.fit_check(rows, threshold)
    check_note = {**header, **check.model_dump(exclude={"sources"}),
                  "sources": {k: v.model_dump() for k, v in check.sources.items()}}
    if check.kept:
        fields["check"], notes["check"] = check.rule(), check_note
    stored = None if args.dry_run else _store_parts(settings, engine, fingerprint, fields, notes)
    return {"model": engine.info.model_name, "fingerprint": fingerprint, **result.rule(), **note,
            "none_prior": prior_note, "check": check_note, "stored_in": str(stored) if stored else None}


def _fit_nlt(args: argparse.Namespace, settings: Settings) -> int:
    from importlib import resources

    from prefcall.engine import load_embedder, load_engine
    from prefcall.evaluation import fit_nlt
    from prefcall.evaluation.runner import Progress, git_commit
    from prefcall.storage import fits
    from prefcall.strategies.nlt import SCORE_PROMPT_VERSION

    sets = tuple(x.strip() for x in (args.nlt_sets or ",".join(fit_nlt.DEFAULT_SETS)).split(",") if x.strip())
    items = fit_nlt.nlt_tune_items(sets, args.subset)
    engine, embedder = (None if args.embedder_only else load_engine(settings)), load_embedder(settings)
    fingerprint = fits.engine_fingerprint(engine, settings.data_dir) if engine is not None else None
    cache = large_cache = None
    if engine is not None:  # the model's answers are kept per model: a rerun or a refit does not ask again
        out = Path(args.out) if args.out else settings.data_dir / "fit-runs" / (
            fits.file_name(fingerprint).removesuffix(".json") if fingerprint else "unknown-model")
        out.mkdir(parents=True, exist_ok=True)
        cache = out / f"nlt-evidence-{SCORE_PROMPT_VERSION}-{embedder.name}.jsonl"  # a new prompt asks again
        paging = "-paged" if args.paged else ""  # the model's answers on large lists depend on how it is asked
        large_cache = out / f"nlt-large-lists-{SCORE_PROMPT_VERSION}{paging}-{embedder.name}.jsonl"
    if args.large_lists:
        return _fit_large_lists(args, engine, embedder, fingerprint, large_cache)
    progress = Progress(len(items), sys.stderr, label="fit --nlt")
    examples = fit_nlt.collect(engine, embedder, items, lambda _: progress.advance(), cache=cache)
    progress.close()
    large = fit_nlt.large_list_examples(embedder)
    # the same items again with the cosine of each request's best sentence (cheap: embeddings, no model)
    by_sentence = (fit_nlt.collect(None, embedder, items, by_sentence=True),
                   fit_nlt.large_list_examples(embedder, by_sentence=True))
    fitted = fit_nlt.fit(examples, large, by_sentence=by_sentence)
    if "with_model" in fitted:  # the model's rule gets its large-list terms from its own answers on large lists
        rule, accuracy = fitted["with_model"]
        rule = rule.model_copy(update={"paged": args.paged})
        progress = Progress(len(fit_nlt.tune_large_requests()), sys.stderr, label="fit --nlt: large lists")
        lists = fit_nlt.large_list_examples(embedder, lambda _: progress.advance(), engine=engine,
                                            by_sentence=rule.sentence_cosine, cache=large_cache, paged=args.paged)
        progress.close()
        fitted["with_model"] = (fit_nlt.for_large_lists(rule, examples, lists)[0], accuracy)
    model = engine.info.model_name if engine is not None else "none (--embedder-only)"
    counts = dict(Counter(relative for relative, _ in items))
    note = {"command": "prefcall fit " + " ".join(sys.argv[2:]), "commit": git_commit(),
            "data": f"tune parts of {', '.join(fit_nlt.SETS[name] for name in sets)} (prefcall/data/splits.json"
                    + ("; of tests/data/select: one, none and two of at most ten tools" if "select" in sets else "")
                    + "); the large-list terms also read the tune requests of tests/data/catalogue200 against 10, "
                    "50 and 200 tools",
            "items": {**counts, "tests/data/catalogue200 lists": len(large)}}
    if args.nlt_out:
        base = json.loads((resources.files("prefcall") / "data" / "nlt_rules.json").read_text(encoding="utf-8"))
        Path(args.nlt_out).write_text(json.dumps(fit_nlt.rules_file(base, fitted, fingerprint, model,
                                                                    embedder.name, note,
                                                                    model_only=engine is not None), indent=2,
                                                 ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps({"model": model, "fingerprint": fingerprint, "embedder": embedder.name,
                      "items": counts, "shipped_for_this_model": fit_nlt.chosen(fitted).model_dump(),
                      **{k: {**rule.model_dump(), "exact_set_in_sample": round(accuracy, 4)}
                         for k, (rule, accuracy) in fitted.items()},
                      "written": args.nlt_out}, indent=1))
    return 0


def _fit_large_lists(args: argparse.Namespace, engine: Any, embedder: Any, fingerprint: str | None,
                     cache: Path | None) -> int:
    """`prefcall fit --nlt --large-lists`: a shipped rule's large-list part refitted (fit_nlt.for_large_lists: size
    terms, or a rule of its own for large lists), its ten-tool weights kept. With a model whose rule asks it: that
    rule, on the model's answers. With --embedder-only: the rule without the model (`*|<embedder>`) and every
    model's entry that decides by it (model weight 0), on BM25 and the cosine. Written into --nlt-out."""
    from importlib import resources

    from prefcall.evaluation import fit_nlt
    from prefcall.evaluation.runner import Progress, git_commit
    from prefcall.strategies.nlt import rule_for
    from prefcall.strategies.nlt_models import DecisionRule

    base = json.loads((resources.files("prefcall") / "data" / "nlt_rules.json").read_text(encoding="utf-8"))
    if engine is None:
        key = f"*|{embedder.name}"
        if key not in base:
            raise ConfigError(f"no rule without the model for the embedder {embedder.name}: run `prefcall fit --nlt "
                              "--embedder-only` first")
        shipped = DecisionRule.from_entry(base[key])
        keys = [key] + [k for k, entry in base.items() if k.endswith(f"|{embedder.name}") and k != key
                        and not k.startswith("baseline|") and isinstance(entry, dict) and not entry.get("model_weight")]
        model, asked = "none (--embedder-only)", "BM25 and the cosine of every tool"
    else:
        shipped = rule_for(engine, True, embedder)
        if not shipped.model_weight:
            raise ConfigError(f"{engine.info.model_name}'s rule does not ask the model (model weight 0): it decides "
                              "by the rule without the model, fitted by `prefcall fit --nlt --large-lists "
                              "--embedder-only`")
        keys = [f"{fingerprint}|{embedder.name}"]
        shipped = shipped.model_copy(update={"paged": args.paged})
        model, asked = engine.info.model_name, ("the model asked about a large list page by page" if args.paged
                                                else "the model asked about the shortlist it gets")
    geometries = _page_geometries(args.pages) if args.pages and engine is not None and args.paged else [None]
    weighed: dict[str, float] = {}
    best: tuple[float, Any, list[Any]] | None = None
    for geometry in geometries:
        named = f"{geometry[0]}/{geometry[1]}" if geometry else "the embedder's"
        label = f"fit --nlt --large-lists (pages {named})" if shipped.paged else "fit --nlt --large-lists"
        progress = Progress(len(fit_nlt.tune_large_requests()), sys.stderr, label=label)
        own = cache.with_name(f"{cache.stem}-pages{geometry[0]}x{geometry[1]}{cache.suffix}") \
            if cache is not None and geometry else cache
        found = fit_nlt.large_list_examples(embedder, lambda _: progress.advance(), engine=engine,
                                            by_sentence=shipped.sentence_cosine, cache=own, paged=shipped.paged,
                                            pages=geometry)
        progress.close()
        large = [(e, g, n) for e, g, n in found if n >= fit_nlt.OWN_RULE_FROM]
        weighed[named] = round(sum(shipped.decide(e, n) == g for e, g, n in large) / max(1, len(large)), 4)
        if best is None or weighed[named] > best[0]:  # ties keep the earlier geometry
            best = (weighed[named], geometry, found)
    assert best is not None
    _, geometry, lists = best
    if geometry:
        shipped = shipped.model_copy(update={"page_size": geometry[0], "page_seeds": geometry[1]})
    fitted, accuracy = fit_nlt.for_large_lists(shipped, [], lists)
    if len(geometries) > 1:
        accuracy["pages_weighed"] = weighed
    note = {"command": "prefcall fit " + " ".join(sys.argv[2:]), "commit": git_commit(),
            "data": "the tune requests of tests/data/catalogue200 (prefcall/data/splits.json) against 10, 50 and 200 "
                    f"tools: {asked}", "lists": len(lists), "exact_set_in_sample": accuracy}
    if args.nlt_out:
        what = {"none": "no terms (none held out)", "size_terms": "size terms",
                "own_rule": "its own rule"}[accuracy["kept"]]
        out = dict(base)
        size, seeds = fitted.page_size or "the embedder's fitted number of", fitted.page_seeds or "fitted number of"
        paging = f", asked page by page ({size} tools a page, those of the {seeds} best-retrieved tools)" \
            if fitted.paged else ""
        for key in keys:
            entry = dict(base.get(key) or {"model": model, **shipped.model_dump()})
            entry.update({"size_slope": fitted.size_slope, "margin": fitted.margin, "paged": fitted.paged,
                          "page_size": fitted.page_size, "page_seeds": fitted.page_seeds,
                          "large": fitted.large.model_dump() if fitted.large is not None else None,
                          "source": str(entry.get("source", "")).split("; large lists:")[0] + f"; large lists: {what}, "
                          f"fitted on {len(lists)} lists of 10, 50 and 200 tools" + paging, "large_list_fit": note})
            out[key] = entry
        Path(args.nlt_out).write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps({"model": model, "fingerprint": fingerprint, "embedder": embedder.name, "entries": keys,
                      "rule": fitted.model_dump(), **note, "written": args.nlt_out}, indent=1))
    return 0


def _page_geometries(text: str) -> list[tuple[int, int]]:
    """`--pages 10/4,16/3` -> [(10, 4), (16, 3)]."""
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        size, _, seeds = part.partition("/")
        if not (size.isdigit() and seeds.isdigit() and int(size) > 0 and int(seeds) > 0):
            raise ConfigError(f"--pages: {part!r} is not SIZE/SEEDS (e.g. 10/4)")
        out.append((int(size), int(seeds)))
    return out


def _fit_shortlist(args: argparse.Namespace, settings: Settings) -> int:
    from importlib import resources

    from prefcall.engine import load_embedder
    from prefcall.evaluation import fit_shortlist
    from prefcall.evaluation.runner import git_commit

    fitted = fit_shortlist.fit(load_embedder(settings))
    note = {"command": "prefcall fit " + " ".join(sys.argv[2:]), "commit": git_commit(),
            "data": "tune parts of data/splits.json ranked against tests/data/catalogue200", "items": fitted.requests}
    if args.shortlist_out:
        base = json.loads((resources.files("prefcall") / "data" / "shortlist.json").read_text(encoding="utf-8"))
        fit_shortlist.write(Path(args.shortlist_out), fit_shortlist.rules_file(base, fitted, note))
    print(json.dumps({**fitted.model_dump(), "written": args.shortlist_out}, indent=1))
    return 0
