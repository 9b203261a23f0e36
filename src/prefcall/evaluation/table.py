"""`prefcall eval report RUN_DIR...`: one markdown table of current figures from evaluation run folders.

Each row is one run: task, model, config, which items (the split part and sources), n, the task's headline
metrics with their 95% intervals, the commit and the exact command (read from the run's metrics.json, or from its
report.md for runs written before metrics.json carried them). `--breakdown by_type` adds a row per example type.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prefcall.errors import ConfigError
from prefcall.evaluation.splits import Selection

HEADLINE: dict[str, tuple[str, ...]] = {
    "nlsi": ("exact_match", "slot_f1"),
    "dst": ("joint_goal_accuracy", "slot_f1", "intent_accuracy"),
    "tags": ("span_f1", "validity_rate"),
    "nlt": ("exact_set_accuracy", "no_tool_accuracy"),
    "tools": ("exact_set_accuracy", "no_tool_accuracy"),
    "bfcl": ("selection_accuracy", "no_call_rate", "ast_accuracy", "false_refusal_rate"),
    "acebench": ("decision_accuracy", "call_exact"),
    "relevance": ("no_call_rate", "false_refusal_rate", "selection_accuracy"),
}


def read_run(folder: Path) -> dict[str, Any]:
    path = folder / "metrics.json"
    if not path.is_file():
        raise ConfigError(f"{folder} has no metrics.json: pass folders that `prefcall eval --out` wrote")
    summary = json.loads(path.read_text(encoding="utf-8"))
    run = dict(summary.get("run") or {})
    report = folder / "report.md"
    if (not run.get("command") or not run.get("commit")) and report.is_file():
        text = report.read_text(encoding="utf-8")
        command = re.search(r"^- command: `(.*)`$", text, re.M)
        commit = re.search(r"^- date: (\S+); commit: (\S+)$", text, re.M)
        run.setdefault("command", command.group(1) if command else "")
        if commit:
            run.setdefault("date", commit.group(1))
            run.setdefault("commit", commit.group(2))
    summary["run"] = run
    return summary


def shown_command(command: str) -> str:
    """The command as a reader would type it: `prefcall ...`, the output folder as DIR, a model file by name."""
    words = command.split()
    if words and (words[0].endswith("prefcall") or words[0].endswith("__main__.py")):
        words[0] = "prefcall"
    text = " ".join(words)
    text = re.sub(r"--out \S+", "--out DIR", text)
    text = re.sub(r"--model \S*/([^/\s]+\.gguf)", r"--model \1", text)
    return re.sub(r"\S*/shared/data/", "../shared/data/", text)


def model_cell(summary: dict[str, Any], command: str) -> str:
    if summary.get("model"):
        return str(summary["model"])
    found = re.search(r"--model \S*?([^/\s]+)(?:\s|$)", command)
    return found.group(1) if found else "embedded SmolLM2-135M"


def figure(intervals: dict[str, Any], key: str) -> str | None:
    found = intervals.get(key)
    if not isinstance(found, dict) or found.get("value") is None:
        return None
    if found.get("lo") is None:
        return f"{found['value']:.3f}"
    return f"{found['value']:.3f} [{found['lo']:.3f}, {found['hi']:.3f}]"


def items_cell(summary: dict[str, Any]) -> str:
    split = summary.get("split")
    if not split:
        return "(not recorded)"
    selection = Selection.model_validate(split)
    if not selection.sources:
        return "all items (not a split source)"
    return f"{selection.part}: " + ", ".join(f"{name}" for name in selection.sources)


def metric_cell(task: str, intervals: dict[str, Any], prefix: str = "") -> str:
    keys = HEADLINE.get(task) or tuple(k for k in intervals if "/" not in k)[:3]
    parts = [f"{k} {v}" for k in keys if (v := figure(intervals, prefix + k)) is not None]
    return "; ".join(parts) or "-"


def render(folders: list[Path], breakdown: str | None = None) -> str:
    lines = ["| task | model | config | items | n | metrics (95% interval) | commit | command |",
             "|---|---|---|---|---|---|---|---|"]
    for folder in folders:
        summary = read_run(folder)
        task = str(summary.get("task", ""))
        intervals = summary.get("intervals") or {}
        run = summary["run"]
        command = shown_command(str(run.get("command", ""))).replace("|", "\\|")
        lines.append(f"| {task} | {model_cell(summary, command)} | {summary.get('config') or summary.get('mode') or '-'} "
                     f"| {items_cell(summary)} | {summary.get('n_scored', summary.get('n'))} | "
                     f"{metric_cell(task, intervals)} | {run.get('commit', '')} | `{command}` |")
        if breakdown:
            groups = (summary.get("metrics") or {}).get(breakdown) or {}
            for name, group in sorted(groups.items()):
                lines.append(f"| {task}, {breakdown.removeprefix('by_')} {name} | | | | {group.get('n', '')} | "
                             f"{metric_cell(task, intervals, f'{breakdown}/{name}/')} | | |")
    return "\n".join(lines) + "\n"
