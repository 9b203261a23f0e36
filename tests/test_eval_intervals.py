"""95% intervals: Wilson against published values, bootstraps against what they must give, Metric as a float."""

from __future__ import annotations

import copy
import json
import math
import random

import pytest

from prefcall.evaluation.metrics.f1 import micro_prf
from prefcall.evaluation.metrics.intervals import (
    Metric,
    bootstrap,
    bootstrap_mean,
    collect,
    macro_over_labels,
    mean,
    micro,
    proportion,
    statistic,
    wilson,
)


@pytest.mark.parametrize(("hits", "n", "lo", "hi"), [
    # Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I, method 3 (score)
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718),
    # symmetric and boundary cases
    (5, 10, 0.2366, 0.7634),
    (10, 10, 0.7225, 1.0),
    (1, 2, 0.0945, 0.9055),
])
def test_wilson_known_values(hits: int, n: int, lo: float, hi: float):
    got = wilson(hits, n)
    assert got[0] == pytest.approx(lo, abs=5e-5) and got[1] == pytest.approx(hi, abs=5e-5)


def test_wilson_rejects_no_items_and_impossible_counts():
    with pytest.raises(ValueError):
        wilson(0, 0)
    with pytest.raises(ValueError):
        wilson(3, 2)


def test_bootstrap_mean_of_a_constant_is_the_constant_and_is_reproducible():
    assert bootstrap_mean([0.4] * 30) == pytest.approx((0.4, 0.4))
    values = [random.Random(3).random() for _ in range(50)]
    assert bootstrap_mean(values) == bootstrap_mean(values)  # fixed seed


def test_bootstrap_mean_matches_the_normal_interval_for_a_large_sample():
    rng = random.Random(7)
    values = [rng.random() for _ in range(1000)]
    mu = sum(values) / len(values)
    sd = math.sqrt(sum((v - mu) ** 2 for v in values) / (len(values) - 1))
    lo, hi = bootstrap_mean(values)
    assert lo == pytest.approx(mu - 1.96 * sd / math.sqrt(1000), abs=0.004)
    assert hi == pytest.approx(mu + 1.96 * sd / math.sqrt(1000), abs=0.004)
    assert lo < mu < hi


def test_mean_of_zero_one_values_is_a_wilson_proportion():
    m = mean([1, 0, 1, 1])
    assert m == 0.75 and m.method == "wilson" and m.n == 4
    assert m.interval() == pytest.approx(wilson(3, 4))
    counts = mean([0, 1, 0], binary_is_proportion=False)  # e.g. tokens: a quantity, not a share
    assert counts.method == "bootstrap"
    f = mean([0.5, 1.0, 0.0])
    assert f.method == "bootstrap" and f.interval()[0] <= 0.5 <= f.interval()[1]


def test_micro_values_equal_micro_prf_and_intervals_contain_them():
    rows = [(1, 2, 2), (0, 1, 1), (2, 2, 3), (1, 1, 1)] * 10
    p, r, f = micro(rows)
    assert (p, r, f) == pytest.approx(micro_prf(rows))
    for m in (p, r, f):
        lo, hi = m.interval()
        assert lo <= m <= hi and m.n == 40


def test_macro_over_labels_gives_taps_span_f1_and_per_label_rows():
    # label A: one hit per item; label B: predicted in half the items, never gold
    rows = [{"A": (1, 1, 1), "B": (0, 1, 0)}, {"A": (1, 1, 1)}] * 5
    out = macro_over_labels(rows)
    assert out["per_label"]["A"]["f1"] == 1.0 and out["per_label"]["B"]["f1"] == 0.0
    assert out["per_label"]["A"]["support"] == 10
    assert out["span_f1"] == pytest.approx(0.5) and out["span_f1"].interval() == pytest.approx((0.5, 0.5))


def test_statistic_bootstraps_any_function():
    rows = list(range(20))
    m = statistic(rows, lambda xs: max(xs))
    assert m == 19 and m.interval()[1] == 19
    assert statistic([], lambda xs: None) is None
    assert bootstrap([1.0, 2.0], lambda xs: None) is None  # undefined in every resample


def test_metric_behaves_as_its_value():
    m = proportion(3, 4)
    assert m == 0.75 and m + 0.25 == 1.0 and f"{m:.2f}" == "0.75" and json.dumps({"m": m}) == '{"m": 0.75}'
    assert type(copy.deepcopy(m)) is float and repr(m) == "0.75"
    assert m.text() == "0.7500 [0.3006, 0.9544]"
    empty = proportion(0, 0)
    assert empty == 0.0 and empty.interval() is None and empty.method == "none"


def test_collect_flattens_every_figure_with_its_interval():
    metrics = {"n": 4, "acc": proportion(3, 4), "by": {"x": {"n": 2, "acc": proportion(1, 2)}}, "raw": 0.5,
               "label": "oracle"}
    out = collect(metrics)
    assert set(out) == {"acc", "by/x/acc", "raw"}
    assert out["acc"] == {"value": 0.75, "lo": 0.3006, "hi": 0.9544, "n": 4, "method": "wilson"}
    assert out["raw"]["method"] == "none" and out["raw"]["lo"] is None
    assert isinstance(Metric(0.5, n=1, method="wilson", compute=lambda: (0.0, 1.0)), float)
