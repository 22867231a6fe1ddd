"""metrics.base / performance / correctness against hand-computed and independent values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from suite.metrics import (
    BANDWIDTH,
    FLOP_RATE,
    PERCENT_OF_PEAK,
    REGISTRY,
    THROUGHPUT,
    TIME,
    TOLERANCES,
    Check,
    Metric,
    Summary,
    compare,
    median_ci,
    median_ci_rel_width,
    percent_of_peak,
    rates,
    relative_errors,
    summarise,
    tolerance_for,
)

# -- summarise ---------------------------------------------------------------------------------


def _linear_percentile(sorted_x: list[float], q: float) -> float:
    """NumPy's default ('linear') percentile, written out: rank h = (n-1) q / 100."""
    h = (len(sorted_x) - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(sorted_x) - 1)
    return sorted_x[lo] + (h - lo) * (sorted_x[hi] - sorted_x[lo])


def test_summarise_five_samples_by_hand() -> None:
    s = summarise([4.0, 1.0, 10.0, 3.0, 2.0])  # order must not matter
    assert s.n == 5
    assert s.median == 3.0
    assert s.mean == 4.0
    assert s.min == 1.0
    assert s.max == 10.0
    # linear interpolation on sorted [1, 2, 3, 4, 10]: p5 at rank 0.2, p95 at rank 3.8
    assert s.p5 == pytest.approx(1.2, abs=1e-12)
    assert s.p95 == pytest.approx(8.8, abs=1e-12)
    assert s.p99 == pytest.approx(9.76, abs=1e-12)  # rank 3.96
    # q1 at rank 1 (2.0), q3 at rank 3 (4.0)
    assert s.iqr == pytest.approx(2.0, abs=1e-12)
    # n < 6: the CI of the median is the full range
    assert s.ci95 == (1.0, 10.0)


def test_summarise_one_to_ten_by_hand() -> None:
    x = [7.0, 3.0, 10.0, 1.0, 5.0, 9.0, 2.0, 8.0, 4.0, 6.0]
    s = summarise(x)
    assert s.n == 10
    assert s.median == 5.5
    assert s.mean == 5.5
    assert (s.min, s.max) == (1.0, 10.0)
    assert s.p5 == pytest.approx(1.45, abs=1e-12)  # rank 0.45
    assert s.p95 == pytest.approx(9.55, abs=1e-12)  # rank 8.55
    assert s.iqr == pytest.approx(7.75 - 3.25, abs=1e-12)  # ranks 6.75 and 2.25
    # n = 10: 0-based ranks 1 and 8 of the sorted sample
    assert s.ci95 == (2.0, 9.0)


def test_summarise_matches_written_out_interpolation_on_random_data() -> None:
    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 7, 20, 101):
        x = rng.lognormal(size=n)
        s = summarise(x)
        xs = sorted(float(v) for v in x)
        assert s.n == n
        assert s.median == pytest.approx(_linear_percentile(xs, 50), rel=1e-12)
        assert s.p5 == pytest.approx(_linear_percentile(xs, 5), rel=1e-12)
        assert s.p95 == pytest.approx(_linear_percentile(xs, 95), rel=1e-12)
        iqr = _linear_percentile(xs, 75) - _linear_percentile(xs, 25)
        assert s.iqr == pytest.approx(iqr, rel=1e-12, abs=1e-15)
        assert s.mean == pytest.approx(math.fsum(xs) / n, rel=1e-12)
        assert (s.min, s.max) == (xs[0], xs[-1])
        assert s.min <= s.p5 <= s.median <= s.p95 <= s.max


