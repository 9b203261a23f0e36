"""Statistics for benchmark figures: percentiles, summaries, ratios, the raw-compute overhead ratio.

Every figure the bench reports is a ratio or a pair measured side by side in one run, because the machines
it runs on are shared and noisy: absolute seconds move with the load, ratios much less.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

# The smallest duration the timing clock can tell apart from zero: no measured duration is shorter than one tick.
CLOCK_RESOLUTION_S = time.get_clock_info("perf_counter").resolution


def percentile(values: Sequence[float], q: int) -> float:
    """The q-th percentile (a whole number 0..100), interpolated between closest ranks like numpy's default:
    `statistics.quantiles(..., method="inclusive")`."""
    if not values:
        raise ValueError("percentile of no values: measure at least once")
    if not 0 <= q <= 100 or q != int(q):
        raise ValueError(f"percentile {q} is not a whole number in [0, 100]")
    ordered = sorted(float(v) for v in values)
    if len(ordered) == 1 or q == 0:
        return ordered[0]
    if q == 100:
        return ordered[-1]
    return statistics.quantiles(ordered, n=100, method="inclusive")[int(q) - 1]


def summarize(values: Sequence[float], *, scale: float = 1.0, digits: int = 3) -> dict[str, float | int]:
    """n, mean, p50, p95, min, max of `values` times `scale` (e.g. 1000 for seconds -> ms)."""
    if not values:
        return {"n": 0}
    scaled = [float(v) * scale for v in values]
    return {
        "n": len(scaled),
        "mean": round(sum(scaled) / len(scaled), digits),
        "p50": round(percentile(scaled, 50), digits),
        "p95": round(percentile(scaled, 95), digits),
        "min": round(min(scaled), digits),
        "max": round(max(scaled), digits),
    }


def ratio(numerator: float | None, denominator: float | None, digits: int = 3) -> float | None:
    """numerator / denominator, or None when either is missing or the denominator is not positive."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return round(float(numerator) / float(denominator), digits)


def positive_seconds(seconds: float) -> float:
    """A measured duration, at least one tick of the clock: work the clock could not see still took time."""
    return max(float(seconds), CLOCK_RESOLUTION_S)


def rate(count: float, seconds: float) -> float:
    """count / seconds (e.g. tokens/s) over a positive duration, so the figure is always finite; it is positive
    whenever something was counted."""
    if count < 0:
        raise ValueError(f"a negative count ({count}) has no rate: count what was measured")
    return float(count) / positive_seconds(seconds)


def raw_seconds(evaluated: int, generated: int, prompt_tps: float, gen_tps: float) -> float:
    """What raw llama.cpp needs for the same work: evaluated / prompt_tps + generated / gen_tps."""
    if prompt_tps <= 0 or gen_tps <= 0:
        raise ValueError("throughputs must be positive: measure the raw limit first")
    return evaluated / prompt_tps + generated / gen_tps


def overhead_ratio(seconds: float, evaluated: int, generated: int, prompt_tps: float, gen_tps: float) -> float | None:
    """Strategy latency / raw llama.cpp time for the same tokens (1.0 = no overhead at all)."""
    raw = raw_seconds(evaluated, generated, prompt_tps, gen_tps)
    return ratio(seconds, raw)


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """Run fn once; its result and wall-clock seconds."""
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def rss_bytes(pid: int | str = "self") -> int | None:
    """Resident set size of a process from /proc (VmRSS), None where /proc is unavailable."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def load_average() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def target(name: str, value: float | None, limit: float, *, higher_is_better: bool = False, unit: str = "") -> dict[str, Any]:
    """A target check: met, and by how much it was missed (value / limit, or limit / value)."""
    if value is None:
        return {"name": name, "value": None, "limit": limit, "met": None, "unit": unit}
    met = value >= limit if higher_is_better else value <= limit
    factor = ratio(limit, value) if higher_is_better else ratio(value, limit)
    return {"name": name, "value": round(float(value), 3), "limit": limit, "met": bool(met),
            "factor_of_limit": factor, "unit": unit}
