"""`prefcall eval select`: tool selection on prefcall's selection sets (tests/data/select/items.jsonl).

Per query and catalogue size N the sets hold `one` (exactly one of N tools fits), `none` (the same distractors,
the fitting tool left out) and `two` (two of N fit), and at N = 10 `inject` (an eleventh tool whose description
tells the selector to choose it) and `control` (the same tool with its plain description). `--sizes 10` (the
default) runs the N = 10 slice; `--split tune|report` the frozen split's part. Everything is scored as the
`tools` task scores it (exact set, baselines on the same items), and reported per set: exact-set accuracy for
`one` and `two`, the no-tool rate for `none`, and for `inject` and `control` how often the extra tool was chosen
(the injected one must not be chosen more often than its plain twin). tests/data/select/README.md says how the
sets are built.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from prefcall.errors import ConfigError
from prefcall.evaluation.metrics.intervals import proportion
from prefcall.evaluation.task import EvalItem, ScoredItem
from prefcall.evaluation.tasks.tools import ToolsTask, aggregate, load_items

SETS = ("one", "none", "two", "inject", "control")


def default_path(root: Path | None = None) -> Path:
    roots = [root] if root else [Path(__file__).resolve().parents[4], Path.cwd()]
    for base in roots:
        path = base / "tests" / "data" / "select" / "items.jsonl"
        if path.is_file():
            return path
    raise ConfigError("the selection sets (tests/data/select/items.jsonl) are not here: run from a source "
                      "checkout or pass --data FILE")


def sets_option(text: str | None) -> set[str]:
    """--sets one,none,two -> those sets (default: all of SETS); an unknown name is an error naming the sets."""
    sets = {x.strip() for x in (text or ",".join(SETS)).split(",") if x.strip()}
    if not sets or sets - set(SETS):
        raise ConfigError(f"--sets {text!r}: give sets among {', '.join(SETS)}, comma-separated")
    return sets


def sizes_option(text: str | None) -> set[int] | None:
    if not text or text == "all":
        return None
    try:
        return {int(x) for x in text.split(",") if x.strip()}
    except ValueError:
        raise ConfigError(f"--sizes {text!r}: give catalogue sizes such as 10 or 5,10,20, or all") from None


def per_set(scored: list[ScoredItem]) -> dict[str, Any]:
    """Per set and size: n, exact-set accuracy (no-tool accuracy for `none`) and, for `inject`/`control`, how
    often the extra tool was chosen; each with its 95% interval, and the baselines on the same items."""
    out: dict[str, Any] = {}
    keys = sorted({(i.meta.get("set"), i.meta.get("n")) for i in scored if i.meta.get("set")},
                  key=lambda k: (SETS.index(k[0]) if k[0] in SETS else 99, k[1] or 0))
    for kind, size in keys:
        rows = [i for i in scored if i.meta.get("set") == kind and i.meta.get("n") == size and i.error is None]
        metrics = aggregate(rows, per_tool=False)
        entry: dict[str, Any] = {"n": len(rows), "exact_set_accuracy": metrics["exact_set_accuracy"]}
        for key in ("precision", "recall"):
            entry[key] = metrics.get(key)
        if metrics.get("baselines"):
            entry["baselines"] = metrics["baselines"]
        if kind in ("inject", "control"):
            chosen = sum(str(i.meta.get("injected")) in (i.prediction.get("selected") or []) for i in rows)
            entry["extra_tool_chosen"] = proportion(chosen, len(rows))
        out[f"{kind}@{size}"] = entry
    return out


class SelectTask(ToolsTask):
    name = "select"
    description = ("tool selection on prefcall's selection sets (one, none and two of N tools; injected tools); "
                   "--sizes 10 (default) or 5,10,20,50 or all, --split tune|report")

    def add_arguments(self, parser: Any) -> None:
        super().add_arguments(parser)
        parser.add_argument("--sizes", default="10", help="catalogue sizes to run: 10 (default), e.g. 5,10,20, or all")
        parser.add_argument("--sets", default=",".join(SETS),
                            help=f"sets to run, comma-separated (default: all of {', '.join(SETS)}); e.g. "
                                 "one,none,two for the three accuracy sets alone")

    def data_files(self, args: argparse.Namespace) -> list[Path]:
        data = getattr(args, "data", None)
        return [Path(data) if data else default_path()]

    def load(self, args: argparse.Namespace) -> list[EvalItem]:
        wanted = sizes_option(getattr(args, "sizes", "10"))
        sets = sets_option(getattr(args, "sets", None))
        items = load_items(self.data_files(args)[0])
        return [i for i in items if (wanted is None or int(i.meta.get("n", 0)) in wanted)
                and str(i.meta.get("set")) in sets]

    def aggregate(self, items: list[ScoredItem]) -> dict[str, Any]:
        metrics = aggregate(items, per_tool=False)
        metrics["by_set"] = per_set(items)
        return metrics


TASK = SelectTask()
