"""Evaluation tasks, one module each, imported lazily by name (see prefcall.evaluation.task for the guide).

Nothing is imported here, so a half-written task module never breaks the others.
"""

from __future__ import annotations

TASK_MODULES: dict[str, str] = {
    "nlsi": "prefcall.evaluation.tasks.nlsi",  # NLSI standing instructions -> API calls
    "tags": "prefcall.evaluation.tasks.tags",  # TAPS structured tags of instructions
    "tools": "prefcall.evaluation.tasks.tools",  # NLT / QwN tool selection
    "bfcl": "prefcall.evaluation.tasks.bfcl",  # Berkeley Function Calling Leaderboard subsets
    "acebench": "prefcall.evaluation.tasks.acebench",  # ACEBench preference / special cases
    "dst": "prefcall.evaluation.tasks.dst",  # SGD dialogue state tracking as function calling (FnCTOD)
}
