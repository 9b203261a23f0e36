"""`prefcall eval nlt`: NLT tool selection on prefcall's own NLT set (tests/data/nlt) or any file in its format.

`--split tune|report` (`dev` is tune's older name) picks tests/data/nlt/{dev,report}.jsonl of a source checkout (dev: fitting the score-mode
rule; report: the reported numbers); `--data FILE` reads any file of `tools`-task records instead, and with
`--split tune|report|all` the frozen split's part of it when the file is a split source (the second NLT set,
tests/data/nlt2/items.jsonl: fit on one set, report on the other). Everything
else (modes, metrics, the fitted rule on dev) is the `tools` task's.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from prefcall.errors import ConfigError
from prefcall.evaluation.splits import source_of
from prefcall.evaluation.task import EvalItem
from prefcall.evaluation.tasks.tools import ToolsTask, load_items

SPLITS = ("dev", "report")
FILES = {"dev": "dev", "tune": "dev", "report": "report"}  # --split (the common option) -> tests/data/nlt file


def split_path(split: str, root: Path | None = None) -> Path:
    """tests/data/nlt/<split>.jsonl under the source checkout (or `root`), then under the working directory.
    `tune` is the dev file (the frozen split lists it as the NLT set's tune part)."""
    if split not in FILES:
        raise ConfigError(f"--split {split!r}: the NLT set has tune (dev) and report files; pass one of them")
    split = FILES[split]
    roots = [root] if root else [Path(__file__).resolve().parents[4], Path.cwd()]
    for base in roots:
        path = base / "tests" / "data" / "nlt" / f"{split}.jsonl"
        if path.is_file():
            return path
    raise ConfigError(f"the NLT {split} split (tests/data/nlt/{split}.jsonl) is not here: run from a source "
                      "checkout or pass --data FILE")


class NltTask(ToolsTask):
    name = "nlt"
    description = "NLT tool selection on prefcall's NLT set (--split tune|report) or --data FILE; --mode score|generate|structured"

    # --split tune|report (the common option; `dev` is tune's older name) picks the file.

    def data_files(self, args: argparse.Namespace) -> list[Path]:
        data, split = getattr(args, "data", None), getattr(args, "split", None)
        if data and split and source_of(Path(data)) is None:
            raise ConfigError("pass either --data FILE or --split tune|report, not both (--split with --data only "
                              "for a file of the frozen split, such as tests/data/nlt2/items.jsonl)")
        return [Path(data) if data else split_path(split or "report")]

    def load(self, args: argparse.Namespace) -> list[EvalItem]:
        return load_items(self.data_files(args)[0])


TASK = NltTask()
