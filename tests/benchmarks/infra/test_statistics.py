"""mean_std: the mean and *sample* std every table reports, against a naive float64 loop; and
welch_interval, the interval of a difference of two means, against loops and scipy's own test."""

from __future__ import annotations

import math
import random

import pytest

from benchmarks.infra.statistics import mean_std, welch_interval


def loop_mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample std (ddof 1) by plain loops in float64, sharing nothing with mean_std."""
    total = 0.0
    for v in values:
        total += v
    mean = total / len(values)
    squares = 0.0
    for v in values:
        squares += (v - mean) * (v - mean)
    return mean, math.sqrt(squares / (len(values) - 1))


@pytest.mark.parametrize("n", [2, 3, 5, 10, 50])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e6])
@pytest.mark.parametrize("offset", [0.0, -7.5, 1e3])
def test_matches_a_float64_loop(n: int, scale: float, offset: float) -> None:
    rng = random.Random(n * 1000 + int(scale * 7) + int(offset))
    values = [offset + scale * rng.gauss(0.0, 1.0) for _ in range(n)]
    mean, std = mean_std(values)
    want_mean, want_std = loop_mean_std(values)
    assert mean == pytest.approx(want_mean, rel=1e-12, abs=1e-12 * scale)
    assert std == pytest.approx(want_std, rel=1e-9)


def test_the_std_is_the_sample_std_not_the_population_std() -> None:
    # two values a, b: mean (a + b) / 2, sample std |a - b| / sqrt(2) (the population std is
    # |a - b| / 2)
    assert mean_std([1.0, 4.0]) == pytest.approx((2.5, 3.0 / math.sqrt(2.0)), rel=1e-15)
    assert mean_std([3.0, 3.0, 3.0]) == (3.0, 0.0)


def test_one_value_has_no_sample_std_unless_the_caller_names_one() -> None:
    assert mean_std([0.75]) == (0.75, None)
    assert mean_std([0.75], std_of_one=0.0) == (0.75, 0.0)


def test_nans_are_left_out_only_when_asked() -> None:
    values = [1.0, float("nan"), 2.0, 4.0]
    assert mean_std(values, omit_nan=True) == mean_std([1.0, 2.0, 4.0])
    kept = mean_std(values)
    assert math.isnan(kept[0]) and math.isnan(kept[1])
    assert mean_std([float("nan"), 5.0], omit_nan=True) == (5.0, None)


def test_nothing_to_average_is_nan() -> None:
    for got in (mean_std([]), mean_std([float("nan")] * 3, omit_nan=True)):
        assert math.isnan(got[0]) and math.isnan(got[1])


def test_an_infinite_value_makes_the_mean_infinite_and_the_std_undefined() -> None:
    mean, std = mean_std([1.0, math.inf, 2.0])
    assert mean == math.inf and math.isnan(std)
    mean, std = mean_std([math.inf, -math.inf])
    assert math.isnan(mean) and math.isnan(std)
    assert mean_std([math.inf], std_of_one=0.0) == (math.inf, 0.0)


def test_integers_and_generators_are_read_as_floats() -> None:
    assert mean_std(v for v in (1, 2, 3)) == (2.0, 1.0)
    assert mean_std([True, False]) == pytest.approx((0.5, math.sqrt(0.5)), rel=1e-15)


def loop_welch(a: list[float], b: list[float], quantile: float) -> tuple[float, float, float]:
    """Welch's interval (difference, low, high) by hand formulas over float64 loops, given the t
    quantile: the standard error from each side's sample variance, nothing shared with the
    code."""
    mean_a, std_a = loop_mean_std(a)
    mean_b, std_b = loop_mean_std(b)
    se = math.sqrt(std_a * std_a / len(a) + std_b * std_b / len(b))
    return mean_a - mean_b, mean_a - mean_b - quantile * se, mean_a - mean_b + quantile * se


@pytest.mark.parametrize("n_a, n_b", [(2, 2), (3, 3), (3, 5), (5, 2), (10, 10)])
@pytest.mark.parametrize("spread_b", [0.001, 0.02, 1.0])
def test_welch_interval_matches_scipys_welch_test(n_a: int, n_b: int, spread_b: float) -> None:
    from scipy import stats

    rng = random.Random(n_a * 100 + n_b + int(1000 * spread_b))
    a = [0.8 + 0.01 * rng.gauss(0.0, 1.0) for _ in range(n_a)]
    b = [0.78 + spread_b * rng.gauss(0.0, 1.0) for _ in range(n_b)]
    got = welch_interval(a, b)
    want = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert (got.low, got.high) == pytest.approx((want.low, want.high), rel=1e-9, abs=1e-12)
    difference, low, high = loop_welch(a, b, stats.t.ppf(0.975, got.degrees_of_freedom))
    assert (got.difference, got.low, got.high) == pytest.approx((difference, low, high),
                                                                rel=1e-9, abs=1e-12)
    # Welch-Satterthwaite lies between the smaller side's n - 1 and the pooled n_a + n_b - 2
    assert min(n_a, n_b) - 1 <= got.degrees_of_freedom <= n_a + n_b - 2


@pytest.mark.parametrize("n, quantile", [
    (2, math.tan(math.pi * (0.975 - 0.5))),  # t with 1 degree of freedom is Cauchy's
    (3, (2 * 0.975 - 1) / math.sqrt(2 * 0.975 * (1 - 0.975))),  # t with 2, in closed form
])
def test_a_side_without_spread_leaves_the_other_sides_n_minus_1(n: int, quantile: float) -> None:
    """A deterministic baseline (every seed the same number, std 0): Welch's degrees of freedom
    are the other side's n - 1, and the interval is its mean's t interval shifted."""
    a = [0.70, 0.74, 0.71][:n]
    got = welch_interval(a, [0.5] * 4)
    assert got.degrees_of_freedom == pytest.approx(n - 1, rel=1e-12)
    assert not got.exact
    assert (got.difference, got.low, got.high) == pytest.approx(
        loop_welch(a, [0.5] * 4, quantile), rel=1e-12)
    flipped = welch_interval([0.5] * 4, a)  # the order only flips the sign
    assert (flipped.low, flipped.high) == pytest.approx((-got.high, -got.low), rel=1e-12)


def test_no_spread_on_either_side_is_an_exact_difference() -> None:
    got = welch_interval([0.9, 0.9, 0.9], [0.5, 0.5])
    assert got.exact and math.isnan(got.degrees_of_freedom)
    assert got.low == got.difference == got.high == pytest.approx(0.4, rel=1e-15)


def test_the_confidence_widens_the_interval() -> None:
    a, b = [0.80, 0.83, 0.81], [0.78, 0.79, 0.80]
    narrow, wide = welch_interval(a, b, 0.90), welch_interval(a, b, 0.99)
    assert wide.low < narrow.low < narrow.difference < narrow.high < wide.high


@pytest.mark.parametrize("a, b, message", [
    ([0.5], [0.4, 0.5], "two values a side, got 1 and 2"),
    ([0.5, 0.6], [], "two values a side, got 2 and 0"),
    ([0.5, math.nan], [0.4, 0.5], "finite values only"),
])
def test_welch_interval_refuses_what_has_no_interval(a, b, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        welch_interval(a, b)
