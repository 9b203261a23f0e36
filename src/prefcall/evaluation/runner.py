"""Run one evaluation task: predict or read predictions, score, resume, write results/report/plots.

`run_eval(task, args, engine=..., embedder=...)` is the Python entry point the CLI wraps; tests inject fakes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import IO, Any

from prefcall.errors import ConfigError, PrefcallError
from prefcall.evaluation import splits
from prefcall.evaluation.data import read_resumable
from prefcall.evaluation.metrics.intervals import collect as collect_intervals
from prefcall.evaluation.splits import Selection
from prefcall.evaluation.task import EvalContext, EvalItem, ScoredItem, Task
from prefcall.evaluation.tasks import get_task

RESULTS_FILE = "results.jsonl"
REPORT_FILE = "report.md"
METRICS_FILE = "metrics.json"
RETRY = ("error", "missing")


class Progress:
    """One plain-text line on stderr, rewritten with \\r: done/total, rate, ETA. No dependencies."""

    def __init__(self, total: int, stream: IO[str], label: str = "eval") -> None:
        self.total, self.stream, self.label = total, stream, label
        self.done = 0
        self.start = time.monotonic()
        self._last_draw = 0.0

    def advance(self, note: str = "") -> None:
        self.done += 1
        now = time.monotonic()
        if now - self._last_draw >= 0.2 or self.done == self.total:
            self._last_draw = now
            self.draw(note)

    def draw(self, note: str = "") -> None:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        rate = self.done / elapsed
        remaining = (self.total - self.done) / rate if rate > 0 else float("inf")
        eta = "?" if remaining == float("inf") else _clock(remaining)
        line = f"{self.label}: {self.done}/{self.total} items  {rate:.2f} it/s  ETA {eta}  {note}"
        self.stream.write("\r" + line[:120].ljust(120))
        self.stream.flush()

    def close(self) -> None:
        if self.total:
            self.stream.write("\n")
            self.stream.flush()


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def read_results(path: Path) -> dict[str, ScoredItem]:
    """Items already scored by an earlier (possibly interrupted) run; a torn last line is ignored."""
    # an item whose line was torn mid-write is simply predicted again
    return {item.id: item for item in read_resumable(path, ScoredItem.model_validate_json)}


def read_predictions(path: Path) -> dict[str, dict[str, Any]]:
    """A predictions file: JSON lines or a JSON list of records with an "id" (e.g. an earlier results.jsonl)."""
    if not path.exists():
        raise ConfigError(f"predictions file {path} does not exist; pass an existing --predictions FILE")
    text = path.read_text(encoding="utf-8").strip()
    records: list[Any]
    if text.startswith("["):
        records = json.loads(text)
    else:
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
    keys = [str(record.get("id", record.get("example_id", index))) if isinstance(record, dict) else str(index)
            for index, record in enumerate(records)]
    # A repeated id is keyed by position as the tasks key it (id, id#2, ...), never one prediction for both.
    return {key: record if isinstance(record, dict) else {"prediction": record}
            for key, record in zip(splits.unique_ids(keys), records)}


def tokens_of(prediction: dict[str, Any]) -> dict[str, int]:
    """Token counts a task reported, under "tokens" or a pipeline-style "trace"."""
    source = prediction.get("tokens") or prediction.get("trace") or {}
    keys = ("prompt_tokens", "evaluated", "reused", "completion_tokens")
    return {k: int(source[k]) for k in keys if isinstance(source.get(k), (int, float))}


def predict_one(task: Task, item: EvalItem, ctx: EvalContext, stored: dict[str, dict[str, Any]] | None) -> dict:
    """The prediction for one item: from --predictions when given, else from the model.
    A failure on one item (e.g. context overflow, a parse failure that escaped the strategy) is recorded as
    status "error" and scores as wrong; configuration errors (no model, bad file) stop the whole run."""
    if stored is not None:
        record = stored.get(item.id)
        if record is None:
            return {"status": "missing", "error": "no prediction for this id in --predictions"}
        try:
            return task.predictions_from_file(item, record)
        except ConfigError:
            raise
        except Exception as exc:  # a malformed stored record is a wrong prediction, flagged as unreadable
            return {"status": "parse_error", "error": f"unreadable prediction record: {describe(exc)}"}
    try:
        return task.predict(item, ctx)
    except ConfigError:
        raise
    except PrefcallError as exc:
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
    except Exception as exc:  # a bug below us must not lose a long run; it is reported and retried on resume
        return {"status": "error", "error": describe(exc)}


def describe(exc: BaseException) -> str:
    """One line: the exception's type, where it was raised (for non-prefcall errors) and its message."""
    if isinstance(exc, PrefcallError):
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}{where}: {str(exc)[:200]}"


