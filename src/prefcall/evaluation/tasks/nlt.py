"""`prefcall eval nlt`: NLT tool selection on prefcall's own NLT set (tests/data/nlt) or any file in its format.

`--split dev|report` picks tests/data/nlt/{dev,report}.jsonl of a source checkout (dev: fitting the score-mode
rule; report: the reported numbers); `--data FILE` reads any file of `tools`-task records instead. Everything
else (modes, metrics, the fitted rule on dev) is the `tools` task's.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from prefcall.errors import ConfigError
from prefcall.evaluation.task import EvalItem
from prefcall.evaluation.tasks.tools import ToolsTask, load_items

SPLITS = ("dev", "report")


def split_path(split: str, root: Path | None = None) -> Path:
    """tests/data/nlt/<split>.jsonl under the source checkout (or `root`), then under the working directory."""
    if split not in SPLITS:
        raise ConfigError(f"--split {split!r}: use one of {', '.join(SPLITS)}")
    roots = [root] if root else [Path(__file__).resolve().parents[4], Path.cwd()]
    for base in roots:
        path = base / "tests" / "data" / "nlt" / f"{split}.jsonl"
        if path.is_file():
            return path
    raise ConfigError(f"the NLT {split} split (tests/data/nlt/{split}.jsonl) is not here: run from a source "
                      "checkout or pass --data FILE")


class NltTask(ToolsTask):
    name = "nlt"
    description = "NLT tool selection on prefcall's NLT set (--split dev|report) or --data FILE; --mode score|generate|structured"

    def add_arguments(self, parser: Any) -> None:
        super().add_arguments(parser)
        parser.add_argument("--split", choices=SPLITS, help="tests/data/nlt split (default: report, unless --data)")

    def load(self, args: argparse.Namespace) -> list[EvalItem]:
        data, split = getattr(args, "data", None), getattr(args, "split", None)
        if data and split:
            raise ConfigError("pass either --data FILE or --split dev|report, not both")
        return load_items(data or split_path(split or "report"))


TASK = NltTask()
