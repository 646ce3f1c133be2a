"""mean_std: the mean and *sample* std every table reports, against a naive float64 loop."""

from __future__ import annotations

import math
import random

import pytest

from benchmarks.infra.statistics import mean_std


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
