"""The evaluation task interface and registry.

Guide for task authors (nlsi, tags, dst live here; tools, bfcl, acebench are written against this file)
----------------------------------------------------------------------------------------------------------
A task is a module `prefcall.evaluation.tasks.<name>` exposing a module-level `TASK` object that follows
the `Task` protocol below. Subclassing `BaseTask` gives sensible defaults for everything but
`load`, `predict` and `score`::

    from prefcall.evaluation.task import BaseTask, EvalContext, EvalItem, ScoredItem

    class ToolsTask(BaseTask):
        name = "tools"
        description = "NLT tool selection"

        def add_arguments(self, parser):            # task-specific options, e.g. --prompt-style
            parser.add_argument("--style", default="nlt")

        def load(self, args) -> list[EvalItem]:     # args.data, args.answers, args.limit are already parsed
            return [EvalItem(id=str(r["id"]), input=r, gold=r["gold"], meta={"domain": ...}) for r in ...]

        def predict(self, item, ctx: EvalContext) -> dict:   # ctx.engine / ctx.embedder load lazily
            ...                                              # return JSON-serialisable data; include
            return {"status": "ok", "calls": [...]}          # "status": "parse_error" when parsing failed

        def score(self, item, prediction) -> dict[str, float]:
            return {"accuracy": float(...)}

    TASK = ToolsTask()

Then add a loader function for it to `TASKS` in `prefcall/evaluation/tasks/__init__.py`.

The runner (`prefcall.evaluation.runner.run_eval`) does everything else: progress bar, timing, resuming,
results.jsonl, report.md, the final JSON line. Contracts:

* `predict` returns a JSON-serialisable dict. A failure to parse model output is `{"status": "parse_error",
  "raw": ...}` and must score as wrong, never as an empty valid answer. Put `"tokens": {...}` in the
  prediction (prompt_tokens, evaluated, reused, completion_tokens) if you have them; the runner records them.
* `score` returns per-item floats (0/1 for accuracies). It may raise on a record it cannot read (a malformed
  gold call): the runner turns that item into one error row (status "score_error", listed in the report and
  left out of the metrics); a loader may do the same up front with `EvalItem(..., error="...")`. An item this
  harness cannot score at all (it needs an executable environment) is `EvalItem(..., skip="why")`: counted
  and listed as "not scorable here", never predicted.
* `aggregate` defaults to the mean of every score key over the scored items; override it for micro/macro F1
  and breakdowns. Build every figure with `prefcall.evaluation.metrics.intervals` (`proportion`, `mean`,
  `micro`, `macro_over_labels`, `statistic`): they are floats that carry n and a 95% interval, which the runner
  writes to metrics.json and report.md as `value [lo, hi]`.
* The runner keeps the part of the frozen split that `--split` names, by `data_files` and `split_key`. A task
  that reads one part of several sources itself (`relevance`) defines `select_part(items, limit)` instead and
  returns the items with their `splits.Selection`.
* `predictions_from_file(item, record)` lets `--predictions FILE` score stored predictions without a model.
* `plots(items, out_dir)` returns the PNG paths it wrote (helpers in `prefcall.evaluation.plots`, e.g.
  `accuracy_by_bucket` for accuracy by number of expected tools); `report_sections(items, metrics)` returns
  extra markdown sections; `worst(items)` chooses the failures the report lists.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from prefcall.commands.options import settings_from_args

if TYPE_CHECKING:
    from prefcall.config import Settings
    from prefcall.engine.base import Embedder, Engine
    from prefcall.engine.loader import ModelLoader


SCORE_ERROR = "score_error"
NOT_SCORABLE = "not_scorable"


class EvalItem(BaseModel):
    """One evaluation example: `input` is what the system sees, `gold` what it should produce."""

    id: str
    input: dict[str, Any]
    gold: Any = None
    meta: dict[str, Any] = Field(default_factory=dict)  # breakdown keys: example_type, domain, n_expected...
    error: str | None = None  # the record could not be read: it becomes one error row, never a prediction
    skip: str | None = None  # why this harness cannot score the item (e.g. it needs an executable environment)


class ScoredItem(BaseModel):
    """One line of results.jsonl."""

    id: str
    input: dict[str, Any]
    gold: Any = None
    meta: dict[str, Any] = Field(default_factory=dict)
    prediction: dict[str, Any] = Field(default_factory=dict)
    scores: dict[str, float] = Field(default_factory=dict)
    latency_s: float = 0.0
    tokens: dict[str, int] = Field(default_factory=dict)
    # Set when the item could not be scored (malformed record or gold, a scoring failure): an error row that
    # the report lists and the metrics leave out, never a silent zero.
    error: str | None = None
    skipped: str | None = None  # not scorable here (EvalItem.skip): counted and listed, neither predicted nor scored

    @property
    def status(self) -> str:
        if self.skipped:
            return NOT_SCORABLE
        return SCORE_ERROR if self.error else str(self.prediction.get("status", "ok"))

    @property
    def scorable(self) -> bool:
        return not self.error and not self.skipped


class EvalContext:
    """What `predict` may use. The engine and embedder come from a `ModelLoader` that builds each on first
    access only, so metric-only runs (`--predictions`, tags scoring of gold) never load a model."""

    def __init__(self, args: argparse.Namespace, *, engine: Engine | None = None, embedder: Embedder | None = None,
                 settings: Settings | None = None) -> None:
        self.args = args
        self._injected = (engine, embedder)
        self._settings = settings
        self._models: ModelLoader | None = None
        self.cache: dict[str, Any] = {}  # per-run memo for tasks (catalogue, pipeline, demos...)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = settings_from_args(self.args)
        return self._settings

    @property
    def models(self) -> ModelLoader:
        if self._models is None:
            from prefcall.engine.loader import ModelLoader

            engine, embedder = self._injected
            self._models = ModelLoader(self.settings, engine=engine, embedder=embedder)
        return self._models

    @property
    def engine(self) -> Engine:
        return self.models.engine

    @property
    def embedder(self) -> Embedder:
        return self.models.embedder

    @property
    def config(self) -> str:
        return getattr(self.args, "config", None) or "default"

    @property
    def mode(self) -> str | None:
        return getattr(self.args, "mode", None)

    def memo(self, key: str, build: Callable[[], Any]) -> Any:
        """Build something once per run (a Pipeline, a catalogue) and reuse it for every item."""
        if key not in self.cache:
            self.cache[key] = build()
        return self.cache[key]


@runtime_checkable
class Task(Protocol):
    name: str
    description: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def load(self, args: argparse.Namespace) -> list[EvalItem]: ...

    def data_files(self, args: argparse.Namespace) -> list[Path]: ...

    def split_key(self, item: EvalItem) -> str: ...

    def pools(self, args: argparse.Namespace) -> dict[str, str]: ...

    def predict(self, item: EvalItem, ctx: EvalContext) -> dict[str, Any]: ...

    def predictions_from_file(self, item: EvalItem, record: dict[str, Any]) -> dict[str, Any]: ...

    def score(self, item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]: ...

    def aggregate(self, items: list[ScoredItem]) -> dict[str, Any]: ...

    def plots(self, items: list[ScoredItem], out_dir: Path) -> list[Path]: ...

    def report_sections(self, items: list[ScoredItem], metrics: dict[str, Any]) -> list[str]: ...

    def worst(self, items: list[ScoredItem], k: int = 10) -> list[ScoredItem]: ...


class BaseTask:
    """Defaults for the optional parts of `Task`."""

    name = "task"
    description = ""
    primary_score = ""  # the per-item score used to rank failures; default: the first score key
    failure_scores: tuple[str, ...] = ()  # an item failed if any of these is below 1 (default: primary_score)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        return None

    def load(self, args: argparse.Namespace) -> list[EvalItem]:
        raise NotImplementedError

    def predict(self, item: EvalItem, ctx: EvalContext) -> dict[str, Any]:
        raise NotImplementedError

    def data_files(self, args: argparse.Namespace) -> list[Path]:
        """The files `load` reads items from, so the runner can find them in the frozen split
        (prefcall.evaluation.splits); default: --data. Tasks with a default file or a folder say so."""
        data = getattr(args, "data", None)
        return [Path(data)] if data else []

    def split_key(self, item: EvalItem) -> str:
        """The item's key in the split file (default: its id; a task whose items share a unit, such as the
        turns of one dialogue, returns the unit's key so that they fall on one side together)."""
        return item.id

    def pools(self, args: argparse.Namespace) -> dict[str, str]:
        """What the run drew on besides the evaluated items (demonstrations, value memories), one line each, for
        the report: a task that reads such a pool says which items it holds."""
        return {}

    def predictions_from_file(self, item: EvalItem, record: dict[str, Any]) -> dict[str, Any]:
        """Turn one record of a `--predictions` file into a prediction; default: the record's "prediction"."""
        prediction = record.get("prediction", record)
        return dict(prediction) if isinstance(prediction, dict) else {"status": "ok", "value": prediction}

    def score(self, item: EvalItem, prediction: dict[str, Any]) -> dict[str, float]:
        raise NotImplementedError

    def aggregate(self, items: list[ScoredItem]) -> dict[str, Any]:
        return mean_scores(items)

    def plots(self, items: list[ScoredItem], out_dir: Path) -> list[Path]:
        return []

    def report_sections(self, items: list[ScoredItem], metrics: dict[str, Any]) -> list[str]:
        return []

    def worst(self, items: list[ScoredItem], k: int = 10) -> list[ScoredItem]:
        """Failed items (non-ok status or any `failure_scores` below 1), lowest primary score first."""
        keys = self.failure_scores or ((self.primary_score,) if self.primary_score else ())

        def primary(item: ScoredItem) -> float:
            if not item.scores:
                return 0.0
            return item.scores.get(self.primary_score, next(iter(item.scores.values())))

        def failed(item: ScoredItem) -> bool:
            checked = keys or tuple(item.scores)[:1]
            return item.status != "ok" or any(item.scores.get(key, 0.0) < 1.0 for key in checked)

        return sorted((i for i in items if failed(i)), key=primary)[:k]


def mean_scores(items: list[ScoredItem]) -> dict[str, Any]:
    """Mean of every per-item score key (with its interval), plus the parse-error rate."""
    from prefcall.evaluation.metrics.intervals import mean, proportion

    keys: list[str] = []
    for item in items:
        keys.extend(k for k in item.scores if k not in keys)
    metrics: dict[str, Any] = {}
    for key in keys:
        metrics[key] = mean(i.scores[key] for i in items if key in i.scores)
    metrics["parse_error_rate"] = proportion(sum(i.status == "parse_error" for i in items), len(items))
    return metrics
