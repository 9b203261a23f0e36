"""PNG plots for reports (matplotlib, Agg backend; imported lazily so metric-only code never needs it).

Helpers any task can call:
- `bar_chart(values, path, title)`: one bar per group (per type, per domain...).
- `accuracy_by_bucket(items, bucket_of, score_key, path)`: e.g. accuracy by number of expected tools (0, 1, 2+),
  with `tool_count_bucket(n)` as the bucket function.
- `confidence_scatter(confidence, f1, path)`: least confidence vs F1 with Pearson r in the title (TAPS Table 8).
- `threshold_curve(thresholds, f1s, path)`: F1 the uncertainty gate gives at each threshold.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

from prefcall.evaluation.task import ScoredItem


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson correlation; None when undefined (fewer than 2 points or a constant series)."""
    n = len(xs)
    if n < 2 or n != len(ys):
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def bar_chart(values: dict[str, float], path: Path, title: str, ylabel: str = "score") -> Path:
    plt = _pyplot()
    labels = list(values)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(labels) + 2), 3.5))
    ax.bar(range(len(labels)), [values[k] for k in labels], color="#4477aa")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=45 if len(labels) > 4 else 0, ha="right" if len(labels) > 4 else "center")
    ax.set_ylim(0, max(1.0, max(values.values(), default=0.0)))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def group_mean(items: Sequence[ScoredItem], group_of: Callable[[ScoredItem], str], score_key: str) -> dict[str, float]:
    sums: dict[str, list[float]] = {}
    for item in items:
        if score_key in item.scores:
            sums.setdefault(group_of(item), []).append(item.scores[score_key])
    return {g: sum(v) / len(v) for g, v in sorted(sums.items())}


def tool_count_bucket(n: int) -> str:
    return "0" if n <= 0 else "1" if n == 1 else "2+"


def accuracy_by_bucket(
    items: Sequence[ScoredItem],
    bucket_of: Callable[[ScoredItem], str],
    score_key: str,
    path: Path,
    title: str = "accuracy by number of expected tools",
) -> Path:
    """E.g. `accuracy_by_bucket(items, lambda i: tool_count_bucket(len(i.gold)), "accuracy", out / "by_n.png")`."""
    return bar_chart(group_mean(items, bucket_of, score_key), path, title, ylabel=score_key)


def confidence_scatter(confidence: Sequence[float], f1: Sequence[float], path: Path, title: str = "") -> Path:
    plt = _pyplot()
    r = pearson(confidence, f1)
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    ax.scatter(confidence, f1, s=12, alpha=0.6, color="#aa3377")
    ax.set_xlabel("least confidence (1 - exp(mean logprob))")
    ax.set_ylabel("F1")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"{title} Pearson r = {r:.3f}" if r is not None else f"{title} Pearson r undefined")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def gate_f1_at_thresholds(
    confidence: Sequence[float], f1_untagged: Sequence[float], f1_tagged: Sequence[float], thresholds: Sequence[float]
) -> list[float]:
    """Mean F1 if the gate used the tagged answer whenever least confidence > threshold (TAPS's gate)."""
    out = []
    for t in thresholds:
        chosen = [ft if c > t else fu for c, fu, ft in zip(confidence, f1_untagged, f1_tagged)]
        out.append(sum(chosen) / len(chosen) if chosen else 0.0)
    return out


def threshold_curve(thresholds: Sequence[float], f1s: Sequence[float], path: Path, title: str = "") -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    ax.plot(thresholds, f1s, marker="o", color="#228833")
    ax.set_xlabel("gate threshold on least confidence")
    ax.set_ylabel("F1 with the gate")
    ax.set_title(title or "F1 the gate gives at each threshold")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