def test_summarise_single_sample() -> None:
    s = summarise([2.5])
    assert (s.median, s.mean, s.min, s.max, s.p5, s.p95, s.iqr, s.n) == (
        2.5,
        2.5,
        2.5,
        2.5,
        2.5,
        2.5,
        0.0,
        1,
    )
    assert s.ci95 == (2.5, 2.5)


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [1.0, float("inf")], [-math.inf, 2.0]])
def test_summarise_rejects_empty_and_nonfinite(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        summarise(bad)


def test_summary_fields_are_python_types() -> None:
    d = summarise(np.array([1.0, 2.0, 3.0], dtype=np.float32)).to_dict()
    assert set(d) == {"median", "mean", "min", "max", "p5", "p95", "p99", "iqr", "n", "ci95"}
    for key in ("median", "mean", "min", "max", "p5", "p95", "p99", "iqr"):
        assert type(d[key]) is float, key
    assert type(d["n"]) is int
    assert isinstance(d["ci95"], list) and all(type(v) is float for v in d["ci95"])


def test_ci_rel_width() -> None:
    s = Summary(
        median=2.0, mean=2.0, min=1.0, max=3.0, p5=1, p95=3, p99=3, iqr=1, n=10, ci95=(1.5, 2.5)
    )
    assert s.ci_rel_width == pytest.approx(0.5)
    zero = Summary(
        median=0.0, mean=0.0, min=0.0, max=0.0, p5=0, p95=0, p99=0, iqr=0, n=3, ci95=(0.0, 0.0)
    )
    assert zero.ci_rel_width == math.inf


# -- median_ci ---------------------------------------------------------------------------------


def _expected_rank(n: int, confidence: float = 0.95) -> int:
    """Largest 0-based j <= (n-1)/2 with exact coverage 1 - 2 P(B <= j) >= confidence, else 0."""
    best = 0
    for j in range((n + 1) // 2):
        if 1.0 - 2.0 * binom.cdf(j, n, 0.5) >= confidence:
            best = j
    return best


@pytest.mark.parametrize("n", [*range(1, 61), 99, 100, 101, 1000])
def test_median_ci_ranks_match_exact_binomial_coverage(n: int) -> None:
    # Distinct sorted values equal to their own 0-based rank: the interval *is* the ranks.
    x = np.arange(n, dtype=np.float64)
    rng = np.random.default_rng(n)
    lo, hi = median_ci(rng.permutation(x))
    j = _expected_rank(n)
    assert (lo, hi) == (float(j), float(n - 1 - j))
    if n >= 6:
        # the chosen interval covers >= 95% and the next narrower one does not
        assert 1.0 - 2.0 * binom.cdf(j, n, 0.5) >= 0.95
        assert 1.0 - 2.0 * binom.cdf(j + 1, n, 0.5) < 0.95


@pytest.mark.parametrize(("n", "lo", "hi"), [(10, 1, 8), (20, 5, 14), (100, 39, 60)])
def test_median_ci_known_table_values(n: int, lo: int, hi: int) -> None:
    x = np.arange(n, dtype=np.float64) * 10.0
    assert median_ci(x) == (lo * 10.0, hi * 10.0)


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_median_ci_too_few_samples_is_full_range(n: int) -> None:
    x = [5.0, -1.0, 3.0, 8.0, 2.0][:n]
    assert median_ci(x) == (min(x), max(x))


def test_median_ci_six_samples_is_first_with_95_percent() -> None:
    # 1 - 2 / 64 = 0.96875 >= 0.95, with j = 0 still (full range) but now justified
    assert median_ci([6.0, 1.0, 2.0, 3.0, 4.0, 5.0]) == (1.0, 6.0)
    # n = 8: j = 1 has coverage 1 - 2 * 9/256 = 0.9297 < 0.95, so still the full range
    assert median_ci(np.arange(8.0)) == (0.0, 7.0)
    # n = 9: j = 1 has coverage 1 - 2 * 10/512 = 0.9609
    assert median_ci(np.arange(9.0)) == (1.0, 7.0)


@pytest.mark.parametrize("n", [*range(1, 41), 99, 100, 401, 1000])
def test_median_ci_rel_width_is_summarise_s_exactly(n: int) -> None:
    # measure() checks its stopping rule with the cheap function; the record is summarise's:
    # the two must agree to the bit, or the stop reason and the record's CI could disagree
    rng = np.random.default_rng(n)
    for x in (rng.lognormal(0.0, 0.5, n), np.round(rng.random(n), 1), np.zeros(n)):
        assert median_ci_rel_width(list(x)) == summarise(list(x)).ci_rel_width
    with pytest.raises(ValueError):
        median_ci_rel_width([])


def test_median_ci_single_and_empty() -> None:
    assert median_ci([4.0]) == (4.0, 4.0)
    with pytest.raises(ValueError):
        median_ci([])


def test_median_ci_other_confidence() -> None:
    n = 50
    for conf in (0.5, 0.9, 0.99):
        j = _expected_rank(n, conf)
        assert median_ci(np.arange(float(n)), confidence=conf) == (float(j), float(n - 1 - j))


def test_median_ci_empirical_coverage() -> None:
    rng = np.random.default_rng(2024)
    trials, n = 2000, 30
    x = rng.standard_normal((trials, n))  # true median 0
    hits = 0
    for row in x:
        lo, hi = median_ci(row)
        hits += lo <= 0.0 <= hi
    coverage = hits / trials
    # exact coverage for n = 30 is 1 - 2 P(B <= 9) = 0.957
    assert 0.94 <= coverage <= 0.99, coverage


# -- Metric ------------------------------------------------------------------------------------


def test_metric_entry_with_samples() -> None:
    m = Metric("time", "s", higher_is_better=False)
    e = m.entry([3.0, 1.0, 2.0, 5.0, 4.0])
    assert e["name"] == "time" and e["unit"] == "s" and e["higher_is_better"] is False
    assert e["value"] == e["median"] == 3.0
    assert e["n"] == 5
    assert e["ci95"] == [1.0, 5.0]
    assert set(e) == {
        "name",
        "unit",
        "higher_is_better",
        "value",
        "median",
        "mean",
        "min",
        "max",
        "p5",
        "p95",
        "p99",
        "iqr",
        "n",
        "ci95",
    }


def test_metric_entry_with_value() -> None:
    e = PERCENT_OF_PEAK.entry(value=np.float64(42.5))
    assert e == {"name": "percent_of_peak", "unit": "%", "higher_is_better": True, "value": 42.5}
    assert type(e["value"]) is float


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_metric_entry_rejects_nonfinite_value(bad: float) -> None:
    with pytest.raises(ValueError, match="not finite"):
        TIME.entry(value=bad)


def test_metric_entry_rejects_nonfinite_samples_and_nothing() -> None:
    with pytest.raises(ValueError):
        TIME.entry([1.0, math.nan])
    with pytest.raises(ValueError):
        TIME.entry()


def test_metric_registry_directions() -> None:
    assert REGISTRY["time"] is TIME and TIME.higher_is_better is False
    for m in (THROUGHPUT, FLOP_RATE, PERCENT_OF_PEAK, BANDWIDTH):
        assert REGISTRY[m.name] is m and m.higher_is_better is True
    assert (FLOP_RATE.unit, BANDWIDTH.unit, TIME.unit) == ("TFLOP/s", "GB/s", "s")


# -- performance -------------------------------------------------------------------------------


def test_rates() -> None:
    r = rates([0.5, 2.0, 4.0], work=10.0)
    assert r == pytest.approx([20.0, 5.0, 2.5])
    r12 = rates([1e-3], work=2e12, scale=1e12)
    assert r12 == pytest.approx([2000.0])


def test_rates_median_is_work_over_median_time() -> None:
    t = [0.3, 0.1, 0.2, 0.5, 0.4]
    r = rates(t, work=6.0)
    assert summarise(r).median == pytest.approx(6.0 / summarise(t).median)


@pytest.mark.parametrize("bad", [[1.0, 0.0], [-1.0], [0.5, -0.1]])
def test_rates_rejects_nonpositive_times(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        rates(bad, work=1.0)


def test_percent_of_peak() -> None:
    assert percent_of_peak(50.0, 200.0) == pytest.approx(25.0)
    assert percent_of_peak(989.4, 989.4) == pytest.approx(100.0)
    with pytest.raises(ValueError):
        percent_of_peak(1.0, 0.0)
    with pytest.raises(ValueError):
        percent_of_peak(1.0, -5.0)


# -- correctness -------------------------------------------------------------------------------


def test_relative_errors_constructed() -> None:
    ref = np.array([1.0, -4.0, 2.0])
    out = np.array([1.5, -4.0, 2.0])
    e = relative_errors(out, ref)
    assert e["max_rel"] == pytest.approx(0.5 / 4.0)
    assert e["l2_rel"] == pytest.approx(0.5 / math.sqrt(1 + 16 + 4))
    assert e["nonfinite"] == 0


def test_relative_errors_is_normwise_not_elementwise() -> None:
    # An element near zero with a small absolute error does not blow the error up.
    ref = np.array([[1e-12, 10.0], [3.0, -2.0]])
    out = ref + np.array([[1e-6, 0.0], [0.0, 0.0]])
    e = relative_errors(out, ref)
    assert e["max_rel"] == pytest.approx(1e-7)
    assert e["l2_rel"] == pytest.approx(1e-6 / np.linalg.norm(ref))


def test_relative_errors_random_against_formula() -> None:
    rng = np.random.default_rng(7)
    ref = rng.standard_normal((5, 6))
    out = ref + 1e-3 * rng.standard_normal((5, 6))
    e = relative_errors(out.astype(np.float32), ref)
    o = out.astype(np.float32).astype(np.float64)
    assert e["max_rel"] == pytest.approx(np.max(np.abs(o - ref)) / np.max(np.abs(ref)))
    assert e["l2_rel"] == pytest.approx(
        math.sqrt(float(np.sum((o - ref) ** 2))) / math.sqrt(float(np.sum(ref**2)))
    )


def test_relative_errors_exact_and_zero_reference() -> None:
    ref = np.arange(1.0, 7.0).reshape(2, 3)
    assert relative_errors(ref.copy(), ref)["max_rel"] == 0.0
    zeros = np.zeros(3)
    e = relative_errors(np.array([0.0, 0.25, 0.0]), zeros)
    assert e["max_rel"] == 0.25 and e["l2_rel"] == 0.25  # absolute errors when ref is 0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_relative_errors_nonfinite_output_is_inf(bad: float) -> None:
    ref = np.ones(4)
    out = np.array([1.0, bad, 1.0, bad])
    e = relative_errors(out, ref)
    assert e["max_rel"] == math.inf and e["l2_rel"] == math.inf
    assert e["nonfinite"] == 2


def test_relative_errors_shape_mismatch() -> None:
    with pytest.raises(ValueError, match="shape"):
        relative_errors(np.ones((2, 3)), np.ones((3, 2)))


def test_check_nonfinite_never_passes_and_records_null() -> None:
    checks = compare("y", np.array([1.0, math.nan]), np.array([1.0, 2.0]), tolerance_for("fp32"))
    assert [c.name for c in checks] == ["y.max_rel_error_vs_fp64", "y.l2_rel_error_vs_fp64"]
    for c in checks:
        assert c.error == math.inf
        assert c.passed is False
        d = c.to_dict()
        assert d["error"] is None
        assert d["passed"] is False
        assert type(d["tolerance"]) is float


def test_check_pass_fail_boundary() -> None:
    assert Check("a", 1e-5, 1e-5).passed is True
    assert Check("a", 1.0000001e-5, 1e-5).passed is False
    assert Check("a", 0.0, 0.0).passed is True
    assert Check("a", math.nan, 1.0).passed is False


def test_check_to_dict_has_plain_python_types() -> None:
    c = Check("x", np.float32(1e-6), np.float64(1e-4))  # type: ignore[arg-type]
    d = c.to_dict()
    assert d == {"name": "x", "error": pytest.approx(1e-6), "tolerance": 1e-4, "passed": True}
    assert type(d["error"]) is float
    assert type(d["tolerance"]) is float
    assert type(d["passed"]) is bool
    failing = Check("x", np.float64(2.0), np.float32(1.0)).to_dict()  # type: ignore[arg-type]
    assert type(failing["error"]) is float and type(failing["passed"]) is bool
    assert failing["passed"] is False


def test_compare_passes_within_and_fails_outside_tolerance() -> None:
    rng = np.random.default_rng(1)
    ref = rng.standard_normal(100)
    tol = tolerance_for("fp32")
    good = compare("y", ref.astype(np.float32), ref, tol)
    assert all(c.passed for c in good)
    bad = compare("y", ref * (1 + 1e-3), ref, tol)
    assert not any(c.passed for c in bad)
    assert all(type(c.to_dict()["error"]) is float for c in good + bad)


def test_tolerance_for() -> None:
    assert tolerance_for("fp32") == TOLERANCES["fp32"]
    scaled = tolerance_for("bf16", 4.0)
    assert scaled.max_rel == pytest.approx(4 * TOLERANCES["bf16"].max_rel)
    assert scaled.l2_rel == pytest.approx(4 * TOLERANCES["bf16"].l2_rel)
    with pytest.raises(ValueError, match="fp8"):
        tolerance_for("fp8")


def test_tolerance_grows_with_the_reduction_length() -> None:
    # short sums keep the fixed bound; a conv2d weight gradient at batch 32 on 56x56 sums
    # 100352 terms: 2 sqrt(K) u = 3.8e-5 (cuDNN's fp32 result on an H100 was 1.6e-5 off)
    assert tolerance_for("fp32", reduction_length=4096) == TOLERANCES["fp32"]
    long = tolerance_for("fp32", reduction_length=100_352)
    assert long.l2_rel == pytest.approx(2 * math.sqrt(100_352) * 2.0**-24)
    assert long.max_rel == pytest.approx(10 * long.l2_rel)
    assert tolerance_for("bf16", reduction_length=100_352) == TOLERANCES["bf16"]
    # a real fp32 sum of that length, accumulated in order, lands inside the new bound
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((16, 100_352)).astype(np.float32) for _ in range(2))
    got = np.add.accumulate(a * b, axis=1, dtype=np.float32)[:, -1]
    ref = (a.astype(np.float64) * b.astype(np.float64)).sum(axis=1)
    err = relative_errors(got, ref)["l2_rel"]
    assert 0 < err < long.l2_rel


def test_tolerances_loosen_with_lower_precision() -> None:
    order = ["fp64", "fp32", "fp16", "bf16"]
    for a, b in zip(order, order[1:], strict=False):
        assert TOLERANCES[a].max_rel < TOLERANCES[b].max_rel
        assert TOLERANCES[a].l2_rel < TOLERANCES[b].l2_rel
    for t in TOLERANCES.values():
        assert t.l2_rel <= t.max_rel
