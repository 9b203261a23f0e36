"""Runs the selected sections in order and assembles one report; a section never takes the others down.

The section modules import the strategies (and through them the models) inside their functions, so
importing this registry stays cheap."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from prefcall.bench.catalogue import section_catalogue
from prefcall.bench.context import REPO_ROOT, BenchContext
from prefcall.bench.dialogue import section_dialogue
from prefcall.bench.model import (
    section_fnctod,
    section_grounded,
    section_limit,
    section_nlt,
    section_prefix,
    section_taps,
)
from prefcall.bench.retrieval import section_retrieval
from prefcall.bench.server import section_server
from prefcall.bench.served import section_served
from prefcall.bench.stats import load_average
from prefcall.errors import ValidationError


@dataclass(frozen=True)
class Section:
    name: str
    title: str
    run: Callable[[BenchContext], dict[str, Any]]


SECTIONS: dict[str, Section] = {s.name: s for s in (
    Section("limit", "Raw llama.cpp limit and strategy overhead", section_limit),
    Section("prefix", "Prefix reuse, cold vs warm", section_prefix),
    Section("nlt", "NLT generation vs scoring vs structured", section_nlt),
    Section("fnctod", "FnCTOD one-stage vs two-stage", section_fnctod),
    Section("grounded", "Grounded parse_request vs one-stage", section_grounded),
    Section("taps", "TAPS gate fired vs not", section_taps),
    Section("dialogue", "A conversation: the state sent back vs the whole dialogue re-sent", section_dialogue),
    Section("catalogue", "Large catalogues: 10, 50 and 200 tools, shortlisted", section_catalogue),
    Section("retrieval", "Retrieval scaling", section_retrieval),
    Section("server", "MCP server", section_server),
    Section("served", "Served engine vs in-process", section_served),
)}


def parse_only(text: str | None) -> list[str]:
    """'a,b' -> ['a', 'b'] in the bench's own order; unknown names raise a ValidationError listing the valid ones."""
    if not text:
        return list(SECTIONS)
    wanted = [w.strip() for w in text.split(",") if w.strip()]
    unknown = [w for w in wanted if w not in SECTIONS]
    if unknown or not wanted:
        raise ValidationError(f"unknown bench section(s) {', '.join(unknown) or '(none given)'}: "
                              f"use some of {', '.join(SECTIONS)}")
    return [name for name in SECTIONS if name in wanted]


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def run_section(section: Section, ctx: BenchContext) -> dict[str, Any]:
    started = time.perf_counter()
    load_before = load_average()
    try:
        body = section.run(ctx)
    except Exception as exc:  # a broken section is reported, the bench goes on: every figure it has still counts
        ctx.log(traceback.format_exc())
        return {"status": "error", "reason": f"{type(exc).__name__}: {exc}"[:500], "title": section.title,
                "seconds": round(time.perf_counter() - started, 2)}
    return {"status": "ok", "title": section.title, "seconds": round(time.perf_counter() - started, 2),
            "load_before": load_before, "load_after": load_average(), **body}


def run_bench(ctx: BenchContext, names: Sequence[str],
              on_section: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run the sections in order; `on_section(report_so_far)` after each (e.g. to save partial results)."""
    report: dict[str, Any] = {"prefcall_bench": 1, "meta": meta(ctx, names), "sections": {}}
    started = time.perf_counter()
    try:
        for name in names:
            ctx.log(f"bench: section {name} ...")
            report["sections"][name] = run_section(SECTIONS[name], ctx)
            ctx.log(f"bench: section {name} {report['sections'][name]['status']}")
            if on_section is not None:
                on_section(report)
    finally:
        ctx.close()
    report["meta"]["seconds"] = round(time.perf_counter() - started, 2)
    report["meta"]["load_average_end"] = load_average()
    report["targets"] = [dict(t, section=n) for n, s in report["sections"].items() for t in s.get("targets", [])]
    for section in report["sections"].values():
        section["headline"] = [[label, value] for label, value in section.get("headline", [])]
    return report


def meta(ctx: BenchContext, names: Sequence[str]) -> dict[str, Any]:
    s = ctx.settings
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(), "host": platform.node(), "python": platform.python_version(),
        "cpu_count": os.cpu_count(), "load_average_start": load_average(), "quick": ctx.quick, "reps": ctx.reps,
        "sections": list(names), "model": str(s.model) if s.model else "embedded SmolLM2-135M-Instruct",
        "n_threads": s.n_threads, "n_ctx": s.n_ctx, "n_gpu_layers": s.n_gpu_layers,
        "workload": ctx.workload_source, "workload_items": len(ctx.items),
    }