def score_one(task: Task, item: EvalItem, prediction: dict[str, Any]) -> tuple[dict[str, float], str | None]:
    """The item's scores, or the one-line reason it cannot be scored (malformed gold, a scoring failure).
    Configuration errors (a missing locations file) still stop the run."""
    try:
        return task.score(item, prediction), None
    except ConfigError:
        raise
    except Exception as exc:
        return {}, f"scoring failed: {describe(exc)}"


def run_eval(
    task: Task | str,
    args: argparse.Namespace,
    *,
    engine: Any = None,
    embedder: Any = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
) -> dict[str, Any]:
    """Evaluate `task` and return the summary (also printed as the last stdout line, one JSON object)."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    task = get_task(task) if isinstance(task, str) else task
    items = task.load(args)
    items, selection = select_split(task, args, items)
    out_dir = Path(args.out) if getattr(args, "out", None) else None
    results_path = out_dir / RESULTS_FILE if out_dir else None
    previous = read_results(results_path) if results_path else {}
    stored = read_predictions(Path(args.predictions)) if getattr(args, "predictions", None) else None
    ctx = EvalContext(args, engine=engine, embedder=embedder)

    # Items that failed for a reason outside the model's answer ("error", "missing") are tried again; an item
    # that could not be scored is scored again from its stored prediction (no model call).
    scored = {i.id: previous[i.id] for i in items
              if i.id in previous and previous[i.id].status not in RETRY and previous[i.id].scorable}
    rescore = {i.id: previous[i.id].prediction for i in items if i.id in previous and previous[i.id].error
               and previous[i.id].prediction and previous[i.id].prediction.get("status") not in RETRY}
    todo = [i for i in items if i.id not in scored]
    if scored:
        stderr.write(f"resuming: {len(scored)} of {len(items)} items already scored in {results_path}\n")
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    progress = Progress(len(todo), stderr, label=task.name)
    sink = results_path.open("a", encoding="utf-8") if results_path else None
    try:
        for item in todo:
            record = evaluate_item(task, item, ctx, stored, rescore.get(item.id))
            scored[item.id] = record
            if sink:
                sink.write(record.model_dump_json() + "\n")
                sink.flush()
            progress.advance(note=f"last {record.latency_s:.2f}s")
    finally:
        progress.close()
        if sink:
            sink.close()

    ordered = [scored[i.id] for i in items]
    usable = [i for i in ordered if i.scorable]
    metrics = task.aggregate(usable) if usable else {}
    summary = build_summary(task, args, ordered, metrics)
    summary["split"] = selection.model_dump()
    summary["pools"] = task.pools(args)
    if summary["score_errors"]:
        stderr.write(f"warning: {summary['score_errors']} of {len(ordered)} items could not be scored and are left "
                     f"out of the metrics (first: {summary['error_rows'][0]['id']}: {summary['error_rows'][0]['error']})\n")
    if out_dir:
        write_outputs(task, ordered, metrics, summary, out_dir, stderr, getattr(args, "argv", sys.argv[1:]))
    stdout.write(json.dumps(summary, default=_json_default) + "\n")
    stdout.flush()
    return summary


def select_split(task: Task, args: argparse.Namespace, items: list[EvalItem]) -> tuple[list[EvalItem], Selection]:
    """The items of the frozen split's part that --split names (default: report, for a split source). Items are
    unique by id after this (a task that repeats an id gets a one-line error, never a silent double score)."""
    part = getattr(args, "split", None)
    part = {"dev": "tune"}.get(part, part)  # the NLT task's older name of its tuning file
    limit = getattr(args, "limit", None)
    offset = max(0, int(getattr(args, "offset", None) or 0))
    own = getattr(task, "select_part", None)  # a task that reads several sources picks its part itself
    if callable(own):
        if offset:
            raise ConfigError(f"--offset: the {task.name} task picks its items per source; use --limit alone")
        kept, selection = own(items, None if limit is None else max(0, int(limit)))
    else:
        kept, selection = splits.select(items, task.data_files(args), part, task.split_key,
                                        limit=None if limit is None else max(0, int(limit)), offset=offset)
    ids = [i.id for i in kept]
    if len(set(ids)) != len(ids):
        repeated = next(i for i in ids if ids.count(i) > 1)
        raise ConfigError(f"item id {repeated!r} occurs twice in the data: the {task.name} task must key repeated "
                          "ids apart (splits.unique_ids)")
    return kept, selection


def evaluate_item(task: Task, item: EvalItem, ctx: EvalContext, stored: dict[str, dict[str, Any]] | None,
                  prediction: dict[str, Any] | None = None) -> ScoredItem:
    """Predict (unless `prediction` is given) and score one item. Nothing about one item stops the run: an
    unreadable record or gold becomes an error row (ScoredItem.error), a failed prediction a wrong answer."""
    if item.skip:
        return ScoredItem(id=item.id, input=item.input, gold=item.gold, meta=item.meta, skipped=item.skip)
    if item.error:
        return ScoredItem(id=item.id, input=item.input, gold=item.gold, meta=item.meta,
                          error=f"unreadable record: {item.error}")
    start = time.perf_counter()
    if prediction is None:
        prediction = predict_one(task, item, ctx, stored)
    latency = time.perf_counter() - start
    scores, error = score_one(task, item, prediction)
    return ScoredItem(
        id=item.id,
        input=item.input,
        gold=item.gold,
        meta=item.meta,
        prediction=prediction,
        scores=scores,
        latency_s=round(latency, 4),
        tokens=tokens_of(prediction),
        error=error,
    )


def build_summary(task: Task, args: argparse.Namespace, items: list[ScoredItem], metrics: dict) -> dict[str, Any]:
    latencies = [i.latency_s for i in items]
    errors = [i for i in items if i.error]
    skipped = [i for i in items if i.skipped]
    summary: dict[str, Any] = {
        "task": task.name,
        "config": getattr(args, "config", None),
        "mode": getattr(args, "mode", None),
        "model": model_label(args),
        "n": len(items),
        "n_scored": sum(i.scorable for i in items),
        "score_errors": len(errors),
        "not_scorable": len(skipped),
        "metrics": metrics,
        # Every figure as value, 95% interval and n (Wilson for proportions, bootstrap otherwise).
        "intervals": collect_intervals(metrics),
    }
    if errors:
        summary["error_rows"] = [{"id": i.id, "error": i.error} for i in errors[:50]]
    if skipped:
        reasons: dict[str, int] = {}
        for item in skipped:
            reasons[str(item.skipped)] = reasons.get(str(item.skipped), 0) + 1
        summary["not_scorable_reasons"] = reasons
    if latencies and getattr(args, "predictions", None) is None:
        summary["latency_s"] = {"mean": statistics.fmean(latencies), "p50": statistics.median(latencies)}
    return summary


def write_outputs(
    task: Task, items: list[ScoredItem], metrics: dict, summary: dict, out_dir: Path, stderr: IO[str],
    argv: list[str] | None = None,
) -> None:
    from prefcall.evaluation.report import render_report

    plots: list[Path] = []
    try:
        plots = task.plots([i for i in items if i.scorable], out_dir)
    except Exception as exc:  # a plot must never cost the run its report
        stderr.write(f"warning: plots failed ({type(exc).__name__}: {exc}); report written without them\n")
    command = " ".join(["prefcall", *(sys.argv[1:] if argv is None else argv)])
    meta = {"command": command, "date": dt.date.today().isoformat(), "commit": git_commit()}
    summary = summary | {"run": meta}  # `prefcall eval report` reads the command and commit from here
    (out_dir / METRICS_FILE).write_text(json.dumps(summary, indent=2, default=_json_default), encoding="utf-8")
    report = render_report(task, items, metrics, summary, plots, meta, out_dir)
    (out_dir / REPORT_FILE).write_text(report, encoding="utf-8")


def model_label(args: argparse.Namespace) -> str:
    """The model as the command named it (a file's name, a reference), or the embedded default."""
    if getattr(args, "predictions", None):
        return "(stored predictions)"
    engine = getattr(args, "engine", None)
    model = getattr(args, "model", None)
    label = Path(model).name if model and Path(model).suffix == ".gguf" else model
    return (f"{label} via {engine}" if engine else label) if label or engine else "embedded SmolLM2-135M"


def git_commit() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, Path):
        return str(value)
    return str(value)
