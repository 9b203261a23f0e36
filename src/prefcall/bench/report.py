"""Report outputs: the console table, markdown, JSON and plots (matplotlib Agg)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def table_rows(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    rows = []
    for name, section in report["sections"].items():
        if section["status"] != "ok":
            reason = section.get("reason", "")
            rows.append((name, section["status"], reason if len(reason) <= 160 else reason[:157] + "..."))
            continue
        for label, value in section.get("headline", []):
            rows.append((name, str(label), _fmt(value)))
    return rows


def render_table(report: dict[str, Any]) -> str:
    rows = [("section", "figure", "value"), *table_rows(report)]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for t in report.get("targets", []):
        mark = {True: "met", False: "MISSED", None: "n/a"}[t.get("met")]
        lines.append(f"target {mark}: {t['name']}: {_fmt(t.get('value'))} (limit {_fmt(t.get('limit'))}{t.get('unit', '')})")
    return "\n".join(lines)


def render_markdown(report: dict[str, Any], command: str = "") -> str:
    m = report["meta"]
    out = ["# prefcall bench", "",
           f"- command: `{command}`" if command else "",
           f"- commit {m.get('commit')}, {m.get('date')}, {m.get('cpu_count')} CPUs, load average at start "
           f"{m.get('load_average_start')}, at end {m.get('load_average_end')}",
           f"- model: {m.get('model')}, threads {m.get('n_threads')}, workload: {m.get('workload')}", "",
           "| section | figure | value |", "|---|---|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in table_rows(report)]
    out += ["", "## Targets", "", "| target | value | limit | met |", "|---|---|---|---|"]
    for t in report.get("targets", []):
        out.append(f"| {t['name']} | {_fmt(t.get('value'))} | {_fmt(t.get('limit'))} {t.get('unit', '')} | "
                   f"{ {True: 'yes', False: 'NO', None: 'n/a'}[t.get('met')] } |")
    return "\n".join(line for line in out if line is not None) + "\n"


def write_outputs(report: dict[str, Any], out_dir: Path, command: str = "") -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "bench.json", out_dir / "bench.md"]
    written[0].write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    written[1].write_text(render_markdown(report, command), encoding="utf-8")
    written += write_plots(report, out_dir)
    return written


def write_plots(report: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    sections = report["sections"]

    def save(fig: Any, name: str) -> None:
        path = out_dir / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    retrieval = sections.get("retrieval", {})
    if retrieval.get("status") == "ok":
        sizes = retrieval["figures"]["sizes"]
        xs = [int(n) for n in sizes]
        fig, ax = plt.subplots(figsize=(6, 4))
        for method in ("bm25", "dense", "fused", "fused_with_query_embedding"):
            ax.plot(xs, [sizes[str(n)]["latency_ms"][method].get("p95") for n in xs], marker="o", label=method)
        ax.axhline(50, color="grey", linestyle="--", label="target 50 ms")
        ax.set(xscale="log", xlabel="demonstrations", ylabel="p95 latency (ms)", title="Retrieval scaling")
        ax.legend()
        save(fig, "retrieval.png")
    bars = []
    if sections.get("nlt", {}).get("status") == "ok":
        modes = sections["nlt"]["figures"]["modes"]
        bars.append(("NLT modes: p50 latency (s)", {m: v["seconds"].get("p50") for m, v in modes.items()}))
    if sections.get("prefix", {}).get("status") == "ok":
        run = sections["prefix"]["figures"]["runs"][0]
        bars.append(("Prefix reuse: latency (s)", {"cold": run["cold"]["seconds"], "warm": run["warm"]["seconds"]}))
    if sections.get("fnctod", {}).get("status") == "ok":
        cold = sections["fnctod"]["figures"]["cold"]
        bars.append(("FnCTOD: prompt tokens (cold)", {k: v["prompt_tokens"] for k, v in cold.items()}))
    if sections.get("taps", {}).get("status") == "ok":
        bars.append(("TAPS gate: p50 latency (s)", sections["taps"]["figures"]["seconds_p50"]))
    if bars:
        fig, axes = plt.subplots(1, len(bars), figsize=(4 * len(bars), 3.5), squeeze=False)
        for ax, (title, values) in zip(axes[0], bars):
            ax.bar(list(values), [v or 0 for v in values.values()])
            ax.set_title(title, fontsize=9)
        save(fig, "comparisons.png")
    server = sections.get("server", {})
    if server.get("status") == "ok":
        levels = server["figures"]["http"]["levels"]
        xs = [int(c) for c in levels]
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(xs, [levels[str(c)]["latency_s"].get("p95") for c in xs], marker="o", label="p95 latency (s)")
        ax.plot(xs, [levels[str(c)].get("queue_bound_s") for c in xs], linestyle="--", label="queue depth x single")
        ax.set(xlabel="concurrent clients", ylabel="seconds", title="HTTP parse_request under concurrency")
        ax.legend()
        save(fig, "server.png")
    return written
