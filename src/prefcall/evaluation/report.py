"""report.md: metric tables, breakdowns, plots and the worst failures with their inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefcall.evaluation.metrics.intervals import Metric
from prefcall.evaluation.splits import Selection
from prefcall.evaluation.task import ScoredItem, Task


def fmt(value: Any) -> str:
    """A figure as report.md shows it: `value [lo, hi]` for a Metric with an interval, else the value."""
    if isinstance(value, Metric):
        return value.text()
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def n_of(value: Any) -> str:
    return str(value.n) if isinstance(value, Metric) else ""


def scalar_table(metrics: dict[str, Any]) -> str:
    rows = [(k, v) for k, v in metrics.items() if not isinstance(v, (dict, list))]
    if not rows:
        return ""
    lines = ["| metric | value [95% interval] | n |", "|---|---|---|"]
    lines += [f"| {k} | {fmt(v)} | {n_of(v)} |" for k, v in rows]
    return "\n".join(lines)


def breakdown_table(name: str, groups: dict[str, Any]) -> str:
    """A nested metric {group: {metric: value}} as one table (groups as rows); {group: value} as a
    two-column table with n. Figures with an interval show `value [lo, hi]`."""
    if groups and all(not isinstance(v, (dict, list)) for v in groups.values()):
        lines = [f"### {name}", "", f"| {name} | value [95% interval] | n |", "|---|---|---|"]
        lines += [f"| {group} | {fmt(v)} | {n_of(v)} |" for group, v in groups.items()]
        return "\n".join(lines)
    if not groups or not all(isinstance(v, dict) for v in groups.values()):
        return f"**{name}**: `{json.dumps(groups, default=str)}`"
    columns: list[str] = []
    for row in groups.values():
        columns.extend(c for c in row if c not in columns and not isinstance(row[c], (dict, list)))
    lines = [f"### {name}", "", "| " + " | ".join([name, *columns]) + " |", "|" + "---|" * (len(columns) + 1)]
    for group, row in groups.items():
        lines.append("| " + " | ".join([str(group), *(fmt(row.get(c, "")) for c in columns)]) + " |")
    return "\n".join(lines)


def error_rows(items: list[ScoredItem]) -> str:
    """The items that could not be scored: one row each, with the reason."""
    errors = [i for i in items if i.error]
    if not errors:
        return ""
    lines = [f"## Items that could not be scored ({len(errors)}, left out of the metrics)", "",
             "| id | error |", "|---|---|"]
    lines += [f"| {i.id} | {str(i.error)[:300].replace('|', '/')} |" for i in errors[:100]]
    if len(errors) > 100:
        lines.append(f"| ... | {len(errors) - 100} more in results.jsonl |")
    return "\n".join(lines) + "\n"


def failure_block(item: ScoredItem) -> str:
    scores = ", ".join(f"{k}={fmt(v)}" for k, v in item.scores.items())
    prediction = {k: v for k, v in item.prediction.items() if k not in ("trace",)}
    return "\n".join(
        [
            f"#### {item.id} (status: {item.status}; {scores})",
            "",
            "input:",
            "```json",
            json.dumps(item.input, indent=1, default=str, ensure_ascii=False)[:2500],
            "```",
            "prediction:",
            "```json",
            json.dumps(prediction, indent=1, default=str, ensure_ascii=False)[:2500],
            "```",
            "gold:",
            "```json",
            json.dumps(item.gold, indent=1, default=str, ensure_ascii=False)[:1500],
            "```",
        ]
    )


def not_scorable(items: list[ScoredItem]) -> str:
    """Items this harness cannot score (e.g. agent tasks that need an executable environment): counts by reason."""
    reasons: dict[str, list[str]] = {}
    for item in items:
        if item.skipped:
            reasons.setdefault(item.skipped, []).append(item.id)
    if not reasons:
        return ""
    lines = [f"## Not scorable here ({sum(map(len, reasons.values()))} items, left out of the metrics)", "",
             "| items | reason | ids |", "|---|---|---|"]
    for reason, ids in reasons.items():
        shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
        lines.append(f"| {len(ids)} | {reason.replace('|', '/')} | {shown} |")
    return "\n".join(lines) + "\n"


def render_report(
    task: Task,
    items: list[ScoredItem],
    metrics: dict[str, Any],
    summary: dict[str, Any],
    plots: list[Path],
    meta: dict[str, str],
    out_dir: Path,
) -> str:
    usable = [i for i in items if i.scorable]
    skipped = [i for i in items if i.skipped]
    statuses: dict[str, int] = {}
    for item in items:
        statuses[item.status] = statuses.get(item.status, 0) + 1
    parts = [
        f"# Evaluation: {task.name}",
        "",
        f"- items: {summary.get('n')} ({len(usable)} scored, {sum(bool(i.error) for i in items)} could not be "
        f"scored, {len(skipped)} not scorable here); "
        f"config: {summary.get('config')}; mode: {summary.get('mode')}",
        f"- prediction status: {', '.join(f'{k}={v}' for k, v in sorted(statuses.items()))}",
        f"- items evaluated: {split_line(summary.get('split'))}",
        f"- command: `{meta.get('command', '')}`",
        f"- date: {meta.get('date', '')}; commit: {meta.get('commit') or '(none)'}",
    ]
    for name, pool in (summary.get("pools") or {}).items():
        parts.append(f"- {name}: {pool}")
    if "latency_s" in summary:
        lat = summary["latency_s"]
        parts.append(f"- latency per item: mean {lat['mean']:.3f}s, median {lat['p50']:.3f}s")
    tokens = token_totals(items)
    if tokens:
        parts.append("- tokens (sum): " + ", ".join(f"{k}={v}" for k, v in tokens.items()))
    parts += ["", "## Metrics", "",
              "Intervals are 95%: Wilson for proportions, bootstrap percentile (2000 resamples, fixed seed) for "
              "means, micro/macro F1 and correlations; n is the number of items behind each figure.", "",
              scalar_table(metrics), ""]
    for name, value in metrics.items():
        if isinstance(value, dict):
            parts += [breakdown_table(name, value), ""]
    parts += [section for section in (error_rows(items), not_scorable(items), *task.report_sections(usable, metrics))
              if section]
    if plots:
        parts += ["## Plots", ""]
        parts += [f"![{p.stem}]({p.relative_to(out_dir) if p.is_relative_to(out_dir) else p})" for p in plots]
        parts.append("")
    worst = task.worst(usable)
    parts += ["## Worst failures", ""]
    parts += [failure_block(item) for item in worst] if worst else ["(none: every item scored perfectly)"]
    return "\n".join(parts) + "\n"


def split_line(split: dict[str, Any] | None) -> str:
    """Which part of the frozen split the run evaluated (prefcall.evaluation.splits)."""
    if not split:
        return "(not recorded)"
    selection = Selection.model_validate(split)
    return selection.describe() + (f"; {selection.note}" if selection.note else "")


def token_totals(items: list[ScoredItem]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for item in items:
        for key, value in item.tokens.items():
            totals[key] = totals.get(key, 0) + value
    return totals
