"""95% intervals for every reported figure: Wilson for proportions, bootstrap percentile for the rest.

A task's `aggregate` builds its figures with the constructors here instead of plain floats:

- `proportion(hits, n)`: a share of items (accuracy, exact match, JGA, no-call rate, parse-error rate), with
  the Wilson score interval;
- `mean(values)`: the mean of per-item scores (slot F1 per item, tokens per item); values that are all 0/1
  make it a proportion (Wilson), otherwise a bootstrap percentile interval of the mean;
- `micro(tp, n_pred, n_gold)`: micro precision / recall / F1 of summed per-item counts, bootstrapped over items;
- `macro_over_labels(counts)`: precision / recall / F1 per label, macro-averaged over the labels present
  (TAPS span F1), bootstrapped over items;
- `statistic(rows, fn)`: any other statistic of the items (a correlation), bootstrapped over rows.

Each returns a `Metric`: a float (it compares, formats and serialises as its value, so code reading the metrics
as numbers is unchanged) that also knows its sample size n and computes its interval on first request.
`collect(metrics)` flattens a metrics tree into `{path: {"value", "lo", "hi", "n", "method"}}` for metrics.json
and the report. Bootstraps draw `RESAMPLES` resamples of the items with a fixed seed, so a report is
reproducible; numpy (a dependency of prefcall) does the resampling.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from prefcall.evaluation.metrics.f1 import prf

Z95 = 1.959963984540054  # the standard normal's 97.5th percentile
RESAMPLES = 2000
SEED = 20240607
LEVEL = 0.95
_CHUNK = 250  # resamples drawn at a time (bounds memory at about _CHUNK x n counts)

T = TypeVar("T")
Interval = tuple[float, float]


class Metric(float):
    """A reported figure: its value (as a float), n, the interval method and the interval itself (lazily)."""

    n: int
    method: str

    def __new__(cls, value: float, *, n: int, method: str,
                compute: Callable[[], Interval | None] | None = None) -> Metric:
        obj = super().__new__(cls, value)
        obj.n = int(n)
        obj.method = method if n > 0 and compute is not None else "none"
        obj._compute = compute if n > 0 else None
        obj._interval = None
        obj._done = False
        return obj

    def interval(self) -> Interval | None:
        """(lo, hi) of the 95% interval, None when there is nothing to estimate from (n = 0)."""
        if not self._done:
            self._interval = self._compute() if self._compute is not None else None
            self._done = True
        return self._interval

    def as_dict(self, digits: int = 4) -> dict[str, Any]:
        ci = self.interval()
        lo, hi = (round(ci[0], digits), round(ci[1], digits)) if ci else (None, None)
        return {"value": round(float(self), digits), "lo": lo, "hi": hi, "n": self.n, "method": self.method}

    def text(self, digits: int = 4) -> str:
        """`value [lo, hi]`, the form report.md shows."""
        ci = self.interval()
        value = f"{float(self):.{digits}f}"
        return f"{value} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" if ci else value

    def __reduce__(self) -> tuple[Any, ...]:  # copies and pickles degrade to the plain value
        return (float, (float(self),))

    def __repr__(self) -> str:
        return float.__repr__(self)


# -- interval functions --------------------------------------------------------------------------------
def wilson(successes: float, n: int, z: float = Z95) -> Interval:
    """Wilson score interval of a binomial proportion successes / n (Newcombe 1998, method 3)."""
    if n <= 0:
        raise ValueError("a Wilson interval needs n > 0 items")
    if not 0 <= successes <= n:
        raise ValueError(f"successes {successes} outside [0, {n}]")
    p = successes / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def _percentiles(stats: np.ndarray, level: float = LEVEL) -> Interval | None:
    stats = stats[~np.isnan(stats)]
    if stats.size == 0:
        return None
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(stats, [tail, 100 - tail])
    return float(lo), float(hi)


def resampled_sums(columns: np.ndarray, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """Column sums of `resamples` bootstrap resamples of the rows of an n x k array: a resamples x k array.
    Each resample draws n rows with replacement."""
    columns = np.asarray(columns, dtype=float)
    if columns.ndim == 1:
        columns = columns[:, None]
    n = columns.shape[0]
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, resamples, _CHUNK):
        size = min(_CHUNK, resamples - start)
        picked = rng.integers(0, n, size=(size, n))
        out.append(columns[picked].sum(axis=1))
    return np.vstack(out)


def bootstrap_mean(values: Sequence[float], *, resamples: int = RESAMPLES, seed: int = SEED,
                   level: float = LEVEL) -> Interval:
    """Percentile bootstrap interval of the mean of `values`."""
    if not values:
        raise ValueError("a bootstrap interval needs at least one value")
    sums = resampled_sums(np.asarray(values, dtype=float), resamples, seed)[:, 0]
    interval = _percentiles(sums / len(values), level)
    assert interval is not None
    return interval


def bootstrap(rows: Sequence[T], fn: Callable[[list[T]], float | None], *, resamples: int = RESAMPLES,
              seed: int = SEED, level: float = LEVEL) -> Interval | None:
    """Percentile bootstrap interval of any statistic of the rows; resamples where fn is None are dropped."""
    if not rows:
        return None
    rng = np.random.default_rng(seed)
    stats = np.empty(resamples)
    for b in range(resamples):
        picked = rng.integers(0, len(rows), size=len(rows))
        value = fn([rows[i] for i in picked])
        stats[b] = np.nan if value is None else float(value)
    return _percentiles(stats, level)


def _prf(tp: np.ndarray, n_pred: np.ndarray, n_gold: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised `metrics.f1.prf` (same conventions: both empty -> 1, one empty -> 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(n_pred > 0, tp / np.where(n_pred > 0, n_pred, 1), 0.0)
        recall = np.where(n_gold > 0, tp / np.where(n_gold > 0, n_gold, 1), 0.0)
        total = precision + recall
        f1 = np.where(total > 0, 2 * precision * recall / np.where(total > 0, total, 1), 0.0)
    empty = (n_pred == 0) & (n_gold == 0)
    return np.where(empty, 1.0, precision), np.where(empty, 1.0, recall), np.where(empty, 1.0, f1)


# -- Metric constructors ---------------------------------------------------------------------------------
def proportion(hits: float, n: int) -> Metric:
    """hits / n with its Wilson interval (0.0 and no interval when n = 0)."""
    value = hits / n if n else 0.0
    return Metric(value, n=n, method="wilson", compute=lambda: wilson(hits, n))


def mean(values: Iterable[float], *, binary_is_proportion: bool = True) -> Metric:
    """Mean of per-item values: Wilson when every value is 0 or 1 (a per-item score that is a proportion), else a
    bootstrap of the mean. Pass binary_is_proportion=False for quantities (tokens, seconds) that are no scores."""
    values = [float(v) for v in values]
    n = len(values)
    if binary_is_proportion and n and all(v in (0.0, 1.0) for v in values):
        return proportion(sum(values), n)
    return Metric(sum(values) / n if n else 0.0, n=n, method="bootstrap", compute=lambda: bootstrap_mean(values))


def clustered_mean(values: Iterable[float], clusters: Iterable[Any]) -> Metric:
    """Mean of per-item values whose items come in clusters that are not independent (the turns of one
    dialogue): the interval resamples whole clusters (percentile bootstrap of the pooled mean)."""
    values = [float(v) for v in values]
    keys = list(clusters)
    if len(keys) != len(values):
        raise ValueError("clustered_mean needs one cluster per value")
    groups: dict[Any, list[float]] = {}
    for key, value in zip(keys, values):
        groups.setdefault(key, []).append(value)
    table = np.asarray([[sum(g), len(g)] for g in groups.values()], dtype=float)

    def compute() -> Interval | None:
        sums = resampled_sums(table)
        return _percentiles(sums[:, 0] / sums[:, 1])

    return Metric(sum(values) / len(values) if values else 0.0, n=len(values), method="bootstrap",
                  compute=compute)


def micro(counts: Sequence[tuple[float, float, float]]) -> tuple[Metric, Metric, Metric]:
    """Micro precision, recall, F1 of summed per-item (tp, n_pred, n_gold), each with a bootstrap interval."""
    rows = np.asarray(list(counts), dtype=float).reshape(-1, 3)
    n = rows.shape[0]
    totals = rows.sum(axis=0)
    values = prf(*(float(t) for t in totals))
    cache: dict[str, tuple[np.ndarray, ...]] = {}

    def compute(index: int) -> Callable[[], Interval | None]:
        def run() -> Interval | None:
            if "stats" not in cache:
                sums = resampled_sums(rows)
                cache["stats"] = _prf(sums[:, 0], sums[:, 1], sums[:, 2])
            return _percentiles(cache["stats"][index])
        return run

    return tuple(Metric(values[i], n=n, method="bootstrap", compute=compute(i)) for i in range(3))  # type: ignore[return-value]


def macro_over_labels(counts: Sequence[Mapping[str, tuple[float, float, float]]]) -> dict[str, Any]:
    """Per-item {label: (tp, n_pred, n_gold)} -> precision / recall / F1 macro over the labels seen in gold or
    prediction (`span_precision`, `span_recall`, `span_f1`), and per label (`per_label`: precision, recall,
    f1 as Metrics, support as int), all bootstrapped over items."""
    labels = sorted({label for row in counts for label in row})
    n = len(counts)
    matrix = np.zeros((n, 3 * len(labels)))
    for i, row in enumerate(counts):
        for j, label in enumerate(labels):
            matrix[i, 3 * j: 3 * j + 3] = row.get(label, (0.0, 0.0, 0.0))
    totals = matrix.sum(axis=0)
    cache: dict[str, Any] = {}

    def stats() -> dict[str, np.ndarray]:
        if "s" not in cache:
            sums = resampled_sums(matrix) if n else np.zeros((0, 3 * len(labels)))
            tp, n_pred, n_gold = sums[:, 0::3], sums[:, 1::3], sums[:, 2::3]
            p, r, f = _prf(tp, n_pred, n_gold)
            seen = (n_pred + n_gold) > 0  # a label absent from a resample does not count in its macro mean
            count = seen.sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                macro = [np.where(count > 0, (m * seen).sum(axis=1) / np.where(count > 0, count, 1), 1.0)
                         for m in (p, r, f)]
            cache["s"] = {"p": p, "r": r, "f": f, "macro": macro, "seen": seen}
        return cache["s"]

    def label_interval(j: int, which: str) -> Callable[[], Interval | None]:
        def run() -> Interval | None:
            s = stats()
            return _percentiles(np.where(s["seen"][:, j], s[which][:, j], np.nan))
        return run

    def macro_interval(index: int) -> Callable[[], Interval | None]:
        return lambda: _percentiles(stats()["macro"][index])

    per_label: dict[str, dict[str, Any]] = {}
    for j, label in enumerate(labels):
        tp, n_pred, n_gold = totals[3 * j: 3 * j + 3]
        p, r, f = prf(float(tp), float(n_pred), float(n_gold))
        per_label[label] = {
            "precision": Metric(p, n=n, method="bootstrap", compute=label_interval(j, "p")),
            "recall": Metric(r, n=n, method="bootstrap", compute=label_interval(j, "r")),
            "f1": Metric(f, n=n, method="bootstrap", compute=label_interval(j, "f")),
            "support": int(n_gold),
        }
    k = len(labels)
    macro_values = [sum(float(row[key]) for row in per_label.values()) / k if k else 1.0
                    for key in ("precision", "recall", "f1")]
    names = ("span_precision", "span_recall", "span_f1")
    out: dict[str, Any] = {name: Metric(v, n=n, method="bootstrap", compute=macro_interval(i))
                           for i, (name, v) in enumerate(zip(names, macro_values))}
    out["per_label"] = per_label
    return out


def statistic(rows: Sequence[T], fn: Callable[[list[T]], float | None]) -> Metric | None:
    """fn(rows) with a bootstrap interval over the rows; None when fn(rows) is undefined."""
    value = fn(list(rows))
    if value is None:
        return None
    return Metric(value, n=len(rows), method="bootstrap", compute=lambda: bootstrap(rows, fn))


# -- reporting ---------------------------------------------------------------------------------------------
def collect(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    """Every float figure of a (nested) metrics dict, keyed by its path ("by_type/override/exact_match"), as
    {"value", "lo", "hi", "n", "method"}; a float that is not a Metric has method "none" and no interval.
    Counts (ints) and labels (strings) are not estimates and are left out."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in metrics.items():
        path = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            out |= collect(value, path)
        elif isinstance(value, Metric):
            out[path] = value.as_dict()
        elif isinstance(value, float) and not isinstance(value, bool):
            out[path] = {"value": round(value, 4), "lo": None, "hi": None, "n": None, "method": "none"}
    return out
