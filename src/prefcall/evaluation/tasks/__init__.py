"""Evaluation tasks, one module each (see prefcall.evaluation.task for the guide).

`TASKS` maps a task name to a function that imports its module and returns its `TASK`: modules load only
when a task is asked for, and a half-written task module breaks only itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from prefcall.errors import ConfigError

if TYPE_CHECKING:
    from prefcall.evaluation.task import Task


def _nlsi() -> Task:  # NLSI standing instructions -> API calls
    from prefcall.evaluation.tasks.nlsi import TASK

    return TASK


def _tags() -> Task:  # TAPS structured tags of instructions
    from prefcall.evaluation.tasks.tags import TASK

    return TASK


def _tools() -> Task:  # NLT / QwN tool selection
    from prefcall.evaluation.tasks.tools import TASK

    return TASK


def _nlt() -> Task:  # NLT on prefcall's own NLT set (tests/data/nlt: --split dev|report)
    from prefcall.evaluation.tasks.nlt import TASK

    return TASK


def _bfcl() -> Task:  # Berkeley Function Calling Leaderboard subsets
    from prefcall.evaluation.tasks.bfcl import TASK

    return TASK


def _acebench() -> Task:  # ACEBench preference / special cases
    from prefcall.evaluation.tasks.acebench import TASK

    return TASK


def _dst() -> Task:  # SGD dialogue state tracking as function calling (FnCTOD)
    from prefcall.evaluation.tasks.dst import TASK

    return TASK


def _relevance() -> Task:  # abstention across sources: no-call, false refusals, selection
    from prefcall.evaluation.tasks.relevance import TASK

    return TASK


def _select() -> Task:  # the selection sets: one, none and two of N tools, injected tools
    from prefcall.evaluation.tasks.select import TASK

    return TASK


def _misfit() -> Task:  # class g: values that break the schema (the generated misfit corpus)
    from prefcall.evaluation.tasks.misfit import TASK

    return TASK


def _stage1() -> Task:  # stage 1 alone, with the profile as written and uncovered
    from prefcall.evaluation.tasks.stage1 import TASK

    return TASK


TASKS: dict[str, Callable[[], Task]] = {
    "nlsi": _nlsi,
    "tags": _tags,
    "tools": _tools,
    "nlt": _nlt,
    "bfcl": _bfcl,
    "acebench": _acebench,
    "dst": _dst,
    "relevance": _relevance,
    "select": _select,
    "misfit": _misfit,
    "stage1": _stage1,
}


def get_task(name: str) -> Task:
    """The task registered as `name` in `TASKS`, its module imported now."""
    if name not in TASKS:
        raise ConfigError(f"unknown eval task {name!r}; choose one of: {', '.join(TASKS)}")
    return TASKS[name]()
