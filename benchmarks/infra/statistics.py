"""The mean and sample standard deviation every table of the project reports, computed once.

The leaderboards, the paper experiments' tables and the speed benchmarks all say "mean ± std";
one function says what that std is (the *sample* std, ddof 1) so that no two tables can disagree
on it. Whether two rows differ beyond that spread is Welch's t interval of their difference
(:func:`welch_interval`), computed here once too, and one function writes "mean ± std" as text
(:func:`format_mean_std`); how many digits each table shows stays with the table.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def mean_std(values: Iterable[float], *, omit_nan: bool = False,
             std_of_one: float | None = None) -> tuple[float, float | None]:
    r"""The mean and the *sample* standard deviation of ``values``:

    .. math::

        \bar x = \frac{1}{n} \sum_i x_i, \qquad
        s = \sqrt{\frac{1}{n - 1} \sum_i (x_i - \bar x)^2}

    (correctly rounded: :func:`statistics.fmean` and :func:`statistics.stdev`). One value has
    no sample std: ``std_of_one`` stands for it (None, unless a table wants 0.0 there).
    ``omit_nan`` leaves NaNs out (a seed whose statistic is undefined); with no value left,
    both are NaN. An infinite value makes the mean infinite and the std NaN.

    >>> mean_std([1.0, 2.0, 3.0])
    (2.0, 1.0)
    >>> mean_std([4.0])
    (4.0, None)
    >>> mean_std([4.0, float("nan")], omit_nan=True, std_of_one=0.0)
    (4.0, 0.0)
    """
    data = [float(v) for v in values]
    if omit_nan:
        data = [v for v in data if not math.isnan(v)]
    if not data:
        return math.nan, math.nan
    if not all(math.isfinite(v) for v in data):
        # statistics' exact sums take no infinity; the float sum says inf, or NaN for inf - inf
        return sum(data) / len(data), (math.nan if len(data) > 1 else std_of_one)
    return statistics.fmean(data), (statistics.stdev(data) if len(data) > 1 else std_of_one)


def format_mean_std(mean: float, std: float | None, spec: str = ".2f",
                    std_spec: str | None = None) -> str:
    """``mean ± std`` as every table and sentence of the project writes it: the mean in the
    format ``spec``, the std in ``std_spec`` (``spec`` when not given); the mean alone where
    there is no std (one seed, :func:`mean_std`'s None).

    >>> format_mean_std(92.004, 1.411)
    '92.00 ± 1.41'
    >>> format_mean_std(0.75, None)
    '0.75'
    >>> format_mean_std(1234.5, 6.78, ".4g", ".2g")
    '1234 ± 6.8'
    """
    text = f"{mean:{spec}}"
    return text if std is None else f"{text} ± {std:{std_spec or spec}}"


@dataclass(frozen=True)
class DifferenceInterval:
    """The difference of two means and its confidence interval (:func:`welch_interval`).

    ``degrees_of_freedom`` is NaN, and ``low == difference == high``, when neither side has any
    spread (every value of each side the same): the difference is then exact."""

    difference: float
    low: float
    high: float
    degrees_of_freedom: float
    confidence: float

    @property
    def exact(self) -> bool:
        """Neither side varies: the interval is the difference itself."""
        return math.isnan(self.degrees_of_freedom)


def welch_interval(a: Sequence[float], b: Sequence[float],
                   confidence: float = 0.95) -> DifferenceInterval:
    r"""Welch's t interval for the difference of the means of ``a`` and ``b`` (two independent
    samples, their variances not assumed equal), from their means and *sample* variances
    (:func:`mean_std`):

    .. math::

        \bar a - \bar b \pm t_{(1 + c)/2,\,\nu}\, \sqrt{\frac{s_a^2}{n_a} + \frac{s_b^2}{n_b}},
        \qquad
        \nu = \frac{(s_a^2 / n_a + s_b^2 / n_b)^2}
                   {\frac{(s_a^2 / n_a)^2}{n_a - 1} + \frac{(s_b^2 / n_b)^2}{n_b - 1}}

    (Welch-Satterthwaite degrees of freedom; ``t`` the Student quantile of
    :data:`scipy.stats.t`). One side without spread (a deterministic baseline: every seed the same
    number) leaves ``nu = n - 1`` of the other; with neither varying the difference is exact.

    >>> welch_interval([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])  # doctest: +ELLIPSIS
    DifferenceInterval(difference=2.0, low=-0.484..., high=4.484..., degrees_of_freedom=2.0, ...)
    >>> welch_interval([2.0, 2.0], [1.0, 1.0]).exact
    True

    Raises:
        ValueError: a side with fewer than two values (it has no sample variance), a value that
            is not finite, or a confidence outside (0, 1).
    """
    a, b = [float(v) for v in a], [float(v) for v in b]
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's interval needs two values a side, got {len(a)} and {len(b)}")
    if not all(math.isfinite(v) for v in (*a, *b)):
        raise ValueError("Welch's interval takes finite values only")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    (mean_a, std_a), (mean_b, std_b) = mean_std(a), mean_std(b)
    share_a, share_b = std_a**2 / len(a), std_b**2 / len(b)  # each mean's variance
    difference = mean_a - mean_b
    if share_a + share_b == 0:
        return DifferenceInterval(difference, difference, difference, math.nan, confidence)
    from scipy.stats import t as student_t

    nu = (share_a + share_b) ** 2 / (share_a**2 / (len(a) - 1) + share_b**2 / (len(b) - 1))
    half = float(student_t.ppf((1 + confidence) / 2, nu)) * math.sqrt(share_a + share_b)
    return DifferenceInterval(difference, difference - half, difference + half, nu, confidence)
